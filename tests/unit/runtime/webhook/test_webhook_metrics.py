"""runtime.webhook.metrics in multiprocess mode: worker processes count apart, the master adds them up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, multiprocess

from runtime.webhook import metrics

WORKER = """
from runtime.webhook import metrics
metrics.REQUESTS.labels("patched").inc({count})
metrics.INJECTIONS.labels("log-agent").inc({count})
metrics.LATENCY.observe(0.003)
metrics.PLAN_INFO.labels("{digest}", "1").set(1)
print(__import__("os").getpid())
"""


def worker(folder: Path, count: int, digest: str = "abc") -> int:
    """Run a process that records like a gunicorn worker; its pid."""
    done = subprocess.run([sys.executable, "-c", WORKER.format(count=count, digest=digest)],
                          env={"PROMETHEUS_MULTIPROC_DIR": str(folder), "PATH": ""},
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def merged(folder: Path) -> CollectorRegistry:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(folder))
    return registry


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    return tmp_path


def test_counters_and_histograms_add_up_over_processes(folder: Path) -> None:
    worker(folder, 3)
    worker(folder, 4)
    registry = merged(folder)
    assert registry.get_sample_value("jobrules_webhook_requests_total", {"result": "patched"}) == 7
    assert registry.get_sample_value("jobrules_webhook_injections_applied_total",
                                     {"injection": "log-agent"}) == 7
    assert registry.get_sample_value("jobrules_webhook_request_duration_seconds_count") == 2


def test_plan_info_is_the_max_over_live_workers_and_forgets_dead_ones(folder: Path) -> None:
    old, new = worker(folder, 1, "old"), worker(folder, 1, "new")
    assert merged(folder).get_sample_value("jobrules_plan_info", {"digest": "old", "plan_version": "1"}) == 1
    metrics.forget_worker(old)
    registry = merged(folder)
    assert registry.get_sample_value("jobrules_plan_info", {"digest": "old", "plan_version": "1"}) is None
    assert registry.get_sample_value("jobrules_plan_info", {"digest": "new", "plan_version": "1"}) == 1
    # what the dead worker counted still counts
    assert registry.get_sample_value("jobrules_webhook_requests_total", {"result": "patched"}) == 2
    assert new != old


def test_reset_removes_what_a_previous_run_left(folder: Path) -> None:
    worker(folder, 5)
    (folder / "notes.txt").write_text("kept")
    metrics.reset_multiprocess_dir(folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    assert merged(folder).get_sample_value("jobrules_webhook_requests_total", {"result": "patched"}) is None


def test_forget_worker_is_a_no_op_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    metrics.forget_worker(12345)
