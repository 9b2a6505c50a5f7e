"""Job kinds against the real control plane: kube-controller-manager's Job controller reacting to
pod lifecycles reported through pods/status, and pods owned by the kinds of the shared CRDs whose
operators do not run here (their status is driven through the API; test_training_operator.py has
the Kubeflow kinds, run by their real operator)."""

from __future__ import annotations

from dataclasses import dataclass

import kube
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("controller_manager")]


FAIL_ON_137 = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}}]
IGNORE_DISRUPTION = [{"action": "Ignore",
                      "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]


def test_job_controller_creates_the_pod_and_fails_the_job_on_exit_137(api, namespace):
    job = kube.create(api, kube.JOBS, kube.job_manifest(namespace, "train", pod_failure_rules=FAIL_ON_137))

    [pod] = kube.job_pods(api, job)
    assert pod["metadata"]["ownerReferences"] == [kube.owner_reference(job)]
    assert "batch.kubernetes.io/job-tracking" in pod["metadata"]["finalizers"]
    kube.report_running(api, pod)
    kube.report_oom_killed(api, pod)

    failed = kube.wait_for_condition(api, kube.JOBS.path(namespace, "train"), "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert "exit code 137" in failed["message"]


def test_job_completes_when_its_pod_succeeds(api, namespace):
    job = kube.create(api, kube.JOBS, kube.job_manifest(namespace, "once"))
    [pod] = kube.job_pods(api, job)
    kube.report_running(api, pod)
    kube.report_succeeded(api, pod)

    kube.wait_for_condition(api, kube.JOBS.path(namespace, "once"), "Complete")
    assert kube.get(api, kube.JOBS.path(namespace, "once"))["status"]["succeeded"] == 1


def test_eviction_ignored_by_policy_gets_a_replacement_pod(api, namespace):
    job = kube.create(api, kube.JOBS,
                      kube.job_manifest(namespace, "evictable", pod_failure_rules=IGNORE_DISRUPTION))
    [first] = kube.job_pods(api, job)
    kube.report_running(api, first)
    kube.report_evicted(api, first)

    pods = kube.job_pods(api, job, count=2)
    [replacement] = [p for p in pods if p["metadata"]["uid"] != first["metadata"]["uid"]]
    kube.report_running(api, replacement)
    kube.report_succeeded(api, replacement)
    kube.wait_for_condition(api, kube.JOBS.path(namespace, "evictable"), "Complete")
    assert kube.get(api, kube.JOBS.path(namespace, "evictable"))["status"].get("failed", 0) == 0


def test_init_container_failure_uses_up_the_backoff_limit(api, namespace):
    job = kube.create(api, kube.JOBS, kube.job_manifest(namespace, "init", backoff_limit=0))
    [pod] = kube.job_pods(api, job)
    kube.report_init_failed(api, pod, exit_code=2)

    failed = kube.wait_for_condition(api, kube.JOBS.path(namespace, "init"), "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"


# ---------------------------------------------------------------------------------------------
# CRD kinds: an object of each, and a pod it owns, as its operator would create it


@dataclass(frozen=True)
class Owned:
    """An object of a CRD kind and the pod its operator would create for it."""

    resource: kube.Resource
    kind: str
    spec: kube.Obj
    pod_name: str
    containers: tuple[str, ...]
    labels: dict[str, str]
    init_containers: tuple[str, ...] = ()


def busybox(name: str) -> kube.Obj:
    return {"name": name, "image": "busybox:1.36"}


OWNED = {
    "volcano-job": Owned(
        kube.VOLCANO_JOBS, "Job",
        {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{
            "name": "worker", "replicas": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [busybox("main")]}}}]},
        "owner-worker-0", ("main",),
        {"volcano.sh/job-name": "owner", "volcano.sh/task-spec": "worker"},
    ),
    "argo-workflow": Owned(
        kube.WORKFLOWS, "Workflow",
        {"entrypoint": "main",
         "templates": [{"name": "main", "container": busybox("main") | {"command": ["true"]}}]},
        "owner-main-1234567890", ("wait", "main"),
        {"workflows.argoproj.io/workflow": "owner"}, init_containers=("init",),
    ),
}


@pytest.mark.parametrize("case", OWNED.values(), ids=OWNED.keys())
def test_crd_object_owns_a_pod_that_is_collected_with_it(api, namespace, case: Owned):
    owner = kube.create(api, case.resource, {
        "apiVersion": case.resource.api_version, "kind": case.kind,
        "metadata": {"name": "owner", "namespace": namespace}, "spec": case.spec})
    pod = kube.create(api, kube.PODS, kube.pod_manifest(
        namespace, case.pod_name, containers=case.containers,
        init_containers=case.init_containers, labels=case.labels, owner=owner))

    kube.report_running(api, pod)
    stored = kube.report_oom_killed(api, pod, container=case.containers[-1])
    assert stored["metadata"]["ownerReferences"] == [kube.owner_reference(owner)]
    assert stored["status"]["phase"] == "Failed"

    kube.delete(api, case.resource.path(namespace, "owner"))
    pod_path = kube.PODS.path(namespace, case.pod_name)
    kube.wait_for("the garbage collector to delete the owned pod",
                  lambda: not kube.exists(api, pod_path), timeout=60)
