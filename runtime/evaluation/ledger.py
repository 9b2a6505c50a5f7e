"""One evaluation's inputs, read once, and the ledger of what it has decided so far.

`runtime.evaluator` opens both and runs the topic modules over them as explicit steps
(occurrences, policies, decisions, verdicts). The inputs never change; the ledger is the one
place an evaluation writes to, so what each step leaves to the next is named here, and the new
state is read off it at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Collection, Mapping

from runtime import conditions, plan, state, templates
from runtime.evaluation.outcomes import Action, Event, Target, Verdict
from runtime.pods import Pod  # by name: the inputs' `pods` field would hide the module


@dataclass(frozen=True, slots=True)
class Inputs:
    """The job, its pod facts (by name, then uid) and what the evaluation reads them with."""

    kind: plan.Kind
    job: Mapping[str, Any]
    pods: tuple[Pod, ...]
    stored: state.State
    now: datetime
    search: templates.Search  # a failing expression reads as null and is noted in the ledger
    job_vars: dict[str, Any]  # job, namespace, kind: the placeholders every template has
    run: str | None  # the kind's `final until` value for this job, as compact JSON

    def snapshot(self, stopped: Collection[str],
                 failed_tasks: frozenset[str]) -> conditions.Snapshot:
        """The job without the pods we stopped (`stopped`: their digests), as the conditions
        see it."""
        return conditions.Snapshot(self.job, [p for p in self.pods if p.digest not in stopped],
                                   self.now, self.search, self.job_vars, failed_tasks)

    def variables(self, w: conditions.Witness, **extra: Any) -> dict[str, Any]:
        """A template's placeholders: the job's, the deciding pod's and container's, counts."""
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

    def text(self, template: plan.Template | None, variables: Mapping[str, Any]) -> str | None:
        return templates.render_text(template, self.job, variables, self.search)

    def target(self, occ_task: str | None, pod: Pod | None, digest: str | None,
               pod_name: str | None = None) -> Target:
        """What an action is aimed at: the job, and the occurrence's task and pod."""
        return Target(self.job_vars["job"] or "", self.job_vars["namespace"],
                      occ_task if occ_task is not None else (pod.task if pod else None),
                      pod.name if pod is not None else pod_name,
                      pod.uid if pod is not None else digest)


@dataclass(slots=True)
class Ledger:
    """What the evaluation has decided so far: the state being built for next time and the
    answer being accumulated."""

    problems: list[str]  # run-time expression errors, in the order met
    budgets: dict[str, int]
    final: state.Final | None  # the terminal verdict that holds
    restarting: state.Restarting | None  # the restart of ours under way
    failed_tasks: frozenset[str]
    snapshot: conditions.Snapshot  # the pods that count in a verdict: those we did not stop
    pre: conditions.Snapshot  # the snapshot before the policies, which their texts cite
    trace: dict[str, list[str]] | None  # per policy, why it did or did not match (--explain)
    records: dict[str, state.PodRecord] = field(default_factory=dict)  # by pod digest
    fired: set[str] = field(default_factory=set)
    delayed: list[state.Delayed] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    rules: tuple[conditions.Snapshot, Verdict] | None = None  # the last rules' verdict worked out
