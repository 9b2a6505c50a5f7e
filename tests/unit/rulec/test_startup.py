"""What a short `rulec` run imports, since importing is most of what it costs: `--version` and
`--help` nothing but the command line, `check` the compiler's stages but no other command, no
runtime beyond what the checks share with it, and no cluster client, web server or YAML."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# Never loaded by a check: the other commands (and the runtime they run), the runtime's shells,
# the libraries that serve or talk to a cluster, YAML (only `--crd` reads it), and the package
# metadata reader.
NOT_FOR_CHECK = (
    "rulec.commands.run", "rulec.commands.suite", "rulec.commands.inputs", "rulec.commands.why",
    "rulec.commands.manifests", "rulec.commands.webhook_config", "rulec.manifests",
    "rulec.schema", "runtime.controller", "runtime.webhook", "runtime.evaluator",
    "runtime.evaluation", "runtime.mutator", "runtime.plan", "runtime.watches",
    "kubernetes", "urllib3", "flask", "werkzeug", "gunicorn", "gevent", "prometheus_client",
    "yaml", "importlib.metadata",
)
# All that `--version` and `--help` may load of the project.
COMMAND_LINE = {"rulec", "rulec.commands", "rulec.commands.cli", "rulec.about", "runtime",
                "runtime.about"}

RULES = "job j: v1 Pod {\n    failed when any pod failed\n}\n"


def loaded(*argv: str, cwd: Path = ROOT) -> set[str]:
    """The modules in sys.modules after `rulec ARGV` ran in a fresh interpreter."""
    script = (
        "import json, sys\n"
        "from rulec.commands import cli\n"
        f"code = cli.main({list(argv)!r})\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=cwd, timeout=120)
    assert proc.returncode == 0, proc.stderr
    code, modules = json.loads(proc.stdout.strip().splitlines()[-1])
    assert code == 0, proc.stdout
    return set(modules)


def under(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


def test_check_loads_the_compiler_and_nothing_of_the_other_commands(tmp_path: Path) -> None:
    (tmp_path / "j.rules").write_text(RULES)
    modules = loaded("check", "j.rules", cwd=tmp_path)
    assert {"rulec.api", "rulec.checker", "lark"} <= modules   # the check did run
    assert under(modules, NOT_FOR_CHECK) == []


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_load_only_the_command_line(flag: str) -> None:
    modules = loaded(flag)
    assert set(under(modules, ("rulec", "runtime"))) <= COMMAND_LINE
    assert under(modules, ("lark", "msgspec", "jmespath", "yaml", "importlib.metadata")) == []
