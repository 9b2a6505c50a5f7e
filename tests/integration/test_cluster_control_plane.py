"""The local control plane itself: version, CRDs, the kubelet stand-in's statuses, and that
stopping it, by any route, leaves no process and no file behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from support import apiserver
import pytest

from devkit import cluster
from runtime.controller.kube import Client

pytestmark = pytest.mark.integration

GO_MOD = cluster.REPO / "tools" / "k8s" / "go.mod"
CRD_FOLDER = cluster.crds_dir()
CRDS = [(crd["metadata"]["name"], crd["spec"])
        for crd in (cluster.crd_manifests(CRD_FOLDER) if CRD_FOLDER else [])]


def test_version_is_the_pinned_one(api, control_plane):
    if control_plane.plane is None or os.environ.get("KUBEBUILDER_ASSETS"):
        pytest.skip("binaries not built from tools/k8s")
    pinned = re.search(r"^\s*k8s\.io/kubernetes (v\S+)$", GO_MOD.read_text(), re.MULTILINE)[1]
    assert apiserver.get(api, "/version")["gitVersion"] == pinned


@pytest.mark.parametrize("name, spec", CRDS, ids=[name for name, _ in CRDS])
def test_shared_crd_is_established_and_served(api, namespace, name, spec):
    """Served in every version: a list of the resource answers, empty in a fresh namespace
    (other tests' objects may live elsewhere on the shared plane)."""
    crd = apiserver.get(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    assert apiserver.condition(crd, "Established")["status"] == "True"
    assert crd["spec"]["conversion"]["strategy"] == "None"
    for version in spec["versions"]:
        base = f"/apis/{spec['group']}/{version['name']}"
        plural = spec["names"]["plural"]
        assert apiserver.get(api, f"{base}/{plural}")["kind"].endswith("List")
        if spec.get("scope", "Namespaced") == "Namespaced":
            assert apiserver.get(api, f"{base}/namespaces/{namespace}/{plural}")["items"] == []


LIFECYCLES = {
    # name: (helper, its options, pod phase, state of container "main", its exit code and reason)
    "running": (apiserver.report_running, {}, "Running", "running", None),
    "succeeded": (apiserver.report_succeeded, {}, "Succeeded", "terminated", (0, "Completed")),
    "failed": (apiserver.report_failed, {"exit_code": 3}, "Failed", "terminated", (3, "Error")),
    "oom-killed": (apiserver.report_oom_killed, {}, "Failed", "terminated", (137, "OOMKilled")),
    "evicted": (apiserver.report_evicted, {}, "Failed", "terminated", (137, "Error")),
    "init-failed": (apiserver.report_init_failed, {"exit_code": 2}, "Failed", "waiting", None),
}


@pytest.mark.parametrize("helper, options, phase, state, ended", LIFECYCLES.values(),
                         ids=LIFECYCLES.keys())
def test_kubelet_stand_in_writes_statuses_the_api_server_accepts(
        api, namespace, helper, options, phase, state, ended):
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(
        namespace, "p", containers=["main", "sidecar"], init_containers=["setup"]))

    status = helper(api, pod, **options)["status"]

    assert status["phase"] == phase
    [main] = [c for c in status["containerStatuses"] if c["name"] == "main"]
    assert list(main["state"]) == [state]
    if ended:
        terminated = main["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == ended


def test_eviction_reports_what_the_kubelet_reports(api, namespace):
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "evicted"))
    status = apiserver.report_evicted(api, pod)["status"]
    assert (status["reason"], status["phase"]) == ("Evicted", "Failed")
    assert apiserver.condition({"status": status}, "DisruptionTarget")["reason"] == "TerminationByKubelet"


def test_init_failure_keeps_a_restarting_pod_pending(api, namespace):
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(
        namespace, "retrying", init_containers=["setup", "fetch"], restart_policy="OnFailure"))
    status = apiserver.report_init_failed(api, pod, container="fetch", exit_code=1)["status"]
    assert status["phase"] == "Pending"
    setup, fetch = status["initContainerStatuses"]
    assert setup["state"]["terminated"]["exitCode"] == 0
    assert fetch["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert fetch["lastState"]["terminated"]["exitCode"] == 1


# ---------------------------------------------------------------------------------------------
# Teardown leaves nothing


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devkit.cluster", *args], env=env,
                          capture_output=True, text=True, timeout=180)


def test_cli_up_env_down_leaves_nothing(tmp_path):
    env = os.environ | {"JOBRULES_CLUSTER_STATE": str(tmp_path)}
    up = run_cli("up", "--no-crds", "--nodes", "1", env=env)
    assert up.returncode == 0, up.stderr
    [export] = up.stdout.splitlines()
    kubeconfig = Path(export.removeprefix("export KUBECONFIG="))
    root = kubeconfig.parent
    try:
        plane = cluster.ControlPlane.from_json((tmp_path / "state.json").read_text())
        running = (plane.controller_manager, plane.scheduler, plane.kwok, plane.training_operator)
        assert len(cluster.processes_using(root)) == 2 + sum(running)
        assert run_cli("env", env=env).stdout == up.stdout
        with Client.from_kubeconfig(kubeconfig) as api:
            names = {ns["metadata"]["name"] for ns in apiserver.get(api, "/api/v1/namespaces")["items"]}
            nodes = [node["metadata"]["name"] for node in apiserver.get(api, "/api/v1/nodes")["items"]]
        assert {"default", "kube-system"} <= names
        assert nodes == (["kwok-node-0"] if plane.kwok else [])
        assert plane.nodes == tuple(nodes)
        assert not plane.training_operator  # it needs the CRDs
    finally:
        down = run_cli("down", env=env)
    assert down.returncode == 0, down.stderr
    assert cluster.processes_using(root) == []
    assert not root.exists()
    assert not (tmp_path / "state.json").exists()
    assert run_cli("env", env=env).returncode == 1


OWNER = """
import sys, time
from devkit import cluster
with cluster.running(crds=False) as plane:
    print(plane.root, flush=True)
    time.sleep(600)
"""


def start_owner() -> tuple[subprocess.Popen[str], Path]:
    """A process that runs a control plane attached to itself; returns it and the plane's root."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    root = Path(owner.stdout.readline().strip())
    assert cluster.processes_using(root), f"no control plane under {root!r}"
    return owner, root


def test_sigterm_to_the_owner_tears_down():
    owner, root = start_owner()
    owner.send_signal(signal.SIGTERM)
    owner.wait(30)
    assert cluster.processes_using(root) == []
    assert not root.exists()


def test_sigkill_to_the_owner_kills_the_processes_and_the_next_start_sweeps_the_files():
    owner, root = start_owner()
    owner.kill()
    owner.wait(30)
    apiserver.wait_for("the kernel to kill the orphans", lambda: not cluster.processes_using(root), 10)
    assert root.exists()
    aged = time.time() - cluster.STALE_AFTER_SECONDS - 1
    os.utime(root, (aged, aged))
    assert root in cluster.sweep_stale()
    assert not root.exists()
