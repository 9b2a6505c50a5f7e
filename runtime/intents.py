"""The intent journal: actions decided and committed but not yet done, kept on the job.

The controller commits the evaluator's new state, the verdict and the intents in one patch
guarded by the resourceVersion read, and only then acts (docs/controller.md, Actions). Each
intent remembers which step of its action's recipe comes next and how often the current one
failed; once every step is done it is cleared by another guarded patch. After a crash the journal
is replayed: each step is idempotent (uid preconditions, deterministic names, a check that the
effect has not happened), so a replay repeats no effect. Like the stored state, the annotation
is read strictly and never raises: a journal that cannot be read is reported and dropped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import orjson

from runtime import plan, shape, vocabulary
from runtime.resources import Resize

ANNOTATION = vocabulary.INTENTS_ANNOTATION
VERSION = 1


class IntentError(shape.ShapeError):
    """A journal that cannot be read."""


@dataclass(frozen=True, slots=True)
class Intent:
    """One action to carry out: what, on what, and how far it got."""

    id: str                         # deterministic: the same decision names the same intent
    action: str                     # failJob, restartPod, ...
    policy: str                     # the policy id (for messages and metrics)
    rule: str                       # the policy's path:line:col
    reason: str | None
    message: str | None
    task: str | None = None
    pod: str | None = None          # the pod's name and uid, for pod actions
    uid: str | None = None
    targets: tuple[tuple[str, str], ...] = ()   # (name, uid) of the pods a delete may touch
    step: int = 0                   # the next step of the recipe
    attempts: int = 0               # permanent failures of the current step so far
    since: str | None = None        # when the current step began (for `await ... within`)
    observed: Mapping[str, Any] = field(default_factory=dict)   # the job as it was at commit
    resize: tuple[Resize, ...] = ()   # a restart with more memory: the sizes to write
    recipe: int | None = None       # the kind's guarded recipe chosen at the decision (None: plain)

    def advanced(self, now: str) -> Intent:
        return replace(self, step=self.step + 1, attempts=0, since=now)


@dataclass(frozen=True, slots=True)
class Decoded:
    intents: tuple[Intent, ...]
    error: str | None


def status_digest(kind: plan.Kind, job: Mapping[str, Any]) -> str:
    """The job's status as others write it, observed when an action is decided (`observed.
    status`): an object its consumer deletes once it acted is made only while that is still so.
    What jobrules itself writes there (the kind's status fields, its condition) is left out: the
    verdict written between the decision and the step (a Volcano job's `status.state.*`) is no
    sign that the object did its work. The operator's own marks of it stay (Volcano moves
    `state.lastTransitionTime`, `version`, its conditions)."""
    status = job.get("status")
    if isinstance(status, dict):
        ours = [f.path[1:] for f in (kind.status.phase, kind.status.reason, kind.status.message)
                if f is not None and f.path[:1] == ("status",)]
        status = _without(status, ours)
        conditions = status.get("conditions")
        if kind.status.condition is not None and isinstance(conditions, list):
            others = [c for c in conditions if not (
                isinstance(c, dict) and c.get("type") == kind.status.condition)]
            status = {k: v for k, v in status.items() if k != "conditions"}
            if others:   # a list that held only ours reads as none, as before we wrote it
                status["conditions"] = others
    return hashlib.sha256(orjson.dumps(status, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _without(value: dict[str, Any], paths: list[tuple[str, ...]]) -> dict[str, Any]:
    """`value` less the fields at `paths` (copies only what it changes)."""
    out = dict(value)
    for path in paths:
        if not path:
            continue
        head, rest = path[0], path[1:]
        if head in out:
            if not rest:
                del out[head]
            elif isinstance(out[head], dict):
                out[head] = _without(out[head], [rest])
    return out


def intent_id(job_uid: str, stored: str | None, policy: str, target: str | None) -> str:
    """From the job, the state the decision was made from, the policy and its target: a replay
    of the same decision (after a crash before its commit) makes the same id, a later decision
    another one."""
    text = "\0".join((job_uid, stored or "", policy, target or ""))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def encode(intents: tuple[Intent, ...]) -> str | None:
    """Compact JSON for the annotation; None when there is nothing left (the key goes)."""
    if not intents:
        return None
    return json.dumps({"v": VERSION, "open": [_json(i) for i in intents]},
                      separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _json(i: Intent) -> dict[str, Any]:
    out: dict[str, Any] = {"id": i.id, "action": i.action, "policy": i.policy, "rule": i.rule}
    for key, value in (("reason", i.reason), ("message", i.message), ("task", i.task),
                       ("pod", i.pod), ("uid", i.uid), ("since", i.since)):
        if value is not None:
            out[key] = value
    if i.targets:
        out["targets"] = [list(t) for t in i.targets]
    if i.step:
        out["step"] = i.step
    if i.attempts:
        out["attempts"] = i.attempts
    if i.observed:
        out["observed"] = dict(i.observed)
    if i.resize:
        out["resize"] = [[r.container, r.before, r.after] for r in i.resize]
    if i.recipe is not None:
        out["recipe"] = i.recipe
    return out


def decode(text: str | None) -> Decoded:
    if text is None or not text.strip():
        return Decoded((), None)
    try:
        return Decoded(_from_json(shape.load(text)), None)
    except shape.NotJSON as err:
        return Decoded((), f"intents are {err}; dropped")
    except shape.ShapeError as err:
        return Decoded((), f"intents ignored: {err}")


def _from_json(data: Any) -> tuple[Intent, ...]:
    obj = shape.obj(data, "intents")
    if obj.get("v") != VERSION:
        raise IntentError(f"version {obj.get('v')!r} is not {VERSION}")
    out = []
    for item in shape.array(obj.get("open", []), "intents.open"):
        i = shape.obj(item, "intent")
        out.append(Intent(
            id=shape.string(i.get("id"), "intent.id"),
            action=shape.string(i.get("action"), "intent.action"),
            policy=shape.string(i.get("policy"), "intent.policy"),
            rule=shape.string(i.get("rule", ""), "intent.rule"),
            reason=shape.opt_string(i.get("reason"), "intent.reason"),
            message=shape.opt_string(i.get("message"), "intent.message"),
            task=shape.opt_string(i.get("task"), "intent.task"),
            pod=shape.opt_string(i.get("pod"), "intent.pod"),
            uid=shape.opt_string(i.get("uid"), "intent.uid"),
            targets=tuple(_target(t) for t in shape.array(i.get("targets", []), "intent.targets")),
            step=shape.count(i.get("step", 0), "intent.step"),
            attempts=shape.count(i.get("attempts", 0), "intent.attempts"),
            since=shape.opt_string(i.get("since"), "intent.since"),
            observed=dict(shape.obj(i.get("observed", {}), "intent.observed")),
            resize=tuple(_resize(r) for r in shape.array(i.get("resize", []), "intent.resize")),
            recipe=None if i.get("recipe") is None else shape.count(i["recipe"], "intent.recipe"),
        ))
    return tuple(out)


def _resize(value: Any) -> Resize:
    triple = shape.array(value, "intent.resize")
    if len(triple) != 3:
        raise IntentError(f"intent.resize: expected [container, before, after], got {triple!r}")
    return Resize(*(shape.string(v, "intent.resize") for v in triple))


def _target(value: Any) -> tuple[str, str]:
    pair = shape.array(value, "intent.targets")
    if len(pair) != 2:
        raise IntentError(f"intent.targets: expected [name, uid], got {pair!r}")
    return shape.string(pair[0], "intent.targets"), shape.string(pair[1], "intent.targets")
