"""Job kinds against the real control plane: kube-controller-manager's Job controller reacting to
pod lifecycles reported through pods/status, and pods owned by the kinds of the shared CRDs whose
operators do not run here (their status is driven through the API; test_training_operator.py has
the Kubeflow kinds, run by their real operator)."""

from __future__ import annotations

from dataclasses import dataclass

from support import apiserver
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("controller_manager")]


FAIL_ON_137 = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}}]
IGNORE_DISRUPTION = [{"action": "Ignore",
                      "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]


def test_job_controller_creates_the_pod_and_fails_the_job_on_exit_137(api, namespace):
    job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "train", pod_failure_rules=FAIL_ON_137))

    [pod] = apiserver.job_pods(api, job)
    assert pod["metadata"]["ownerReferences"] == [apiserver.owner_reference(job)]
    assert "batch.kubernetes.io/job-tracking" in pod["metadata"]["finalizers"]
    apiserver.report_running(api, pod)
    apiserver.report_oom_killed(api, pod)

    failed = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "train"), "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert "exit code 137" in failed["message"]


def test_job_completes_when_its_pod_succeeds(api, namespace):
    job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "once"))
    [pod] = apiserver.job_pods(api, job)
    apiserver.report_running(api, pod)
    apiserver.report_succeeded(api, pod)

    apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "once"), "Complete")
    assert apiserver.get(api, apiserver.JOBS.path(namespace, "once"))["status"]["succeeded"] == 1


def test_eviction_ignored_by_policy_gets_a_replacement_pod(api, namespace):
    job = apiserver.create(api, apiserver.JOBS,
                      apiserver.job_manifest(namespace, "evictable", pod_failure_rules=IGNORE_DISRUPTION))
    [first] = apiserver.job_pods(api, job)
    apiserver.report_running(api, first)
    apiserver.report_evicted(api, first)

    pods = apiserver.job_pods(api, job, count=2)
    [replacement] = [p for p in pods if p["metadata"]["uid"] != first["metadata"]["uid"]]
    apiserver.report_running(api, replacement)
    apiserver.report_succeeded(api, replacement)
    apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "evictable"), "Complete")
    assert apiserver.get(api, apiserver.JOBS.path(namespace, "evictable"))["status"].get("failed", 0) == 0


def test_init_container_failure_uses_up_the_backoff_limit(api, namespace):
    job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "init", backoff_limit=0))
    [pod] = apiserver.job_pods(api, job)
    apiserver.report_init_failed(api, pod, exit_code=2)

    failed = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "init"), "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"


# ---------------------------------------------------------------------------------------------
# CRD kinds: an object of each, and a pod it owns, as its operator would create it


@dataclass(frozen=True)
class Owned:
    """An object of a CRD kind and the pod its operator would create for it."""

    resource: apiserver.Resource
    kind: str
    spec: apiserver.Obj
    pod_name: str
    containers: tuple[str, ...]
    labels: dict[str, str]
    init_containers: tuple[str, ...] = ()


def busybox(name: str) -> apiserver.Obj:
    return {"name": name, "image": "busybox:1.36"}


OWNED = {
    "volcano-job": Owned(
        apiserver.VOLCANO_JOBS, "Job",
        {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{
            "name": "worker", "replicas": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [busybox("main")]}}}]},
        "owner-worker-0", ("main",),
        {"volcano.sh/job-name": "owner", "volcano.sh/task-spec": "worker"},
    ),
    "argo-workflow": Owned(
        apiserver.WORKFLOWS, "Workflow",
        {"entrypoint": "main",
         "templates": [{"name": "main", "container": busybox("main") | {"command": ["true"]}}]},
        "owner-main-1234567890", ("wait", "main"),
        {"workflows.argoproj.io/workflow": "owner"}, init_containers=("init",),
    ),
}


@pytest.mark.parametrize("case", OWNED.values(), ids=OWNED.keys())
def test_crd_object_owns_a_pod_that_is_collected_with_it(api, namespace, case: Owned):
    owner = apiserver.create(api, case.resource, {
        "apiVersion": case.resource.api_version, "kind": case.kind,
        "metadata": {"name": "owner", "namespace": namespace}, "spec": case.spec})
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(
        namespace, case.pod_name, containers=case.containers,
        init_containers=case.init_containers, labels=case.labels, owner=owner))

    apiserver.report_running(api, pod)
    stored = apiserver.report_oom_killed(api, pod, container=case.containers[-1])
    assert stored["metadata"]["ownerReferences"] == [apiserver.owner_reference(owner)]
    assert stored["status"]["phase"] == "Failed"

    apiserver.delete(api, case.resource.path(namespace, "owner"))
    pod_path = apiserver.PODS.path(namespace, case.pod_name)
    apiserver.wait_for("the garbage collector to delete the owned pod",
                  lambda: not apiserver.exists(api, pod_path), timeout=60)
