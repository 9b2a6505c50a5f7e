"""Where a verdict is written on a job, as patches and Events: pure, from one evaluation.

Level-based: each function compares what should be there with what is, and says nothing when
they agree, so a reconcile of an unchanged job writes nothing and our own writes do not call for
another pass. The conventions (docs/controller.md):

- annotations `jobrules.dev/state` (the evaluator's memory) and `jobrules.dev/verdict` (phase,
  reason, message, rule, final, cause, hint, since, observedGeneration: what `kubectl get -o
  custom-columns` can show for any kind);
- a condition of the kind's type (`JobRulesVerdict` by default): status "True" once the verdict
  is Succeeded or Failed, else "Unknown"; a reason that fits the Kubernetes condition schema
  (else the phase); `lastTransitionTime` kept unless the status flips; `observedGeneration`
  where the kind's schema keeps it;
- the kind's `status { ... }` fields;
- Events for verdict changes and problems, named from the transition so a replay makes the
  same Event again (which the API server refuses as existing).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from runtime import evaluator, functions, intents, objects, plan, state, vocabulary

VERDICT_ANNOTATION = vocabulary.VERDICT_ANNOTATION
PHASE_LABEL = vocabulary.PHASE_LABEL
EVENT_REASON_MAX = 128
EVENT_NOTE_MAX = 1024
TERMINAL = vocabulary.TERMINAL_PHASES


@dataclass(frozen=True, slots=True)
class EventSpec:
    """An Event to create (events.k8s.io/v1), regarding the job."""

    name: str           # deterministic: the same transition names the same Event
    type: str           # Normal | Warning
    reason: str
    action: str         # Verdict | Problem | ...
    note: str
    related_pod: str | None = None


def verdict_annotation(verdict: evaluator.Verdict, job: Mapping[str, Any], now: datetime) -> str:
    """The verdict as JSON for `jobrules.dev/verdict`; `since` is kept while the phase stays."""
    previous = _json(objects.annotations(job).get(VERDICT_ANNOTATION))
    since = previous.get("since") if previous.get("phase") == verdict.phase else None
    body = {"phase": verdict.phase, "reason": verdict.reason, "message": verdict.message,
            "rule": verdict.rule, "final": verdict.final, "cause": verdict.cause,
            "hint": verdict.hint,
            "since": since if isinstance(since, str) else functions.rfc3339(now),
            "observedGeneration": objects.generation(job)}
    return json.dumps({k: v for k, v in body.items() if v is not None}, separators=(",", ":"),
                      sort_keys=True, ensure_ascii=False)


def commit(job: Mapping[str, Any], new_state: state.State, verdict: str | None,
           journal: str | None = None, phase: str | None = None) -> dict | None:
    """The merge patch of our annotations, guarded by the resourceVersion read (a precondition:
    the API server answers 409 if the job changed since); None when they are already so.
    `verdict` None leaves the verdict annotation out (`status { no annotations }`); `journal`
    is the intents annotation (runtime.intents), None when no intent is open; `phase` the
    verdict's phase for the `jobrules.dev/phase` label (so `kubectl get -L` and `-l` read it on
    any kind), written when it differs: when the verdict changes."""
    labels = objects.labels(job)
    label = {PHASE_LABEL: phase} if phase is not None and labels.get(PHASE_LABEL) != phase else {}
    current = objects.annotations(job)
    wanted: dict[str, str | None] = {state.ANNOTATION: state.encode(new_state)}
    if journal is not None or intents.ANNOTATION in current:
        wanted[intents.ANNOTATION] = journal
    if verdict is not None and _same_verdict(current.get(VERDICT_ANNOTATION), verdict):
        verdict = current[VERDICT_ANNOTATION]
    if verdict is not None:
        wanted[VERDICT_ANNOTATION] = verdict
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    if not changed and not label:
        return None
    meta: dict[str, Any] = {"resourceVersion": objects.meta(job).get("resourceVersion")}
    if changed:
        meta["annotations"] = changed
    if label:
        meta["labels"] = label
    return {"metadata": meta}


def landed(commit: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """Whether the job as written holds the commit's annotations and labels (None: removed)."""
    meta = commit.get("metadata") or {}
    for field, held in (("annotations", objects.annotations(job)), ("labels", objects.labels(job))):
        if any(held.get(k) != v for k, v in (meta.get(field) or {}).items()):
            return False
    return True


def _same_verdict(current: Any, wanted: str) -> bool:
    """Equal but for `since` formatting noise: compare the decoded values."""
    return _json(current) == _json(wanted)


def condition(kind: plan.Kind, job: Mapping[str, Any], verdict: evaluator.Verdict,
              now: datetime) -> list[dict[str, Any]] | None:
    """The job's whole conditions list with ours set, or None when ours is already so (or
    the kind writes none). The list is sent whole: most kinds' lists are atomic (docs)."""
    ctype = kind.status.condition
    if ctype is None:
        return None
    conditions = objects.conditions(job)
    existing = next((c for c in conditions if c.get("type") == ctype), None)
    status = "True" if verdict.phase in TERMINAL else "Unknown"
    wanted: dict[str, Any] = {
        "type": ctype, "status": status, "reason": reason(verdict),
        "message": objects.bounded(_message(verdict), objects.CONDITION_MESSAGE_MAX),
        "lastTransitionTime": functions.rfc3339(now),
        "observedGeneration": objects.generation(job),
    }
    if wanted["observedGeneration"] is None:
        del wanted["observedGeneration"]
    if existing is not None:
        if existing.get("status") == status and existing.get("lastTransitionTime"):
            wanted["lastTransitionTime"] = existing["lastTransitionTime"]
        compared: tuple[str, ...] = ("type", "status", "reason", "message", "lastTransitionTime")
        # observedGeneration only where the schema keeps it (metav1.Condition does; batch/v1
        # and Kubeflow conditions do not, and prune it): else it would never compare equal.
        if "observedGeneration" in existing:
            compared += ("observedGeneration",)
        if all(existing.get(k) == wanted.get(k) for k in compared):
            return None
    return [wanted if c is existing else c for c in conditions] + ([] if existing else [wanted])


def fields(kind: plan.Kind, job: Mapping[str, Any], verdict: evaluator.Verdict) -> dict | None:
    """The kind's `status { phase/reason/message at PATH }` writes that differ from the job,
    as one nested merge patch; None when there are none.

    With a phase field, reason and message are written with the phase, and only when the phase
    is: for a phase listed in `only` (all without it), over a current value listed in `over`
    (any without it) or already ours."""
    status = kind.status
    out: dict[str, Any] = {}
    writes = [(status.reason, verdict.reason), (status.message, verdict.message)]
    phase = status.phase
    if phase is not None:
        value, current = phase.map.get(verdict.phase, verdict.phase), objects.at(job, phase.path)
        if phase.only is not None and verdict.phase not in phase.only:
            return None
        if phase.over is not None and current not in phase.over and current != value:
            return None
        writes.append((phase, value))
    for field, wanted in writes:
        if field is not None and wanted != objects.at(job, field.path):
            objects.put(out, field.path, wanted)
    return out or None


def status_patch(kind: plan.Kind, job: Mapping[str, Any], verdict: evaluator.Verdict,
                 now: datetime) -> dict | None:
    """The merge patch of the condition and status fields (the shell sends it to /status where
    the kind has that subresource, with the resourceVersion it holds as a precondition).
    None under `mode audit annotation only`: the verdict is then our annotation alone."""
    if kind.audit is not None and kind.audit.annotation_only:
        return None
    patch = fields(kind, job, verdict) or {}
    conditions = condition(kind, job, verdict, now)
    if conditions is not None:
        patch.setdefault("status", {})["conditions"] = conditions
    return patch or None


def events(kind: plan.Kind, job: Mapping[str, Any], stored: str | None,
           evaluation: evaluator.Evaluation, previous_phase: str | None,
           decode_error: str | None, journal_error: str | None = None) -> list[EventSpec]:
    """Events for this evaluation: a verdict change, problems with expressions or the stored
    state. Named from the job, the state read and what happened: a replay of the same
    evaluation (after a crash before its commit) names the same Events."""
    if not kind.status.events:
        return []
    meta = objects.meta(job)
    seed = f"{meta.get('uid')}\0{stored or ''}"
    out = []
    verdict = evaluation.verdict
    # A job's first verdict is news only when it is already an outcome (a controller started
    # on a busy cluster would otherwise report every running job).
    if verdict.phase != previous_phase and (previous_phase is not None
                                            or verdict.phase in TERMINAL):
        out.append(EventSpec(
            _event_name(meta, seed, "verdict", verdict.phase),
            "Warning" if verdict.phase == "Failed" else "Normal",
            objects.bounded(reason(verdict), EVENT_REASON_MAX), "Verdict",
            objects.bounded(_message(verdict), EVENT_NOTE_MAX)))
    for a in evaluation.actions:
        if a.status == "audited":
            out.append(audit_event(job, seed, a))
    for problem in evaluation.problems[:5]:
        out.append(EventSpec(_event_name(meta, seed, "problem", problem), "Warning",
                             "RuleError", "Evaluate", objects.bounded(problem, EVENT_NOTE_MAX)))
    if decode_error is not None:
        out.append(EventSpec(_event_name(meta, seed, "state", decode_error), "Warning",
                             "StateIgnored", "Evaluate", objects.bounded(decode_error, EVENT_NOTE_MAX)))
    if journal_error is not None:
        note = f"{journal_error}: what its actions held is let go of"
        out.append(EventSpec(_event_name(meta, seed, "journal", journal_error), "Warning",
                             "JournalIgnored", "Act", objects.bounded(note, EVENT_NOTE_MAX)))
    return out


def action_event(job: Mapping[str, Any], intent: intents.Intent) -> EventSpec:
    """An action carried out: named from the intent, so a replay makes the same Event."""
    word = _action_word(intent)
    return EventSpec(_event_name(objects.meta(job), intent.id, "action", "done"), "Normal",
                     objects.bounded(condition_reason(intent.reason, word), EVENT_REASON_MAX), word,
                     objects.bounded(f"{vocabulary.ACTIONS[intent.action]}"
                              + (f" {intent.pod}" if intent.pod else "")
                              + (f": {intent.message}" if intent.message else "")
                              + f" ({intent.rule})", EVENT_NOTE_MAX), intent.pod)


def audit_event(job: Mapping[str, Any], seed: str, action: evaluator.Action) -> EventSpec:
    """An action a policy in audit would have taken: said, not done. Named from the state read
    and the decision, so a replay says it once."""
    what = vocabulary.ACTIONS.get(action.action, action.action)
    target = action.target.pod or action.target.task
    note = (f"would {what}" + (f" {target}" if target and action.action.endswith(("Pod", "Task"))
                               else "")
            + (f": {action.message}" if action.message else "")
            + (f" (budget {action.budget.used}/{action.budget.max})" if action.budget else "")
            + f" ({action.rule}; audit: not done)")
    return EventSpec(
        _event_name(objects.meta(job), seed, "audit",
                    f"{action.policy}\0{action.action}\0{action.target.uid or target or ''}"),
        "Normal", "Audit", "".join(w.capitalize() for w in what.split()),
        objects.bounded(note, EVENT_NOTE_MAX), action.target.pod)


def action_failed_event(job: Mapping[str, Any], intent: intents.Intent, why: str) -> EventSpec:
    return EventSpec(_event_name(objects.meta(job), intent.id, "action", "failed"), "Warning",
                     "ActionFailed", _action_word(intent),
                     objects.bounded(f"{vocabulary.ACTIONS[intent.action]} ({intent.rule}) given up: "
                              f"{why}", EVENT_NOTE_MAX), intent.pod)


def _action_word(intent: intents.Intent) -> str:
    return "".join(w.capitalize() for w in vocabulary.ACTIONS[intent.action].split())


def reason(verdict: evaluator.Verdict) -> str:
    """The verdict's reason if it fits the condition schema, else its phase."""
    return condition_reason(verdict.reason, verdict.phase)


condition_reason = objects.condition_reason


def _message(verdict: evaluator.Verdict) -> str:
    """The verdict's message (with its reason first when that did not fit the condition's
    reason), then its cause and hint, citing the rule that decided: `OOMKilled ... (cause oom:
    raise the memory limit) (rules/vcjob.rules:20:5)`."""
    parts = [p for p in (verdict.reason if reason(verdict) != verdict.reason else None,
                         verdict.message) if p]
    text = ": ".join(parts) if parts else f"verdict {verdict.phase}"
    if verdict.cause is not None:
        text += f" (cause {verdict.cause}" + (f": {verdict.hint})" if verdict.hint else ")")
    return f"{text} ({verdict.rule})" if verdict.rule else text


def _event_name(meta: Mapping[str, Any], seed: str, what: str, detail: str) -> str:
    digest = hashlib.sha256(f"{seed}\0{what}\0{detail}".encode()).hexdigest()[:16]
    return f"{str(meta.get('name') or 'job')[:200]}.{digest}"


def _json(text: Any) -> dict[str, Any]:
    if not isinstance(text, str):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def event_name(meta: Mapping[str, Any], seed: str, what: str, detail: str) -> str:
    """An Event's name: the job's, bounded, then a digest of what it says (deterministic)."""
    return _event_name(meta, seed, what, detail)
