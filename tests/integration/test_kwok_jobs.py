"""batch/v1 Jobs on the KWOK nodes: kube-controller-manager's Job controller creates the pods, the
scheduler places them, KWOK runs them as their stages say, and the Job controller reacts, with
no status written by a test."""

from __future__ import annotations

from support import apiserver
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("controller_manager", "kwok_nodes")]

FAIL_ON_137 = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}}]
IGNORE_DISRUPTION = [{"action": "Ignore",
                      "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]


def kwok_job(namespace: str, name: str, *, restart_policy: str = "Never", backoff_limit: int = 3,
             pod_failure_rules: list[apiserver.Obj] | None = None, **stages: object) -> apiserver.Obj:
    """apiserver.job_manifest's Job, its pod template run on KWOK as ``stages`` say."""
    job = apiserver.job_manifest(namespace, name, backoff_limit=backoff_limit,
                            pod_failure_rules=pod_failure_rules)
    job["spec"]["template"] = apiserver.on_kwok(job["spec"]["template"], **stages)
    job["spec"]["template"]["spec"]["restartPolicy"] = restart_policy
    return job


def test_a_job_runs_on_a_kwok_node_and_completes(api, namespace, kwok_nodes):
    job = apiserver.create(api, apiserver.JOBS, kwok_job(namespace, "once", after="500ms"))

    complete = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "once"), "Complete")

    assert complete["reason"] == "CompletionsReached"
    stored = apiserver.get(api, apiserver.JOBS.path(namespace, "once"))
    assert stored["status"]["succeeded"] == 1
    [pod] = apiserver.job_pods(api, job)
    assert pod["spec"]["nodeName"] in kwok_nodes
    assert pod["status"]["phase"] == "Succeeded"


def test_an_oom_killed_pod_fails_the_job_through_its_pod_failure_policy(api, namespace):
    apiserver.create(api, apiserver.JOBS, kwok_job(namespace, "train", pod_failure_rules=FAIL_ON_137,
                                         outcome="oom-killed", after="500ms"))

    failed = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "train"), "Failed")

    assert failed["reason"] == "PodFailurePolicy"
    assert "exit code 137" in failed["message"]
    assert apiserver.get(api, apiserver.JOBS.path(namespace, "train"))["status"]["failed"] == 1


def test_a_crash_looping_pod_uses_up_the_backoff_limit_by_its_restarts(api, namespace):
    apiserver.create(api, apiserver.JOBS, kwok_job(namespace, "loop", restart_policy="OnFailure",
                                         backoff_limit=2, outcome="exit-code", exit_code=2,
                                         after="300ms"))

    failed = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "loop"), "Failed")

    assert failed["reason"] == "BackoffLimitExceeded"


def test_an_evicted_pod_ignored_by_policy_is_replaced_and_not_counted(api, namespace):
    job = apiserver.create(api, apiserver.JOBS, kwok_job(namespace, "evictable",
                                               pod_failure_rules=IGNORE_DISRUPTION,
                                               outcome="evicted", after="500ms"))

    pods = apiserver.job_pods(api, job, count=2)

    evicted = [p for p in pods if p["status"].get("reason") == "Evicted"]
    assert evicted, "the first pod was not evicted"
    assert apiserver.condition(evicted[0], "DisruptionTarget")["reason"] == "TerminationByKubelet"
    assert apiserver.get(api, apiserver.JOBS.path(namespace, "evictable"))["status"].get("failed", 0) == 0


def test_a_failing_init_container_fails_the_job(api, namespace):
    apiserver.create(api, apiserver.JOBS, kwok_job(namespace, "init", backoff_limit=0,
                                         outcome="init-failed", exit_code=2, after="300ms"))

    failed = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "init"), "Failed")

    assert failed["reason"] == "BackoffLimitExceeded"
