"""The state the evaluator keeps between evaluations, and its JSON form (one job annotation).

The reconcile loop may restart at any time, so what has been handled lives on the job object,
never in memory: per pod a compact record of the incarnation last seen (phase, restarts, flags)
keyed by a 6-character digest of the pod uid and grouped by task, the budget counters, which
timers fired, the delayed actions still waiting, the last verdict, the terminal verdict that holds
(`final`, made by a verdict rule or by an action), the restart of ours under way, and the tasks
`fail task` failed. It must stay small (a 1,000-pod job encodes to about 7 KB) and readable by a human:

    {"v":1,"verdict":"Running","pods":{"worker":{"R":"k3Jd9a Xk29aQ","R2":"p0Qz1w"}},
     "budgets":{"podFailed#0[worker]":1}}

A pod code is a phase letter (P R S F), the restart count when non-zero, and flags: `e` evicted,
`d` deletion requested, `x` deletion requested by one of our actions (so its disappearance is
not an event). Malformed input never raises: `decode` reports the problem and yields an empty state.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Mapping, NamedTuple

from runtime import functions, shape, vocabulary

VERSION = 1
ANNOTATION = vocabulary.STATE_ANNOTATION
PHASE_LETTERS = {"Pending": "P", "Running": "R", "Succeeded": "S", "Failed": "F"}
_CODE = re.compile(r"([PRSF])(\d*)(e?)(d?)(x?)")
_DIGEST = re.compile(r"[A-Za-z0-9_-]{6}")
_DIGESTS = re.compile(r"[A-Za-z0-9_-]{6}(?: [A-Za-z0-9_-]{6})*|")   # joined by one space


class StateError(shape.ShapeError):
    """Stored state that cannot be read."""


class PodRecord(NamedTuple):
    """The incarnation of a pod last handled: a change in any field is a new incarnation.

    A named tuple, not a frozen dataclass: every evaluation makes one per pod and compares it
    with the stored one (and `occurrences` looks pairs up in a cache), which a tuple does in C;
    as a frozen dataclass that was a tenth of a 100-pod evaluation (bench/RESULTS.md)."""

    task: str | None
    phase: str  # P R S F
    restarts: int = 0
    evicted: bool = False
    deleting: bool = False
    ours: bool = False

    @property
    def code(self) -> str:
        return (self.phase + (str(self.restarts) if self.restarts else "") + "e" * self.evicted
                + "d" * self.deleting + "x" * self.ours)

    @property
    def finished(self) -> bool:
        return self.phase in ("S", "F")


@dataclass(frozen=True, slots=True)
class Final:
    """A terminal verdict that holds from then on: made by a verdict rule (`by` "verdict") or by
    an action (fail/complete/terminate job, `by` "policy"), until the job starts again."""

    phase: str
    reason: str | None
    message: str | None
    rule: str  # path:line:col of the verdict rule or the policy
    by: str = "policy"  # verdict | policy
    run: str | None = None  # the kind's `final until` value when decided (compact JSON)
    cause: str | None = None  # the named cause that matched the failure


@dataclass(frozen=True, slots=True)
class Restarting:
    """A restart of ours under way: the job reads Restarting while the pods it stopped are still
    there or it waits for its delay."""

    reason: str | None
    message: str | None
    rule: str  # path:line:col of the policy


@dataclass(frozen=True, slots=True)
class Delayed:
    """A delayed action waiting for its due time (or for its pod to recover)."""

    policy: str
    event: str
    due: datetime
    pod: str | None
    digest: str | None
    task: str | None
    restarts: int = 0  # the pod's restarts when scheduled: more since means it did not recover
    variables: Mapping[str, Any] = field(default_factory=dict)  # template values when scheduled


@dataclass(frozen=True, slots=True)
class Released:
    """An action the controller gave up on (refused for good, or its `await` past its time):
    the next evaluation lets go of what it held (its pods are no longer ours, a restart or a
    terminal verdict it made is over) and runs the policy's fallback. `policy` None: every
    action at once (a journal that could not be read)."""

    policy: str | None
    action: str = ""
    task: str | None = None
    pod: str | None = None
    digest: str | None = None
    targets: tuple[str, ...] = ()   # digests of the pods it could stop
    why: str = ""


@dataclass(frozen=True, slots=True)
class State:
    verdict: str | None = None
    final: Final | None = None
    pods: Mapping[str, PodRecord] = field(default_factory=dict)  # by pod digest
    tasks: Mapping[str, str] = field(default_factory=dict)  # task -> "succeeded" | "failed" announced
    budgets: Mapping[str, int] = field(default_factory=dict)
    fired: frozenset[str] = frozenset()  # timers that fired once
    delayed: tuple[Delayed, ...] = ()
    restarting: Restarting | None = None
    failed_tasks: frozenset[str] = frozenset()  # tasks `fail task` failed
    released: tuple[Released, ...] = ()  # actions given up, to let go of at the next evaluation


@dataclass(frozen=True, slots=True)
class Decoded:
    state: State
    error: str | None  # why the input was ignored, when it was


EMPTY = State()


def encode(state: State) -> str:
    """Compact, deterministic JSON (sorted keys, empty parts left out)."""
    return json.dumps(to_json(state), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def to_json(state: State) -> dict[str, Any]:
    out: dict[str, Any] = {"v": VERSION}
    if state.verdict is not None:
        out["verdict"] = state.verdict
    if state.final is not None:
        out["final"] = {"phase": state.final.phase, "reason": state.final.reason,
                        "message": state.final.message, "rule": state.final.rule}
        if state.final.by != "policy":
            out["final"]["by"] = state.final.by
        if state.final.run is not None:
            out["final"]["run"] = state.final.run
        if state.final.cause is not None:
            out["final"]["cause"] = state.final.cause
    if state.restarting is not None:
        out["restarting"] = {"reason": state.restarting.reason,
                             "message": state.restarting.message, "rule": state.restarting.rule}
    if state.failed_tasks:
        out["failedTasks"] = sorted(state.failed_tasks)
    if state.pods:
        by_record: dict[PodRecord, list[str]] = {}   # few records, many pods
        for digest, record in state.pods.items():
            by_record.setdefault(record, []).append(digest)
        groups: dict[str, dict[str, list[str]]] = {}
        for record, digests in by_record.items():
            groups.setdefault(record.task or "", {}).setdefault(record.code, []).extend(digests)
        out["pods"] = {task: {code: " ".join(sorted(ds)) for code, ds in codes.items()}
                       for task, codes in groups.items()}
    if state.tasks:
        out["tasks"] = dict(state.tasks)
    if state.budgets:
        out["budgets"] = dict(state.budgets)
    if state.fired:
        out["fired"] = sorted(state.fired)
    if state.delayed:
        out["delayed"] = [_delayed_json(d) for d in state.delayed]
    if state.released:
        out["released"] = [_released_json(r) for r in state.released]
    return out


def _released_json(r: Released) -> dict[str, Any]:
    out: dict[str, Any] = {"policy": r.policy}
    for key, value in (("action", r.action), ("task", r.task),
                       ("pod", r.pod), ("uid", r.digest), ("why", r.why)):
        if value:
            out[key] = value
    if r.targets:
        out["targets"] = " ".join(r.targets)
    return out


def _delayed_json(d: Delayed) -> dict[str, Any]:
    out: dict[str, Any] = {"policy": d.policy, "event": d.event, "due": functions.rfc3339(d.due)}
    for key, value in (("pod", d.pod), ("uid", d.digest), ("task", d.task)):
        if value is not None:
            out[key] = value
    if d.restarts:
        out["restarts"] = d.restarts
    if d.variables:
        out["vars"] = dict(d.variables)
    return out


def decode(text: str | None) -> Decoded:
    """Read stored state; missing text is the empty state, malformed text is reported."""
    if text is None or not text.strip():
        return Decoded(EMPTY, None)
    try:
        return Decoded(from_json(shape.load(text)), None)
    except shape.NotJSON as err:
        return Decoded(EMPTY, f"stored state is {err}; starting afresh")
    except shape.ShapeError as err:
        return Decoded(EMPTY, f"stored state ignored: {err}")


def from_json(data: Any) -> State:
    """Build a State from decoded JSON; every problem is a ShapeError (a StateError or a type error)."""
    obj = shape.obj(data, "state")
    if obj.get("v") != VERSION:
        raise StateError(f"version {obj.get('v')!r} is not {VERSION}")
    unknown = set(obj) - {"v", "verdict", "final", "pods", "tasks", "budgets", "fired", "delayed",
                          "restarting", "failedTasks", "released"}
    if unknown:
        raise StateError(f"unknown keys {sorted(unknown)}")
    pods: dict[str, PodRecord] = {}
    for task, codes in shape.obj(obj.get("pods", {}), "pods").items():
        for code, digests in shape.obj(codes, f"pods.{task}").items():
            match = _CODE.fullmatch(code)
            if not match:
                raise StateError(f"pods.{task}: malformed pod code {code!r}")
            letter, restarts, evicted, deleting, ours = match.groups()
            record = PodRecord(task or None, letter, int(restarts or 0), bool(evicted),
                               bool(deleting), bool(ours))
            listed = shape.string(digests, f"pods.{task}.{code}").split()
            if not _DIGESTS.fullmatch(" ".join(listed)):   # all checked in one match
                bad = next(d for d in listed if not _DIGEST.fullmatch(d))
                raise StateError(f"pods.{task}.{code}: malformed pod digest {bad!r}")
            pods.update(dict.fromkeys(listed, record))
    final = obj.get("final")
    if final is not None:
        f = shape.obj(final, "final")
        by = f.get("by", "policy")
        if by not in ("verdict", "policy"):
            raise StateError(f"final.by: {by!r} is not verdict or policy")
        final = Final(shape.string(f.get("phase"), "final.phase"), shape.opt_string(f.get("reason"), "final.reason"),
                      shape.opt_string(f.get("message"), "final.message"), shape.string(f.get("rule", ""), "final.rule"),
                      by, shape.opt_string(f.get("run"), "final.run"),
                      shape.opt_string(f.get("cause"), "final.cause"))
    restarting = obj.get("restarting")
    if restarting is not None:
        r = shape.obj(restarting, "restarting")
        restarting = Restarting(shape.opt_string(r.get("reason"), "restarting.reason"),
                                shape.opt_string(r.get("message"), "restarting.message"),
                                shape.string(r.get("rule", ""), "restarting.rule"))
    budgets = {k: shape.count(v, f"budgets.{k}") for k, v in shape.obj(obj.get("budgets", {}), "budgets").items()}
    return State(
        verdict=shape.opt_string(obj.get("verdict"), "verdict"),
        final=final,
        pods=pods,
        tasks={k: shape.string(v, f"tasks.{k}") for k, v in shape.obj(obj.get("tasks", {}), "tasks").items()},
        budgets=budgets,
        fired=frozenset(shape.string(v, "fired") for v in shape.array(obj.get("fired", []), "fired")),
        delayed=tuple(_delayed(d) for d in shape.array(obj.get("delayed", []), "delayed")),
        restarting=restarting,
        failed_tasks=frozenset(shape.string(v, "failedTasks")
                               for v in shape.array(obj.get("failedTasks", []), "failedTasks")),
        released=tuple(_released(r) for r in shape.array(obj.get("released", []), "released")),
    )


def _released(value: Any) -> Released:
    r = shape.obj(value, "released")
    targets = shape.string(r.get("targets", ""), "released.targets").split()
    if not all(_DIGEST.fullmatch(t) for t in targets):
        raise StateError(f"released.targets: malformed pod digests {targets!r}")
    return Released(shape.opt_string(r.get("policy"), "released.policy"),
                    shape.string(r.get("action", ""), "released.action"),
                    shape.opt_string(r.get("task"), "released.task"),
                    shape.opt_string(r.get("pod"), "released.pod"),
                    shape.opt_string(r.get("uid"), "released.uid"), tuple(targets),
                    shape.string(r.get("why", ""), "released.why"))


def with_released(text: str | None, released: tuple[Released, ...]) -> str:
    """The stored state `text` with actions given up added (the journal machine writes it with
    the journal that drops them, in one guarded patch)."""
    current = decode(text).state
    known = set(current.released)
    return encode(replace(current, released=current.released
                          + tuple(r for r in released if r not in known)))


def _delayed(value: Any) -> Delayed:
    d = shape.obj(value, "delayed")
    due = functions.timestamp(d.get("due"))
    if due is None:
        raise StateError(f"delayed: malformed due time {d.get('due')!r}")
    return Delayed(shape.string(d.get("policy"), "delayed.policy"), shape.string(d.get("event"), "delayed.event"),
                   due, shape.opt_string(d.get("pod"), "delayed.pod"), shape.opt_string(d.get("uid"), "delayed.uid"),
                   shape.opt_string(d.get("task"), "delayed.task"), shape.count(d.get("restarts", 0), "delayed.restarts"),
                   dict(shape.obj(d.get("vars", {}), "delayed.vars")))


