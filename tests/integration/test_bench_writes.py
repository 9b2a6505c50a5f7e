"""bench/writes.py runs on the session's control plane at its smallest, and counts what it says:
the baseline controller runs from a temporary git worktree (HEAD here, so that any clone has
it) that is gone afterwards, every job's pods and transitions are seen, ours write each job for
its verdicts only (the shipped rules take no pod event: no state-only write), and the
operators' own writes are counted beside no controller of ours. Never timed here: the bench
measures; this keeps it working."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "writes.py"


def bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_writes", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.usefixtures("training_operator", "controller_manager")
def test_the_bench_counts_each_writer_and_cleans_its_baseline_up(control_plane: Any) -> None:
    if control_plane.plane is None:
        pytest.skip("the bench reads the audit log of a plane this session started")
    writes = bench()
    figures = writes.run(control_plane.plane, baseline="HEAD", sizes=(2,), pytorch_sizes=(2,),
                         quiet=1.0, prefix="bench")
    runtimes = figures["runtimes"]
    assert not runtimes["before"].startswith(str(ROOT)), runtimes   # the worktree's own code
    assert runtimes["after"] == str(ROOT / "runtime" / "__init__.py")
    listed = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                            text=True, check=True).stdout
    assert str(Path(runtimes["before"]).parents[1]) not in listed
    names = [row["name"] for row in figures["rows"]]
    assert names == ["b2-ok", "b2-fail", "vc2-ok", "pt2-ok", "pt2-fail"]
    for row in figures["rows"]:
        for setup in ("before", "after", "none"):
            cell = row[setup]
            assert cell["pods_seen"] >= 2 and cell["transitions"] >= 2 * 3 - 1, (setup, row)
            if row["name"] != "vc2-ok":   # no Volcano here: nobody else writes that one
                assert cell["operator"] > 0, (setup, row)
        for setup in ("before", "after"):
            cell = row[setup]
            assert cell["ours_state_only"] == 0, (setup, row)   # HEAD both
            assert 2 <= cell["ours_verdicts"] <= 4 and cell["ours"] <= 2 * cell["ours_verdicts"], (
                setup, row)
        assert row["none"]["ours"] == 0
    assert "| b2-ok |" not in writes.table(figures)   # rows are named by what they are
    assert "| batch/v1 Job, 2 pods, succeeds |" in writes.table(figures)
