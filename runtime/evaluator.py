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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from runtime import conditions, describe, functions, plan, pods, state, templates, vocabulary

TERMINAL = {"failJob": "Failed", "completeJob": "Succeeded", "terminateJob": "Failed"}
STOPS_PODS = ("restartJob", "abortJob", "terminateJob")
FAILURES = ("podFailed", "podEvicted", "podDeleted", "containerRestarted")
FAILURE_SCOPED = frozenset({"podFailed", "podEvicted", "taskFailed"})  # read failed containers
PHASE_EVENTS = {"Pending": "podPending", "Running": "podRunning", "Succeeded": "podSucceeded",
                "Failed": "podFailed"}


class UnknownKind(LookupError):
    """The plan declares no kind for the object's apiVersion and kind."""


@dataclass(frozen=True, slots=True)
class Verdict:
    phase: str
    reason: str | None
    message: str | None
    rule: str | None  # path:line:col of the deciding rule (or of the policy that made it final)
    final: bool = False  # made by an action; holds from then on


@dataclass(frozen=True, slots=True)
class Event:
    """Something detected in this evaluation, and the policy (if any) that took it."""

    event: str
    pod: str | None
    uid: str | None
    task: str | None
    container: str | None
    policy: str | None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Target:
    job: str
    namespace: str | None
    task: str | None
    pod: str | None
    uid: str | None


@dataclass(frozen=True, slots=True)
class BudgetUse:
    key: str
    used: int  # after this action
    max: int


@dataclass(frozen=True, slots=True)
class Action:
    """What to do. Only `status == "run"` is to be executed now; `scheduled` waits for `due`,
    `cancelled` is a scheduled one dropped (its pod recovered or the job ended), `spent` is one
    whose budget ran out with no fallback."""

    action: str
    status: str  # run | scheduled | cancelled | spent
    policy: str
    event: str
    rule: str
    reason: str | None
    message: str | None
    target: Target
    due: datetime | None = None
    budget: BudgetUse | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """Explanation of one rule: whether it matched, and if not, why."""

    rule: str
    what: str  # verdict | policy
    name: str
    matched: bool
    why: str


@dataclass(frozen=True, slots=True)
class Evaluation:
    verdict: Verdict
    events: tuple[Event, ...]
    actions: tuple[Action, ...]
    state: state.State
    wake_at: datetime | None  # when evaluating again may change something even if nothing else does
    problems: tuple[str, ...]  # run-time expression errors (the expression then reads as null)
    explanation: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True)
class _Occurrence:
    names: tuple[str, ...]
    pod: pods.Pod | None
    digest: str | None
    task: str | None
    for_seconds: int | None = None  # timers: podPending / jobRunningLongerThan thresholds
    to: str | None = None  # jobVerdictChanged
    candidates: tuple[pods.Pod, ...] = ()  # task and job events: the pods a filter may pick from
    disrupted: bool = False  # podFailed of an evicted pod, or of one deleted by someone else


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


def evaluate(source: plan.Plan | plan.Kind, job: Mapping[str, Any],
             pod_objects: Iterable[Mapping[str, Any]], stored: state.State | None,
             now: datetime, *, explain: bool = False) -> Evaluation:
    """Evaluate one job. `pod_objects` are the job's pods (see `pods.pods_of`)."""
    return _Run(kind_for(source, job), job, pod_objects, stored or state.EMPTY, now, explain).result()


def pods_of(source: plan.Plan | plan.Kind, job: Mapping[str, Any],
            candidates: Iterable[Mapping[str, Any]], now: datetime | None = None) -> list[Mapping[str, Any]]:
    """The candidates that belong to the job (owner reference and/or label selector)."""
    return pods.pods_of(kind_for(source, job), job, candidates, now)


class _Run:
    """One evaluation in progress: the inputs, and the outputs being accumulated."""

    def __init__(self, kind: plan.Kind, job: Mapping[str, Any],
                 pod_objects: Iterable[Mapping[str, Any]], stored: state.State, now: datetime,
                 explain: bool) -> None:
        self.kind = kind
        self.job = job
        self.now = now
        self.stored = stored
        self.problems: list[str] = []
        self.search = templates.searcher(functions.options(now), self._error)
        counts = pods.counted(kind)
        facts = [pods.facts(kind, p, self.search, counts) for p in pod_objects]
        facts.sort(key=lambda p: (p.name, p.uid))
        self.pods = facts
        meta = job.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        self.job_vars = {"job": meta.get("name"), "namespace": meta.get("namespace"),
                         "kind": job.get("kind")}
        self.budgets = dict(stored.budgets)
        self.records: dict[str, state.PodRecord] = {}
        self.fired: set[str] = set()
        self.delayed: list[state.Delayed] = []
        self.final = stored.final
        present = [stored.pods[p.digest] for p in facts if p.digest in stored.pods]
        # A restart whose pods are all gone (and that waits for nothing) is over.
        self.restarting = stored.restarting if self._under_way(present, stored.delayed) else None
        self.failed_tasks = stored.failed_tasks
        self.run = self._run_key()
        self._release()
        # Pods a restart, abort or termination of ours stopped count in no verdict.
        self.snapshot = self._snapshot(lambda p: not (stored.pods.get(p.digest) or _FREE).ours)
        self.events: list[Event] = []
        self.actions: list[Action] = []
        self.tasks: dict[str, str] = {}
        self._rules: tuple[conditions.Snapshot, Verdict] | None = None  # the last one worked out
        self.trace: dict[str, list[str]] | None = {} if explain else None

    def _snapshot(self, keep: Any) -> conditions.Snapshot:
        return conditions.Snapshot(self.job, [p for p in self.pods if keep(p)], self.now,
                                   self.search, self.job_vars, self.failed_tasks)

    # -- the job's run ---------------------------------------------------------------------------

    def _run_key(self) -> str | None:
        """The kind's `final until` value for this job, as compact JSON."""
        if self.kind.final_until is None:
            return None
        value = self.search(self.kind.final_until, self.job)
        return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)

    def _release(self) -> None:
        """A stored terminal verdict no longer holds when the job started again (its `final
        until` value changed), nor, for one of the rules, when the kind says `final never`."""
        final = self.final
        if final is None:
            return
        if final.run is not None and self.run is not None and final.run != self.run:
            self.final = None
            self.failed_tasks = frozenset()
        elif final.by == "verdict" and not self.kind.sticky:
            self.final = None

    # -- expressions ---------------------------------------------------------------------------

    def _error(self, expr: plan.Expr, err: Exception) -> None:
        self.problems.append(f"{expr.span}: <<{expr.source}>>: {err}")

    def _variables(self, w: conditions.Witness, **extra: Any) -> dict[str, Any]:
        out = dict(self.job_vars)
        pod, container = w.decide()
        if pod is not None:
            out.update(task=pod.task, pod=pod.name, pod_reason=pod.reason,
                       phase=pod.phase, restarts=pod.restarts)
        if container is not None:
            out.update(container=container.name, container_reason=container.reason,
                       exit_code=container.exit_code, restarts=container.restarts)
        if w.count is not None:
            out.update(count=w.count, total=w.total)
        out.update(extra)
        return out

    def _text(self, template: plan.Template | None, variables: Mapping[str, Any]) -> str | None:
        return templates.render_text(template, self.job, variables, self.search)

    # -- verdict conditions --------------------------------------------------------------------

    def verdict(self, snapshot: conditions.Snapshot) -> Verdict:
        for rule in self.kind.verdicts:
            ok, w = (True, None) if rule.when is None else snapshot.holds(rule.when)
            if ok:
                if rule.reason is None and rule.message is None:
                    return Verdict(rule.phase, None, None, str(rule.span))
                variables = self._variables(w or conditions.Witness())
                return Verdict(rule.phase, self._text(rule.reason, variables),
                               self._text(rule.message, variables), str(rule.span))
        return Verdict("Pending", None, None, None)

    # -- occurrences ---------------------------------------------------------------------------

    def pod_occurrences(self) -> list[_Occurrence]:
        out = []
        seen = set()
        for p in self.pods:
            seen.add(p.digest)
            old = self.stored.pods.get(p.digest)
            record = state.PodRecord(p.task, state.PHASE_LETTERS.get(p.phase, "P"), p.restarts,
                                     p.evicted, p.terminating, old is not None and old.ours)
            self.records[p.digest] = record
            if record.ours:
                continue  # we asked for this pod to go: what happens to it is our doing
            names, disrupted = _changes(old, record, p)
            if names:
                out.append(_Occurrence(names, p, p.digest, p.task, disrupted=disrupted))
        out.sort(key=lambda occ: pods.change_key(occ.pod))  # type: ignore[arg-type]  # all have pods
        for digest, old in sorted(self.stored.pods.items()):
            if digest in seen or old.finished or old.deleting or old.ours:
                continue
            out.append(_Occurrence(("podDeleted", "podEvicted"), None, digest, old.task))
        return out

    def pending_timers(self) -> list[_Occurrence]:
        thresholds = sorted({p.for_seconds for p in self.kind.policies
                             if p.event == "podPending" and p.for_seconds is not None})
        out = []
        for p in self.pods:
            if not p.is_("pending"):
                continue
            for seconds in thresholds:
                token = f"podPending>{seconds} {p.digest}"
                since = p.since("pending")
                if token in self.stored.fired:
                    self.fired.add(token)
                elif self.records[p.digest].ours:
                    continue  # a pod we stopped raises nothing
                elif since is not None and (self.now - since).total_seconds() >= seconds:
                    self.fired.add(token)
                    out.append(_Occurrence(("podPending",), p, p.digest, p.task, for_seconds=seconds))
        return out

    def task_occurrences(self) -> list[_Occurrence]:
        out = []
        for task, now_state in sorted(_announced(self.snapshot).items()):
            if self.stored.tasks.get(task) != now_state:
                name = "taskCompleted" if now_state == "succeeded" else "taskFailed"
                members = tuple(p for p in self.snapshot.scope(task) if p.is_(now_state))
                out.append(_Occurrence((name,), None, None, task, candidates=members))
        return out

    def job_timers(self, phase: str) -> list[_Occurrence]:
        out = []
        age = self.snapshot.job_age()
        for seconds in sorted({p.for_seconds for p in self.kind.policies
                               if p.event == "jobRunningLongerThan" and p.for_seconds is not None}):
            token = f"jobRunningLongerThan>{seconds}"
            if token in self.stored.fired:
                self.fired.add(token)
            elif age is not None and age >= seconds and phase not in ("Succeeded", "Failed"):
                self.fired.add(token)
                out.append(_Occurrence(("jobRunningLongerThan",), None, None, None,
                                       for_seconds=seconds, candidates=tuple(self.snapshot.pods)))
        return out

    # -- policies ------------------------------------------------------------------------------

    def _candidates(self, name: str, task: str | None, disrupted: bool) -> list[plan.Policy]:
        """The policies that may take an event, in the order they are tried; an evicted pod's
        failure reaches only `pod failed or evicted` policies."""
        fits = [p for p in self.kind.policies if p.event == name and (p.evicted or not disrupted)]
        return ([p for p in fits if p.task is not None and p.task == task]
                + [p for p in fits if p.task is None])

    def _note(self, policy: plan.Policy, why: str) -> None:
        if self.trace is not None:
            self.trace.setdefault(policy.id, []).append(why)

    def handle(self, occ: _Occurrence, allow: bool = True) -> None:
        """Offer an occurrence to the policies; the first that matches takes it."""
        label = _label(occ)
        for name in occ.names:
            disrupted = occ.disrupted and name == "podFailed"
            for policy in self._candidates(name, occ.task, disrupted):
                timed = name in ("podPending", "jobRunningLongerThan")
                if timed and policy.for_seconds != occ.for_seconds:
                    self._note(policy, f"{label}: not this duration")
                    continue
                if policy.to is not None and policy.to != occ.to:
                    self._note(policy, f"{label}: verdict changed to {occ.to}, not {policy.to}")
                    continue
                ok, pod, container = self._pick(policy.filter, occ, name in FAILURE_SCOPED)
                if not ok:
                    self._note(policy, f"{label}: filter false: {describe.filter(policy.filter)}")
                    continue
                if not allow:
                    self._note(policy, f"{label}: matched, but the verdict is final")
                    self._events(occ, pod, container, None)
                    return
                self._note(policy, f"{label}: matched")
                self._events(occ, pod, container, policy.id)
                self.take(policy, name, occ, conditions.Witness(((pod, container),) if pod else ()))
                return
        self._events(occ, occ.pod, None, None)

    def _pick(self, f: Any, occ: _Occurrence,
              failure: bool) -> tuple[bool, pods.Pod | None, pods.Container | None]:
        if occ.pod is not None:
            ok, container = self.snapshot.witness(f, occ.pod, failure)
            return ok, occ.pod, container
        if occ.candidates:
            hits = [(p, c) for p in occ.candidates
                    for ok, c in [self.snapshot.witness(f, p, failure)] if ok]
            if not hits:
                return False, None, None
            pod, container = min(hits, key=lambda pc: pods.sort_key(*pc))
            return True, pod, container
        if f is None:
            return True, None, None
        stub = pods.facts(self.kind, {"metadata": {"uid": occ.digest or ""}}, self.search)
        return self.snapshot.witness(f, replace(stub, task=occ.task))[0], None, None

    def _events(self, occ: _Occurrence, pod: pods.Pod | None, container: pods.Container | None,
                policy: str | None) -> None:
        """Report every event of an occurrence, each with the policy that took the occurrence."""
        for name in occ.names:
            self._event(name, occ, pod, container, policy)

    def _event(self, name: str, occ: _Occurrence, pod: pods.Pod | None,
               container: pods.Container | None, policy: str | None) -> None:
        detail = None
        if occ.for_seconds is not None:
            detail = f"for {occ.for_seconds}s"
        elif occ.to is not None:
            detail = f"to {occ.to}"
        pod = pod or occ.pod
        if container is None and pod is not None:
            container = pod.deciding(name in FAILURE_SCOPED)
        self.events.append(Event(
            name, pod.name if pod is not None else None,
            pod.uid if pod is not None else occ.digest, occ.task or (pod.task if pod else None),
            container.name if container is not None else None, policy, detail))

    def _target(self, occ_task: str | None, pod: pods.Pod | None, digest: str | None,
                pod_name: str | None = None) -> Target:
        return Target(self.job_vars["job"] or "", self.job_vars["namespace"],
                      occ_task if occ_task is not None else (pod.task if pod else None),
                      pod.name if pod is not None else pod_name,
                      pod.uid if pod is not None else digest)

    def take(self, policy: plan.Policy, name: str, occ: _Occurrence, w: conditions.Witness) -> None:
        """Run or schedule the policy's action for an occurrence."""
        action = policy.action
        if action.action == "ignore":
            return
        variables = self._variables(w, event=name)
        if variables.get("task") is None:
            variables["task"] = occ.task
        pod = w.decide()[0]
        target = self._target(occ.task, pod, occ.digest)
        if action.delay:
            if any(d.policy == policy.id and d.digest == occ.digest and d.task == target.task
                   for d in self.delayed):
                return  # already waiting for this pod
            due = self.now + timedelta(seconds=self._delay(action, target))
            keep = {k: v for k, v in variables.items()
                    if k in ("container", "container_reason", "exit_code", "pod_reason", "restarts")
                    and v is not None}
            self.delayed.append(state.Delayed(policy.id, name, due, target.pod, occ.digest,
                                              target.task, pod.restarts if pod else 0, keep))
            reason, message = self._text(action.reason, variables), self._text(action.message, variables)
            self.actions.append(Action(action.action, "scheduled", policy.id, name, str(policy.span),
                                       reason, message, target, due))
            if action.action in vocabulary.RESTARTS:
                self._restarting(policy, name, action.action, reason, message, target, due)
            return
        self.fire(policy, name, action, variables, target, None, None)

    def _delay(self, action: plan.Action, target: Target) -> float:
        """`after D`, or with `doubling` D times 2 to the budget's uses so far (up to the cap)."""
        delay = float(action.delay or 0)
        if action.doubling and action.budget is not None:
            used = self.budgets.get(_budget_key(action.budget, target), 0)
            delay *= 2 ** min(used, 40)
            if action.delay_cap is not None:
                delay = min(delay, action.delay_cap)
        return delay

    def _budget_max(self, budget: plan.Budget) -> int:
        """A budget's `max`: a number, or read from the job; unreadable is spent (0)."""
        if isinstance(budget.max, int):
            return budget.max
        value = self.search(budget.max, self.job)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                or value != int(value):
            self.problems.append(f"{budget.max.span}: <<{budget.max.source}>>: {value!r} is not a "
                                 "budget (a whole number, 0 or more); the budget counts as spent")
            return 0
        return int(value)

    def fire(self, policy: plan.Policy, name: str, action: plan.Action, variables: dict[str, Any],
             target: Target, due: datetime | None, spent: tuple[plan.Action, BudgetUse] | None) -> None:
        """Run an action now, spending its budget or falling back when the budget is gone."""
        use = None
        if action.budget is not None:
            key = _budget_key(action.budget, target)
            limit = self._budget_max(action.budget)
            used = self.budgets.get(key, 0)
            if used >= limit:
                use = BudgetUse(key, used, limit)
                if action.fallback is not None:
                    self.fire(policy, name, action.fallback, variables, target, due, (action, use))
                else:
                    self.actions.append(Action(action.action, "spent", policy.id, name,
                                               str(policy.span), _spent_reason(action, use, name),
                                               None, target, due, use))
                return
            self.budgets[key] = used + 1
            use = BudgetUse(key, used + 1, limit)
            variables = dict(variables, budget_used=used + 1, budget_max=limit)
        reason = self._text(action.reason, variables)
        message = self._text(action.message, variables)
        if spent is not None:
            spent_action, spent_use = spent
            variables = dict(variables, budget_used=spent_use.used, budget_max=spent_use.max)
            reason = self._text(action.reason, variables) or _spent_reason(spent_action, spent_use, name)
            message = self._text(action.message, variables) or (
                f"{_happened(name, target)}: {describe.action(spent_action.action)} budget "
                f"{spent_use.used}/{spent_use.max} spent ({policy.span})")
            use = use or spent_use
        status = "counted" if action.action == "count" else "run"
        self.actions.append(Action(action.action, status, policy.id, name, str(policy.span),
                                   reason, message, target, due, use))
        self._consequences(action.action, policy, name, reason, message, target)

    def _consequences(self, action: str, policy: plan.Policy, name: str, reason: str | None,
                      message: str | None, target: Target) -> None:
        if action in TERMINAL and self.final is None:
            phase = TERMINAL[action]
            said = self.rules_verdict()
            if reason is None and message is None and said.phase == phase:
                reason, message = said.reason, said.message  # it says why
            self.final = state.Final(
                phase, reason or name[0].upper() + name[1:],
                message or f"{_happened(name, target)}: {describe.action(action)} ({policy.span})",
                str(policy.span), "policy", self.run)
        if action in vocabulary.RESTARTS:
            self._restarting(policy, name, action, reason, message, target, None)
        if action == "restartJob":
            self.final = None  # the job starts again
            self.failed_tasks = frozenset()
        elif action == "restartTask" and target.task in self.failed_tasks:
            self.failed_tasks = self.failed_tasks - {target.task}
        elif action == "failTask" and target.task is not None:
            self.failed_tasks = self.failed_tasks | {target.task}
        if action in STOPS_PODS:
            doomed = self.pods
        elif action in ("restartTask", "failTask"):
            doomed = [p for p in self.pods if p.task == target.task]
        elif action == "restartPod":
            doomed = [p for p in self.pods if p.uid == target.uid]
        else:
            doomed = []
        for p in doomed:
            self.records[p.digest] = replace(self.records[p.digest], ours=True)

    def _restarting(self, policy: plan.Policy, name: str, action: str, reason: str | None,
                    message: str | None, target: Target, due: datetime | None) -> None:
        """Note the restart under way (the first one speaks for the job while it lasts)."""
        if self.restarting is not None:
            return
        said = self.rules_verdict()
        if reason is None and message is None and said.phase in ("Restarting", "Failed"):
            reason, message = said.reason, said.message  # it says why
        when = f" at {functions.rfc3339(due)}" if due is not None else ""
        self.restarting = state.Restarting(
            reason or name[0].upper() + name[1:],
            message or f"{_happened(name, target)}: {describe.action(action)}{when} ({policy.span})",
            str(policy.span))

    # -- delayed actions -----------------------------------------------------------------------

    def run_delayed(self) -> None:
        by_id = {p.id: p for p in self.kind.policies}
        for d in self.stored.delayed:
            policy = by_id.get(d.policy)
            target = Target(self.job_vars["job"] or "", self.job_vars["namespace"], d.task, d.pod,
                            d.digest)
            if policy is None:
                continue  # the rules changed: the policy is gone
            current = self._current(d)
            if self.final is not None or self._recovered(d, current):
                self.actions.append(Action(policy.action.action, "cancelled", policy.id, d.event,
                                           str(policy.span), None, None, target, d.due))
                continue
            if d.due > self.now:
                self.delayed.append(d)
                continue
            w = conditions.Witness(((current, None),) if current is not None else ())
            variables = {**self._variables(w, event=d.event), "task": d.task, "pod": d.pod,
                         **d.variables}
            self.fire(policy, d.event, policy.action, variables,
                      self._target(d.task, current, d.digest, d.pod), d.due, None)

    def _current(self, d: state.Delayed) -> pods.Pod | None:
        """The delayed action's pod now: the same incarnation, else a replacement of that name."""
        same = next((p for p in self.pods if p.digest == d.digest), None)
        if same is not None or d.pod is None:
            return same
        return next((p for p in self.pods if p.name == d.pod), None)

    def _recovered(self, d: state.Delayed, current: pods.Pod | None) -> bool:
        """podPending: the pod left Pending (checked every time). Failures: checked at the due
        time, the pod (or its replacement) runs or succeeded cleanly, with no restart since."""
        if d.event == "podPending":
            return current is None or current.digest != d.digest or not current.is_("pending")
        if d.due > self.now:
            return False
        if d.event == "taskFailed":
            return self.snapshot.task_states().get(d.task or "") != "failed"
        if d.event not in FAILURES or current is None:
            return False
        if current.digest == d.digest and current.restarts > d.restarts:
            return False
        return _healthy(current)

    # -- the whole evaluation ------------------------------------------------------------------

    def result(self) -> Evaluation:
        self.pre = self.snapshot   # what the policies' texts cite: the rules before them
        was_final = self.final is not None
        occurrences = self.pod_occurrences() + self.pending_timers() + self.task_occurrences()
        self.run_delayed()
        for occ in occurrences:
            self.handle(occ, allow=self.final is None)
        phase = self.final.phase if self.final is not None else self.rules_verdict().phase
        for occ in self.job_timers(phase):
            self.handle(occ, allow=self.final is None)
        effective = self.decide()
        if effective.phase != self.stored.verdict:
            self.handle(_Occurrence(("jobVerdictChanged",), None, None, None, to=effective.phase,
                                    candidates=tuple(self.snapshot.pods)))
            effective = self.decide()
        if self.final is not None and not was_final:
            self.delayed = []  # the job is over: nothing scheduled runs any more
        fired = self.fired | {t for t in self.stored.fired if t.startswith("jobRunningLongerThan>")}
        new_state = state.State(
            verdict=effective.phase, final=self.final, pods=self.records,
            tasks=_announced(self.snapshot), budgets=self.budgets, fired=frozenset(fired),
            delayed=tuple(self.delayed), restarting=self.restarting,
            failed_tasks=self.failed_tasks)
        return Evaluation(effective, tuple(self.events), tuple(self.actions), new_state,
                          self.wake_at(), tuple(dict.fromkeys(self.problems)),
                          self.explanation(effective) if self.trace is not None else ())

    def rules_verdict(self, snapshot: conditions.Snapshot | None = None) -> Verdict:
        """The rules' verdict over a snapshot (the one before the policies by default), worked
        out once for each."""
        snapshot = snapshot or self.pre
        if self._rules is None or self._rules[0] is not snapshot:
            self._rules = snapshot, self.verdict(snapshot)
        return self._rules[1]

    def decide(self) -> Verdict:
        """The verdict the job is left with: a terminal one that holds; else Restarting while a
        restart of ours is under way; else the rules' over the pods we did not stop, which
        becomes final when it is terminal."""
        stopped = [p for p in self.pods if self.records[p.digest].ours]
        if len(stopped) != len(self.pods) - len(self.pre.pods) \
                or self.failed_tasks is not self.pre.failed_tasks:
            self.snapshot = self._snapshot(lambda p: not self.records[p.digest].ours)
        if not self._under_way(self.records.values(), self.delayed):
            self.restarting = None
        if self.final is not None:
            f = self.final
            return Verdict(f.phase, f.reason, f.message, f.rule, True)
        if self.restarting is not None:
            r = self.restarting
            return Verdict("Restarting", r.reason, r.message, r.rule)
        rules = self.rules_verdict(self.snapshot)
        if rules.phase in vocabulary.TERMINAL_PHASES and self.kind.sticky:
            self.final = state.Final(rules.phase, rules.reason, rules.message, rules.rule or "",
                                     "verdict", self.run)
            return replace(rules, final=True)
        return rules

    def _under_way(self, records: Iterable[state.PodRecord],
                   delayed: Iterable[state.Delayed]) -> bool:
        """Whether a restart of ours is under way: pods we stopped are still there, or a restart
        waits for its delay."""
        by_id = {p.id: p for p in self.kind.policies}
        return any(r.ours for r in records) or any(
            d.policy in by_id and by_id[d.policy].action.action in vocabulary.RESTARTS
            for d in delayed)

    def wake_at(self) -> datetime | None:
        """The earliest time at which time alone may change the answer."""
        times = [d.due for d in self.delayed]
        for policy in self.kind.policies:
            if policy.for_seconds is None:
                continue
            if policy.event == "podPending":
                times += [since + timedelta(seconds=policy.for_seconds) for p in self.snapshot.pods
                          if p.is_("pending") and (since := p.since("pending")) is not None]
            elif policy.event == "jobRunningLongerThan" and (start := self.snapshot.job_start()):
                times.append(start + timedelta(seconds=policy.for_seconds))
        if self.final is None:
            for rule in self.kind.verdicts:
                times += self.snapshot.times(rule.when)
        later = [t for t in times if t > self.now]
        return min(later) if later else None

    # -- explanation ---------------------------------------------------------------------------

    def explanation(self, decided: Verdict) -> tuple[Finding, ...]:
        out = []
        for rule in self.kind.verdicts:
            if rule.when is None:
                why = "otherwise" if str(rule.span) == decided.rule else \
                    "otherwise, but an earlier rule decided"
                out.append(Finding(str(rule.span), "verdict", rule.phase, True, why))
                continue
            ok, _ = self.snapshot.holds(rule.when)
            why = "holds" if ok else self.snapshot.why_not(rule.when)
            if ok and str(rule.span) != decided.rule:
                why = "holds, but an earlier rule decided"
            out.append(Finding(str(rule.span), "verdict", rule.phase, ok, why))
        for policy in self.kind.policies:
            notes = (self.trace or {}).get(policy.id, [])
            matched = any(n.endswith(": matched") for n in notes)
            if notes:
                why = "; ".join(notes)
            else:
                why = f"no {describe.event(policy.event)} event" + (
                    f" for task {policy.task}" if policy.task else "")
            out.append(Finding(str(policy.span), "policy", policy.id, matched,
                               f"{describe.policy(policy)}: {why}"))
        return tuple(out)


_FREE = state.PodRecord(None, "P")


def _announced(snapshot: conditions.Snapshot) -> dict[str, str]:
    """The tasks that are succeeded or failed: announced once each (taskCompleted, taskFailed)."""
    return {t: s for t, s in snapshot.task_states().items() if s in ("succeeded", "failed")}


def _budget_key(budget: plan.Budget, target: Target) -> str:
    """The budget's key; `per task` and `per pod` add the task or the pod (name, else uid)."""
    if budget.per == "task" and target.task:
        return f"{budget.key}[{target.task}]"
    if budget.per == "pod" and (target.pod or target.uid):
        return f"{budget.key}[{target.pod or target.uid}]"
    return budget.key


def _changes(old: state.PodRecord | None, new: state.PodRecord,
             p: pods.Pod) -> tuple[tuple[str, ...], bool]:
    """The events a pod's change amounts to, most specific first, and whether its failure is a
    disruption (the pod was evicted, or deleted by someone else, before it failed)."""
    if old is not None and old == new:
        return (), False
    handled = old is not None and (old.evicted or old.deleting)  # its end was already handled
    names: list[str] = []
    evicted = new.evicted and not (old is not None and old.evicted)
    deleted = new.deleting and not new.finished and not (old is not None and old.deleting)
    if evicted:
        names.append("podEvicted")
    if deleted:
        names += ["podDeleted"] if evicted else ["podDeleted", "podEvicted"]
    disrupted = False
    if old is None or old.phase != new.phase:
        if p.phase == "Failed" and (handled or new.evicted):
            names.append("podFailed")  # for `pod failed or evicted` policies only
            disrupted = True
        elif not (handled and new.finished):
            names.append(PHASE_EVENTS.get(p.phase, "podPending"))
    if new.restarts > (old.restarts if old is not None else 0):
        names.append("containerRestarted")
    return tuple(dict.fromkeys(names)), disrupted


def _healthy(p: pods.Pod) -> bool:
    """Running or succeeded, not on its way out, no counted container failing or waiting."""
    if p.phase not in ("Running", "Succeeded") or p.evicted or p.terminating:
        return False
    for c in p.counted:
        if c.state == "waiting" and c.reason not in (None, "ContainerCreating", "PodInitializing"):
            return False
        if c.state == "terminated" and c.exit_code not in (0, None):
            return False
    return True


def _label(occ: _Occurrence) -> str:
    if occ.pod is not None:
        return f"pod {occ.pod.name}"
    if occ.digest is not None:
        return f"pod {occ.digest} (gone)"
    if occ.task is not None:
        return f"task {occ.task}"
    return "job"


def _happened(name: str, target: Target) -> str:
    words = describe.event(name)
    if name.startswith("pod") and target.pod:
        return f"pod {target.pod} " + words.removeprefix("pod ")
    if name.startswith("container") and target.pod:
        return f"pod {target.pod}: {words}"
    if name.startswith("task") and target.task:
        return f"task {target.task} " + words.removeprefix("task ")
    return words


def _spent_reason(action: plan.Action, use: BudgetUse, event: str) -> str:
    verb = describe.action(action.action).split()[0]
    return f"{verb} budget {use.used}/{use.max} for {describe.event(event)} spent"



def to_json(e: Evaluation) -> dict[str, Any]:
    """The `rulec eval` output contract: phase, reason, message, events, actions, state, rule."""
    out: dict[str, Any] = {
        "phase": e.verdict.phase, "reason": e.verdict.reason, "message": e.verdict.message,
        "rule": e.verdict.rule, "final": e.verdict.final,
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
    return out

