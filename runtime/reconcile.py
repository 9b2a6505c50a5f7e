"""One reconcile of one job, as a pure function: what to write, given the job, the pods that
may be its own (the cache's candidates) and now.

The controller's shell applies the result and does nothing else: the patches (the commit of our
annotations, then the condition and status fields, each guarded by the resourceVersion it
holds; one write where one path takes both, `Writes.patches`), then the Events, then the intent journal (runtime.journal), then a requeue at
`requeue_at`. Everything it writes is decided here, from the objects alone (the stored state is
on the job), so the same inputs give the same writes and a replay after a crash repeats only
what did not happen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from runtime import (actions, evaluator, functions, intents, objects, plan, state, templates,
                     vocabulary)
from runtime import pods as pods_lib
from runtime import shadow, writeback


@dataclass(frozen=True, slots=True)
class Writes:
    """What one reconcile writes. Each part is None (or empty) when there is nothing to do."""

    commit: dict[str, Any] | None          # merge patch of the job: our annotations, RV-guarded
    status: dict[str, Any] | None          # merge patch of the condition and status fields
    events: tuple[writeback.EventSpec, ...]
    requeue_at: datetime | None            # when time alone may change the answer
    evaluation: evaluator.Evaluation
    previous_phase: str | None             # the verdict before this reconcile (None: first)
    journal: tuple[intents.Intent, ...] = ()   # the intents open once the commit is written
    new: tuple[intents.Intent, ...] = ()       # those this reconcile decided
    pods: tuple[Mapping[str, Any], ...] = ()   # the job's pods, as the evaluation saw them
    state_error: str | None = None         # why the stored state was not read (then: empty)
    journal_error: str | None = None       # why the journal was not read (then: let go of)

    @property
    def verdict_changed(self) -> bool:
        return self.evaluation.verdict.phase != self.previous_phase

    @property
    def needs_live_pods(self) -> bool:
        """An action was decided about a pod the cache does not have: a pod relabelled out of
        the pod watch looks deleted there. Decide again on a live list (`live=True`), where a
        pod that still exists is not gone."""
        return any(i.pod is None and i.uid is not None for i in self.new)

    def patches(self, job_path: str, status_path: str, together: bool,
                ) -> tuple[tuple[str, dict[str, Any]], ...]:
        """(path, merge patch) to send in order, each guarded by the resourceVersion the job
        has when it is sent. One write where one path takes both: the job's own when the kind
        has no /status subresource, its /status when that writes metadata too
        (`together`: see `status_keeps_metadata`); else the commit, then the status patch."""
        if status_path == job_path or together:
            if self.commit is None and self.status is None:
                return ()
            return ((status_path, objects.merged(self.commit or {}, self.status)),)
        out = [(job_path, self.commit)] if self.commit is not None else []
        if self.status is not None:
            out.append((status_path, self.status))
        return tuple(out)


def status_keeps_metadata(group: str) -> bool:
    """Whether a merge patch of the kind's /status writes our annotations and label too, so
    that the commit and the condition are one write: kube-apiserver's batch Job resets only
    `spec` there, where a custom resource's /status keeps nothing but `status` (and a custom
    resource's group always has a dot)."""
    return group == "batch"


def left_alone(kind: plan.Kind, job: Mapping[str, Any], now: datetime | None = None,
               ) -> str | None:
    """Why the controller does not reconcile a job it has (None: it does): a job going away,
    or outside its kind's scope, has no rules; another controller's job (`foreign when`,
    without `write verdicts`) gets no writes from us."""
    if objects.deleting(job):
        return "it is being deleted"
    if not kind.covers(job):
        return f"it is outside the scope of kind {kind.name}"
    if (kind.foreign is not None and not kind.foreign.verdicts
            and evaluator.foreign(kind, job, now or datetime.now(timezone.utc))):
        return (f"it is another controller's (kind {kind.name}: foreign when "
                f"<<{kind.foreign.when.source}>>)")
    return None


def sync(kind: plan.Kind, job: Mapping[str, Any], candidates: Iterable[Mapping[str, Any]],
         now: datetime, live_pods: Callable[[], Iterable[Mapping[str, Any]]], *,
         explain: bool = False) -> Writes:
    """The reconcile the controller acts on: over the cache's candidates, and again over
    `live_pods()` (a live list of the job's namespace) when it decided an action about a pod
    the cache does not have (`Writes.needs_live_pods`)."""
    writes = reconcile(kind, job, candidates, now, explain=explain)
    if writes.needs_live_pods:
        writes = reconcile(kind, job, live_pods(), now, live=True, explain=explain)
    return writes


def reconcile(kind: plan.Kind, job: Mapping[str, Any], candidates: Iterable[Mapping[str, Any]],
              now: datetime, *, live: bool = False, explain: bool = False) -> Writes:
    """Evaluate the job with the state stored on it and say what to write back.

    `candidates` are the pods that may be the job's (runtime.pods.pods_of decides). With
    `live`, they are a live list of the job's namespace, and the pods the stored state knows
    that no longer belong to the job (relabelled) are kept too: not deleted, so not an event.
    `explain` asks the evaluation why each rule and policy did or did not match
    (`rulec why`); it changes nothing else."""
    stored_text = objects.annotation(job, state.ANNOTATION)
    decoded = state.decode(stored_text)
    journal_read = intents.decode(objects.annotation(job, intents.ANNOTATION))
    stored = decoded.state
    if journal_read.error is not None:   # its actions are lost: let go of all they held
        stored = replace(stored, released=(*stored.released,
                                           state.Released(None, why=journal_read.error)))
    listed = list(candidates)
    pods = evaluator.pods_of(kind, job, listed, now)
    if live:
        members = {id(p) for p in pods}
        pods = [*pods, *(p for p in listed if id(p) not in members
                         and pods_lib.digest(objects.uid(p) or "") in decoded.state.pods)]
    evaluation = evaluator.evaluate(kind, job, pods, stored, now, explain=explain)
    verdict = evaluation.verdict
    annotation = (writeback.verdict_annotation(verdict, job, now)
                  if kind.status.annotations else None)
    open_ = journal_read.intents
    known = {i.id for i in open_}
    new = tuple(i for i in decide(kind, job, list(pods), stored_text, evaluation, now)
                if i.id not in known)
    journal = open_ + new
    return Writes(
        commit=writeback.commit(job, evaluation.state, annotation, intents.encode(journal),
                                verdict.phase if kind.status.annotations else None),
        status=writeback.status_patch(kind, job, verdict, now),
        events=tuple(writeback.events(kind, job, stored_text, evaluation, decoded.state.verdict,
                                      decoded.error, journal_read.error)),
        requeue_at=evaluation.wake_at,
        evaluation=evaluation,
        previous_phase=decoded.state.verdict,
        journal=journal,
        new=new,
        pods=tuple(pods),
        state_error=decoded.error,
        journal_error=journal_read.error,
    )


def decide(kind: plan.Kind, job: Mapping[str, Any], pods: list[Mapping[str, Any]],
           stored: str | None, evaluation: evaluator.Evaluation,
           now: datetime) -> list[intents.Intent]:
    """An intent for each action to run now whose recipe does something (a `record` recipe has
    nothing to carry out: the verdict written says it), recording the pods a delete may touch
    and the job's status as the decision saw them."""
    out = []
    theirs = shadow.owned(kind, job)   # the Job controller carries these out itself
    for a in evaluation.actions:
        if a.status != "run" or a.action not in vocabulary.EFFECTS or a.policy in theirs:
            continue
        variant = actions.variant(kind, a.action, job, now)
        recipe = kind.recipe(a.action, variant)
        if isinstance(recipe, str):
            continue
        scopes = {s.scope for s in recipe if isinstance(s, plan.DeletePods)}
        targets = [(str(objects.name(p)), str(objects.uid(p))) for p in pods
                   if not objects.deleting(p) and (
                       "job" in scopes
                       or ("pod" in scopes and objects.uid(p) == a.target.uid)
                       or ("task" in scopes and _task(kind, p, now) == a.target.task))]
        out.append(intents.Intent(
            id=intents.intent_id(objects.uid(job) or "", stored, a.policy,
                                 a.target.uid or a.target.task),
            action=a.action, policy=a.policy, rule=a.rule, reason=a.reason, message=a.message,
            task=a.target.task, pod=a.target.pod, uid=a.target.uid,
            targets=tuple(sorted(targets)), since=functions.rfc3339(now),
            observed={"status": intents.status_digest(kind, job)}, resize=a.resize,
            recipe=variant))
    return out


def _task(kind: plan.Kind, pod: Mapping[str, Any], now: datetime) -> str | None:
    return pods_lib.task_of(kind, pod, templates.searcher(functions.options(now)))
