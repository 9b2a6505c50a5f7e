"""bench/admission_e2e.py runs on a control plane of its own, and its set-ups are what it says:
the fixed patch, the API server's own policy and ours give the same pod (the bench stops
otherwise), each webhook is called once per pod, the policy and no webhook never. Never timed
here: the bench measures; this keeps it working."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench" / "admission_e2e.py"
SETUPS = ("none", "no-op", "fixed-patch", "policy", "native", "jobrules")


def test_the_bench_runs_and_its_set_ups_make_the_same_change(tmp_path: Path) -> None:
    if os.environ.get("KUBEBUILDER_ASSETS"):
        pytest.skip("envtest's API server may predate MutatingAdmissionPolicy (GA in 1.36)")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "1", "--pods", "4", "--concurrency", "2",
         "--no-fail", "--profile", str(tmp_path), "--profile-seconds", "1"],
        capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for mode in ("one client", "2 clients"):
        table = done.stdout.split(f"\n{mode}, 4 pods each")[1]
        rows = {setup: re.search(rf"^{re.escape(setup)} +(?:\S+ +){{4}}(\S+)", table, re.M)
                for setup in SETUPS}
        calls = {setup: float(row[1]) if row else None for setup, row in rows.items()}
        assert calls == {"none": 0.0, "no-op": 1.0, "fixed-patch": 1.0, "policy": 0.0,
                         "native": 0.0, "jobrules": 1.0}
    assert sorted(p.name for p in tmp_path.glob("*.pprof")) == sorted(f"{s}.pprof" for s in SETUPS)
