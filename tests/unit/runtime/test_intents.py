"""The intent journal's annotation (runtime.intents): its exact text, the ids a replay relies on,
and the error that names the field a damaged journal got wrong."""

from __future__ import annotations

import json

import pytest

from runtime import intents
from runtime.intents import Intent

FULL = Intent(id="i1", action="restartPod", policy="p", rule="a.rules:3:5", reason="Évicted",
              message="pod wörker-0 evicted", task="worker", pod="worker-0", uid="u-0",
              targets=(("worker-0", "u-0"), ("worker-1", "u-1")), step=2, attempts=1,
              since="2026-01-01T00:00:00Z", observed={"status": "abc"})


def test_encoding_is_compact_sorted_and_keeps_unicode() -> None:
    # The annotation is written in one form only (compared as text to decide whether to write):
    # no spaces, keys sorted, non-ASCII kept as is.
    bare = Intent(id="x", action="failJob", policy="p", rule="r", reason=None, message="né")
    assert intents.encode((bare,)) == (
        '{"open":[{"action":"failJob","id":"x","message":"né","policy":"p","rule":"r"}],"v":1}')


def test_encoding_of_every_field_reads_back() -> None:
    text = intents.encode((FULL,))
    assert text is not None
    assert json.loads(text) == {"v": 1, "open": [{
        "id": "i1", "action": "restartPod", "policy": "p", "rule": "a.rules:3:5", "reason": "Évicted",
        "message": "pod wörker-0 evicted", "task": "worker", "pod": "worker-0", "uid": "u-0",
        "targets": [["worker-0", "u-0"], ["worker-1", "u-1"]], "step": 2, "attempts": 1,
        "since": "2026-01-01T00:00:00Z", "observed": {"status": "abc"}}]}
    assert intents.decode(text) == intents.Decoded((FULL,), None)
    assert intents.encode(()) is None


def test_defaults_of_a_sparse_intent() -> None:
    decoded = intents.decode('{"v":1,"open":[{"id":"a","action":"failJob","policy":"p"}]}')
    assert decoded.error is None
    [i] = decoded.intents
    assert (i.rule, i.reason, i.targets, i.step, i.attempts, i.since, i.observed) == ("", None, (), 0, 0, None, {})
    assert intents.decode('{"v":1}') == intents.Decoded((), None)   # no "open": nothing open


def test_ids_are_stable_across_versions() -> None:
    # Ids are kept in live journals: a controller that named the same decision differently
    # after an upgrade would carry out an action twice. Pinned values, not a recomputation.
    assert intents.intent_id("uid-1", None, "p", None) == "b6a8186752e8"
    assert intents.intent_id("uid-1", "", "p", "") == "b6a8186752e8"
    assert intents.intent_id("uid-1", "s", "p", "pod-a") == "fd01fe5162f3"
    assert intents.intent_id("uid-1", "sp", "", "pod-a") != intents.intent_id("uid-1", "s", "p", "pod-a")


def test_status_digest_ignores_key_order() -> None:
    from builders import load_kind

    kind = load_kind()
    a = {"status": {"phase": "Running", "active": 1}}
    b = {"status": {"active": 1, "phase": "Running"}}
    assert intents.status_digest(kind, a) == intents.status_digest(kind, b) == "e924fb1750b9e723"
    assert intents.status_digest(kind, {}) == intents.status_digest(kind, {"status": None})


def _one(**fields: object) -> str:
    item = {"id": "a", "action": "failJob", "policy": "p", **fields}
    return json.dumps({"v": 1, "open": [item]})


@pytest.mark.parametrize("text, error", [
    ("[]", "intents ignored: intents: expected an object, got list"),
    ('{"v":1,"open":{}}', "intents ignored: intents.open: expected a list, got dict"),
    ('{"v":1,"open":[3]}', "intents ignored: intent: expected an object, got int"),
    ('{"v":2}', "intents ignored: version 2 is not 1"),
    ('{"open":[]}', "intents ignored: version None is not 1"),
    (_one(id=1), "intents ignored: intent.id: expected a string, got int"),
    (_one(action=None), "intents ignored: intent.action: expected a string, got NoneType"),
    (_one(policy=[]), "intents ignored: intent.policy: expected a string, got list"),
    (_one(rule=2), "intents ignored: intent.rule: expected a string, got int"),
    (_one(reason=2), "intents ignored: intent.reason: expected a string, got int"),
    (_one(message=2), "intents ignored: intent.message: expected a string, got int"),
    (_one(task=2), "intents ignored: intent.task: expected a string, got int"),
    (_one(pod=2), "intents ignored: intent.pod: expected a string, got int"),
    (_one(uid=2), "intents ignored: intent.uid: expected a string, got int"),
    (_one(since=2), "intents ignored: intent.since: expected a string, got int"),
    (_one(targets={}), "intents ignored: intent.targets: expected a list, got dict"),
    (_one(targets=["a"]), "intents ignored: intent.targets: expected a list, got str"),
    (_one(targets=[["a"]]), "intents ignored: intent.targets: expected [name, uid], got ['a']"),
    (_one(targets=[[1, "u"]]), "intents ignored: intent.targets: expected a string, got int"),
    (_one(targets=[["a", 1]]), "intents ignored: intent.targets: expected a string, got int"),
    (_one(step=-1), "intents ignored: intent.step: expected a non-negative integer, got -1"),
    (_one(attempts=True), "intents ignored: intent.attempts: expected a non-negative integer, got True"),
    (_one(observed=[]), "intents ignored: intent.observed: expected an object, got list"),
    ("{", "intents are not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); dropped"),
])
def test_a_damaged_journal_is_dropped_naming_the_field(text: str, error: str) -> None:
    assert intents.decode(text) == intents.Decoded((), error)


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_no_journal(text: str | None) -> None:
    assert intents.decode(text) == intents.Decoded((), None)


def test_advanced_moves_to_the_next_step_afresh() -> None:
    moved = FULL.advanced("2026-01-02T00:00:00Z")
    assert (moved.step, moved.attempts, moved.since) == (3, 0, "2026-01-02T00:00:00Z")
    assert moved.observed == FULL.observed and moved.id == FULL.id
