"""Verdict conditions over one snapshot of a job and its pods: whether they hold, what decided
them (the witness), why not, and when time alone may change them.

Pure, as the evaluator is: the snapshot holds the job, its pod facts, the evaluation time and the
evaluator's `Search`. The evaluator asks it about verdict rules, policy candidates and task
states; `rulec eval --explain` asks it why a rule did not hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from runtime import describe, functions, plan, pods, templates, vocabulary

Hit = tuple[pods.Pod, pods.Container | None]   # a pod that matched, and the container that did


@dataclass(frozen=True, slots=True)
class Witness:
    """What decided a condition: the pods that matched (each with the container that made it
    match, if a filter chose one) and the counts. Which pod decides is worked out only when a
    template asks (most conditions of a big job are never rendered)."""

    hits: tuple[Hit, ...] = ()
    latest: bool = False  # `all pods ...`: the last to finish decides; otherwise the first
    count: int | None = None
    total: int | None = None

    def decide(self) -> tuple[pods.Pod | None, pods.Container | None]:
        if not self.hits:
            return None, None
        resolved = [(p, c if c is not None else (p.counted[0] if p.counted else None))
                    for p, c in self.hits]
        if len(resolved) == 1:
            return resolved[0]
        return (max if self.latest else min)(resolved, key=lambda pc: pods.sort_key(*pc))


class Snapshot:
    """A job and its pods at one moment, asked about conditions."""

    def __init__(self, job: Mapping[str, Any], pod_facts: list[pods.Pod], now: datetime,
                 search: templates.Search, job_vars: Mapping[str, Any],
                 failed_tasks: frozenset[str] = frozenset()) -> None:
        self.job = job
        self.pods = pod_facts
        self.now = now
        self.search = search
        self.job_vars = job_vars
        self.failed_tasks = failed_tasks  # failed by `fail task`, whatever their pods do
        self._tasks: dict[str, str] | None = None

    def scope(self, task: str | None) -> list[pods.Pod]:
        """The job's pods, or those of one task."""
        return self.pods if task is None else [p for p in self.pods if p.task == task]

    def witness(self, f: plan.PodFilter | None, pod: pods.Pod,
                failure: bool = False) -> tuple[bool, pods.Container | None]:
        return pods.witness(f, pod, self.search, failure)

    def matching(self, task: str | None, state: str | None, f: plan.PodFilter | None,
                 for_seconds: int | None) -> tuple[list[Hit], int]:
        """The pods in scope in `state` (for at least `for_seconds`) that pass `f`, and the
        number in scope."""
        scope = self.scope(task)
        failure = state in vocabulary.FAILURE_STATES
        out: list[Hit] = []
        for p in scope if state is None else pods.in_state(scope, state):
            if for_seconds is not None:
                since = p.since(state or "pending")
                if since is None or (self.now - since).total_seconds() < for_seconds:
                    continue
            if f is None:
                out.append((p, p.deciding(True) if failure else None))
                continue
            ok, container = self.witness(f, p, failure)
            if ok:
                out.append((p, container))
        return out, len(scope)

    def holds(self, c: plan.Condition) -> tuple[bool, Witness | None]:
        """Whether `c` holds, and what decided it: in `a and b` the first part that has pods,
        in `a or b` the part that held."""
        if isinstance(c, plan.And):
            witness = None
            for arg in c.args:
                ok, w = self.holds(arg)
                if not ok:
                    return False, None
                if witness is None or (not witness.hits and w is not None and w.hits):
                    witness = w
            return True, witness
        if isinstance(c, plan.Or):
            for arg in c.args:
                ok, w = self.holds(arg)
                if ok:
                    return True, w
            return False, None
        if isinstance(c, plan.Not):
            return not self.holds(c.arg)[0], None
        if isinstance(c, plan.JmesPath):
            return pods.truthy(self.search(c.expr, self.job)), None
        if isinstance(c, plan.Pods):
            matching, total = self.matching(c.task, c.state, c.filter, c.for_seconds)
            count = len(matching)
            if c.quant == "any":
                ok = count > 0
            elif c.quant == "all":
                ok = total > 0 and count == total
            else:
                ok = count == 0
            return ok, Witness(tuple(matching), c.quant == "all", count, total)
        if isinstance(c, plan.Count):
            matching, total = self.matching(c.task, c.state, c.filter, None)
            value = number(templates.render(c.value, self.job, self.job_vars, self.search))
            ok = value is not None and pods.COMPARE[c.cmp](len(matching), value)
            return ok, Witness(tuple(matching), False, len(matching), total)
        if isinstance(c, plan.TaskCount):
            states = self.task_states()
            hits = [t for t, s in sorted(states.items()) if c.state is None or s == c.state]
            value = number(templates.render(c.value, self.job, self.job_vars, self.search))
            ok = value is not None and pods.COMPARE[c.cmp](len(hits), value)
            w = self.task_witness(hits[0], c.state) if hits and c.state else Witness()
            return ok, Witness(w.hits, w.latest, len(hits), len(states))
        if isinstance(c, plan.TaskState):
            states = self.task_states()
            names = [c.task] if c.task else sorted(states)
            hits = [t for t in names if states.get(t) == c.state]
            ok = bool(hits) if c.quant == "any" or c.task else (bool(names) and len(hits) == len(names))
            if not hits:
                return ok, None
            return ok, self.task_witness(hits[0], c.state)
        if isinstance(c, plan.JobAge):
            age = self.job_age()
            return age is not None and age >= c.longer_than, None
        raise TypeError(f"not a condition: {c!r}")

    def job_start(self) -> datetime | None:
        """`status.startTime`, else the creation time."""
        meta, status = self.job.get("metadata"), self.job.get("status")
        return (functions.timestamp(status.get("startTime") if isinstance(status, dict) else None)
                or functions.timestamp(meta.get("creationTimestamp") if isinstance(meta, dict) else None))

    def job_age(self) -> float | None:
        start = self.job_start()
        return None if start is None else (self.now - start).total_seconds()

    def task_states(self) -> dict[str, str]:
        """docs/plan.md: failed = failed by `fail task`, or one pod failed (evicted pods do not
        count); succeeded = has pods, all succeeded; running = one running; else pending."""
        if self._tasks is None:
            groups: dict[str, list[pods.Pod]] = {t: [] for t in self.failed_tasks}
            # Pods alike in phase and eviction answer alike: one of each kind stands for the
            # rest (a big task's hundreds of pods are a few kinds).
            kinds = {(p.task, p.phase, p.evicted): p for p in self.pods if p.task is not None}
            for (task, _, _), p in kinds.items():
                groups.setdefault(task, []).append(p)
            out = {}
            for task, members in groups.items():
                if task in self.failed_tasks or any(p.is_("failed") for p in members):
                    out[task] = "failed"
                elif all(p.is_("succeeded") for p in members):
                    out[task] = "succeeded"
                elif any(p.is_("running") for p in members):
                    out[task] = "running"
                else:
                    out[task] = "pending"
            self._tasks = out
        return self._tasks

    def task_witness(self, task: str, task_state: str) -> Witness:
        """The pods of a task in that state: the first decides (succeeded: the last)."""
        pod_state = task_state if task_state != "pending" else None
        members = [p for p in self.scope(task) if pod_state is None or p.is_(pod_state)]
        failure = task_state == "failed"
        return Witness(tuple((p, p.deciding(True) if failure else None) for p in members),
                       task_state == "succeeded", len(members), len(self.scope(task)))

    def times(self, c: plan.Condition | None) -> list[datetime]:
        """When time alone may change `c`: pods reaching a `for D`, the job reaching an age."""
        if isinstance(c, (plan.And, plan.Or)):
            return [t for a in c.args for t in self.times(a)]
        if isinstance(c, plan.Not):
            return self.times(c.arg)
        if isinstance(c, plan.Pods) and c.for_seconds is not None:
            state = c.state or "pending"
            return [since + timedelta(seconds=c.for_seconds)
                    for p in pods.in_state(self.scope(c.task), state)
                    if (since := p.since(state)) is not None]
        if isinstance(c, plan.JobAge) and (start := self.job_start()) is not None:
            return [start + timedelta(seconds=c.longer_than)]
        return []

    def why_not(self, c: plan.Condition) -> str:
        """The first false part of a condition, with what was seen."""
        if isinstance(c, plan.And):
            for arg in c.args:
                if not self.holds(arg)[0]:
                    return self.why_not(arg)
        if isinstance(c, plan.Or):
            return "; ".join(self.why_not(a) for a in c.args)
        if isinstance(c, plan.Not):
            return f"{describe.condition(c)}: {describe.condition(c.arg)} holds"
        text = describe.condition(c)
        if isinstance(c, plan.JmesPath):
            return f"{text} is {templates.text(self.search(c.expr, self.job)) or 'null'}"
        if isinstance(c, (plan.Pods, plan.Count)):
            _, w = self.holds(c)
            seen = f"{w.count} of {w.total} pods match" if w is not None else ""
            return f"{text}: {seen}"
        if isinstance(c, plan.TaskCount):
            _, w = self.holds(c)
            return f"{text}: {w.count if w else 0} of {w.total if w else 0} tasks match"
        if isinstance(c, plan.TaskState):
            states = self.task_states()
            return f"{text}: tasks " + (", ".join(f"{t} {s}" for t, s in sorted(states.items())) or "none")
        if isinstance(c, plan.JobAge):
            age = self.job_age()
            return f"{text}: age {'unknown' if age is None else f'{int(age)}s'}"
        return text


def number(value: Any) -> float | None:
    """A count's value as a number: numbers and numeric strings; anything else is none."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return float(str(value).strip())
    except ValueError:
        return None
