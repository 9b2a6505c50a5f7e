"""`jobrules-controller` (and `python -m runtime.controller`) on the command line: --help and
--version answer without any setting (exit 0), --help lists every setting docs/controller.md
lists, and anything else given on the line is a one-line usage error (exit 2), before the
settings are read."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import about
from runtime.controller import main, settings

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = Path(sys.executable).parent / "jobrules-controller"
COMMANDS = {"jobrules-controller": [str(SCRIPT)],
            "python -m runtime.controller": [sys.executable, "-m", "runtime.controller"]}
NO_SETTINGS = {k: v for k, v in os.environ.items()
               if not k.startswith("JOBRULES_") and k not in ("KUBECONFIG", "POD_NAME", "POD_NAMESPACE")}


def run(command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMANDS[command], *args], capture_output=True, text=True, cwd=ROOT,
                          env=NO_SETTINGS, timeout=60)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_and_version_need_no_settings(command: str) -> None:
    helped = run(command, "--help")
    assert (helped.returncode, helped.stderr) == (0, "")
    assert helped.stdout.startswith("usage: jobrules-controller ")
    for variable in settings.VARIABLES:
        assert f"  {variable.names} (" in helped.stdout
    version = run(command, "--version")
    assert (version.returncode, version.stdout, version.stderr) == (
        0, f"jobrules-controller {about.version()}\n", "")


@pytest.mark.parametrize("args", [["--bogus"], ["plan.json"], ["--help=yes"], ["-v"]])
def test_anything_else_is_a_one_line_usage_error(args: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(args) == 2
    out, err = capsys.readouterr()
    [line] = err.splitlines()
    assert out == "" and line.startswith("jobrules-controller: error: ") and "see --help" in line


def test_without_arguments_the_settings_are_read(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("JOBRULES_PLAN", raising=False)
    assert main.main([]) == 2
    assert capsys.readouterr().err == (
        "jobrules-controller: JOBRULES_PLAN: required (the path of the compiled plan JSON)\n")


def test_help_lists_the_settings_docs_list_in_their_order() -> None:
    text = (ROOT / "docs" / "controller.md").read_text(encoding="utf-8")
    table = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    documented = [row.split(" | ")[0].removeprefix("| ").replace("`", "")
                  for row in table.splitlines() if row.startswith("| `")]
    assert documented == [v.names for v in settings.VARIABLES]


def test_every_variable_read_is_in_the_help() -> None:
    """The names the settings read (but the test hooks', docs/controller.md "Crash points")."""
    source = (ROOT / "runtime" / "controller" / "settings.py").read_text(encoding="utf-8")
    code = source.split("def from_env", 1)[1]
    read = set(re.findall(r'"((?:JOBRULES|POD)_[A-Z_]+|KUBECONFIG)"', code)) - {
        "JOBRULES_TEST_HOOKS", "JOBRULES_FAULT"}
    helped = main.arguments().format_help()
    for name in read:
        short = name.replace("JOBRULES_RENEW", "_RENEW").replace("JOBRULES_RETRY", "_RETRY")
        assert short in helped, name
