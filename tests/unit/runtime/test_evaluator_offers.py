"""How an occurrence is offered to the policies (runtime.evaluation.policies): timed policies
by their own duration, what `--explain` notes for each policy tried, which pod and container a
filter picks (on the pod, among a task's pods, on a pod gone), and the events reported with
them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runtime import evaluator, pods, state
from builders import (
    T0, action, exit_in, job, jp, load_kind, pod, pods_cond, policy, span, terminated, verdict,
)

NOW = T0 + timedelta(minutes=5)
QUIET = [verdict("Running", pods_cond("any", "running")), verdict("Pending")]
TWO_FAILED = [terminated("main", 1), terminated("side", 2)]   # both failed: main first


def evaluate(policies: list, objects: list, prior: state.State | None = None, now: Any = NOW,
             verdicts: list | None = None) -> evaluator.Evaluation:
    k = load_kind(QUIET if verdicts is None else verdicts, policies)
    return evaluator.evaluate(k, job(), objects, prior, now, explain=True)


def notes(e: evaluator.Evaluation) -> dict[str, str]:
    return {f.name: f.why for f in e.explanation if f.what == "policy"}


def events(e: evaluator.Evaluation, name: str) -> list[tuple[Any, ...]]:
    return [(ev.pod, ev.uid, ev.task, ev.container, ev.policy) for ev in e.events if ev.event == name]


def test_each_timed_policy_takes_only_its_own_duration() -> None:
    pol = [policy("jobRunningLongerThan", action("failJob"), for_=7200),
           policy("jobRunningLongerThan", action("count"), for_=3600)]
    e = evaluate(pol, [pod("a")], now=T0 + timedelta(minutes=90))
    assert [a.action for a in e.actions] == ["count"]
    assert events(e, "jobRunningLongerThan") == [("a", "uid-a", "worker", "main", pol[1]["id"])]
    assert notes(e)[pol[0]["id"]].endswith(": job: not this duration")


def test_a_verdict_change_to_another_phase_is_noted_and_left_to_the_next_policy() -> None:
    pol = [policy("jobVerdictChanged", action("failJob"), to="Succeeded"),
           policy("jobVerdictChanged", action("count"), to="Running")]
    e = evaluate(pol, [pod("a")])
    assert [a.action for a in e.actions] == ["count"]
    assert notes(e)[pol[0]["id"]].endswith(": job: verdict changed to Running, not Succeeded")


def test_a_match_on_a_final_verdict_is_noted_and_reported_with_the_pod_picked() -> None:
    """pod a's failure fails the job; the task's failure after it matches, on pod b's `side`
    container (the filter's witness, not b's first failed container), but acts no more."""
    pol = [policy("podFailed", action("failJob"), filter=exit_in(1)),
           policy("taskFailed", action("restartTask"), filter=exit_in(2))]
    objects = [pod("a", "Failed", containers=[terminated("main", 1)]),
               pod("b", "Failed", containers=TWO_FAILED)]
    e = evaluate(pol, objects)
    assert [a.action for a in e.actions] == ["failJob"]
    assert notes(e)[pol[1]["id"]].endswith(": task worker: matched, but the verdict is final")
    assert events(e, "taskFailed") == [("b", "uid-b", "worker", "side", None)]


def test_a_task_event_reports_the_pod_and_container_its_filter_picked() -> None:
    pol = [policy("taskFailed", action("count"), filter=exit_in(2))]
    objects = [pod("a", "Failed", containers=[terminated("main", 1)]),
               pod("b", "Failed", containers=TWO_FAILED)]
    e = evaluate(pol, objects)
    assert events(e, "taskFailed") == [("b", "uid-b", "worker", "side", pol[0]["id"])]


def test_a_task_event_no_pod_of_which_passes_the_filter_is_not_taken() -> None:
    pol = [policy("taskFailed", action("count"), filter=exit_in(3))]
    e = evaluate(pol, [pod("a", "Failed", containers=TWO_FAILED)])
    assert e.actions == () and events(e, "taskFailed") == [(None, None, "worker", None, None)]


def test_on_a_failure_a_filter_reads_the_failed_containers_only() -> None:
    """Container `main` exited 0 beside a failed `side`: `exit 0` never matches the failure, on
    the pod's own event nor on its task's."""
    pol = [policy("podFailed", action("failJob"), filter=exit_in(0)),
           policy("taskFailed", action("failJob"), filter=exit_in(0))]
    e = evaluate(pol, [pod("a", "Failed", containers=[terminated("main", 0), terminated("side", 1)])])
    assert e.actions == ()


def test_a_pod_event_names_the_pod_its_task_and_the_container_that_speaks_for_it() -> None:
    pol = [policy("podFailed", action("count"))]
    e = evaluate(pol, [pod("a", "Failed", containers=[terminated("main", 0), terminated("side", 1)])])
    assert events(e, "podFailed") == [("a", "uid-a", "worker", "side", pol[0]["id"])]


def test_a_filter_on_a_pod_gone_reads_what_the_state_kept_of_it() -> None:
    """A pod gone is offered as its digest: a `where` reads `metadata.uid` as that digest."""
    pol = [policy("podDeleted", action("count"), filter=jp("metadata.uid")),
           policy("podFailed", action("count"))]
    first = evaluate(pol, [pod("a")])
    e = evaluate(pol, [], first.state)
    assert [a.action for a in e.actions] == ["count"]
    assert events(e, "podDeleted") == [(None, pods.digest("uid-a"), "worker", None, pol[0]["id"])]


def test_a_verdict_change_is_offered_with_the_jobs_pods_to_filter() -> None:
    pol = [policy("jobVerdictChanged", action("count"), to="Running",
                  filter=jp("metadata.name == 'b'"))]
    e = evaluate(pol, [pod("a"), pod("b")])
    assert events(e, "jobVerdictChanged") == [("b", "uid-b", "worker", "main", pol[0]["id"])]


def test_a_failure_no_policy_takes_is_reported_with_its_first_failed_container() -> None:
    """The first failed container in status order (as a filter on a failure reads them), not
    the one that failed first (the most telling one otherwise)."""
    pol = [policy("podFailed", action("count"), filter=exit_in(3))]
    failed = [terminated("main", 1, finished=60), terminated("side", 2, finished=30)]
    e = evaluate(pol, [pod("a", "Failed", containers=failed)])
    assert events(e, "podFailed") == [("a", "uid-a", "worker", "main", None)]


def test_a_filter_on_a_pod_gone_of_a_kind_whose_task_is_an_expression() -> None:
    task = {"expr": "metadata.labels.\"volcano.sh/task-spec\"", "span": span(1, 1)}
    pol = [policy("podDeleted", action("count"), filter=jp("metadata.uid"))]
    k = load_kind(QUIET, pol, task_label=None, task=task)
    first = evaluator.evaluate(k, job(), [pod("a")], None, NOW)
    e = evaluator.evaluate(k, job(), [], first.state, NOW)
    assert [(a.action, ev) for a in e.actions for ev in events(e, "podDeleted")] == [
        ("count", (None, pods.digest("uid-a"), "worker", None, pol[0]["id"]))]
