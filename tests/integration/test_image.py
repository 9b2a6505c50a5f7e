"""The image, built from this checkout by `bash scripts/image.sh containerfile` (minutes: run with
`pytest -m image`, as root), serves the webhook from its own root filesystem, and runs the
controller from it against the test control plane.

Both builds are run: the Debian-packages one (mmdebstrap + umoci) and the Containerfile built by
buildah. Each is unpacked and started the way a container runtime would start it, with no
runtime here: its entrypoint, command, environment and user from the image's config, in a mount
namespace where the root filesystem is read-only and only /tmp and /dev/shm (tmpfs) and the
pod's mounts (plan, TLS files) are writable.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from support import controllers
import jsonpatch
from support import apiserver
import pytest
from test_controller_rbac import Identity, cleanup, install   # noqa: F401 (cleanup: a fixture)
from test_webhook_gunicorn import MUTATE, Served, admission_review, job_pod, metric, serve, write_plan

from devkit import cluster
from rulec import manifests

pytestmark = pytest.mark.image

REPO = Path(__file__).resolve().parents[2]
BUILDS = ("debian-packages", "containerfile")   # the order scripts/image.sh prints them in

# Runs in a new mount namespace as root: mount what a container runtime mounts, make the root
# and the pod's mounts read-only, then become the image's user and exec its entrypoint.
LAUNCH = r"""
set -eu
root=$1 pod=$2 user=$3; shift 3
mount --bind "$root" "$root"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/tmp"
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for node in null zero random urandom; do
    touch "$root/dev/$node" && mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir "$root/dev/shm" && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
mount -t proc proc "$root/proc"
mkdir -p "$root$pod" && mount --bind "$pod" "$root$pod" && mount -o remount,bind,ro "$root$pod"
mount -o remount,bind,ro "$root"
exec chroot --userspec="$user" "$root" "$@"
"""


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    """Build both images; their `oci:LAYOUT:TAG` references by build."""
    if os.geteuid() != 0:
        pytest.fail("the image test runs as root (mmdebstrap, umoci, mounts, chroot)")
    started = time.perf_counter()
    done = subprocess.run(["bash", "scripts/image.sh", "containerfile"], cwd=REPO,
                          stdout=subprocess.PIPE, text=True, timeout=3600)
    assert done.returncode == 0, "scripts/image.sh failed (its messages are above)"
    print(f"\nscripts/image.sh containerfile: {time.perf_counter() - started:.0f} s")
    return dict(zip(BUILDS, done.stdout.split()[-2:]))


def inspect(reference: str) -> dict[str, Any]:
    done = subprocess.run(["skopeo", "inspect", "--config", reference], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)["config"]


def unpack(reference: str, bundle: Path) -> Path:
    _, layout, tag = reference.split(":")
    subprocess.run(["umoci", "unpack", "--image", f"{REPO / layout}:{tag}", str(bundle)],
                   check=True, stdout=subprocess.DEVNULL)
    return bundle / "rootfs"


def size(path: Path) -> str:
    return subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True,
                          check=True).stdout.split()[0]


def rss_mib(served: Served) -> float:
    """Resident memory of the master and its workers."""
    pid = served.process.pid
    pids = [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    kib = sum(int(line.split()[1]) for p in pids for line in Path(f"/proc/{p}/status").read_text().splitlines()
              if line.startswith("VmRSS:"))
    return kib / 1024


@pytest.mark.parametrize("build", BUILDS)
def test_the_image_serves_admission_as_its_user_from_a_read_only_root(
        images: dict[str, str], tmp_path: Path, build: str) -> None:
    reference = images[build]
    config = inspect(reference)
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] + config["Cmd"] == [
        "/opt/jobrules/bin/gunicorn", "-c", "python:runtime.webhook.gunicorn_conf"]
    rootfs = unpack(reference, tmp_path / "bundle")
    assert (rootfs / manifests.CONTROLLER_COMMAND.lstrip("/")).is_file()
    layout = REPO / reference.split(":")[1]
    print(f"\n{build}: OCI layout {size(layout)}, root filesystem {size(rootfs)}")

    pod = tmp_path / "pod"   # the pod's read-only mounts: plan, TLS files (and, from outside, the log)
    pod.mkdir()
    image_env = dict(item.split("=", 1) for item in config["Env"])
    command = ["unshare", "--mount", "sh", "-c", LAUNCH, "launch", str(rootfs), str(pod),
               config["User"], *config["Entrypoint"], *config["Cmd"]]
    # PROMETHEUS_MULTIPROC_DIR unset, as in the Deployment: the webhook makes its own under /tmp.
    with serve(write_plan(pod / "plan.json"), pod, command=command, base_env=image_env,
               PROMETHEUS_MULTIPROC_DIR="") as served:
        status = Path(f"/proc/{served.process.pid}/status").read_text()
        assert "\nUid:\t65532\t65532\t65532\t65532\n" in status
        assert served.call("GET", "/healthz") == (200, b"ok\n")
        assert served.call("GET", "/readyz") == (200, b"ok\n")
        pod_object = job_pod()
        code, body = served.call("POST", MUTATE, admission_review(pod_object))
        response = json.loads(body)["response"]
        assert (code, response["allowed"], response["patchType"]) == (200, True, "JSONPatch")
        patched = jsonpatch.apply_patch(pod_object, json.loads(base64.b64decode(response["patch"])))
        assert patched["metadata"]["annotations"]["example.com/logs"] == "shipped"
        assert [c["name"] for c in patched["spec"]["initContainers"]] == ["log-agent"]
        assert metric(served.metrics(), "jobrules_webhook_requests_total", result="patched") == 1
        print(f"{build}: master and 2 workers resident {rss_mib(served):.0f} MiB")
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(30) == 0
    assert "Shutting down" in served.log
    assert "[ERROR]" not in served.log and "Traceback" not in served.log, served.log


@pytest.mark.parametrize("build", BUILDS)
def test_the_controller_runs_from_the_image_as_its_service_account(
        images: dict[str, str], control_plane: Any, api: Any, namespace: str, tmp_path: Path,
        cleanup: list[Identity], build: str) -> None:
    """The Deployment's command, as uid 65532 on the read-only root with /tmp a tmpfs, with the
    rendered ServiceAccount's token and the shipped rules: ready once its watches have listed,
    then a Volcano job's verdict written; SIGTERM releases the Lease and exits 0."""
    reference = images[build]
    config = inspect(reference)
    rootfs = unpack(reference, tmp_path / "bundle")
    pod = tmp_path / "pod"
    pod.mkdir()
    plan = controllers.compile_plan(controllers.REPO / "rules", pod / "plan.json")
    identity = install(control_plane, api, namespace, plan, pod)
    cleanup.append(identity)
    [port] = cluster.free_ports(1)
    image_env = dict(item.split("=", 1) for item in config["Env"])
    env = {**image_env, **identity.env(), "JOBRULES_PLAN": str(plan), "JOBRULES_NAMESPACES": namespace,
           "JOBRULES_HEALTH_BIND": f"127.0.0.1:{port}", "JOBRULES_IDENTITY": "image",
           "HOME": "/nonexistent"}
    command = ["unshare", "--mount", "sh", "-c", LAUNCH, "launch", str(rootfs), str(pod),
               config["User"], manifests.CONTROLLER_COMMAND]
    log_path = tmp_path / "controller.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    running = controllers.Running(process, port, log_path)
    try:
        def ready() -> bool:
            assert process.poll() is None, f"the controller exited:\n{running.logs()}"
            return running.get("/readyz")[0] == 200
        apiserver.wait_for("the controller from the image to be ready", ready, timeout=90)
        status = Path(f"/proc/{process.pid}/status").read_text()   # each of unshare, sh, chroot execs the next
        assert "\nUid:\t65532\t65532\t65532\t65532\n" in status
        job = apiserver.create(api, apiserver.VOLCANO_JOBS, {
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": namespace},
            "spec": {"minAvailable": 1, "tasks": [{"name": "worker", "replicas": 1, "template": {
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}}}]}})
        controllers.wait_for_verdict(api, apiserver.VOLCANO_JOBS.path(namespace, job["metadata"]["name"]),
                                     "Pending")
        print(f"\n{build}: controller resident {_rss_mib(process.pid):.0f} MiB")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, running.logs()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    logs = running.logs()
    assert "released the lease" in logs
    assert " ERROR " not in logs and "Traceback" not in logs, logs


def _rss_mib(pid: int) -> float:
    line = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024
