"""The webhook as production runs it: gunicorn with runtime.webhook.gunicorn_conf, several workers, TLS.

No control plane needed (these tests are not marked `integration`); tests/integration/
test_webhook_cluster.py reuses `serve` to put the API server in front of the same process.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support import apiserver
import pytest

from devkit import cluster

MUTATE = "/mutate-pods"


@dataclass(frozen=True, slots=True)
class Served:
    """A running webhook: where it listens, the CA that trusts it, and its files."""

    port: int
    metrics_port: int
    ca: cluster.CertificateAuthority
    workdir: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{MUTATE}"

    @property
    def log(self) -> str:
        return (self.workdir / "gunicorn.log").read_text(errors="replace")

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls(), timeout=10)

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        connection = self.connect()
        try:
            connection.request(method, path, body, headers or {"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def metrics(self) -> str:
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            return connection.getresponse().read().decode()
        finally:
            connection.close()

    def issue(self) -> None:
        issue(self.ca, self.workdir)


def issue(ca: cluster.CertificateAuthority, workdir: Path) -> None:
    """A certificate and key for 127.0.0.1 from `ca`, each file replaced in one rename."""
    cert, key = ca.issue("127.0.0.1", hosts=["127.0.0.1"])
    for name, data in (("tls.crt", cert), ("tls.key", key)):
        staged = workdir / f".{name}.new"
        staged.write_bytes(data)
        os.replace(staged, workdir / name)


GUNICORN = (sys.executable, "-m", "gunicorn", "-c", "python:runtime.webhook.gunicorn_conf")


@contextlib.contextmanager
def serve(plan: Path, workdir: Path, *, workers: int = 2, command: Sequence[str] = GUNICORN,
          base_env: Mapping[str, str] = os.environ, **env: str) -> Iterator[Served]:
    """gunicorn -c python:runtime.webhook.gunicorn_conf on loopback with a throw-away CA; waits for /readyz.

    `command` runs it (the image's test runs it in the image's root filesystem) in `base_env`
    plus the webhook's variables and `env`."""
    ca = cluster.CertificateAuthority.create("jobrules-webhook-ca")
    port, metrics_port = cluster.free_ports(2)
    (workdir / "metrics").mkdir(exist_ok=True)
    issue(ca, workdir)
    served_env = {
        **base_env,
        "JOBRULES_PLAN": str(plan),
        "JOBRULES_TLS_CERT": str(workdir / "tls.crt"),
        "JOBRULES_TLS_KEY": str(workdir / "tls.key"),
        "JOBRULES_BIND": f"127.0.0.1:{port}",
        "JOBRULES_METRICS_BIND": f"127.0.0.1:{metrics_port}",
        "JOBRULES_WORKERS": str(workers),
        "JOBRULES_GRACEFUL_TIMEOUT": "5",
        "PROMETHEUS_MULTIPROC_DIR": str(workdir / "metrics"),
        **env,
    }
    with open(workdir / "gunicorn.log", "wb") as log:
        process = subprocess.Popen(list(command), env=served_env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    served = Served(port, metrics_port, ca, workdir, process)
    try:
        def ready() -> bool:
            assert process.poll() is None, f"gunicorn exited:\n{served.log}"
            if served.log.count("tls: certificate") < workers:   # every worker booted
                return False
            try:
                return served.call("GET", "/readyz")[0] == 200 and bool(served.metrics())
            except OSError:
                return False
        apiserver.wait_for("the webhook to be ready", ready, timeout=30)
        yield served
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(15)


def admission_review(obj: dict[str, Any], uid: str = "uid-1", **fields: Any) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE", "namespace": "team-a", "object": obj, **fields}}).encode()


def job_pod(*containers: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": "train-", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}]},
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers or ("main",)]}}


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value from the exposition format (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        found = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if found and found[1] == name and ",".join(sorted((found[2] or "").split(","))) == wanted:
            return float(found[3])
    return 0.0


def span(line: int) -> dict[str, Any]:
    return {"path": "rules/webhook-it.rules", "line": line, "column": 1, "endLine": line,
            "endColumn": 2}


def kind(name: str, api_version: str, kind_: str, primary: list[str] | None = None) -> dict[str, Any]:
    group, _, version = api_version.rpartition("/")
    return {"name": name, "span": span(1), "group": group, "version": version, "kind": kind_,
            "plural": kind_.lower() + "s", "apiVersion": api_version, "pods": {"owned": True},
            "primaryContainers": primary, "verdicts": [], "policies": [], "status": {}}


def plan_data(failure_policy: str = "Ignore") -> dict[str, Any]:
    """Job pods get a native sidecar and an annotation; Workflow pods the completion wiring on
    `main`; pods of kind Wrapped meet an injection that fails (their containers have no command)."""
    return {
        "planVersion": 1, "files": [],
        "kinds": [kind("batchjob", "batch/v1", "Job"),
                  kind("workflow", "argoproj.io/v1alpha1", "Workflow", ["main"]),
                  kind("wrapped", "batch.volcano.sh/v1alpha1", "Job")],
        "injections": [
            {"name": "log-agent", "span": span(10), "kinds": ["batchjob"], "ops": [
                {"op": "annotate", "span": span(11), "key": "example.com/logs", "value": ["shipped"]},
                {"op": "volume", "span": span(12), "name": "logs", "source": {"emptyDir": {}}},
                {"op": "mount", "span": span(13), "volume": "logs", "path": "/var/log/job",
                 "readOnly": False, "containers": {"select": "primary", "names": []}},
                {"op": "sidecar", "span": span(14), "name": "log-agent", "native": True,
                 "image": ["example.com/log-agent:1"], "command": None, "args": None, "env": [],
                 "mounts": [{"volume": "logs", "path": "/var/log/job", "readOnly": True}]},
            ]},
            {"name": "argo-completion", "span": span(20), "kinds": ["workflow"],
             "completionContainers": ["main"], "ops": [
                 {"op": "env", "span": span(21), "name": "JOBRULES_DECIDES", "value": ["true"],
                  "containers": {"select": "primary", "names": []}},
             ]},
            {"name": "wrapper", "span": span(30), "kinds": ["wrapped"], "ops": [
                {"op": "wrap", "span": span(31), "containers": {"select": "all", "names": []},
                 "argv": [["/jobrules/run"]], "shell": None},
            ]},
        ],
        "webhook": {"failurePolicy": failure_policy, "timeoutSeconds": 5},
    }


def write_plan(path: Path, failure_policy: str = "Ignore") -> Path:
    path.write_text(json.dumps(plan_data(failure_policy), indent=2) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Served]:
    with serve(write_plan(tmp_path / "plan.json"), tmp_path) as served:
        yield served


def peer_certificate(served: Served) -> bytes:
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        with served.tls().wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            return tls.getpeercert(binary_form=True) or b""


def worker_pids(served: Served) -> set[int]:
    pid = served.process.pid
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_admission_over_tls(webhook: Served) -> None:
    status, body = webhook.call("POST", MUTATE, admission_review(job_pod()))
    assert status == 200
    response = json.loads(body)["response"]
    assert response["uid"] == "uid-1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert webhook.call("GET", "/healthz") == (200, b"ok\n")


def test_many_requests_on_one_kept_alive_connection(webhook: Served) -> None:
    connection = webhook.connect()
    try:
        for uid in range(20):
            connection.request("POST", MUTATE, admission_review(job_pod(), uid=str(uid)),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            assert json.loads(response.read())["response"]["uid"] == str(uid)
    finally:
        connection.close()


def test_bodies_over_the_limit_get_413(tmp_path: Path) -> None:
    with serve(write_plan(tmp_path / "plan.json"), tmp_path, JOBRULES_MAX_BODY="65536") as served:
        assert served.call("POST", MUTATE, b" " * 70_000)[0] == 413
        connection = served.connect()
        try:   # chunked: no Content-Length to check up front
            connection.request("POST", MUTATE, iter([b" " * 10_000] * 8), encode_chunked=True,
                               headers={"Content-Type": "application/json",
                                        "Transfer-Encoding": "chunked"})
            assert connection.getresponse().status == 413
        finally:
            connection.close()


def test_metrics_add_up_over_workers(webhook: Served) -> None:
    """Every worker counts in its own file; the master's endpoint serves the sum."""
    sent = 0

    def answering_workers() -> set[str]:
        return {p.stem.rsplit("_", 1)[1] for p in (webhook.workdir / "metrics").glob("counter_*.db")}

    while len(answering_workers()) < 2 and sent < 400:   # the kernel picks the worker
        connections = [webhook.connect() for _ in range(4)]
        for connection in connections:
            connection.request("POST", MUTATE, admission_review(job_pod(), uid=str(sent)))
            sent += 1
        for connection in connections:
            assert connection.getresponse().status == 200
            connection.close()
    assert len(answering_workers()) == 2
    text = webhook.metrics()
    assert metric(text, "jobrules_webhook_requests_total", result="patched") == sent
    assert metric(text, "jobrules_webhook_injections_applied_total", injection="log-agent") == sent
    assert metric(text, "jobrules_webhook_request_duration_seconds_count") == sent
    digest = re.search(r'jobrules_plan_info\{digest="(\w+)",plan_version="1"\} 1.0', text)
    assert digest is not None


def test_a_dead_worker_is_replaced_and_forgotten(webhook: Served) -> None:
    [victim, *_] = sorted(worker_pids(webhook))
    gauge = webhook.workdir / "metrics" / f"gauge_livemax_{victim}.db"
    assert gauge.exists()
    os.kill(victim, signal.SIGKILL)
    apiserver.wait_for("a replacement worker", lambda: len(worker_pids(webhook) - {victim}) == 2)
    apiserver.wait_for("the dead worker's gauges to go", lambda: not gauge.exists())
    assert webhook.call("GET", "/readyz")[0] == 200


def test_the_plan_is_reloaded_in_every_worker(webhook: Served) -> None:
    wrapped = job_pod()
    wrapped["metadata"]["ownerReferences"][0]["apiVersion"] = "batch.volcano.sh/v1alpha1"

    def allowed() -> bool:
        return json.loads(webhook.call("POST", MUTATE, admission_review(wrapped))[1])["response"]["allowed"]

    assert allowed() is True
    write_plan(webhook.workdir / "plan.json", "Fail")
    apiserver.wait_for("the fail-closed plan in use", lambda: all(not allowed() for _ in range(10)))


def test_a_new_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    with serve(write_plan(tmp_path / "plan.json"), tmp_path, workers=1) as webhook:
        certificate_is_reloaded(webhook)


def certificate_is_reloaded(webhook: Served) -> None:
    """With one worker, the one that served the old certificate is the one that reloads."""
    before = peer_certificate(webhook)
    kept = webhook.connect()
    kept.request("GET", "/healthz")
    assert kept.getresponse().read() == b"ok\n"
    webhook.issue()
    apiserver.wait_for("the new certificate", lambda: peer_certificate(webhook) != before, timeout=10)
    kept.request("GET", "/healthz")   # connections made before keep their session
    assert kept.getresponse().read() == b"ok\n"
    kept.close()
    assert metric(webhook.metrics(), "jobrules_reloads_total", file="tls") >= 1


def test_a_broken_certificate_keeps_the_old_one(webhook: Served) -> None:
    before = peer_certificate(webhook)
    (webhook.workdir / "tls.crt").write_bytes(b"not a certificate")
    deadline = time.monotonic() + 3   # beyond the 1 s check interval of every worker
    while time.monotonic() < deadline:
        assert peer_certificate(webhook) == before
    assert metric(webhook.metrics(), "jobrules_reload_failures_total", file="tls") >= 1
    assert "tls: cannot load" in webhook.log


def test_no_control_socket_is_opened(tmp_path: Path) -> None:
    """gunicorn >= 25.1 would open one under $XDG_RUNTIME_DIR or $HOME: the image has neither."""
    home = tmp_path / "home"
    home.mkdir()
    with serve(write_plan(tmp_path / "plan.json"), tmp_path, HOME=str(home),
               XDG_RUNTIME_DIR=str(home)) as served:
        assert served.call("GET", "/healthz")[0] == 200
        assert list(home.iterdir()) == []
    assert "[ERROR]" not in served.log


def test_sigterm_stops_gracefully(webhook: Served) -> None:
    webhook.process.send_signal(signal.SIGTERM)
    assert webhook.process.wait(10) == 0
    assert "Shutting down" in webhook.log
    assert "Traceback" not in webhook.log, webhook.log   # workers leave without the teardown's noise


def test_a_worker_that_cannot_boot_stops_the_webhook(tmp_path: Path) -> None:
    """Workers skip the interpreter's teardown but keep their exit code: gunicorn's boot error
    (3) still reaches the master, which stops instead of respawning workers forever."""
    (tmp_path / "metrics").mkdir()
    (tmp_path / "tls.crt").write_text("not a certificate\n")
    (tmp_path / "tls.key").write_text("not a key\n")
    env = {**os.environ, "JOBRULES_PLAN": str(write_plan(tmp_path / "plan.json")),
           "JOBRULES_TLS_CERT": str(tmp_path / "tls.crt"), "JOBRULES_TLS_KEY": str(tmp_path / "tls.key"),
           "JOBRULES_BIND": f"127.0.0.1:{cluster.free_ports(1)[0]}", "JOBRULES_METRICS_BIND": "",
           "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    done = subprocess.run(list(GUNICORN), env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60)
    log = (done.stdout + done.stderr).decode()
    assert done.returncode != 0
    assert "no usable TLS certificate and key" in log
    assert re.search(r"Worker \(pid:\d+\) exited with code 3", log), log
