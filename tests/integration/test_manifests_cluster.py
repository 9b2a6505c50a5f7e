"""`rulec manifests` against the real API server: the output installs as docs/deploy.md says
(`kubectl apply --server-side -k DIR`), equals the stream, and its webhook configuration makes the
API server call the webhook for pods the Job controller creates.

The API server validates every object, compiles the CEL match conditions, and the PodSecurity
admission plugin judges the webhook's pod against the `restricted` profile its Namespace
enforces. cert-manager and prometheus-operator objects are validated against their real CRDs
(`tests/integration/crds`). Pods never run here (no kubelet), so the last test serves the webhook
on the host and points the rendered configuration at it by URL.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from support import apiserver
import pytest
import yaml
from kubernetes.client import ApiClient
from test_webhook_served_to_the_cluster import wait_until_called
from test_webhook_gunicorn import serve

from devkit import cluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ADDON_CRDS = Path(__file__).parent / "crds"
RULEC = Path(sys.executable).parent / "rulec"
INJECTION = """
inject "traced" into pods of batchjob {
    annotate "example.com/traced" = "yes"
}
"""
FAIL_CLOSED = "webhook failure closed timeout 7s\n"

Kubectl = Callable[..., str]
DEPLOY_DOC = REPO / "docs" / "deploy.md"


@pytest.fixture(scope="session")
def shell_env(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a user's shell at the test cluster: `kubectl` (next to the
    control-plane binaries, else built) and `rulec` on the PATH, KUBECONFIG set."""
    kubeconfig = str(control_plane.plane.kubeconfig if control_plane.plane else os.environ["KUBECONFIG"])
    path = os.pathsep.join([str(cluster.find_kubectl().parent), str(RULEC.parent),
                            os.environ.get("PATH", "")])
    return {**os.environ, "KUBECONFIG": kubeconfig, "PATH": path,
            "KUBECACHEDIR": str(tmp_path_factory.mktemp("kubectl-cache"))}


@pytest.fixture(scope="session")
def kubectl(shell_env: dict[str, str]) -> Kubectl:
    """Run kubectl against the test cluster."""
    def run(*args: str) -> str:
        done = subprocess.run(["kubectl", *args], env=shell_env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stderr}"
        return done.stdout

    return run


@pytest.fixture(scope="session")
def addon_crds(kubectl: Kubectl) -> None:
    """cert-manager's Certificate and Issuer, prometheus-operator's ServiceMonitor."""
    kubectl("apply", "--server-side", "--field-manager", "jobrules-tests", "-f", str(ADDON_CRDS))
    kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
            "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io",
            "crd/servicemonitors.monitoring.coreos.com")


def rulec(*args: str, cwd: Path = REPO) -> str:
    """`rulec manifests` as users run it; returns its stdout."""
    done = subprocess.run([str(RULEC), "manifests", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def rules(tmp_path: Path, *extra: str) -> list[str]:
    """rules/ plus files of `extra` rules (compiled together: one program)."""
    paths = ["rules"]
    for i, text in enumerate(extra):
        path = tmp_path / f"extra-{i}.rules"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return paths


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


@pytest.fixture
def installed(kubectl: Kubectl) -> Iterator[list[Path]]:
    """Output folders applied by the test, deleted after it (namespace and configuration)."""
    folders: list[Path] = []
    yield folders
    for folder in folders:
        kubectl("delete", "-k", str(folder), "--ignore-not-found", "--wait=false")


@pytest.mark.parametrize("variant", ["shipped", "injecting", "self-managed"])
def test_the_output_installs_and_equals_its_kustomization(
        api: ApiClient, kubectl: Kubectl, addon_crds: None, installed: list[Path], tmp_path: Path,
        variant: str) -> None:
    """shipped: rules/ as they are (no injection), cert-manager with every optional object.
    injecting: rules/ plus a fail-closed injection into Job pods, a user CA, three replicas.
    self-managed: rules/ plus the injection, the controller's certificates, three controllers."""
    namespace = f"jobrules-{uuid.uuid4().hex[:6]}"
    if variant == "shipped":
        args = ["--rules", "rules", "--certs", "cert-manager", "--network-policy", "--monitoring"]
    elif variant == "self-managed":
        args = ["--rules", *rules(tmp_path, INJECTION), "--certs", "self-managed",
                "--controller-replicas", "3", "--network-policy"]
    else:
        ca = tmp_path / "ca.crt"
        ca.write_bytes(cluster.CertificateAuthority.create("jobrules-webhook-ca").cert_pem)
        args = ["--rules", *rules(tmp_path, INJECTION, FAIL_CLOSED), "--ca-bundle", str(ca),
                "--replicas", "3"]
    args += ["--image", "registry.example.com/jobrules:0.1.0", "--namespace", namespace]
    stream = documents(rulec(*args))
    folder = tmp_path / "deploy"
    rulec(*args, "--output-dir", str(folder))
    assert documents(kubectl("kustomize", str(folder))) == stream

    installed.append(folder)
    started = time.perf_counter()
    applied = kubectl("apply", "--server-side", "--field-manager", "rulec", "-k", str(folder))
    print(f"\n{variant}: {len(stream)} objects applied in {time.perf_counter() - started:.1f} s")
    assert len(applied.splitlines()) == len(stream)
    assert all(line.endswith(" serverside-applied") for line in applied.splitlines()), applied

    stored = json.loads(kubectl("get", "-k", str(folder), "-o", "json"))["items"]
    assert [(o["kind"], o["metadata"]["name"]) for o in stored] == [
        (o["kind"], o["metadata"]["name"]) for o in stream]
    configuration = stored[-1]
    assert configuration["kind"] == "MutatingWebhookConfiguration"
    if variant == "injecting":
        [hook] = configuration["webhooks"]
        assert hook["matchConditions"] == stream[-1]["webhooks"][0]["matchConditions"]
        assert hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] == 7
        assert hook["clientConfig"]["service"]["namespace"] == namespace
    elif variant == "self-managed":
        [hook] = configuration["webhooks"]
        assert "caBundle" not in hook["clientConfig"]   # the controller's leader writes it
        [secret] = [o for o in stored if o["kind"] == "Secret"]
        assert "data" not in secret
    else:
        assert "webhooks" not in configuration   # no injection in rules/: nothing to call
    # Why each of the controller's rules is there reaches the cluster.
    for kind in ("ClusterRole", "Role"):
        [rendered] = [o for o in stream if o["kind"] == kind]
        [kept] = [o for o in stored if o["kind"] == kind]
        assert kept["metadata"]["annotations"]["jobrules.dev/needed-by"] == \
            rendered["metadata"]["annotations"]["jobrules.dev/needed-by"]
        assert kept["rules"] == rendered["rules"]

    # Each pod as its Deployment would create it passes `restricted` (and the webhook's,
    # fail-closed, resolves its priority class); dry run, as there is no kubelet to run them.
    for deployment in (o for o in stream if o["kind"] == "Deployment"):
        template = deployment["spec"]["template"]
        name = deployment["metadata"]["name"]
        pod = apiserver.create(api, apiserver.PODS, {
            "apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
            "metadata": {"name": f"{name}-probe", "namespace": namespace, **template["metadata"]},
        }, dryRun="All")
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532
        critical = variant == "injecting" and name == "jobrules-webhook"
        assert pod["spec"].get("priority") == (2000000000 if critical else 0)


def documented(section: str) -> list[str]:
    """The command lines of the first `sh` block under the heading `section` of docs/deploy.md."""
    text = DEPLOY_DOC.read_text(encoding="utf-8").split(f"\n{section}\n", 1)[1]
    block = re.search(r"^```sh\n(.*?)^```", text, re.S | re.M)
    assert block is not None, section
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_the_documented_dry_run_then_install_on_a_fresh_namespace(
        shell_env: dict[str, str], kubectl: Kubectl, tmp_path: Path) -> None:
    """docs/deploy.md's "Check first" commands, as written, in a folder where `rules/` is the
    repository's, on a cluster that never had the namespace: every object dry-run applied and
    nothing made but the Namespace; then the install's `apply -k`. No kubectl command says
    anything on standard error (no NotFound, no warning about the kustomization's order)."""
    check = documented("### Check first (server-side dry run)")
    install = [c for c in documented("### Self-managed") if " -k " in f"{c} "]
    assert [c.split()[:2] for c in check] == [["rulec", "manifests"], ["kubectl", "apply"],
                                             ["kubectl", "apply"]] and "--dry-run=server" in check[2]
    assert install == ["kubectl apply --server-side -k jobrules-deploy"]
    (tmp_path / "rules").symlink_to(REPO / "rules")
    namespace = "jobrules-system"
    assert f"namespace/{namespace}" not in kubectl("get", "namespaces", "-o", "name").split()
    said: dict[str, subprocess.CompletedProcess[str]] = {}
    try:
        for command in [*check, *install]:
            done = subprocess.run(shlex.split(command), cwd=tmp_path, env=shell_env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"{command}:\n{done.stderr}"
            said[command] = done
            if command.startswith("kubectl"):
                assert done.stderr == "", f"{command}:\n{done.stderr}"
            if "--dry-run=server" in command:   # nothing made but the Namespace
                assert kubectl("get", "all,configmaps,secrets", "-n", namespace, "-o", "name") == ""
    finally:
        subprocess.run(["kubectl", "delete", "-k", "jobrules-deploy", "--ignore-not-found",
                        "--wait=false"], cwd=tmp_path, env=shell_env, capture_output=True,
                       timeout=120)
    wrote = said[check[0]].stderr.splitlines()
    assert wrote[-1].startswith("rulec manifests: wrote 17 objects"), wrote
    objects = documents(kubectl("kustomize", str(tmp_path / "jobrules-deploy")))
    dry = said[check[2]].stdout.splitlines()
    assert len(dry) == len(objects) and all(line.endswith(" serverside-applied (server dry run)")
                                            for line in dry), dry
    applied = said[install[0]].stdout.splitlines()
    assert len(applied) == len(objects) and all(line.endswith(" serverside-applied")
                                                for line in applied), applied


def test_the_rendered_configuration_has_the_api_server_call_the_webhook(
        api: ApiClient, kubectl: Kubectl, namespace: str, controller_manager: None,
        tmp_path: Path) -> None:
    """The webhook serves the rendered ConfigMap's plan on the host; the rendered configuration,
    its caBundle from --ca-bundle, is pointed there by URL; the Job controller creates a pod."""
    args = ["--rules", *rules(tmp_path, INJECTION), "--image", "registry.example.com/jobrules:0.1.0"]
    [configmap] = [o for o in documents(rulec(*args, "--certs", "cert-manager"))
                   if o["kind"] == "ConfigMap"]
    plan = tmp_path / "plan.json"
    plan.write_text(configmap["data"]["plan.json"], encoding="utf-8")
    workdir = tmp_path / "webhook"
    workdir.mkdir()
    with serve(plan, workdir) as served:
        ca = tmp_path / "ca.crt"
        ca.write_bytes(served.ca.cert_pem)
        configuration = documents(rulec(*args, "--ca-bundle", str(ca)))[-1]
        configuration["metadata"]["name"] = f"jobrules-{namespace}"
        [hook] = configuration["webhooks"]
        hook["clientConfig"]["url"] = served.url
        del hook["clientConfig"]["service"]
        # Other tests share the control plane: only this test's namespace.
        hook["namespaceSelector"]["matchLabels"] = {"kubernetes.io/metadata.name": namespace}
        apiserver.create(api, apiserver.MUTATING_WEBHOOKS, configuration)
        try:
            wait_until_called(api, namespace)
            job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "train"))
            [pod] = apiserver.job_pods(api, job)
        finally:
            apiserver.delete(api, apiserver.MUTATING_WEBHOOKS.path(name=configuration["metadata"]["name"]))
    assert pod["metadata"]["annotations"]["example.com/traced"] == "yes"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"


def test_with_native_the_policies_install_and_the_webhook_is_not_called(
        api: ApiClient, kubectl: Kubectl, installed: list[Path], namespace: str,
        tmp_path: Path) -> None:
    """`--native`: the MutatingAdmissionPolicies and bindings (the injection's, and the one adding
    the batch Job kind's podFailurePolicy fragment) apply beside the rest; the webhook
    configuration then calls for nothing, and the API server runs the policies itself."""
    injection = tmp_path / "traced.rules"
    injection.write_text(INJECTION, encoding="utf-8")
    args = ["--rules", "examples/pod-failure-policy/exit-codes", str(injection),
            "--certs", "self-managed", "--native", "--image", "registry.example.com/jobrules:0.1.0",
            "--namespace", f"jobrules-{uuid.uuid4().hex[:6]}"]
    stream = documents(rulec(*args))
    folder = tmp_path / "deploy"
    rulec(*args, "--output-dir", str(folder))
    assert documents(kubectl("kustomize", str(folder))) == stream
    installed.append(folder)
    applied = kubectl("apply", "--server-side", "--field-manager", "rulec", "-k", str(folder))
    assert all(line.endswith(" serverside-applied") for line in applied.splitlines()), applied
    stored = json.loads(kubectl("get", "-k", str(folder), "-o", "json"))["items"]
    assert [(o["kind"], o["metadata"]["name"]) for o in stored] == [
        (o["kind"], o["metadata"]["name"]) for o in stream]
    policies = {o["metadata"]["name"]: o for o in stored if o["kind"] == "MutatingAdmissionPolicy"}
    bindings = {o["spec"]["policyName"] for o in stored
                if o["kind"] == "MutatingAdmissionPolicyBinding"}
    assert set(policies) == bindings == {"jobrules-traced", "jobrules-batchjob-pod-failure-policy"}
    assert "webhooks" not in stored[-1]   # every injection went native: nothing to call

    job = apiserver.job_manifest(namespace, "native", backoff_limit=0)
    pod = apiserver.pod_manifest(namespace, "native-0", owner={
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "native", "uid": str(uuid.uuid4())}})

    def mutated() -> tuple[dict[str, Any], dict[str, Any]] | None:
        made_job = apiserver.create(api, apiserver.JOBS, job, dryRun="All")
        made_pod = apiserver.create(api, apiserver.PODS, pod, dryRun="All")
        done = "podFailurePolicy" in made_job["spec"] and (
            "example.com/traced" in (made_pod["metadata"].get("annotations") or {}))
        return (made_job, made_pod) if done else None

    made_job, made_pod = apiserver.wait_for("the API server to run the policies", mutated, timeout=60)
    assert [r["action"] for r in made_job["spec"]["podFailurePolicy"]["rules"]] == ["Ignore", "FailJob"]
    assert made_pod["metadata"]["annotations"]["example.com/traced"] == "yes"
