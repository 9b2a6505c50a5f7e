"""Restart with more memory on the real control plane: a batch Job whose pod is killed for memory
is suspended, its template's memory raised 1.5 times while suspended (Kubernetes 1.36 lets a
suspended Job's pod resources change), and resumed; the Job controller's new pod runs with the new
size. Twice, then the pod succeeds; in another Job a third kill for memory, past the budget,
fails it, with the cause and its hint in the verdict and the condition. Pods stay off the nodes: the test reports their lifecycle through `pods/status`, as a
kubelet would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support import apiserver, audit, controllers
import pytest


pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("controller_manager")]

RULES = [controllers.REPO / "rules", controllers.REPO / "examples" / "oom-resize" / "resize.rules"]


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    return controllers.compile_plan(RULES, tmp_path / "plan.json")


def training_job(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"backoffLimit": 6, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox:1.36",
                 "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}},
                {"name": "logs", "image": "busybox:1.36",
                 "resources": {"limits": {"memory": "64Mi"}}}]}}}}


def memory(pod: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["resources"]["limits"]["memory"] for c in pod["spec"]["containers"]}


def fresh_pod(api: Any, namespace: str, selector: str, container: str, size: str) -> dict[str, Any]:
    """The pod of `selector` that is not over nor going, once `container` has `size` memory."""
    def found() -> dict[str, Any] | None:
        for pod in apiserver.list_pods(api, namespace, selector):
            if (not pod["metadata"].get("deletionTimestamp")
                    and (pod.get("status") or {}).get("phase") in (None, "Pending")
                    and memory(pod)[container] == size):
                return pod
        return None
    return apiserver.wait_for(f"a pod of {selector} with {size} for {container}", found,
                              timeout=120)


def new_pod(api: Any, namespace: str, name: str, main: str) -> dict[str, Any]:
    """The Job's new pod, once container main has `main` memory."""
    return fresh_pod(api, namespace, f"batch.kubernetes.io/job-name={name}", "main", main)


def oom(api: Any, pod: dict[str, Any], container: str = "main") -> None:
    running = apiserver.report_running(api, pod)
    apiserver.report_oom_killed(api, running, container=container)


def test_a_job_killed_for_memory_twice_restarts_with_more_each_time_then_succeeds(
        control_plane: Any, api: Any, namespace: str, plan_file: Path, tmp_path: Path) -> None:
    path = apiserver.JOBS.path(namespace, "train")
    with controllers.running(control_plane, plan_file, namespace, tmp_path) as controller:
        apiserver.create(api, apiserver.JOBS, training_job(namespace, "train"))
        sizes = []
        for before, after in (("256Mi", "384Mi"), ("384Mi", "576Mi")):
            pod = new_pod(api, namespace, "train", before)
            sizes.append(memory(pod))
            oom(api, pod)
            new_pod(api, namespace, "train", after)
        last = new_pod(api, namespace, "train", "576Mi")
        sizes.append(memory(last))
        apiserver.report_succeeded(api, apiserver.report_running(api, last))
        done = controllers.wait_for_verdict(api, path, "Succeeded", timeout=60)
        restarts = controller.metric("jobrules_controller_actions_total", action="restartJob",
                                     result="done")
    # read back from the pods the Job controller made: only the container killed for memory grew
    assert sizes == [{"main": "256Mi", "logs": "64Mi"}, {"main": "384Mi", "logs": "64Mi"},
                     {"main": "576Mi", "logs": "64Mi"}]
    assert done["spec"]["suspend"] is False
    assert restarts == 2
    said = [e["note"] for e in controllers.events_of(api, namespace, "train")
            if "memory" in (e.get("note") or "")]
    assert any("main: memory 256Mi -> 384Mi after OOMKilled, 1 of 2" in n for n in said), said
    assert any("main: memory 384Mi -> 576Mi after OOMKilled, 2 of 2" in n for n in said), said


def test_a_third_kill_for_memory_past_the_budget_fails_the_job(
        control_plane: Any, api: Any, namespace: str, plan_file: Path, tmp_path: Path) -> None:
    path = apiserver.JOBS.path(namespace, "train")
    with controllers.running(control_plane, plan_file, namespace, tmp_path) as controller:
        apiserver.create(api, apiserver.JOBS, training_job(namespace, "train"))
        for size, then in (("256Mi", "384Mi"), ("384Mi", "576Mi"), ("576Mi", None)):
            oom(api, new_pod(api, namespace, "train", size))
            if then:
                new_pod(api, namespace, "train", then)
        failed = apiserver.wait_for_condition(api, path, "Failed", timeout=60)
        done = controllers.wait_for_verdict(api, path, "Failed")
        ours = apiserver.condition(done, "JobRulesVerdict")
        counted = apiserver.wait_for("the failure counted", lambda: controller.metric(
            "jobrules_failures_total", kind="batchjob", cause="oom"))
    assert counted == 1   # read back from the controller's /metrics
    verdict = controllers.verdict(done)
    assert failed["reason"] == verdict["reason"] == ours["reason"] == "OutOfMemory"
    # the cause and its hint (rules/causes.rules), in the verdict and in our condition
    assert (verdict["cause"], verdict["hint"]) == (
        "oom", "the container ran out of memory: raise its memory limit")
    assert "(cause oom: the container ran out of memory: raise its memory limit)" in ours["message"]


def resizes(log: Path, namespace: str) -> list[str]:
    """The new sizes of main written into the Job's template, one per successful patch."""
    out = []
    for body in audit.patches(log, namespace, "jobs", "train"):
        listed = (((body.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
        if listed:
            out.append(next(c for c in listed if c["name"] == "main")["resources"]["limits"]["memory"])
    return out


@pytest.mark.parametrize("fault", ["exit-after:act:1", "exit-after:act:2"])
def test_a_kill_9_mid_resize_writes_the_new_size_once(control_plane: Any, api: Any, namespace: str,
                                                      plan_file: Path, tmp_path: Path,
                                                      fault: str) -> None:
    """Killed after the suspension (act 1) or after the template's patch (act 2), before the
    resumption: the next controller goes on from the intent on the Job, and the size is raised
    once, by the factor once (the audit log)."""
    if control_plane.plane is None:
        pytest.skip("reads the audit log of a control plane the tests started")
    apiserver.create(api, apiserver.JOBS, training_job(namespace, "train"))
    with controllers.running(control_plane, plan_file, namespace, tmp_path, name="crashing",
                             JOBRULES_TEST_HOOKS="1", JOBRULES_FAULT=fault) as crashing:
        oom(api, new_pod(api, namespace, "train", "256Mi"))
        apiserver.wait_for("the fault's exit", lambda: crashing.process.poll() is not None, 60)
        assert crashing.process.returncode == 137, crashing.logs()
    stopped = apiserver.get(api, apiserver.JOBS.path(namespace, "train"))
    assert stopped["spec"]["suspend"] is True            # it died before the resumption
    with controllers.running(control_plane, plan_file, namespace, tmp_path, name="replay"):
        pod = new_pod(api, namespace, "train", "384Mi")
        apiserver.report_succeeded(api, apiserver.report_running(api, pod))
        controllers.wait_for_verdict(api, apiserver.JOBS.path(namespace, "train"), "Succeeded", 60)
    assert resizes(control_plane.plane.audit_log, namespace) == ["384Mi"]
    assert memory(pod) == {"main": "384Mi", "logs": "64Mi"}


def pytorch_job(namespace: str) -> dict[str, Any]:
    def replica() -> dict[str, Any]:
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "busybox:1.36",
             "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}}}


def replica_pod(api: Any, namespace: str, role: str, size: str) -> dict[str, Any]:
    """The PyTorchJob's new pod of `role`, once its container has `size` memory."""
    return fresh_pod(api, namespace, f"training.kubeflow.org/replica-type={role}", "pytorch", size)


@pytest.mark.usefixtures("training_operator")
def test_a_pytorchjob_master_killed_for_memory_restarts_with_more_in_its_template_only(
        control_plane: Any, api: Any, namespace: str, plan_file: Path, tmp_path: Path) -> None:
    """Under the real training operator, `restartPolicy: OnFailure`: the kubelet restarts the
    master's container killed for memory in place, and the policy (`on container restarted`)
    restarts the job with the master's template grown, the worker's as it was."""
    path = apiserver.PYTORCH_JOBS.path(namespace, "train")
    with controllers.running(control_plane, plan_file, namespace, tmp_path):
        apiserver.create(api, apiserver.PYTORCH_JOBS, pytorch_job(namespace))
        replica_pod(api, namespace, "worker", "256Mi")
        killed = apiserver.report_running(api, replica_pod(api, namespace, "master", "256Mi"))
        apiserver.report_oom_restarted(api, killed, container="pytorch")
        master = replica_pod(api, namespace, "master", "384Mi")
        replica_pod(api, namespace, "worker", "256Mi")   # back too, at its own size
        specs = apiserver.get(api, path)["spec"]["pytorchReplicaSpecs"]
        assert [memory(specs[r]["template"])["pytorch"] for r in ("Master", "Worker")] == \
            ["384Mi", "256Mi"]
        apiserver.report_succeeded(api, apiserver.report_running(api, master))
        done = controllers.wait_for_verdict(api, path, "Succeeded", timeout=90)
    assert controllers.verdict(done)["reason"] == "PyTorchJobSucceeded"
