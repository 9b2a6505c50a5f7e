"""The job's verdict: the rules' over a snapshot of its pods, and the one it is left with.

A terminal verdict holds (kept in the state) until the job starts again: its kind's `final
until` value changes, or a `restart job` of ours runs; while a restart of ours is under way the
job reads Restarting; else the rules decide, over the pods we did not stop. The verdict is worked
out last, from what the policies left, so evaluating again with the new state says the same.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Collection, Iterable, Mapping

from runtime import conditions, plan, pods, state, templates, vocabulary
from runtime.evaluation.ledger import Inputs, Ledger
from runtime.evaluation.outcomes import Verdict


def run_key(kind: plan.Kind, job: Mapping[str, Any], search: templates.Search) -> str | None:
    """The kind's `final until` value for this job, as compact JSON."""
    if kind.final_until is None:
        return None
    value = search(kind.final_until, job)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def release(inputs: Inputs, final: state.Final | None,
            failed_tasks: frozenset[str]) -> tuple[state.Final | None, frozenset[str]]:
    """What still holds of a stored terminal verdict (and of the tasks `fail task` failed): not
    a verdict from before the job started again (its `final until` value changed), nor, for one
    of the rules, one under `final never`."""
    if final is None:
        return final, failed_tasks
    if final.run is not None and inputs.run is not None and final.run != inputs.run:
        return None, frozenset()
    if final.by == "verdict" and not inputs.kind.sticky:
        return None, failed_tasks
    return final, failed_tasks


def under_way(kind: plan.Kind, stopped: Collection[str],
              delayed: Iterable[state.Delayed]) -> bool:
    """Whether a restart of ours is under way: pods we stopped are still there (`stopped`: their
    digests), or a restart waits for its delay."""
    by_id = {p.id: p for p in kind.policies}
    return bool(stopped) or any(
        d.policy in by_id and by_id[d.policy].action.action in vocabulary.RESTARTS
        for d in delayed)


CAUSE_REASON = "Cause_"  # a failure's default reason when a cause matched: `Cause_oom`


def cause_of(inputs: Inputs, snapshot: conditions.Snapshot, deciding: pods.Pod | None,
             first: str | None = None) -> plan.Cause | None:
    """The named cause of a failure. The causes are tried in order, `first` (the deciding
    policy's own) before the program's in declaration order, and the first that matches wins:
    on the pod that decided, else on any failed or evicted pod of the snapshot (earliest
    first), else on any other (a pod stuck in ImagePullBackOff when a deadline fails the
    job). A reason is read whatever the exit code and the pod's phase."""
    causes = inputs.kind.causes
    if not causes:
        return None
    ordered = sorted(causes, key=lambda c: c.name != first)   # stable: declaration order
    others = [p for p in snapshot.pods if p is not deciding]
    ended = sorted((p for p in others if p.is_("failedOrEvicted")),
                   key=lambda p: pods.sort_key(p, None))
    rest = [p for p in others if not p.is_("failedOrEvicted")]
    for candidates in ([deciding] if deciding is not None else [], ended, rest):
        for cause in ordered:
            for pod in candidates:
                if pods.matches(cause.filter, pod, inputs.search, pod.is_("failedOrEvicted")):
                    return cause
    return None


def hint_of(kind: plan.Kind, cause: str | None) -> str | None:
    return next((c.hint for c in kind.causes if c.name == cause), None)


def of_rules(inputs: Inputs, snapshot: conditions.Snapshot) -> Verdict:
    """The first verdict rule that holds over the snapshot decides; none: Pending. A Failed
    verdict carries its cause (and, naming no reason, takes `Cause_NAME` for one)."""
    for rule in inputs.kind.verdicts:
        ok, w = (True, None) if rule.when is None else snapshot.holds(rule.when)
        if ok:
            cause = None
            if rule.phase == "Failed" and inputs.kind.causes:
                cause = cause_of(inputs, snapshot, (w or conditions.Witness()).decide()[0])
            name, hint = (cause.name, cause.hint) if cause is not None else (None, None)
            if rule.reason is None and rule.message is None:
                return Verdict(rule.phase, CAUSE_REASON + name if name else None, None,
                               str(rule.span), cause=name, hint=hint)
            variables = inputs.variables(w or conditions.Witness())
            reason = inputs.text(rule.reason, variables)
            if rule.reason is None and name:
                reason = CAUSE_REASON + name
            return Verdict(rule.phase, reason, inputs.text(rule.message, variables),
                           str(rule.span), cause=name, hint=hint)
    return Verdict("Pending", None, None, None)


def decided_by_the_job(inputs: Inputs, ledger: Ledger) -> None:
    """A terminal verdict the job's own status gives (the first rule that holds reads the job
    alone, no pod: the operator's FailureTarget, Argo's phase) holds before any policy: the
    operator has decided, and what its pods do now is reported, not acted on (as the Job
    controller honours a FailureTarget it finds, whatever the pods say)."""
    if ledger.final is not None:
        return
    said = rules_verdict(inputs, ledger)   # worked out once: the evaluation reads it later too
    if said.phase not in vocabulary.TERMINAL_PHASES:
        return
    rule = next(r for r in inputs.kind.verdicts if str(r.span) == said.rule)
    if _reads_the_job_alone(rule.when):
        ledger.final = state.Final(said.phase, said.reason, said.message, said.rule or "",
                                   "verdict", inputs.run, said.cause)


def _reads_the_job_alone(condition: plan.Condition | None) -> bool:
    if isinstance(condition, plan.JmesPath):
        return True
    if isinstance(condition, (plan.And, plan.Or)):
        return all(_reads_the_job_alone(c) for c in condition.args)
    if isinstance(condition, plan.Not):
        return _reads_the_job_alone(condition.arg)
    return False


def rules_verdict(inputs: Inputs, ledger: Ledger,
                  snapshot: conditions.Snapshot | None = None) -> Verdict:
    """The rules' verdict over a snapshot (the one before the policies by default), worked out
    once for each."""
    snapshot = snapshot or ledger.pre
    if ledger.rules is None or ledger.rules[0] is not snapshot:
        ledger.rules = snapshot, of_rules(inputs, snapshot)
    return ledger.rules[1]


def decide(inputs: Inputs, ledger: Ledger) -> Verdict:
    """The verdict the job is left with: a terminal one that holds; else Restarting while a
    restart of ours is under way; else the rules' over the pods we did not stop, which becomes
    final when it is terminal. The ledger's snapshot, restart and final follow."""
    stopped = {digest for digest, record in ledger.records.items() if record.ours}
    if len(stopped) != len(inputs.pods) - len(ledger.pre.pods) \
            or ledger.failed_tasks is not ledger.pre.failed_tasks:
        ledger.snapshot = inputs.snapshot(stopped, ledger.failed_tasks)
    if not under_way(inputs.kind, stopped, ledger.delayed):
        ledger.restarting = None
    if ledger.final is not None:
        f = ledger.final
        return Verdict(f.phase, f.reason, f.message, f.rule, True, f.cause,
                       hint_of(inputs.kind, f.cause))
    if ledger.restarting is not None:
        r = ledger.restarting
        return Verdict("Restarting", r.reason, r.message, r.rule)
    rules = rules_verdict(inputs, ledger, ledger.snapshot)
    if rules.phase in vocabulary.TERMINAL_PHASES and inputs.kind.sticky:
        ledger.final = state.Final(rules.phase, rules.reason, rules.message, rules.rule or "",
                                   "verdict", inputs.run, rules.cause)
        return replace(rules, final=True)
    return rules
