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

from runtime import evaluator, plan, state, writeback


@dataclass(frozen=True, slots=True)
class Writes:
    """What one reconcile writes. Each part is None (or empty) when there is nothing to do."""

    commit: dict[str, Any] | None          # merge patch of the job: our annotations, RV-guarded
    status: dict[str, Any] | None          # merge patch of the condition and status fields
    events: tuple[writeback.EventSpec, ...]
    requeue_at: datetime | None            # when time alone may change the answer
    evaluation: evaluator.Evaluation
    previous_phase: str | None             # the verdict before this reconcile (None: first)

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
    return Writes(
        commit=writeback.commit(job, evaluation.state, annotation),
        status=writeback.status_patch(kind, job, verdict, now),
        events=tuple(writeback.events(kind, job, stored_text, evaluation, decoded.state.verdict,
                                      decoded.error)),
        requeue_at=evaluation.wake_at,
        evaluation=evaluation,
        previous_phase=decoded.state.verdict,
    )


def _annotations(job: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = job.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}
