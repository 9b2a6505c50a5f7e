"""Carrying out a job's intent journal, as a pure machine that the controller's shell drives.

In the spirit of kopf's progression state: the machine is given where it stands (`Progress`),
the job as it is now and the answer to the request it last asked for, and says what comes next:
a request to send, or a stop (with the seconds until a waiting step should be looked at again,
or a retry of the whole reconcile). The shell sends exactly what it is asked to and feeds the
answer back; every decision (which step, which request, when the journal is written, when an
action is given up) is made here, where a unit test reaches it without a cluster.

The journal on the job moves with the effects (docs/controller.md, Actions): a step that patches
the job carries the advanced cursor in the same patch, any other step with effects and more to
come is followed by a guarded patch of the cursor, so a replay after a crash never redoes a step
that a later one undid (`set spec.suspend = true`, then `= false`). Done and dropped intents
leave the journal with one last guarded patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Union

from runtime import actions, functions, intents, objects, plan, pods, state, vocabulary

MAX_ATTEMPTS = 5              # tries of a step the API server refuses for good
PERMANENT = frozenset({401, 403, 422})   # refused for good: retrying the same will not help
PERMANENT_RETRY = 1.0         # seconds before such a step is tried again


@dataclass(frozen=True, slots=True)
class Pass:
    """What stays the same while one reconcile carries out the journal."""

    kind: plan.Kind
    pods: tuple[Mapping[str, Any], ...]
    now: datetime
    job_path: str
    status_subresource: bool
    related: actions.Related = field(default_factory=dict)   # the lists actions.lookups names


@dataclass(frozen=True, slots=True)
class Send:
    """A request to send. With `resource_version`, a merge patch guarded by it (409 if the
    object moved on); its answer is the job as written, which the shell passes back."""

    method: str
    path: str
    body: Any
    resource_version: str | None = None
    done_on: frozenset[int] = frozenset()   # statuses that mean "already so"
    part: str = "effect"      # effect (a step's own request) | journal (the journal's patch)
    clear: bool = False       # the last patch of the pass, which clears done intents


@dataclass(frozen=True, slots=True)
class Stop:
    """Nothing more to send in this pass."""

    wait: float | None = None   # seconds until a waiting step should be looked at again
    retry: bool = False         # the last answer calls for the reconcile again, with backoff
    open: int = 0               # intents still open


Todo = Union[Send, Stop]


@dataclass(frozen=True, slots=True)
class Answer:
    """How the API server answered a Send: its HTTP status (0: no answer) and, for an error,
    what it said (a dropped action's Event carries it)."""

    status: int
    detail: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class Done:
    intent: intents.Intent


@dataclass(frozen=True, slots=True)
class Dropped:
    intent: intents.Intent
    why: str


Report = Union[Done, Dropped]


@dataclass(frozen=True, slots=True)
class Progress:
    """Where carrying out the journal stands within one pass."""

    ahead: tuple[intents.Intent | None, ...]     # each intent as it will be (None: it leaves)
    written: tuple[intents.Intent | None, ...]   # as the job carries it now
    at: int = 0                                  # the intent being worked on
    current: intents.Intent | None = None        # it, as this pass has moved it
    advanced: intents.Intent | None = None       # it, past the step whose requests are out
    pending: tuple[actions.Request, ...] = ()    # that step's requests not yet sent
    sending: bool = False                        # a step's requests are out
    carried: bool = False                        # one of them carried the journal
    asked: Send | None = None                    # the request whose answer is due
    wait: float | None = None
    released: tuple[state.Released, ...] = ()    # actions given up, for the stored state
    done: tuple[intents.Intent, ...] = ()        # done; reported once the job drops them
    listed: bool = True      # the lists of other objects read for the pass are as they were

    @property
    def open(self) -> tuple[intents.Intent, ...]:
        return _open(self.ahead)


Lookup = actions.Lookup


def lookups(kind: plan.Kind, journal: tuple[intents.Intent, ...], job: Mapping[str, Any],
            now: datetime) -> tuple[Lookup, ...]:
    """The lists of other objects (path, label selector) the shell reads live before a pass,
    for the steps of them the open intents have still to do (`Pass.related`)."""
    return actions.lookups(kind, journal, job, now)


def start(journal: tuple[intents.Intent, ...]) -> Progress:
    """The journal as the job carries it, before anything of this pass."""
    return Progress(ahead=journal, written=journal)


def advance(run: Pass, progress: Progress, job: Mapping[str, Any],
            answer: Answer | None = None) -> tuple[Progress, Todo, tuple[Report, ...]]:
    """The next thing to do, given the job as it is now and the answer to the request last
    asked for (due whenever one was asked); with the actions done or given up on the way."""
    reports: list[Report] = []
    p = progress
    if p.asked is not None:
        if answer is None:
            raise ValueError(f"the answer to {p.asked.method} {p.asked.path} is due")
        p, stop = _answered(p, answer, reports)
        if stop is not None:
            return p, stop, tuple(reports)
    while True:
        p = _settle(p, reports)
        if p.pending:
            send = _request(run, p, p.pending[0], job)
            carries = send.resource_version is not None and send.path == run.job_path
            return (replace(p, pending=p.pending[1:], asked=send, carried=p.carried or carries),
                    send, tuple(reports))
        if p.sending:   # every request of the step answered: its effects are done
            if not p.carried and p.ahead[p.at] is not None:   # more steps to come
                send = _journal(run, p, job)
                return replace(p, asked=send), send, tuple(reports)
            p = _stepped(p, written=p.ahead if p.carried else p.written)
            continue
        if p.at >= len(p.ahead):
            if _open(p.ahead) != _open(p.written):
                send = _journal(run, p, job, clear=True)
                return replace(p, asked=send), send, tuple(reports)
            wait = _sooner(p.wait, 0.0) if p.released else p.wait   # the fallback's turn
            return p, Stop(wait=wait, open=len(_open(p.ahead))), tuple(reports)
        p = _look(run, p, job, reports)


def _look(run: Pass, p: Progress, job: Mapping[str, Any], reports: list[Report]) -> Progress:
    """Look at the current step of the intent at `p.at`: ask for its requests, or move on."""
    intent = p.current if p.current is not None else p.ahead[p.at]
    assert intent is not None
    objects_step = _objects_step(run.kind, intent)
    if objects_step and not p.listed:   # another step wrote them this pass: list them afresh
        return _next(replace(p, wait=_sooner(p.wait, 0.0)), intent)
    nxt = actions.next_step(run.kind, intent, job, list(run.pods), run.now,
                            status_subresource=run.status_subresource, related=run.related)
    steps = _steps(run.kind, intent)
    if nxt.failed is not None:
        return _next(_drop(p, intent, nxt.failed, reports), None)
    if nxt.wait is not None:
        return _next(replace(p, wait=_sooner(p.wait, nxt.wait)), intent)
    if intent.step >= steps:                 # a recorded action, or nothing left to do
        return _next(replace(p, done=(*p.done, intent)), None)
    advanced = intent.advanced(functions.rfc3339(run.now))
    p = _set(p, advanced if advanced.step < steps else None)
    if nxt.requests:
        return replace(p, current=intent, advanced=advanced, pending=nxt.requests, sending=True,
                       carried=False, listed=p.listed and not objects_step)
    return replace(p, current=advanced)      # already so: on to the next step


def _answered(p: Progress, answer: Answer,
              reports: list[Report]) -> tuple[Progress, Stop | None]:
    asked = p.asked
    assert asked is not None
    p = replace(p, asked=None)
    ok = answer.ok or answer.status in asked.done_on
    if asked.part == "journal":
        if not ok:
            return p, Stop(retry=True)
        return (replace(p, written=p.ahead) if asked.clear
                else _stepped(p, written=p.ahead)), None
    if ok:
        return p, None
    if answer.status in PERMANENT:           # a few tries, then the action is given up
        assert p.current is not None
        intent = replace(p.current, attempts=p.current.attempts + 1)
        if intent.attempts < MAX_ATTEMPTS:
            return _next(replace(p, wait=_sooner(p.wait, PERMANENT_RETRY)), intent), None
        why = answer.detail or f"refused ({answer.status})"
        return _next(_drop(p, intent, why, reports), None), None
    return p, Stop(retry=True)               # 409, 5xx, no answer: the journal says where to resume


def _request(run: Pass, p: Progress, request: actions.Request, job: Mapping[str, Any]) -> Send:
    if not request.guarded:
        return Send(request.method, request.path, request.body, done_on=request.done_on)
    body = request.body
    if request.path == run.job_path:         # the job itself: the cursor goes with it
        body = objects.merged(body, _journal_body(p, job))
    return Send(request.method, request.path, body, objects.resource_version(job),
                request.done_on)


def _journal(run: Pass, p: Progress, job: Mapping[str, Any], clear: bool = False) -> Send:
    return Send("PATCH", run.job_path, _journal_body(p, job), objects.resource_version(job),
                part="journal", clear=clear)


def _journal_body(p: Progress, job: Mapping[str, Any]) -> dict[str, Any]:
    """The journal as it will be; with actions given up, the stored state that lets go of them
    (in the same guarded patch: the drop and the release are one write)."""
    annotations: dict[str, Any] = {vocabulary.INTENTS_ANNOTATION: intents.encode(_open(p.ahead))}
    if p.released:
        annotations[vocabulary.STATE_ANNOTATION] = state.with_released(
            objects.annotation(job, vocabulary.STATE_ANNOTATION), p.released)
    return {"metadata": {"annotations": annotations}}


def _drop(p: Progress, intent: intents.Intent, why: str, reports: list[Report]) -> Progress:
    """Give an action up: said, and what it held let go of at the next evaluation."""
    reports.append(Dropped(intent, why))
    released = state.Released(intent.policy, intent.action, intent.task, intent.pod,
                              pods.digest(intent.uid) if intent.uid else None,
                              tuple(sorted({pods.digest(uid) for _, uid in intent.targets})), why)
    return replace(p, released=(*p.released, released))


def _settle(p: Progress, reports: list[Report]) -> Progress:
    """Report the done intents the job no longer carries: a journal write that fails leaves an
    intent on the job, whose replay (its effects idempotent) then ends it, reported once."""
    carried = {i.id for i in _open(p.written)}
    gone = [i for i in p.done if i.id not in carried]
    if not gone:
        return p
    reports.extend(Done(i) for i in gone)
    return replace(p, done=tuple(i for i in p.done if i.id in carried))


def _objects_step(kind: plan.Kind, intent: intents.Intent) -> bool:
    """Whether the intent's current step writes the job's objects of another kind."""
    recipe = kind.recipe(intent.action, intent.recipe)
    return not isinstance(recipe, str) and intent.step < len(recipe) \
        and isinstance(recipe[intent.step], plan.SetObjectField)


def _stepped(p: Progress, written: tuple[intents.Intent | None, ...]) -> Progress:
    """The step's effects are done (and recorded): on to the intent's next step."""
    return replace(p, written=written, current=p.advanced, advanced=None, sending=False,
                   carried=False)


def _next(p: Progress, intent: intents.Intent | None) -> Progress:
    """Leave the intent at `p.at` as `intent` (None: it leaves the journal); on to the next."""
    return replace(_set(p, intent), at=p.at + 1, current=None, advanced=None, pending=(),
                   sending=False, carried=False)


def _set(p: Progress, intent: intents.Intent | None) -> Progress:
    return replace(p, ahead=(*p.ahead[:p.at], intent, *p.ahead[p.at + 1:]))


def _open(journal: tuple[intents.Intent | None, ...]) -> tuple[intents.Intent, ...]:
    return tuple(i for i in journal if i is not None)


def _steps(kind: plan.Kind, intent: intents.Intent) -> int:
    recipe = kind.recipe(intent.action, intent.recipe)
    return 0 if isinstance(recipe, str) else len(recipe)


def _sooner(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)
