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
