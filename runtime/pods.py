"""Facts about a job's pods, read once per evaluation, and the pod filters tested against them.

Kubernetes spreads "how did this pod end" over the pod phase, `status.reason`, conditions and the
current and last state of every container (init containers included). The evaluator, the policy
matcher and the CLI all need the same answers, so they are computed here once per pod into a
`Pod` value and every filter reads that value instead of walking the raw object again.

Which container counts is decided by name, never by position: with primary containers declared
(by name or prefix) only those count (unless a filter names another); otherwise every container
does but those the plan's injections add, and the one that "decided" is picked by preference
(non-zero exit first, then earliest finish, then position), so an injected sidecar never takes
the place of the container that failed. On a failure, as Kubernetes' podFailurePolicy reads a
failed pod, only containers that are currently terminated with a non-zero exit code are read,
regular containers before init containers.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import operator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping


from runtime import functions, plan, templates, vocabulary

FINISHED = ("Succeeded", "Failed")
COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
           ">=": operator.ge, ">": operator.gt}
_NEVER = datetime.max.replace(tzinfo=timezone.utc)
_PHASE_STATES = {"pending": "Pending", "running": "Running", "succeeded": "Succeeded"}


@dataclass(slots=True)
class Container:
    """One container's status. `exit_code`/`finished` come from the current terminated state,
    else the last one; `reason` is the terminated reason, else the waiting reason (so
    `CrashLoopBackOff` is seen), else the last terminated reason. A container waiting after a
    termination keeps that termination's reason too (`last_reason`): a crash-looping container
    killed for memory is `CrashLoopBackOff` and `OOMKilled` both (`reasons`).

    Never assigned to once made, but not frozen, as `Pod`: a frozen dataclass's `__init__`
    costs a guarded `object.__setattr__` per field, and an evaluation reads the containers of
    every pod that changed (about 130,000 instructions of a 100-pod one: bench/RESULTS.md)."""

    name: str
    index: int
    init: bool
    restarts: int
    state: str  # waiting | running | terminated | "" (no state reported yet)
    exit_code: int | None
    reason: str | None
    finished: datetime | None
    last_reason: str | None = None   # waiting: the reason of the termination it waits after

    @property
    def reasons(self) -> tuple[str, ...]:
        """What `reason "R"` tests: the reason, and a waiting container's last termination's."""
        return tuple(r for r in (self.reason, self.last_reason) if r is not None)


@dataclass(frozen=True, slots=True)
class Counted:
    """Which containers count: the primary ones (by name or prefix) when declared, else all but
    the injected ones."""

    names: tuple[str, ...] | None
    prefix: str | None
    injected: frozenset[str]

    def __call__(self, name: str) -> bool:
        if self.names is None and self.prefix is None:
            return name not in self.injected
        return (self.names is not None and name in self.names) or \
            (self.prefix is not None and name.startswith(self.prefix))


ALL = Counted(None, None, frozenset())


def counted(kind: plan.Kind) -> Counted:
    return Counted(kind.primary_containers, kind.primary_prefix, kind.injected)


@dataclass(slots=True)
class Pod:
    """What the evaluator knows about a pod. The few facts every evaluation needs are read up
    front; container and time facts are read on first use and remembered (most pods of a big
    job are only checked for their phase).

    Never assigned to once made, but not frozen: every evaluation makes one per pod, and a
    frozen dataclass's `__init__` (a guarded `object.__setattr__` per field) costs five times a
    plain one's: a fifth of a 100-pod evaluation (bench/RESULTS.md)."""

    obj: Mapping[str, Any]
    name: str
    namespace: str | None
    uid: str
    digest: str
    task: str | None
    phase: str
    reason: str | None
    evicted: bool
    terminating: bool
    restarts: int  # the counted containers together: grows whenever one of them restarts
    counts: Counted = ALL  # which containers count
    _memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @property
    def containers(self) -> tuple[Container, ...]:
        """Every container, init containers first, in status order."""
        return self._memoized("containers", lambda: tuple(_containers(_obj(self.obj.get("status")))))

    @property
    def counted(self) -> tuple[Container, ...]:
        """The containers that count (primary ones if declared), most telling first."""
        return self._memoized("counted", lambda: tuple(sorted(
            (c for c in self.containers if self.counts(c.name)), key=_preference)))

    @property
    def failures(self) -> tuple[Container, ...]:
        """The counted containers that are currently terminated with a non-zero exit code,
        regular containers before init containers, each in status order: what a filter on a
        failure reads (as the Job controller matches `onExitCodes`)."""
        return self._memoized("failures", lambda: tuple(sorted(
            (c for c in self.containers if self.counts(c.name) and _failed(c)),
            key=lambda c: (c.init, c.index))))

    def candidates(self, failure: bool) -> tuple[Container, ...]:
        """The containers a filter tries, in order: on a failure the failed ones, else the
        counted ones."""
        return self.failures if failure else self.counted

    def deciding(self, failure: bool) -> Container | None:
        """The container that speaks for the pod when no filter chose one."""
        found = self.candidates(failure) or self.counted
        return found[0] if found else None

    def _memoized(self, key: str, read: Any) -> Any:
        if key not in self._memo:
            self._memo[key] = read()
        return self._memo[key]

    @property
    def created(self) -> datetime | None:
        return self._memoized("created", lambda: functions.timestamp(
            _obj(self.obj.get("metadata")).get("creationTimestamp")))

    @property
    def started(self) -> datetime | None:
        return self._memoized("started", lambda: functions.timestamp(
            _obj(self.obj.get("status")).get("startTime")))

    @property
    def ended(self) -> datetime | None:
        """When it finished: the latest container finish, else the Ready condition's time."""
        return self._memoized("ended", lambda: _ended(self))

    @property
    def disrupted(self) -> datetime | None:
        """When its DisruptionTarget condition turned True."""
        return self._memoized("disrupted", lambda: functions.timestamp(
            (self.condition("DisruptionTarget") or {}).get("lastTransitionTime")))

    @property
    def deleting(self) -> datetime | None:
        """When its deletion was requested (the deletion time less the grace period)."""
        return self._memoized("deleting", lambda: _deleting(_obj(self.obj.get("metadata"))))

    def container(self, name: str) -> Container | None:
        for container in self.containers:
            if container.name == name:
                return container
        return None

    def condition(self, kind: str, statuses: frozenset[str] = frozenset({"True"})
                  ) -> Mapping[str, Any] | None:
        """The pod condition of that type when its status is one of `statuses`."""
        for cond in _objs(_obj(self.obj.get("status")).get("conditions")):
            if cond.get("type") == kind and cond.get("status") in statuses:
                return cond
        return None

    def is_(self, state: str) -> bool:
        """Pod states of docs/plan.md: `failed` leaves evicted pods out, `failedOrEvicted` is
        both."""
        phase = _PHASE_STATES.get(state)
        if phase is not None:
            return self.phase == phase
        if state == "failed":
            return self.phase == "Failed" and not self.evicted
        if state == "failedOrEvicted":
            return self.phase == "Failed" or self.evicted
        if state == "evicted":
            return self.evicted
        return self.terminating

    def since(self, state: str) -> datetime | None:
        """When the pod entered `state` (for `for D` durations), from its own timestamps."""
        if state == "pending":
            return self.created
        if state == "running":
            return self.started or self.created
        if state == "evicted" or state == "failedOrEvicted" and self.evicted:
            return self.disrupted or self.ended
        if state == "terminating":
            return self.deleting
        return self.ended or self.started or self.created


def in_state(candidates: Iterable[Pod], state: str) -> list[Pod]:
    """The candidates in `state` (as `Pod.is_` answers), in order. An evaluation asks this of
    every pod of the job several times, so the states that are a phase, and `evicted`, are
    compared inline rather than asked of each pod (a call a pod: bench/RESULTS.md)."""
    phase = _PHASE_STATES.get(state)
    if phase is not None:
        return [p for p in candidates if p.phase == phase]
    if state == "evicted":
        return [p for p in candidates if p.evicted]
    return [p for p in candidates if p.is_(state)]


@functools.lru_cache(maxsize=8192)
def digest(uid: str) -> str:
    """A 6-character (36-bit) digest naming a pod incarnation's uid compactly in stored state."""
    raw = hashlib.blake2b(uid.encode(), digest_size=6).digest()
    return base64.urlsafe_b64encode(raw).decode()[:6]


def task_of(kind: plan.Kind, pod: Mapping[str, Any], search: templates.Search) -> str | None:
    """The task (role) a pod plays, from the kind's label or expression; None when unknown.

    The one reading of a pod's task, at admission as in evaluation: a label's value when it is
    a string; an expression's value as text (`3` for a number); empty is no task."""
    if kind.task_label is not None:
        labels = _obj(_obj(pod.get("metadata")).get("labels"))
        value = labels.get(kind.task_label)
        return value if isinstance(value, str) and value else None
    if kind.task_expr is not None:
        found = search(kind.task_expr, pod)
        return None if found is None else templates.text(found) or None
    return None


def facts(kind: plan.Kind, pod: Mapping[str, Any], search: templates.Search,
          counts: Counted | None = None) -> Pod:
    """Read what every evaluation needs from one pod object (the rest is read on demand);
    `counts` is `counted(kind)`, worked out once by a caller reading many pods.

    Read inline, without the `_obj`/`_text` helpers: this runs for every pod of every
    evaluation, and their calls were a fifth of its cost (bench/RESULTS.md)."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    status = pod.get("status")
    if not isinstance(status, dict):
        status = {}
    counts = counts or counted(kind)
    restarts = 0
    for key in ("initContainerStatuses", "containerStatuses"):
        statuses = status.get(key)
        if not isinstance(statuses, list):
            continue
        for cs in statuses:   # every pod has some: no list of them is made
            if isinstance(cs, dict):
                count = cs.get("restartCount")
                # Whether the container counts is asked only of one that restarted (few).
                if type(count) is int and count > 0:   # not a bool, not negative
                    name = cs.get("name")
                    if counts(name if isinstance(name, str) else ""):
                        restarts += count
    disrupted = False
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        for cond in conditions:
            if isinstance(cond, dict) and cond.get("type") == "DisruptionTarget" \
                    and cond.get("status") == "True":
                disrupted = True
    name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    name = name if isinstance(name, str) else ""
    namespace = namespace if isinstance(namespace, str) else None
    uid = uid if isinstance(uid, str) and uid else f"{namespace or ''}/{name}"
    if kind.task_label is not None:   # as `task_of` reads it, the labels read here
        labels = meta.get("labels")
        task = labels.get(kind.task_label) if isinstance(labels, dict) else None
        task = task if isinstance(task, str) and task else None
    else:
        task = task_of(kind, pod, search)
    phase = status.get("phase")
    phase = phase if isinstance(phase, str) and phase else "Pending"
    reason = status.get("reason")
    reason = reason if isinstance(reason, str) else None
    evicted = disrupted or reason == "Evicted"
    terminating = meta.get("deletionTimestamp") is not None
    # Positional, in field order: keywords would add a sixth to the cost of this function.
    return Pod(pod, name, namespace, uid, digest(uid), task, phase, reason, evicted, terminating,
               restarts, counts)


def _obj(value: Any) -> Mapping[str, Any]:
    """An object of the pod, or {} where the pod has something else (pods may be malformed)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _objs(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list of the pod, skipping anything else."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _ended(pod: Pod) -> datetime | None:
    if not pod.finished:
        return None
    finishes = [c.finished for c in pod.containers if c.finished is not None and c.state == "terminated"]
    if finishes:
        return max(finishes)
    ready = next((c for c in _objs(_obj(pod.obj.get("status")).get("conditions"))
                  if c.get("type") == "Ready"), {})
    return functions.timestamp(ready.get("lastTransitionTime"))


def _deleting(meta: Mapping[str, Any]) -> datetime | None:
    deletion = functions.timestamp(meta.get("deletionTimestamp"))
    if deletion is None:
        return None
    return deletion - timedelta(seconds=_count(meta.get("deletionGracePeriodSeconds")))


def _containers(status: Mapping[str, Any]) -> Iterable[Container]:
    index = 0
    for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses")):
        for cs in _objs(status.get(key)):
            state = _obj(cs.get("state"))
            last = _obj(_obj(cs.get("lastState")).get("terminated"))
            terminated = _obj(state.get("terminated"))
            waiting = _obj(state.get("waiting"))
            ended = terminated or last
            code = ended.get("exitCode")
            yield Container(
                name=_text(cs.get("name")) or "",
                index=index,
                init=init,
                restarts=_count(cs.get("restartCount")),
                state=next((s for s in ("terminated", "running", "waiting") if s in state), ""),
                exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                reason=(_text(terminated.get("reason")) or _text(waiting.get("reason"))
                        or _text(last.get("reason"))),
                finished=functions.timestamp(ended.get("finishedAt")),
                last_reason=_text(last.get("reason")) if "waiting" in state and not terminated
                else None,
            )
            index += 1


def _failed(c: Container) -> bool:
    return c.state == "terminated" and c.exit_code not in (None, 0)


def _preference(c: Container) -> tuple[int, datetime, int]:
    """Non-zero exits first (they explain a failure), then other reasons, clean exits, the rest."""
    if c.exit_code not in (None, 0):
        rank = 0
    elif c.reason and c.reason != "Completed":
        rank = 1
    elif c.exit_code == 0:
        rank = 2
    else:
        rank = 3
    return rank, c.finished or _NEVER, c.index


def change_key(pod: Pod) -> tuple[datetime, str, str]:
    """When the pod entered its current state, then its name: the order pod changes are handled in
    (so the earliest failure is the first to spend a shared budget)."""
    state = "evicted" if pod.evicted else pod.phase.lower()
    return pod.since(state if state in vocabulary.POD_STATES else "pending") or _NEVER, pod.name, pod.uid


def sort_key(pod: Pod, container: Container | None) -> tuple[datetime, str]:
    """Earliest to fail (or finish) first, then by name: the order that picks a deciding pod."""
    when = (container.finished if container is not None else None) or pod.ended or pod.disrupted
    return when or _NEVER, pod.name


# ---------------------------------------------------------------------------------------------
# Filters


def witness(filter: Any, pod: Pod, search: templates.Search,
            failure: bool = False) -> tuple[bool, Container | None]:
    """Whether the pod passes the filter, and the container that made it pass.

    Container terms are tested together on one container at a time, so `exit 137 and reason not
    in [...]` speaks of the same container; the first container (in preference order) for which
    the whole filter holds is the deciding one. A filter that names a container tests that one.
    On a `failure` the containers tried are those that failed (`Pod.failures`); a named one must
    be among them, else no container term holds for it.
    """
    if filter is None:
        return True, pod.deciding(failure)
    named = _named(filter)
    if named is not None:
        container = pod.container(named)
        if failure and container is not None and not _failed(container):
            container = _reason_only(container) if _asks_reason(filter) else None
        ok = _test(filter, pod, container, search)
        return ok, container if ok else None
    for container in pod.candidates(failure) or (None,):
        if _test(filter, pod, container, search):
            return True, container
    if failure and _asks_reason(filter):
        # A reason does not depend on the exit code: an OOMKilled container that exited 0 is
        # still OOMKilled. Its exit code is not a failure's, so exit terms do not hold for it.
        for container in sorted(pod.containers, key=lambda c: (c.init, c.index)):
            if pod.counts(container.name) and container.state == "terminated" \
                    and not _failed(container) and container.reason:
                if _test(filter, pod, _reason_only(container), search):
                    return True, container
    return False, None


def _reason_only(c: Container) -> Container:
    """A container that ended without failing, seen on a failure: its reason, no exit code."""
    return Container(c.name, c.index, c.init, c.restarts, c.state, None, c.reason, c.finished,
                     c.last_reason)


def _asks_reason(filter: Any, positive: bool = True) -> bool:
    """Whether the filter asks for a container reason (`reason "X"`, not under `not`)."""
    if isinstance(filter, (plan.And, plan.Or)):
        return any(_asks_reason(a, positive) for a in filter.args)
    if isinstance(filter, plan.Not):
        return _asks_reason(filter.arg, not positive)
    return isinstance(filter, plan.ContainerReason) and filter.negate != positive


def matches(filter: Any, pod: Pod, search: templates.Search, failure: bool = False) -> bool:
    """Whether the pod passes the filter (`witness` without the container)."""
    if filter is not None and not _reads_containers(filter):
        return _test(filter, pod, None, search)   # every container would answer alike
    return witness(filter, pod, search, failure)[0]


def _reads_containers(filter: Any) -> bool:
    if isinstance(filter, (plan.And, plan.Or)):
        return any(map(_reads_containers, filter.args))
    if isinstance(filter, plan.Not):
        return _reads_containers(filter.arg)
    return isinstance(filter, (plan.ExitCode, plan.ContainerReason, plan.Restarts))


def _named(filter: Any) -> str | None:
    if isinstance(filter, (plan.And, plan.Or)):
        return next((n for n in map(_named, filter.args) if n is not None), None)
    if isinstance(filter, plan.Not):
        return _named(filter.arg)
    return getattr(filter, "container", None)


def _test(f: Any, pod: Pod, c: Container | None, search: templates.Search) -> bool:
    if isinstance(f, plan.And):
        return all(_test(a, pod, c, search) for a in f.args)
    if isinstance(f, plan.Or):
        return any(_test(a, pod, c, search) for a in f.args)
    if isinstance(f, plan.Not):
        return not _test(f.arg, pod, c, search)
    if isinstance(f, plan.ExitCode):
        target = c  # the named container (`witness`), screened on a failure
        if target is None or target.exit_code is None:
            return False  # no exit code: neither `exit in` nor `exit not in` holds
        code = target.exit_code
        hit = code in f.codes or any(lo <= code <= hi for lo, hi in f.ranges)
        return hit != f.negate
    if isinstance(f, plan.ContainerReason):
        target = c  # the named container (`witness`), screened on a failure
        if target is None or target.reason is None:
            return False
        return any(r in f.values for r in target.reasons) != f.negate
    if isinstance(f, plan.PodReason):
        return (pod.reason in f.values) != f.negate
    if isinstance(f, plan.PodCondition):
        cond = pod.condition(f.type, f.statuses)
        hit = cond is not None and (not f.reasons or cond.get("reason") in f.reasons)
        return hit != f.negate
    if isinstance(f, plan.TaskIs):
        return (pod.task in f.values) != f.negate
    if isinstance(f, plan.Restarts):
        target = c  # the named container (`witness`), screened on a failure
        return COMPARE[f.cmp](target.restarts if target is not None else 0, f.value)
    if isinstance(f, plan.LabelIs):
        return _labelled(f, pod.obj)
    if isinstance(f, plan.JmesPath):
        return truthy(search(f.expr, pod.obj))
    raise TypeError(f"not a pod filter: {f!r}")


def truthy(value: Any) -> bool:
    """JMESPath truthiness: null, false, empty string, array and object are false."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict)):
        return len(value) > 0
    return True


def _labelled(f: plan.LabelIs, obj: Mapping[str, Any]) -> bool:
    values = _obj(_obj(obj.get("metadata")).get("annotations" if f.annotation else "labels"))
    hit = f.key in values if f.values is None else values.get(f.key) in f.values
    return hit != f.negate


def is_primary(kind: plan.Kind, pod: Mapping[str, Any], search: templates.Search) -> bool:
    """Whether the pod is one of the kind's primary pods (all pods when none are declared)."""
    if kind.primary_pods is None:
        return True
    if isinstance(kind.primary_pods, plan.LabelIs):
        return _labelled(kind.primary_pods, pod)   # the usual filter: the pod's facts unread
    return matches(kind.primary_pods, facts(kind, pod, search), search)


# ---------------------------------------------------------------------------------------------
# Membership


def pods_of(kind: plan.Kind, job: Mapping[str, Any], candidates: Iterable[Mapping[str, Any]],
            now: datetime | None = None) -> list[Mapping[str, Any]]:
    """The candidates that belong to the job: owned by it and/or carrying its selector labels
    (both must hold when both are declared; with neither, every candidate in its namespace).
    `now` only matters to a selector template that calls `now()`; it defaults to the clock."""
    search = templates.searcher(functions.options(now or datetime.now(timezone.utc)))
    meta = _obj(job.get("metadata"))
    variables = job_variables(job)
    selector = {key: templates.render_text(t, job, variables, search) for key, t in kind.pod_labels}
    if any(value is None for value in selector.values()):
        return []   # a selector whose value cannot be rendered selects no pod
    namespace = meta.get("namespace")
    uid = meta.get("uid")
    owner = None if uid else (job.get("kind"), meta.get("name"), job.get("apiVersion"))
    wanted = tuple(selector.items())
    return [pod for pod in candidates
            if _belongs(kind.pods_owned, uid, owner, wanted, namespace, pod)]


def job_variables(job: Mapping[str, Any]) -> dict[str, Any]:
    """The placeholders a pod selector's value may name (`job`, `namespace`, `kind`)."""
    meta = _obj(job.get("metadata"))
    return {"job": meta.get("name"), "namespace": meta.get("namespace"), "kind": job.get("kind")}


def _belongs(owned: bool, uid: Any, owner: tuple[Any, Any, Any] | None,
             wanted: tuple[tuple[str, str | None], ...], namespace: str | None,
             pod: Mapping[str, Any]) -> bool:
    """Whether a candidate is the job's: in its namespace, owned by it (by uid; by kind, name
    and apiVersion when the job has none) if `owned`, with every `wanted` label.

    Read inline, without the `_obj`/`_objs` helpers: this runs for every pod of every
    evaluation (a fifth of a no-op reconcile of a 400-pod Job with the helpers)."""
    pod_meta = pod.get("metadata")
    if not isinstance(pod_meta, dict):
        pod_meta = {}
    if namespace and pod_meta.get("namespace") not in (None, namespace):
        return False
    if owned:
        refs = pod_meta.get("ownerReferences")
        if not isinstance(refs, list):
            return False
        for ref in refs:
            if isinstance(ref, dict) and (
                    ref.get("uid") == uid if owner is None else
                    (ref.get("kind"), ref.get("name"), ref.get("apiVersion")) == owner):
                break
        else:
            return False
    if wanted:
        labels = pod_meta.get("labels")
        if not isinstance(labels, dict):
            return False
        for key, value in wanted:
            if labels.get(key) != value:
                return False
    return True
