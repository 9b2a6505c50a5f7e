"""The stored state remembers a pod's change only when forgetting it could change a decision
(runtime.evaluation.occurrences.remembered). The oracle is the evaluator remembering every
change: over random histories of the suites' jobs, where pods start, run, restart, are evicted,
deleted, replaced and go (a pod that ended keeps its phase, as a kubelet keeps it), both decide
the same verdicts, events and actions at every step."""

from __future__ import annotations

import copy
import dataclasses
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import evaluator, plan, state
from runtime.evaluation import occurrences
from runtime.span import Span
from tests.unit.runtime import corpus

CASES = list(corpus.cases())
PHASES = ("Pending", "Running", "Succeeded", "Failed")
TERMINAL = ("Succeeded", "Failed")
# Policies a history may add to its kind, so that every event is listened for in some history.
EXTRA = ["podPending", "podRunning", "podSucceeded", "podFailed", "podEvicted", "podDeleted",
         "containerRestarted", "taskCompleted", "taskFailed"]


def listening(kind: plan.Kind, events: list[str]) -> plan.Kind:
    """`kind` with a policy counting each of `events` (a budget of 2, then `fail job`)."""
    extra = tuple(plan.Policy(
        f"x-{e}", Span("x.rules", 1, 1, 1, 2), e, None, None, None, None,
        plan.Action("count", None, None, plan.Budget(2, "job", f"x-{e}"),
                    plan.Action("failJob", None, None, None, None, None), None))
        for e in events)
    return dataclasses.replace(kind, policies=kind.policies + extra)


def moved(pod: dict[str, Any], change: str, n: int) -> dict[str, Any] | None:
    """`pod` after `change`, as a kubelet makes it: a pod Succeeded or Failed keeps its phase
    (the kubelet never moves a pod out of a terminal phase; the API server refuses a container
    going back to running, though not Succeeded to Failed), and is not evicted after the fact."""
    out = copy.deepcopy(pod)
    status = out.setdefault("status", {})
    meta = out.setdefault("metadata", {})
    if status.get("phase") in TERMINAL and change in (*PHASES, "evicted") and (
            change != status["phase"]):
        return out
    statuses = status.get("containerStatuses") or [{"name": "main"}]
    if change in PHASES:
        status["phase"] = change
        if change in ("Succeeded", "Failed"):
            code = 0 if change == "Succeeded" else 137
            statuses = [dict(c, state={"terminated": {"exitCode": code, "reason": "X",
                                                      "finishedAt": "2024-05-01T12:30:00Z"}})
                        for c in statuses]
    elif change == "restart":
        statuses = [dict(c, restartCount=int(c.get("restartCount") or 0) + 1) for c in statuses]
    elif change == "evicted":
        status.update(phase="Failed", reason="Evicted")
    elif change == "disrupted":
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                 "reason": "PreemptionByScheduler"}]
    elif change == "deleting":
        meta["deletionTimestamp"] = "2024-05-01T12:20:00Z"
    elif change == "replaced":
        meta["uid"] = f"{meta.get('uid', 'u')}-r{n}"
        status.clear()
        status["phase"] = "Pending"
        return out
    elif change == "gone":
        return None
    status["containerStatuses"] = statuses
    return out


def fresh(pod: dict[str, Any]) -> dict[str, Any]:
    """The suite's pod as it was made: no status yet."""
    return {**copy.deepcopy(pod), "status": {}}


CHANGES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "restart", "evicted",
                           "disrupted", "deleting", "replaced", "gone", "same"])


@st.composite
def histories(draw: st.DrawFn) -> tuple[plan.Kind, list[tuple[Any, ...]]]:
    case = draw(st.sampled_from(CASES))
    first = case.steps[0]
    pods = [p for p in first.pods]
    steps = []
    for n in range(draw(st.integers(1, 8))):
        pods = [q for p in pods if (q := p if (c := draw(CHANGES)) == "same" else moved(p, c, n))
                is not None]
        steps.append((first.now + timedelta(minutes=n), first.job, list(pods)))
    kind = evaluator.kind_for(case.plan, first.job)
    if draw(st.booleans()):   # its own policies, or only those drawn here
        kind = dataclasses.replace(kind, policies=())
    kind = listening(kind, draw(st.lists(st.sampled_from(EXTRA), unique=True, max_size=4)))
    return kind, steps


def decide(steps: list[tuple[Any, ...]], kind: plan.Kind) -> list[dict[str, Any]]:
    out, prior = [], None
    for now, job, pods in steps:
        e = evaluator.evaluate(kind, job, evaluator.pods_of(kind, job, pods, now), prior, now)
        got = evaluator.to_json(e)
        out.append({k: got.get(k) for k in ("phase", "reason", "message", "final", "events",
                                             "actions", "wakeAt")})
        prior = state.decode(state.encode(e.state)).state
    return out


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_remembering_less_decides_the_same(history: Any) -> None:
    kind, steps = history
    less = decide(steps, kind)
    kept = occurrences.remembered
    occurrences.remembered = lambda inputs, records: dict(records)  # type: ignore[assignment]
    try:
        every = decide(steps, kind)
    finally:
        occurrences.remembered = kept
    assert less == every


def test_remembering_less_writes_less() -> None:
    """A kind listening for pod failures only: pods starting and running change nothing (one
    listening for evictions too remembers a pod as soon as it sees it: its going unfinished
    would be one)."""
    case = next(c for c in CASES if c.suite.endswith("volcano-oomkilled/suite.yaml"))
    kind = listening(dataclasses.replace(case.plan.kinds[0], policies=()), ["podFailed"])
    pod = fresh(case.steps[0].pods[0])
    steps = [(case.steps[0].now + timedelta(minutes=n), case.steps[0].job, [moved(pod, phase, n)])
             for n, phase in enumerate(["Pending", "Running", "Running"])]
    prior = None
    for now, job, pods in steps:
        prior = evaluator.evaluate(kind, job, pods, prior, now).state
        assert prior.pods == {}
    evictions = listening(dataclasses.replace(case.plan.kinds[0], policies=()), ["podEvicted"])
    seen = evaluator.evaluate(evictions, steps[0][1], steps[0][2], None, steps[0][0]).state
    assert len(seen.pods) == 1


def test_a_deletion_nobody_listens_for_is_remembered_for_the_failure_it_makes() -> None:
    """A pod deleted by someone else then failing on its SIGTERM is a disruption, not a failure
    for `pod failed`: the deletion must be remembered though no policy takes it."""
    case = next(c for c in CASES if c.suite.endswith("volcano-oomkilled/suite.yaml"))
    kind = listening(dataclasses.replace(case.plan.kinds[0], policies=()), ["podFailed"])
    first = case.steps[0]
    running = moved(fresh(first.pods[0]), "Running", 0)
    deleting = moved(running, "deleting", 1)
    failed = moved(deleting, "Failed", 2)
    prior = None
    for n, pod in enumerate((running, deleting, failed)):
        e = evaluator.evaluate(kind, first.job, [pod], prior, first.now + timedelta(minutes=n))
        prior = e.state
    assert [a.action for a in e.actions] == []   # not counted: a disruption


def test_a_pod_that_ended_is_not_remembered_again_for_its_deletion() -> None:
    """Succeeded and Failed are terminal: an ended pod that its operator deletes (a
    cleanPodPolicy, a TTL) can neither fail nor succeed any more, so its deletion changes no
    later decision and is no write, though its failure and success are listened for."""
    case = next(c for c in CASES if c.suite.endswith("volcano-oomkilled/suite.yaml"))
    kind = listening(dataclasses.replace(case.plan.kinds[0], policies=()),
                     ["podFailed", "podSucceeded"])
    first = case.steps[0]
    for end in TERMINAL:
        running = moved(fresh(first.pods[0]), "Running", 0)
        ended = moved(running, end, 1)
        prior, kept = None, []
        for n, pod in enumerate((running, ended, moved(ended, "deleting", 2))):
            prior = evaluator.evaluate(kind, first.job, [pod], prior,
                                       first.now + timedelta(minutes=n)).state
            kept.append(state.encode(prior))
        assert kept[2] == kept[1], end
        assert kept[1] != kept[0], end   # its end itself is heard, and remembered
