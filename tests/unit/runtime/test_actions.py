"""runtime.intents, runtime.actions and reconcile.decide: what an action is decided as, how each
step becomes requests, and why each request is safe to send again after a crash."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import builders as b
from rulec import api, emit
from runtime import actions, intents, journal, plan, reconcile
from runtime.resources import Resize

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=timezone.utc)

RULES = """
job trainer: batch.volcano.sh/v1alpha1 Job {
    pods owned
    task label "volcano.sh/task-spec"
    failed     when any pod failed
    running    when any pod running
    pending    otherwise
    on pod evicted -> restart pod max 3
    on pod failed exit 3 -> restart task max 1
    on pod failed exit 4 -> restart job max 1
    on pod failed exit 5 -> fail job reason "Five"
    on pod failed exit 6 -> terminate job
    on pod failed exit 7 -> complete job
    actions {
        fail job      -> condition "FailureTarget"
        terminate job -> set status.state.phase = "Terminating", set spec.paused = true
        complete job  -> create bus.volcano.sh/v1alpha1 Command { action: "CompleteJob", target: job, note: <<metadata.name>> }
        restart job   -> delete pods by eviction,
                         await no pod running within 1m
        abort job     -> unsupported
    }
}
"""


def compiled(folder: Path, rules: str = RULES) -> plan.Kind:
    """The one kind of `rules`, compiled from a file in `folder` as `rulec` reads it."""
    path = folder / "j.rules"
    path.write_text(rules)
    built = api.build_sources([api.read(str(path))])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [k] = plan.loads(emit.dumps(built.plan)).kinds
    return k


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> plan.Kind:
    return compiled(tmp_path_factory.mktemp("rules"))


def intent(action: str, **fields: object) -> intents.Intent:
    base: dict[str, object] = {"id": "abc123", "action": action, "policy": "p#0",
                               "rule": "j.rules:3:5", "reason": "Why", "message": "what happened"}
    base.update(fields)
    return intents.Intent(**base)   # type: ignore[arg-type]


def job(status: dict | None = None, spec: dict | None = None) -> dict:
    out = b.job(status=status or {"state": {"phase": "Running"}}, spec=spec)
    out["metadata"]["resourceVersion"] = "7"
    return out


# -- the journal ---------------------------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
journal_entries = st.builds(
    intents.Intent, id=names, action=st.sampled_from(sorted(actions.vocabulary.EFFECTS)),
    policy=names, rule=names, reason=st.none() | names, message=st.none() | names,
    task=st.none() | names, pod=st.none() | names, uid=st.none() | names,
    targets=st.lists(st.tuples(names, names), max_size=3).map(tuple),
    step=st.integers(0, 5), attempts=st.integers(0, 5), since=st.none() | names,
    observed=st.dictionaries(names, names, max_size=2),
    resize=st.lists(st.builds(Resize, names, names, names), max_size=2).map(tuple))


@given(st.lists(journal_entries, max_size=4).map(tuple))
def test_the_journal_reads_back_as_written(journal: tuple[intents.Intent, ...]) -> None:
    decoded = intents.decode(intents.encode(journal))
    assert decoded.error is None and decoded.intents == journal


def test_an_empty_journal_is_no_annotation() -> None:
    assert intents.encode(()) is None
    assert intents.decode(None) == intents.Decoded((), None)
    assert intents.decode("  ") == intents.Decoded((), None)


@pytest.mark.parametrize("text, error", [
    ("{", "intents are not JSON"),
    ("[" * 100_000 + "]" * 100_000, "intents are nested too deeply"),   # anyone may write it
    ('{"v": 2, "open": []}', "version 2 is not 1"),
    ('{"v": 1, "open": {}}', "intents.open"),
    ('{"v": 1, "open": [{"action": "failJob", "policy": "p"}]}', "intent.id"),
    ('{"v": 1, "open": [{"id": "x", "action": "failJob", "policy": "p", "targets": [["a"]]}]}',
     "expected [name, uid]"),
    ('{"v": 1, "open": [{"id": "x", "action": "failJob", "policy": "p", "step": -1}]}',
     "intent.step"),
    ('{"v": 1, "open": [{"id": "x", "action": "restartJob", "policy": "p", "resize": [["main"]]}]}',
     "expected [container, before, after]"),
    ('{"v": 1, "open": [{"id": "x", "action": "restartJob", "policy": "p", "resize": [[1, 2, 3]]}]}',
     "intent.resize"),
])
def test_a_journal_that_cannot_be_read_is_dropped_and_said(text: str, error: str) -> None:
    decoded = intents.decode(text)
    assert decoded.intents == ()
    assert decoded.error is not None and error in decoded.error


@pytest.mark.parametrize("field, value, error", [
    ("resize", 3, "intent.resize: expected a list, got int"),
    ("resize", [3], "intent.resize: expected a list, got int"),
    ("resize", [[1, 2, 3]], "intent.resize: expected a string, got int"),
    ("recipe", -1, "intent.recipe: expected a non-negative integer, got -1"),
])
def test_a_malformed_resize_or_recipe_is_named_by_its_exact_place(field: str, value: object,
                                                                   error: str) -> None:
    text = json.dumps({"v": 1, "open": [{"id": "x", "action": "restartJob", "policy": "p",
                                         field: value}]})
    assert intents.decode(text).error == f"intents ignored: {error}"


def test_an_intent_is_named_by_its_decision() -> None:
    one = intents.intent_id("job-uid", "state-1", "p#0", "pod-uid")
    assert one == intents.intent_id("job-uid", "state-1", "p#0", "pod-uid")   # a replay
    assert len({one, intents.intent_id("job-uid", "state-2", "p#0", "pod-uid"),
                intents.intent_id("job-uid", "state-1", "p#1", "pod-uid"),
                intents.intent_id("job-uid", "state-1", "p#0", "other"),
                intents.intent_id("job-2", "state-1", "p#0", "pod-uid")}) == 5


def test_advancing_resets_the_attempts_and_starts_the_clock() -> None:
    moved = intent("restartJob", step=0, attempts=3).advanced("2026-01-01T00:10:00Z")
    assert (moved.step, moved.attempts, moved.since) == (1, 0, "2026-01-01T00:10:00Z")


# -- deciding ------------------------------------------------------------------------------------

def decided(kind: plan.Kind, pods: list[dict], status: dict | None = None) -> tuple:
    return reconcile.reconcile(kind, job(status), pods, NOW).new


def test_restart_pod_records_only_that_pod(kind: plan.Kind) -> None:
    [new] = decided(kind, [b.evicted("w-0"), b.pod("w-1")])
    assert (new.action, new.pod, new.uid, new.targets) == (
        "restartPod", "w-0", "uid-w-0", (("w-0", "uid-w-0"),))
    assert new.observed == {"status": intents.status_digest(kind, job())}


def test_restart_task_records_the_pods_of_the_task(kind: plan.Kind) -> None:
    failed = b.pod("w-0", "Failed", containers=[b.terminated("main", 3)])
    # w-2 on its way out is someone else's deletion (`pod evicted` too), and not a target.
    found = decided(kind, [failed, b.pod("w-1"), b.pod("ps-0", task="ps"),
                           b.pod("w-2", deleting=100)])
    [new] = [i for i in found if i.action == "restartTask"]
    assert new.task == "worker"
    assert new.targets == (("w-0", "uid-w-0"), ("w-1", "uid-w-1"))


def test_a_recipe_of_steps_records_every_pod_it_may_delete(kind: plan.Kind) -> None:
    failed = b.pod("w-0", "Failed", containers=[b.terminated("main", 4)])
    [new] = decided(kind, [failed, b.pod("ps-0", task="ps")])
    assert new.action == "restartJob"
    assert new.targets == (("ps-0", "uid-ps-0"), ("w-0", "uid-w-0"))


def test_a_recorded_action_opens_no_intent(tmp_path: Path) -> None:
    k = compiled(tmp_path, RULES.replace(
        '        fail job      -> condition "FailureTarget"\n',
        "        fail job      -> record\n"))
    assert decided(k, [b.pod("w-0", "Failed", containers=[b.terminated("main", 5)])]) == ()


def test_a_decision_already_in_the_journal_is_not_opened_twice(kind: plan.Kind) -> None:
    pods = [b.evicted("w-0")]
    first = reconcile.reconcile(kind, job(), pods, NOW)
    again = job()
    again["metadata"]["annotations"] = {"jobrules.dev/intents": intents.encode(first.journal)}
    # Replayed from the same stored state (the commit was lost): the same id, not a second one.
    assert reconcile.reconcile(kind, again, pods, NOW).journal == first.journal


# -- steps ---------------------------------------------------------------------------------------

def step_of(kind: plan.Kind, i: intents.Intent, the_job: dict, pods: list[dict],
            now: datetime = NOW, subresource: bool = True) -> actions.Next:
    return actions.next_step(kind, i, the_job, pods, now, status_subresource=subresource)


def test_a_delete_touches_only_the_recorded_incarnations(kind: plan.Kind) -> None:
    i = intent("restartTask", task="worker", targets=(("w-0", "uid-w-0"), ("w-1", "uid-w-1"),
                                                        ("w-2", "uid-w-2")))
    pods = [b.pod("w-0"), b.pod("w-1", uid="uid-new"), b.pod("w-2", deleting=5), b.pod("w-3")]
    nxt = step_of(kind, i, job(), pods)
    assert nxt.requests == (actions.Request(
        "DELETE", "/api/v1/namespaces/ml/pods/w-0", {"preconditions": {"uid": "uid-w-0"}},
        actions.DONE_ON_DELETE),)


def test_a_delete_is_guarded_by_the_version_seen_and_a_conflict_is_not_done(
        kind: plan.Kind) -> None:
    """Two controllers deleting the same pod at once are both answered 200 unless the version
    is a precondition; with it the later gets 409, which leaves the step to be looked at again."""
    seen = b.pod("w-0")
    seen["metadata"]["resourceVersion"] = "41"
    for action in ("restartTask", "restartJob"):   # a delete, an eviction
        [request] = step_of(kind, intent(action, targets=(("w-0", "uid-w-0"),)), job(),
                            [seen]).requests
        options = request.body if action == "restartTask" else request.body["deleteOptions"]
        assert request.method == ("DELETE" if action == "restartTask" else "POST")
        assert options == {"preconditions": {"uid": "uid-w-0", "resourceVersion": "41"}}
        assert request.done_on == frozenset({404})


def test_a_delete_with_nothing_left_is_done(kind: plan.Kind) -> None:
    nxt = step_of(kind, intent("restartPod", targets=(("w-0", "uid-w-0"),)), job(), [])
    assert nxt.done and nxt.note == "no such pod left"


def test_by_eviction_posts_an_eviction_with_the_uid(kind: plan.Kind) -> None:
    i = intent("restartJob", targets=(("w-0", "uid-w-0"),))
    [request] = step_of(kind, i, job(), [b.pod("w-0")]).requests
    assert (request.method, request.path) == ("POST", "/api/v1/namespaces/ml/pods/w-0/eviction")
    assert request.body["deleteOptions"] == {"preconditions": {"uid": "uid-w-0"}}
    assert request.done_on == actions.DONE_ON_DELETE


def test_an_await_holds_waits_and_gives_up(kind: plan.Kind) -> None:
    i = intent("restartJob", step=1, since="2026-01-01T00:09:30Z")
    assert step_of(kind, i, job(), [b.pod("w-0", "Failed")]).note == "holds"
    assert step_of(kind, i, job(), [b.pod("w-0")]).wait == actions.AWAIT_POLL
    late = step_of(kind, i, job(), [b.pod("w-0")], NOW + timedelta(seconds=31))
    assert late.failed == "waited 60s for it in vain"


def test_a_condition_is_written_once_with_the_action_s_reason(kind: plan.Kind) -> None:
    the_job = job({"conditions": [b.condition("Running")]})
    [request] = step_of(kind, intent("failJob", reason="Five"), the_job, []).requests
    assert (request.method, request.path, request.guarded) == (
        "PATCH", "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs/train/status", True)
    running, failure = request.body["status"]["conditions"]
    assert running["type"] == "Running"
    assert {k: failure[k] for k in ("type", "status", "reason", "message")} == {
        "type": "FailureTarget", "status": "True", "reason": "Five", "message": "what happened"}
    done = job({"conditions": [b.condition("FailureTarget")]})
    assert step_of(kind, intent("failJob"), done, []).note == "already so"


def test_a_field_is_set_where_it_lives_and_only_when_it_differs(kind: plan.Kind) -> None:
    i = intent("terminateJob")
    [status] = step_of(kind, i, job(), []).requests
    assert status.path.endswith("/jobs/train/status") and status.guarded
    assert status.body == {"status": {"state": {"phase": "Terminating"}}}
    [same] = step_of(kind, i, job(), [], subresource=False).requests
    assert same.path.endswith("/jobs/train")
    [spec] = step_of(kind, intent("terminateJob", step=1), job(), []).requests
    assert spec.path.endswith("/jobs/train") and spec.body == {"spec": {"paused": True}}
    assert step_of(kind, intent("terminateJob", step=1), job(spec={"paused": True}),
                   []).note == "already so"


def test_an_object_is_created_under_the_intent_s_name(kind: plan.Kind) -> None:
    the_job = job()
    i = intent("completeJob", observed={"status": intents.status_digest(kind, the_job)})
    [request] = step_of(kind, i, the_job, []).requests
    assert (request.method, request.path, request.done_on) == (
        "POST", "/apis/bus.volcano.sh/v1alpha1/namespaces/ml/commands", actions.DONE_ON_CREATE)
    body = request.body
    assert body["metadata"]["name"] == "jr-abc123"
    assert body["metadata"]["labels"] == {"jobrules.dev/intent": "abc123"}
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train",
             "uid": b.JOB_UID, "controller": False, "blockOwnerDeletion": False}
    assert body["metadata"]["ownerReferences"] == [owner]
    assert (body["action"], body["target"], body["note"]) == ("CompleteJob", owner, "train")


def test_an_object_is_not_made_again_once_the_status_moved(kind: plan.Kind) -> None:
    i = intent("completeJob", observed={"status": intents.status_digest(kind, job())})
    moved = job({"state": {"phase": "Completing"}})
    nxt = step_of(kind, i, moved, [])
    assert nxt.done and "status moved" in (nxt.note or "")


def test_a_recipe_past_its_end_or_without_steps_asks_nothing(kind: plan.Kind) -> None:
    assert step_of(kind, intent("restartPod", step=1), job(), []).done
    assert step_of(kind, intent("abortJob"), job(), []).done


def test_the_default_recipes() -> None:
    assert plan.default_recipe("restartPod") == (plan.DeletePods(None, "pod", False),)
    assert plan.default_recipe("restartTask") == (plan.DeletePods(None, "task", False),)
    assert plan.default_recipe("restartJob") == (plan.DeletePods(None, "job", False),)
    assert plan.default_recipe("failJob") == "record"
    assert plan.default_recipe("abortJob") == "unsupported"


def test_every_request_body_is_json(kind: plan.Kind) -> None:
    the_job = job()
    cases = [intent("restartJob", targets=(("w-0", "uid-w-0"),)), intent("failJob"),
             intent("terminateJob"), intent("terminateJob", step=1),
             intent("completeJob", observed={"status": intents.status_digest(kind, the_job)})]
    for i in cases:
        for request in step_of(kind, i, the_job, [b.pod("w-0")]).requests:
            assert json.loads(json.dumps(request.body)) == request.body


def test_the_status_digest_leaves_out_what_jobrules_writes_there() -> None:
    """A Volcano job's verdict written into status.state.* and our condition between the
    decision and the Command's creation are no sign the Command did its work; Volcano's own
    marks of it (state.lastTransitionTime, version, its conditions) are."""
    from tests.unit.runtime import corpus

    vcjob = corpus.plans()[0].loaded.kind_named("vcjob")   # the shipped Volcano rules
    assert vcjob.status.phase is not None and vcjob.status.phase.path[:2] == ("status", "state")
    decided = {"status": {"state": {"phase": "Running", "lastTransitionTime": "t0"}, "version": 1,
                          "conditions": [{"status": "Running", "lastTransitionTime": "t0"}]}}
    ours = {"status": {"state": {"phase": "Completed", "reason": "Done", "message": "m",
                                 "lastTransitionTime": "t0"}, "version": 1,
                       "conditions": [{"status": "Running", "lastTransitionTime": "t0"},
                                      *([{"type": vcjob.status.condition, "status": "True"}]
                                        if vcjob.status.condition else [])]}}
    assert intents.status_digest(vcjob, ours) == intents.status_digest(vcjob, decided)
    # a conditions list that holds only ours reads as none, as it was before we wrote it
    bare = {"status": {"state": {"phase": "Running"}}}
    with_ours = {"status": {"state": {"phase": "Running"},
                            "conditions": [{"type": "JobRulesVerdict", "status": "True"}]}}
    import dataclasses

    conditioned = dataclasses.replace(vcjob, status=dataclasses.replace(
        vcjob.status, condition="JobRulesVerdict"))
    assert intents.status_digest(conditioned, with_ours) == intents.status_digest(conditioned, bare)
    for moved in ({**decided["status"], "version": 2},
                  {**decided["status"], "state": {"phase": "Running", "lastTransitionTime": "t1"}},
                  {**decided["status"], "conditions": [{"status": "Completing"}]}):
        assert intents.status_digest(vcjob, {"status": moved}) != intents.status_digest(vcjob, decided)


# -- steps, in detail ----------------------------------------------------------------------------

def test_an_eviction_names_the_pod_it_evicts(kind: plan.Kind) -> None:
    """policy/v1 Eviction: the API server requires its name and namespace to be the pod's."""
    [request] = step_of(kind, intent("restartJob", targets=(("w-0", "uid-w-0"),)), job(),
                        [b.pod("w-0")]).requests
    assert {k: v for k, v in request.body.items() if k != "deleteOptions"} == {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "w-0", "namespace": "ml"}}


def test_every_recorded_pod_still_there_is_deleted(kind: plan.Kind) -> None:
    i = intent("restartTask", targets=(("w-0", "uid-w-0"), ("w-1", "uid-w-1")))
    nxt = step_of(kind, i, job(), [b.pod("w-1"), b.pod("w-0")])
    assert [r.path.rsplit("/", 1)[1] for r in nxt.requests] == ["w-0", "w-1"]
    assert nxt.note is None and not nxt.done


def test_a_condition_not_true_is_written_over(kind: plan.Kind) -> None:
    """Ours at status False (or another type at True) is not the action done."""
    the_job = job({"conditions": [b.condition("FailureTarget", status="False"), b.condition("Other")]})
    [request] = step_of(kind, intent("failJob"), the_job, []).requests
    conditions = request.body["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [("Other", "True"), ("FailureTarget", "True")]
    assert conditions[1]["lastTransitionTime"] == conditions[1]["lastProbeTime"] == "2026-01-01T00:10:00Z"


@pytest.mark.parametrize("fields, reason, message", [
    ({"reason": "no good", "message": None}, "FailJob", "no good"),
    ({"reason": None, "message": None}, "FailJob", "failJob"),
    ({"reason": "Five", "message": "m" * 40000}, "Five", None),
])
def test_a_condition_s_reason_fits_the_schema_and_its_message_is_never_empty(
        kind: plan.Kind, fields: dict, reason: str, message: str | None) -> None:
    from runtime import objects
    [request] = step_of(kind, intent("failJob", **fields), job(), []).requests
    [written] = request.body["status"]["conditions"]
    assert written["reason"] == reason
    if message is None:
        assert len(written["message"]) == objects.CONDITION_MESSAGE_MAX
    else:
        assert written["message"] == message


def test_a_condition_without_a_status_subresource_patches_the_job(kind: plan.Kind) -> None:
    [request] = step_of(kind, intent("failJob"), job(), [], subresource=False).requests
    assert request.path == "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs/train"


def test_a_field_patch_is_guarded_and_sets_only_that_field(kind: plan.Kind) -> None:
    [request] = step_of(kind, intent("terminateJob", step=1), job(), []).requests
    assert (request.method, request.guarded, request.done_on) == ("PATCH", True, frozenset())


def test_an_await_without_a_start_waits_its_whole_time(kind: plan.Kind) -> None:
    """An intent whose step has no start time (an old journal) counts from now."""
    i = intent("restartJob", step=1, since=None)
    assert step_of(kind, i, job(), [b.pod("w-0")]).wait == actions.AWAIT_POLL


def test_an_await_gives_up_exactly_at_its_time(kind: plan.Kind) -> None:
    i = intent("restartJob", step=1, since="2026-01-01T00:09:00Z")
    assert step_of(kind, i, job(), [b.pod("w-0")], NOW - timedelta(seconds=1)).wait == actions.AWAIT_POLL
    assert step_of(kind, i, job(), [b.pod("w-0")], NOW).failed == "waited 60s for it in vain"


def test_an_await_reads_the_pods_and_the_job(kind: plan.Kind, tmp_path: Path) -> None:
    """`await` conditions over the job's own fields and name see this job."""
    k = compiled(tmp_path, RULES.replace(
        "await no pod running within 1m",
        'await <<metadata.name == `"train"` && status.state.phase == `"Done"`>> within 1m'))
    i = intent("restartJob", step=1, since="2026-01-01T00:09:30Z")
    assert step_of(k, i, job({"state": {"phase": "Done"}}), []).note == "holds"
    assert step_of(k, i, job({"state": {"phase": "Running"}}), []).wait == actions.AWAIT_POLL


def test_a_created_object_renders_with_the_intent_s_task_and_pod(tmp_path: Path) -> None:
    k = compiled(tmp_path, RULES.replace(
        'note: <<metadata.name>> }',
        'note: "{job}/{namespace}/{kind}/{task}/{pod}", reason: <<missing>>, owner: job }'))
    the_job = job()
    i = intent("completeJob", task="worker", pod="w-0",
               observed={"status": intents.status_digest(k, the_job)})
    [request] = step_of(k, i, the_job, []).requests
    assert request.body["note"] == "train/ml/Job/worker/w-0"
    assert request.body["reason"] == "Why"     # a template that renders nothing: the intent's reason
    assert request.body["owner"] == request.body["metadata"]["ownerReferences"][0]


def test_a_step_is_done_only_with_nothing_to_send_wait_for_or_give_up() -> None:
    assert actions.Next().done and actions.Next(note="already so").done
    assert not actions.Next(wait=0.0).done
    assert not actions.Next(failed="").done
    assert not actions.Next((actions.Request("DELETE", "/p", None),)).done


def test_a_created_object_is_of_the_step_s_kind_in_the_job_s_namespace(tmp_path: Path) -> None:
    k = compiled(tmp_path, RULES.replace(
        'note: <<metadata.name>> }',
        'note: <<metadata.name>>, at: <<now()>>, extra: <<missing>> }'))
    the_job = job()
    i = intent("completeJob", observed={"status": intents.status_digest(k, the_job)})
    [request] = step_of(k, i, the_job, []).requests
    body = request.body
    assert (body["apiVersion"], body["kind"]) == ("bus.volcano.sh/v1alpha1", "Command")
    assert body["metadata"]["namespace"] == "ml"
    assert body["at"] == "2026-01-01T00:10:00Z"      # the evaluation's clock, not the wall's
    assert body["extra"] is None                     # only `reason` falls back to the intent's


def test_an_object_not_made_says_why(kind: plan.Kind) -> None:
    i = intent("completeJob", observed={"status": intents.status_digest(kind, job())})
    nxt = step_of(kind, i, job({"state": {"phase": "Completing"}}), [])
    assert nxt.note == ("the job's status moved since the action was decided: the object may "
                        "have done its work already")


def test_a_recorded_pod_gone_does_not_stop_the_others(kind: plan.Kind) -> None:
    i = intent("restartTask", targets=(("w-0", "uid-w-0"), ("w-1", "uid-w-1"), ("w-2", "uid-w-2")))
    nxt = step_of(kind, i, job(), [b.pod("w-1", deleting=3), b.pod("w-2")])
    assert [r.path.rsplit("/", 1)[1] for r in nxt.requests] == ["w-2"]


def test_an_await_reads_the_evaluation_s_clock(tmp_path: Path) -> None:
    k = compiled(tmp_path, RULES.replace(
        "await no pod running within 1m",
        'await <<now() == `"2026-01-01T00:10:00Z"`>> within 1m'))
    i = intent("restartJob", step=1, since="2026-01-01T00:09:30Z")
    assert step_of(k, i, job(), []).note == "holds"
    assert step_of(k, i, job(), [], NOW + timedelta(seconds=1)).wait == actions.AWAIT_POLL


def test_an_await_for_a_time_reads_the_evaluation_s_clock(tmp_path: Path) -> None:
    """`for D` inside an `await` counts from the pod's start to the evaluation's now."""
    k = compiled(tmp_path, RULES.replace("await no pod running within 1m",
                                         "await any pod running for 30s within 1m"))
    i = intent("restartJob", step=1, since=None)
    running = [b.pod("w-0")]                     # started at T0 + 1 s
    assert step_of(k, i, job(), running, b.T0 + timedelta(seconds=30)).wait == actions.AWAIT_POLL
    assert step_of(k, i, job(), running, b.T0 + timedelta(seconds=31)).note == "holds"


def test_an_await_reads_the_tasks_of_a_kind_that_names_them_by_expression(tmp_path: Path) -> None:
    k = compiled(tmp_path, RULES.replace(
        'task label "volcano.sh/task-spec"', "task <<metadata.labels.role>>").replace(
        "await no pod running within 1m", 'await no pod of task "ps" running within 1m'))
    i = intent("restartJob", step=1, since=None)
    ps, worker = b.pod("p-0", labels={"role": "ps"}), b.pod("w-0", labels={"role": "worker"})
    assert step_of(k, i, job(), [worker]).note == "holds"
    assert step_of(k, i, job(), [worker, ps]).wait == actions.AWAIT_POLL


@pytest.mark.parametrize("var", ["job", "namespace", "kind"])
def test_an_await_s_count_renders_the_job_s_placeholders(tmp_path: Path, var: str) -> None:
    """A count's value may be a template (the plan allows `{job}`, `{namespace}`, `{kind}`
    there): the await hands the condition this job's name, namespace and kind."""
    shape = json.loads(emit.dumps(api.build_sources(
        [api.read(str(_written(tmp_path, RULES)))]).plan))
    [await_step] = [s for s in shape["kinds"][0]["actions"]["restartJob"]["steps"]
                    if s["op"] == "await"]
    await_step["when"] = {"op": "count", "task": None, "state": "running", "filter": None,
                          "cmp": "==", "value": [{"var": var}]}
    [k] = plan.load(shape).kinds
    the_job = b.job(**{"name": "train", "namespace": "ml", "kind": "Job",
                       {"job": "name"}.get(var, var): "2"})
    i = intent("restartJob", step=1, since=None)
    two = [b.pod("w-0"), b.pod("w-1")]
    assert step_of(k, i, the_job, two).note == "holds"
    assert step_of(k, i, the_job, two[:1]).wait == actions.AWAIT_POLL


def _written(folder: Path, rules: str) -> Path:
    path = folder / "j.rules"
    path.write_text(rules)
    return path


# -- guarded recipes and other objects: placeholders and the clock ---------------------------------

TICKETS_RULES = """
job trainer: batch.volcano.sh/v1alpha1 Job {
    pods owned
    failed     when any pod failed
    running    when any pod running
    pending    otherwise
    on pod failed exit 4 -> restart job max 1
    on pod failed exit 5 -> abort job
    on pod failed exit 6 -> fail job
    actions {
        restart job when <<age(metadata.creationTimestamp) > `3600`>>
                    -> set spec.hold = true on example.com/v1 Ticket
                           label "example.com/for" = "{job}.{namespace}.{kind}",
                       set spec.paused = true
        restart job -> delete pods
        abort job   -> set spec.hold = true on example.com/v1 Ticket
                           label "example.com/old" = <<to_string(age(metadata.creationTimestamp) > `3600`)>>
        fail job    -> record
    }
}
"""
TICKETS = "/apis/example.com/v1/namespaces/ml/tickets"


@pytest.fixture(scope="module")
def ticketing(tmp_path_factory: pytest.TempPathFactory) -> plan.Kind:
    return compiled(tmp_path_factory.mktemp("tickets"), TICKETS_RULES)


def created(ago: timedelta) -> dict:
    out = job()
    out["metadata"]["creationTimestamp"] = (NOW - ago).strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def test_a_guarded_recipe_is_chosen_at_the_clock_of_the_decision(ticketing: plan.Kind) -> None:
    old = created(timedelta(hours=2))
    assert actions.variant(ticketing, "restartJob", old, NOW) == 0
    assert actions.variant(ticketing, "restartJob", old, NOW - timedelta(hours=1, minutes=30)) is None
    assert actions.variant(ticketing, "restartJob", created(timedelta(minutes=10)), NOW) is None


def test_the_objects_of_a_step_are_listed_by_the_job_s_placeholders(ticketing: plan.Kind) -> None:
    restart = intent("restartJob", recipe=0)
    assert actions.lookups(ticketing, (restart,), created(timedelta(hours=2)), NOW) == (
        (TICKETS, "example.com/for=train.ml.Job"),)


def test_the_objects_of_a_step_are_listed_and_set_at_the_clock_of_the_pass(ticketing: plan.Kind) -> None:
    """The label's expression reads the job's age now: the same job lists other objects an
    hour later. The journal's intents are read past one whose recipe lists nothing."""
    young = created(timedelta(minutes=10))
    abort = intent("abortJob")
    assert actions.lookups(ticketing, (intent("failJob"), abort), young, NOW) == (
        (TICKETS, "example.com/old=false"),)
    later = NOW + timedelta(hours=1)
    where = (TICKETS, "example.com/old=true")
    assert actions.lookups(ticketing, (abort,), young, later) == (where,)
    ticket = {"apiVersion": "example.com/v1", "kind": "Ticket",
              "metadata": {"name": "t1", "namespace": "ml", "labels": {"example.com/old": "true"}}}
    step = actions.next_step(ticketing, abort, young, [], later, status_subresource=True,
                             related={where: [ticket]})
    assert [(r.method, r.path, r.body) for r in step.requests] == [
        ("PATCH", f"{TICKETS}/t1", {"spec": {"hold": True}})]


def test_the_recipe_chosen_at_the_decision_is_the_one_recorded_and_carried_out(
        ticketing: plan.Kind) -> None:
    """An old job's restart takes the guarded recipe (no pod to delete, two steps); a young
    job's the plain one (its pods recorded). The journal goes through the recipe recorded."""
    failed = [b.pod("w-0", "Failed", containers=[b.terminated("main", 4)]), b.pod("w-1")]
    [old] = reconcile.reconcile(ticketing, created(timedelta(hours=2)), failed, NOW).new
    assert (old.action, old.recipe, old.targets) == ("restartJob", 0, ())
    [young] = reconcile.reconcile(ticketing, created(timedelta(minutes=10)), failed, NOW).new
    assert (young.action, young.recipe, young.targets) == (
        "restartJob", None, (("w-0", "uid-w-0"), ("w-1", "uid-w-1")))
    at_second = intent("restartJob", recipe=0, step=1)
    run = journal.Pass(ticketing, (), NOW, "/job", True, {})
    _, todo, _ = journal.advance(run, journal.start((at_second,)), created(timedelta(hours=2)), None)
    assert isinstance(todo, journal.Send) and todo.body["spec"] == {"paused": True}


def test_the_journal_lists_the_objects_at_the_clock_of_the_pass(ticketing: plan.Kind) -> None:
    young = created(timedelta(minutes=10))
    assert journal.lookups(ticketing, (intent("abortJob"),), young, NOW + timedelta(hours=1)) == (
        (TICKETS, "example.com/old=true"),)
