"""What happened to the job since the stored state: one occurrence per pod incarnation that
changed, timer that came due or task that ended, carrying the events it amounts to.

Pure: each function reads the inputs (and the stored state they carry) and returns the new
occurrences with what to remember of them (pod records, timers fired). Which policy takes an
occurrence is `runtime.evaluation.policies`'. Incarnations are monotone, so a stored record equal to the
current one means "already handled".
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from runtime import conditions, pods, state, vocabulary
from runtime.evaluation.ledger import Inputs

PHASE_EVENTS = {"Pending": "podPending", "Running": "podRunning", "Succeeded": "podSucceeded",
                "Failed": "podFailed"}


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One change, and its events most specific first; the first policy to match one of them
    takes the whole occurrence."""

    names: tuple[str, ...]
    pod: pods.Pod | None
    digest: str | None
    task: str | None
    for_seconds: int | None = None  # timers: podPending / jobRunningLongerThan thresholds
    to: str | None = None  # jobVerdictChanged
    candidates: tuple[pods.Pod, ...] = ()  # task and job events: the pods a filter may pick from
    disrupted: bool = False  # podFailed of an evicted pod, or of one deleted by someone else


def of_pods(inputs: Inputs) -> tuple[list[Occurrence], dict[str, state.PodRecord]]:
    """The pods' changes, in the order they happened (then the pods gone unfinished), and the
    record of every pod's incarnation now."""
    stored = inputs.stored
    out = []
    records: dict[str, state.PodRecord] = {}
    for p in inputs.pods:
        old = stored.pods.get(p.digest)
        letter = state.PHASE_LETTERS.get(p.phase, "P")
        if old is not None and old == (p.task, letter, p.restarts, p.evicted, p.terminating,
                                       old.ours):
            records[p.digest] = old   # unchanged (most pods): handled before, no record made
            continue
        record = state.PodRecord(p.task, letter, p.restarts, p.evicted, p.terminating,
                                 old is not None and old.ours)
        records[p.digest] = record
        if record.ours:
            continue  # what happens to it is our doing
        names, disrupted = _heard_changes(old, record, inputs.kind.heard(p.task))
        if names:
            out.append(Occurrence(names, p, p.digest, p.task, disrupted=disrupted))
    out.sort(key=lambda occ: pods.change_key(occ.pod))  # type: ignore[arg-type]  # all have pods
    for digest in sorted(stored.pods.keys() - records.keys()):   # the pods gone (few)
        old = stored.pods[digest]
        if not _gone_matters(old):
            continue
        names = tuple(n for n in ("podDeleted", "podEvicted") if n in inputs.kind.heard(old.task))
        if names:
            out.append(Occurrence(names, None, digest, old.task))
    return out, records


def remembered(inputs: Inputs, records: dict[str, state.PodRecord]) -> dict[str, state.PodRecord]:
    """What the stored state keeps of the pods: a pod's record moves on only when keeping the
    old one could change a later decision (an event a policy takes, a disruption, a pod of
    ours, a pod whose going would be an event), so a pod transition that no rule listens for
    is no write on the job. A pod not yet worth a record has none."""
    out = {}
    for digest, record in records.items():
        old = inputs.stored.pods.get(digest)
        if old == record:
            out[digest] = old   # unchanged (most pods, most times): nothing to weigh
        elif _matters(old, record, inputs.kind.heard(record.task)):
            out[digest] = record
        elif old is not None:
            out[digest] = old
    return out


_FUTURES = tuple(itertools.product("PRSF", (0, 1), (False, True), (False, True)))


@functools.lru_cache(maxsize=65536)
def _matters(old: state.PodRecord | None, new: state.PodRecord, heard: frozenset[str]) -> bool:
    """Whether remembering `new` rather than `old` can change what any later incarnation of the
    pod amounts to (the events heard and whether a failure is a disruption), or whether its
    going is an event: checked over every record the pod can have next."""
    if new.ours != (old is not None and old.ours):
        return True   # a pod of ours (or no longer): it raises nothing, counts in no verdict
    if not heard:
        return False
    if old is not None and old.task != new.task:
        return True
    if heard & {"podDeleted", "podEvicted"} and _gone_matters(old) != _gone_matters(new):
        return True
    base = max(new.restarts, old.restarts if old is not None else 0)
    for phase, more, evicted, deleting in _FUTURES:
        if new.finished and phase != new.phase:
            continue   # Succeeded and Failed are terminal: a kubelet never moves a pod on
        future = state.PodRecord(new.task, phase, base + more, evicted, deleting)
        if _heard(old, future, heard) != _heard(new, future, heard):
            return True
    return False


def _heard(old: state.PodRecord | None, new: state.PodRecord,
           heard: frozenset[str]) -> tuple[tuple[str, ...], bool]:
    names, disrupted = changes(old, new)
    kept = tuple(n for n in names if n in heard)
    return kept, disrupted and "podFailed" in kept


def _gone_matters(record: state.PodRecord | None) -> bool:
    """A pod that goes unfinished, not on its way out and not stopped by us: `pod deleted`."""
    return record is not None and not (record.finished or record.deleting or record.ours)


def pending_timers(inputs: Inputs,
                   records: dict[str, state.PodRecord]) -> tuple[list[Occurrence], set[str]]:
    """`podPending for D`: once per pod incarnation pending `D`, one timer per distinct `D`; and
    the timers that have fired, this time or before, for pods still pending."""
    thresholds = sorted({p.for_seconds for p in inputs.kind.policies
                         if p.event == "podPending" and p.for_seconds is not None})
    out = []
    fired = set()
    for p in pods.in_state(inputs.pods, "pending"):
        for seconds in thresholds:
            token = f"podPending>{seconds} {p.digest}"
            since = p.since("pending")
            if token in inputs.stored.fired:
                fired.add(token)
            elif records[p.digest].ours:
                continue  # a pod we stopped raises nothing
            elif since is not None and (inputs.now - since).total_seconds() >= seconds:
                fired.add(token)
                out.append(Occurrence(("podPending",), p, p.digest, p.task, for_seconds=seconds))
    return out, fired


def of_tasks(inputs: Inputs, snapshot: conditions.Snapshot) -> list[Occurrence]:
    """`taskCompleted` / `taskFailed`: a task's state became succeeded / failed."""
    out = []
    for task, now_state in sorted(announced(snapshot).items()):
        name = "taskCompleted" if now_state == "succeeded" else "taskFailed"
        if inputs.stored.tasks.get(task) != now_state and name in inputs.kind.heard(task):
            members = tuple(p for p in snapshot.scope(task) if p.is_(now_state))
            out.append(Occurrence((name,), None, None, task, candidates=members))
    return out


def job_timers(inputs: Inputs, snapshot: conditions.Snapshot,
               phase: str) -> tuple[list[Occurrence], set[str]]:
    """`jobRunningLongerThan D`: once, when the job's age reaches `D` and `phase` is neither
    terminal nor suspended (a job a queue holds is not running: Kueue keeps one suspended,
    without `status.startTime`, for as long as it waits); and the timers that have fired."""
    out = []
    fired = set()
    age = snapshot.job_age()
    for seconds in sorted({p.for_seconds for p in inputs.kind.policies
                           if p.event == "jobRunningLongerThan" and p.for_seconds is not None}):
        token = f"jobRunningLongerThan>{seconds}"
        if token in inputs.stored.fired:
            fired.add(token)
        elif (age is not None and age >= seconds and phase not in vocabulary.TERMINAL_PHASES
              and phase != "Suspended"):
            fired.add(token)
            out.append(Occurrence(("jobRunningLongerThan",), None, None, None,
                                  for_seconds=seconds, candidates=tuple(snapshot.pods)))
    return out, fired


def verdict_changed(phase: str, snapshot: conditions.Snapshot) -> Occurrence:
    """`jobVerdictChanged` to `phase`, raised after every other event."""
    return Occurrence(("jobVerdictChanged",), None, None, None, to=phase,
                      candidates=tuple(snapshot.pods))


def announced(snapshot: conditions.Snapshot) -> dict[str, str]:
    """The tasks that are succeeded or failed: announced once each (taskCompleted, taskFailed)."""
    return {t: s for t, s in snapshot.task_states().items() if s in ("succeeded", "failed")}


def announced_remembered(inputs: Inputs, snapshot: conditions.Snapshot) -> dict[str, str]:
    """What the stored state keeps of the tasks' ends: only those a policy listens for (an end
    nobody takes is no write on the job), as announced."""
    out = dict(inputs.stored.tasks)
    for task, now_state in announced(snapshot).items():
        name = "taskCompleted" if now_state == "succeeded" else "taskFailed"
        if name in inputs.kind.heard(task):
            out[task] = now_state
    return out


_PHASE_WORDS = {letter: phase for phase, letter in state.PHASE_LETTERS.items()}


@functools.lru_cache(maxsize=65536)
def _heard_changes(old: state.PodRecord | None, new: state.PodRecord,
                   heard: frozenset[str]) -> tuple[tuple[str, ...], bool]:
    """`changes`, less the events no policy takes: asked of every pod the stored state has no
    record of (most pods, at every evaluation), of few distinct records."""
    names, disrupted = changes(old, new)
    return tuple(n for n in names if n in heard), disrupted


def changes(old: state.PodRecord | None, new: state.PodRecord) -> tuple[tuple[str, ...], bool]:
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
        if new.phase == "F" and (handled or new.evicted):
            names.append("podFailed")  # for `pod failed or evicted` policies only
            disrupted = True
        elif not (handled and new.finished):
            names.append(PHASE_EVENTS[_PHASE_WORDS[new.phase]])
    if new.restarts > (old.restarts if old is not None else 0):
        names.append("containerRestarted")
    return tuple(dict.fromkeys(names)), disrupted


def label(occ: Occurrence) -> str:
    """What an occurrence is about, as `--explain` names it."""
    if occ.pod is not None:
        return f"pod {occ.pod.name}"
    if occ.digest is not None:
        return f"pod {occ.digest} (gone)"
    if occ.task is not None:
        return f"task {occ.task}"
    return "job"
