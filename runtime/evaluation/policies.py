"""Which policy takes an occurrence, and the events reported for it.

For each event name of an occurrence in turn the policies of that event are tried, task-scoped
ones for its task first, then job-wide ones, each in source order; the first that matches (its
`for`, its `to` and its filter, on the pod or on one of the candidates) takes the whole
occurrence, so one pod incarnation causes at most one action. What the action does is
`runtime.evaluation.decisions`'. With `--explain` every policy tried notes why it did or did not match.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runtime import conditions, describe, plan, pods, vocabulary
from runtime.evaluation import decisions, occurrences
from runtime.evaluation.ledger import Inputs, Ledger
from runtime.evaluation.occurrences import Occurrence
from runtime.evaluation.outcomes import Event


def offer(inputs: Inputs, ledger: Ledger, occ: Occurrence, allow: bool = True) -> None:
    """Offer an occurrence to the policies; the first that matches takes it (and, unless
    `allow` is false because the verdict is final, acts on it)."""
    label = occurrences.label(occ)
    for name in occ.names:
        disrupted = occ.disrupted and name == "podFailed"
        for policy in _candidates(inputs.kind, name, occ.task, disrupted):
            timed = name in ("podPending", "jobRunningLongerThan")
            if timed and policy.for_seconds != occ.for_seconds:
                _note(ledger, policy, f"{label}: not this duration")
                continue
            if policy.to is not None and policy.to != occ.to:
                _note(ledger, policy, f"{label}: verdict changed to {occ.to}, not {policy.to}")
                continue
            ok, pod, container = _pick(inputs, ledger, policy.filter, occ, name in vocabulary.FAILURE_EVENTS)
            if not ok:
                _note(ledger, policy, f"{label}: filter false: {describe.filter(policy.filter)}")
                continue
            if not allow:
                _note(ledger, policy, f"{label}: matched, but the verdict is final")
                _report(ledger, occ, pod, container, None)
                return
            _note(ledger, policy, f"{label}: matched")
            _report(ledger, occ, pod, container, policy.id)
            decisions.take(inputs, ledger, policy, name, occ,
                           conditions.Witness(((pod, container),) if pod else ()))
            return
    _report(ledger, occ, occ.pod, None, None)


def _candidates(kind: plan.Kind, name: str, task: str | None,
                disrupted: bool) -> list[plan.Policy]:
    """The policies that may take an event, in the order they are tried; an evicted pod's
    failure reaches only `pod failed or evicted` policies."""
    fits = [p for p in kind.policies if p.event == name and (p.evicted or not disrupted)]
    return ([p for p in fits if p.task is not None and p.task == task]
            + [p for p in fits if p.task is None])


def _note(ledger: Ledger, policy: plan.Policy, why: str) -> None:
    if ledger.trace is not None:
        ledger.trace.setdefault(policy.id, []).append(why)


def _pick(inputs: Inputs, ledger: Ledger, f: Any, occ: Occurrence,
          failure: bool) -> tuple[bool, pods.Pod | None, pods.Container | None]:
    """Whether the filter passes, on the occurrence's pod, else on the earliest deciding of its
    candidates, else (a pod gone) on what the state kept of it: its digest and task."""
    snapshot = ledger.snapshot
    if occ.pod is not None:
        ok, container = snapshot.witness(f, occ.pod, failure)
        return ok, occ.pod, container
    if occ.candidates:
        hits = [(p, c) for p in occ.candidates
                for ok, c in [snapshot.witness(f, p, failure)] if ok]
        if not hits:
            return False, None, None
        pod, container = min(hits, key=lambda pc: pods.sort_key(*pc))
        return True, pod, container
    if f is None:
        return True, None, None
    stub = pods.facts(inputs.kind, {"metadata": {"uid": occ.digest or ""}}, inputs.search)
    return snapshot.witness(f, replace(stub, task=occ.task))[0], None, None


def _report(ledger: Ledger, occ: Occurrence, pod: pods.Pod | None,
            container: pods.Container | None, policy: str | None) -> None:
    """Report every event of an occurrence, each with the policy that took the occurrence."""
    for name in occ.names:
        _event(ledger, name, occ, pod, container, policy)


def _event(ledger: Ledger, name: str, occ: Occurrence, pod: pods.Pod | None,
           container: pods.Container | None, policy: str | None) -> None:
    detail = None
    if occ.for_seconds is not None:
        detail = f"for {occ.for_seconds}s"
    elif occ.to is not None:
        detail = f"to {occ.to}"
    pod = pod or occ.pod
    if container is None and pod is not None:
        container = pod.deciding(name in vocabulary.FAILURE_EVENTS)
    ledger.events.append(Event(
        name, pod.name if pod is not None else None,
        pod.uid if pod is not None else occ.digest, occ.task or (pod.task if pod else None),
        container.name if container is not None else None, policy, detail))
