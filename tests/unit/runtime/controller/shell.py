"""The controller's worker set up against the in-memory API server, its caches filled from it as
its informers would fill them (every object through its projection), for tests of the shell."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from runtime import plan, writeback
from runtime.controller import settings, worker
from runtime.controller.caches import Key
from tests.unit.runtime.controller.fakeapi import FakeApi


class Events:
    """A recorder that keeps what it is given."""

    def __init__(self) -> None:
        self.sent: list[tuple[str | None, writeback.EventSpec]] = []

    def emit(self, job: Any, spec: writeback.EventSpec) -> None:
        self.sent.append(((job.get("metadata") or {}).get("name"), spec))


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def make(rules: plan.Plan, api: FakeApi, now: datetime, **options: Any) -> tuple[worker.Worker, Events, Clock]:
    """A worker for `rules` that talks to `api`, its informers never started."""
    events, clock = Events(), Clock(now)
    made = worker.Worker(settings.ControllerSettings("plan.json", **options), api,  # type: ignore[arg-type]
                         events, clock)  # type: ignore[arg-type]
    made.caches.start = False
    made.caches.apply(rules)
    for informer in made.caches.informers():
        informer.synced.set()
    return made, events, clock


def feed(w: worker.Worker, api: FakeApi) -> None:
    """The caches as a relist would leave them: every object of the API server, projected."""
    with w.caches.lock:
        for kind in w.caches.kinds.values():
            prefix = kind.resource.path().rsplit("/", 1)[0]
            list(kind.jobs.replace(o for p, o in sorted(api.objects.items())
                                   if _of(p, prefix, kind.resource.plural)))
        for watch in w.caches.pod_watches.values():
            key = watch.selector
            list(watch.store.replace(o for p, o in sorted(api.objects.items())
                                     if _of(p, "/api/v1", "pods")
                                     and (not key or key in ((o.get("metadata") or {}).get("labels") or {}))))


def _of(path: str, prefix: str, plural: str) -> bool:
    """`path` is an object of the collection `prefix/.../plural/NAME`."""
    rest = path[len(prefix):].strip("/").split("/") if path.startswith(prefix + "/") else []
    return (len(rest) == 2 and rest[0] == plural) or (
        len(rest) == 4 and rest[0] == "namespaces" and rest[2] == plural)


def keys(w: worker.Worker) -> Iterable[Key]:
    return w.caches.keys()
