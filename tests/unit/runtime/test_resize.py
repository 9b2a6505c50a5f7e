"""Restart with more memory, from the policy to the requests: the shipped batch Job's `restart
job` (suspend, wait for the pods to go, `resize spec.template`, resume) with a policy `restart
job with memory * 1.5 up to 1Gi max 2`, as the controller's pure core decides and carries it
out (runtime.reconcile, runtime.actions)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rulec import api, emit
from runtime import actions, intents, plan, projection, reconcile
from runtime.resources import Resize

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 4, 14, 0, tzinfo=timezone.utc)
UID = "0a0a0a0a-0000-4000-8000-00000000000a"
POLICY = """
extend batchjob {
    on pod failed reason "OOMKilled" -> restart job with memory * 1.5 up to 1Gi max 2
        then fail job reason "OutOfMemory" as "oom"
}
"""


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> plan.Kind:
    folder = tmp_path_factory.mktemp("rules")
    (folder / "oom.rules").write_text(POLICY)
    built = api.build([str(ROOT / "rules" / "batch-job.rules"), str(folder / "oom.rules")])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [k] = plan.loads(emit.dumps(built.plan)).kinds
    return k


def containers(main: str) -> list[dict[str, Any]]:
    return [{"name": "main", "image": "busybox",
             "resources": {"requests": {"memory": main, "cpu": "1"}, "limits": {"memory": main}}},
            {"name": "logs", "image": "busybox", "resources": {"limits": {"memory": "64Mi"}}}]


def job(main: str = "256Mi", suspend: bool = False) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": UID, "resourceVersion": "7",
                         "creationTimestamp": "2026-12-04T13:50:00Z"},
            "spec": {"suspend": suspend, "backoffLimit": 6, "template": {
                "metadata": {"labels": {"batch.kubernetes.io/controller-uid": UID}},
                "spec": {"restartPolicy": "Never", "containers": containers(main)}}}}


def oom_pod(name: str, main: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"{UID[:-2]}{name[-2:]}",
                         "labels": {"batch.kubernetes.io/controller-uid": UID},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "train", "uid": UID, "controller": True}]},
            "spec": {"restartPolicy": "Never", "containers": containers(main)},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
                {"name": "logs", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}


def test_the_decision_records_the_new_size_on_the_intent(kind: plan.Kind) -> None:
    writes = reconcile.reconcile(kind, job(), [oom_pod("train-a1", "256Mi")], NOW)
    [decided] = writes.new
    assert decided.action == "restartJob"
    assert decided.resize == (Resize("main", "256Mi", "384Mi"),)
    assert decided.message == "main: memory 256Mi -> 384Mi after OOMKilled, 1 of 2"
    assert writes.evaluation.verdict.phase == "Restarting"
    # written into the journal the commit carries, so a crash cannot lose it
    assert intents.decode(writes.commit["metadata"]["annotations"][intents.ANNOTATION]).intents \
        == (decided,)


def test_the_resize_step_writes_the_new_size_into_the_template(kind: plan.Kind) -> None:
    recipe = kind.recipe("restartJob")
    assert isinstance(recipe, tuple)
    step = next(i for i, s in enumerate(recipe) if isinstance(s, plan.ResizeTemplate))
    decided = intents.Intent("abc", "restartJob", "oom", "r:1:1", None, None,
                             resize=(Resize("main", "256Mi", "384Mi"),), step=step)
    suspended = job(suspend=True)
    done = actions.next_step(kind, decided, suspended, [], NOW, status_subresource=True)
    [request] = done.requests
    assert (request.method, request.path, request.guarded) == (
        "PATCH", "/apis/batch/v1/namespaces/ml/jobs/train", True)
    written = copy.deepcopy(suspended)
    written["spec"]["template"]["spec"].update(request.body["spec"]["template"]["spec"])
    assert written["spec"]["template"]["spec"]["containers"] == containers("384Mi")[:1] + \
        containers("256Mi")[1:]
    # sent again after a crash: the template has it already, nothing more is sent
    again = actions.next_step(kind, decided, written, [], NOW, status_subresource=True)
    assert again.done and again.note == "already so"
    # a plain restart (no new size) passes the step by
    plain = actions.next_step(kind, intents.Intent("abc", "restartJob", "p", "r:1:1", None, None,
                                                   step=step), suspended, [], NOW,
                              status_subresource=True)
    assert plain.done and plain.note == "no new size to write"


def test_each_failure_grows_from_the_size_the_pod_ran_with_then_the_budget_ends(
        kind: plan.Kind) -> None:
    """Two OOMs restart with 384Mi then 576Mi; the third fails the Job (the budget is 2)."""
    live = job()
    seen: list[tuple[str, tuple[Resize, ...]]] = []
    for n, size in enumerate(("256Mi", "384Mi", "576Mi")):
        writes = reconcile.reconcile(kind, live, [oom_pod(f"train-a{n}", size)], NOW)
        seen += [(i.action, i.resize) for i in writes.new]
        annotations = writes.commit["metadata"]["annotations"]
        live = copy.deepcopy(live)
        live["metadata"].setdefault("annotations", {}).update(
            {k: v for k, v in annotations.items() if k != intents.ANNOTATION and v is not None})
    assert seen == [("restartJob", (Resize("main", "256Mi", "384Mi"),)),
                    ("restartJob", (Resize("main", "384Mi", "576Mi"),)),
                    ("failJob", ())]
    assert writes.evaluation.verdict.phase == "Failed"
    assert writes.evaluation.verdict.reason == "OutOfMemory"


def test_the_controller_cache_keeps_what_the_resize_reads_and_writes(kind: plan.Kind) -> None:
    """The controller decides and writes from its cache's projected objects: the same new size,
    and a template patch that loses nothing of the containers (the patch replaces them whole)."""
    cut = projection.of_kind(kind)
    whole_job, whole_pod = job(), oom_pod("train-a1", "256Mi")
    whole_job["spec"]["template"]["spec"]["containers"][0].update(
        command=["python", "train.py"], env=[{"name": "A", "value": "1"}])
    projected_job = projection.project(whole_job, cut.job)
    projected_pod = projection.project(whole_pod, cut.pod)
    [decided] = reconcile.reconcile(kind, projected_job, [projected_pod], NOW).new
    assert decided.resize == (Resize("main", "256Mi", "384Mi"),)
    recipe = kind.recipe("restartJob")
    assert isinstance(recipe, tuple)
    step = next(i for i, s in enumerate(recipe) if isinstance(s, plan.ResizeTemplate))
    at_step = intents.Intent(decided.id, "restartJob", "oom", "r", None, None,
                             resize=decided.resize, step=step)
    from_cache = actions.next_step(kind, at_step, projected_job, [], NOW, status_subresource=True)
    from_whole = actions.next_step(kind, at_step, whole_job, [], NOW, status_subresource=True)
    assert from_cache.requests == from_whole.requests
    [written] = from_cache.requests[0].body["spec"]["template"]["spec"]["containers"][:1]
    assert written["command"] == ["python", "train.py"] and written["env"] == [{"name": "A", "value": "1"}]


PYTORCH = """
job pt: kubeflow.org/v1 PyTorchJob {
    task label "training.kubeflow.org/replica-type"
    failed     when any pod failed
    pending    otherwise
    on container restarted cause "oom" -> restart job with memory * 2 max 1 as "oom"
    actions {
        restart job -> set spec.runPolicy.suspend = true,
                       resize spec.pytorchReplicaSpecs[task].template,
                       set spec.runPolicy.suspend = false
    }
}
cause "oom" when reason "OOMKilled" hint "more memory"
"""


def pytorch_kind(tmp_path: Path) -> plan.Kind:
    (tmp_path / "pt.rules").write_text(PYTORCH)
    built = api.build([str(tmp_path / "pt.rules")])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [kind] = plan.loads(emit.dumps(built.plan)).kinds
    return kind


def test_a_map_keyed_by_task_gets_the_size_in_that_entry_only(tmp_path: Path) -> None:
    kind = pytorch_kind(tmp_path)
    step = kind.recipe("restartJob")[1]   # type: ignore[index]
    assert step == plan.ResizeTemplate(step.span, ("spec", "pytorchReplicaSpecs"), ("template",))

    def replica(size: str) -> dict[str, Any]:
        return {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "pytorch", "resources": {"limits": {"memory": size}}}]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "train", "namespace": "ml", "uid": UID, "resourceVersion": "3"},
           "spec": {"pytorchReplicaSpecs": {"Master": replica("1Gi"), "Worker": replica("1Gi")}}}
    worker = intents.Intent("abc", "restartJob", "oom", "r", None, None, task="worker", step=1,
                            resize=(Resize("pytorch", "1Gi", "2Gi"),))
    [request] = actions.next_step(kind, worker, job, [], NOW, status_subresource=True).requests
    assert request.body == {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {
        "containers": [{"name": "pytorch", "resources": {"limits": {"memory": "2Gi"}}}]}}}}}}
    nobody = actions.next_step(kind, replace(worker, task="launcher"), job, [], NOW,
                               status_subresource=True)
    assert nobody.failed == "no entry of spec.pytorchReplicaSpecs for task 'launcher'"


def test_a_map_keyed_by_task_that_is_not_one_or_without_the_template(tmp_path: Path) -> None:
    """A job whose replica specs are no map, an intent without a task, an entry without a
    template: no request, and each said."""
    kind = pytorch_kind(tmp_path)
    worker = intents.Intent("abc", "restartJob", "oom", "r", None, None, task="worker", step=1,
                            resize=(Resize("pytorch", "1Gi", "2Gi"),))

    def step(specs: Any, intent: intents.Intent = worker) -> actions.Next:
        job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
               "metadata": {"name": "train", "namespace": "ml", "uid": UID, "resourceVersion": "3"},
               "spec": {"pytorchReplicaSpecs": specs}}
        return actions.next_step(kind, intent, job, [], NOW, status_subresource=True)

    listed = step([{"replicas": 1, "template": {}}])
    assert (listed.requests, listed.failed) == ((), "no entry of spec.pytorchReplicaSpecs for task 'worker'")
    taskless = step({"XXXX": {"template": {}}, "": {"template": {}}}, replace(worker, task=None))
    assert (taskless.requests, taskless.failed) == ((), "no entry of spec.pytorchReplicaSpecs for task None")
    bare = step({"Worker": {"replicas": 1}})
    assert (bare.requests, bare.failed, bare.note) == ((), None, "already so")


def test_a_map_keyed_by_task_needs_a_task(tmp_path: Path) -> None:
    (tmp_path / "pt.rules").write_text(PYTORCH.replace(
        '    task label "training.kubeflow.org/replica-type"\n', "").replace(
        "restart job with memory", "restart job with memory"))
    built = api.build([str(tmp_path / "pt.rules")])
    assert "R408" in {d.code for d in built.diagnostics}
