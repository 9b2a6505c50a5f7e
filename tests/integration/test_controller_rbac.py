"""Least privilege, on the real control plane: the controller run with the identity `rulec
manifests` renders for it (its ServiceAccount, the ClusterRole derived from the plan, the Role
in its namespace, their bindings), as a process holding a token minted for that account
(TokenRequest), with leader election on, does its whole job: verdicts, conditions, status fields
and Events on every shipped kind, a pod deleted by `restart pod`, a Volcano Command made by
`restart job`, a FailureTarget condition set by `fail job`, and, self-managed, the webhook's
serving certificate issued, trusted and renewed. `kubectl auth can-i` as that account is denied
what the plan does not need.

Cluster-wide objects get names of their own per test (the control plane is shared).
"""

from __future__ import annotations

import base64
import dataclasses
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import controllers
from support import apiserver
import pytest
import yaml
from test_controller_actions import COMMANDS, EVICTIONS, VOLCANO, gone, journal, volcano_job, worker
from test_controller_kinds import SCENARIOS, Scenario, verdict_written_back

from devkit import cluster
from rulec import manifests
from runtime import certificates, registration
from runtime import plan as planlib

pytestmark = pytest.mark.integration

RBAC = "rbac.authorization.k8s.io/v1"
RESOURCES = {"ServiceAccount": apiserver.SERVICE_ACCOUNTS, "ClusterRole": apiserver.Resource(RBAC, "clusterroles"),
             "ClusterRoleBinding": apiserver.Resource(RBAC, "clusterrolebindings"),
             "Role": apiserver.Resource(RBAC, "roles"), "RoleBinding": apiserver.Resource(RBAC, "rolebindings"),
             "Secret": apiserver.Resource("v1", "secrets"),
             "MutatingWebhookConfiguration": apiserver.MUTATING_WEBHOOKS}
CLUSTER_WIDE = ("ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration")


@dataclasses.dataclass(frozen=True)
class Identity:
    namespace: str
    account: str              # system:serviceaccount:NS:NAME
    kubeconfig: Path
    objects: list[dict[str, Any]]
    kubectl: Path
    admin_kubeconfig: str

    def env(self, **more: str) -> dict[str, str]:
        """The controller's environment: this identity, leader election on its Lease."""
        return {"KUBECONFIG": str(self.kubeconfig), "JOBRULES_LEADER_ELECT": "true",
                "JOBRULES_LEASE_NAMESPACE": self.namespace,
                "JOBRULES_LEASE_NAME": manifests.CONTROLLER, **more}

    def can(self, verb: str, resource: str) -> bool:
        """`kubectl auth can-i VERB RESOURCE[/NAME] [--subresource SUB] --as=system:serviceaccount:
        NS:NAME -n NS`; `RESOURCE:SUB` names a subresource."""
        resource, _, sub = resource.partition(":")
        done = subprocess.run([str(self.kubectl), "--kubeconfig", self.admin_kubeconfig, "auth",
                               "can-i", verb, resource, *(["--subresource", sub] if sub else []),
                               f"--as={self.account}", "-n", self.namespace],
                              capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() in ("yes", "no"), done.stdout + done.stderr
        return done.stdout.strip() == "yes"

    def find(self, kind: str) -> dict[str, Any]:
        [found] = [o for o in self.objects if o["kind"] == kind]
        return found


def install(control_plane: Any, api: Any, namespace: str, plan: Path, workdir: Path,
            certs: manifests.Certificates = manifests.CertManager(),
            kinds: tuple[str, ...] = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                      "Role", "RoleBinding")) -> Identity:
    """Create the controller's objects `rulec manifests` renders for `plan` in `namespace` (those
    of `kinds`), cluster-wide ones renamed for the test; mint a token; a kubeconfig holding it."""
    text = plan.read_text()
    rendered = manifests.render(planlib.loads(text), text, manifests.Options(
        image="registry.example.com/jobrules:0.1.0", certificates=certs, namespace=namespace))
    unique = f"jobrules-{namespace}"
    objects = []
    for obj in rendered:
        if obj["kind"] not in kinds or obj["kind"] in ("ServiceAccount", "Secret") and \
                obj["metadata"]["name"] not in (manifests.CONTROLLER, manifests.TLS_SECRET):
            continue
        if obj["kind"] in CLUSTER_WIDE:
            obj["metadata"]["name"] = unique
        if obj["kind"] == "ClusterRoleBinding":
            obj["roleRef"]["name"] = unique
        for rule in obj.get("rules") or []:   # the configuration's rule names it
            if rule.get("resourceNames") == [registration.DEFAULT_NAME]:
                rule["resourceNames"] = [unique]
        for hook in obj.get("webhooks") or []:   # called for this test's namespace only
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        objects.append(apiserver.create(api, RESOURCES[obj["kind"]], obj))
    account = f"system:serviceaccount:{namespace}:{manifests.CONTROLLER}"
    token = api.create(apiserver.SERVICE_ACCOUNTS.path(namespace, manifests.CONTROLLER) + "/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}})["status"]["token"]
    admin = controllers.kubeconfig(control_plane)
    config = yaml.safe_load(Path(admin).read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    [cluster_entry] = [c for c in config["clusters"] if c["name"] == context["cluster"]]
    path = workdir / "controller.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster_entry],
        "users": [{"name": "controller", "user": {"token": token}}],
        "contexts": [{"name": "controller", "context": {"cluster": cluster_entry["name"],
                                                        "user": "controller"}}],
        "current-context": "controller"}))
    return Identity(namespace, account, path, objects, cluster.find_kubectl(), admin)


@pytest.fixture
def cleanup(api: Any) -> Iterator[list[Identity]]:
    """Cluster-wide objects of the identities made, deleted after the test (the namespace goes
    with the rest)."""
    made: list[Identity] = []
    yield made
    for identity in made:
        for obj in identity.objects:
            if obj["kind"] in CLUSTER_WIDE:
                apiserver.delete(api, RESOURCES[obj["kind"]].path(name=obj["metadata"]["name"]))


@pytest.fixture(scope="module")
def shipped_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return controllers.compile_plan(controllers.REPO / "rules",
                                    tmp_path_factory.mktemp("plan") / "plan.json")


# ---------------------------------------------------------------------------------------------
# The shipped rules: verdicts on every kind, and nothing the rules do not need


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.kind)
def test_the_shipped_rules_verdicts_with_the_derived_role(
        control_plane: Any, api: Any, namespace: str, shipped_plan: Path, tmp_path: Path,
        cleanup: list[Identity], scenario: Scenario) -> None:
    identity = install(control_plane, api, namespace, shipped_plan, tmp_path)
    cleanup.append(identity)
    verdict_written_back(control_plane, api, namespace, shipped_plan, tmp_path, scenario,
                         **identity.env())
    lease = apiserver.get(api, f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/"
                          f"{manifests.CONTROLLER}")
    assert lease["spec"]["acquireTime"]   # it led: created the Lease, then released it


ALLOWED = [("list", "pods"), ("watch", "pods"), ("get", "jobs.batch"), ("patch", "jobs.batch"),
           ("patch", "jobs.batch:status"), ("watch", "jobs.batch.volcano.sh"),
           ("patch", "jobs.batch.volcano.sh:status"), ("patch", "workflows.argoproj.io"),
           ("create", "events.events.k8s.io"), ("patch", "events.events.k8s.io"),
           ("create", "leases.coordination.k8s.io"),
           ("update", f"leases.coordination.k8s.io/{manifests.CONTROLLER}")]
DENIED = [("get", "secrets"), ("list", "secrets"), ("create", "secrets"),
          ("delete", "pods"), ("create", "pods:eviction"), ("create", "pods"), ("patch", "pods"),
          ("get", "pods"),   # nothing reads one pod: lists and watches only
          ("create", "commands.bus.volcano.sh"), ("delete", "jobs.batch"),
          ("create", "jobs.batch"), ("update", "jobs.batch"),
          ("patch", "workflows.argoproj.io:status"),      # Argo writes no condition
          ("patch", "pipelineruns.tekton.dev:status"),
          ("list", "cronjobs.batch"), ("list", "deployments.apps"), ("get", "configmaps"),
          ("list", "nodes"), ("create", "events"),        # core Events: events.k8s.io only
          ("update", "leases.coordination.k8s.io/someone-else"),
          ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io"),
          ("create", "serviceaccounts:token"), ("impersonate", "users")]


def test_the_shipped_rules_role_allows_what_they_need_and_nothing_more(
        control_plane: Any, api: Any, namespace: str, shipped_plan: Path, tmp_path: Path,
        cleanup: list[Identity]) -> None:
    identity = install(control_plane, api, namespace, shipped_plan, tmp_path)
    cleanup.append(identity)
    assert [(v, r) for v, r in ALLOWED if not identity.can(v, r)] == []
    assert [(v, r) for v, r in DENIED if identity.can(v, r)] == []


# ---------------------------------------------------------------------------------------------
# Actions: each with exactly what it needs


def test_restart_pod_deletes_the_pod_with_the_derived_role(
        control_plane: Any, api: Any, namespace: str, tmp_path: Path, cleanup: list[Identity]) -> None:
    plan = controllers.compile_plan(EVICTIONS, tmp_path / "plan.json")
    identity = install(control_plane, api, namespace, plan, tmp_path)
    cleanup.append(identity)
    assert identity.can("delete", "pods") and not identity.can("create", "pods:eviction")
    assert not identity.can("get", "secrets")
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, plan, namespace, tmp_path, **identity.env()) as controller:
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        apiserver.report_evicted(api, pod)
        apiserver.wait_for("the pod deleted", lambda: gone(api, pod))
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None)
        assert controller.metric("jobrules_controller_api_requests_total", code="403") == 0, \
            controller.logs()


def test_restart_job_creates_a_volcano_command_with_the_derived_role(
        control_plane: Any, api: Any, namespace: str, tmp_path: Path, cleanup: list[Identity]) -> None:
    plan = controllers.compile_plan(controllers.volcano_restart_rules(tmp_path), tmp_path / "plan.json")
    identity = install(control_plane, api, namespace, plan, tmp_path)
    cleanup.append(identity)
    assert identity.can("create", "commands.bus.volcano.sh") and not identity.can("delete", "pods")
    assert not identity.can("delete", "commands.bus.volcano.sh")
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, plan, namespace, tmp_path, **identity.env()) as controller:
        controllers.wait_for_verdict(api, VOLCANO.path(namespace, "train"), "Running")
        apiserver.report_evicted(api, pod)
        [command] = apiserver.wait_for("the Command", lambda: apiserver.get(api, COMMANDS.path(namespace))["items"])
        assert command["action"] == "RestartJob" and command["target"]["name"] == "train"
        apiserver.wait_for("the journal cleared", lambda: journal(api, job) is None)
        assert controller.metric("jobrules_controller_api_requests_total", code="403") == 0, \
            controller.logs()


BATCH_FAIL = """
job batchjob: batch/v1 Job {
    pods owned
    pods label "batch.kubernetes.io/controller-uid" = <<metadata.uid>>
    failed     when <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True']>>
               reason <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True'] | [0].reason>>
    running    when any pod running
    pending    otherwise
    on pod failed exit 3 -> fail job reason "ExitThree"
    actions {
        fail job -> condition "FailureTarget"
    }
    status {
        no condition
    }
}
"""


@pytest.mark.usefixtures("controller_manager")
def test_fail_job_sets_the_jobs_condition_with_the_derived_role(
        control_plane: Any, api: Any, namespace: str, tmp_path: Path, cleanup: list[Identity]) -> None:
    """`no condition`: /status is granted for the action's condition alone."""
    plan = controllers.compile_plan(BATCH_FAIL, tmp_path / "plan.json")
    identity = install(control_plane, api, namespace, plan, tmp_path)
    cleanup.append(identity)
    assert identity.can("patch", "jobs.batch:status") and not identity.can("delete", "pods")
    with controllers.running(control_plane, plan, namespace, tmp_path, **identity.env()):
        controllers.job_failed_by_exit_three(api, namespace)


# ---------------------------------------------------------------------------------------------
# Self-managed: the serving certificate issued, trusted and renewed, by name only

INJECTION = """
inject "traced" into pods of batchjob {
    annotate "example.com/traced" = "yes"
}
"""


def handshake(ca_bundle: bytes, cert: bytes, key: bytes, hostname: str, workdir: Path) -> None:
    """A TLS handshake on loopback: the server with the Secret's files, the client trusting the
    caBundle and checking the name the API server calls."""
    (workdir / "tls.crt").write_bytes(cert)
    (workdir / "tls.key").write_bytes(key)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(workdir / "tls.crt", workdir / "tls.key")
    client = ssl.create_default_context(cadata=ca_bundle.decode())
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def accept() -> None:
            conn, _ = listener.accept()
            with server.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        thread = threading.Thread(target=accept)
        thread.start()
        with socket.create_connection(listener.getsockname()) as raw, \
                client.wrap_socket(raw, server_hostname=hostname) as tls:
            assert tls.recv(2) == b"ok"
        thread.join()


def test_self_managed_certificates_with_the_derived_role(
        control_plane: Any, api: Any, namespace: str, shipped_plan: Path, tmp_path: Path,
        cleanup: list[Identity]) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "inject.rules").write_text(INJECTION)
    for path in (controllers.REPO / "rules").glob("*.rules"):
        (rules / path.name).write_text(path.read_text())
    plan = controllers.compile_plan(rules, tmp_path / "plan.json")
    identity = install(control_plane, api, namespace, plan, tmp_path, manifests.SelfManaged(),
                       ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                        "RoleBinding", "Secret", "MutatingWebhookConfiguration"))
    cleanup.append(identity)
    configuration = identity.find("MutatingWebhookConfiguration")["metadata"]["name"]
    assert identity.can("get", f"secrets/{manifests.TLS_SECRET}")
    assert identity.can("patch", f"secrets/{manifests.TLS_SECRET}")
    assert not identity.can("get", "secrets/another") and not identity.can("create", "secrets")
    assert not identity.can("list", "secrets")
    resource = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
    assert identity.can("patch", f"{resource}/{configuration}")
    assert not identity.can("patch", f"{resource}/another") and not identity.can("list", resource)

    secret_path = apiserver.Resource("v1", "secrets").path(namespace, manifests.TLS_SECRET)
    configuration_path = apiserver.MUTATING_WEBHOOKS.path(name=configuration)
    names = registration.dns_names(registration.Service(namespace, manifests.WEBHOOK))

    def serving() -> certificates.Serving | None:
        data = apiserver.get(api, secret_path).get("data") or {}
        return certificates.Serving.of({k: base64.b64decode(v) for k, v in data.items()})

    def bundles() -> list[bytes]:
        hooks = apiserver.get(api, configuration_path)["webhooks"]
        return [base64.b64decode(h["clientConfig"].get("caBundle") or "") for h in hooks]

    env = identity.env(JOBRULES_WEBHOOK_SECRET=f"{namespace}/{manifests.TLS_SECRET}",
                       JOBRULES_WEBHOOK_SERVICE=f"{namespace}/{manifests.WEBHOOK}",
                       JOBRULES_WEBHOOK_CONFIGURATION=configuration)
    with controllers.running(control_plane, plan, namespace, tmp_path, **env) as controller:
        first = apiserver.wait_for("the certificate issued", serving)
        assert certificates.problem(first, names, certificates.issued_at(first)) is None
        apiserver.wait_for("every webhook trusting it", lambda: bundles() and all(
            b == first.ca for b in bundles()))
        handshake(bundles()[0], first.cert, first.key, names[1], tmp_path)
        # A certificate for other names (or one about to expire) is replaced; the caBundle
        # trusts both CAs while the webhook's pods reload.
        wrong = certificates.issue(("elsewhere.example.com",), certificates.issued_at(first))
        api.merge_patch(secret_path, {"data": {
            k: base64.b64encode(v).decode() for k, v in wrong.data().items()}})
    # The leader looks again within the hour; a new leader looks at once.
    with controllers.running(control_plane, plan, namespace, tmp_path, name="again", **env) as controller:
        second = apiserver.wait_for("a new certificate", lambda: (
            s if (s := serving()) is not None and s.cert not in (wrong.cert, first.cert) else None))
        assert certificates.problem(second, names, certificates.issued_at(second)) is None
        apiserver.wait_for("the new CA first, the previous kept", lambda: all(
            b.startswith(second.ca) and len(b) > len(second.ca) for b in bundles()))
        handshake(bundles()[0], second.cert, second.key, names[1], tmp_path)
        assert controller.metric("jobrules_controller_api_requests_total", code="403") == 0, \
            controller.logs()
        assert controller.metric(
            "jobrules_controller_serving_certificate_expiry_timestamp_seconds") == \
            certificates.expiry(second).timestamp()
