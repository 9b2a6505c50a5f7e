"""A failed job's named cause through the controller's worker, against the API server in memory:
written into the verdict annotation and the condition's message, and counted once in
`jobrules_failures_total{kind, cause}` (read back from prometheus_client's registry)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from prometheus_client import REGISTRY

from rulec import api as rulec_api
from rulec import emit
from runtime import objects, plan, vocabulary
from runtime.controller import metrics, worker
from tests.unit.runtime.controller import shell
from tests.unit.runtime.controller.fakeapi import FakeApi

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
RULES = """
cause "oom" when reason "OOMKilled" hint "the container ran out of memory: raise its limit"
cause "sigterm" when exit 143 hint "the container was asked to stop"
job causetrainer: example.dev/v1 CauseTrainer {
    pods owned
    failed     when any pod failed
               reason "PodFailed"
    running    when any pod running
    pending    otherwise
}
"""
PATH = "/apis/example.dev/v1/namespaces/ns/causetrainers/t"
KEY = ("causetrainer", "ns", "t")


def failures(cause: str) -> float:
    return REGISTRY.get_sample_value("jobrules_failures_total",
                                     {"kind": "causetrainer", "cause": cause}) or 0.0


def pod(name: str, phase: str, **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T11:00:00Z",
                         "ownerReferences": [{"apiVersion": "example.dev/v1",
                                              "kind": "CauseTrainer", "name": "t",
                                              "uid": "uid-t", "controller": True}]},
            "status": {"phase": phase, **status}}


def terminated(code: int, reason: str) -> list[dict[str, Any]]:
    return [{"name": "main", "restartCount": 0, "state": {"terminated": {
        "exitCode": code, "reason": reason, "finishedAt": "2026-01-01T11:59:00Z"}}}]


def setup(*pods: dict[str, Any]) -> tuple[worker.Worker, FakeApi]:
    built = rulec_api.build_sources([rulec_api.SourceFile.from_text("t.rules", RULES)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    api = FakeApi(status_subresource={"causetrainers.example.dev"})
    api.add({"apiVersion": "example.dev/v1", "kind": "CauseTrainer",
             "metadata": {"name": "t", "namespace": "ns", "uid": "uid-t", "generation": 1}},
            "causetrainers")
    for p in pods:
        api.add(p, "pods")
    w, _, _ = shell.make(plan.loads(emit.dumps(built.plan)), api, NOW)
    shell.feed(w, api)
    return w, api


def test_a_failure_is_written_with_its_cause_and_counted_once() -> None:
    w, api = setup(pod("p-0", "Failed", containerStatuses=terminated(137, "OOMKilled")))
    before = failures("oom")
    assert w.sync(KEY) is None
    verdict = json.loads(objects.annotation(api.get(PATH), vocabulary.VERDICT_ANNOTATION))
    assert (verdict["phase"], verdict["reason"], verdict["cause"], verdict["hint"]) == (
        "Failed", "PodFailed", "oom", "the container ran out of memory: raise its limit")
    [condition] = api.get(PATH)["status"]["conditions"]
    assert condition["reason"] == "PodFailed"
    assert condition["message"] == ("verdict Failed (cause oom: the container ran out of memory: "
                                    "raise its limit) (t.rules:6:5)")
    assert failures("oom") == before + 1
    w.sync(KEY)   # nothing changed: not counted again
    assert failures("oom") == before + 1


def test_a_failure_no_cause_matches_is_counted_as_none() -> None:
    w, api = setup(pod("p-0", "Failed", containerStatuses=terminated(1, "Error")))
    before, oom = failures(metrics.NO_CAUSE), failures("oom")
    w.sync(KEY)
    verdict = json.loads(objects.annotation(api.get(PATH), vocabulary.VERDICT_ANNOTATION))
    assert verdict["phase"] == "Failed" and "cause" not in verdict and "hint" not in verdict
    assert failures(metrics.NO_CAUSE) == before + 1 and failures("oom") == oom


def test_only_a_change_to_failed_is_a_failure() -> None:
    before = failures("sigterm")
    metrics.verdict_changed("causetrainer", "Running", "sigterm")
    metrics.verdict_changed("causetrainer", "Succeeded", "sigterm")
    assert failures("sigterm") == before
    metrics.verdict_changed("causetrainer", "Failed", "sigterm")
    assert failures("sigterm") == before + 1
