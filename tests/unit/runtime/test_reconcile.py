"""runtime.reconcile, table-driven: the cases in reconcile/cases.yaml, each a job lived through in
time order, every step's writes merged back into it as the API server would merge them."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulec import api, emit
from rulec.commands import suite
from runtime import functions, intents, plan, reconcile, state, writeback
from runtime import pods as pods_lib

HERE = Path(__file__).resolve().parent / "reconcile"
ROOT = Path(__file__).resolve().parents[3]
CASES = yaml.safe_load((HERE / "cases.yaml").read_text())["cases"]
PODS = yaml.safe_load((HERE / "pods.yaml").read_text())


def _kind(rules: str, tmp: Path) -> plan.Kind:
    if "\n" in rules:
        (tmp / "j.rules").write_text(rules)
        built = api.build_sources([api.read(str(tmp / "j.rules"))])
        built_plan = built.plan
        text = emit.dumps(built_plan).replace(str(tmp) + "/", "")   # cite `j.rules:3:5`
    else:
        built = api.build([str(ROOT / rules)])
        text = emit.dumps(built.plan).replace(str(ROOT) + "/", "")
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [kind] = plan.loads(text).kinds
    return kind


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def _pods(names: list[str], job: dict[str, Any]) -> list[dict[str, Any]]:
    meta = job["metadata"]
    out = []
    for name in names:
        pod = copy.deepcopy(PODS[name])
        pod["metadata"]["ownerReferences"] = [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                               "name": meta["name"], "uid": meta["uid"],
                                               "controller": True}]
        out.append(pod)
    return out


def _seen(writes: reconcile.Writes, job: dict[str, Any]) -> dict[str, Any]:
    annotation = ((job.get("metadata") or {}).get("annotations") or {}).get(writeback.VERDICT_ANNOTATION)
    return {
        "commit": writes.commit, "status": writes.status,
        "events": [{"name": e.name, "type": e.type, "reason": e.reason, "action": e.action,
                    "note": e.note} for e in writes.events],
        "requeue": functions.rfc3339(writes.requeue_at) if writes.requeue_at else None,
        "verdict": json.loads(annotation) if annotation else None,
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict[str, Any], tmp_path: Path) -> None:
    kind = _kind(case["rules"], tmp_path)
    job = copy.deepcopy(case["job"])
    for number, step in enumerate(case["steps"]):
        job = merge(job, step.get("job") or {})
        now = datetime.fromisoformat(step["now"].replace("Z", "+00:00"))
        writes = reconcile.reconcile(kind, job, _pods(step.get("pods") or [], job), now)
        for patch in (writes.commit, writes.status):
            if patch is not None:
                job = merge(job, patch)
        rv = int(job["metadata"]["resourceVersion"]) + 1
        job["metadata"]["resourceVersion"] = str(rv)
        ok, diff, _ = suite.compare(step["expect"], _seen(writes, job), str(HERE))
        assert ok, f"step {number} ({step['now']}):\n{diff}"


# -- the parts of one reconcile, one by one -----------------------------------------------------

@pytest.mark.parametrize("commit, status, same, expected", [
    (None, None, True, ()),
    ({"a": 1}, None, True, (("/job", {"a": 1}),)),
    (None, {"s": 2}, True, (("/job", {"s": 2}),)),
    ({"a": 1, "m": {"x": 1}}, {"s": 2, "m": {"y": 2}}, True, (("/job", {"a": 1, "s": 2, "m": {"x": 1, "y": 2}}),)),
    (None, None, False, ()),
    ({"a": 1}, None, False, (("/job", {"a": 1}),)),
    (None, {"s": 2}, False, (("/job/status", {"s": 2}),)),
    ({"a": 1}, {"s": 2}, False, (("/job", {"a": 1}), ("/job/status", {"s": 2}))),
    (None, None, "keeps", ()),
    ({"a": 1}, None, "keeps", (("/job/status", {"a": 1}),)),
    (None, {"s": 2}, "keeps", (("/job/status", {"s": 2}),)),
    ({"a": 1, "m": {"x": 1}}, {"s": 2, "m": {"y": 2}}, "keeps",
     (("/job/status", {"a": 1, "s": 2, "m": {"x": 1, "y": 2}}),)),
])
def test_the_patches_one_reconcile_sends(commit: Any, status: Any, same: bool | str,
                                         expected: tuple) -> None:
    """The commit, with the status fields when the kind has no /status subresource, or both
    through /status where that writes metadata too ("keeps"): one write; else the status patch
    after the commit."""
    writes = reconcile.Writes(commit, status, (), None, None, None)  # type: ignore[arg-type]
    assert writes.patches("/job", "/job" if same is True else "/job/status",
                          same == "keeps") == expected


def test_only_kube_apiservers_batch_job_writes_metadata_through_its_status() -> None:
    assert reconcile.status_keeps_metadata("batch")
    assert not any(reconcile.status_keeps_metadata(g) for g in
                   ("batch.volcano.sh", "kubeflow.org", "jobset.x-k8s.io", "argoproj.io", ""))


TASKS = """job vcjob: batch.volcano.sh/v1alpha1 Job {
    pods owned
    task label "volcano.sh/task-spec"
    failed when <<status.gone>>
    running when any pod running
    pending otherwise
    on pod failed -> restart task max 3 reason "Retry" message "again {pod}"
    on pod evicted -> restart pod max 3
    actions {
        restart task -> delete pods of task
        restart pod -> delete pod
    }
}
"""


def _job(**meta: Any) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "u-train", "resourceVersion": "1", **meta},
            "spec": {}, "status": {"state": {"phase": "Running"}}}


def _pod(name: str, task: str, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if phase == "Failed":
        status["containerStatuses"] = [{"name": "main", "restartCount": 0, "state": {"terminated": {
            "exitCode": 1, "reason": "Error", "finishedAt": "2024-05-01T12:00:30Z"}}}]
    return {"apiVersion": "v1", "kind": "Pod", "status": status,
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "creationTimestamp": "2024-05-01T12:00:00Z",
                         "labels": {"volcano.sh/task-spec": task},
                         "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                              "name": "train", "uid": "u-train", "controller": True}], **meta}}


NOW = datetime.fromisoformat("2024-05-01T12:05:00+00:00")


def test_an_intent_records_its_action_and_the_pods_it_may_delete(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    pods = [_pod("w-0", "worker", "Failed"), _pod("w-1", "worker"),
            _pod("w-2", "worker", deletionTimestamp="2024-05-01T12:04:00Z"), _pod("m-0", "master")]
    writes = reconcile.reconcile(kind, _job(), pods, NOW)
    assert writes.journal == writes.new
    by_action = {i.action: i for i in writes.new}
    # the pod being deleted raised podEvicted: its restart may delete nothing (it is going away)
    assert (by_action["restartPod"].pod, by_action["restartPod"].targets) == ("w-2", ())
    i = by_action["restartTask"]
    assert (i.action, i.policy, i.reason, i.message, i.task, i.pod, i.uid) == (
        "restartTask", i.policy, "Retry", "again w-0", "worker", "w-0", "uid-w-0")
    assert i.targets == (("w-0", "uid-w-0"), ("w-1", "uid-w-1"))     # its task's pods, not one going away
    assert i.since == "2024-05-01T12:05:00Z"
    assert i.observed == {"status": intents.status_digest(kind, _job())}
    assert i.id == intents.intent_id("u-train", None, i.policy, "uid-w-0")
    assert i.rule.startswith("j.rules:")
    # decided again from the same stored state: the same id (a replay after a crash names it again)
    assert {j.id for j in reconcile.reconcile(kind, _job(), pods, NOW).new} == {j.id for j in writes.new}


def test_a_pod_action_may_delete_its_own_pod_only(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    evicted = _pod("w-0", "worker", "Failed")
    evicted["status"]["reason"] = "Evicted"
    writes = reconcile.reconcile(kind, _job(), [evicted, _pod("w-1", "worker")], NOW)
    [i] = writes.new
    assert (i.action, i.targets) == ("restartPod", (("w-0", "uid-w-0"),))


def test_a_job_going_away_or_out_of_scope_is_left_alone(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    assert reconcile.left_alone(kind, _job()) is None
    assert reconcile.left_alone(kind, _job(deletionTimestamp="2024-05-01T12:00:00Z")) == "it is being deleted"


def test_a_journal_that_cannot_be_read_is_let_go_of_and_said(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    job = _job(annotations={intents.ANNOTATION: "{not json"})
    writes = reconcile.reconcile(kind, job, [_pod("w-1", "worker")], NOW)
    assert writes.journal_error is not None and writes.journal_error.startswith("intents are not JSON")
    assert writes.state_error is None
    assert any(writes.journal_error in (e.note or "") for e in writes.events)


def _committed(job: dict[str, Any], writes: reconcile.Writes) -> dict[str, Any]:
    for patch in (writes.commit, writes.status):
        if patch is not None:
            job = merge(job, patch)
    return job


def test_an_unreadable_journal_lets_go_of_every_pod_its_actions_held(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    pods = [_pod("w-0", "worker", "Failed"), _pod("w-1", "worker")]
    first = reconcile.reconcile(kind, _job(), pods, NOW)
    assert any(r.ours for r in first.evaluation.state.pods.values())
    job = _committed(_job(), first)
    job["metadata"]["annotations"][intents.ANNOTATION] = "[]"
    writes = reconcile.reconcile(kind, job, pods, NOW)
    assert writes.journal_error == "intents ignored: intents: expected an object, got list"
    assert not any(r.ours for r in writes.evaluation.state.pods.values())


def test_a_pod_the_cache_lost_is_looked_for_in_a_live_list(tmp_path: Path) -> None:
    """docs/controller.md: a pod relabelled out of the pod watch looks deleted in the cache; the
    reconcile is decided again over a live list, where a pod that still exists is not gone."""
    kind = _kind(TASKS, tmp_path)
    running = _pod("w-0", "worker")
    job = _committed(_job(), reconcile.reconcile(kind, _job(), [running], NOW))
    relabelled = copy.deepcopy(running)
    relabelled["metadata"]["labels"] = {}
    relabelled["metadata"]["ownerReferences"] = []
    asked: list[int] = []

    def live(found: list[dict[str, Any]]) -> Any:
        return lambda: asked.append(1) or found

    # the cache has no pod: restart the pod it lost, unless a live list still has it
    lost = reconcile.reconcile(kind, job, [], NOW)
    # (a pod gone is named by its digest: the stored state knows no more of it)
    assert [(i.action, i.pod, i.uid) for i in lost.new] == [("restartPod", None, pods_lib.digest("uid-w-0"))]
    assert lost.needs_live_pods
    kept = reconcile.sync(kind, job, [], NOW, live([relabelled]))
    assert asked == [1] and kept.new == () and not kept.needs_live_pods
    gone = reconcile.sync(kind, job, [], NOW, live([]))
    assert [(i.action, i.uid) for i in gone.new] == [("restartPod", pods_lib.digest("uid-w-0"))]
    # a live list keeps only the pods the stored state knows
    stranger = _pod("x-0", "worker")
    stranger["metadata"]["ownerReferences"] = []
    assert [objects_name(p) for p in reconcile.reconcile(kind, job, [relabelled, stranger], NOW, live=True).pods] == ["w-0"]
    # a member is listed once; without `live`, only members count
    assert [objects_name(p) for p in reconcile.reconcile(kind, job, [running, stranger], NOW, live=True).pods] == ["w-0"]
    assert reconcile.reconcile(kind, job, [relabelled, stranger], NOW).pods == ()
    # nothing lost: no live list asked for
    asked.clear()
    assert reconcile.sync(kind, job, [running], NOW, live([running])).new == () and asked == []


def objects_name(p: dict[str, Any]) -> str:
    return p["metadata"]["name"]


def test_explain_is_passed_through_and_changes_nothing_else(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    pods = [_pod("w-0", "worker", "Failed"), _pod("w-1", "worker")]
    plain = reconcile.sync(kind, _job(), pods, NOW, lambda: pods)
    explained = reconcile.sync(kind, _job(), pods, NOW, lambda: pods, explain=True)
    assert plain.evaluation.explanation == () and explained.evaluation.explanation != ()
    assert (explained.commit, explained.status, explained.new) == (plain.commit, plain.status, plain.new)
    assert reconcile.reconcile(kind, _job(), pods, NOW).evaluation.explanation == ()
    assert reconcile.reconcile(kind, _job(), pods, NOW, explain=True).evaluation.explanation != ()


# -- details the mutants showed untested (scripts/mutation.sh reconcile) --------------------------

def test_another_controllers_job_is_left_alone_as_of_the_time_asked(tmp_path: Path) -> None:
    """`foreign when` is read at the `now` given (a clause may read the job's age); with `write
    verdicts` the job is reconciled all the same."""
    old = TASKS.replace("    pods owned\n",
                        "    pods owned\n    foreign when <<age(metadata.creationTimestamp) > `3600`>>%s\n")
    created = _job(creationTimestamp="2024-05-01T12:00:00Z")
    kind = _kind(old % "", tmp_path)
    assert reconcile.left_alone(kind, created, NOW) is None                    # 5 min old
    later = datetime.fromisoformat("2024-05-01T14:00:00+00:00")
    assert reconcile.left_alone(kind, created, later) == (
        "it is another controller's (kind vcjob: foreign when "
        "<<age(metadata.creationTimestamp) > `3600`>>)")
    assert reconcile.left_alone(_kind(old % " write verdicts", tmp_path), created, later) is None
    assert reconcile.left_alone(kind, created) is not None     # no time given: the clock's (years on)


def test_a_task_named_by_an_expression_is_read_as_the_evaluation_reads_it(tmp_path: Path) -> None:
    """The pods a task's restart may delete are those the evaluation put in that task, the
    task's expression read at the same `now` (here it reads the pod's age)."""
    by_age = TASKS.replace('task label "volcano.sh/task-spec"',
                           "task <<age(metadata.creationTimestamp) > `60` && 'old' || 'new'>>")
    kind = _kind(by_age, tmp_path)
    pods = [_pod("w-0", "worker", "Failed"), _pod("w-1", "worker", creationTimestamp="2024-05-01T12:04:30Z"),
            _pod("w-2", "worker")]
    [i] = [i for i in reconcile.reconcile(kind, _job(), pods, NOW).new if i.action == "restartTask"]
    assert i.task == "old"
    assert i.targets == (("w-0", "uid-w-0"), ("w-2", "uid-w-2"))


def test_a_reconcile_decided_again_on_a_live_list_is_explained_when_asked(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    running = _pod("w-0", "worker")
    job = _committed(_job(), reconcile.reconcile(kind, _job(), [running], NOW))
    relabelled = copy.deepcopy(running)
    relabelled["metadata"]["labels"] = {}
    relabelled["metadata"]["ownerReferences"] = []
    assert reconcile.reconcile(kind, job, [], NOW).needs_live_pods
    explained = reconcile.sync(kind, job, [], NOW, lambda: [relabelled], explain=True)
    assert explained.new == () and explained.evaluation.explanation != ()
    assert reconcile.sync(kind, job, [], NOW, lambda: [relabelled]).evaluation.explanation == ()


def test_which_pods_are_the_jobs_is_decided_at_the_time_given(tmp_path: Path) -> None:
    """A pod selector's value is a template over the job, read at `now` (not the clock): here
    it reads the job's age, so a reconcile is the same function of its inputs on any day."""
    kind = _kind(TASKS.replace("    pods owned\n", "    pods owned\n    pods label \"cohort\" = "
                               "<<age(metadata.creationTimestamp) > `86400` && 'old' || 'new'>>\n"), tmp_path)
    job = _job(creationTimestamp="2024-05-01T12:00:00Z")
    young = _pod("w-0", "worker")
    young["metadata"]["labels"]["cohort"] = "new"
    assert [objects_name(p) for p in reconcile.reconcile(kind, job, [young], NOW).pods] == ["w-0"]
    later = datetime.fromisoformat("2024-05-03T12:00:00+00:00")
    assert reconcile.reconcile(kind, job, [young], later).pods == ()


def test_stored_state_that_cannot_be_read_is_said(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    writes = reconcile.reconcile(kind, _job(annotations={state.ANNOTATION: "{not json"}),
                                 [_pod("w-1", "worker")], NOW)
    assert writes.state_error is not None and writes.journal_error is None


def test_an_intent_is_named_by_the_stored_state_it_was_decided_from(tmp_path: Path) -> None:
    """The same decision replayed from the same stored state has the same id; the id is made
    from the state the job carried (`intents.intent_id`), here one an earlier reconcile wrote."""
    kind = _kind(TASKS, tmp_path)
    job = _committed(_job(), reconcile.reconcile(kind, _job(), [_pod("w-0", "worker")], NOW))
    stored_text = job["metadata"]["annotations"][state.ANNOTATION]
    [i] = [i for i in reconcile.reconcile(kind, job, [_pod("w-0", "worker", "Failed")], NOW).new
           if i.action == "restartTask"]
    assert i.id == intents.intent_id("u-train", stored_text, i.policy, "uid-w-0")
    assert i.id != intents.intent_id("u-train", None, i.policy, "uid-w-0")


def test_a_pod_without_a_uid_is_never_taken_for_a_known_pod(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    known = _pod("w-0", "worker", uid="XXXX")
    job = _committed(_job(), reconcile.reconcile(kind, _job(), [known], NOW))
    stranger = _pod("x-0", "worker", ownerReferences=[])
    del stranger["metadata"]["uid"]
    assert reconcile.reconcile(kind, job, [stranger], NOW, live=True).pods == ()


@pytest.mark.parametrize("evicted", [
    "audit on pod evicted -> restart pod max 3",     # audited: no intent
    "on pod evicted -> fail task",                   # a `record` recipe: nothing to carry out
])
def test_an_action_with_nothing_to_carry_out_does_not_hold_up_those_after_it(
        evicted: str, tmp_path: Path) -> None:
    kind = _kind(TASKS.replace("on pod evicted -> restart pod max 3", evicted), tmp_path)
    gone = _pod("a-0", "other", "Failed")
    gone["status"]["reason"] = "Evicted"
    writes = reconcile.reconcile(kind, _job(), [gone, _pod("w-0", "worker", "Failed")], NOW)
    assert [i.action for i in writes.evaluation.actions][0] != "restartTask"   # it comes first
    assert [(i.action, i.pod) for i in writes.new] == [("restartTask", "w-0")]


def test_the_ids_of_a_job_without_a_uid_are_made_from_an_empty_one(tmp_path: Path) -> None:
    kind = _kind(TASKS, tmp_path)
    job = _job()
    del job["metadata"]["uid"]
    new = reconcile.reconcile(kind, job, [_pod("w-0", "worker", "Failed")], NOW).new  # owned by name
    assert [i.action for i in new] == ["restartTask"]
    assert new[0].id == intents.intent_id("", None, new[0].policy, "uid-w-0")


def test_without_annotations_no_phase_label_is_written(tmp_path: Path) -> None:
    """`status { no annotations }`: none of ours, and no `jobrules.dev/phase` label either."""
    kind = _kind(TASKS.replace("    pods owned\n", "    pods owned\n    status { no annotations }\n"), tmp_path)
    assert not kind.status.annotations
    writes = reconcile.reconcile(kind, _job(), [_pod("w-0", "worker", "Failed")], NOW)
    assert "labels" not in ((writes.commit or {}).get("metadata") or {})


def test_events_are_named_from_the_stored_state_read(tmp_path: Path) -> None:
    """A replay of the same evaluation names the same Events (writeback.events, from the
    stored state the reconcile read), a later one from another state other ones."""
    kind = _kind(TASKS, tmp_path)
    job = _committed(_job(), reconcile.reconcile(kind, _job(), [_pod("w-0", "worker")], NOW))
    stored_text = job["metadata"]["annotations"][state.ANNOTATION]
    writes = reconcile.reconcile(kind, job, [_pod("w-0", "worker", "Failed")], NOW)
    assert writes.events
    assert writes.events == tuple(writeback.events(kind, job, stored_text, writes.evaluation,
                                                   writes.previous_phase, None, None))
    assert writes.events != tuple(writeback.events(kind, job, None, writes.evaluation,
                                                   writes.previous_phase, None, None))
