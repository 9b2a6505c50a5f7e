"""The controller as a process of its own, against the session's control plane, for tests.

Each test runs its controller scoped to its own namespace (`JOBRULES_NAMESPACES`), so tests that
share the control plane never see each other's jobs, with leader election off unless asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import apiserver
from devkit import cluster
from rulec import api as rulec_api
from rulec import emit

REPO = Path(__file__).resolve().parents[3]


def compile_plan(rules: str | Path | list[Path], out: Path) -> Path:
    """A plan file from rules text, or from rules paths (files or folders)."""
    if isinstance(rules, (Path, list)):
        built = rulec_api.build([str(p) for p in (rules if isinstance(rules, list) else [rules])])
    else:
        source = out.with_suffix(".rules")
        source.write_text(rules)
        built = rulec_api.build([str(source)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    tmp = out.with_suffix(".tmp")
    tmp.write_text(emit.dumps(built.plan))
    os.replace(tmp, out)   # atomic, as a ConfigMap update is
    return out


@dataclasses.dataclass
class Running:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include `labels` (0 when none)."""
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            found = re.match(rf"{re.escape(name)}(?:{{(.*)}})? (\S+)$", line)
            if not found:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(found.group(2))
        return total

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.process.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.process.wait(30)


def volcano_restart_rules(workdir: Path) -> Path:
    """A rules folder with the shipped Volcano rules plus `on pod evicted -> restart job max 2`:
    a policy that takes `restart job`, which the shipped rules leave to Volcano."""
    rules = workdir / "rules"
    rules.mkdir()
    shipped = (REPO / "rules" / "volcano-job.rules").read_text()
    marker = "    # Volcano drives its state machine"
    assert marker in shipped
    (rules / "volcano-job.rules").write_text(shipped.replace(
        marker, "    on pod evicted -> restart job max 2\n\n" + marker, 1))
    return rules


def job_failed_by_exit_three(api: Any, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A batch Job "train" whose pod runs, then exits 3: with rules that `fail job` on it (and
    the Job controller running), the Job's Failed condition, which must carry reason ExitThree.
    Returns the pod and the condition."""
    job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "train", backoff_limit=6))
    [pod] = apiserver.job_pods(api, job)
    apiserver.report_running(api, pod)
    apiserver.report_failed(api, apiserver.get(api, apiserver.PODS.path(namespace, pod["metadata"]["name"])),
                       exit_code=3)
    failed = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "train"), "Failed")
    assert failed["reason"] == "ExitThree", failed
    return pod, failed


def kubeconfig(session: Any) -> str:
    return str(session.plane.kubeconfig) if session.plane is not None else os.environ["KUBECONFIG"]


@contextlib.contextmanager
def running(session: Any, plan: Path, namespace: str, workdir: Path, *, name: str = "controller",
            wait_ready: bool = True, **env: str) -> Iterator[Running]:
    """Start `python -m runtime.controller` on `plan`; stop it (SIGTERM) afterwards."""
    [port] = cluster.free_ports(1)
    log = workdir / f"{name}.log"
    environment = {
        **os.environ, "KUBECONFIG": kubeconfig(session), "JOBRULES_PLAN": str(plan),
        "JOBRULES_NAMESPACES": namespace, "JOBRULES_LEADER_ELECT": "false",
        "JOBRULES_HEALTH_BIND": f"127.0.0.1:{port}", "JOBRULES_RELOAD_INTERVAL": "0.5",
        "JOBRULES_IDENTITY": name, "JOBRULES_LOG_LEVEL": "info", **env}
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "runtime.controller"], env=environment,
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    handle = Running(process, port, log)
    try:
        if wait_ready:
            def ready() -> bool:
                assert process.poll() is None, f"the controller exited:\n{handle.logs()}"
                return handle.get("/readyz")[0] == 200
            apiserver.wait_for("the controller to be ready", ready, timeout=60)
        yield handle
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def annotation(obj: dict[str, Any], key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(key)


def verdict(obj: dict[str, Any]) -> dict[str, Any]:
    import json
    text = annotation(obj, "jobrules.dev/verdict")
    return json.loads(text) if text else {}


def wait_for_verdict(api: Any, path: str, phase: str, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until the object's verdict annotation has `phase`; the object."""
    def check() -> dict[str, Any] | None:
        obj = apiserver.get(api, path)
        return obj if verdict(obj).get("phase") == phase else None
    try:
        return apiserver.wait_for(f"verdict {phase} on {path}", check, timeout)
    except AssertionError:
        raise AssertionError(f"no verdict {phase} on {path}: it has {verdict(apiserver.get(api, path))}")


def events_of(api: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    found = apiserver.get(api, f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in found["items"] if (e.get("regarding") or {}).get("name") == name
            and e.get("reportingController") == "jobrules.dev/controller"]


def wait(seconds: float) -> None:
    time.sleep(seconds)
