"""runtime.controller.metrics: client-go's work-queue metrics fed by a real queue, and the API
request counter fed by kube.Client's hook; read back as Prometheus scrapes them.

Each case runs in a fresh interpreter, so its counters start from nothing and no other test's
metrics share its registry."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[4]
PRELUDE = """
from runtime.controller import metrics
from runtime.workqueue import WorkQueue

class Clock:
    now = 50.0
    def __call__(self):
        return self.now
"""


def scrape(code: str) -> dict[str, Any]:
    """Run `code` after PRELUDE in a fresh interpreter; its default registry's families."""
    script = (PRELUDE + textwrap.dedent(code)
              + "\nimport sys, prometheus_client\n"
                "sys.stdout.write(prometheus_client.generate_latest().decode())\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {f.name: f for f in text_string_to_metric_families(proc.stdout)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float | None:
    for family in families.values():
        for found in family.samples:
            if found.name == sample and found.labels == labels:
                return float(found.value)
    return None


# (family name as scraped, type, help) for every client-go work-queue metric
CLIENT_GO = [
    ("workqueue_depth", "gauge", "Current depth of workqueue"),
    ("workqueue_adds", "counter", "Total number of adds handled by workqueue"),
    ("workqueue_queue_duration_seconds", "histogram",
     "How long in seconds an item stays in workqueue before being requested."),
    ("workqueue_work_duration_seconds", "histogram",
     "How long in seconds processing an item from workqueue takes."),
    ("workqueue_unfinished_work_seconds", "gauge",
     "How many seconds of work has done that is in progress and hasn't been observed by "
     "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
     "threads by observing the rate at which this increases."),
    ("workqueue_longest_running_processor_seconds", "gauge",
     "How many seconds has the longest running processor for workqueue been running."),
    ("workqueue_retries", "counter", "Total number of retries handled by workqueue"),
]


@pytest.fixture(scope="module")
def one_queue() -> dict[str, Any]:
    return scrape('WorkQueue(metrics=metrics.WorkQueueMetrics("jobs")).add("x")')


@pytest.mark.parametrize("family, kind, help_text", CLIENT_GO, ids=[c[0] for c in CLIENT_GO])
def test_work_queue_metrics_have_client_gos_names_types_help_and_label(
        one_queue: dict[str, Any], family: str, kind: str, help_text: str) -> None:
    found = one_queue[family]
    assert (found.type, found.documentation) == (kind, help_text)
    assert {s.labels["name"] for s in found.samples} == {"jobs"}


def test_work_queue_histograms_use_client_gos_buckets(one_queue: dict[str, Any]) -> None:
    for family in ("workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"):
        bounds = [s.labels["le"] for s in one_queue[family].samples if s.name.endswith("_bucket")]
        assert bounds == ["1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1",
                          "1.0", "10.0", "+Inf"]


def test_a_queue_at_work_is_measured() -> None:
    """Two adds of one key count once; durations follow the injected clock; the unfinished-work
    gauges are read when scraped."""
    families = scrape("""
        clock = Clock()
        queue = WorkQueue(clock=clock, metrics=metrics.WorkQueueMetrics("jobs"))
        for key in ("a", "b", "a"):
            queue.add(key)
        clock.now += 0.5
        queue.get()                  # "a", after 0.5 s in the queue
        clock.now += 2.0
        queue.done("a")              # worked 2 s
        queue.get()                  # "b", after 2.5 s; still in progress when scraped
        clock.now += 4.0
        queue.add_rate_limited("a")
        queue.add_after("c", 3.0)
    """)
    def of(sample: str) -> float | None:
        return value(families, sample, name="jobs")

    assert (of("workqueue_adds_total"), of("workqueue_depth")) == (2.0, 0.0)
    assert (of("workqueue_queue_duration_seconds_count"),
            of("workqueue_queue_duration_seconds_sum")) == (2.0, 3.0)
    assert (of("workqueue_work_duration_seconds_count"),
            of("workqueue_work_duration_seconds_sum")) == (1.0, 2.0)
    assert of("workqueue_unfinished_work_seconds") == 4.0
    assert of("workqueue_longest_running_processor_seconds") == 4.0
    assert of("workqueue_retries_total") == 2.0


def test_api_requests_are_counted_by_verb_resource_and_code() -> None:
    families = scrape("""
        metrics.count_api_request("patch", "jobs.batch", 409, 0.01)
        metrics.count_api_request("patch", "jobs.batch", 409, 0.02)
        metrics.count_api_request("watch", "pods", 0, 5.0)
    """)
    total = "jobrules_controller_api_requests_total"
    assert value(families, total, verb="patch", resource="jobs.batch", code="409") == 2.0
    assert value(families, total, verb="watch", resource="pods", code="<error>") == 1.0
    duration = "jobrules_controller_api_request_duration_seconds"
    assert value(families, f"{duration}_count", verb="patch") == 2.0
    assert value(families, f"{duration}_sum", verb="watch") == 5.0
