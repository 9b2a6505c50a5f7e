"""A container crash-looping after the kernel killed it for memory (state `waiting:
CrashLoopBackOff`, last termination `OOMKilled`): `reason "OOMKilled"` and the shipped cause
"oom" match it, as they match the same container while it runs again after the restart, and
`reason "CrashLoopBackOff"` still does. What the KWOK crash-loop stage (and a kubelet between
two restarts of an `OnFailure` pod) reports."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rulec import api, emit
from runtime import functions, pods, plan, reconcile, templates
from runtime.resources import Resize

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 4, 14, 0, tzinfo=timezone.utc)
UID = "0b0b0b0b-0000-4000-8000-00000000000b"
SEARCH = templates.searcher(functions.options(NOW))


def status(state: dict[str, Any], last: str | None = "OOMKilled") -> dict[str, Any]:
    out: dict[str, Any] = {"name": "pytorch", "restartCount": 1, "state": state}
    if last is not None:
        out["lastState"] = {"terminated": {"exitCode": 137, "reason": last,
                                           "finishedAt": "2026-12-04T13:59:00Z"}}
    return out


CRASH_LOOPING = status({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}})
RUNNING_AGAIN = status({"running": {"startedAt": "2026-12-04T13:59:10Z"}})
ENDED_OTHERWISE = status({"terminated": {"exitCode": 1, "reason": "Error",
                                         "finishedAt": "2026-12-04T13:59:30Z"}})


@pytest.fixture(scope="module")
def kind() -> plan.Kind:
    built = api.build([str(ROOT / "rules"), str(ROOT / "examples" / "oom-resize" / "resize.rules")])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    return plan.loads(emit.dumps(built.plan)).kind_named("pytorchjob")


def master(container: dict[str, Any], restarts: int = 1) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-master-0", "namespace": "ml", "uid": "pod-1",
                         "labels": {"training.kubeflow.org/job-name": "train",
                                    "training.kubeflow.org/replica-type": "master"},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1",
                                              "kind": "PyTorchJob", "name": "train", "uid": UID,
                                              "controller": True}]},
            "spec": {"restartPolicy": "OnFailure", "containers": [
                {"name": "pytorch", "resources": {"limits": {"memory": "256Mi"}}}]},
            "status": {"phase": "Running", "containerStatuses": [{**container,
                                                                  "restartCount": restarts}]}}


def job() -> dict[str, Any]:
    replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [
        {"name": "pytorch", "resources": {"limits": {"memory": "256Mi"}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": "ml", "uid": UID, "resourceVersion": "4",
                         "creationTimestamp": "2026-12-04T13:50:00Z"},
            "spec": {"pytorchReplicaSpecs": {"Master": replica}},
            "status": {"conditions": [{"type": "Running", "status": "True",
                                       "reason": "PyTorchJobRunning"}]}}


def test_a_crash_looping_container_reads_both_reasons(kind: plan.Kind) -> None:
    [looping] = pods.facts(kind, master(CRASH_LOOPING), SEARCH).containers
    assert (looping.reason, looping.last_reason) == ("CrashLoopBackOff", "OOMKilled")
    assert looping.reasons == ("CrashLoopBackOff", "OOMKilled")
    [again] = pods.facts(kind, master(RUNNING_AGAIN), SEARCH).containers
    assert again.reasons == ("OOMKilled",)          # as before: the last termination's
    [ended] = pods.facts(kind, master(ENDED_OTHERWISE), SEARCH).containers
    assert ended.reasons == ("Error",)              # its own ending, not the one before


@pytest.mark.parametrize("container, restarted", [(CRASH_LOOPING, True), (RUNNING_AGAIN, True),
                                                  (ENDED_OTHERWISE, False)],
                         ids=["crash-looping", "running-again", "ended-otherwise"])
def test_the_oom_cause_restarts_a_job_whose_container_crash_loops_after_a_kill(
        kind: plan.Kind, container: dict[str, Any], restarted: bool) -> None:
    writes = reconcile.reconcile(kind, job(), [master(container)], NOW)
    decided = [(i.action, i.resize) for i in writes.new]
    if restarted:
        assert decided == [("restartJob", (Resize("pytorch", "256Mi", "384Mi"),))]
    else:
        assert decided == []
