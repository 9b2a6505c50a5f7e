"""runtime.writeback: the verdict annotation, the condition, status fields and Events, each
written only when it differs from what the job has."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from builders import load_kind, verdict
from runtime import evaluator, state, writeback

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
LATER = NOW + timedelta(minutes=5)


def kind(status: dict[str, Any] | None = None) -> Any:
    k = load_kind([verdict("Pending")])
    if status is None:
        return k
    from runtime import plan
    import dataclasses
    return dataclasses.replace(k, status=plan._kind({**_kind_json(), "status": status}).status)


def _kind_json() -> dict[str, Any]:
    return {"name": "k", "span": {"path": "t", "line": 1, "column": 1, "endLine": 1, "endColumn": 2},
            "version": "v1", "kind": "K", "plural": "ks", "apiVersion": "x/v1"}


def job(conditions: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None,
        generation: int = 3, **status: Any) -> dict[str, Any]:
    return {"apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "42",
                         "generation": generation, "annotations": annotations or {}},
            "status": {"conditions": conditions or [], **status}}


def v(phase: str, reason: str | None = None, message: str | None = None, final: bool = False
      ) -> evaluator.Verdict:
    return evaluator.Verdict(phase, reason, message, "r.rules:3:5", final)


# -- the condition ---------------------------------------------------------------------------

def test_the_condition_is_added_beside_the_others() -> None:
    other = {"type": "Complete", "status": "False"}
    out = writeback.condition(kind(), job([other]), v("Failed", "PodFailed", "pod p OOMKilled"), NOW)
    assert out == [other, {"type": "JobRulesVerdict", "status": "True", "reason": "PodFailed",
                           "message": "pod p OOMKilled (r.rules:3:5)",
                           "lastTransitionTime": "2024-05-01T12:00:00Z",
                           "observedGeneration": 3}]


def test_nothing_is_written_when_the_condition_is_so() -> None:
    first = writeback.condition(kind(), job(), v("Running"), NOW)
    assert first is not None
    assert writeback.condition(kind(), job(first), v("Running"), LATER) is None


def test_the_transition_time_moves_only_when_the_status_flips() -> None:
    [running] = writeback.condition(kind(), job(), v("Running"), NOW)    # type: ignore[misc]
    [restarting] = writeback.condition(kind(), job([running]), v("Restarting", "Again"), LATER)  # type: ignore[misc]
    assert restarting["lastTransitionTime"] == running["lastTransitionTime"]   # Unknown both
    [failed] = writeback.condition(kind(), job([restarting]), v("Failed"), LATER)  # type: ignore[misc]
    assert failed["status"] == "True" and failed["lastTransitionTime"] == "2024-05-01T12:05:00Z"


def test_observed_generation_counts_only_where_the_schema_keeps_it() -> None:
    pruned = {"type": "JobRulesVerdict", "status": "Unknown", "reason": "Running",
              "message": "verdict Running (r.rules:3:5)", "lastTransitionTime": "2024-05-01T12:00:00Z"}
    assert writeback.condition(kind(), job([pruned], generation=9), v("Running"), LATER) is None
    kept = {**pruned, "observedGeneration": 3}
    assert writeback.condition(kind(), job([kept], generation=9), v("Running"), LATER)[0][
        "observedGeneration"] == 9    # type: ignore[index]


@pytest.mark.parametrize("reason, written", [
    ("PodFailed", "PodFailed"), ("Back_off:7", "Back_off:7"),
    ("restart budget 3/3 for pod evicted spent", "Failed"), ("", "Failed"), (None, "Failed"),
    ("9lives", "Failed"), ("x" * 1025, "Failed"),
])
def test_reasons_fit_the_condition_schema(reason: str | None, written: str) -> None:
    [cond] = writeback.condition(kind(), job(), v("Failed", reason, "m"), NOW)  # type: ignore[misc]
    assert cond["reason"] == written
    if written != reason and reason:
        assert cond["message"].startswith(reason[:50])


def test_no_condition_when_the_kind_writes_none() -> None:
    assert writeback.condition(kind({"condition": None}), job(), v("Failed"), NOW) is None


# -- status fields ---------------------------------------------------------------------------

VOLCANO = {"condition": None,
           "phase": {"path": ["status", "state", "phase"], "map": {"Failed": "Failed"},
                     "only": ["Failed"], "over": ["Completed", "Running"]},
           "reason": {"path": ["status", "state", "reason"]},
           "message": {"path": ["status", "state", "message"]}}


@pytest.mark.parametrize("current, phase, expected", [
    ("Running", "Failed", {"status": {"state": {"phase": "Failed", "reason": "PodFailed", "message": "m"}}}),
    ("Completed", "Failed", {"status": {"state": {"phase": "Failed", "reason": "PodFailed", "message": "m"}}}),
    ("Restarting", "Failed", None),     # not over a phase the operator is acting in
    ("Running", "Running", None),       # only [failed]
    ("Failed", "Failed", {"status": {"state": {"reason": "PodFailed", "message": "m"}}}),  # ours
])
def test_status_fields(current: str, phase: str, expected: Any) -> None:
    j = job(state={"phase": current})
    assert writeback.fields(kind(VOLCANO), j, v(phase, "PodFailed", "m")) == expected


def test_fields_already_written_are_not_written_again() -> None:
    j = job(state={"phase": "Failed", "reason": "PodFailed", "message": "m"})
    assert writeback.status_patch(kind(VOLCANO), j, v("Failed", "PodFailed", "m"), NOW) is None


# -- annotations -------------------------------------------------------------------------------

def test_commit_is_guarded_and_only_when_something_changed() -> None:
    st = state.State(verdict="Running")
    annotation = writeback.verdict_annotation(v("Running"), job(), NOW)
    patch = writeback.commit(job(), st, annotation)
    assert patch == {"metadata": {"resourceVersion": "42", "annotations": {
        state.ANNOTATION: state.encode(st), writeback.VERDICT_ANNOTATION: annotation}}}
    stored = job(annotations=patch["metadata"]["annotations"])
    later = writeback.verdict_annotation(v("Running"), stored, LATER)
    assert json.loads(later)["since"] == "2024-05-01T12:00:00Z"   # the phase did not change
    assert writeback.commit(stored, st, later) is None


def test_no_verdict_annotation_with_no_annotations() -> None:
    patch = writeback.commit(job(), state.State(verdict="Running"), None)
    assert patch is not None and list(patch["metadata"]["annotations"]) == [state.ANNOTATION]


# -- events ------------------------------------------------------------------------------------

def _evaluation(phase: str, problems: tuple[str, ...] = ()) -> evaluator.Evaluation:
    return evaluator.Evaluation(v(phase, "PodFailed", "m"), (), (), state.EMPTY, None, problems)


def test_events_for_a_verdict_change_are_named_from_the_transition() -> None:
    [first] = writeback.events(kind(), job(), "s1", _evaluation("Failed"), "Running", None)
    [again] = writeback.events(kind(), job(), "s1", _evaluation("Failed"), "Running", None)
    [other] = writeback.events(kind(), job(), "s2", _evaluation("Failed"), "Running", None)
    assert first == again and first.name != other.name and first.name.startswith("j.")
    assert (first.type, first.reason, first.action) == ("Warning", "PodFailed", "Verdict")
    assert writeback.events(kind(), job(), "s1", _evaluation("Failed"), "Failed", None) == []


def test_a_first_verdict_is_news_only_when_it_is_an_outcome() -> None:
    assert writeback.events(kind(), job(), None, _evaluation("Running"), None, None) == []
    assert len(writeback.events(kind(), job(), None, _evaluation("Succeeded"), None, None)) == 1


def test_problems_and_ignored_state_are_warnings() -> None:
    out = writeback.events(kind(), job(), "s", _evaluation("Running", ("t:1:1: <<x>>: bad",)),
                           "Running", "stored state is not JSON")
    assert [(e.reason, e.type) for e in out] == [("RuleError", "Warning"), ("StateIgnored", "Warning")]
    assert writeback.events(kind({"events": False}), job(), "s", _evaluation("Failed"),
                            "Running", None) == []


def test_the_phase_label_is_written_when_the_phase_changes() -> None:
    """`kubectl get KIND -L jobrules.dev/phase` (and `-l`) on any kind, a condition or not."""
    st = state.State(verdict="Running")
    first = writeback.commit(job(), st, None, phase="Running")
    assert first is not None and first["metadata"]["labels"] == {"jobrules.dev/phase": "Running"}
    stored = job(annotations=first["metadata"]["annotations"])
    stored["metadata"]["labels"] = {"jobrules.dev/phase": "Running", "app": "x"}
    assert writeback.commit(stored, st, None, phase="Running") is None   # the same: nothing
    changed = writeback.commit(stored, state.State(verdict="Failed"), None, phase="Failed")
    assert changed is not None and changed["metadata"]["labels"] == {"jobrules.dev/phase": "Failed"}
    assert "labels" not in (writeback.commit(job(), st, None) or {})["metadata"]   # no phase given


# -- the verdict annotation, in detail ---------------------------------------------------------

def test_the_verdict_annotation_is_compact_sorted_json_without_nulls() -> None:
    """One line a `kubectl get -o custom-columns` reads; a message stays as written (UTF-8)."""
    text = writeback.verdict_annotation(v("Failed", None, "pod p: mémoire épuisée", final=True),
                                        job(), NOW)
    assert text == ('{"final":true,"message":"pod p: mémoire épuisée","observedGeneration":3,'
                    '"phase":"Failed","rule":"r.rules:3:5","since":"2024-05-01T12:00:00Z"}')


def test_the_verdict_annotation_names_the_cause_and_its_hint() -> None:
    failed = evaluator.Verdict("Failed", "CauseOom", "pod p", "r.rules:3:5", True, "oom",
                               "raise the memory limit")
    assert json.loads(writeback.verdict_annotation(failed, job(), NOW)) == {
        "phase": "Failed", "reason": "CauseOom", "message": "pod p", "rule": "r.rules:3:5",
        "final": True, "cause": "oom", "hint": "raise the memory limit",
        "since": "2024-05-01T12:00:00Z", "observedGeneration": 3}


@pytest.mark.parametrize("previous", [
    '{"phase":"Failed","since":"2024-04-01T00:00:00Z"}',   # another phase
    '{"phase":"Running","since":7}',                        # not a timestamp
    '{"phase":"Running"}',                                  # none
    'not json', '["Running"]',
])
def test_since_restarts_unless_the_phase_stays_with_a_timestamp(previous: str) -> None:
    stored = job(annotations={writeback.VERDICT_ANNOTATION: previous})
    assert json.loads(writeback.verdict_annotation(v("Running"), stored, LATER))["since"] == \
        "2024-05-01T12:05:00Z"


def test_the_verdict_annotation_leaves_out_a_generation_the_job_lacks() -> None:
    j = job()
    del j["metadata"]["generation"]
    assert "observedGeneration" not in json.loads(writeback.verdict_annotation(v("Running"), j, NOW))


# -- commit, in detail -------------------------------------------------------------------------

def test_commit_writes_the_journal_and_clears_it_once_no_intent_is_open() -> None:
    from runtime import intents
    st = state.State(verdict="Running")
    opened = writeback.commit(job(), st, None, journal="J1")
    assert opened is not None and opened["metadata"]["annotations"] == {
        state.ANNOTATION: state.encode(st), intents.ANNOTATION: "J1"}
    stored = job(annotations=opened["metadata"]["annotations"])
    closed = writeback.commit(stored, st, None, journal=None)
    assert closed == {"metadata": {"resourceVersion": "42", "annotations": {intents.ANNOTATION: None}}}
    assert writeback.commit(stored, st, None, journal="J1") is None
    assert intents.ANNOTATION not in writeback.commit(job(), st, None)["metadata"]["annotations"]  # type: ignore[index]


def test_a_verdict_equal_but_for_formatting_is_not_written_again() -> None:
    st = state.State(verdict="Running")
    current = '{"phase": "Running", "since": "2024-05-01T12:00:00Z"}'   # spaces, another order
    wanted = '{"since":"2024-05-01T12:00:00Z","phase":"Running"}'
    stored = job(annotations={state.ANNOTATION: state.encode(st), writeback.VERDICT_ANNOTATION: current})
    assert writeback.commit(stored, st, wanted) is None
    changed = writeback.commit(stored, st, '{"phase":"Failed"}')
    assert changed is not None
    assert changed["metadata"]["annotations"] == {writeback.VERDICT_ANNOTATION: '{"phase":"Failed"}'}


def test_a_label_alone_is_a_patch_with_no_annotations() -> None:
    st = state.State(verdict="Failed")
    stored = job(annotations={state.ANNOTATION: state.encode(st)})
    assert writeback.commit(stored, st, None, phase="Failed") == {
        "metadata": {"resourceVersion": "42", "labels": {"jobrules.dev/phase": "Failed"}}}


# -- the condition, in detail ------------------------------------------------------------------

def test_the_condition_leaves_out_a_generation_the_job_lacks() -> None:
    j = job()
    del j["metadata"]["generation"]
    [cond] = writeback.condition(kind(), j, v("Running"), NOW)  # type: ignore[misc]
    assert "observedGeneration" not in cond


def test_ours_is_replaced_in_place_among_the_others() -> None:
    before = {"type": "A", "status": "True"}
    after = {"type": "B", "status": "False"}
    ours = {"type": "JobRulesVerdict", "status": "Unknown", "reason": "Old", "message": "old",
            "lastTransitionTime": "2024-04-01T00:00:00Z"}
    out = writeback.condition(kind(), job([before, ours, after]), v("Running", "New"), NOW)
    assert out is not None and [c["type"] for c in out] == ["A", "JobRulesVerdict", "B"]
    assert out[0] is before and out[2] is after
    assert (out[1]["reason"], out[1]["lastTransitionTime"]) == ("New", "2024-04-01T00:00:00Z")


def test_a_condition_with_no_transition_time_gets_one() -> None:
    ours = {"type": "JobRulesVerdict", "status": "Unknown", "reason": "Running",
            "message": "verdict Running (r.rules:3:5)"}
    [cond] = writeback.condition(kind(), job([ours]), v("Running"), NOW)  # type: ignore[misc]
    assert cond["lastTransitionTime"] == "2024-05-01T12:00:00Z"


@pytest.mark.parametrize("field, value", [("type", "JobRulesVerdict"), ("status", "True"),
                                          ("reason", "Other"), ("message", "other")])
def test_any_differing_field_rewrites_the_condition(field: str, value: str) -> None:
    same = {"type": "JobRulesVerdict", "status": "Unknown", "reason": "Running",
            "message": "verdict Running (r.rules:3:5)", "lastTransitionTime": "2024-05-01T12:00:00Z"}
    assert writeback.condition(kind(), job([same]), v("Running"), NOW) is None
    if field != "type":
        assert writeback.condition(kind(), job([{**same, field: value}]), v("Running"), NOW) is not None


def test_the_condition_message_is_bounded() -> None:
    from runtime import objects
    [cond] = writeback.condition(kind(), job(), v("Failed", "R", "x" * 40000), NOW)  # type: ignore[misc]
    assert len(cond["message"]) == objects.CONDITION_MESSAGE_MAX and cond["message"].endswith("…")


# -- messages ----------------------------------------------------------------------------------

@pytest.mark.parametrize("verdict_, message", [
    (evaluator.Verdict("Failed", "PodFailed", "pod p", "f:1:1"), "pod p (f:1:1)"),
    (evaluator.Verdict("Failed", "no good", "pod p", "f:1:1"), "no good: pod p (f:1:1)"),
    (evaluator.Verdict("Failed", "no good", None, "f:1:1"), "no good (f:1:1)"),
    (evaluator.Verdict("Failed", None, None, "f:1:1"), "verdict Failed (f:1:1)"),
    (evaluator.Verdict("Failed", "PodFailed", None, None), "verdict Failed"),
    (evaluator.Verdict("Failed", None, "pod p", None), "pod p"),
    (evaluator.Verdict("Failed", None, "pod p", "f:1:1", True, "oom", "raise the limit"),
     "pod p (cause oom: raise the limit) (f:1:1)"),
    # a cause the rules no longer declare (kept from a final verdict) has no hint
    (evaluator.Verdict("Failed", None, "pod p", "f:1:1", True, "gone", None), "pod p (cause gone) (f:1:1)"),
])
def test_the_message_cites_the_reason_that_did_not_fit_and_the_rule(
        verdict_: evaluator.Verdict, message: str) -> None:
    [cond] = writeback.condition(kind(), job(), verdict_, NOW)  # type: ignore[misc]
    assert cond["message"] == message


# -- status fields, in detail ------------------------------------------------------------------

def test_reason_and_message_fields_without_a_phase_field() -> None:
    status = {"condition": None, "reason": {"path": ["status", "why"]},
              "message": {"path": ["status", "note"]}}
    j = job(why="PodFailed")
    assert writeback.fields(kind(status), j, v("Failed", "PodFailed", "m")) == {"status": {"note": "m"}}
    assert writeback.fields(kind(status), job(why="PodFailed", note="m"),
                            v("Failed", "PodFailed", "m")) is None


def test_a_phase_field_maps_the_phase_and_replaces_only_what_over_lists() -> None:
    status = {"condition": None, "phase": {"path": ["status", "phase"], "map": {"Failed": "Aborted"},
                                           "over": ["Running"]}}
    assert writeback.fields(kind(status), job(phase="Running"), v("Failed")) == {
        "status": {"phase": "Aborted"}}
    assert writeback.fields(kind(status), job(phase="Aborted"), v("Failed")) is None   # ours already
    assert writeback.fields(kind(status), job(phase="Pending"), v("Failed")) is None
    assert writeback.fields(kind(status), job(phase="Running"), v("Running")) is None  # unmapped, same


def test_status_patch_joins_fields_and_the_condition() -> None:
    status = {"condition": "JobRulesVerdict", "reason": {"path": ["status", "why"]}}
    patch = writeback.status_patch(kind(status), job(), v("Failed", "PodFailed"), NOW)
    assert patch is not None and patch["status"]["why"] == "PodFailed"
    assert [c["type"] for c in patch["status"]["conditions"]] == ["JobRulesVerdict"]
    only_condition = writeback.status_patch(kind(), job(), v("Failed", "PodFailed"), NOW)
    assert only_condition is not None and list(only_condition["status"]) == ["conditions"]


def test_audit_annotation_only_writes_no_status() -> None:
    import dataclasses
    from runtime import plan
    k = kind()
    assert writeback.status_patch(k, job(), v("Failed"), NOW) is not None
    assert writeback.status_patch(dataclasses.replace(k, audit=plan.Audit(annotation_only=True)),
                                  job(), v("Failed"), NOW) is None
    assert writeback.status_patch(dataclasses.replace(k, audit=plan.Audit(annotation_only=False)),
                                  job(), v("Failed"), NOW) is not None


# -- events, in detail -------------------------------------------------------------------------

def _target(pod: str | None = "p-0", task: str | None = "t", uid: str | None = "pu"
            ) -> evaluator.Target:
    return evaluator.Target("j", "ns", task, pod, uid)


def _audited(action: str = "restartPod", target: evaluator.Target | None = None,
             message: str | None = "oom", budget: evaluator.BudgetUse | None = None,
             policy: str = "P1") -> evaluator.Action:
    return evaluator.Action(action, "audited", policy, "PodFailed", "r.rules:9:1", "Oom", message,
                            target or _target(), None, budget)


def test_a_verdict_event_is_normal_unless_failed() -> None:
    [done] = writeback.events(kind(), job(), "s", _evaluation("Succeeded"), "Running", None)
    assert (done.type, done.reason, done.action, done.note, done.related_pod) == (
        "Normal", "PodFailed", "Verdict", "m (r.rules:3:5)", None)
    [running] = writeback.events(kind(), job(), "s", _evaluation("Running"), "Pending", None)
    assert running.type == "Normal"


def test_an_event_reason_that_does_not_fit_is_the_phase() -> None:
    ev = evaluator.Evaluation(v("Failed", "no good at all", "m"), (), (), state.EMPTY, None, ())
    [e] = writeback.events(kind(), job(), "s", ev, "Running", None)
    assert (e.reason, e.note) == ("Failed", "no good at all: m (r.rules:3:5)")


def test_event_notes_are_bounded() -> None:
    long = "x" * 5000
    ev = evaluator.Evaluation(v("Failed", "PodFailed", long), (), (), state.EMPTY, None, (long,))
    out = writeback.events(kind(), job(), "s", ev, "Running", long, long)
    assert len(out) == 4
    assert all(len(e.note) == writeback.EVENT_NOTE_MAX and e.note.endswith("…") for e in out)


def test_at_most_five_problems_are_told() -> None:
    problems = tuple(f"t:{n}:1: bad" for n in range(8))
    out = writeback.events(kind(), job(), "s", _evaluation("Running", problems), "Running", None)
    assert [e.note for e in out] == list(problems[:5])
    assert {(e.type, e.reason, e.action) for e in out} == {("Warning", "RuleError", "Evaluate")}
    assert len({e.name for e in out}) == 5


def test_a_journal_that_cannot_be_read_is_a_warning() -> None:
    [e] = writeback.events(kind(), job(), "s", _evaluation("Running"), "Running", None, "bad journal")
    assert (e.type, e.reason, e.action) == ("Warning", "JournalIgnored", "Act")
    assert e.note == "bad journal: what its actions held is let go of"


def test_state_journal_and_problem_events_are_named_apart() -> None:
    """The same text as a problem, a state error and a journal error: three Events."""
    out = writeback.events(kind(), job(), "s", _evaluation("Running", ("same",)), "Running", "same", "same")
    assert [e.reason for e in out] == ["RuleError", "StateIgnored", "JournalIgnored"]
    assert len({e.name for e in out}) == 3
    assert all(e.related_pod is None for e in out)
    [state_event] = writeback.events(kind(), job(), "s", _evaluation("Running"), "Running", "same")
    assert (state_event.action, state_event.note) == ("Evaluate", "same")


def test_event_names_are_the_job_name_bounded_then_a_digest() -> None:
    import re
    long = job()
    long["metadata"]["name"] = "n" * 250
    [e] = writeback.events(kind(), long, "s", _evaluation("Failed"), "Running", None)
    assert re.fullmatch(r"n{200}\.[0-9a-f]{16}", e.name)
    nameless = job()
    del nameless["metadata"]["name"]
    [e] = writeback.events(kind(), nameless, "s", _evaluation("Failed"), "Running", None)
    assert re.fullmatch(r"job\.[0-9a-f]{16}", e.name)


def test_event_names_depend_on_the_job_uid_and_the_state_read() -> None:
    other = job()
    other["metadata"]["uid"] = "v"
    names = {writeback.events(kind(), j, s, _evaluation("Failed"), "Running", None)[0].name
             for j, s in ((job(), "s"), (other, "s"), (job(), None), (job(), "s2"))}
    assert len(names) == 4
    # no state read and an empty one are the same read
    assert writeback.events(kind(), job(), None, _evaluation("Failed"), "Running", None) == \
        writeback.events(kind(), job(), "", _evaluation("Failed"), "Running", None)


def test_an_audited_action_is_said_not_done() -> None:
    ev = evaluator.Evaluation(v("Running"), (), (_audited(budget=evaluator.BudgetUse("k", 2, 3)),),
                              state.EMPTY, None, ())
    [e] = writeback.events(kind(), job(), "s", ev, "Running", None)
    assert (e.type, e.reason, e.action, e.related_pod) == ("Normal", "Audit", "RestartPod", "p-0")
    assert e.note == "would restart pod p-0: oom (budget 2/3) (r.rules:9:1; audit: not done)"


def test_only_audited_actions_make_audit_events() -> None:
    run = dataclasses_replace(_audited(), status="run")
    ev = evaluator.Evaluation(v("Running"), (), (run,), state.EMPTY, None, ())
    assert writeback.events(kind(), job(), "s", ev, "Running", None) == []


def dataclasses_replace(a: Any, **changes: Any) -> Any:
    import dataclasses
    return dataclasses.replace(a, **changes)


@pytest.mark.parametrize("action, target, note", [
    ("restartTask", _target(pod=None), "would restart task t (r.rules:9:1; audit: not done)"),
    ("failJob", _target(), "would fail job (r.rules:9:1; audit: not done)"),
    ("restartPod", _target(pod=None, task=None), "would restart pod (r.rules:9:1; audit: not done)"),
    ("someNewAction", _target(pod=None, task=None), "would someNewAction (r.rules:9:1; audit: not done)"),
])
def test_audit_notes_name_a_target_only_for_pod_and_task_actions(
        action: str, target: evaluator.Target, note: str) -> None:
    e = writeback.audit_event(job(), "s", _audited(action, target, message=None))
    assert e.note == note


def test_audit_event_names_tell_policies_actions_and_targets_apart() -> None:
    base = writeback.audit_event(job(), "s", _audited())
    assert base.name == writeback.audit_event(job(), "s", _audited()).name
    others = [writeback.audit_event(job(), "s", _audited(policy="P2")),
              writeback.audit_event(job(), "s", _audited("failTask")),
              writeback.audit_event(job(), "s", _audited(target=_target(uid="other"))),
              writeback.audit_event(job(), "s2", _audited())]
    assert len({base.name, *(o.name for o in others)}) == 5
    # without a uid the target's name tells them apart
    a = writeback.audit_event(job(), "s", _audited(target=_target(pod="a", uid=None)))
    b = writeback.audit_event(job(), "s", _audited(target=_target(pod="b", uid=None)))
    t = writeback.audit_event(job(), "s", _audited(target=_target(pod=None, task="t1", uid=None)))
    u = writeback.audit_event(job(), "s", _audited(target=_target(pod=None, task="t2", uid=None)))
    assert len({a.name, b.name, t.name, u.name}) == 4
    assert a.name.startswith("j.")


def _intent(action: str = "restartPod", pod: str | None = "p-0", message: str | None = "oom",
            reason: str | None = "PodFailed", id: str = "i1") -> Any:
    from runtime import intents
    return intents.Intent(id, action, "P1", "r.rules:9:1", reason, message, pod=pod)


@pytest.mark.parametrize("intent, reason, action, note", [
    (_intent(), "PodFailed", "RestartPod", "restart pod p-0: oom (r.rules:9:1)"),
    (_intent("failJob", pod=None, message=None, reason="no good"), "FailJob", "FailJob",
     "fail job (r.rules:9:1)"),
    (_intent("restartTask", pod=None, reason=None), "RestartTask", "RestartTask",
     "restart task: oom (r.rules:9:1)"),
])
def test_an_action_done_is_a_normal_event(intent: Any, reason: str, action: str, note: str) -> None:
    e = writeback.action_event(job(), intent)
    assert (e.type, e.reason, e.action, e.note, e.related_pod) == ("Normal", reason, action, note, intent.pod)
    assert e.name.startswith("j.")


def test_action_events_are_named_from_the_intent_and_the_outcome() -> None:
    done = writeback.action_event(job(), _intent())
    assert done.name == writeback.action_event(job(), _intent(message="other")).name
    assert done.name != writeback.action_event(job(), _intent(id="i2")).name
    failed = writeback.action_failed_event(job(), _intent(), "forbidden")
    assert failed.name != done.name
    assert failed.name == writeback.action_failed_event(job(), _intent(), "other").name
    assert (failed.type, failed.reason, failed.action, failed.related_pod) == (
        "Warning", "ActionFailed", "RestartPod", "p-0")
    assert failed.note == "restart pod (r.rules:9:1) given up: forbidden"


def test_action_event_texts_are_bounded() -> None:
    long = "x" * 2000
    e = writeback.action_event(job(), _intent(message=long))
    assert len(e.note) == writeback.EVENT_NOTE_MAX and e.note.endswith("…")
    f = writeback.action_failed_event(job(), _intent(), long)
    assert len(f.note) == writeback.EVENT_NOTE_MAX
    r = writeback.action_event(job(), _intent(reason="R" * 200))
    assert r.reason == "R" * 127 + "…"
    a = writeback.audit_event(job(), "s", _audited(message=long))
    assert len(a.note) == writeback.EVENT_NOTE_MAX


def _named(name: str, *parts: str) -> str:
    import hashlib
    return f"{name[:200]}.{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]}"


def test_event_names_are_the_same_in_every_release() -> None:
    """An Event's name is a contract across controller versions: a replay after an upgrade
    (a crash before the commit, a new image) must name the same Event so that the API server
    refuses it as existing. The scheme, pinned: the job's name (at most 200 characters), a dot,
    16 hex digits of SHA-256 over the job's uid, the state read, what happened and its detail,
    NUL-separated (an action's Events: the intent's id instead of uid and state)."""
    ev = evaluator.Evaluation(v("Failed", "PodFailed", "m"), (), (_audited(),), state.EMPTY, None,
                              ("t:1:1: bad",))
    out = writeback.events(kind(), job(), "S", ev, "Running", "not JSON", "journal broken")
    assert [e.name for e in out] == [
        _named("j", "u", "S", "verdict", "Failed"),
        _named("j", "u", "S", "audit", "P1\0restartPod\0pu"),
        _named("j", "u", "S", "problem", "t:1:1: bad"),
        _named("j", "u", "S", "state", "not JSON"),
        _named("j", "u", "S", "journal", "journal broken"),
    ]
    [first] = writeback.events(kind(), job(), None, _evaluation("Failed"), "Running", None)
    assert first.name == _named("j", "u", "", "verdict", "Failed")
    assert writeback.action_event(job(), _intent()).name == _named("j", "i1", "action", "done")
    assert writeback.action_failed_event(job(), _intent(), "no").name == _named("j", "i1", "action", "failed")
    nameless = writeback.audit_event(job(), "S", _audited(target=_target(pod=None, task=None, uid=None)))
    assert nameless.name == _named("j", "S", "audit", "P1\0restartPod\0")


@pytest.mark.parametrize("annotations, labels, expected", [
    ({"a": "1", "b": "2"}, {"l": "x"}, True),   # another annotation left as it is
    ({"a": "1"}, {"l": "x"}, True),                 # a removal: absent
    ({"a": "1", "b": "2", "c": "3"}, {"l": "x"}, False),   # a removal not written
    ({"a": "0", "b": "2"}, {"l": "x"}, False),
    ({"a": "1", "b": "2"}, {"l": "y"}, False),
    ({"a": "1", "b": "2"}, {}, False),
])
def test_landed_says_whether_the_commits_metadata_was_written(
        annotations: dict[str, str], labels: dict[str, str], expected: bool) -> None:
    commit = {"metadata": {"resourceVersion": "7", "annotations": {"a": "1", "c": None},
                           "labels": {"l": "x"}}}
    job = {"metadata": {"annotations": annotations, "labels": labels}}
    assert writeback.landed(commit, job) is expected
    assert writeback.landed({"metadata": {"resourceVersion": "7"}}, job)
