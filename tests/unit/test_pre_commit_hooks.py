"""The hooks of `.pre-commit-hooks.yaml`, run by pre-commit itself as a user's repository would:
`pre-commit try-repo <this repository> HOOK --all-files` inside a scratch git repository.

pre-commit installs the hooks' environment from this repository's committed state (plus
changes to tracked files) as a user's pre-commit would, anew for each try; with pre-commit-uv (a
test dependency) that takes seconds, and uv's cache keeps the packages between runs (the first
run downloads them).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "job broken: batch/v1 Job {\n    on pod faild -> ignore\n}\n"
SQUASHED = "job j: v1 Pod {succeeded when all pods succeeded}"
FORMATTED = (ROOT / "rules" / "batch-job.rules").read_text(encoding="utf-8")


def folder(source: Path, under: str = "rules") -> dict[str, str]:
    return {f"{under}/{p.relative_to(source).as_posix()}": p.read_text(encoding="utf-8")
            for p in sorted(source.rglob("*")) if p.is_file()}


def try_repo(repo: Path, files: dict[str, str], *hook: str) -> tuple[int, str]:
    """`pre-commit try-repo ROOT [HOOK] --all-files` in a new git repository of `files`."""
    assert shutil.which("git"), "the hooks are tried in a git repository"
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    proc = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), *hook,
                           "--all-files", "--color", "never"],
                          cwd=repo, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def status(output: str, name: str) -> str:
    [found] = re.findall(rf"^{name}\.+(Passed|Failed)$", output, re.M)
    return found


def test_check_passes_on_the_shipped_rules(tmp_path: Path) -> None:
    code, output = try_repo(tmp_path, folder(ROOT / "rules"), "rulec-check")
    assert code == 0 and status(output, "rulec check") == "Passed", output


def test_check_fails_on_a_broken_file(tmp_path: Path) -> None:
    files = {**folder(ROOT / "rules"), "rules/broken.rules": BROKEN}
    code, output = try_repo(tmp_path, files, "rulec-check")
    assert code == 1 and status(output, "rulec check") == "Failed"
    assert "rules/broken.rules:2:12: error[R002] unknown pod event `faild`" in output


def test_every_hook_on_one_repository(tmp_path: Path) -> None:
    """fmt rewrites the one file not formatted; check takes the whole folder as one program;
    test runs the suites under it, one of whose cases now expects the wrong phase."""
    suite = "rules/volcano/suite.yaml"
    files = {"rules/a.rules": FORMATTED, "rules/deep/b.rules": SQUASHED,
             **folder(ROOT / "examples" / "volcano-oomkilled", "rules/volcano")}
    assert "phase: Failed" in files[suite]
    files[suite] = files[suite].replace("phase: Failed", "phase: Succeeded", 1)
    code, output = try_repo(tmp_path, files)
    assert code == 1
    assert (status(output, "rulec fmt"), status(output, "rulec check"),
            status(output, "rulec test")) == ("Failed", "Passed", "Failed"), output
    assert "files were modified by this hook" in output
    assert (tmp_path / "rules" / "deep" / "b.rules").read_text() == \
        "job j: v1 Pod {\n    succeeded  when all pods succeeded\n}\n"
    assert (tmp_path / "rules" / "a.rules").read_text() == FORMATTED
    assert f"FAIL {suite}" in output and re.search(r"^[1-9]\d* passed, 1 failed$", output, re.M)
