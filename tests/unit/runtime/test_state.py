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


@pytest.mark.parametrize("listed, digests", [
    ("abcdef\tghijkl\n -_09Az ", ["abcdef", "ghijkl", "-_09Az"]),   # any whitespace between
    ("", []), ("   ", []),
])
def test_a_code_s_digests_are_read_whatever_whitespace_parts_them(listed: str, digests: list) -> None:
    decoded = state.decode(json.dumps({"v": 1, "pods": {"w": {"R": listed}}}))
    assert decoded.error is None
    assert list(decoded.state.pods) == digests


@pytest.mark.parametrize("listed, bad", [("abcdefg", "abcdefg"), ("abcdef abcde", "abcde"),
                                         ("abcdef ab.def", "ab.def"), ("abcdefabcdef", "abcdefabcdef")])
def test_a_digest_of_other_length_or_letters_is_named(listed: str, bad: str) -> None:
    assert f"malformed pod digest {bad!r}" in state.decode(
        json.dumps({"v": 1, "pods": {"w": {"R": listed}}})).error


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


# -- every part, in detail -----------------------------------------------------------------------

EVERY = state.State(
    verdict="Failed",
    final=state.Final("Failed", None, None, "t.rules:9:1", by="verdict", run='{"g":2}'),
    pods={pods.digest("a"): state.PodRecord("worker", "P", 12, evicted=True)},
    restarting=state.Restarting("Again", "once more", "t.rules:4:1"),
    failed_tasks=frozenset({"ps", "worker"}),
    released=(state.Released("p#1", "restartTask", "worker", "w-0", pods.digest("a"),
                             (pods.digest("a"), pods.digest("b")), "forbidden"),
              state.Released(None)),
    delayed=(state.Delayed("p#2", "podPending", T0, None, None, None),),
)


def test_every_part_round_trips() -> None:
    assert state.decode(state.encode(EVERY)) == state.Decoded(EVERY, None)


def test_every_part_is_written_as_documented() -> None:
    a, b_ = pods.digest("a"), pods.digest("b")
    assert json.loads(state.encode(EVERY)) == {
        "v": 1, "verdict": "Failed",
        "final": {"phase": "Failed", "reason": None, "message": None, "rule": "t.rules:9:1",
                  "by": "verdict", "run": '{"g":2}'},
        "pods": {"worker": {"P12e": a}},
        "restarting": {"reason": "Again", "message": "once more", "rule": "t.rules:4:1"},
        "failedTasks": ["ps", "worker"],
        "released": [{"policy": "p#1", "action": "restartTask", "task": "worker", "pod": "w-0",
                      "uid": a, "targets": f"{a} {b_}", "why": "forbidden"},
                     {"policy": None}],
        "delayed": [{"policy": "p#2", "event": "podPending", "due": "2024-05-01T12:00:00Z"}],
    }


def test_a_final_by_a_policy_leaves_by_and_run_out() -> None:
    s = state.State(final=state.Final("Failed", "R", "m", "t:1:1"))
    assert json.loads(state.encode(s))["final"] == {"phase": "Failed", "reason": "R", "message": "m",
                                                    "rule": "t:1:1"}
    assert state.decode(state.encode(s)).state == s


def test_pods_of_one_code_share_a_sorted_list() -> None:
    ds = sorted(pods.digest(n) for n in "abc")
    s = state.State(pods={d: state.PodRecord("w", "R") for d in reversed(ds)})
    assert json.loads(state.encode(s))["pods"] == {"w": {"R": " ".join(ds)}}
    assert state.decode(state.encode(s)).state == s


def test_the_encoding_is_utf8_not_escaped() -> None:
    s = state.State(verdict="Running", tasks={"tâche": "succeeded"})
    assert '"tâche"' in state.encode(s)


@pytest.mark.parametrize("text, problem", [
    ('{"v": 1, "final": {"phase": "Failed", "by": "someone"}}', "final.by: 'someone' is not verdict or policy"),
    ('{"v": 1, "final": {"phase": "Failed", "rule": 3}}', "final.rule"),
    ('{"v": 1, "final": {"phase": "Failed", "reason": 3}}', "final.reason"),
    ('{"v": 1, "final": {"phase": "Failed", "message": 3}}', "final.message"),
    ('{"v": 1, "final": {"phase": "Failed", "run": 3}}', "final.run"),
    ('{"v": 1, "final": 3}', "final"),
    ('{"v": 1, "restarting": 3}', "restarting"),
    ('{"v": 1, "restarting": {"reason": 3}}', "restarting.reason"),
    ('{"v": 1, "restarting": {"message": 3}}', "restarting.message"),
    ('{"v": 1, "restarting": {"rule": 3}}', "restarting.rule"),
    ('{"v": 1, "released": [{"targets": "ab"}]}', "released.targets: malformed pod digests"),
    ('{"v": 1, "released": [{"targets": 3}]}', "released.targets"),
    ('{"v": 1, "released": [{"policy": 3}]}', "released.policy"),
    ('{"v": 1, "released": [{"action": 3}]}', "released.action"),
    ('{"v": 1, "released": [{"task": 3}]}', "released.task"),
    ('{"v": 1, "released": [{"pod": 3}]}', "released.pod"),
    ('{"v": 1, "released": [{"uid": 3}]}', "released.uid"),
    ('{"v": 1, "released": [{"why": 3}]}', "released.why"),
    ('{"v": 1, "released": [3]}', "released"),
    ('{"v": 1, "released": 3}', "released"),
    ('{"v": 1, "failedTasks": [3]}', "failedTasks"),
    ('{"v": 1, "failedTasks": 3}', "failedTasks"),
    ('{"v": 1, "fired": [3]}', "fired"),
    ('{"v": 1, "tasks": {"w": 3}}', "tasks.w"),
    ('{"v": 1, "tasks": 3}', "tasks"),
    ('{"v": 1, "budgets": 3}', "budgets"),
    ('{"v": 1, "budgets": {"k": 1.5}}', "budgets.k"),
    ('{"v": 1, "verdict": 3}', "verdict"),
    ('{"v": 1, "pods": 3}', "pods"),
    ('{"v": 1, "pods": {"w": 3}}', "pods.w"),
    ('{"v": 1, "pods": {"w": {"Rq": "abcdef"}}}', "pods.w: malformed pod code 'Rq'"),
    ('{"v": 1, "pods": {"w": {"R": "abcdefg"}}}', "pods.w.R: malformed pod digest 'abcdefg'"),
    ('{"v": 1, "pods": {"w": {"R": "abc!ef"}}}', "malformed pod digest"),
    ('{"v": 1, "delayed": [{"policy": 3, "event": "e", "due": "2024-05-01T12:00:00Z"}]}', "delayed.policy"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": 3, "due": "2024-05-01T12:00:00Z"}]}', "delayed.event"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "due": "2024-05-01T12:00:00Z", "pod": 3}]}', "delayed.pod"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "due": "2024-05-01T12:00:00Z", "uid": 3}]}', "delayed.uid"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "due": "2024-05-01T12:00:00Z", "task": 3}]}', "delayed.task"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "due": "2024-05-01T12:00:00Z", "restarts": -1}]}', "delayed.restarts"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "due": "2024-05-01T12:00:00Z", "vars": 3}]}', "delayed.vars"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e"}]}', "delayed: malformed due time None"),
    ('{"v": 1, "delayed": [3]}', "delayed"),
    ('{}', "version None is not 1"),
    ('{"v": 1, "x": 1, "a": 2}', "unknown keys ['a', 'x']"),
])
def test_each_malformed_part_is_named(text: str, problem: str) -> None:
    decoded = state.decode(text)
    assert decoded.state == state.EMPTY
    assert decoded.error is not None and decoded.error.startswith("stored state ignored: ")
    assert problem in decoded.error


def test_state_that_is_not_json_starts_afresh() -> None:
    decoded = state.decode("{")
    assert decoded.error is not None and decoded.error.startswith("stored state is not JSON")
    assert decoded.error.endswith("; starting afresh")


def test_defaults_of_parts_left_out() -> None:
    text = ('{"v":1,"final":{"phase":"Failed"},"restarting":{},'
            '"released":[{}],"delayed":[{"policy":"p","event":"e","due":"2024-05-01T12:00:00Z"}]}')
    s = state.decode(text).state
    assert s.final == state.Final("Failed", None, None, "", "policy", None)
    assert s.restarting == state.Restarting(None, None, "")
    assert s.released == (state.Released(None, "", None, None, None, (), ""),)
    assert s.delayed == (state.Delayed("p", "e", T0, None, None, None, 0, {}),)


def test_pod_codes_read_back_field_by_field() -> None:
    d = pods.digest("a")
    for code, record in [("P", state.PodRecord("w", "P")), ("R3", state.PodRecord("w", "R", 3)),
                         ("Fe", state.PodRecord("w", "F", evicted=True)),
                         ("Sd", state.PodRecord("w", "S", deleting=True)),
                         ("Rx", state.PodRecord("w", "R", ours=True)),
                         ("F10edx", state.PodRecord("w", "F", 10, True, True, True))]:
        assert state.decode(f'{{"v":1,"pods":{{"w":{{"{code}":"{d}"}}}}}}').state.pods == {d: record}
        assert record.code == code
    assert state.decode(f'{{"v":1,"pods":{{"":{{"R":"{d}"}}}}}}').state.pods[d].task is None


def test_a_finished_pod_is_one_that_succeeded_or_failed() -> None:
    assert [state.PodRecord(None, p).finished for p in "PRSF"] == [False, False, True, True]


def test_released_actions_are_added_once() -> None:
    r1, r2 = state.Released("p#1", why="a"), state.Released("p#2", why="b")
    text = state.with_released(state.encode(state.State(verdict="Running")), (r1,))
    again = state.with_released(text, (r1, r2))
    s = state.decode(again).state
    assert s.released == (r1, r2) and s.verdict == "Running"
    assert state.decode(state.with_released(None, (r1,))).state == state.State(released=(r1,))


def test_a_delayed_action_keeps_its_restarts_and_values() -> None:
    d = state.Delayed("p", "podFailed", T0, "x-0", pods.digest("x"), "w", 2, {"exit_code": 1})
    assert json.loads(state.encode(state.State(delayed=(d,))))["delayed"] == [
        {"policy": "p", "event": "podFailed", "due": "2024-05-01T12:00:00Z", "pod": "x-0",
         "uid": pods.digest("x"), "task": "w", "restarts": 2, "vars": {"exit_code": 1}}]


DUE = '"due": "2024-05-01T12:00:00Z"'


@pytest.mark.parametrize("text, where", [
    ("[]", "state"),
    ('{"v": 1, "verdict": 3}', "verdict"),
    ('{"v": 1, "pods": 3}', "pods"),
    ('{"v": 1, "pods": {"w": 3}}', "pods.w"),
    ('{"v": 1, "pods": {"w": {"R": 3}}}', "pods.w.R"),
    ('{"v": 1, "budgets": 3}', "budgets"),
    ('{"v": 1, "budgets": {"k": -1}}', "budgets.k"),
    ('{"v": 1, "tasks": {"w": 3}}', "tasks.w"),
    ('{"v": 1, "final": 3}', "final"),
    ('{"v": 1, "final": {"phase": 3}}', "final.phase"),
    ('{"v": 1, "final": {"phase": "F", "reason": 3}}', "final.reason"),
    ('{"v": 1, "final": {"phase": "F", "message": 3}}', "final.message"),
    ('{"v": 1, "final": {"phase": "F", "rule": 3}}', "final.rule"),
    ('{"v": 1, "final": {"phase": "F", "run": 3}}', "final.run"),
    ('{"v": 1, "final": {"phase": "F", "cause": 3}}', "final.cause"),
    ('{"v": 1, "restarting": 3}', "restarting"),
    ('{"v": 1, "restarting": {"reason": 3}}', "restarting.reason"),
    ('{"v": 1, "restarting": {"message": 3}}', "restarting.message"),
    ('{"v": 1, "restarting": {"rule": 3}}', "restarting.rule"),
    ('{"v": 1, "released": [3]}', "released"),
    ('{"v": 1, "released": [{"policy": 3}]}', "released.policy"),
    ('{"v": 1, "released": [{"action": 3}]}', "released.action"),
    ('{"v": 1, "released": [{"task": 3}]}', "released.task"),
    ('{"v": 1, "released": [{"pod": 3}]}', "released.pod"),
    ('{"v": 1, "released": [{"uid": 3}]}', "released.uid"),
    ('{"v": 1, "released": [{"targets": 3}]}', "released.targets"),
    ('{"v": 1, "released": [{"why": 3}]}', "released.why"),
    ('{"v": 1, "delayed": [3]}', "delayed"),
    ('{"v": 1, "delayed": 3}', "delayed"),
    ('{"v": 1, "released": 3}', "released"),
    ('{"v": 1, "fired": 3}', "fired"),
    ('{"v": 1, "fired": [3]}', "fired"),
    ('{"v": 1, "failedTasks": 3}', "failedTasks"),
    ('{"v": 1, "failedTasks": [3]}', "failedTasks"),
    ('{"v": 1, "tasks": 3}', "tasks"),
    ('{"v": 1, "delayed": [{"policy": 3, "event": "e", ' + DUE + '}]}', "delayed.policy"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": 3, ' + DUE + '}]}', "delayed.event"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "pod": 3, ' + DUE + '}]}', "delayed.pod"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "uid": 3, ' + DUE + '}]}', "delayed.uid"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "task": 3, ' + DUE + '}]}', "delayed.task"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "restarts": -1, ' + DUE + '}]}', "delayed.restarts"),
    ('{"v": 1, "delayed": [{"policy": "p", "event": "e", "vars": 3, ' + DUE + '}]}', "delayed.vars"),
])
def test_a_malformed_part_is_named_by_its_exact_place(text: str, where: str) -> None:
    error = state.decode(text).error
    assert error is not None and error.startswith(f"stored state ignored: {where}: expected "), error


def test_a_malformed_due_time_is_quoted() -> None:
    assert state.decode('{"v": 1, "delayed": [{"policy": "p", "event": "e", "due": "soon"}]}').error == \
        "stored state ignored: delayed: malformed due time 'soon'"


def test_the_encoding_sorts_keys_at_every_level() -> None:
    """Deterministic: the same state is the same text, whatever order it was built in."""
    def keys_sorted(value: object) -> bool:
        if isinstance(value, dict):
            return list(value) == sorted(value) and all(keys_sorted(v) for v in value.values())
        if isinstance(value, list):
            return all(keys_sorted(v) for v in value)
        return True
    assert keys_sorted(json.loads(state.encode(EVERY))) and keys_sorted(json.loads(state.encode(FULL)))
