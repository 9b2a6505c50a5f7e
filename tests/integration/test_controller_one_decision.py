"""The controller decides what `rulec test` promised, on the real control plane, in the three
stories where it once did not: a budget read from the job (`count max <<spec.backoffLimit>>`),
a terminal verdict released by a field the rules read (`final until <<status.finishedAt>>
changes`), and an action dropped for want of permission, which lets go of what it held so that
the next eviction, once the permission is back, is acted on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support import apiserver, controllers
from test_controller_actions import EVICTIONS
from test_controller_kinds import WORKFLOWS, pod_of, set_status
from test_controller_rbac import RESOURCES, Identity, install

pytestmark = pytest.mark.integration

COUNTED = """
extend batchjob {
    # The docs' podFailurePolicy idiom: count failures against the Job's own backoffLimit.
    on pod failed -> count max <<spec.backoffLimit>> budget "backoff" then fail job
        reason "BackoffLimitExceeded" message "Job has reached the specified backoff limit"
}
"""


def state(obj: dict[str, Any]) -> dict[str, Any]:
    text = controllers.annotation(obj, "jobrules.dev/state")
    return json.loads(text) if text else {}


@pytest.mark.usefixtures("controller_manager")
def test_a_budget_read_from_the_job_counts_to_its_limit(control_plane: Any, api: Any,
                                                        namespace: str, tmp_path: Path) -> None:
    """backoffLimit 3: failures 1 to 3 are counted (1/3, 2/3, 3/3) with the Job Running; the
    fourth fails it. The controller once failed it on the first (its cache dropped the field)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(controllers.REPO / "rules" / "batch-job.rules", rules)
    (rules / "counted.rules").write_text(COUNTED)
    plan = controllers.compile_plan(rules, tmp_path / "plan.json")
    manifest = apiserver.job_manifest(namespace, "train", backoff_limit=3)
    manifest["spec"].update(parallelism=4, completions=4)
    path = apiserver.JOBS.path(namespace, "train")
    with controllers.running(control_plane, plan, namespace, tmp_path) as controller:
        job = apiserver.create(api, apiserver.JOBS, manifest)
        pods = [apiserver.report_running(api, p) for p in apiserver.job_pods(api, job, 4)]
        controllers.wait_for_verdict(api, path, "Running")
        for n, pod in enumerate(pods[:3], start=1):
            apiserver.report_failed(api, pod, exit_code=1)
            counted = apiserver.wait_for(f"failure {n} counted", lambda: (
                o if (state(o := apiserver.get(api, path)).get("budgets") or {}).get("backoff") == n
                else None))
            assert controllers.verdict(counted)["phase"] == "Running", controllers.verdict(counted)
            assert apiserver.condition(counted, "FailureTarget") is None
        apiserver.report_failed(api, pods[3], exit_code=1)
        failed = controllers.wait_for_verdict(api, path, "Failed")
        assert controllers.verdict(failed)["reason"] == "BackoffLimitExceeded"
        assert "is not a budget" not in controller.logs()


def test_a_retried_workflow_leaves_failed(control_plane: Any, api: Any, namespace: str,
                                          tmp_path: Path) -> None:
    """`argo retry` clears status.finishedAt: the shipped kind's `final until <<status.finishedAt>>
    changes` lets the Failed verdict go. The controller once kept it (its cache dropped the field)."""
    plan = controllers.compile_plan(controllers.REPO / "rules", tmp_path / "plan.json")
    job = apiserver.create(api, WORKFLOWS, {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "x"}}]}})
    pod = apiserver.create(api, apiserver.PODS, pod_of(
        job, "train-main-1", {"workflows.argoproj.io/workflow": "train"}, ("wait", "main")))
    path = WORKFLOWS.path(namespace, "train")
    with controllers.running(control_plane, plan, namespace, tmp_path):
        apiserver.report_running(api, pod)
        set_status(api, WORKFLOWS, job, {"phase": "Running", "startedAt": "2026-12-01T10:00:00Z"},
                   subresource=False)
        controllers.wait_for_verdict(api, path, "Running")
        apiserver.report_failed(api, apiserver.get(api, apiserver.PODS.path(namespace, "train-main-1")),
                                container="main")
        set_status(api, WORKFLOWS, job, {"phase": "Failed", "message": "child failed",
                                         "finishedAt": "2026-12-01T10:05:00Z"}, subresource=False)
        assert controllers.verdict(controllers.wait_for_verdict(api, path, "Failed"))["final"]
        # argo retry: the workflow runs again in place, finishedAt cleared
        set_status(api, WORKFLOWS, job, {"phase": "Running", "message": None, "finishedAt": None},
                   subresource=False)
        assert not controllers.verdict(controllers.wait_for_verdict(api, path, "Running"))["final"]


# The exactly-once tests' Volcano rules with `restart job` (which deletes every pod of the job).
RESTARTS = EVICTIONS.replace(
    'on pod evicted -> restart pod max 3 then fail job reason "TooManyEvictions"',
    "on pod evicted -> restart job max 3")


def set_pod_deletion(api: Any, identity: Identity, allowed: bool) -> None:
    """Take `delete` on pods away from the controller's ClusterRole, or give it back."""
    role = identity.find("ClusterRole")
    rules = []
    for rule in apiserver.get(api, RESOURCES["ClusterRole"].path(name=role["metadata"]["name"]))["rules"]:
        if "pods" in rule.get("resources", []) and rule.get("apiGroups") == [""]:
            verbs = [v for v in rule["verbs"] if v != "delete"] + (["delete"] if allowed else [])
            rule = {**rule, "verbs": verbs}
        rules.append(rule)
    api.merge_patch(RESOURCES["ClusterRole"].path(name=role["metadata"]["name"]), {"rules": rules})
    apiserver.wait_for(f"pod deletion {'allowed' if allowed else 'denied'}",
                       lambda: identity.can("delete", "pods") == allowed, timeout=60)


def test_a_dropped_action_lets_go_and_the_next_eviction_acts_once_the_role_is_fixed(
        control_plane: Any, api: Any, namespace: str, tmp_path: Path) -> None:
    """`restart job` refused for good (403, five tries): dropped with an ActionFailed Event; the
    job leaves Restarting and its pods are no longer ours. With the permission back, the next
    eviction restarts the job. The controller once stayed Restarting and ignored it."""
    from test_controller_actions import VOLCANO, gone, journal, volcano_job, worker

    plan = controllers.compile_plan(RESTARTS, tmp_path / "plan.json")
    identity = install(control_plane, api, namespace, plan, tmp_path)
    try:
        set_pod_deletion(api, identity, allowed=False)
        job = volcano_job(api, namespace)
        first, second = worker(api, job, 0), worker(api, job, 1)
        path = VOLCANO.path(namespace, "train")
        with controllers.running(control_plane, plan, namespace, tmp_path,
                                 **identity.env()) as controller:
            controllers.wait_for_verdict(api, path, "Running")
            apiserver.report_evicted(api, first)
            apiserver.wait_for("the ActionFailed Event", lambda: [
                e for e in controllers.events_of(api, namespace, "train")
                if e["reason"] == "ActionFailed"], timeout=90)
            apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None)
            let_go = controllers.wait_for_verdict(api, path, "Running")   # not Restarting
            assert state(let_go).get("restarting") is None
            assert not gone(api, first) and not gone(api, second)
            set_pod_deletion(api, identity, allowed=True)
            apiserver.report_evicted(api, second)
            apiserver.wait_for("the job's pods deleted", lambda: gone(api, second) and gone(api, first),
                               timeout=60)
            assert controller.metric("jobrules_controller_actions_total", action="restartJob",
                                     result="done") == 1
    finally:
        for obj in identity.objects:
            if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                apiserver.delete(api, RESOURCES[obj["kind"]].path(name=obj["metadata"]["name"]))
