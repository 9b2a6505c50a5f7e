"""The controller's workers: take a job from the queue, reconcile it, send what was decided.

Everything a reconcile writes is decided by pure code (runtime.reconcile: the patches and
Events; runtime.journal: each request of the actions, and the journal's own patches); a worker
only sends it, guarded by the resourceVersion it holds, feeds the answers back, and requeues
the job for when time alone may change its verdict. A kind's jobs are queued once its caches
have filled (the end of their first lists queues them all), not at each change before;
conflicts and errors retry with client-go's backoff; an answer with a Retry-After (a 429 from
API Priority and Fairness) waits at least that long.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from runtime import intents, journal, objects, reconcile, shadow, watches, writeback
from runtime.controller import caches as cacheslib
from runtime.controller import events, informer, kube, metrics
from runtime.controller.settings import ControllerSettings
from runtime.workqueue import WorkQueue

log = logging.getLogger("jobrules.controller")

Key = cacheslib.Key
# A write refused for a stale resourceVersion is tried again at once on the job as the API
# server has it now (read on the 409), this many times, before the key backs off: as client-go's
# retry.RetryOnConflict. Waiting out the backoff instead lets a busy job move on again, so that
# under a steady stream of other writers every try conflicts and the backoff only grows.
CONFLICT_RETRIES = 5
# A job's own change (not a pod's) is reconciled this long after it came, so that the writes
# another controller makes in a burst are read in one pass: the Job controller writes a failing
# Job's `FailureTarget`, then its `Failed` condition about 10 ms later, and each was a
# reconcile of its own (bench/RESULTS.md, "Controller"). A pod's change, which the verdict's
# latency is timed from, is queued at once.
JOB_BATCH = 0.05


class Gate(Protocol):
    """Which jobs this replica reconciles (runtime.controller.shards): `owns` a namespace's
    jobs now; `enter` before a reconcile of one (False: not ours), `leave` after, so that a
    shard given back is drained first."""

    def owns(self, namespace: str) -> bool: ...
    def enter(self, namespace: str) -> bool: ...
    def leave(self, namespace: str) -> None: ...


class NotYet(Exception):
    """The kind's caches have not synced yet: a reconcile now would read pods as gone."""


class Worker:
    """The queue and what is done with each key taken from it (any number of threads)."""

    def __init__(self, settings: ControllerSettings, client: kube.Client,
                 recorder: events.Recorder, clock: Callable[[], datetime]) -> None:
        self.settings = settings
        self.client = client
        self.recorder = recorder
        self.clock = clock
        self.queue: WorkQueue[Key] = WorkQueue(metrics=metrics.WorkQueueMetrics("jobrules"))
        self.caches = cacheslib.Caches(client, self.enqueue, self.forget,
                                       namespaces=settings.namespaces,
                                       read_timeout=settings.read_timeout,
                                       on_synced=self.resync)
        self._pending: dict[Key, float] = {}  # first pod event of a change not yet committed
        self._sent = 0                          # action requests sent (for the test hooks)
        self._intents_open: dict[Key, int] = {}
        self._compared: dict[Key, str] = {}       # shadow mode: the outcome already judged
        self.gate: Gate | None = None             # None: every job is this replica's

    @property
    def intents_open(self) -> int:
        return sum(self._intents_open.values())

    # -- the queue ---------------------------------------------------------------------------

    def enqueue(self, key: Key, received: float | None = None) -> None:
        """Queue a job for a pod's change received at `received` (monotonic) at once; for its
        own change (`received` None) after `JOB_BATCH`, collapsed with any that follow."""
        if self.gate is not None and not self.gate.owns(key[1]):
            return   # another replica's shard: taking the shard enqueues every job of it
        if not self._synced(key[0]):
            # Its caches are still filling: each pod listed would queue its job again, and each
            # pass would only find them unsynced (65,000 passes while 100,000 pods were listed,
            # bench/RESULTS.md, "Scale curve"). The list's end enqueues every job (`resync`).
            return
        if received is None:
            self.queue.add_after(key, JOB_BATCH, retry=False)
            return
        self._pending.setdefault(key, received)
        self.queue.add(key)

    def forget(self, key: Key) -> None:
        self._pending.pop(key, None)
        self._compared.pop(key, None)

    def resync(self) -> None:
        """Enqueue every cached job of this replica's (periodically, when rules change, when
        shards are taken, when a cache has first filled from a list), but those of kinds whose
        caches are still filling: the last of them to fill enqueues them."""
        gate = self.gate
        synced: dict[str, bool] = {}
        for key in self.caches.keys():
            if gate is not None and not gate.owns(key[1]):
                continue
            if (ready := synced.get(key[0])) is None:
                ready = synced[key[0]] = self._synced(key[0])
            if ready:
                self.queue.add(key)

    def _synced(self, kind_name: str) -> bool:
        """Whether every cache a kind's reconcile reads has filled from a list."""
        kind, watch = self.caches.get(kind_name)
        return kind is not None and watch is not None and kind.synced and watch.synced

    def work(self) -> None:
        """Take keys until the queue shuts down (one thread per worker)."""
        while True:
            key = self.queue.get()
            if key is None:
                return
            gate = self.gate
            try:
                if gate is None:
                    self.process(key)
                elif gate.enter(key[1]):
                    try:
                        self.process(key)
                    finally:
                        gate.leave(key[1])
                else:   # its shard went to another replica while it waited
                    self._pending.pop(key, None)
                    self.queue.forget(key)
            finally:
                self.queue.done(key)

    def process(self, key: Key) -> None:
        """One reconcile of `key`, and what the queue does with it next."""
        started = time.perf_counter()
        result = "error"
        try:
            requeue = self._sync_retrying_conflicts(key)
            result = "requeue" if requeue is not None else "success"
            self.queue.forget(key)
            if requeue is not None:
                self.queue.add_after(key, max(0.0, requeue))
        except NotYet:
            result = "skipped"
            self.queue.add_after(key, 1.0)
        except kube.Conflict:
            result = "conflict"
            self.queue.add_rate_limited(key)
        except kube.NotFound:
            result = "success"   # deleted meanwhile: its watch event says so too
            self.queue.forget(key)
        except kube.ApiError as err:
            # A 429 (API Priority and Fairness, or a max-inflight limit) says how long to stay
            # away in Retry-After: the key waits at least that, and longer if its backoff is.
            wait = err.retry_after or 0.0
            log.warning("%s/%s/%s: %s; retrying%s", *key, err,
                        f" in at least {wait:g}s (Retry-After)" if wait else "")
            self.queue.add_rate_limited(key, at_least=wait)
        except kube.TransportError as err:
            log.warning("%s/%s/%s: %s; retrying", *key, err)
            self.queue.add_rate_limited(key)
        except Exception:
            log.exception("%s/%s/%s: reconcile failed; retrying", *key)
            self.queue.add_rate_limited(key)
        finally:
            metrics.RECONCILES.labels(key[0], result).inc()
            metrics.RECONCILE_DURATION.labels(key[0]).observe(time.perf_counter() - started)

    def _sync_retrying_conflicts(self, key: Key) -> float | None:
        for attempt in range(CONFLICT_RETRIES):
            try:
                return self.sync(key)
            except kube.Conflict:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                metrics.RECONCILES.labels(key[0], "conflict").inc()
        raise AssertionError("unreachable")

    # -- one reconcile -------------------------------------------------------------------------

    def sync(self, key: Key) -> float | None:
        """Reconcile one job; seconds until it should be looked at again, if time alone may
        change it."""
        kind_name, namespace, name = key
        kind, watch = self.caches.get(kind_name)
        if kind is None or watch is None:
            return None   # the kind left the plan
        if not (kind.synced and watch.synced):
            raise NotYet()
        job = kind.jobs.get((namespace, name))
        now = self.clock()
        if job is None or reconcile.left_alone(kind.spec, job, now) is not None:
            return None   # gone, going, outside the kind's scope or another's: no writes
        writes = reconcile.sync(
            kind.spec, job, watches.candidates(kind.spec, watch.store, job), now,
            lambda: self.client.list(kube.Resource("v1", "pods").path(namespace))["items"])
        if shadow.in_shadow(kind.spec, job):   # the Job controller owns the native policies
            self._compare(kind, key, job, writes, now)
        path = kind.resource.path(namespace, name)
        status_path = self._status_path(kind, path)
        together = status_path != path and kind.status_keeps_metadata
        for target, patch in writes.patches(path, status_path, together):
            job = self._patch(kind, target, patch, objects.resource_version(job))
            if together and writes.commit is not None and not writeback.landed(writes.commit, job):
                log.warning("%s: its /status did not write our annotations; they are written "
                            "apart from now on", _named(kind, namespace, name))
                kind.status_keeps_metadata = False
                job = self._patch(kind, path, writes.commit, objects.resource_version(job))
            if target == path or together:   # this write (or the one after it) was the commit
                self._committed(key, kind, writes)
                if writes.new:
                    self._fault("after", "commit")
        for spec in writes.events:
            self.recorder.emit(job, spec)
        wait = self._act(kind, key, job, writes, now) if writes.journal else None
        times = [t for t in ((writes.requeue_at - now).total_seconds()
                             if writes.requeue_at else None, wait) if t is not None]
        return min(times) if times else None

    def _compare(self, kind: cacheslib.Watched, key: Key, job: dict[str, Any],
                 writes: reconcile.Writes, now: datetime) -> None:
        """Shadow mode: count and report once per Job outcome where the Job controller and
        jobrules decided differently (runtime.shadow judges)."""
        result, found = shadow.judge(kind.spec, job, list(writes.pods), now)
        decided = shadow.theirs(job)
        if result in ("none", "wait") or decided is None or self._compared.get(key) == decided.text():
            return
        self._compared[key] = decided.text()
        metrics.NATIVE_COMPARISONS.labels(kind.spec.name, result).inc()
        if found is None:
            return
        metrics.NATIVE_DISAGREEMENTS.labels(kind.spec.name, found.rule).inc()
        log.warning("%s: %s", _job(kind, job), found.note())
        if kind.spec.status.events:
            self.recorder.emit(job, shadow.event(job, found))

    # -- actions -------------------------------------------------------------------------------

    def _act(self, kind: cacheslib.Watched, key: Key, job: dict[str, Any],
             writes: reconcile.Writes, now: datetime) -> float | None:
        """Carry out the open intents as runtime.journal says, sending each request it asks
        for; seconds until a waiting step should be looked at again."""
        path = kind.resource.path(*key[1:])
        run = journal.Pass(kind.spec, writes.pods, now, path,
                           self._status_path(kind, path) != path,
                           self._related(journal.lookups(kind.spec, writes.journal, job, now)))
        progress = journal.start(writes.journal)
        answer: journal.Answer | None = None
        error: Exception | None = None
        while True:
            progress, todo, reports = journal.advance(run, progress, job, answer)
            for report in reports:
                self._report(kind, job, report)
            if isinstance(todo, journal.Stop):
                if todo.retry and error is not None:
                    raise error
                self._intents_open[key] = todo.open
                return todo.wait
            if todo.clear:
                self._fault("before", "clear")
            try:
                job = self._send(kind, job, todo)
                answer, error = journal.Answer(200), None
            except kube.ApiError as err:
                said = f"{err.status} {err.reason}: {err.message}"
                answer, error = journal.Answer(err.status, said), err
            except kube.TransportError as err:
                answer, error = journal.Answer(0, str(err)), err
            if todo.part == "journal":
                metrics.ACTION_WRITES.labels(kind.spec.name, "journal").inc()
            elif answer.ok or answer.status in todo.done_on:
                metrics.ACTION_WRITES.labels(kind.spec.name, "effect").inc()
                self._sent += 1
                self._fault("after", f"act:{self._sent}")

    def _related(self, lookups: tuple[journal.Lookup, ...]) -> dict[journal.Lookup, list[Any]]:
        """The job's objects of other kinds that the journal's steps write, listed live (a
        kind whose API is not served has none)."""
        found: dict[journal.Lookup, list[Any]] = {}
        for path, selector in lookups:
            try:
                found[path, selector] = self.client.list(
                    path, query=[("labelSelector", selector)])["items"]
            except kube.ApiError as err:
                if err.status != 404:
                    raise
                found[path, selector] = []
        return found

    def _send(self, kind: cacheslib.Watched, job: dict[str, Any],
              todo: journal.Send) -> dict[str, Any]:
        """Send one request; the job as it now is (a guarded patch of it answers it)."""
        if todo.resource_version is not None:
            return self._patch(kind, todo.path, todo.body, todo.resource_version)
        if todo.method == "PATCH":   # another object's field (`set ... on ...`)
            self.client.merge_patch(todo.path, todo.body)
        else:
            self.client.request(todo.method, todo.path, todo.body)
        return job

    def _report(self, kind: cacheslib.Watched, job: dict[str, Any], report: journal.Report) -> None:
        intent = report.intent
        if isinstance(report, journal.Done):
            log.info("%s: %s done (%s)", _job(kind, job), intent.action, _cause(intent))
            metrics.ACTIONS.labels(kind.spec.name, intent.action, "done").inc()
            if kind.spec.status.events:
                metrics.ACTION_WRITES.labels(kind.spec.name, "event").inc()
                self.recorder.emit(job, writeback.action_event(job, intent))
            return
        log.warning("%s: %s dropped: %s (%s)", _job(kind, job), intent.action, report.why,
                    _cause(intent))
        metrics.ACTIONS.labels(kind.spec.name, intent.action, "dropped").inc()
        if kind.spec.status.events:   # `no events`: none at all (and no RBAC for them)
            metrics.ACTION_WRITES.labels(kind.spec.name, "event").inc()
            self.recorder.emit(job, writeback.action_failed_event(job, intent, report.why))

    # -- writes ------------------------------------------------------------------------------

    def _patch(self, kind: cacheslib.Watched, path: str, patch: Mapping[str, Any],
               resource_version: str | None) -> dict[str, Any]:
        """A guarded merge patch, its answer written through to the cache (so the next
        reconcile sees our write even before its watch event comes)."""
        log.debug("patch %s %s", path, patch)
        try:
            written = self.client.merge_patch(path, dict(patch), resource_version=resource_version)
        except kube.Conflict:
            self._refresh(kind, path)
            raise
        kind.jobs.put(written)
        return written

    def _refresh(self, kind: cacheslib.Watched, path: str) -> None:
        """After a 409 the cache is behind: read the job now rather than wait for its watch."""
        try:
            kind.jobs.put(self.client.get(path))
        except (kube.ApiError, kube.TransportError):
            pass

    def _status_path(self, kind: cacheslib.Watched, path: str) -> str:
        if kind.status_subresource is None:
            _, kind.status_subresource = informer.served(
                self.client, kind.spec.group, kind.spec.version, kind.spec.plural)
        return f"{path}/status" if kind.status_subresource else path

    def _committed(self, key: Key, kind: cacheslib.Watched, writes: reconcile.Writes) -> None:
        """The commit is written: what it decided is news, logged once (a replay after a crash
        may log it again; nothing before the write is logged as done)."""
        received = self._pending.pop(key, None)
        job = _named(kind, *key[1:])
        if writes.verdict_changed:
            verdict = writes.evaluation.verdict
            log.info("%s: verdict %s%s (reason %s, rule %s)", job,
                     f"{writes.previous_phase} -> " if writes.previous_phase else "", verdict.phase,
                     verdict.reason or "none", verdict.rule or "none")
        for intent in writes.new:
            log.info("%s: %s scheduled (%s)", job, intent.action, _cause(intent))
        for a in writes.evaluation.actions:
            if a.status == "audited":   # decided, recorded, not done: the policy is in audit
                metrics.ACTIONS.labels(kind.spec.name, a.action, "audited").inc()
                log.info("%s: would %s%s (policy %s, rule %s; audit: not done)", job, a.action,
                         f" {a.target.pod}" if a.target.pod else "", a.policy, a.rule)
        if writes.verdict_changed:
            verdict = writes.evaluation.verdict
            metrics.verdict_changed(kind.spec.name, verdict.phase, verdict.cause)
            if received is not None:
                metrics.VERDICT_LATENCY.observe(time.monotonic() - received)

    def _fault(self, when: str, point: str) -> None:
        """Test hooks (JOBRULES_TEST_HOOKS=1): exit at once at `JOBRULES_FAULT`'s point."""
        if self.settings.fault and self.settings.fault == f"exit-{when}:{point}":
            log.error("JOBRULES_FAULT=%s: exiting", self.settings.fault)
            logging.shutdown()
            os._exit(137)


def _job(kind: cacheslib.Watched, job: Mapping[str, Any]) -> str:
    return _named(kind, objects.namespace(job), objects.name(job))


def _named(kind: cacheslib.Watched, namespace: Any, name: Any) -> str:
    """How the log names a job: its kind's name in the rules, then namespace/name."""
    return f"{kind.spec.name} {namespace}/{name}"


def _cause(intent: intents.Intent) -> str:
    """Why an action is taken, for the log: the policy's reason and rule, and its target."""
    target = "".join(f", {what} {value}" for what, value in (("task", intent.task),
                                                               ("pod", intent.pod)) if value)
    return f"policy {intent.policy}, reason {intent.reason or 'none'}, rule {intent.rule}{target}"
