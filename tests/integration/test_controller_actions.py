"""Actions exactly once, on the real control plane, judged by the API server's audit log: at most
one deletion per pod uid, deletions equal to the budget spent, one created object per intent.
It holds at every crash point, through a soak of SIGKILLs, under a 409 storm, across an API
server restart, with the watch expired while the controller was stopped, and with two
controllers at once; and end to end on the Job controller and on Volcano's Commands."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

from support import audit
from support import controllers
from support import apiserver
import pytest
from devkit import cluster

pytestmark = pytest.mark.integration

VOLCANO = apiserver.Resource("batch.volcano.sh/v1alpha1", "jobs")
COMMANDS = apiserver.Resource("bus.volcano.sh/v1alpha1", "commands")
EVICTIONS = """
job trainer: batch.volcano.sh/v1alpha1 Job {
    pods owned
    pods label "volcano.sh/job-name" = <<metadata.name>>
    task label "volcano.sh/task-spec"
    failed     when any pod failed
               reason "PodFailed"
    running    when any pod running
    pending    otherwise
    on pod evicted -> restart pod max 3 then fail job reason "TooManyEvictions"
    status {
        no condition
    }
}
"""


def needs_plane(session: Any) -> Any:
    if session.plane is None:
        pytest.skip("the audit log is read from a control plane this session started")
    return session.plane


def volcano_job(api: Any, namespace: str, name: str = "train") -> dict[str, Any]:
    return apiserver.create(api, VOLCANO, {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "tasks": [{"name": "worker", "replicas": 1, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}]}})


def worker(api: Any, job: dict[str, Any], n: int) -> dict[str, Any]:
    """A running pod of the job, as Volcano would make it (a new name each time)."""
    meta = job["metadata"]
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(
        meta["namespace"], f"{meta['name']}-worker-{n}", owner=job,
        labels={"volcano.sh/job-name": meta["name"], "volcano.sh/task-spec": "worker"}))
    return apiserver.report_running(api, pod)


def gone(api: Any, pod: dict[str, Any]) -> bool:
    meta = pod["metadata"]
    return not apiserver.exists(api, apiserver.PODS.path(meta["namespace"], meta["name"]))


def journal(api: Any, job: dict[str, Any]) -> str | None:
    meta = job["metadata"]
    return controllers.annotation(apiserver.get(api, VOLCANO.path(meta["namespace"], meta["name"])),
                                  "jobrules.dev/intents")


def budget(api: Any, job: dict[str, Any]) -> int:
    meta = job["metadata"]
    text = controllers.annotation(apiserver.get(api, VOLCANO.path(meta["namespace"], meta["name"])),
                                  "jobrules.dev/state")
    return (json.loads(text).get("budgets") or {}).get("podEvicted#0", 0) if text else 0


@pytest.fixture
def eviction_plan(tmp_path: Path) -> Path:
    return controllers.compile_plan(EVICTIONS, tmp_path / "plan.json")


FAULTS = ["exit-after:commit", "exit-after:act:1", "exit-before:clear"]


@pytest.mark.parametrize("fault", FAULTS)
def test_every_crash_point(control_plane: Any, api: Any, namespace: str, eviction_plan: Path,
                           tmp_path: Path, fault: str) -> None:
    plane = needs_plane(control_plane)
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, eviction_plan, namespace, tmp_path, name="crashing",
                             JOBRULES_TEST_HOOKS="1", JOBRULES_FAULT=fault) as crashing:
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        apiserver.report_evicted(api, pod)
        apiserver.wait_for("the fault's exit", lambda: crashing.process.poll() is not None, 30)
        assert crashing.process.returncode == 137, crashing.logs()
    with controllers.running(control_plane, eviction_plan, namespace, tmp_path, name="replay"):
        apiserver.wait_for("the pod deleted", lambda: gone(api, pod))
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None)
    assert audit.pod_removals(plane.audit_log, namespace) == {pod["metadata"]["uid"]: 1}
    assert budget(api, job) == 1
    # The controller names itself: its User-Agent in the audit log, its fieldManager on the job.
    assert audit.removers(plane.audit_log, namespace) == {"jobrules-controller"}
    stored = apiserver.get(api, VOLCANO.path(namespace, "train"))
    managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
    assert "jobrules-controller" in managers and "OpenAPI-Generator" not in managers


def test_a_soak_of_kill_9_through_evictions(control_plane: Any, api: Any, namespace: str,
                                            eviction_plan: Path, tmp_path: Path) -> None:
    """Four evictions (the budget is three), the controller killed 52 times at random moments
    meanwhile: three deletions, one per evicted pod, and the fallback's verdict."""
    plane = needs_plane(control_plane)
    job = volcano_job(api, namespace)
    rng = random.Random(7)
    kills = 0
    evicted = []
    for n in range(4):
        pod = worker(api, job, n)
        apiserver.report_evicted(api, pod)
        evicted.append(pod)
        for _ in range(13):
            with controllers.running(control_plane, eviction_plan, namespace, tmp_path,
                                     name="soak", wait_ready=False) as controller:
                time.sleep(rng.uniform(0.2, 2.5))
                controller.kill(signal.SIGKILL)
                kills += 1
    with controllers.running(control_plane, eviction_plan, namespace, tmp_path, name="last"):
        done = controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Failed", 60)
        assert controllers.verdict(done)["reason"] == "TooManyEvictions"
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None)
    removals = audit.pod_removals(plane.audit_log, namespace)
    assert kills == 52
    assert set(removals) == {p["metadata"]["uid"] for p in evicted[:3]}, removals
    assert max(removals.values()) == 1 and sum(removals.values()) == budget(api, job) == 3


def test_a_409_storm(control_plane: Any, api: Any, namespace: str, eviction_plan: Path,
                     tmp_path: Path) -> None:
    """Another writer patches the job every few milliseconds while its pods are evicted."""
    plane = needs_plane(control_plane)
    job = volcano_job(api, namespace)
    stop = threading.Event()

    def storm() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                api.merge_patch(VOLCANO.path(namespace, "train"),
                                {"metadata": {"annotations": {"example.com/storm": str(n)}}})
            except Exception:
                pass
            time.sleep(0.005)

    thread = threading.Thread(target=storm, daemon=True)
    thread.start()
    try:
        with controllers.running(control_plane, eviction_plan, namespace, tmp_path) as controller:
            pods = [worker(api, job, n) for n in range(2)]
            for pod in pods:
                apiserver.report_evicted(api, pod)
            apiserver.wait_for("both pods deleted", lambda: all(gone(api, p) for p in pods), 60)
            apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None, 60)
            assert controller.metric("jobrules_controller_api_requests_total", code="409") > 0
    finally:
        stop.set()
        thread.join()
    removals = audit.pod_removals(plane.audit_log, namespace)
    assert removals == {p["metadata"]["uid"]: 1 for p in pods} and budget(api, job) == 2


def test_an_api_server_restart_mid_action(control_plane: Any, api: Any, namespace: str,
                                          eviction_plan: Path, tmp_path: Path) -> None:
    plane = needs_plane(control_plane)
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, eviction_plan, namespace, tmp_path):
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        apiserver.report_evicted(api, pod)
        cluster.restart(plane, "kube-apiserver")
        apiserver.wait_for("the pod deleted", lambda: gone(api, pod), 90)
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None, 90)
    assert audit.pod_removals(plane.audit_log, namespace) == {pod["metadata"]["uid"]: 1}


def test_a_watch_expired_while_the_controller_was_stopped(control_plane: Any, api: Any,
                                                          namespace: str, eviction_plan: Path,
                                                          tmp_path: Path) -> None:
    plane = needs_plane(control_plane)
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, eviction_plan, namespace, tmp_path) as controller:
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        controller.kill(signal.SIGSTOP)
        try:
            apiserver.report_evicted(api, pod)
            time.sleep(25)   # etcd compacts the versions it last saw away
            cluster.restart(plane, "kube-apiserver")
        finally:
            controller.kill(signal.SIGCONT)
        apiserver.wait_for("the pod deleted", lambda: gone(api, pod), 90)
        apiserver.wait_for("a relist", lambda: controller.metric("jobrules_controller_relists_total") > 0, 90)
    assert audit.pod_removals(plane.audit_log, namespace) == {pod["metadata"]["uid"]: 1}


def test_two_controllers_at_once(control_plane: Any, api: Any, namespace: str,
                                 eviction_plan: Path, tmp_path: Path) -> None:
    plane = needs_plane(control_plane)
    job = volcano_job(api, namespace)
    with controllers.running(control_plane, eviction_plan, namespace, tmp_path, name="one"), \
            controllers.running(control_plane, eviction_plan, namespace, tmp_path, name="two"):
        pods = [worker(api, job, n) for n in range(3)]
        for pod in pods:
            apiserver.report_evicted(api, pod)
        apiserver.wait_for("every pod deleted", lambda: all(gone(api, p) for p in pods), 60)
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None, 60)
    removals = audit.pod_removals(plane.audit_log, namespace)
    assert removals == {p["metadata"]["uid"]: 1 for p in pods} and budget(api, job) == 3


def test_a_relabelled_pod_is_not_taken_for_deleted(control_plane: Any, api: Any, namespace: str,
                                                   eviction_plan: Path, tmp_path: Path) -> None:
    plane = needs_plane(control_plane)
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, eviction_plan, namespace, tmp_path) as controller:
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        api.merge_patch(apiserver.PODS.path(namespace, pod["metadata"]["name"]),
                        {"metadata": {"labels": {"volcano.sh/job-name": None}}})
        apiserver.wait_for("the pod out of the watch", lambda: controller.metric(
            "jobrules_controller_store_objects",
            resource=f"pods/volcano.sh/job-name@{namespace}") == 0)
        time.sleep(3)
    assert not gone(api, pod)
    assert audit.pod_removals(plane.audit_log, namespace) == {}
    assert budget(api, job) == 0


# -- end to end on the operators' own machinery ------------------------------------------------

BATCH = """
job batchjob: batch/v1 Job {
    pods owned
    pods label "batch.kubernetes.io/controller-uid" = <<metadata.uid>>
    failed     when <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True']>>
               reason <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True'] | [0].reason>>
               message <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True'] | [0].message>>
    running    when any pod running
    pending    otherwise
    on pod failed exit 3 -> fail job reason "ExitThree" message "pod {pod} exited 3"
    on pod failed exit 4 -> restart job max 1
    actions {
        fail job    -> condition "FailureTarget"
        restart job -> set spec.suspend = true,
                       await no pod running and no pod pending within 2m,
                       set spec.suspend = false
    }
}
"""


@pytest.mark.usefixtures("controller_manager")
def test_fail_job_through_the_job_controller(control_plane: Any, api: Any, namespace: str,
                                             tmp_path: Path) -> None:
    plan = controllers.compile_plan(BATCH, tmp_path / "plan.json")
    with controllers.running(control_plane, plan, namespace, tmp_path):
        pod, failed = controllers.job_failed_by_exit_three(api, namespace)
        assert failed["message"].startswith(f"pod {pod['metadata']['name']} exited 3")


@pytest.mark.usefixtures("controller_manager")
def test_restart_job_suspends_then_resumes_once(control_plane: Any, api: Any, namespace: str,
                                                tmp_path: Path) -> None:
    plane = needs_plane(control_plane)
    plan = controllers.compile_plan(BATCH, tmp_path / "plan.json")
    with controllers.running(control_plane, plan, namespace, tmp_path):
        job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "train", backoff_limit=6))
        [first] = apiserver.job_pods(api, job)
        apiserver.report_running(api, first)
        apiserver.report_failed(api, apiserver.get(api, apiserver.PODS.path(namespace, first["metadata"]["name"])),
                           exit_code=4)
        path = apiserver.JOBS.path(namespace, "train")

        def resumed_with_a_new_pod() -> bool:
            pods = apiserver.list_pods(api, namespace, f"batch.kubernetes.io/job-name=train")
            return apiserver.get(api, path)["spec"].get("suspend") is False and any(
                p["metadata"]["uid"] != first["metadata"]["uid"] for p in pods)

        apiserver.wait_for("suspended, then resumed with a new pod", resumed_with_a_new_pod, 90)
        apiserver.wait_for("the journal cleared", lambda: controllers.annotation(
            apiserver.get(api, path), "jobrules.dev/intents") is None)
    suspends = [(p.get("spec") or {}).get("suspend") for p in audit.patches(
        plane.audit_log, namespace, "jobs", "train") if "suspend" in (p.get("spec") or {})]
    assert suspends == [True, False]


def test_a_volcano_command_once_per_intent(control_plane: Any, api: Any, namespace: str,
                                           tmp_path: Path) -> None:
    """`restart job` on the shipped Volcano rules: a RestartJob Command named from the intent,
    made once though the controller dies right after making it and replays its journal, and
    not made again once Volcano took it (deleted it, restarted the job: a new status)."""
    plane = needs_plane(control_plane)
    plan = controllers.compile_plan(controllers.volcano_restart_rules(tmp_path), tmp_path / "plan.json")
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, plan, namespace, tmp_path, name="crashing",
                             JOBRULES_TEST_HOOKS="1", JOBRULES_FAULT="exit-after:act:1") as crashing:
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        apiserver.report_evicted(api, pod)
        apiserver.wait_for("the fault's exit", lambda: crashing.process.poll() is not None, 30)
    [command] = apiserver.get(api, COMMANDS.path(namespace))["items"]
    assert command["metadata"]["name"].startswith("jr-")
    assert command["action"] == "RestartJob"
    assert (command["target"]["kind"], command["target"]["name"], command["target"]["uid"]) == \
        ("Job", "train", job["metadata"]["uid"])
    with controllers.running(control_plane, plan, namespace, tmp_path, name="replay"):
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None)
    assert audit.created(plane.audit_log, namespace, "commands") == {command["metadata"]["name"]: 1}
    # Volcano takes it: deletes it, restarts the job (a new retry count); a second eviction is a
    # new decision and a second Command.
    apiserver.delete(api, COMMANDS.path(namespace, command["metadata"]["name"]))
    api.merge_patch(VOLCANO.path(namespace, "train", "status"),
                    {"status": {"retryCount": 1, "state": {"phase": "Running"}}})
    with controllers.running(control_plane, plan, namespace, tmp_path, name="after"):
        second = worker(api, job, 1)
        apiserver.report_evicted(api, second)
        apiserver.wait_for("a second Command", lambda: len(audit.created(
            plane.audit_log, namespace, "commands")) == 2, 30)
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None)
    assert set(audit.created(plane.audit_log, namespace, "commands").values()) == {1}


# -- Kubeflow, on the real training operator ---------------------------------------------------

PYTORCH_JOBS = apiserver.Resource("kubeflow.org/v1", "pytorchjobs")


def pytorch_rules(tmp_path: Path, policy: str) -> Path:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "pytorchjob.rules").write_text(
        (controllers.REPO / "rules" / "pytorchjob.rules").read_text())
    (rules / "ours.rules").write_text(f"extend pytorchjob {{\n    {policy}\n}}\n")
    return controllers.compile_plan(rules, tmp_path / "plan.json")


def running_pytorch_job(api: Any, namespace: str, name: str) -> dict[str, Any]:
    replica = {"replicas": 1, "restartPolicy": "Never", "template": apiserver.on_kwok(
        {"spec": {"containers": [{"name": "pytorch", "image": "busybox:1.36"}]}}, outcome="run")}
    return apiserver.create(api, PYTORCH_JOBS, {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": {"cleanPodPolicy": "All"},
                 "pytorchReplicaSpecs": {"Master": replica, "Worker": dict(replica)}}})


@pytest.mark.usefixtures("training_operator")
def test_fail_job_through_the_training_operator(control_plane: Any, api: Any, namespace: str,
                                                tmp_path: Path) -> None:
    """Our `Failed` condition is the operator's end of the job: it cleans the pods up (all, as
    the job's cleanPodPolicy says) and keeps our reason."""
    plan = pytorch_rules(tmp_path, 'on job running longer than 3s -> fail job reason "TooLong"')
    path = PYTORCH_JOBS.path(namespace, "train")
    with controllers.running(control_plane, plan, namespace, tmp_path):
        running_pytorch_job(api, namespace, "train")
        apiserver.wait_for_pods(api, namespace, "training.kubeflow.org/job-name=train", 2)
        failed = apiserver.wait_for_condition(api, path, "Failed", 60)
        assert failed["reason"] == "TooLong"
        apiserver.wait_for("the operator to clean the pods up", lambda: not apiserver.list_pods(
            api, namespace, "training.kubeflow.org/job-name=train"), 60)
        done = controllers.wait_for_verdict(api, path, "Failed")
        assert controllers.verdict(done)["reason"] == "TooLong"
        assert apiserver.condition(apiserver.get(api, path), "Failed")["reason"] == "TooLong"


@pytest.mark.usefixtures("training_operator")
def test_restart_job_through_the_training_operator(control_plane: Any, api: Any, namespace: str,
                                                   tmp_path: Path) -> None:
    """`spec.runPolicy.suspend` true, the operator deletes the pods, false, it makes new ones:
    once, for a budget of one."""
    plane = needs_plane(control_plane)
    plan = pytorch_rules(tmp_path, "on job running longer than 3s -> restart job max 1")
    path = PYTORCH_JOBS.path(namespace, "train")
    selector = "training.kubeflow.org/job-name=train"
    with controllers.running(control_plane, plan, namespace, tmp_path):
        running_pytorch_job(api, namespace, "train")
        first = {p["metadata"]["uid"] for p in apiserver.wait_for_pods(api, namespace, selector, 2)}
        apiserver.wait_for("two new pods", lambda: len(
            {p["metadata"]["uid"] for p in apiserver.list_pods(api, namespace, selector)} - first) == 2, 90)
        apiserver.wait_for("the journal cleared", lambda: controllers.annotation(
            apiserver.get(api, path), "jobrules.dev/intents") is None, 30)
        time.sleep(6)   # past the second run's 3 s: the budget is spent, nothing more happens
        assert not apiserver.get(api, path)["spec"]["runPolicy"].get("suspend")
    suspends = [p["spec"]["runPolicy"]["suspend"] for p in audit.patches(
        plane.audit_log, namespace, "pytorchjobs", "train")
        if "suspend" in ((p.get("spec") or {}).get("runPolicy") or {})]
    assert suspends == [True, False]
