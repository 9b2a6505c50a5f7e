"""The Kubeflow training operator, built from its module and run against the API server: it creates
the pods of PyTorchJobs and TFJobs, the scheduler places them on KWOK nodes, KWOK runs them as
their stages say, and the operator writes its own conditions. The shipped rules are evaluated on
the objects read back, and must agree with the operator."""

from __future__ import annotations

from datetime import datetime, timezone

from support import apiserver
import pytest

from devkit import cluster
from rulec import api as rulec_api
from runtime import evaluator, plan
from runtime.controller.kube import Denied

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("training_operator")]


@pytest.fixture(scope="module")
def shipped() -> plan.Plan:
    built = rulec_api.build([str(cluster.REPO / "rules")])
    assert not built.errors, built.errors
    return plan.load(built.plan)


def replica(container: str, replicas: int = 1, restart_policy: str = "Never",
            **stages: object) -> apiserver.Obj:
    template = {"spec": {"containers": [{"name": container, "image": "busybox:1.36"}]}}
    return {"replicas": replicas, "restartPolicy": restart_policy,
            "template": apiserver.on_kwok(template, **stages)}


def pytorch_job(namespace: str, name: str, *, master: apiserver.Obj, workers: apiserver.Obj) -> apiserver.Obj:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": master, "Worker": workers}}}


def verdict(api, shipped: plan.Plan, job: apiserver.Obj) -> evaluator.Verdict:
    """The shipped rules' verdict on ``job`` and the pods read back with it."""
    pods = evaluator.pods_of(shipped, job, apiserver.list_pods(api, job["metadata"]["namespace"]))
    return evaluator.evaluate(shipped, job, pods, None, datetime.now(timezone.utc)).verdict


def test_an_oom_killed_master_fails_the_pytorchjob_and_the_rules_agree(api, namespace, kwok_nodes,
                                                                       shipped):
    job = apiserver.create(api, apiserver.PYTORCH_JOBS, pytorch_job(
        namespace, "train", master=replica("pytorch", outcome="oom-killed", after="2s"),
        workers=replica("pytorch", replicas=2, outcome="run")))
    path = apiserver.PYTORCH_JOBS.path(namespace, "train")

    apiserver.wait_for_condition(api, path, "Running")
    running = apiserver.get(api, path)
    assert verdict(api, shipped, running).phase == "Running"
    failed = apiserver.wait_for_condition(api, path, "Failed")

    pods = {p["metadata"]["name"]: p for p in apiserver.list_pods(api, namespace)}
    assert set(pods) == {"train-master-0", "train-worker-0", "train-worker-1"}
    for pod in pods.values():
        assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert pod["spec"]["nodeName"] in kwok_nodes
    [pytorch] = pods["train-master-0"]["status"]["containerStatuses"]
    assert pytorch["state"]["terminated"]["reason"] == "OOMKilled"
    assert pytorch["state"]["terminated"]["exitCode"] == 137
    assert failed["reason"] == "PyTorchJobFailed"
    assert "1 Master replica(s) failed" in failed["message"]
    judged = verdict(api, shipped, apiserver.get(api, path))
    assert (judged.phase, judged.reason, judged.message) == (
        "Failed", failed["reason"], failed["message"])


def test_a_pytorchjob_whose_replicas_succeed_succeeds_and_the_rules_agree(api, namespace, shipped):
    apiserver.create(api, apiserver.PYTORCH_JOBS, pytorch_job(
        namespace, "done", master=replica("pytorch", after="1s"),
        workers=replica("pytorch", after="1s")))
    path = apiserver.PYTORCH_JOBS.path(namespace, "done")

    succeeded = apiserver.wait_for_condition(api, path, "Succeeded")

    assert succeeded["reason"] == "PyTorchJobSucceeded"
    judged = verdict(api, shipped, apiserver.get(api, path))
    assert (judged.phase, judged.reason) == ("Succeeded", "PyTorchJobSucceeded")


def test_a_retryable_exit_code_makes_the_operator_replace_the_master(api, namespace, shipped):
    job = apiserver.create(api, apiserver.PYTORCH_JOBS, pytorch_job(
        namespace, "retry", master=replica("pytorch", restart_policy="ExitCode",
                                           outcome="oom-killed", after="1s"),
        workers=replica("pytorch", outcome="run")))
    selector = "training.kubeflow.org/job-name=retry,training.kubeflow.org/replica-type=master"
    [first] = apiserver.wait_for_pods(api, namespace, selector)

    # Watched, not polled: the operator may write Running over Restarting within milliseconds.
    restarting = apiserver.watch_for(api, apiserver.PYTORCH_JOBS, job, "the operator to report Restarting",
                                lambda job: (c := apiserver.condition(job, "Restarting")) is not None
                                and c["status"] == "True")

    judged = verdict(api, shipped, restarting)
    assert (judged.phase, judged.reason) == ("Restarting", "PyTorchJobRestarting")
    apiserver.wait_for("a new master pod", lambda: any(
        p["metadata"]["uid"] != first["metadata"]["uid"]
        for p in apiserver.list_pods(api, namespace, selector)))


def test_suspending_a_pytorchjob_stops_its_pods_and_resuming_restarts_them(api, namespace,
                                                                          shipped):
    apiserver.create(api, apiserver.PYTORCH_JOBS, pytorch_job(
        namespace, "pause", master=replica("pytorch", outcome="run"),
        workers=replica("pytorch", outcome="run")))
    path = apiserver.PYTORCH_JOBS.path(namespace, "pause")
    apiserver.wait_for_condition(api, path, "Running")

    def suspend(value: bool) -> None:
        api.merge_patch(path, {"spec": {"runPolicy": {"suspend": value}}})

    suspend(True)
    suspended = apiserver.wait_for_condition(api, path, "Suspended")
    apiserver.wait_for("the operator to delete the pods", lambda: not apiserver.list_pods(api, namespace))
    judged = verdict(api, shipped, apiserver.get(api, path))
    assert (judged.phase, judged.reason) == ("Suspended", suspended["reason"])

    suspend(False)
    apiserver.wait_for_condition(api, path, "Running")
    assert len(apiserver.wait_for_pods(api, namespace, "training.kubeflow.org/job-name=pause", 2)) == 2


def test_the_operators_webhook_rejects_an_invalid_pytorchjob(api, namespace):
    invalid = pytorch_job(namespace, "twice", master=replica("pytorch", replicas=2),
                          workers=replica("pytorch"))

    with pytest.raises(Denied) as rejected:
        apiserver.create(api, apiserver.PYTORCH_JOBS, invalid)

    assert rejected.value.status == 403
    assert "validator.pytorchjob.training-operator.kubeflow.org" in rejected.value.message
    assert "must be 1" in rejected.value.message


def test_a_tfjobs_pods_are_the_operators_and_are_collected_with_it(api, namespace):
    job = apiserver.create(api, apiserver.TF_JOBS, {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "owner", "namespace": namespace},
        "spec": {"tfReplicaSpecs": {"Worker": replica("tensorflow", replicas=2, outcome="run")}}})

    pods = apiserver.wait_for_pods(api, namespace, "training.kubeflow.org/job-name=owner", 2)

    assert all(p["metadata"]["ownerReferences"] == [apiserver.owner_reference(job)] for p in pods)
    apiserver.delete(api, apiserver.TF_JOBS.path(namespace, "owner"))
    apiserver.wait_for("the garbage collector to delete the operator's pods",
                  lambda: not apiserver.list_pods(api, namespace), timeout=60)
