"""Layering: the runtime reads plans; it never imports the compiler or Lark."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = sorted((ROOT / "runtime").rglob("*.py"))
FORBIDDEN = ("rulec", "lark")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: str(p.relative_to(ROOT)))
def test_runtime_module_does_not_import_the_compiler(path: Path) -> None:
    bad = {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN}
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_the_runtime_loads_neither_rulec_nor_lark() -> None:
    modules = [f"runtime.{p.stem}" for p in RUNTIME if p.parent.name == "runtime"
               and p.stem != "__init__"]
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"  # e.g. a config module that needs its environment
        "        pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{FORBIDDEN!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_compiler_and_plan_share_one_span_type_without_loading_the_plan() -> None:
    script = (
        "import sys, rulec.source\n"
        "print('runtime.plan' in sys.modules)\n"
        "import runtime.plan\n"
        "print(rulec.source.Span is runtime.plan.Span)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
