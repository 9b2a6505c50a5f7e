"""Prometheus metrics of the webhook, correct when gunicorn runs several worker processes.

Workers record into prometheus_client's multiprocess files (`PROMETHEUS_MULTIPROC_DIR`, which
must be set before this module is first imported); the gunicorn master serves the merged view on
its own plain-HTTP port and forgets dead workers' gauges. Without that variable (tests, one
process) the metrics live in the default registry.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess
from prometheus_client import start_http_server

REQUESTS = Counter(
    "jobrules_webhook_requests",
    "Admission requests answered, by result (see docs/webhook.md).",
    ["result"],
)
LATENCY = Histogram(
    "jobrules_webhook_request_duration_seconds",
    "Time to answer an admission request, from the first body byte read to the answer built.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
INJECTIONS = Counter(
    "jobrules_webhook_injections_applied",
    "Pods patched, by injection (dry runs not counted).",
    ["injection"],
)
RULE_ERRORS = Counter(
    "jobrules_webhook_rule_errors",
    "Injections that failed on a pod, by injection ('' when the failure names none).",
    ["injection"],
)
PLAN_INFO = Gauge(
    "jobrules_plan_info",
    "1 for the plan a live worker serves, by digest; 0 for plans it served before.",
    ["digest", "plan_version"],
    multiprocess_mode="livemax",
)
RELOADS = Counter(
    "jobrules_reloads",
    "Plan or TLS files loaded after they changed on disk, by file.",
    ["file"],
)
RELOAD_FAILURES = Counter(
    "jobrules_reload_failures",
    "Changed plan or TLS files that could not be loaded (the previous ones stay in use).",
    ["file"],
)
CONNECTIONS_DROPPED = Counter(
    "jobrules_webhook_connections_dropped",
    "Connections the webhook closed on a client, by reason: read-timeout (TLS handshake or "
    "request not complete in time), write-timeout (answer not taken in time), evicted (the "
    "worker was at its connection limit).",
    ["reason"],
)


# The labelled children the request path counts on, made once each (`labels` takes a lock and
# builds a key on every call). Their labels are bounded: results, and the plan's injections.
requests = functools.cache(REQUESTS.labels)
injections = functools.cache(INJECTIONS.labels)
connections_dropped = functools.cache(CONNECTIONS_DROPPED.labels)


def multiprocess_dir() -> Path | None:
    value = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(value) if value else None


def reset_multiprocess_dir(folder: Path) -> None:
    """Start from empty files: counters left by a previous run would otherwise be added in."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink(missing_ok=True)


def serve(host: str, port: int) -> None:
    """Serve the workers' merged metrics from this process (the gunicorn master) in a thread."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    start_http_server(port, addr=host, registry=registry)


def forget_worker(pid: int) -> None:
    """Drop a dead worker's live gauges; its counters stay (they were really counted)."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(pid)
