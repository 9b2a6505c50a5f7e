"""The controller on every shipped kind: a job from its real CRD and its pods, Running, then a pod
failure with an exit code (and, where the operator decides, the operator's own failure): the
verdict annotation, the condition, the status fields and an Event, each read back from the API
server. The batch/v1 Job controller and the Kubeflow training operator run here: the Kubeflow
jobs' pods are the operator's, run on KWOK nodes, and the operator writes their conditions. The
other operators do not run here: their status is written through the API, as they would write
it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import controllers
from support import apiserver
import pytest

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
NOW = "2024-05-01T12:00:00Z"


def cond(type_: str, status: str, reason: str, message: str) -> Obj:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": apiserver._now(), "lastUpdateTime": apiserver._now()}


def set_status(api: Any, resource: apiserver.Resource, job: Obj, status: Obj, subresource: bool = True) -> None:
    meta = job["metadata"]
    api.merge_patch(resource.path(meta["namespace"], meta["name"], "status" if subresource else None),
                    {"status": status})


def pod_of(job: Obj, name: str, labels: dict[str, str], containers: tuple[str, ...] = ("main",)) -> Obj:
    meta = job["metadata"]
    return apiserver.pod_manifest(meta["namespace"], name, owner=job, labels=labels, containers=containers)


@dataclasses.dataclass(frozen=True)
class Scenario:
    kind: str                                   # the shipped kind's name
    resource: apiserver.Resource
    manifest: Callable[[str], Obj]              # namespace -> job
    pods: Callable[[Obj], list[Obj]]            # the job -> its pods (none: the operator makes them)
    running: Callable[[Any, Obj, list[Obj]], None]
    failing: Callable[[Any, Obj, list[Obj]], None]
    reason: str                                 # of the Failed verdict
    message: str                                # a part of its message
    condition: str | None = "JobRulesVerdict"
    check_status: Callable[[Obj], None] | None = None
    training_operator: bool = False             # the real operator runs the job


def _pods_running(api: Any, job: Obj, pods: list[Obj]) -> None:
    for p in pods:
        apiserver.report_running(api, apiserver.get(api, apiserver.PODS.path(p["metadata"]["namespace"], p["metadata"]["name"])))


def _first_pod_fails(code: int, reason: str = "Error") -> Callable[[Any, Obj, list[Obj]], None]:
    def fail(api: Any, job: Obj, pods: list[Obj]) -> None:
        p = pods[0]
        apiserver.report_failed(api, apiserver.get(api, apiserver.PODS.path(p["metadata"]["namespace"], p["metadata"]["name"])),
                           exit_code=code, reason=reason)
    return fail


def _then(*steps: Callable[[Any, Obj, list[Obj]], None]) -> Callable[[Any, Obj, list[Obj]], None]:
    def run(api: Any, job: Obj, pods: list[Obj]) -> None:
        for step in steps:
            step(api, job, pods)
    return run


def _operator(resource: apiserver.Resource, status: Callable[[Obj], Obj], subresource: bool = True
              ) -> Callable[[Any, Obj, list[Obj]], None]:
    def write(api: Any, job: Obj, pods: list[Obj]) -> None:
        set_status(api, resource, job, status(job), subresource)
    return write


# -- the kinds ----------------------------------------------------------------------------------

VOLCANO = apiserver.Resource("batch.volcano.sh/v1alpha1", "jobs")
TFJOBS = apiserver.Resource("kubeflow.org/v1", "tfjobs")
PYTORCHJOBS = apiserver.Resource("kubeflow.org/v1", "pytorchjobs")
MPIJOBS = apiserver.Resource("kubeflow.org/v1", "mpijobs")
JOBSETS = apiserver.Resource("jobset.x-k8s.io/v1alpha2", "jobsets")
WORKFLOWS = apiserver.Resource("argoproj.io/v1alpha1", "workflows")
PIPELINERUNS = apiserver.Resource("tekton.dev/v1", "pipelineruns")

TEMPLATE = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}


def _kubeflow(kind: str, replicas: str, container: str, master: str) -> Callable[[str], Obj]:
    def manifest(ns: str) -> Obj:
        # Its pod runs on KWOK until the test makes it fail (_master_fails).
        template = apiserver.on_kwok({"spec": {"containers": [{"name": container, "image": "busybox"}]}},
                                outcome="run")
        return {"apiVersion": "kubeflow.org/v1", "kind": kind,
                "metadata": {"name": "train", "namespace": ns},
                "spec": {replicas: {master: {"replicas": 1, "restartPolicy": "Never",
                                             "template": template}}}}
    return manifest


def _masters(api: Any, job: Obj, master: str) -> list[Obj]:
    return apiserver.list_pods(api, job["metadata"]["namespace"],
                          f"training.kubeflow.org/job-name={job['metadata']['name']},"
                          f"training.kubeflow.org/replica-type={master.lower()}")


def _master_runs(master: str) -> Callable[[Any, Obj, list[Obj]], None]:
    def run(api: Any, job: Obj, pods: list[Obj]) -> None:
        # The operator, the scheduler and KWOK each react in turn: on a loaded 2-core machine
        # this took over 30 s once.
        apiserver.wait_for(f"the operator's {master} pod to run", lambda: any(
            p["status"].get("phase") == "Running" for p in _masters(api, job, master)), timeout=90)
    return run


def _master_fails(master: str) -> Callable[[Any, Obj, list[Obj]], None]:
    def fail(api: Any, job: Obj, pods: list[Obj]) -> None:
        [pod] = _masters(api, job, master)
        apiserver.change_outcome(api, pod, outcome="exit-code", exit_code=1, after="0s")
    return fail


def _kubeflow_scenario(name: str, kind: str, replicas: str, container: str, master: str,
                       resource: apiserver.Resource, reason: str | None = None) -> Scenario:
    return Scenario(
        name, resource, _kubeflow(kind, replicas, container, master), lambda job: [],
        _master_runs(master), _master_fails(master), reason or f"{kind}Failed",
        f"1 {master} replica(s) failed", training_operator=True)


def _volcano_status(job: Obj) -> None:
    state = job["status"]["state"]
    assert state["phase"] == "Failed" and state["reason"] == "PodFailed"
    assert "container main Error (exit 3)" in state["message"]


def _job_pod_runs(api: Any, job: Obj, pods: list[Obj]) -> None:
    [pod] = apiserver.job_pods(api, job)
    apiserver.report_running(api, pod)


def _job_pod_fails(api: Any, job: Obj, pods: list[Obj]) -> None:
    [pod] = apiserver.job_pods(api, job)
    apiserver.report_failed(api, apiserver.get(api, apiserver.PODS.path(pod["metadata"]["namespace"],
                                                          pod["metadata"]["name"])), exit_code=3)


SCENARIOS = [
    # The Job controller runs here: it creates the pod and fails the Job itself.
    Scenario("batchjob", apiserver.JOBS, lambda ns: apiserver.job_manifest(ns, "train", backoff_limit=0),
             lambda job: [], _job_pod_runs, _job_pod_fails, "BackoffLimitExceeded",
             "Job has reached the specified backoff limit"),
    Scenario(
        "vcjob", VOLCANO,
        lambda ns: {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                    "metadata": {"name": "train", "namespace": ns},
                    "spec": {"minAvailable": 1, "tasks": [{"name": "master", "replicas": 1,
                                                           "template": TEMPLATE}]}},
        lambda job: [pod_of(job, "train-master-0", {"volcano.sh/job-name": "train",
                                                   "volcano.sh/task-spec": "master"})],
        _then(_pods_running, _operator(VOLCANO, lambda job: {"state": {"phase": "Running"}})),
        _first_pod_fails(3),
        "PodFailed", "task master pod train-master-0: container main Error (exit 3)",
        condition=None, check_status=_volcano_status),
    _kubeflow_scenario("tfjob", "TFJob", "tfReplicaSpecs", "tensorflow", "Chief", TFJOBS),
    _kubeflow_scenario("pytorchjob", "PyTorchJob", "pytorchReplicaSpecs", "pytorch", "Master",
                       PYTORCHJOBS),
    # v1.8.1 names the kind twice in the reason of an MPIJob's Failed condition.
    _kubeflow_scenario("mpijob", "MPIJob", "mpiReplicaSpecs", "main", "Launcher", MPIJOBS,
                       reason="MPIJobMPIJobFailed"),
    Scenario(
        "jobset", JOBSETS,
        lambda ns: {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "metadata": {"name": "train", "namespace": ns},
                    "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                        "spec": {"template": TEMPLATE}}}]}},
        lambda job: [apiserver.pod_manifest(job["metadata"]["namespace"], "train-workers-0-0-x", labels={
            "jobset.sigs.k8s.io/jobset-name": "train",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers"})],
        _pods_running,
        _then(_first_pod_fails(2), _operator(JOBSETS, lambda job: {"conditions": [
            cond("Failed", "True", "FailedJobs", "jobset failed due to one or more job failures")]})),
        "FailedJobs", "jobset failed due to one or more job failures"),
    Scenario(
        "workflow", WORKFLOWS,
        lambda ns: {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "train", "namespace": ns},
                    "spec": {"entrypoint": "main", "templates": [{"name": "main",
                                                                 "container": {"image": "busybox"}}]}},
        lambda job: [pod_of(job, "train-main-1", {"workflows.argoproj.io/workflow": "train"},
                            ("wait", "main"))],
        _then(_pods_running, _operator(WORKFLOWS, lambda job: {"phase": "Running"}, subresource=False)),
        _then(_first_pod_fails(4), _operator(WORKFLOWS, lambda job: {
            "phase": "Failed", "message": "child 'train-main-1' failed"}, subresource=False)),
        "Failed", "child 'train-main-1' failed", condition=None),
    Scenario(
        "pipelinerun", PIPELINERUNS,
        lambda ns: {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun",
                    "metadata": {"name": "build", "namespace": ns},
                    "spec": {"pipelineRef": {"name": "build"}}},
        lambda job: [apiserver.pod_manifest(job["metadata"]["namespace"], "build-compile-pod", labels={
            "tekton.dev/pipelineRun": "build", "tekton.dev/pipelineTask": "compile"},
            containers=("step-compile",))],
        _then(_pods_running, _operator(PIPELINERUNS, lambda job: {"conditions": [
            cond("Succeeded", "Unknown", "Running", "Tasks Completed: 0 (Failed: 0), Incomplete: 1")]})),
        _then(_first_pod_fails(1), _operator(PIPELINERUNS, lambda job: {"conditions": [
            cond("Succeeded", "False", "Failed", "Tasks Completed: 1 (Failed: 1, Cancelled 0)")]})),
        "Failed", "Tasks Completed: 1 (Failed: 1", condition=None),
]


def _holds(check: Callable[[Obj], None] | None, obj: Obj) -> bool:
    try:
        check(obj)  # type: ignore[misc]
    except (AssertionError, KeyError):
        return False
    return True


@pytest.fixture(scope="module")
def shipped_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return controllers.compile_plan(controllers.REPO / "rules",
                                    tmp_path_factory.mktemp("plan") / "plan.json")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.kind)
def test_verdict_written_back(control_plane: Any, api: Any, namespace: str, shipped_plan: Path,
                              tmp_path: Path, scenario: Scenario) -> None:
    verdict_written_back(control_plane, api, namespace, shipped_plan, tmp_path, scenario)


def verdict_written_back(control_plane: Any, api: Any, namespace: str, plan: Path, tmp_path: Path,
                         scenario: Scenario, **env: str) -> None:
    """The scenario's job Running, then Failed, with every write checked; `env` for the
    controller (its credentials, for one)."""
    if scenario.kind == "batchjob" and not control_plane.has_controller_manager:
        pytest.skip("kube-controller-manager is missing (KUBEBUILDER_ASSETS has none)")
    if scenario.training_operator and not (control_plane.training_operator and control_plane.nodes):
        pytest.skip("the training operator or the KWOK nodes for its pods are missing")
    job = apiserver.create(api, scenario.resource, scenario.manifest(namespace))
    pods = [apiserver.create(api, apiserver.PODS, p) for p in scenario.pods(job)]
    path = scenario.resource.path(namespace, job["metadata"]["name"])
    with controllers.running(control_plane, plan, namespace, tmp_path, **env) as controller:
        scenario.running(api, job, pods)
        running = controllers.wait_for_verdict(api, path, "Running")
        assert controllers.annotation(running, "jobrules.dev/state")
        scenario.failing(api, job, pods)
        failed = controllers.wait_for_verdict(api, path, "Failed")
        verdict = controllers.verdict(failed)
        assert verdict["reason"] == scenario.reason
        assert scenario.message in verdict["message"]
        assert "rules/" in verdict["rule"] and verdict["rule"].count(":") == 2
        if scenario.condition is not None:   # written after the annotations: wait for it
            written = apiserver.wait_for(f"condition {scenario.condition}", lambda: (
                c if (c := apiserver.condition(apiserver.get(api, path), scenario.condition or ""))
                and c["status"] == "True" else None))
            assert (written["status"], written["reason"]) == ("True", scenario.reason)
            assert scenario.message in written["message"]
        else:
            assert apiserver.condition(failed, "JobRulesVerdict") is None
        if scenario.check_status is not None:
            apiserver.wait_for("the status fields", lambda: _holds(scenario.check_status, apiserver.get(api, path)))
        # the phase label: `kubectl get KIND -L jobrules.dev/phase`, and `-l` selects by it
        assert failed["metadata"]["labels"]["jobrules.dev/phase"] == "Failed"
        selected = api.get(scenario.resource.path(namespace),
                           query=[("labelSelector", "jobrules.dev/phase=Failed")])["items"]
        assert [o["metadata"]["name"] for o in selected] == [job["metadata"]["name"]]
        reasons = apiserver.wait_for("the verdict Event", lambda: [
            e for e in controllers.events_of(api, namespace, job["metadata"]["name"])
            if e["action"] == "Verdict" and e["reason"] == scenario.reason])
        assert reasons[0]["type"] == "Warning" and scenario.message in reasons[0]["note"]
        assert "Traceback" not in controller.logs()
