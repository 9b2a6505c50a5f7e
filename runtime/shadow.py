"""Shadow mode: on a batch/v1 Job that carries the fragment `rulec native` compiled (the plan's
`native` section), the Job controller owns the native policies. The controller still evaluates
them and writes its verdict as always, takes no action for them (as for a policy in audit), and
compares jobrules' decision with the Job controller's, so that a difference shows
(docs/controller.md).

The Job is in shadow mode only when its spec carries every field of the fragment as compiled: a
Job without it (or with a fragment of other rules) is evaluated exactly as before, since nothing
else would act on those policies. Pure: the plan, the Job and its pods in, values out; the
controller's worker counts and sends.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

from runtime import evaluator, objects, plan, writeback

FAILED = ("FailureTarget", "Failed")
SUCCEEDED = ("SuccessCriteriaMet", "Complete")
RULE_REASON = "PodFailurePolicy"          # a FailJob rule decided
BUDGET_REASON = "BackoffLimitExceeded"    # the Job's backoff limit (its default handling)
NATIVE_REASONS = (RULE_REASON, BUDGET_REASON)
_RULE_INDEX = re.compile(r"matching FailJob rule at index (\d+)$")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a Job ends, as far as a native rule fixes it: the phase, the reason, and the
    podFailurePolicy rule (0-based) when a FailJob rule decided."""

    phase: str
    reason: str | None = None
    rule: int | None = None

    def text(self) -> str:
        rule = "" if self.rule is None else f", rule {self.rule}"
        return f"{self.phase} ({self.reason or 'no reason'}{rule})"


@dataclass(frozen=True, slots=True)
class Disagreement:
    """The Job controller and jobrules decided the Job's outcome differently."""

    theirs: Outcome
    ours: Outcome | None

    @property
    def rule(self) -> str:
        """The metric's `rule` label: the native rule involved (ours first), `default` for the
        backoff limit, `none` when neither names one."""
        for side in (self.ours, self.theirs):
            if side is not None and side.rule is not None:
                return str(side.rule)
        for side in (self.ours, self.theirs):
            if side is not None and side.reason == BUDGET_REASON:
                return "default"
        return "none"

    def note(self) -> str:
        ours = self.ours.text() if self.ours is not None else "no failure by a native policy"
        return (f"the Job controller decided {self.theirs.text()}; jobrules decided {ours} "
                "(the native policies of the rules and the Job's podFailurePolicy differ)")


def carries(native: plan.Native, job: Mapping[str, Any]) -> bool:
    """Whether the Job's spec has every field of the compiled fragment, equal: then the Job
    controller carries out the native policies itself."""
    spec = job.get("spec") or {}
    return bool(native.fragment) and all(
        key in spec and spec[key] == value for key, value in native.fragment.items())


def in_shadow(kind: plan.Kind, job: Mapping[str, Any]) -> bool:
    return kind.native is not None and carries(kind.native, job)


def owned(kind: plan.Kind, job: Mapping[str, Any]) -> frozenset[str]:
    """The policies of the kind the Job controller carries out on this Job (none unless the Job
    carries the fragment): the controller decides them and writes its verdict as always, but
    takes no action for them (runtime.reconcile.decide)."""
    if kind.native is None or not carries(kind.native, job):
        return frozenset()
    return frozenset(kind.native.policies)


def theirs(job: Mapping[str, Any]) -> Outcome | None:
    """The Job controller's decision, read from the Job's conditions; None while it has none."""
    for type_, phase in ((t, "Failed") for t in FAILED):
        found = _condition(job, type_)
        if found is not None:
            index = _RULE_INDEX.search(str(found.get("message") or ""))
            return Outcome(phase, found.get("reason"), int(index.group(1)) if index else None)
    for type_ in SUCCEEDED:
        found = _condition(job, type_)
        if found is not None:
            return Outcome("Succeeded", found.get("reason"))
    return None


def ours(kind: plan.Kind, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
         now: datetime) -> Outcome | None:
    """What jobrules alone would decide with its native policies enforced: the rules evaluated
    afresh over the Job's pods, its conditions set aside (else the verdicts that read them would
    take the Job controller's word and no policy would act); None when no native policy fails
    the Job."""
    assert kind.native is not None
    status = {k: v for k, v in (job.get("status") or {}).items() if k != "conditions"}
    evaluation = evaluator.evaluate(kind, {**job, "status": status}, pods, None, now)
    by_id = {p.id: p for p in kind.policies}
    for action in evaluation.actions:
        if action.status != "run" or action.action != "failJob":
            continue
        if action.policy not in kind.native.policies:
            continue
        rule = kind.native.policies[action.policy]
        if rule is None or by_id[action.policy].action.action == "count":
            return Outcome("Failed", BUDGET_REASON)   # the budget's fallback: the backoff limit
        return Outcome("Failed", RULE_REASON, rule)
    return None


def caught_up(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the pods we read include every failed pod the Job controller counted (ours may
    lag its: then a failure it decided on may not be ours to judge yet)."""
    status = job.get("status") or {}
    uncounted = (status.get("uncountedTerminatedPods") or {}).get("failed") or []
    seen = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
    return seen >= int(status.get("failed") or 0) + len(uncounted)


def compare(theirs_: Outcome | None, ours_: Outcome | None, *, caught_up_: bool) -> Disagreement | None:
    """Whether the two decisions on the Job's outcome differ. Only once the Job controller has
    decided: it acts on the native policies, jobrules only watches. A failure it decided with
    another reason (a deadline, failed indexes) is no native rule's and is not judged."""
    if theirs_ is None:
        return None
    if theirs_.phase == "Succeeded":
        return Disagreement(theirs_, ours_) if ours_ is not None else None
    if theirs_.reason not in NATIVE_REASONS:
        return None
    if ours_ is None:
        return Disagreement(theirs_, None) if caught_up_ else None
    same = ours_.reason == theirs_.reason and (
        ours_.rule is None or theirs_.rule is None or ours_.rule == theirs_.rule)
    return None if same else Disagreement(theirs_, ours_)


def judge(kind: plan.Kind, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
          now: datetime) -> tuple[str, Disagreement | None]:
    """The comparison for one reconcile: `none` (not in shadow mode, or the Job controller has
    not decided), `wait` (its decision rests on a failed pod we have not read yet), `agree`, or
    `disagree` with the two decisions."""
    if not in_shadow(kind, job):
        return "none", None
    decided = theirs(job)
    if decided is None:
        return "none", None
    up = caught_up(job, pods)
    found = compare(decided, ours(kind, job, pods, now), caught_up_=up)
    if found is not None:
        return "disagree", found
    return ("agree" if up else "wait"), None


def event(job: Mapping[str, Any], found: Disagreement) -> writeback.EventSpec:
    """The Warning Event naming both decisions; named from the Job and its outcome, so that the
    same disagreement is one Event."""
    name = writeback.event_name(objects.meta(job), str(objects.uid(job)), "native",
                                 found.theirs.text())
    return writeback.EventSpec(name, "Warning", "NativeDisagreement", "Compare",
                               objects.bounded(found.note(), writeback.EVENT_NOTE_MAX))


def _condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return c
    return None
