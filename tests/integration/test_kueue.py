"""Beside Kueue, on a control plane of its own running the real Kueue (v0.17, built from its Go
module as the training operator is; devkit.cluster starts it, its webhooks called over TLS).

Kueue's webhooks suspend a Job or PyTorchJob that names a LocalQueue; Kueue admits it when its
ClusterQueue has the quota, then lifts the suspension, and the flavor's toleration takes its pods
to the KWOK nodes. The controller runs the shipped rules (with examples/queued's policies): a
queued job reads Suspended with reason Queued, never Pending, takes no action while it waits, and
runs and succeeds once admitted. A Job whose `spec.managedBy` names MultiKueue is left alone:
no write of ours, even with a pod of it failing as a policy listens for. An admitted Job (and a
PyTorchJob) killed for memory is restarted with more (examples/oom-resize) through its Workload,
which Kueue admits again at the new size.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import apiserver, audit, controllers
import pytest

from conftest import Session
from devkit import cluster
from runtime.controller.kube import Client

pytestmark = pytest.mark.integration

KUEUE = "kueue.x-k8s.io/v1beta2"
FLAVORS = apiserver.Resource(KUEUE, "resourceflavors")
CLUSTER_QUEUES = apiserver.Resource(KUEUE, "clusterqueues")
LOCAL_QUEUES = apiserver.Resource(KUEUE, "localqueues")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RULES = [cluster.REPO / "rules", cluster.REPO / "examples" / "queued" / "retry.rules"]


@pytest.fixture(scope="module")
def plane() -> Iterator[Session]:
    """A control plane with Kueue (and the training operator, KWOK nodes, the scheduler), and
    Kueue's flavor for the KWOK nodes: their label, and their taint tolerated."""
    binaries = cluster.find_binaries()
    with cluster.running(binaries=binaries, kueue=True) as started, started.client() as api:
        if not (started.kwok and started.controller_manager):
            pytest.skip("no KWOK nodes or no kube-controller-manager (KUBEBUILDER_ASSETS has "
                        "neither): nothing would run what Kueue admits")
        if not started.kueue:
            pytest.fail("Kueue did not start: `bash tools/build.sh kueue` failed (see above)")
        apiserver.create(api, FLAVORS, {
            "apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "kwok"},
            "spec": {"nodeLabels": {"type": "kwok"}, "tolerations": [cluster.KWOK_TOLERATION]}})
        yield Session.of(api, started)


@pytest.fixture
def kube(plane: Session) -> Client:
    return plane.api


@pytest.fixture
def queue(request: pytest.FixtureRequest, kube: Client) -> str:
    """A namespace with a LocalQueue `lq` of a ClusterQueue of its own (named after it), with
    quota for one CPU: the namespace's name."""
    name = f"q-{request.node.name.split('_')[1]}-{os.urandom(3).hex()}"[:40]
    apiserver.create(kube, apiserver.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": name}})
    apiserver.create(kube, CLUSTER_QUEUES, {
        "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
                 "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                     "name": "kwok", "resources": [{"name": "cpu", "nominalQuota": "1"},
                                                   {"name": "memory", "nominalQuota": "4Gi"}]}]}]}})
    apiserver.create(kube, LOCAL_QUEUES, {
        "apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": name},
        "spec": {"clusterQueue": name}})
    apiserver.wait_for("the default ServiceAccount", lambda: apiserver.exists(
        kube, apiserver.SERVICE_ACCOUNTS.path(name, "default")))
    return name


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    return controllers.compile_plan(RULES, tmp_path / "plan.json")


def grant(kube: Client, namespace: str, cpu: str) -> None:
    """Set the queue's CPU quota."""
    path = CLUSTER_QUEUES.path(name=namespace)
    spec = copy.deepcopy(apiserver.get(kube, path)["spec"])
    spec["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = cpu
    kube.merge_patch(path, {"spec": {"resourceGroups": spec["resourceGroups"]}})


def container(name: str, cpu: str) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}


def queued_verdict(kube: Client, path: str) -> dict[str, Any]:
    done = controllers.wait_for_verdict(kube, path, "Suspended", timeout=60)
    return controllers.verdict(done)


def test_a_job_kueue_holds_is_queued_then_runs_once_admitted(plane: Session, kube: Client,
                                                              queue: str, plan_file: Path,
                                                              tmp_path: Path) -> None:
    path = apiserver.JOBS.path(queue, "big")
    with controllers.running(plane, plan_file, queue, tmp_path) as controller:
        created = apiserver.create(kube, apiserver.JOBS, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "big", "namespace": queue, "labels": {QUEUE_LABEL: "lq"}},
            "spec": {"backoffLimit": 2, "template": {"spec": {
                "restartPolicy": "Never", "containers": [container("main", "2")]}}}})
        assert created["spec"]["suspend"] is True       # Kueue's webhook suspended it
        verdict = queued_verdict(kube, path)
        assert (verdict["reason"], verdict["message"]) == (
            "Queued", "queued in lq: waiting for Kueue to admit it")
        assert controller.metric("jobrules_controller_actions_total") == 0
        grant(kube, queue, "4")
        done = controllers.wait_for_verdict(kube, path, "Succeeded", timeout=90)
        assert done["spec"]["suspend"] is False
        [pod] = apiserver.list_pods(kube, queue)
        assert cluster.KWOK_TOLERATION in pod["spec"]["tolerations"]   # the flavor's, from Kueue
        assert controller.metric("jobrules_controller_actions_total") == 0


def test_a_pytorchjob_kueue_holds_is_queued_then_runs_once_admitted(plane: Session, kube: Client,
                                                                     queue: str, plan_file: Path,
                                                                     tmp_path: Path) -> None:
    if not plane.training_operator:
        pytest.fail("the training operator is not running (its binary is missing)")
    path = apiserver.PYTORCH_JOBS.path(queue, "train")
    with controllers.running(plane, plan_file, queue, tmp_path):
        apiserver.create(kube, apiserver.PYTORCH_JOBS, {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": queue, "labels": {QUEUE_LABEL: "lq"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {
                "replicas": 1, "restartPolicy": "Never",
                "template": {"spec": {"containers": [container("pytorch", "2")]}}}}}})
        verdict = queued_verdict(kube, path)
        assert verdict["reason"] == "Queued"
        assert apiserver.get(kube, path)["spec"]["runPolicy"]["suspend"] is True
        grant(kube, queue, "4")
        done = controllers.wait_for_verdict(kube, path, "Succeeded", timeout=90)
        assert controllers.verdict(done)["reason"] == "PyTorchJobSucceeded"


def test_a_job_multikueue_manages_gets_nothing_from_us(plane: Session, kube: Client, queue: str,
                                                       plan_file: Path, tmp_path: Path) -> None:
    """Both Jobs exist before the controller starts, so its first list holds both; once it has
    reconciled both (its metric), ours has a verdict and an action, the foreign one nothing."""
    for name, managed_by in (("remote", "kueue.x-k8s.io/multikueue"), ("local", None)):
        spec: dict[str, Any] = {"suspend": True, "template": {"spec": {
            "restartPolicy": "Never", "containers": [container("main", "100m")]}}}
        if managed_by:
            spec["managedBy"] = managed_by
        job = apiserver.create(kube, apiserver.JOBS, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": queue}, "spec": spec})
        pod = apiserver.create(kube, apiserver.PODS, apiserver.pod_manifest(
            queue, f"{name}-x1", containers=["main"], owner=job,
            labels={"batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}))
        apiserver.report_failed(kube, pod, exit_code=137)
    with controllers.running(plane, plan_file, queue, tmp_path) as controller:
        local = apiserver.wait_for("a verdict on our Job", lambda: (
            job if controllers.annotation(job := apiserver.get(
                kube, apiserver.JOBS.path(queue, "local")), "jobrules.dev/verdict") else None),
            timeout=60)
        apiserver.wait_for("both Jobs reconciled", lambda: controller.metric(
            "jobrules_controller_reconcile_total", kind="batchjob") >= 2, timeout=60)
        remote = apiserver.get(kube, apiserver.JOBS.path(queue, "remote"))
    ours = {k for k in (remote["metadata"].get("annotations") or {}) if "jobrules" in k}
    assert ours == set(), remote["metadata"]["annotations"]
    assert not [c for c in (remote.get("status") or {}).get("conditions") or []
                if c["type"] == "JobRulesVerdict"]
    assert controllers.events_of(kube, queue, "remote") == []
    # The same failure on our own Job: the policy restarts it (the verdict says so, decided in
    # the same reconcile as the restart).
    assert controllers.verdict(local)["phase"] == "Restarting"
    assert controllers.events_of(kube, queue, "local")


WORKLOADS = apiserver.Resource(KUEUE, "workloads")
JOB_PODS = "batch.kubernetes.io/job-name=train"
RESIZE_RULES = [cluster.REPO / "rules", cluster.REPO / "examples" / "oom-resize" / "resize.rules"]


def workloads(kube: Client, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's Workloads, by the label Kueue gives them."""
    uid = job["metadata"]["uid"]
    return kube.list(WORKLOADS.path(job["metadata"]["namespace"]),
                     query=[("labelSelector", f"kueue.x-k8s.io/job-uid={uid}")])["items"]


def admitted_at(kube: Client, job: dict[str, Any], size: tuple[str, str],
                container: str = "main") -> dict[str, Any]:
    """The job's one Workload once it is active and admitted with `size` memory (request,
    limit) for `container` in its one pod set."""
    def found() -> dict[str, Any] | None:
        listed = workloads(kube, job)
        if len(listed) != 1 or not listed[0]["spec"].get("active", True):
            return None
        [workload] = listed
        admitted = apiserver.condition(workload, "Admitted")
        [pod_set] = workload["spec"]["podSets"]
        named = next(c for c in pod_set["template"]["spec"]["containers"]
                     if c["name"] == container)
        if admitted and admitted["status"] == "True" and main_memory(named) == size:
            return workload
        return None
    return apiserver.wait_for(f"the Workload admitted with {size}", found, timeout=120)


def main_memory(container: dict[str, Any]) -> tuple[str, str]:
    resources = container["resources"]
    return resources["requests"]["memory"], resources["limits"]["memory"]


def running_pod(kube: Client, namespace: str, selector: str, size: str,
                container: str = "main") -> dict[str, Any]:
    """The pod of `selector` that KWOK runs, not going, once `container` has `size` memory."""
    def found() -> dict[str, Any] | None:
        for pod in apiserver.list_pods(kube, namespace, selector):
            named = next(c for c in pod["spec"]["containers"] if c["name"] == container)
            if (not pod["metadata"].get("deletionTimestamp")
                    and (pod.get("status") or {}).get("phase") == "Running"
                    and named["resources"]["limits"]["memory"] == size):
                return pod
        return None
    return apiserver.wait_for(f"a running pod of {selector} with {size}", found, timeout=120)


def workload_writes(plane: Session, namespace: str) -> list[tuple[str, Any]]:
    """Our controller's successful writes to Workloads (the audit log): verb and body."""
    assert plane.plane is not None
    return [(e.get("verb"), e.get("requestObject"))
            for e in audit.entries(plane.plane.audit_log, namespace)
            if (e.get("objectRef") or {}).get("resource") == "workloads"
            and audit.code(e) == 200
            and str(e.get("userAgent") or "").split("/", 1)[0] == "jobrules-controller"]


@pytest.fixture
def resize_plan(tmp_path: Path) -> Path:
    return controllers.compile_plan(RESIZE_RULES, tmp_path / "resize-plan.json")


def test_an_admitted_job_killed_for_memory_is_readmitted_at_the_new_size(
        plane: Session, kube: Client, queue: str, resize_plan: Path, tmp_path: Path) -> None:
    """Admitted and running on a KWOK node, its pod killed for memory (KWOK ends it 137
    OOMKilled, as a kubelet would): the restart deactivates the Job's Workload (Kueue evicts it
    and suspends the Job), waits for the pods to go, writes 1.5 times the memory into the
    template and activates the Workload, which Kueue admits again at the new size; the Job runs
    again with it and succeeds."""
    path = apiserver.JOBS.path(queue, "train")
    grant(kube, queue, "4")
    template = apiserver.on_kwok({"metadata": {}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "busybox:1.36",
         "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                       "limits": {"memory": "256Mi"}}}]}}, outcome="run")
    with controllers.running(plane, resize_plan, queue, tmp_path) as controller:
        job = apiserver.create(kube, apiserver.JOBS, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": queue, "labels": {QUEUE_LABEL: "lq"}},
            "spec": {"backoffLimit": 6, "template": template}})
        first = admitted_at(kube, job, ("256Mi", "256Mi"))
        pod = running_pod(kube, queue, JOB_PODS, "256Mi")
        apiserver.change_outcome(kube, pod, outcome="oom-killed", after="0s", container="main")
        second = admitted_at(kube, job, ("384Mi", "384Mi"))
        again = running_pod(kube, queue, JOB_PODS, "384Mi")
        apiserver.change_outcome(kube, again, outcome="succeed", after="0s")
        done = controllers.wait_for_verdict(kube, path, "Succeeded", timeout=90)
        restarts = controller.metric("jobrules_controller_actions_total", action="restartJob",
                                     result="done")
    # read back from the pod the Job controller made after the restart
    assert [main_memory(c) for c in again["spec"]["containers"]] == [("384Mi", "384Mi")]
    assert restarts == 1
    assert done["spec"]["suspend"] is False
    # the Workload Kueue admitted at the new size is the Job's one, active again
    assert second["metadata"]["name"] == first["metadata"]["name"]
    assert second["spec"]["active"] is True
    said = [e["note"] for e in controllers.events_of(kube, queue, "train")
            if "memory" in (e.get("note") or "")]
    assert any("main: memory 256Mi -> 384Mi after OOMKilled, 1 of 2" in n for n in said), said
    if plane.plane is not None:   # the audit log: our writes to the Workload, once each
        assert workload_writes(plane, queue) == [("patch", {"spec": {"active": False}}),
                                                 ("patch", {"spec": {"active": True}})]


def test_an_admitted_pytorchjob_crash_looping_for_memory_is_readmitted_at_the_new_size(
        plane: Session, kube: Client, queue: str, resize_plan: Path, tmp_path: Path) -> None:
    """Under the training operator, `restartPolicy: OnFailure`: KWOK restarts the master's
    container killed for memory in place and it crash-loops (waiting CrashLoopBackOff, its last
    termination OOMKilled), which the cause "oom" matches (`on container restarted`). The
    restart goes through the PyTorchJob's Workload: Kueue suspends it and the operator removes
    its pods, the master's template gets 1.5 times the memory, and the Workload, activated, is
    admitted again at that size; the new master runs with it and the job succeeds."""
    if not plane.training_operator:
        pytest.fail("the training operator is not running (its binary is missing)")
    path = apiserver.PYTORCH_JOBS.path(queue, "train")
    grant(kube, queue, "4")
    template = apiserver.on_kwok({"metadata": {}, "spec": {"containers": [
        {"name": "pytorch", "image": "busybox:1.36",
         "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                       "limits": {"memory": "256Mi"}}}]}}, outcome="run")
    masters = "training.kubeflow.org/job-name=train,training.kubeflow.org/replica-type=master"
    with controllers.running(plane, resize_plan, queue, tmp_path) as controller:
        job = apiserver.create(kube, apiserver.PYTORCH_JOBS, {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": queue, "labels": {QUEUE_LABEL: "lq"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {
                "replicas": 1, "restartPolicy": "OnFailure", "template": template}}}})
        first = admitted_at(kube, job, ("256Mi", "256Mi"), container="pytorch")
        pod = running_pod(kube, queue, masters, "256Mi", container="pytorch")
        apiserver.change_outcome(kube, pod, outcome="oom-killed", after="1s", container="pytorch")
        second = admitted_at(kube, job, ("384Mi", "384Mi"), container="pytorch")
        again = running_pod(kube, queue, masters, "384Mi", container="pytorch")
        apiserver.change_outcome(kube, again, outcome="succeed", after="0s")
        done = controllers.wait_for_verdict(kube, path, "Succeeded", timeout=120)
        restarts = controller.metric("jobrules_controller_actions_total", action="restartJob",
                                     result="done")
    assert controllers.verdict(done)["reason"] == "PyTorchJobSucceeded"
    assert restarts == 1
    assert second["metadata"]["name"] == first["metadata"]["name"]
    said = [e["note"] for e in controllers.events_of(kube, queue, "train")
            if "memory" in (e.get("note") or "")]
    assert any("pytorch: memory 256Mi -> 384Mi after OOMKilled, 1 of 2" in n for n in said), said
    if plane.plane is not None:
        assert workload_writes(plane, queue) == [("patch", {"spec": {"active": False}}),
                                                 ("patch", {"spec": {"active": True}})]
