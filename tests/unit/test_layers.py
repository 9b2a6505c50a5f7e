"""Layering: the runtime reads plans and never imports the compiler or Lark; its pure core imports
no shell (the webhook's or the controller's) and no I/O framework; and it type-checks."""
from __future__ import annotations

import ast
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = sorted((ROOT / "runtime").rglob("*.py"))
SHELLS = ("runtime.webhook", "runtime.controller")
FORBIDDEN = ("rulec", "lark")
# What a pure module may not import: the shells, and the libraries that do I/O for them.
IMPURE = (*SHELLS, "flask", "werkzeug", "gunicorn", "kubernetes", "urllib3", "prometheus_client")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of what `path` imports; `from a import b` also names `a.b` (b may be a
    module); relative imports are resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module(path).split(".")[:None if path.name == "__init__.py" else -1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


PURE = [p for p in RUNTIME if not _under(_module(p), SHELLS)]


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: str(p.relative_to(ROOT)))
def test_runtime_module_does_not_import_the_compiler(path: Path) -> None:
    bad = {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_shell(path: Path) -> None:
    bad = {n for n in _imports(path) if _under(n, IMPURE)}
    assert not bad, f"{_module(path)} is pure but imports {sorted(bad)}"


def test_the_pure_core_is_most_of_the_runtime() -> None:
    assert {_module(p) for p in PURE} >= {
        "runtime.plan", "runtime.pods", "runtime.conditions", "runtime.evaluator",
        "runtime.state", "runtime.templates", "runtime.functions", "runtime.mutator.view",
        "runtime.mutator.draft", "runtime.mutator.steps", "runtime.mutator.inject",
        "runtime.patch", "runtime.admission", "runtime.registration", "runtime.vocabulary",
        "runtime.reloading", "runtime.evaluation.outcomes", "runtime.evaluation.ledger", "runtime.evaluation.occurrences",
        "runtime.evaluation.policies", "runtime.evaluation.decisions", "runtime.evaluation.budgets", "runtime.evaluation.verdicts"}


def test_mutator_layers_import_only_downwards() -> None:
    order = ["view", "draft", "steps", "inject"]
    for i, layer in enumerate(order):
        above = tuple(f"runtime.mutator.{name}" for name in order[i + 1:])
        imported = _imports(ROOT / "runtime" / "mutator" / f"{layer}.py")
        assert not {n for n in imported if _under(n, above)}, layer


def test_relative_imports_are_resolved() -> None:
    assert "runtime.workqueue.Unfinished" in _imports(ROOT / "runtime" / "controller" / "metrics.py")
    assert _module(ROOT / "runtime" / "controller" / "__init__.py") == "runtime.controller"


def _loaded_by_importing(paths: list[Path], roots: tuple[str, ...]) -> list[str]:
    """What of `roots` is in sys.modules after importing `paths` in a fresh interpreter."""
    modules = [_module(p) for p in paths if p.name != "__main__.py"]   # those run a process
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"  # e.g. a config module that needs its environment
        "        pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if any(m == r or m.startswith(r + '.') "
        f"for r in {roots!r}))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_runtime_loads_neither_rulec_nor_lark() -> None:
    assert _loaded_by_importing(RUNTIME, FORBIDDEN) == []


def test_importing_the_pure_core_loads_no_shell_and_no_io_library() -> None:
    """Not even indirectly, through a module it imports."""
    assert _loaded_by_importing(PURE, IMPURE) == []


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


def test_the_runtime_type_checks() -> None:
    """mypy with the configuration in pyproject.toml ([tool.mypy]) finds nothing."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_product_needs_no_control_plane_code() -> None:
    """The control-plane launcher is devkit's: nothing in the wheel imports it. The certificate
    library serves one module of the product, the self-managed serving certificate
    (runtime.certificates), so the webhook and the compiler never load it, and the wheel asks for
    it only with its `certs` extra."""
    product = sorted((ROOT / "rulec").rglob("*.py")) + RUNTIME
    bad = {_module(p): n for p in product for n in _imports(p) if _under(n, ("devkit",))}
    assert not bad
    users = {_module(p) for p in product for n in _imports(p) if _under(n, ("cryptography",))}
    assert users == {"runtime.certificates"}
    crypto = [r for r in importlib.metadata.requires("jobrules") or ()
              if r.lower().startswith("cryptography")]
    assert crypto and all("extra ==" in r for r in crypto), crypto   # never a plain requirement
    assert any('extra == "certs"' in r for r in crypto), crypto
