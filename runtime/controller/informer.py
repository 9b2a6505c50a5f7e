"""List and watch one resource into a Store, for as long as the controller runs.

As client-go's reflector does: a list fills the store (replacing what it held, so objects deleted
while nobody watched are reported gone), streamed where the server offers it (a watch sending the
initial state, then a bookmark) and paged where not, then a WATCH from the list's resourceVersion
with bookmarks keeps it current. A watch that ends is reopened from the last version seen
(bookmarks included); one whose connection went quiet is reopened after the read timeout, so a
dropped connection never hangs; 410 Gone (the version was compacted away) relists. Errors back off
with jitter, honouring Retry-After. A resource that is not served (its CRD is missing) is retried
and reported, and does not hold up the others.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

from runtime import objects
from runtime import store as storelib
from runtime.controller import kube

log = logging.getLogger("jobrules.controller")

Handler = Callable[[storelib.Change], None]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"   # the bookmark annotation ending a streamed list


class Informer:
    """One list+watch loop in a thread of its own, feeding `store` and calling `on_change` for
    every change (handlers only enqueue: they run on the watch's thread)."""

    def __init__(self, client: kube.Client, name: str, path: str, store: storelib.Store,
                 on_change: Handler, *, selector: str = "", namespace: str | None = None,
                 read_timeout: float = 70.0, shard_selector: str = "",
                 on_event: Callable[[str, str], None] | None = None,
                 on_sharded: Callable[[bool], None] | None = None,
                 on_synced: Callable[[], None] | None = None,
                 stream_lists: bool = True) -> None:
        self.client = client
        self.namespace = namespace   # the one namespace it lists (None: all of them)
        self.name = name
        self.path = path
        self.store = store
        self.on_change = on_change
        self.selector = selector
        # The API server's `shardSelector` (runtime.shards.selector): "" asks for every shard.
        self.shard_selector = shard_selector
        self.on_sharded = on_sharded or (lambda honoured: None)
        self.on_synced = on_synced or (lambda: None)   # once the first list has filled the store
        self.read_timeout = read_timeout
        self.on_event = on_event or (lambda what, reason: None)
        self.synced = threading.Event()
        self._stream = stream_lists   # False once the server refused a streamed list
        self.missing = False      # the API server does not serve this resource (yet)
        self.error = ""           # the last problem, for /readyz
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)
        self._backoff = _Backoff()

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def ready(self) -> bool:
        """Synced, or known not to be served (nothing of it exists to wait for)."""
        return self.synced.is_set() or self.missing

    def _query(self) -> list[tuple[str, str]]:
        return ([("labelSelector", self.selector)] if self.selector else []) + (
            [("shardSelector", self.shard_selector)] if self.shard_selector else [])

    def _run(self) -> None:
        version: str | None = None   # None: list first
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    self._backoff.reset()
                version = self._watch(version)
            except kube.Gone:
                version = None
                self.on_event("relist", "gone")
                log.info("%s: resource version expired; listing again", self.name)
            except kube.NotFound as err:
                version = None
                if not self.missing:
                    log.warning("%s: %s is not served (is its CRD installed?); retrying",
                                self.name, self.path)
                self.missing, self.error = True, f"not served: {err.message}"
                self.on_event("restart", "not-found")
                self._pause(self._backoff.next())
            except (kube.ApiError, kube.TransportError) as err:
                # A list fails again from the start; a watch resumes from the last version seen.
                self.error = str(err)
                self.on_event("restart", type(err).__name__)
                log.warning("%s: %s; retrying", self.name, err)
                retry = err.retry_after if isinstance(err, kube.ApiError) else None
                self._pause(max(retry or 0.0, self._backoff.next()))
            except Exception:   # a bug: keep the loop alive, and say so loudly
                version = None
                log.exception("%s: the informer failed; listing again", self.name)
                self._pause(self._backoff.next())

    def _list(self) -> str:
        """Fill the store with what exists now; the resourceVersion to watch from.

        Streamed where the server offers it (watch-list, KEP-3157: a watch that sends every
        object, then a bookmark marking the initial events' end): one request, no continue
        token to expire. A paged LIST of 100,000 pods took minutes on a busy API server and
        outlasted its token again and again (410), starting over each time. Paged where the
        server refuses the stream (400 or 422: no watch-list there, or its gate off), and where
        shards are asked for: a pod list's `shardInfo` is how the server says it applied them."""
        if self._stream and not self.shard_selector:
            try:
                return self._streamed()
            except kube.ApiError as err:
                if err.status not in (400, 422):
                    raise
                self._stream = False
                log.info("%s: the API server does not stream lists (%s); listing in pages",
                         self.name, err)
        return self._paged()

    def _streamed(self) -> str:
        """The initial events of a watch-list into the store, each projected as it comes."""
        version = ""

        def items() -> Iterator[dict[str, Any]]:
            nonlocal version
            query = [*self._query(), ("sendInitialEvents", "true"),
                     ("resourceVersionMatch", "NotOlderThan"), ("allowWatchBookmarks", "true"),
                     ("timeoutSeconds", str(random.randint(300, 600)))]
            events = self.client.watch(self.path, query, read_timeout=self.read_timeout)
            try:
                for event in events:
                    obj = event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    if event.get("type") != "BOOKMARK":
                        yield obj
                    elif objects.annotations(obj).get(INITIAL_EVENTS_END) == "true":
                        version = str(objects.meta(obj).get("resourceVersion") or "")
                        return
            finally:
                events.close()   # from the end bookmark on, the watch is opened again
            # A server that ignores sendInitialEvents (before 1.27) sends no end bookmark
            self._stream = False
            raise kube.TransportError(f"{self.path}: the watch ended before its initial events "
                                      "did; listing in pages")

        self._fill(items())
        return version

    def _paged(self) -> str:
        """A paged LIST into the store, each page projected and dropped before the next is
        read; the list's resourceVersion."""
        version = ""
        sharded: bool | None = None

        def items() -> Iterator[dict[str, Any]]:
            nonlocal version, sharded
            for page in self.client.pages(self.path, query=self._query()):
                version = objects.resource_version(page) or version
                if sharded is None:   # the server echoes a selector it applied (1.36+, gate on)
                    sharded = bool((objects.meta(page).get("shardInfo") or {}).get("selector"))
                yield from page.get("items") or []

        self._fill(items())
        if self.shard_selector:
            self.on_sharded(bool(sharded))
        return version

    def _fill(self, items: Iterator[dict[str, Any]]) -> None:
        """Replace the store's contents with `items`, telling each change; synced once they end."""
        for change in self.store.replace(items, self.namespace):
            self.on_change(change)
        self.missing, self.error = False, ""
        if not self.synced.is_set():   # a relist tells its changes, as the watch does
            self.synced.set()
            self.on_synced()

    def _watch(self, version: str) -> str:
        """One watch from `version`, until the server ends it or it goes quiet; the last version
        seen (bookmarks included). Raises Gone to ask for a relist."""
        query = [*self._query(), ("resourceVersion", version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(random.randint(300, 600)))]
        try:
            for event in self.client.watch(self.path, query, read_timeout=self.read_timeout):
                if self._stop.is_set():
                    break
                version = self._handle(event) or version
                self._backoff.reset()
                self.error = ""
        except kube.Timeout:
            self.on_event("restart", "idle")
            log.debug("%s: no byte for %.0fs; watching again", self.name, self.read_timeout)
        return version

    def _handle(self, event: dict[str, Any]) -> str | None:
        """Apply one event; the resourceVersion it carries."""
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            return None
        version = objects.resource_version(obj)
        if kind in ("ADDED", "MODIFIED"):
            change = self.store.put(obj)
        elif kind == "DELETED":
            change = self.store.delete(storelib.key_of(obj))
        else:   # BOOKMARK: only the version moves
            return version
        if change is not None:
            self.on_change(change)
        return version

    def _pause(self, seconds: float) -> None:
        self._stop.wait(seconds)


class _Backoff:
    """0.8 s doubling to 30 s, with jitter (client-go's reflector backoff)."""

    def __init__(self, first: float = 0.8, cap: float = 30.0) -> None:
        self.first, self.cap, self.current = first, cap, 0.0

    def next(self) -> float:
        self.current = min(self.cap, self.current * 2 if self.current else self.first)
        return self.current * random.uniform(1.0, 1.5)

    def reset(self) -> None:
        self.current = 0.0


def served(client: kube.Client, group: str, version: str, plural: str) -> tuple[bool, bool]:
    """Whether the API server serves `plural` in group/version, and whether it has a `/status`
    subresource there (one discovery GET)."""
    path = "/api/v1" if group == "" else f"/apis/{group}/{version}"
    try:
        found = client.get(path)
    except kube.NotFound:
        return False, False
    names = {r.get("name") for r in found.get("resources") or [] if isinstance(r, dict)}
    return plural in names, f"{plural}/status" in names

