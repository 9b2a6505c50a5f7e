"""Kubernetes' own decision functions, asked from Python: tools/oracle/ builds (once, cached
under ~/.cache/jobrules) the Job controller's package at the version tools/k8s/go.mod pins with
our harness beside it, and this module runs it on JSON lines (tools/oracle/oracle_test.go says
what it answers). Tests that use it are skipped, with the reason, where Go or the Go module
cache's copy of k8s.io/kubernetes is missing; any other failure to build fails them.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any, Iterable

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tools" / "oracle" / "build.sh"
NO_GO, NO_MODULE = 3, 4  # build.sh's exits when it cannot build here


@functools.lru_cache(maxsize=None)
def _built() -> tuple[Path | None, str]:
    done = subprocess.run(["bash", str(BUILD)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode in (NO_GO, NO_MODULE):
        return None, done.stderr.strip().splitlines()[-1].removeprefix("oracle: ")
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD} failed with exit code {done.returncode}:\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1]), ""


def binary() -> Path:
    """The oracle's test binary; skips the calling test when it cannot be built here."""
    path, why = _built()
    if path is None:
        pytest.skip(f"no Kubernetes oracle: {why}")
    return path


def ask(mode: str, cases: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """One answer list per case (`pod-failure-policy`: per pod; `success-policy`: per set of
    succeeded indexes), from one run of the oracle."""
    text = "".join(json.dumps(c, separators=(",", ":")) + "\n" for c in cases)
    done = subprocess.run([str(binary()), f"-jobrules.oracle={mode}"], input=text,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the oracle failed ({done.returncode}): {done.stderr}")
    return [json.loads(line)["answers"] for line in done.stdout.splitlines()]


@functools.lru_cache(maxsize=None)
def _table() -> str:
    done = subprocess.run([str(binary()), "-jobrules.oracle=table", "-test.run=^TestJobrulesTable$"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the oracle failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout.split("jobrules-table-begin\n", 1)[1].split("\njobrules-table-end", 1)[0]


def pod_failure_policy_table() -> dict[str, dict[str, Any]]:
    """TestSyncJobWithJobPodFailurePolicy's table, as the Go test source in the module cache
    has it: case name -> its fields (`job`, `pods`, `wantConditions`, `wantStatusFailed`, ...)
    as Kubernetes JSON."""
    binary()
    return json.loads(_table())
