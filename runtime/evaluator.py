"""Verdicts, events, policies and stored state of one job, as a pure function of its inputs.

`evaluate(kind, job, pods, state, now)` is everything the reconcile loop decides: the verdict
(first matching rule, or the verdict an earlier action made final), the events detected by
comparing the pods with the stored state, the actions the policies take for them, and the state
to store for next time. It does no I/O and reads no clock, so evaluating the same inputs twice
gives the same answer, and evaluating again with the returned state yields no new actions.

Semantics beyond docs/plan.md (written up in docs/evaluation.md):
- A pod change is one *occurrence* carrying the events it amounts to, most specific first (an
  evicted pod that failed is `podEvicted` then `podFailed`, the latter only for `pod failed or
  evicted` policies). Policies are tried per event name: task-scoped ones before job-wide ones,
  each in source order; the first match takes the whole occurrence, so one pod incarnation
  causes at most one action.
- Incarnations are monotone (phase only moves forward, restarts only grow, flags only get set),
  so a stored record equal to the current one means "already handled".
- Terminal verdicts hold: a Succeeded or Failed verdict of the rules, or one that `fail job`,
  `complete job` or `terminate job` made, is kept in the state and holds until the job starts
  again (the kind's `final until` value changes, or a `restart job` of ours). After that only
  `jobVerdictChanged` policies still run, and delayed actions are cancelled.
- While a restart of ours is under way (the pods it stopped are still there, or it waits for its
  delay) the verdict is Restarting, never a terminal one; pods we stopped count in no verdict.
- The verdict is worked out last, from the pods and the state this evaluation leaves, so that
  evaluating again with that state gives the same verdict and no new event.

The work is cut by topic, each module a set of functions over the evaluation's inputs and its
ledger (`runtime.evaluation.ledger`), run here as explicit steps: `occurrences` (what changed since the
stored state), `policies` (which policy takes each occurrence), `decisions` (the actions, with
`budgets`: run, scheduled, spent or fallen back, and what they leave), `verdicts` (the verdict
the job is left with). The answer's values are `runtime.evaluation.outcomes`', re-exported here.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from runtime import describe, functions, plan, pods, state, templates
from runtime.evaluation import decisions, occurrences, policies, verdicts
from runtime.evaluation.ledger import Inputs, Ledger
from runtime.evaluation.outcomes import Action, BudgetUse, Event, Finding, Target, Verdict

__all__ = ["Action", "BudgetUse", "Evaluation", "Event", "Finding", "Target", "UnknownKind",
           "Verdict", "evaluate", "kind_for", "pods_of", "to_json"]


class UnknownKind(LookupError):
    """The plan declares no kind for the object's apiVersion and kind."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    verdict: Verdict
    events: tuple[Event, ...]
    actions: tuple[Action, ...]
    state: state.State
    wake_at: datetime | None  # when evaluating again may change something even if nothing else does
    problems: tuple[str, ...]  # run-time expression errors (the expression then reads as null)
    explanation: tuple[Finding, ...] = ()


def kind_for(source: plan.Plan | plan.Kind, job: Mapping[str, Any]) -> plan.Kind:
    """The kind that decides for a job: given, or the plan's kind for its apiVersion and kind
    whose scope (label selector, namespaces) covers it."""
    if isinstance(source, plan.Kind):
        return source
    kind = source.kind_for(job.get("apiVersion", ""), job.get("kind", ""))
    if kind is None:
        raise UnknownKind(f"no rules for {job.get('apiVersion')} {job.get('kind')}")
    if not kind.covers(job):
        scope = [f"label selector {kind.selector}"] if kind.selector else []
        if kind.namespaces is not None:
            scope.append("namespaces " + ", ".join(kind.namespaces))
        raise UnknownKind(f"no rules for this {job.get('kind')}: it is outside the scope of kind "
                          f"{kind.name} ({'; '.join(scope)})")
    return kind


def foreign(kind: plan.Kind, job: Mapping[str, Any], now: datetime) -> bool:
    """Whether the job is another controller's, as the kind's `foreign when` says."""
    if kind.foreign is None:
        return False
    return pods.truthy(templates.searcher(functions.options(now))(kind.foreign.when, job))


def evaluate(source: plan.Plan | plan.Kind, job: Mapping[str, Any],
             pod_objects: Iterable[Mapping[str, Any]], stored: state.State | None,
             now: datetime, *, explain: bool = False) -> Evaluation:
    """Evaluate one job. `pod_objects` are the job's pods (see `pods.pods_of`). A job that is
    another controller's (`foreign when`) is evaluated with every policy in audit."""
    kind = kind_for(source, job)
    if foreign(kind, job, now):
        kind = plan.in_audit(kind)
    inputs, ledger = _start(kind, job, pod_objects, stored or state.EMPTY, now, explain)
    was_final = ledger.final is not None
    # 1. What changed since the stored state: pods, pending timers, tasks.
    changed, ledger.records = occurrences.of_pods(inputs)
    pending, fired = occurrences.pending_timers(inputs, ledger.records)
    ledger.fired |= fired
    found = changed + pending + occurrences.of_tasks(inputs, ledger.snapshot)
    # 2. A job its own status says is over (its operator decided) takes no action from here;
    #    the delayed actions: cancelled, due or still waiting; the fallbacks of actions given up.
    verdicts.decided_by_the_job(inputs, ledger)
    decisions.run_delayed(inputs, ledger)
    decisions.run_released(inputs, ledger)
    # 3. Each occurrence to the policies; once the verdict is final, reported only.
    for occ in found:
        policies.offer(inputs, ledger, occ, allow=ledger.final is None)
    # 4. The job's age, against the verdict as the policies left it.
    phase = ledger.final.phase if ledger.final is not None else \
        verdicts.rules_verdict(inputs, ledger).phase
    timers, fired = occurrences.job_timers(inputs, ledger.snapshot, phase)
    ledger.fired |= fired
    for occ in timers:
        policies.offer(inputs, ledger, occ, allow=ledger.final is None)
    # 5. The verdict, last; its change is an occurrence too.
    effective = verdicts.decide(inputs, ledger)
    if effective.phase != inputs.stored.verdict:
        changed_to = occurrences.verdict_changed(effective.phase, ledger.snapshot)
        policies.offer(inputs, ledger, changed_to)
        effective = verdicts.decide(inputs, ledger)
    if ledger.final is not None and not was_final:
        ledger.delayed = []  # the job is over: nothing scheduled runs any more
    # 6. The state for next time, and the answer.
    fired_ever = ledger.fired | {t for t in inputs.stored.fired
                                 if t.startswith("jobRunningLongerThan>")}
    new_state = state.State(
        verdict=effective.phase, final=ledger.final,
        pods=occurrences.remembered(inputs, ledger.records),
        tasks=occurrences.announced_remembered(inputs, ledger.snapshot), budgets=ledger.budgets,
        fired=frozenset(fired_ever), delayed=tuple(ledger.delayed), restarting=ledger.restarting,
        failed_tasks=ledger.failed_tasks)
    return Evaluation(effective, tuple(ledger.events), tuple(ledger.actions), new_state,
                      _wake_at(inputs, ledger), tuple(dict.fromkeys(ledger.problems)),
                      _explanation(inputs, ledger, effective) if ledger.trace is not None else ())


def pods_of(source: plan.Plan | plan.Kind, job: Mapping[str, Any],
            candidates: Iterable[Mapping[str, Any]], now: datetime | None = None) -> list[Mapping[str, Any]]:
    """The candidates that belong to the job (owner reference and/or label selector)."""
    return pods.pods_of(kind_for(source, job), job, candidates, now)


_FREE = state.PodRecord(None, "P")
_BY_NAME = operator.attrgetter("name", "uid")


def _start(kind: plan.Kind, job: Mapping[str, Any], pod_objects: Iterable[Mapping[str, Any]],
           stored: state.State, now: datetime, explain: bool) -> tuple[Inputs, Ledger]:
    """The inputs, read once (pod facts, the `final until` value), and the ledger opened with
    what still holds of the stored state (less what actions given up held)."""
    stored = decisions.let_go(kind, stored)
    problems: list[str] = []

    def error(expr: plan.Expr, err: Exception) -> None:
        problems.append(f"{expr.span}: <<{expr.source}>>: {err}")

    search = templates.searcher(functions.options(now), error)
    counts = pods.counted(kind)
    facts = [pods.facts(kind, p, search, counts) for p in pod_objects]
    facts.sort(key=_BY_NAME)
    meta = job.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    job_vars = {"job": meta.get("name"), "namespace": meta.get("namespace"),
                "kind": job.get("kind")}
    stopped = {p.digest for p in facts if (stored.pods.get(p.digest) or _FREE).ours}
    # A restart whose pods are all gone (and that waits for nothing) is over.
    restarting = stored.restarting if verdicts.under_way(kind, stopped, stored.delayed) else None
    inputs = Inputs(kind, job, tuple(facts), stored, now, search, job_vars,
                    verdicts.run_key(kind, job, search))
    final, failed_tasks = verdicts.release(inputs, stored.final, stored.failed_tasks)
    # Pods a restart, abort or termination of ours stopped count in no verdict.
    snapshot = inputs.snapshot(stopped, failed_tasks)
    return inputs, Ledger(problems, dict(stored.budgets), final, restarting, failed_tasks,
                          snapshot, snapshot, {} if explain else None)


def _wake_at(inputs: Inputs, ledger: Ledger) -> datetime | None:
    """The earliest time at which time alone may change the answer."""
    snapshot = ledger.snapshot
    times = [d.due for d in ledger.delayed]
    for policy in inputs.kind.policies:
        if policy.for_seconds is None:
            continue
        if policy.event == "podPending":
            times += [since + timedelta(seconds=policy.for_seconds)
                      for p in pods.in_state(snapshot.pods, "pending")
                      if (since := p.since("pending")) is not None]
        elif policy.event == "jobRunningLongerThan" and (start := snapshot.job_start()):
            times.append(start + timedelta(seconds=policy.for_seconds))
    if ledger.final is None:
        for rule in inputs.kind.verdicts:
            times += snapshot.times(rule.when)
    later = [t for t in times if t > inputs.now]
    return min(later) if later else None


def _explanation(inputs: Inputs, ledger: Ledger, decided: Verdict) -> tuple[Finding, ...]:
    """`--explain`: for each verdict rule whether it held, for each policy what it matched."""
    snapshot = ledger.snapshot
    out = []
    for rule in inputs.kind.verdicts:
        if rule.when is None:
            why = "otherwise" if str(rule.span) == decided.rule else \
                "otherwise, but an earlier rule decided"
            out.append(Finding(str(rule.span), "verdict", rule.phase, True, why))
            continue
        ok, _ = snapshot.holds(rule.when)
        why = "holds" if ok else snapshot.why_not(rule.when)
        if ok and str(rule.span) != decided.rule:
            why = "holds, but an earlier rule decided"
        out.append(Finding(str(rule.span), "verdict", rule.phase, ok, why))
    for policy in inputs.kind.policies:
        notes = (ledger.trace or {}).get(policy.id, [])
        matched = any(n.endswith(": matched") for n in notes)
        if notes:
            why = "; ".join(notes)
        else:
            why = f"no {describe.event(policy.event)} event" + (
                f" for task {policy.task}" if policy.task else "")
        out.append(Finding(str(policy.span), "policy", policy.id, matched,
                           f"{describe.policy(policy)}: {why}"))
    return tuple(out)


def to_json(e: Evaluation) -> dict[str, Any]:
    """The `rulec eval` output contract: phase, reason, message, events, actions, state, rule
    (and `cause`, when a named cause matched a failure)."""
    out: dict[str, Any] = {
        "phase": e.verdict.phase, "reason": e.verdict.reason, "message": e.verdict.message,
        "rule": e.verdict.rule, "final": e.verdict.final,
        **({"cause": e.verdict.cause} if e.verdict.cause is not None else {}),
        "events": [_compact(_fields(ev)) for ev in e.events],
        "actions": [_action_json(a) for a in e.actions],
        "state": state.to_json(e.state),
        "wakeAt": functions.rfc3339(e.wake_at) if e.wake_at is not None else None,
    }
    if e.problems:
        out["problems"] = list(e.problems)
    if e.explanation:
        out["explain"] = [_fields(f) for f in e.explanation]
    return out


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}


def _compact(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _action_json(a: Action) -> dict[str, Any]:
    out = _compact({"action": a.action, "status": a.status, "policy": a.policy, "event": a.event,
                    "rule": a.rule, "reason": a.reason, "message": a.message})
    out["target"] = _compact(_fields(a.target))
    if a.due is not None:
        out["due"] = functions.rfc3339(a.due)
    if a.budget is not None:
        out["budget"] = _fields(a.budget)
    if a.resize:
        out["resize"] = [_fields(r) for r in a.resize]
    return out

