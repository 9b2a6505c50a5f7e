"""The hooks of `.pre-commit-hooks.yaml`, run by pre-commit itself as a user's repository would:
`pre-commit try-repo <this repository> HOOK --all-files` inside a scratch git repository.

pre-commit installs the hook's environment from this repository's committed state (plus
changes to tracked files), each run anew; with pre-commit-uv (a test dependency) that takes
seconds, and uv's cache keeps the packages between runs (the first run downloads them).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "job broken: batch/v1 Job {\n    on pod faild -> ignore\n}\n"


SQUASHED = "job j: v1 Pod {succeeded when all pods succeeded}"
FORMATTED = (ROOT / "rules" / "batch-job.rules").read_text(encoding="utf-8")
FAILING_SUITE = "rules/volcano-oomkilled/suite.yaml"


def folder(source: Path, under: str = "rules") -> dict[str, str]:
    return {f"{under}/{p.relative_to(source).as_posix()}": p.read_text(encoding="utf-8")
            for p in sorted(source.rglob("*")) if p.is_file()}


def _failing_examples() -> dict[str, str]:
    files = folder(ROOT / "examples")
    assert "phase: Failed" in files[FAILING_SUITE]
    files[FAILING_SUITE] = files[FAILING_SUITE].replace("phase: Failed", "phase: Succeeded", 1)
    return files


# name: (hook, files of the scratch repository)
TRIES = {
    "check-shipped": ("rulec-check", lambda: folder(ROOT / "rules")),
    "check-broken": ("rulec-check", lambda: {**folder(ROOT / "rules"), "rules/broken.rules": BROKEN}),
    "fmt": ("rulec-fmt", lambda: {"a.rules": FORMATTED, "deep/b.rules": SQUASHED}),
    "test-examples": ("rulec-test", lambda: folder(ROOT / "examples")),
    "test-failing": ("rulec-test", _failing_examples),
}


@dataclass(frozen=True)
class Tried:
    repo: Path
    returncode: int
    output: str


@pytest.fixture(scope="module")
def tried(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Tried]:
    """Every try at once (each installs its own environment; together they take half the
    time)."""
    assert shutil.which("git"), "the hooks are tried in a git repository"
    started = {}
    for name, (hook, files) in TRIES.items():
        repo = tmp_path_factory.mktemp(name)
        for path, text in files().items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text, encoding="utf-8")
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(["git", "add", "."], cwd=repo, check=True)
        started[name] = repo, subprocess.Popen(
            [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook, "--all-files",
             "--color", "never"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
    done = {}
    for name, (repo, proc) in started.items():
        output, _ = proc.communicate(timeout=600)
        done[name] = Tried(repo, proc.returncode, output)
    return done


def test_check_passes_on_the_shipped_rules(tried: dict[str, Tried]) -> None:
    run = tried["check-shipped"]
    assert run.returncode == 0, run.output
    assert "rulec check" in run.output and "Passed" in run.output


def test_check_fails_on_a_broken_file(tried: dict[str, Tried]) -> None:
    run = tried["check-broken"]
    assert run.returncode == 1 and "Failed" in run.output
    assert "rules/broken.rules:2:12: error[R002] unknown pod event `faild`" in run.output


def test_fmt_rewrites_the_files_that_are_not_formatted(tried: dict[str, Tried]) -> None:
    run = tried["fmt"]
    assert run.returncode == 1 and "files were modified by this hook" in run.output
    assert (run.repo / "deep" / "b.rules").read_text() == \
        "job j: v1 Pod {\n    succeeded  when all pods succeeded\n}\n"
    assert (run.repo / "a.rules").read_text() == FORMATTED


def test_test_runs_the_suites_of_the_folder(tried: dict[str, Tried]) -> None:
    assert tried["test-examples"].returncode == 0, tried["test-examples"].output
    run = tried["test-failing"]
    assert run.returncode == 1 and f"FAIL {FAILING_SUITE}" in run.output
