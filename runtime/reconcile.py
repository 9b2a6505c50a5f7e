"""One reconcile of one job, as a pure function: what to write, given the job, its pods and now.

The controller's shell applies the result and does nothing else: the commit (our annotations,
guarded by the resourceVersion read), then the status patch (condition and status fields), then
the Events, then a requeue at `requeue_at`. Everything it writes is decided here, from the
objects alone (the stored state is on the job), so the same inputs give the same writes and a
replay after a crash repeats only what did not happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from runtime import actions, evaluator, functions, intents, plan, state, templates, vocabulary
from runtime import pods as pods_lib
from runtime import writeback


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

    @property
    def verdict_changed(self) -> bool:
        return self.evaluation.verdict.phase != self.previous_phase


def reconcile(kind: plan.Kind, job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
              now: datetime) -> Writes:
    """Evaluate the job with the state stored on it and say what to write back."""
    stored_text = _annotations(job).get(state.ANNOTATION)
    stored_text = stored_text if isinstance(stored_text, str) else None
    decoded = state.decode(stored_text)
    evaluation = evaluator.evaluate(kind, job, pods, decoded.state, now)
    verdict = evaluation.verdict
    annotation = (writeback.verdict_annotation(verdict, job, now)
                  if kind.status.annotations else None)
    open_ = intents.decode(_annotations(job).get(intents.ANNOTATION)).intents
    known = {i.id for i in open_}
    new = tuple(i for i in decide(kind, job, list(pods), stored_text, evaluation, now)
                if i.id not in known)
    journal = open_ + new
    return Writes(
        commit=writeback.commit(job, evaluation.state, annotation, intents.encode(journal)),
        status=writeback.status_patch(kind, job, verdict, now),
        events=tuple(writeback.events(kind, job, stored_text, evaluation, decoded.state.verdict,
                                      decoded.error)),
        requeue_at=evaluation.wake_at,
        evaluation=evaluation,
        previous_phase=decoded.state.verdict,
        journal=journal,
        new=new,
    )


def decide(kind: plan.Kind, job: Mapping[str, Any], pods: list[Mapping[str, Any]],
           stored: str | None, evaluation: evaluator.Evaluation,
           now: datetime) -> list[intents.Intent]:
    """An intent for each action to run now whose recipe does something (a `record` recipe has
    nothing to carry out: the verdict written says it), recording the pods a delete may touch
    and the job's status as the decision saw them."""
    meta = job.get("metadata") or {}
    out = []
    for a in evaluation.actions:
        if a.status != "run" or a.action not in vocabulary.EFFECTS:
            continue
        recipe = kind.recipe(a.action)
        if isinstance(recipe, str):
            continue
        scopes = {s.scope for s in recipe if isinstance(s, plan.DeletePods)}
        targets = [(str(_meta(p).get("name")), str(_meta(p).get("uid"))) for p in pods
                   if not _meta(p).get("deletionTimestamp") and (
                       "job" in scopes
                       or ("pod" in scopes and _meta(p).get("uid") == a.target.uid)
                       or ("task" in scopes and _task(kind, p, now) == a.target.task))]
        out.append(intents.Intent(
            id=intents.intent_id(str(meta.get("uid") or ""), stored, a.policy,
                                 a.target.uid or a.target.task),
            action=a.action, policy=a.policy, rule=a.rule, reason=a.reason, message=a.message,
            task=a.target.task, pod=a.target.pod, uid=a.target.uid,
            targets=tuple(sorted(targets)), since=functions.rfc3339(now),
            observed={"status": actions.status_digest(job)}))
    return out


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _task(kind: plan.Kind, pod: Mapping[str, Any], now: datetime) -> str | None:
    return pods_lib.task_of(kind, pod, templates.searcher(functions.options(now)))


def _annotations(job: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = job.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}
