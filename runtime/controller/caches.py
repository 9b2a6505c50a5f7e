"""The controller's caches: one job watch per declared kind, the pod watches they share, kept in
projected stores, and the handlers that turn their changes into work.

What is watched and which changes matter is decided by runtime.watches (pure); this module
starts and stops the informers as plans come and go, and hands every change that matters to
`enqueue`, with the time a pod's change was received (for the verdict's latency), and every job
gone to `forget`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime import plan, projection, reconcile, watches
from runtime import store as storelib
from runtime.controller import informer, kube, metrics

log = logging.getLogger("jobrules.controller")

Key = tuple[str, str, str]   # (kind name, namespace, name)
# (job, when a pod's change was received; None for the job's own change, which may wait a
# little for more: Worker.enqueue)
Enqueue = Callable[[Key, "float | None"], None]


@dataclass
class Watched:
    """A declared kind at run time: its rules, its job cache and watches, its pod watch."""

    spec: plan.Kind
    resource: kube.Resource
    jobs: storelib.Store
    informers: list[informer.Informer]
    pods: str                       # the selector of the pod watch it reads from
    status_subresource: bool | None = None   # learnt from discovery on first use
    status_keeps_metadata: bool = False      # our commit rides on the /status write
    handler: informer.Handler | None = None  # what its informers call on a change

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)


@dataclass
class PodWatch:
    selector: str
    tree: Any
    store: storelib.Store
    informers: list[informer.Informer]
    kinds: set[str] = field(default_factory=set)
    handler: informer.Handler | None = None

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)


class Caches:
    """Every watch a plan needs; `apply` a new plan to move to its watches."""

    def __init__(self, client: kube.Client, enqueue: Enqueue, forget: Callable[[Key], None], *,
                 namespaces: tuple[str, ...] = (), read_timeout: float = 70.0,
                 start: bool = True, on_synced: Callable[[], None] = lambda: None) -> None:
        self.client = client
        self.enqueue = enqueue
        self.on_synced = on_synced           # an informer's first list has filled its store
        self.forget = forget                 # a job gone from its cache
        self.namespaces = namespaces
        self.read_timeout = read_timeout
        self.start = start                   # start the informers (tests fill stores by hand)
        self.kinds: dict[str, Watched] = {}
        self.pod_watches: dict[str, PodWatch] = {}
        self.lock = threading.RLock()        # kinds and pod watches, across plan reloads
        # The shards the informers ask the API server for (runtime.shards.selector; "": all),
        # and whether it honours the ask (None: not known yet; False: it lists everything, and
        # the worker's filter alone keeps to this replica's shards).
        self.shard_selector = ""
        self.server_shards: bool | None = None

    def get(self, name: str) -> tuple[Watched | None, PodWatch | None]:
        """A kind and the pod watch it reads from (None, None once it left the plan)."""
        with self.lock:
            kind = self.kinds.get(name)
            return kind, self.pod_watches.get(kind.pods) if kind is not None else None

    def keys(self) -> list[Key]:
        with self.lock:
            return [(name, *key) for name, kind in self.kinds.items() for key in kind.jobs.keys()]

    def informers(self) -> list[informer.Informer]:
        with self.lock:
            return ([i for k in self.kinds.values() for i in k.informers]
                    + [i for w in self.pod_watches.values() for i in w.informers])

    def apply(self, new: plan.Plan) -> None:
        """Watch what `new` declares: start the watches of new kinds, stop those of kinds it no
        longer has, keep the caches of the others (their jobs are then reconciled under the new
        rules)."""
        with self.lock:
            wanted_pods = watches.pod_watches(new.kinds)
            for selector, watch in list(self.pod_watches.items()):
                tree = projection.pod_tree(wanted_pods.get(selector, []))
                if selector not in wanted_pods or tree != watch.tree:
                    _stop(watch.informers)
                    del self.pod_watches[selector]
            for selector, specs in wanted_pods.items():
                if selector not in self.pod_watches:
                    self.pod_watches[selector] = self._pod_watch(selector, specs)
                self.pod_watches[selector].kinds = {s.name for s in specs}
            wanted = {spec.name: spec for spec in new.kinds}
            for name, kind in list(self.kinds.items()):
                declared = wanted.get(name)
                if declared is None or watches.rewatch(kind.spec, declared):
                    _stop(kind.informers)
                    del self.kinds[name]
            for name, declared in wanted.items():
                if name in self.kinds:
                    self.kinds[name].spec = declared
                    self.kinds[name].pods = watches.pod_selector(declared)
                else:
                    self.kinds[name] = self._kind(declared)

    def _kind(self, spec: plan.Kind) -> Watched:
        jobs = watches.job_store(spec)
        resource = kube.Resource(spec.api_version, spec.plural)
        kind = Watched(spec, resource, jobs, [], watches.pod_selector(spec),
                       status_keeps_metadata=reconcile.status_keeps_metadata(spec.group))

        def changed(change: storelib.Change) -> None:
            if change.obj is None:
                self.forget((spec.name, *change.key))
            elif change.matters:
                self.enqueue((spec.name, *change.key), None)
        kind.handler = changed
        kind.informers = self._kind_informers(kind)
        metrics.RESOURCE_SERVED.labels(spec.name).set_function(
            lambda: 0 if any(i.missing for i in kind.informers) else 1)
        return kind

    def _kind_informers(self, kind: Watched) -> list[informer.Informer]:
        assert kind.handler is not None
        return [self._informer(f"{kind.spec.name}{'@' + ns if ns else ''}",
                               kind.resource.path(ns or None), kind.jobs, kind.handler,
                               kind.spec.selector or "", ns or None)
                for ns in self.namespaces or ("",)]

    def _pod_watch(self, selector: str, specs: list[plan.Kind]) -> PodWatch:
        watch = PodWatch(selector, projection.pod_tree(specs), watches.pod_store(selector, specs), [])

        def changed(change: storelib.Change) -> None:
            self._pod_changed(watch, change)
        watch.handler = changed
        watch.informers = self._pod_informers(watch)
        return watch

    def _pod_informers(self, watch: PodWatch) -> list[informer.Informer]:
        assert watch.handler is not None
        resource = kube.Resource("v1", "pods")
        return [self._informer(f"pods{'/' + watch.selector if watch.selector else ''}"
                               f"{'@' + ns if ns else ''}",
                               resource.path(ns or None), watch.store, watch.handler,
                               watch.selector, ns or None, tells_sharding=True)
                for ns in self.namespaces or ("",)]

    def reshard(self, selector: str) -> None:
        """Ask the API server for other shards (runtime.shards.selector): every watch lists
        again with the new selector into its cache, which reports what left it as gone. Nothing
        is done where the server showed it ignores the parameter."""
        with self.lock:
            if self.server_shards is False or selector == self.shard_selector:
                return
            self._restart(selector)

    def _restart(self, selector: str) -> None:
        with self.lock:
            self.shard_selector = selector
            for kind in self.kinds.values():
                _stop(kind.informers)
                kind.informers = self._kind_informers(kind)
            for watch in self.pod_watches.values():
                _stop(watch.informers)
                watch.informers = self._pod_informers(watch)

    def _sharded(self, honoured: bool) -> None:
        """What a pod list that asked for shards said: whether the server applied the selector.
        The first it ignored (the gate off, or a server before 1.36) ends the asking: every
        watch lists everything again, and the worker's filter alone keeps to our shards."""
        with self.lock:
            if honoured:
                if self.server_shards is None:
                    self.server_shards = True
                    log.info("the API server shards our lists and watches (%s)",
                             self.shard_selector)
                return
            if self.server_shards is False:
                return
            self.server_shards = False
            log.info("the API server ignored shardSelector (ShardedListAndWatch off, or a server "
                     "before 1.36): every shard is listed, and filtered here")
            self._restart("")

    def _pod_changed(self, watch: PodWatch, change: storelib.Change) -> None:
        """Every job of every kind the pod may belong to, before and after the change."""
        if not change.matters:
            return
        received = time.monotonic()
        with self.lock:
            kinds = [self.kinds[name] for name in watch.kinds if name in self.kinds]
        for obj in (change.obj, change.old):
            if obj is None:
                continue
            for kind in kinds:
                for key in watches.owners(kind.spec, kind.jobs, obj):
                    self.enqueue((kind.spec.name, *key), received)

    def _informer(self, name: str, path: str, store: storelib.Store, on_change: informer.Handler,
                  selector: str, namespace: str | None,
                  tells_sharding: bool = False) -> informer.Informer:
        """One informer. Only pod lists tell whether the server sharded them: it echoes the
        selector in `metadata.shardInfo` on built-in resources' lists, and filters a custom
        resource's list without saying so (kube-apiserver 1.36.3: its unstructured list has no
        shardInfo), so a job list's silence is no sign."""
        def observe(what: str, reason: str) -> None:
            if what == "relist":
                metrics.RELISTS.labels(name).inc()
            else:
                metrics.WATCH_RESTARTS.labels(name, reason).inc()
        metrics.STORE_OBJECTS.labels(name).set_function(lambda: len(store))
        metrics.STORE_BYTES.labels(name).set_function(lambda: store.bytes)
        made = informer.Informer(self.client, name, path, store, on_change, selector=selector,
                                 namespace=namespace, read_timeout=self.read_timeout,
                                 shard_selector=self.shard_selector, on_event=observe,
                                 on_sharded=self._sharded if tells_sharding else None,
                                 on_synced=self.on_synced)
        return made.start() if self.start else made


def _stop(informers: list[informer.Informer]) -> None:
    for i in informers:
        i.stop()

