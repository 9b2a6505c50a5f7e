"""The shipped rules are clean against the real CRDs, formatted, and compile to the golden plan.

Refresh the golden after an intended change with `JOBRULES_UPDATE_GOLDENS=1` and review the diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devkit import crds

REPO = Path(__file__).resolve().parents[2]
CRDS = [str(p) for p in crds.files()]
GOLDEN = REPO / "tests" / "golden" / "plans" / "rules.json"


def rulec(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as users run it, from the repository root so plan paths read `rules/...`."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from rulec.commands.cli import main; sys.exit(main())",
         *args],
        cwd=REPO, capture_output=True, text=True, check=False,
    )


def test_check_with_crds_is_clean() -> None:
    assert len(CRDS) == 10, CRDS
    done = rulec("check", "rules", "--strict", "--crd", *CRDS)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_formatted() -> None:
    done = rulec("fmt", "--check", "rules")
    assert done.returncode == 0, done.stdout + done.stderr


def test_plan_matches_golden(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    done = rulec("compile", "rules", "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    if os.environ.get("JOBRULES_UPDATE_GOLDENS") == "1":
        GOLDEN.write_bytes(out.read_bytes())
    assert out.read_bytes() == GOLDEN.read_bytes()
