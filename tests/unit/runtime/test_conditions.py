"""Verdict conditions (runtime.conditions) against a reference written from docs/plan.md's
definitions: pod quantifiers and counts, in a task or the whole job, task states and task counts,
`and`/`or`/`not`, the job's age; and what `--explain` says when one does not hold."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (T0, at, both, count, either, exit_in, job, jp, load_kind, negate, pod, pods_cond, running,
                      terminated, verdict)
from runtime import conditions, evaluator

NOW = T0 + timedelta(minutes=5)
PHASES = ("Pending", "Running", "Succeeded", "Failed")
STATE_OF = {"pending": "Pending", "running": "Running", "succeeded": "Succeeded", "failed": "Failed"}
CMP: dict[str, Callable[[int, int], bool]] = {
    "==": int.__eq__, "!=": int.__ne__, "<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__}

# A job's pods: (task, phase) each, named in order.
jobs = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(PHASES)), max_size=5)


def objects(members: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [pod(f"p{i}", phase, task=task) for i, (task, phase) in enumerate(members)]


def holds(when: dict, members: list[tuple[str, str]], *, spec: dict | None = None,
          created: float = 0) -> bool:
    k = load_kind([verdict("Failed", when), verdict("Pending")])
    e = evaluator.evaluate(k, job(spec=spec, created=created), objects(members), None, NOW)
    return e.verdict.phase == "Failed"


def scope(members: list[tuple[str, str]], task: str | None) -> list[str]:
    return [phase for t, phase in members if task is None or t == task]


def task_states(members: list[tuple[str, str]]) -> dict[str, str]:
    """docs/plan.md: failed = one pod failed; succeeded = has pods, all succeeded; running =
    one running; else pending."""
    out = {}
    for task in sorted({t for t, _ in members}):
        phases = scope(members, task)
        out[task] = ("failed" if "Failed" in phases else "succeeded" if set(phases) == {"Succeeded"}
                     else "running" if "Running" in phases else "pending")
    return out


@settings(max_examples=60, deadline=None)
@given(jobs, st.sampled_from(["any", "all", "none"]), st.sampled_from([None, *STATE_OF]),
       st.sampled_from([None, "a"]))
def test_pod_quantifiers(members: list, quant: str, state: str | None, task: str | None) -> None:
    phases = scope(members, task)
    matching = [p for p in phases if state is None or p == STATE_OF[state]]
    expected = {"any": bool(matching), "all": bool(phases) and len(matching) == len(phases),
                "none": not matching}[quant]
    assert holds(pods_cond(quant, state, task=task), members) == expected


@settings(max_examples=60, deadline=None)
@given(jobs, st.sampled_from(sorted(CMP)), st.integers(0, 3), st.sampled_from([None, *STATE_OF]),
       st.sampled_from([None, "b"]))
def test_pod_counts(members: list, cmp: str, value: int, state: str | None, task: str | None) -> None:
    n = sum(1 for p in scope(members, task) if state is None or p == STATE_OF[state])
    assert holds(count(cmp, str(value), state, task=task), members) == CMP[cmp](n, value)


def test_a_count_compared_with_a_value_read_from_the_job() -> None:
    members = [("a", "Failed"), ("a", "Failed")]
    assert holds(count(">=", "<<spec.limit>>", "failed"), members, spec={"limit": 2})
    assert holds(count(">=", "<<spec.limit>>", "failed"), members, spec={"limit": "2"})
    assert not holds(count(">=", "<<spec.limit>>", "failed"), members, spec={"limit": 3})
    # no number: the comparison does not hold, whichever way it goes
    for limit in (None, True, "two", [2]):
        assert not holds(count(">=", "<<spec.limit>>", "failed"), members, spec={"limit": limit})
        assert not holds(count("<", "<<spec.limit>>", "failed"), members, spec={"limit": limit})


@settings(max_examples=60, deadline=None)
@given(jobs, st.sampled_from(["any", "all"]), st.sampled_from(["pending", "running", "succeeded", "failed"]),
       st.sampled_from([None, "a"]))
def test_task_states(members: list, quant: str, state: str, task: str | None) -> None:
    states = task_states(members)
    names = [task] if task else sorted(states)
    hits = [t for t in names if states.get(t) == state]
    expected = bool(hits) if quant == "any" or task else bool(names) and len(hits) == len(names)
    when = {"op": "task", "quant": quant, "task": task, "state": state}
    assert holds(when, members) == expected


def test_task_states_tell_evicted_failures_from_failures_whatever_the_order() -> None:
    """An evicted pod's failure does not fail its task, one beside it that failed does: pods
    alike in phase but not in eviction do not stand for each other."""
    failed = {"op": "task", "quant": "any", "task": "a", "state": "failed"}
    pending = dict(failed, state="pending")
    k = load_kind([verdict("Failed", failed), verdict("Running", pending), verdict("Pending")])
    def members(crashed: str, evicted: str) -> list[dict]:   # pods are read in name order
        return [pod(evicted, "Failed", task="a", reason="Evicted")] + (
            [pod(crashed, "Failed", task="a")] if crashed else [])

    phase = {order: evaluator.evaluate(k, job(), ps, None, NOW).verdict.phase
             for order, ps in (("both", members("p0", "p1")), ("reversed", members("p1", "p0")),
                               ("evicted only", members("", "p0")))}
    assert phase == {"both": "Failed", "reversed": "Failed", "evicted only": "Running"}


@settings(max_examples=60, deadline=None)
@given(jobs, st.sampled_from(sorted(CMP)), st.integers(0, 2),
       st.sampled_from([None, "pending", "running", "succeeded", "failed"]))
def test_task_counts(members: list, cmp: str, value: int, state: str | None) -> None:
    n = sum(1 for s in task_states(members).values() if state is None or s == state)
    when = {"op": "taskCount", "state": state, "cmp": cmp, "value": [str(value)]}
    assert holds(when, members) == CMP[cmp](n, value)


@settings(max_examples=60, deadline=None)
@given(jobs, st.sampled_from(list(STATE_OF)), st.sampled_from(list(STATE_OF)))
def test_and_or_not(members: list, one: str, other: str) -> None:
    x, y = pods_cond("any", one), pods_cond("all", other)
    hx, hy = holds(x, members), holds(y, members)
    assert holds(both(x, y), members) == (hx and hy)
    assert holds(either(x, y), members) == (hx or hy)
    assert holds(negate(x), members) == (not hx)
    assert holds(both(x, negate(y), either(y, x)), members) == (hx and not hy)


def test_job_age_counts_from_the_start_time_else_the_creation() -> None:
    # NOW is 300 s after T0
    assert holds({"op": "jobAge", "longerThan": 300}, [], created=0)        # exactly as old
    assert not holds({"op": "jobAge", "longerThan": 301}, [], created=0)
    assert not holds({"op": "jobAge", "longerThan": 300}, [], created=1)
    k = load_kind([verdict("Failed", {"op": "jobAge", "longerThan": 100}), verdict("Pending")])
    started = job(created=0, status={"startTime": "2024-05-01T12:04:00Z"})     # 60 s ago
    assert evaluator.evaluate(k, started, [], None, NOW).verdict.phase == "Pending"
    no_times = job()
    del no_times["metadata"]["creationTimestamp"]
    assert evaluator.evaluate(k, no_times, [], None, NOW).verdict.phase == "Pending"


def explained(when: dict, members: list[tuple[str, str]], **job_fields: Any) -> str:
    k = load_kind([verdict("Failed", when), verdict("Pending")])
    e = evaluator.evaluate(k, job(**job_fields), objects(members), None, NOW, explain=True)
    [failed] = [f for f in e.explanation if f.name == "Failed"]
    assert not failed.matched
    return failed.why


def test_why_a_condition_does_not_hold() -> None:
    members = [("a", "Running"), ("b", "Failed")]
    assert explained(pods_cond("all", "running"), members) == "all pods running: 1 of 2 pods match"
    assert explained(count(">", "1", "failed"), members) == "count pods failed > 1: 1 of 2 pods match"
    assert explained({"op": "taskCount", "state": "failed", "cmp": ">", "value": ["1"]}, members) == \
        "count tasks failed > 1: 1 of 2 tasks match"
    assert explained({"op": "task", "quant": "any", "task": "a", "state": "failed"}, members) == \
        'task "a" failed: tasks a running, b failed'
    assert explained({"op": "task", "quant": "any", "task": "a", "state": "failed"}, []) == \
        'task "a" failed: tasks none'
    assert explained(negate(pods_cond("any", "running")), members) == \
        "not any pod running: any pod running holds"
    assert explained(either(pods_cond("any", "succeeded"), pods_cond("all", "failed")), members) == \
        "any pod succeeded: 0 of 2 pods match; all pods failed: 1 of 2 pods match"
    assert explained(both(pods_cond("any", "running"), pods_cond("any", "succeeded")), members) == \
        "any pod succeeded: 0 of 2 pods match"
    assert explained({"op": "jobAge", "longerThan": 3600}, members) == \
        "job running longer than 1h: age 300s"


# -- what decided a condition: the pod and container a verdict's message names --------------------

def said(when: dict, objs: list[dict], message: str = "{pod}/{container}: {exit_code}") -> str | None:
    k = load_kind([verdict("Failed", when, reason="R", message=message), verdict("Pending")])
    e = evaluator.evaluate(k, job(), objs, None, NOW)
    assert e.verdict.phase == "Failed"
    return e.verdict.message


# the failing container is neither the first by name nor the last to finish
TWO_EXITS = [terminated("a-ok", 0, finished=50), terminated("z-bad", 3, finished=40)]


def test_a_failure_names_the_container_that_failed() -> None:
    failed = pod("p0", "Failed", task="a", containers=TWO_EXITS)
    others = [pod("p1", task="b")]
    assert said(pods_cond("any", "failed"), [failed, *others]) == "p0/z-bad: 3"
    assert said(count(">=", "1", "failed"), [failed, *others]) == "p0/z-bad: 3"
    assert said({"op": "task", "quant": "any", "task": "a", "state": "failed"}, [failed, *others]) == "p0/z-bad: 3"
    assert said({"op": "taskCount", "state": "failed", "cmp": ">=", "value": ["1"]}, [failed, *others]) == "p0/z-bad: 3"


def test_the_first_to_fail_decides_and_the_last_to_succeed() -> None:
    early = pod("p0", "Failed", task="a", containers=[terminated("main", 1, finished=30)])
    late = pod("p1", "Failed", task="a", containers=[terminated("main", 2, finished=90)])
    assert said(pods_cond("any", "failed"), [late, early]) == "p0/main: 1"
    assert said({"op": "task", "quant": "any", "task": "a", "state": "failed"}, [late, early]) == "p0/main: 1"
    done = [pod("p0", "Succeeded", containers=[terminated("main", 0, finished=30)]),
            pod("p1", "Succeeded", containers=[terminated("main", 0, finished=90)])]
    assert said(pods_cond("all", "succeeded"), done, "{pod}") == "p1"
    assert said({"op": "task", "quant": "all", "state": "succeeded"}, done, "{pod}") == "p1"
    assert said({"op": "taskCount", "state": "succeeded", "cmp": ">=", "value": ["1"]}, done, "{pod}") == "p1"


def test_a_count_read_from_the_job_sees_the_jobs_variables() -> None:
    k = load_kind([verdict("Failed", count(">=", "{job}", "failed")), verdict("Pending")])
    # "{job}" renders the job's name: no number, so it never holds
    e = evaluator.evaluate(k, job(), [pod("p0", "Failed")], None, NOW)
    assert e.verdict.phase == "Pending" and e.problems == ()


# -- when time alone changes a condition ---------------------------------------------------------

def wake(when: dict, objs: list[dict], **job_fields: Any):
    k = load_kind([verdict("Failed", when), verdict("Pending")])
    return evaluator.evaluate(k, job(**job_fields), objs, None, NOW).wake_at


def test_a_duration_counts_from_when_the_pod_entered_the_state_in_its_scope() -> None:
    pending_a = pod("p0", "Pending", task="a", created=60)
    pending_b = pod("p1", "Pending", task="b", created=10)
    assert wake(pods_cond("any", "pending", task="a", for_=600), [pending_a, pending_b]) == T0 + timedelta(seconds=660)
    assert wake(pods_cond("any", None, task="a", for_=600), [pending_a, pending_b]) == T0 + timedelta(seconds=660)
    inside = both(negate(pods_cond("any", "running")), either(pods_cond("any", "pending", task="a", for_=600)))
    assert wake(inside, [pending_a, pending_b]) == T0 + timedelta(seconds=660)
    assert wake(negate(pods_cond("none", "pending", task="a", for_=600)), [pending_a, pending_b]) == \
        T0 + timedelta(seconds=660)
    assert wake({"op": "jobAge", "longerThan": 3600}, [], created=100) == T0 + timedelta(seconds=3700)
    assert wake(pods_cond("any", "pending", task="a", for_=600), [pod("p0", task="a")]) is None


def test_a_duration_holds_from_its_exact_end() -> None:
    # NOW is 300 s after T0; the pod has been pending since T0 + 60
    pending = [pod("p0", "Pending", created=60)]
    assert holds_objs(pods_cond("any", "pending", for_=240), pending)
    assert not holds_objs(pods_cond("any", "pending", for_=241), pending)
    assert holds_objs(pods_cond("any", None, for_=240), pending)
    assert holds_objs(pods_cond("none", "pending", for_=241), pending)
    assert not holds_objs(pods_cond("none", "pending", for_=240), pending)


def holds_objs(when: dict, objs: list[dict]) -> bool:
    k = load_kind([verdict("Failed", when), verdict("Pending")])
    return evaluator.evaluate(k, job(), objs, None, NOW).verdict.phase == "Failed"


def test_a_task_condition_counts_the_pods_of_its_task_in_that_state() -> None:
    objs = [pod("p0", "Failed", task="a", containers=TWO_EXITS), pod("p1", task="a"), pod("p2", task="b")]
    message = "{pod}/{container}: {exit_code} {count}/{total}"
    assert said({"op": "task", "quant": "any", "task": "a", "state": "failed"}, objs, message) == "p0/z-bad: 3 1/2"
    pending = [pod("p0", "Pending", task="a"), pod("p1", "Pending", task="a"), pod("p2", task="b")]
    assert said({"op": "task", "quant": "any", "task": "a", "state": "pending"}, pending, "{pod} {count}/{total}") == \
        "p0 2/2"
    running = [pod("p0", "Pending", task="a"), pod("p1", task="a"), pod("p2", task="b")]
    assert said({"op": "task", "quant": "any", "task": "a", "state": "running"}, running, "{pod} {count}/{total}") == \
        "p1 1/2"


def test_a_filter_on_a_failure_reads_the_containers_that_failed() -> None:
    failed = pod("p0", "Failed", containers=TWO_EXITS)
    assert holds_objs(pods_cond("any", "failed", filter=exit_in(3)), [failed])
    assert not holds_objs(pods_cond("any", "failed", filter=exit_in(3, negate=True)), [failed])
    assert said(pods_cond("any", "failed", filter=exit_in(3)), [failed]) == "p0/z-bad: 3"


def test_a_pod_that_no_filter_chose_a_container_for_speaks_through_its_first() -> None:
    assert said(pods_cond("any", "running"), [pod("p0")], "{pod}/{container}") == "p0/main"


def test_why_an_expression_or_an_age_does_not_hold() -> None:
    assert explained(jp("spec.flag"), [], spec={"flag": False}) == "<<spec.flag>> is false"
    assert explained(jp("spec.flag"), [], spec={"flag": []}) == "<<spec.flag>> is []"
    assert explained(jp("spec.flag"), []) == "<<spec.flag>> is null"
    k = load_kind([verdict("Failed", {"op": "jobAge", "longerThan": 60}), verdict("Pending")])
    timeless = job()
    del timeless["metadata"]["creationTimestamp"]
    e = evaluator.evaluate(k, timeless, [], None, NOW, explain=True)
    assert [f.why for f in e.explanation if f.name == "Failed"] == ["job running longer than 1m: age unknown"]


# -- details the mutants showed untested (scripts/mutation.sh conditions) --------------------------

# two containers failed: first in status order, but the later to finish
STATUS_ORDER = [terminated("a-late", 2, finished=50), terminated("b-early", 3, finished=40)]


def test_a_failure_speaks_through_its_first_failed_container_in_status_order() -> None:
    """docs/language.md: on a failure the failed containers are read in status order (as the Job
    controller matches onExitCodes), whichever condition names the pod."""
    failed = [pod("p0", "Failed", task="a", containers=STATUS_ORDER), pod("p1", task="b")]
    for when in (pods_cond("any", "failed"), count(">=", "1", "failed"),
                 {"op": "task", "quant": "any", "task": "a", "state": "failed"},
                 {"op": "taskCount", "state": "failed", "cmp": ">=", "value": ["1"]}):
        assert said(when, failed) == "p0/a-late: 2", when


def test_otherwise_a_pod_speaks_through_its_most_telling_container() -> None:
    """Not a failure: the counted containers, non-zero exits first, the earliest to finish."""
    busy = [pod("p0", "Running", task="a", containers=[*STATUS_ORDER, running("c")])]
    for when in (pods_cond("any", "running"),
                 {"op": "task", "quant": "any", "task": "a", "state": "running"}):
        assert said(when, busy) == "p0/b-early: 3", when


def test_a_pending_task_is_witnessed_by_all_its_pods() -> None:
    """A task is pending while none of its pods failed or runs and not all succeeded: every pod
    of it counts, a succeeded one too."""
    members = [pod("p0", "Succeeded", task="a"), pod("p1", "Pending", task="a"), pod("p2", task="b")]
    assert said({"op": "task", "quant": "any", "task": "a", "state": "pending"}, members,
                "{pod} {count}/{total}") == "p0 2/2"


def test_in_a_and_b_the_first_part_with_pods_decides() -> None:
    members = [pod("p0", "Failed"), pod("p1", "Running")]
    assert said(both(pods_cond("any", "failed"), pods_cond("any", "running")), members, "{pod}") == "p0"
    assert said(both(pods_cond("any", "running"), pods_cond("any", "failed")), members, "{pod}") == "p1"


def test_a_duration_without_a_state_counts_from_the_pods_creation() -> None:
    # NOW is 300 s after T0: created at 60, started at 61
    assert holds_objs(pods_cond("any", None, for_=240), [pod("p0", "Running", created=60)])


def test_a_pod_too_young_for_a_duration_does_not_hide_an_older_one() -> None:
    young, old = pod("p0", "Pending", created=250), pod("p1", "Pending", created=0)
    assert holds_objs(pods_cond("any", "pending", for_=240), [young, old])


def test_a_pending_pod_already_started_wakes_from_its_creation() -> None:
    """A pod accepted by its node has a startTime while still Pending (pulling images):
    pending for D counts from its creation, and so does the time the evaluation wakes at."""
    pulling = pod("p0", "Pending", created=60)
    pulling["status"]["startTime"] = at(120)
    assert wake(pods_cond("any", "pending", for_=600), [pulling]) == T0 + timedelta(seconds=660)


def test_a_count_reads_only_the_pods_its_filter_passes() -> None:
    failed = [pod("p0", "Failed", containers=[terminated("main", 1)]),
              pod("p1", "Failed", containers=[terminated("main", 3)])]
    assert holds_objs(count("==", "1", "failed", filter=exit_in(3)), failed)
    assert not holds_objs(count("==", "2", "failed", filter=exit_in(3)), failed)


def test_a_count_compared_with_a_job_variable_that_is_a_number() -> None:
    """The placeholders (`{job}`, `{namespace}`, `{kind}`) are there for a count's value too:
    a job named "2" fails at two failed pods."""
    for when in (count(">=", "{job}", "failed"),
                 {"op": "taskCount", "state": "failed", "cmp": ">=", "value": [{"var": "job"}]}):
        k = load_kind([verdict("Failed", when), verdict("Pending")])
        two = [pod("p0", "Failed", task="a", job_name="2"), pod("p1", "Failed", task="b", job_name="2")]
        assert evaluator.evaluate(k, job("2"), two, None, NOW).verdict.phase == "Failed", when
        assert evaluator.evaluate(k, job("3"), [pod(p["metadata"]["name"], "Failed", job_name="3")
                                                for p in two], None, NOW).verdict.phase == "Pending"


def test_a_task_count_is_witnessed_by_the_first_task_that_counts() -> None:
    """Tasks in name order: a's pod decides, though b's failed earlier."""
    members = [pod("a0", "Failed", task="a", containers=[terminated("main", 1, finished=90)]),
               pod("b0", "Failed", task="b", containers=[terminated("main", 2, finished=30)])]
    assert said({"op": "taskCount", "state": "failed", "cmp": ">=", "value": ["1"]}, members,
                "{pod} {count}/{total}") == "a0 2/2"


def test_a_job_without_metadata_has_no_age() -> None:
    k = load_kind([verdict("Failed", {"op": "jobAge", "longerThan": 1}), verdict("Pending")])
    bare = job()
    del bare["metadata"]
    assert evaluator.evaluate(k, bare, [], None, NOW).verdict.phase == "Pending"


def test_what_is_not_a_condition_is_refused_by_name() -> None:
    snapshot = conditions.Snapshot(job(), [], NOW, lambda expr, data: None, {})
    with pytest.raises(TypeError, match="not a condition: 'x'"):
        snapshot.holds("x")  # type: ignore[arg-type]
