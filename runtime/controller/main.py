"""The controller process: `python -m runtime.controller` (console script `jobrules-controller`).

It watches every kind the plan declares and the pods they may own, keeps them in projected
caches, and reconciles each job that changed: `runtime.reconcile` decides what to write (the
state and verdict annotations, the condition and status fields, Events) and this shell writes
it, guarded by the resourceVersion read, and requeues the job for when time alone may change its
verdict. Workers start only once leading (when leader election is on) and run a kind's jobs only
once its caches have synced. A new plan file is picked up without a restart. docs/controller.md
says what is written where, and how each fault is handled.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from runtime import actions, evaluator, functions, intents, plan, projection, reconcile
from runtime import reloading, state, templates, writeback
from runtime import pods as pods_lib
from runtime import store as storelib
from runtime.controller import events, health, informer, kube, leader, metrics
from runtime.controller.settings import ControllerSettings, SettingsError
from runtime.workqueue import WorkQueue

log = logging.getLogger("jobrules.controller")

Key = tuple[str, str, str]   # (kind name, namespace, name)
MAX_ATTEMPTS = 5             # tries of a step the API server refuses for good (403, 422)
STATE, VERDICT = projection.OURS[0], projection.OURS[1]


@dataclass
class _Kind:
    """A declared kind at run time: its rules, its job cache and watches, its pod watch."""

    spec: plan.Kind
    resource: kube.Resource
    jobs: storelib.Store
    informers: list[informer.Informer]
    pods: str                       # the selector of the pod watch it reads from
    status_subresource: bool | None = None   # learnt from discovery on first use

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)


@dataclass
class _PodWatch:
    selector: str
    tree: Any
    store: storelib.Store
    informers: list[informer.Informer]
    kinds: set[str] = field(default_factory=set)

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)


class Controller:
    def __init__(self, settings: ControllerSettings, client: kube.Client,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock
        self.queue: WorkQueue[Key] = WorkQueue(metrics=metrics.WorkQueueMetrics("jobrules"))
        self.kinds: dict[str, _Kind] = {}
        self.pod_watches: dict[str, _PodWatch] = {}
        self.plan: plan.Plan | None = None
        self.recorder = events.Recorder(client, settings.identity,
                                        on_drop=lambda why: metrics.EVENTS_DROPPED.labels(why).inc())
        self.stopping = threading.Event()
        self.leading = threading.Event()
        self._lock = threading.RLock()        # kinds and pod watches, across plan reloads
        self._pending: dict[Key, float] = {}  # first pod event of a change not yet committed
        self._plans = reloading.Reloading(
            "plan", (settings.plan_path,), lambda: plan.load_file(settings.plan_path),
            settings.reload_interval, self._plan_loaded,
            lambda err, kept: log.error("plan %s not loaded (%s): %s", settings.plan_path,
                                        "keeping the previous one" if kept else "none yet", err))
        self._workers: list[threading.Thread] = []
        self._elector: leader.Elector | None = None
        self._sent = 0                          # action requests sent (for the test hooks)
        self._intents_open: dict[Key, int] = {}
        metrics.INTENTS_OPEN.set_function(lambda: sum(self._intents_open.values()))

    # -- the process -------------------------------------------------------------------------

    def run(self) -> int:
        """Run until `stop`; the exit status."""
        if self._plans.get() is None:
            log.error("no usable plan at %s: not starting", self.settings.plan_path)
            return 2
        try:
            server = health.serve(self.settings.health, self) if self.settings.health else None
        except OSError as err:
            log.error("cannot serve health and metrics on %s: %s", self.settings.health, err)
            return 2
        self.recorder.start()
        threading.Thread(target=self._reload_loop, name="plan-reload", daemon=True).start()
        threading.Thread(target=self._resync_loop, name="resync", daemon=True).start()
        if self.settings.leader_elect:
            self._elector = leader.Elector(
                self.client, self.client.api, namespace=self.settings.lease_namespace,
                name=self.settings.lease_name, identity=self.settings.identity,
                lease_duration=self.settings.lease_duration,
                renew_deadline=self.settings.renew_deadline,
                retry_period=self.settings.retry_period,
                on_started=self._lead, on_lost=self._lost).start()
        else:
            self._lead()
        self.stopping.wait()
        log.info("stopping")
        self.queue.shut_down_with_drain(timeout=10.0)
        for worker in self._workers:
            worker.join(timeout=10.0)
        if self._elector is not None:
            self._elector.release()
        self.recorder.stop()
        if server is not None:
            server.shutdown()
        return 0

    def stop(self) -> None:
        self.stopping.set()

    def _lead(self) -> None:
        self.leading.set()
        metrics.LEADER.set(1)
        settings = self.settings
        if settings.webhook_secret is not None and settings.webhook_service is not None:
            # Imported here: the certificate library is an extra ('jobrules[certs]'), needed by
            # this mode only (the settings refused the mode without it).
            from runtime.controller import serving
            keeper = serving.Keeper(self.client, secret=settings.webhook_secret,
                                    service=settings.webhook_service,
                                    configuration=settings.webhook_configuration)
            threading.Thread(target=keeper.run, args=(self.stopping,), name="serving-certificate",
                             daemon=True).start()
        for n in range(self.settings.workers):
            worker = threading.Thread(target=self._work, name=f"worker-{n}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self.resync()

    def _lost(self) -> None:
        log.error("lost leadership: exiting so that no stale worker writes on")
        metrics.LEADER.set(0)
        os._exit(1)

    @property
    def ready(self) -> bool:
        with self._lock:
            informers = self._all_informers()
        return self.plan is not None and all(i.ready for i in informers)

    def checks(self) -> list[tuple[str, bool, str]]:
        """(name, ok, detail) of each readiness check, for /readyz."""
        with self._lock:
            out = [("plan", self.plan is not None,
                    self.plan.digest[:12] if self.plan else "not loaded")]
            for i in self._all_informers():
                detail = "synced" if i.synced.is_set() else (i.error or "listing")
                out.append((f"informer {i.name}", i.ready, detail))
        return out

    def _all_informers(self) -> list[informer.Informer]:
        return ([i for k in self.kinds.values() for i in k.informers]
                + [i for w in self.pod_watches.values() for i in w.informers])

    # -- plans -------------------------------------------------------------------------------

    def _plan_loaded(self, previous: plan.Plan | None, new: plan.Plan) -> None:
        if previous is not None:
            metrics.PLAN_INFO.labels(previous.digest, str(previous.version)).set(0)
        metrics.PLAN_INFO.labels(new.digest, str(new.version)).set(1)
        log.info("plan loaded: digest %s, %d kinds", new.digest[:12], len(new.kinds))
        self.apply(new)

    def _reload_loop(self) -> None:
        while not self.stopping.wait(self.settings.reload_interval):
            self._plans.get()

    def apply(self, new: plan.Plan) -> None:
        """Watch what `new` declares: start the watches of new kinds, stop those of kinds it no
        longer has, keep the caches of the others (and reconcile their jobs under the new rules)."""
        with self._lock:
            watches: dict[str, list[plan.Kind]] = {}
            for spec in new.kinds:
                watches.setdefault(_pod_selector(spec), []).append(spec)
            for selector, watch in list(self.pod_watches.items()):
                tree = projection.pod_tree(watches.get(selector, []))
                if selector not in watches or tree != watch.tree:
                    self._stop_watch(watch)
                    del self.pod_watches[selector]
            for selector, specs in watches.items():
                if selector not in self.pod_watches:
                    self.pod_watches[selector] = self._pod_watch(selector, specs)
                self.pod_watches[selector].kinds = {s.name for s in specs}
            wanted = {spec.name: spec for spec in new.kinds}
            for name, kind in list(self.kinds.items()):
                now_declared = wanted.get(name)
                if now_declared is None or _resource(now_declared) != kind.resource \
                        or projection.of_kind(now_declared).job != projection.of_kind(kind.spec).job:
                    self._stop_watch(kind)
                    del self.kinds[name]
            for name, declared in wanted.items():
                if name in self.kinds:
                    self.kinds[name].spec = declared
                    self.kinds[name].pods = _pod_selector(declared)
                else:
                    self.kinds[name] = self._kind(declared)
            self.plan = new
        self.resync()

    def _stop_watch(self, watched: _Kind | _PodWatch) -> None:
        for i in watched.informers:
            i.stop()

    def _kind(self, spec: plan.Kind) -> _Kind:
        tree = projection.of_kind(spec).job
        indexes: dict[str, storelib.IndexFn] = {"uid": _uid, "ns": _namespace}
        if spec.pod_labels:
            template = spec.pod_labels[0][1]
            indexes["selector"] = lambda obj: [(storelib.key_of(obj)[0], _render(template, obj))]
        jobs = storelib.Store(lambda obj: projection.project(obj, tree), _significant(spec),
                              indexes)
        resource = _resource(spec)
        kind = _Kind(spec, resource, jobs, [], _pod_selector(spec))
        def changed(change: storelib.Change) -> None:
            self._job_changed(spec.name, change)
        kind.informers = [self._informer(f"{spec.name}{'@' + ns if ns else ''}",
                                         resource.path(ns or None), jobs, changed,
                                         spec.selector or "", namespace=ns or None)
                          for ns in self.settings.namespaces or ("",)]
        metrics.RESOURCE_SERVED.labels(spec.name).set_function(
            lambda: 0 if any(i.missing for i in kind.informers) else 1)
        return kind

    def _pod_watch(self, selector: str, specs: list[plan.Kind]) -> _PodWatch:
        tree = projection.pod_tree(specs)
        indexes: dict[str, storelib.IndexFn] = {"owner": storelib.owner_uids, "ns": _namespace}
        if selector:
            indexes["label"] = storelib.label_values(selector)
        pods = storelib.Store(lambda obj: projection.project(obj, tree), _without_version, indexes)
        watch = _PodWatch(selector, tree, pods, [])
        resource = kube.Resource("v1", "pods")

        def changed(change: storelib.Change) -> None:
            self._pod_changed(watch, change)
        watch.informers = [self._informer(f"pods{'/' + selector if selector else ''}"
                                          f"{'@' + ns if ns else ''}",
                                          resource.path(ns or None), pods, changed,
                                          selector, ns or None)
                           for ns in self.settings.namespaces or ("",)]
        return watch

    def _informer(self, name: str, path: str, store: storelib.Store, on_change: informer.Handler,
                  selector: str = "", namespace: str | None = None) -> informer.Informer:
        def observe(what: str, reason: str) -> None:
            if what == "relist":
                metrics.RELISTS.labels(name).inc()
            else:
                metrics.WATCH_RESTARTS.labels(name, reason).inc()
        metrics.STORE_OBJECTS.labels(name).set_function(lambda: len(store))
        metrics.STORE_BYTES.labels(name).set_function(lambda: store.bytes)
        return informer.Informer(self.client, name, path, store, on_change, selector=selector,
                                 namespace=namespace, read_timeout=self.settings.read_timeout,
                                 on_event=observe).start()

    # -- events from the caches ----------------------------------------------------------------

    def _job_changed(self, kind: str, change: storelib.Change) -> None:
        if change.obj is None:
            self._pending.pop((kind, *change.key), None)
            return
        if change.matters:
            self.queue.add((kind, *change.key))

    def _pod_changed(self, watch: _PodWatch, change: storelib.Change) -> None:
        received = time.monotonic()
        with self._lock:
            kinds = [self.kinds[name] for name in watch.kinds if name in self.kinds]
        if not change.matters:
            return
        for obj in (change.obj, change.old):
            if obj is None:
                continue
            for kind in kinds:
                for key in _owners(kind, obj):
                    job = (kind.spec.name, *key)
                    self._pending.setdefault(job, received)
                    self.queue.add(job)

    def resync(self) -> None:
        """Enqueue every cached job (periodically, and when rules change)."""
        with self._lock:
            keys = [(name, *key) for name, kind in self.kinds.items() for key in kind.jobs.keys()]
        for key in keys:
            self.queue.add(key)

    def _resync_loop(self) -> None:
        while not self.stopping.wait(self.settings.resync * random.uniform(0.9, 1.1)):
            self.resync()

    # -- reconciling ---------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self._process(key)
            finally:
                self.queue.done(key)

    def _process(self, key: Key) -> None:
        name = key[0]
        started = time.perf_counter()
        result = "error"
        try:
            requeue = self.sync(key)
            result = "requeue" if requeue is not None else "success"
            self.queue.forget(key)
            if requeue is not None:
                self.queue.add_after(key, max(0.0, requeue))
        except _NotYet:
            result = "skipped"
            self.queue.add_after(key, 1.0)
        except kube.Conflict:
            result = "conflict"
            self.queue.add_rate_limited(key)
        except kube.NotFound:
            result = "success"   # deleted meanwhile: its watch event says so too
            self.queue.forget(key)
        except (kube.ApiError, kube.TransportError) as err:
            log.warning("%s/%s/%s: %s; retrying", *key, err)
            self.queue.add_rate_limited(key)
        except Exception:
            log.exception("%s/%s/%s: reconcile failed; retrying", *key)
            self.queue.add_rate_limited(key)
        finally:
            metrics.RECONCILES.labels(name, result).inc()
            metrics.RECONCILE_DURATION.labels(name).observe(time.perf_counter() - started)

    def sync(self, key: Key) -> float | None:
        """Reconcile one job; seconds until it should be looked at again, if time alone may
        change it."""
        kind_name, namespace, name = key
        with self._lock:
            kind = self.kinds.get(kind_name)
            watch = self.pod_watches.get(kind.pods) if kind is not None else None
        if kind is None or watch is None:
            return None   # the kind left the plan
        if not (kind.synced and watch.synced):
            raise _NotYet()
        job = kind.jobs.get((namespace, name))
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp") \
                or not kind.spec.covers(job):   # outside the kind's scope: it has no rules
            return None
        now = self.clock()
        candidates = _candidates(kind, watch.store, job)
        pods = evaluator.pods_of(kind.spec, job, candidates, now)
        writes = reconcile.reconcile(kind.spec, job, pods, now)
        if any(i.pod is None and i.uid is not None for i in writes.new):
            # An action about a pod the cache does not have: a pod relabelled out of the watch
            # looks deleted there. Decide again on a live list, where a pod that still exists
            # is not gone.
            pods = self._live_pods(kind, job, now)
            writes = reconcile.reconcile(kind.spec, job, pods, now)
        path = kind.resource.path(namespace, name)
        rv = (job.get("metadata") or {}).get("resourceVersion")
        status_path = self._status_path(kind, path)
        if writes.commit is not None or (writes.status is not None and status_path == path):
            patch = _merged(writes.commit or {"metadata": {"resourceVersion": rv}},
                            writes.status if status_path == path else None)
            written = self._patch(kind, path, patch)
            rv = written["metadata"]["resourceVersion"]
            job = written
            self._committed(key, kind, writes)
            if writes.new:
                self._fault("after", "commit")
        if writes.status is not None and status_path != path:
            job = self._patch(kind, status_path, writes.status, rv)
            rv = job["metadata"]["resourceVersion"]
        for spec in writes.events:
            self.recorder.emit(job, spec)
        wait = self._act(kind, key, job, pods, writes.journal, now) if writes.journal else None
        times = [t for t in ((writes.requeue_at - now).total_seconds()
                             if writes.requeue_at else None, wait) if t is not None]
        return min(times) if times else None

    # -- actions -------------------------------------------------------------------------------

    def _act(self, kind: _Kind, key: Key, job: dict[str, Any], pods: list[Mapping[str, Any]],
             journal: tuple[intents.Intent, ...], now: datetime) -> float | None:
        """Carry out the open intents, step by step; seconds until a waiting step should be
        looked at again.

        The journal on the job moves with the effects: a step that patches the job carries the
        advanced cursor in the same patch, and any other step with effects and more to come is
        followed by a guarded patch of the cursor, so a replay never redoes a step that a later
        one undid (`set spec.suspend = true`, then `= false`). Done intents leave the journal
        with one last guarded patch."""
        path = kind.resource.path(*key[1:])
        subresource = self._status_path(kind, path) != path
        ahead: list[intents.Intent | None] = list(journal)   # the journal as it will be
        written = list(ahead)                                # as the job carries it now
        wait: float | None = None
        stamp = functions.rfc3339(now)
        for n, intent in enumerate(journal):
            steps = _steps(kind.spec, intent)
            while True:
                nxt = actions.next_step(kind.spec, intent, job, pods, now,
                                        status_subresource=subresource)
                if nxt.failed is not None:
                    self._dropped(kind, job, intent, nxt.failed)
                    ahead[n] = None
                    break
                if nxt.wait is not None:
                    ahead[n] = intent
                    wait = nxt.wait if wait is None else min(wait, nxt.wait)
                    break
                if intent.step >= steps:          # a recorded action, or nothing left to do
                    self._done(kind, job, intent)
                    ahead[n] = None
                    break
                advanced = intent.advanced(stamp)
                ahead[n] = advanced if advanced.step < steps else None
                if nxt.requests:
                    try:
                        job, carried = self._send(kind, path, job, nxt.requests, _open(ahead))
                    except (kube.Denied, kube.Invalid) as err:   # permanent: a few tries, then drop
                        intent = replace(intent, attempts=intent.attempts + 1)
                        ahead[n] = intent if intent.attempts < MAX_ATTEMPTS else None
                        if ahead[n] is None:
                            self._dropped(kind, job, intent, str(err))
                        else:
                            wait = 1.0 if wait is None else min(wait, 1.0)
                        break
                    if carried:
                        written = list(ahead)
                    elif ahead[n] is not None:    # effects done, more steps to come
                        job = self._write_journal(kind, path, job, ahead)
                        written = list(ahead)
                intent = advanced
        if _open(ahead) != _open(written):
            self._fault("before", "clear")
            job = self._write_journal(kind, path, job, ahead)
        self._intents_open[key] = len(_open(ahead))
        return wait

    def _write_journal(self, kind: _Kind, path: str, job: dict[str, Any],
                       journal: list[intents.Intent | None]) -> dict[str, Any]:
        metrics.ACTION_WRITES.labels(kind.spec.name, "journal").inc()
        return self._patch(kind, path, {"metadata": {"annotations": {
            intents.ANNOTATION: intents.encode(_open(journal))}}},
            job["metadata"]["resourceVersion"])

    def _send(self, kind: _Kind, path: str, job: dict[str, Any],
              requests: tuple[actions.Request, ...],
              journal: tuple[intents.Intent, ...]) -> tuple[dict[str, Any], bool]:
        """Send a step's requests; the job as the last of them left it, and whether one of them
        (a guarded patch of the job itself) carried `journal` with it."""
        carried = False
        for request in requests:
            try:
                if request.guarded:
                    body = request.body
                    if request.path == path:
                        body = _merged(body, {"metadata": {"annotations": {
                            intents.ANNOTATION: intents.encode(journal)}}})
                        carried = True
                    job = self._patch(kind, request.path, body,
                                      job["metadata"]["resourceVersion"])
                else:
                    self.client.request(request.method, request.path, request.body)
            except kube.ApiError as err:
                if err.status not in request.done_on:
                    raise
            self._sent += 1
            metrics.ACTION_WRITES.labels(kind.spec.name, "effect").inc()
            self._fault("after", f"act:{self._sent}")
        return job, carried

    def _done(self, kind: _Kind, job: dict[str, Any], intent: intents.Intent) -> None:
        metrics.ACTIONS.labels(kind.spec.name, intent.action, "done").inc()
        if kind.spec.status.events:
            metrics.ACTION_WRITES.labels(kind.spec.name, "event").inc()
            self.recorder.emit(job, writeback.action_event(job, intent))

    def _dropped(self, kind: _Kind, job: dict[str, Any], intent: intents.Intent, why: str) -> None:
        log.warning("%s/%s: %s dropped: %s", (job.get("metadata") or {}).get("namespace"),
                    (job.get("metadata") or {}).get("name"), intent.action, why)
        metrics.ACTIONS.labels(kind.spec.name, intent.action, "dropped").inc()
        if kind.spec.status.events:   # `no events`: none at all (and no RBAC for them)
            metrics.ACTION_WRITES.labels(kind.spec.name, "event").inc()
            self.recorder.emit(job, writeback.action_failed_event(job, intent, why))

    def _live_pods(self, kind: _Kind, job: dict[str, Any], now: datetime) -> list[Mapping[str, Any]]:
        """The job's pods read from the API server, and those its state knows that still exist
        though they no longer belong to it (relabelled): not deleted, so not an event."""
        namespace = storelib.key_of(job)[0]
        live = self.client.list(kube.Resource("v1", "pods").path(namespace))["items"]
        members = evaluator.pods_of(kind.spec, job, live, now)
        stored = state.decode(((job.get("metadata") or {}).get("annotations") or {}).get(
            state.ANNOTATION)).state
        kept = {id(p) for p in members}
        known = [p for p in live if id(p) not in kept
                 and pods_lib.digest((p.get("metadata") or {}).get("uid") or "") in stored.pods]
        return [*members, *known]

    def _fault(self, when: str, point: str) -> None:
        """Test hooks (JOBRULES_TEST_HOOKS=1): exit at once at `JOBRULES_FAULT`'s point."""
        if self.settings.fault and self.settings.fault == f"exit-{when}:{point}":
            log.error("JOBRULES_FAULT=%s: exiting", self.settings.fault)
            logging.shutdown()
            os._exit(137)

    def _committed(self, key: Key, kind: _Kind, writes: reconcile.Writes) -> None:
        received = self._pending.pop(key, None)
        if writes.verdict_changed:
            metrics.VERDICTS.labels(kind.spec.name, writes.evaluation.verdict.phase).inc()
            if received is not None:
                metrics.VERDICT_LATENCY.observe(time.monotonic() - received)

    def _patch(self, kind: _Kind, path: str, patch: dict[str, Any],
               resource_version: str | None = None) -> dict[str, Any]:
        """A guarded merge patch, its answer written through to the cache (so the next
        reconcile sees our write even before its watch event comes)."""
        log.debug("patch %s %s", path, patch)
        try:
            written = self.client.merge_patch(path, patch, resource_version=resource_version)
        except kube.Conflict:
            self._refresh(kind, path)
            raise
        kind.jobs.put(written)
        return written

    def _refresh(self, kind: _Kind, path: str) -> None:
        """After a 409 the cache is behind: read the job now rather than wait for its watch."""
        try:
            kind.jobs.put(self.client.get(path))
        except (kube.ApiError, kube.TransportError):
            pass

    def _status_path(self, kind: _Kind, path: str) -> str:
        if kind.status_subresource is None:
            _, kind.status_subresource = informer.served(
                self.client, kind.spec.group, kind.spec.version, kind.spec.plural)
        return f"{path}/status" if kind.status_subresource else path


def _open(journal: list[intents.Intent | None]) -> tuple[intents.Intent, ...]:
    return tuple(i for i in journal if i is not None)


def _steps(spec: plan.Kind, intent: intents.Intent) -> int:
    recipe = spec.recipe(intent.action)
    return 0 if isinstance(recipe, str) else len(recipe)


class _NotYet(Exception):
    """The kind's caches have not synced yet: a reconcile now would read pods as gone."""


# ---------------------------------------------------------------------------------------------
# How a kind finds its pods


def _resource(spec: plan.Kind) -> kube.Resource:
    return kube.Resource(spec.api_version, spec.plural)


def _pod_selector(spec: plan.Kind) -> str:
    """The pod watch a kind reads from: pods with its first selector label's key, else all."""
    return spec.pod_labels[0][0] if spec.pod_labels else ""


_SEARCH = templates.searcher(functions.options(datetime.now(timezone.utc)))


def _render(template: plan.Template, job: Any) -> str | None:
    return templates.render_text(template, job, {}, _SEARCH)


def _uid(obj: Any) -> list[Any]:
    return [(obj.get("metadata") or {}).get("uid")]


def _namespace(obj: Any) -> list[str]:
    return [storelib.key_of(obj)[0]]


def _candidates(kind: _Kind, pods: storelib.Store, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The cached pods that may belong to the job (runtime.pods.pods_of decides)."""
    namespace = storelib.key_of(job)[0]
    if kind.spec.pod_labels:
        return pods.lookup("label", (namespace, _render(kind.spec.pod_labels[0][1], job)))
    if kind.spec.pods_owned:
        return pods.lookup("owner", (job.get("metadata") or {}).get("uid"))
    return pods.lookup("ns", namespace)


def _owners(kind: _Kind, pod: Any) -> list[storelib.Key]:
    """The cached jobs of `kind` a pod may belong to."""
    namespace = storelib.key_of(pod)[0]
    if kind.spec.pod_labels:
        key = kind.spec.pod_labels[0][0]
        value = ((pod.get("metadata") or {}).get("labels") or {}).get(key)
        return kind.jobs.lookup_keys("selector", (namespace, value))
    if kind.spec.pods_owned:
        return [k for uid in storelib.owner_uids(pod) for k in kind.jobs.lookup_keys("uid", uid)]
    return kind.jobs.lookup_keys("ns", namespace)


def _significant(spec: plan.Kind) -> Callable[[Any], Any]:
    """A job without what our own writes change (its version, our annotations and condition):
    a change there alone calls for no reconcile."""
    ours = spec.status.condition

    def significant(job: Any) -> Any:
        meta = dict(job.get("metadata") or {})
        meta.pop("resourceVersion", None)
        meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items()
                               if k not in projection.OURS}
        out = {**job, "metadata": meta}
        status = job.get("status")
        if isinstance(status, dict) and ours is not None:
            conditions = status.get("conditions")
            if isinstance(conditions, list):
                out["status"] = {**status, "conditions": [
                    c for c in conditions if not (isinstance(c, dict) and c.get("type") == ours)]}
        return out
    return significant


def _without_version(obj: Any) -> Any:
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    return {**obj, "metadata": meta}


def _merged(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """Two merge patches as one (the status fields of a kind without a /status subresource
    go with the commit: one write)."""
    if extra is None:
        return base
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------------------
# Entry point


def main(argv: Iterable[str] | None = None) -> int:
    try:
        settings = ControllerSettings.from_env(os.environ)
    except SettingsError as err:
        print(f"jobrules-controller: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        client = (kube.Client.from_kubeconfig(settings.kubeconfig, on_response=metrics.count_api_request)
                  if settings.kubeconfig else kube.Client.in_cluster(on_response=metrics.count_api_request))
    except kube.ConfigError as err:
        print(f"jobrules-controller: {err}", file=sys.stderr)
        return 2
    controller = Controller(settings, client)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: controller.stop())
    return controller.run()
