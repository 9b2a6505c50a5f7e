"""Kubernetes Events for verdicts and problems, sent off the reconcile path.

events.k8s.io/v1 Events regarding the job, `reportingController: jobrules.dev/controller`.
Names are deterministic (runtime.writeback): an Event a replayed reconcile makes again is refused
as existing, so a transition is reported once; a problem seen again is counted in its `series`
instead. Sending never blocks a reconcile: Events wait in a bounded queue that drops (and counts)
when full, and each job has a budget as client-go's recorder gives (a burst of 25, then one per
five minutes). Events expire after an hour in most clusters; the annotations are the record.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from runtime import objects, vocabulary, writeback
from runtime.controller import kube

log = logging.getLogger("jobrules.controller")

REPORTING_CONTROLLER = vocabulary.REPORTING_CONTROLLER
QUEUE_SIZE = 1000
BURST, REFILL_SECONDS = 25, 300.0


def event_time(moment: datetime) -> str:
    """A MicroTime: RFC 3339 with microseconds."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(job: Mapping[str, Any], spec: writeback.EventSpec, instance: str,
         now: datetime) -> dict[str, Any]:
    meta = objects.meta(job)
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": spec.name, "namespace": meta.get("namespace") or "default"},
        "eventTime": event_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": spec.action, "reason": spec.reason, "note": spec.note, "type": spec.type,
        "regarding": {"apiVersion": job.get("apiVersion"), "kind": job.get("kind"),
                      "name": meta.get("name"), "namespace": meta.get("namespace"),
                      "uid": meta.get("uid")},
    }


class Recorder:
    """Sends Events from a thread of its own."""

    def __init__(self, client: kube.Client, instance: str,
                 on_drop: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.instance = instance
        self._on_drop = on_drop or (lambda why: None)
        self._clock = clock
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(QUEUE_SIZE)
        self._buckets: dict[str, tuple[float, float]] = {}   # job uid -> (tokens, at)
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then stop."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def emit(self, job: Mapping[str, Any], spec: writeback.EventSpec) -> None:
        uid = objects.uid(job) or ""
        if not self._take(uid):
            self._on_drop("rate")
            return
        try:
            self._queue.put_nowait(body(job, spec, self.instance, datetime.now(timezone.utc)))
        except queue.Full:
            self._on_drop("queue")

    def _take(self, uid: str) -> bool:
        now = self._clock()
        tokens, at = self._buckets.get(uid, (float(BURST), now))
        tokens = min(float(BURST), tokens + (now - at) / REFILL_SECONDS)
        if tokens < 1:
            self._buckets[uid] = (tokens, now)
            return False
        self._buckets[uid] = (tokens - 1, now)
        if len(self._buckets) > 100_000:   # forget jobs long quiet rather than grow forever
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < REFILL_SECONDS}
        return True

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._send(event)
            except (kube.ApiError, kube.TransportError) as err:
                self._on_drop("error")
                log.info("event %s not sent: %s", event["metadata"]["name"], err)
            except Exception:
                self._on_drop("error")
                log.exception("event %s not sent", event["metadata"]["name"])

    def _send(self, event: dict[str, Any]) -> None:
        namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]
        path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        try:
            self.client.create(path, event)
        except kube.Conflict:
            if event["action"] == "Verdict":
                return   # the same transition, reported already (a replay)
            existing = self.client.get(f"{path}/{name}")
            series = existing.get("series") or {}
            self.client.merge_patch(f"{path}/{name}", {"series": {
                "count": int(series.get("count") or 1) + 1,
                "lastObservedTime": event["eventTime"]}})
