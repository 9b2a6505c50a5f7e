"""A restart with more memory of a Job that Kueue queues: the shipped batch Job's `restart job
when <<metadata.labels."kueue.x-k8s.io/queue-name">>` (deactivate the Job's Workload, wait for
the pods to go, `resize spec.template`, activate the Workload), chosen when the action is decided
and recorded on the intent; the other Jobs keep the plain recipe (suspend, await, resize,
resume). From the decision to the requests, through the journal machine against an API server
in memory (runtime.reconcile, runtime.actions, runtime.journal)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from rulec import api, emit
from runtime import actions, intents, journal, objects, plan, rbac, reconcile, vocabulary
from runtime.controller import kube
from runtime.resources import Resize
from tests.unit.runtime.controller.fakeapi import FakeApi

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 4, 14, 0, tzinfo=timezone.utc)
UID = "0a0a0a0a-0000-4000-8000-00000000000a"
QUEUE = "kueue.x-k8s.io/queue-name"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads"
SELECTOR = f"kueue.x-k8s.io/job-uid={UID}"
POLICY = """
extend batchjob {
    on pod failed cause "oom" -> restart job with memory * 1.5 up to 1Gi max 2
        then fail job reason "OutOfMemory" as "oom"
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> plan.Plan:
    folder = tmp_path_factory.mktemp("rules")
    (folder / "oom.rules").write_text(POLICY)
    out = api.build([str(ROOT / "rules" / "batch-job.rules"), str(ROOT / "rules" / "causes.rules"),
                     str(folder / "oom.rules")])
    assert out.plan is not None, [str(d) for d in out.diagnostics]
    return plan.loads(emit.dumps(out.plan))


@pytest.fixture(scope="module")
def kind(built: plan.Plan) -> plan.Kind:
    return built.kind_named("batchjob")


def job(*, queued: bool = True, main: str = "256Mi", suspend: bool = False) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": UID, "resourceVersion": "7",
                         "creationTimestamp": "2026-12-04T13:50:00Z",
                         "labels": {QUEUE: "lq"} if queued else {}},
            "spec": {"suspend": suspend, "backoffLimit": 6, "template": {
                "metadata": {"labels": {"batch.kubernetes.io/controller-uid": UID}},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "busybox",
                     "resources": {"requests": {"memory": main}, "limits": {"memory": main}}}]}}}}


def pod(name: str, phase: str = "Failed") -> dict[str, Any]:
    statuses = [{"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}] \
        if phase == "Failed" else [{"name": "main", "state": {"running": {}}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "labels": {"batch.kubernetes.io/controller-uid": UID},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "train", "uid": UID, "controller": True}]},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "resources": {"limits": {"memory": "256Mi"}}}]},
            "status": {"phase": phase, "containerStatuses": statuses}}


def workload(name: str = "job-train-1a2b3", active: bool = True) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ml",
                         "labels": {"kueue.x-k8s.io/job-uid": UID}},
            "spec": {"active": active, "queueName": "lq"}}


def steps(kind: plan.Kind, variant: int | None) -> list[str]:
    recipe = kind.recipe("restartJob", variant)
    assert isinstance(recipe, tuple)
    return [type(s).__name__ for s in recipe]


def test_a_queued_job_is_restarted_through_its_workload_and_another_by_suspending(
        kind: plan.Kind) -> None:
    [queued] = reconcile.reconcile(kind, job(), [pod("train-a1")], NOW).new
    [plain] = reconcile.reconcile(kind, job(queued=False), [pod("train-a1")], NOW).new
    assert (queued.action, queued.resize) == ("restartJob", (Resize("main", "256Mi", "384Mi"),))
    assert queued.recipe is not None and plain.recipe is None
    assert steps(kind, queued.recipe) == ["SetObjectField", "Await", "ResizeTemplate",
                                          "SetObjectField"]
    assert steps(kind, plain.recipe) == ["SetField", "Await", "ResizeTemplate", "SetField"]
    # the choice travels with the intent in the journal the commit carries
    assert intents.decode(intents.encode((queued,))).intents == (queued,)
    assert '"recipe":0' in (intents.encode((queued,)) or "")
    assert '"recipe"' not in (intents.encode((plain,)) or "")


def test_the_chosen_recipe_stays_whatever_the_job_becomes(kind: plan.Kind) -> None:
    """The intent carries the choice: a label gone mid-restart changes no step."""
    [queued] = reconcile.reconcile(kind, job(), [pod("train-a1")], NOW).new
    unlabelled = job(queued=False)
    first = actions.next_step(kind, queued, unlabelled, [], NOW, status_subresource=True,
                              related={(WORKLOADS, SELECTOR): [workload()]})
    assert [(r.method, r.path) for r in first.requests] == [
        ("PATCH", f"{WORKLOADS}/job-train-1a2b3")]


def test_the_workload_steps_patch_each_listed_workload_once(kind: plan.Kind) -> None:
    [queued] = reconcile.reconcile(kind, job(), [pod("train-a1")], NOW).new
    assert actions.lookups(kind, (queued,), job(), NOW) == ((WORKLOADS, SELECTOR),)
    listed = {(WORKLOADS, SELECTOR): [workload(), workload("job-train-old")]}
    off = actions.next_step(kind, queued, job(), [], NOW, status_subresource=True, related=listed)
    assert [(r.method, r.path, r.body, r.done_on, r.guarded) for r in off.requests] == [
        ("PATCH", f"{WORKLOADS}/job-train-1a2b3", {"spec": {"active": False}}, frozenset({404}),
         False),
        ("PATCH", f"{WORKLOADS}/job-train-old", {"spec": {"active": False}}, frozenset({404}),
         False)]
    last = intents.Intent(queued.id, "restartJob", "oom", "r", None, None, step=3,
                          recipe=queued.recipe)
    # written where it differs only
    on = actions.next_step(kind, last, job(), [], NOW, status_subresource=True,
                           related={(WORKLOADS, SELECTOR): [workload(active=False),
                                                            workload("job-train-old")]})
    assert [(r.path, r.body) for r in on.requests] == [
        (f"{WORKLOADS}/job-train-1a2b3", {"spec": {"active": True}})]
    so = actions.next_step(kind, last, job(), [], NOW, status_subresource=True,
                           related={(WORKLOADS, SELECTOR): [workload(active=True)]})
    assert so.done and so.note == "already so"
    # no Workload (not Kueue's job after all): nothing to write, the step is done
    none = actions.next_step(kind, last, job(), [], NOW, status_subresource=True,
                             related={(WORKLOADS, SELECTOR): []})
    assert none.done and none.note == f"no Workload with {SELECTOR}"
    # not listed for this pass: looked at again, never taken as done
    unread = actions.next_step(kind, last, job(), [], NOW, status_subresource=True)
    assert unread.wait is not None and not unread.requests
    # a step already behind the intent is not listed again
    assert actions.lookups(kind, (last,), job(), NOW) == ((WORKLOADS, SELECTOR),)
    past = intents.Intent(queued.id, "restartJob", "oom", "r", None, None, step=4,
                          recipe=queued.recipe)
    assert actions.lookups(kind, (past,), job(), NOW) == ()


def world(journal_: tuple[intents.Intent, ...]) -> tuple[FakeApi, str]:
    api = FakeApi(status_subresource={"jobs.batch"})
    body = job()
    body["metadata"]["annotations"] = {vocabulary.INTENTS_ANNOTATION: intents.encode(journal_)}
    api.add(body, "jobs")
    api.add(workload(), "workloads")
    return api, objects.path("batch/v1", "jobs", "ml", "train")


def one_pass(kind: plan.Kind, api: FakeApi, path: str, now: datetime,
             live: list[dict[str, Any]]) -> journal.Stop:
    """One reconcile's journal pass as the controller's shell runs it: the lists the steps
    of other objects need read first, then every request sent."""
    job_ = api.get(path)
    opened = intents.decode(objects.annotation(job_, intents.ANNOTATION)).intents
    related = {where: api.list(where[0], query=[("labelSelector", where[1])])["items"]
               for where in journal.lookups(kind, opened, job_, now)}
    run = journal.Pass(kind, tuple(live), now, path, True, related)
    progress, answer = journal.start(opened), None
    while True:
        progress, todo, _ = journal.advance(run, progress, job_, answer)
        if isinstance(todo, journal.Stop):
            return todo
        try:
            if todo.resource_version is not None:
                job_ = api.merge_patch(todo.path, todo.body, resource_version=todo.resource_version)
            elif todo.method == "PATCH":
                api.merge_patch(todo.path, todo.body)
            else:
                api.request(todo.method, todo.path, todo.body)
            answer = journal.Answer(200)
        except kube.ApiError as err:
            answer = journal.Answer(err.status, str(err))


def test_the_journal_deactivates_waits_resizes_and_activates(kind: plan.Kind) -> None:
    [queued] = reconcile.reconcile(kind, job(), [pod("train-a1")], NOW).new
    api, path = world((queued,))
    active = f"{WORKLOADS}/job-train-1a2b3"
    # pass 1: the Workload deactivated; the pods are still there, so the await holds the intent
    stop = one_pass(kind, api, path, NOW, [pod("train-a2", "Running")])
    assert stop.open == 1 and stop.wait is not None
    assert api.get(active)["spec"]["active"] is False
    assert api.get(path)["spec"]["suspend"] is False          # Kueue's to set, never ours
    # the pods gone but the Job not yet suspended by Kueue: still waiting (its template cannot
    # change while it is not suspended)
    later = NOW + timedelta(seconds=5)
    stop = one_pass(kind, api, path, later, [])
    assert stop.open == 1 and stop.wait is not None
    assert api.get(path)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "memory": "256Mi"}
    # Kueue evicted the Workload and suspended the Job, its pods gone: the size written, the
    # Workload activated; the suspension is Kueue's to lift
    api.merge_patch(path, {"spec": {"suspend": True}})
    stop = one_pass(kind, api, path, later, [])
    assert stop.open == 0
    template = api.get(path)["spec"]["template"]["spec"]["containers"][0]
    assert template["resources"] == {"requests": {"memory": "384Mi"},
                                     "limits": {"memory": "384Mi"}}
    assert api.get(active)["spec"]["active"] is True
    assert api.get(path)["spec"]["suspend"] is True
    patched = [(e.method, e.path) for e in api.log if e.method == "PATCH" and "workloads" in e.path]
    assert patched == [("PATCH", active), ("PATCH", active)]


def test_the_role_may_list_and_patch_workloads_only_where_a_restart_is_taken(
        built: plan.Plan) -> None:
    rules = {(r.group, r.resource): r.verbs for r in rbac.controller_rules(built)}
    assert rules[("kueue.x-k8s.io", "workloads")] == ("list", "patch")
    bare = api.build([str(ROOT / "rules" / "batch-job.rules")])
    assert bare.plan is not None
    quiet = {(r.group, r.resource) for r in rbac.controller_rules(plan.loads(emit.dumps(bare.plan)))}
    assert ("kueue.x-k8s.io", "workloads") not in quiet


def test_a_job_workload_whose_label_is_null_fails_the_step(kind: plan.Kind) -> None:
    [queued] = reconcile.reconcile(kind, job(), [pod("train-a1")], NOW).new
    no_uid = copy.deepcopy(job())
    del no_uid["metadata"]["uid"]
    assert actions.lookups(kind, (queued,), no_uid, NOW) == ()
    failed = actions.next_step(kind, queued, no_uid, [], NOW, status_subresource=True)
    assert failed.failed == ("the label kueue.x-k8s.io/job-uid of its Workload objects is null "
                             "for this job")


def test_a_pass_lists_the_workloads_afresh_before_writing_them_again(kind: plan.Kind) -> None:
    """A Job suspended and without pods already: one pass could go through every step, but
    the activation would then read the list from before the deactivation (active: the value
    it wants) and write nothing. The pass stops before it and asks to be run again at once; the
    next one activates the Workload on a fresh list."""
    [queued] = reconcile.reconcile(kind, job(), [pod("train-a1")], NOW).new
    api, path = world((queued,))
    api.merge_patch(path, {"spec": {"suspend": True}})
    active = f"{WORKLOADS}/job-train-1a2b3"
    stop = one_pass(kind, api, path, NOW, [])
    assert stop == journal.Stop(wait=0.0, open=1)
    assert api.get(active)["spec"]["active"] is False
    assert journal_step(api, path) == 3            # resized; the activation is next
    stop = one_pass(kind, api, path, NOW, [])
    assert stop.open == 0
    assert api.get(active)["spec"]["active"] is True
    assert [e.body for e in api.log if e.method == "PATCH" and e.path == active] == [
        {"spec": {"active": False}}, {"spec": {"active": True}}]


def journal_step(api: FakeApi, path: str) -> int:
    [open_] = intents.decode(objects.annotation(api.get(path), intents.ANNOTATION)).intents
    return open_.step


@pytest.mark.parametrize("name, field", [("pytorchjob", "pytorchReplicaSpecs"),
                                         ("tfjob", "tfReplicaSpecs")])
def test_the_kubeflow_kinds_restart_a_queued_job_through_its_workload(name: str, field: str) -> None:
    built = api.build([str(ROOT / "rules"), str(ROOT / "examples" / "oom-resize" / "resize.rules")])
    assert built.plan is not None
    loaded = plan.loads(emit.dumps(built.plan))
    k = next(k for k in loaded.kinds if k.name == name)
    labelled = {"apiVersion": "kubeflow.org/v1", "kind": k.kind,
                "metadata": {"name": "train", "namespace": "ml", "uid": UID,
                             "labels": {QUEUE: "lq"}}}
    variant = actions.variant(k, "restartJob", labelled, NOW)
    assert variant is not None and actions.variant(k, "restartJob", {"metadata": {}}, NOW) is None
    recipe = k.recipe("restartJob", variant)
    assert isinstance(recipe, tuple)
    assert [type(s).__name__ for s in recipe] == ["SetObjectField", "Await", "ResizeTemplate",
                                                  "SetObjectField"]
    assert recipe[2] == plan.ResizeTemplate(recipe[2].span, ("spec", field), ("template",))
    assert actions.lookups(k, (intents.Intent("i", "restartJob", "p", "r", None, None,
                                              recipe=variant),), labelled, NOW) == (
        (WORKLOADS, SELECTOR),)
