"""The webhook under gunicorn while other clients misbehave: slow and stalled clients, connection
floods, a killed worker, plan reloads, fuzzed reviews from many clients at once. Every test
asserts what was answered, never how fast (bench/webhook.py --hostile measures that).

No control plane needed (like test_webhook_gunicorn.py, whose `serve` these reuse).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from support import apiserver
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_webhook_gunicorn import (GUNICORN, MUTATE, Served, admission_review, job_pod, metric,
                                   serve, worker_pids, write_plan)

from devkit import hostile
from runtime.webhook.worker import SPARE_FILES

CLIENT_TIMEOUT = "2"   # seconds: slow clients are dropped within a test's time
MAX_SILENT = 1000      # per worker: the 3,000 silent connections below are past the two workers' cap


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("hostile")
    with serve(write_plan(workdir / "plan.json"), workdir, JOBRULES_CLIENT_TIMEOUT=CLIENT_TIMEOUT,
               JOBRULES_MAX_SILENT=str(MAX_SILENT)) as served:
        yield served


def answered(connection: http.client.HTTPSConnection, uid: str) -> None:
    """One review on `connection`, answered as a patch of that review."""
    connection.request("POST", MUTATE, admission_review(job_pod(), uid=uid),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    body = response.read()
    assert response.status == 200, body
    answer = json.loads(body)["response"]
    assert answer["uid"] == uid and answer["patchType"] == "JSONPatch"


def dropped(served: Served, reason: str) -> float:
    return metric(served.metrics(), "jobrules_webhook_connections_dropped_total", reason=reason)


@pytest.mark.parametrize("kind, count", [("header", 300), ("body", 300), ("tls", 300),
                                         ("silent", 3000)])
def test_every_request_is_answered_beside_hostile_clients(webhook: Served, kind: str,
                                                          count: int) -> None:
    """Kept-alive connections (the API server's) and new ones are answered while hundreds of
    slow clients, or thousands of silent ones, are connected; the slow ones are dropped."""
    before = dropped(webhook, "read-timeout") + dropped(webhook, "evicted")
    kept = [webhook.connect() for _ in range(3)]
    try:
        for n, connection in enumerate(kept):
            answered(connection, f"{kind}-warm-{n}")
        with hostile.Hostile(webhook.port, kind, count, webhook.ca.cert_pem) as attack:
            deadline = time.monotonic() + 2 * float(CLIENT_TIMEOUT) + 1   # past their deadline
            rounds = 0
            while time.monotonic() < deadline or rounds < 10:
                for n, connection in enumerate(kept):
                    answered(connection, f"{kind}-{rounds}-{n}")
                fresh = webhook.connect()
                try:
                    answered(fresh, f"{kind}-{rounds}-new")
                finally:
                    fresh.close()
                assert webhook.call("GET", "/healthz") == (200, b"ok\n")
                rounds += 1
            assert attack.opened >= count
    finally:
        for connection in kept:
            connection.close()
    assert attack.closed_by_server > 0
    assert dropped(webhook, "read-timeout") + dropped(webhook, "evicted") > before


def test_silent_connections_under_the_cap_are_held_and_evict_nothing(webhook: Served) -> None:
    """Below the cap a flood only waits (as long as an idle kept-alive connection may): none of
    it is closed, and a slow client that has spoken is dropped at its deadline, not evicted."""
    before = dropped(webhook, "evicted")
    with hostile.Hostile(webhook.port, "silent", MAX_SILENT, webhook.ca.cert_pem) as flood, \
            hostile.Hostile(webhook.port, "header", 20, webhook.ca.cert_pem) as slow:
        deadline = time.monotonic() + float(CLIENT_TIMEOUT) + 2
        while time.monotonic() < deadline:
            assert webhook.call("GET", "/healthz") == (200, b"ok\n")
            time.sleep(0.2)
        assert flood.closed_by_server == 0 and slow.closed_by_server >= 20
    assert dropped(webhook, "evicted") == before


def test_a_flood_past_the_cap_never_evicts_a_connection_that_has_spoken(tmp_path: Path) -> None:
    """Past the cap each new silent connection closes the oldest silent one; connections that
    have sent a byte (here: requests still being sent, a header line at a time, well within
    their deadline) are out of its reach."""
    with serve(write_plan(tmp_path / "plan.json"), tmp_path, JOBRULES_CLIENT_TIMEOUT="30",
               JOBRULES_MAX_SILENT="100") as served:
        with hostile.Hostile(served.port, "header", 20, served.ca.cert_pem, drip=0.5) as slow:
            with hostile.Hostile(served.port, "silent", 1000, served.ca.cert_pem) as flood:
                apiserver.wait_for("the flood to evict itself", lambda: flood.closed_by_server >= 800,
                              timeout=10)
                assert served.call("GET", "/healthz") == (200, b"ok\n")
            assert slow.closed_by_server == 0
        assert dropped(served, "evicted") >= 800
        assert dropped(served, "read-timeout") == 0


def test_silent_connections_wait_no_longer_than_an_idle_one(tmp_path: Path) -> None:
    with serve(write_plan(tmp_path / "plan.json"), tmp_path, JOBRULES_KEEPALIVE="1") as served:
        with hostile.Hostile(served.port, "silent", 50, served.ca.cert_pem) as flood:
            apiserver.wait_for("the silent connections closed", lambda: flood.closed_by_server >= 50,
                          timeout=5)
        assert dropped(served, "read-timeout") >= 50
        assert dropped(served, "evicted") == 0


LIMITED = (sys.executable, "-c", "import os, resource, sys; "
           "resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1])); "
           "os.execv(sys.executable, sys.argv[1:])", *GUNICORN)


def test_a_worker_raises_its_open_files_limit_to_fit_its_caps(tmp_path: Path) -> None:
    """Started under a soft limit of 256 open files, each worker raises it to fit both caps
    (or to the hard limit, saying how many connections then fit)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    need = 2000 + 500 + SPARE_FILES
    expected = need if hard == resource.RLIM_INFINITY or hard >= need else hard
    with serve(write_plan(tmp_path / "plan.json"), tmp_path, command=LIMITED,
               JOBRULES_MAX_SILENT="2000", JOBRULES_MAX_CONNECTIONS="500") as served:
        for pid in worker_pids(served):
            limits = Path(f"/proc/{pid}/limits").read_text()
            assert int(re.search(r"Max open files +(\d+)", limits)[1]) == expected
        with hostile.Hostile(served.port, "silent", 600, served.ca.cert_pem) as flood:
            assert served.call("GET", "/healthz") == (200, b"ok\n")
        assert flood.opened == 600 and flood.closed_by_server == 0
        assert ("open files limited" in served.log) == (expected < need)


# ---------------------------------------------------------------------------------------------
# A worker killed and the plan reloaded under a closed-loop load


@dataclass
class Failure:
    port: int        # the client connection's local port
    error: str


@dataclass
class Load:
    """Client threads on kept-alive connections sending reviews back to back. A connection that
    fails is recorded and replaced; any answer other than a patch is a wrong answer."""

    served: Served
    clients: int = 8
    answers: int = 0
    wrong: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    ports: dict[int, int] = field(default_factory=dict)   # client thread -> its local port
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, n: int) -> None:
        connection, sent = None, 0
        while not self.stop.is_set():
            if connection is None:
                connection = self.served.connect()
                connection.connect()
                self.ports[n] = connection.sock.getsockname()[1]
            uid = f"{n}-{sent}"
            sent += 1
            try:
                connection.request("POST", MUTATE, admission_review(job_pod(), uid=uid),
                                   {"Content-Type": "application/json"})
                response = connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as err:
                self.failures.append(Failure(self.ports[n], repr(err)))
                connection.close()
                connection = None
                continue
            if response.status != 200 or json.loads(body)["response"]["uid"] != uid:
                self.wrong.append(f"{response.status}: {body[:200]!r}")
            self.answers += 1
        if connection is not None:
            connection.close()


def server_ports_of(pid: int) -> set[int]:
    """Remote ports of the TCP connections process `pid` holds (its clients' local ports)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if found := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(found[1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] in inodes:
            ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def test_a_killed_worker_costs_only_its_requests_in_flight(tmp_path: Path) -> None:
    """During a closed loop: three plan reloads, then SIGKILL to one worker. Only connections
    that worker held fail, each once (the request it had in flight), and nothing gets a 5xx."""
    with serve(write_plan(tmp_path / "plan.json"), tmp_path, JOBRULES_RELOAD_INTERVAL="0.2") as served:
        load = Load(served)
        with ThreadPoolExecutor(load.clients) as pool:
            runs = [pool.submit(load.run, n) for n in range(load.clients)]
            apiserver.wait_for("every client connected", lambda: len(load.ports) == load.clients)
            for policy in ("Fail", "Ignore", "Fail"):
                write_plan(tmp_path / "plan.json", policy)
                time.sleep(0.5)
            before = load.answers
            victim = min(worker_pids(served))
            held = server_ports_of(victim) & set(load.ports.values())
            os.kill(victim, signal.SIGKILL)
            apiserver.wait_for("answers after the kill", lambda: load.answers > before + 200)
            load.stop.set()
            for run in runs:
                run.result()
        assert metric(served.metrics(), "jobrules_reloads_total", file="plan") >= 2
    print(f"{load.answers} answers; {len(held)} of {load.clients} connections on the killed "
          f"worker; {len(load.failures)} requests failed: {[f.error for f in load.failures]}")
    assert load.wrong == []
    failed = [failure.port for failure in load.failures]
    assert set(failed) <= held, load.failures      # only the killed worker's connections
    assert len(failed) == len(set(failed))         # each once: its request in flight


# ---------------------------------------------------------------------------------------------
# Fuzzed reviews from many clients at once, over TLS

# The unit fuzz's strategies and its answer check, reused as they are.
from tests.unit.runtime.webhook import test_webhook_fuzz as fuzz  # noqa: E402

BODIES = (st.binary(max_size=512) | fuzz.json_values.map(lambda v: json.dumps(v).encode())
          | fuzz.truncated_reviews() | fuzz.mutated_reviews() | fuzz.random_pod_reviews())


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies=st.lists(BODIES, min_size=32, max_size=32))
def test_fuzzed_reviews_from_many_clients_at_once(webhook: Served, bodies: list[bytes]) -> None:
    """Each answer is a review echoing the uid, or a short 4xx JSON error."""
    def send(body: bytes) -> tuple[int, bytes]:
        return webhook.call("POST", MUTATE, body)

    with ThreadPoolExecutor(16) as pool:
        for body, (status, answer) in zip(bodies, pool.map(send, bodies)):
            fuzz.check_answer(body, status, answer)
