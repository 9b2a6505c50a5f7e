"""Stored state: a compact, readable, versioned annotation that never crashes the reader."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from runtime import evaluator, pods, state
from builders import (
    T0, action, job, load_kind, pod, pods_cond, policy, verdict,
)

FULL = state.State(
    verdict="Running",
    final=state.Final("Failed", "TooManyEvictions", "pod x evicted", "t.rules:3:5"),
    pods={pods.digest("a"): state.PodRecord("worker", "R", 2),
          pods.digest("b"): state.PodRecord("worker", "F", 0, evicted=True, deleting=True, ours=True),
          pods.digest("c"): state.PodRecord(None, "S")},
    tasks={"master": "succeeded"},
    budgets={"podEvicted#0": 2, "retries[worker]": 1},
    fired=frozenset({"podPending>600 " + pods.digest("a")}),
    delayed=(state.Delayed("podFailed#0", "podFailed", T0, "x-0", pods.digest("b"), "worker", 3,
                           {"exit_code": 1}),),
)


def test_round_trip() -> None:
    text = state.encode(FULL)
    assert state.decode(text) == state.Decoded(FULL, None)


def test_encoding_is_deterministic_and_readable() -> None:
    data = json.loads(state.encode(FULL))
    assert data["v"] == 1
    assert data["pods"]["worker"] == {"R2": pods.digest("a"), "Fedx": pods.digest("b")}
    assert data["pods"][""] == {"S": pods.digest("c")}
    assert data["delayed"][0]["due"] == "2024-05-01T12:00:00Z"
    assert state.encode(FULL) == state.encode(state.decode(state.encode(FULL)).state)


def test_pods_alike_share_one_code_their_digests_sorted() -> None:
    record = state.PodRecord("worker", "R", 1)
    many = state.State(pods={d: record for d in ("zzzzzz", "aaaaaa", "mmmmmm")}
                       | {"bbbbbb": state.PodRecord("worker", "S"), "cccccc": state.PodRecord(None, "R", 1)})
    assert state.to_json(many)["pods"] == {"worker": {"R1": "aaaaaa mmmmmm zzzzzz", "S": "bbbbbb"},
                                           "": {"R1": "cccccc"}}
    assert state.decode(state.encode(many)).state == many
    # a digest list as a person may write it: any spacing
    spaced = state.decode('{"v": 1, "pods": {"w": {"R": " aaaaaa   bbbbbb "}}}').state
    assert spaced.pods == {"aaaaaa": state.PodRecord("w", "R"), "bbbbbb": state.PodRecord("w", "R")}


def test_empty_state_is_tiny() -> None:
    assert state.encode(state.EMPTY) == '{"v":1}'


@pytest.mark.parametrize("text, problem", [
    ("not json", "not JSON"),
    ("[" * 100_000 + "]" * 100_000, "stored state is nested too deeply"),
    ("[]", "expected an object"),
    ('{"v": 2}', "version 2 is not 1"),
    ('{"v": 1, "pods": {"w": {"Q": "abcdef"}}}', "malformed pod code 'Q'"),
    ('{"v": 1, "pods": {"w": {"R": "ab"}}}', "malformed pod digest 'ab'"),
    ('{"v": 1, "pods": {"w": {"R": "abcdef  ghijkl x_-"}}}', "malformed pod digest 'x_-'"),
    ('{"v": 1, "pods": {"w": {"R": 3}}}', "expected a string"),
    ('{"v": 1, "budgets": {"x": -1}}', "non-negative integer"),
    ('{"v": 1, "budgets": {"x": true}}', "non-negative integer"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "podFailed", "due": "soon"}]}', "malformed due"),
    ('{"v": 1, "final": {"phase": 3}}', "final.phase"),
    ('{"v": 1, "surprise": 1}', "unknown keys"),
    ('{"v": 1, "fired": "x"}', "expected a list"),
])
def test_malformed_state_reads_as_empty_with_a_reason(text: str, problem: str) -> None:
    decoded = state.decode(text)
    assert decoded.state == state.EMPTY
    assert problem in decoded.error


@pytest.mark.parametrize("text", [None, "", "   "])
def test_missing_state_is_empty_without_complaint(text: str | None) -> None:
    assert state.decode(text) == state.Decoded(state.EMPTY, None)


def test_size_of_a_1000_pod_job() -> None:
    """What the annotation costs for a big job: every pod seen (a policy listens for their
    going), some restarted, one budget used."""
    kind = load_kind([verdict("Running", pods_cond("any", "running")), verdict("Pending")],
                     [policy("podFailed", action("restartPod", max=5, per="task")),
                      policy("podDeleted", action("ignore"))])
    objs = [pod(f"train-worker-{i}", "Running", uid=f"5f0c1d2e-3a4b-4c5d-8e9f-{i:012d}")
            for i in range(1000)]
    for i in range(0, 1000, 10):
        objs[i]["status"]["containerStatuses"][0]["restartCount"] = 2
    for i in range(0, 1000, 50):
        objs[i]["status"]["phase"] = "Failed"
    result = evaluator.evaluate(kind, job(), objs, None, T0 + timedelta(minutes=5))
    encoded = state.encode(result.state).encode()
    print(f"encoded state for 1,000 pods: {len(encoded)} bytes")
    assert len(result.state.pods) == 1000
    assert len(encoded) < 8 * 1024
    assert state.decode(encoded.decode()).state == result.state
