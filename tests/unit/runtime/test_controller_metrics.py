"""runtime.controller.metrics: client-go's work-queue metrics fed by a real queue, and the API
request counter fed by kube.Client's hook; read back as Prometheus scrapes them."""
from __future__ import annotations

import uuid

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime.controller import metrics
from runtime.workqueue import WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def families() -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(REGISTRY).decode())}


def value(sample: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(sample, labels)


@pytest.fixture
def name() -> str:
    return f"jobs-{uuid.uuid4().hex[:8]}"   # each test its own label: the registry is global


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


@pytest.mark.parametrize("family, kind, help_text", CLIENT_GO, ids=[c[0] for c in CLIENT_GO])
def test_work_queue_metrics_have_client_gos_names_types_help_and_label(
        name: str, family: str, kind: str, help_text: str) -> None:
    WorkQueue(metrics=metrics.WorkQueueMetrics(name)).add("x")
    found = families()[family]
    assert (found.type, found.documentation) == (kind, help_text)  # type: ignore[attr-defined]
    assert {s.labels["name"] for s in found.samples} >= {name}  # type: ignore[attr-defined]


def test_work_queue_histograms_use_client_gos_buckets(name: str) -> None:
    WorkQueue(metrics=metrics.WorkQueueMetrics(name)).add("x")
    for family in ("workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"):
        bounds = [s.labels["le"] for s in families()[family].samples  # type: ignore[attr-defined]
                  if s.name.endswith("_bucket") and s.labels["name"] == name]
        assert bounds == ["1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1",
                          "1.0", "10.0", "+Inf"]


def test_a_queue_at_work_is_measured(name: str) -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock, metrics=metrics.WorkQueueMetrics(name))
    for key in ("a", "b", "a"):
        queue.add(key)
    assert value("workqueue_adds_total", name=name) == 2
    assert value("workqueue_depth", name=name) == 2
    clock.now += 0.5
    assert queue.get() == "a"
    assert value("workqueue_depth", name=name) == 1
    assert value("workqueue_queue_duration_seconds_sum", name=name) == 0.5
    clock.now += 2.0
    assert value("workqueue_unfinished_work_seconds", name=name) == 2.0
    assert value("workqueue_longest_running_processor_seconds", name=name) == 2.0
    queue.done("a")
    assert value("workqueue_work_duration_seconds_sum", name=name) == 2.0
    assert value("workqueue_unfinished_work_seconds", name=name) == 0.0
    queue.add_rate_limited("a")
    queue.add_after("b", 3.0)
    assert value("workqueue_retries_total", name=name) == 2


def test_api_requests_are_counted_by_verb_resource_and_code() -> None:
    resource = f"things-{uuid.uuid4().hex[:8]}.example.org"
    metrics.count_api_request("patch", resource, 409, 0.01)
    metrics.count_api_request("patch", resource, 409, 0.02)
    metrics.count_api_request("watch", resource, 0, 5.0)
    assert value("jobrules_controller_api_requests_total", verb="patch", resource=resource,
                 code="409") == 2
    assert value("jobrules_controller_api_requests_total", verb="watch", resource=resource,
                 code="<error>") == 1
    assert (value("jobrules_controller_api_request_duration_seconds_count", verb="watch") or 0) >= 1
