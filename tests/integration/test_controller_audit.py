"""A policy in audit, on the real control plane: its Events and metrics are made, and the API
server's audit log shows no request that removes a pod, creates an object, or changes the job
beyond the verdict (our annotations and phase label)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import apiserver, audit, controllers
from test_controller_actions import EVICTIONS, VOLCANO

pytestmark = pytest.mark.integration

# The exactly-once tests' Volcano rules, their eviction policy in audit, and a `restart job`
# that creates a Command (so that a Command created would show in the audit log).
RULES = EVICTIONS.replace(
    'on pod evicted -> restart pod max 3 then fail job reason "TooManyEvictions"',
    'audit on pod evicted -> restart pod max 2 then restart job\n'
    '    actions {\n'
    '        restart job -> create bus.volcano.sh/v1alpha1 Command { action: "RestartJob", target: job }\n'
    '    }')
assert RULES != EVICTIONS


def audits(api: Any, namespace: str) -> list[str]:
    return sorted(e.get("action", "") for e in controllers.events_of(api, namespace, "train")
                  if e.get("reason") == "Audit")


def test_a_policy_in_audit_says_what_it_would_do_and_sends_nothing_for_it(
        control_plane: Any, api: Any, namespace: str, tmp_path: Path) -> None:
    if control_plane.plane is None:
        pytest.skip("the audit log is read from a control plane this session started")
    plan = controllers.compile_plan(RULES, tmp_path / "plan.json")
    job = apiserver.create(api, VOLCANO, {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {"minAvailable": 1, "tasks": [{"name": "worker", "replicas": 1, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}}]}})
    pods = []
    for n in range(3):
        pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(
            namespace, f"train-worker-{n}", owner=job,
            labels={"volcano.sh/job-name": "train", "volcano.sh/task-spec": "worker"}))
        pods.append(apiserver.report_running(api, pod))
    with controllers.running(control_plane, plan, namespace, tmp_path) as controller:
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        for pod in pods:   # three evictions: two restarts, then the fallback, all audited
            apiserver.report_evicted(api, pod)
        apiserver.wait_for("three Audit Events",
                           lambda: audits(api, namespace) == ["RestartJob", "RestartPod",
                                                              "RestartPod"], timeout=60)
        assert controller.metric("jobrules_controller_actions_total", kind="trainer",
                                 action="restartPod", result="audited") == 2
        assert controller.metric("jobrules_controller_actions_total", kind="trainer",
                                 action="restartJob", result="audited") == 1
        assert "would restartPod train-worker-0" in controller.logs()
    log = control_plane.plane.audit_log
    assert audit.pod_removals(log, namespace) == {}
    assert audit.created(log, namespace, "commands") == {}
    for body in audit.patches(log, namespace, "jobs", "train"):
        assert set(body) <= {"metadata", "status"}, body
        assert set(body.get("metadata", {})) <= {"annotations", "labels", "resourceVersion"}, body
        assert set(body.get("metadata", {}).get("labels", {})) <= {"jobrules.dev/phase"}, body
        assert set(body.get("status", {})) <= {"conditions"}, body
    # every pod is still there, as it was left
    for pod in pods:
        meta = pod["metadata"]
        assert apiserver.exists(api, apiserver.PODS.path(meta["namespace"], meta["name"]))
