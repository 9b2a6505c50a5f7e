"""rulec.manifests and `rulec manifests`: the objects that deploy the webhook, in apply order.

Two goldens hold whole outputs (`tests/golden/manifests/`; refresh after an intended change with
`JOBRULES_UPDATE_GOLDENS=1` and review the diff) for a fixed plan kept beside them, `plan.json`
(the examples that inject, compiled, with `webhook failure closed`), so that changes to rules/
or examples/ do not move them; the tests below hold each rule of the rendering.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulec import manifests
from rulec.commands import cli, inputs
from runtime import plan as planlib
from runtime import rbac, registration
from runtime.controller.settings import ControllerSettings
from runtime.webhook.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "manifests"
RULES_PLAN = ROOT / "tests" / "golden" / "plans" / "rules.json"   # the plan of rules/
EXAMPLES = ["examples/katib-metrics-collector", "examples/argo-wait-main"]   # with injections
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
IMAGE = "registry.example.com/jobrules:0.1.0"


def shipped() -> tuple[planlib.Plan, str]:
    text = RULES_PLAN.read_text(encoding="utf-8")
    return planlib.loads(text), text


def injecting(failure_policy: str = "Ignore") -> tuple[planlib.Plan, str]:
    """The examples that inject (Katib's metrics collector, Argo's completion wiring)."""
    _, text = inputs.load_plan_text([str(ROOT / p) for p in EXAMPLES], relative_to=str(ROOT))
    data = json.loads(text)
    data["webhook"]["failurePolicy"] = failure_policy
    text = json.dumps(data, indent=2) + "\n"
    return planlib.loads(text), text


def options(**changes: Any) -> manifests.Options:
    return manifests.Options(**{"image": IMAGE, "certificates": manifests.CertManager(), **changes})


def render(plan: tuple[planlib.Plan, str] | None = None, **changes: Any) -> list[dict[str, Any]]:
    return manifests.render(*(plan or shipped()), options(**changes))


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of `kind` (named `name`; the webhook's where the controller has one too)."""
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    if len(found) > 1 and name is None:
        found = [o for o in found if o["metadata"]["name"] == manifests.WEBHOOK]
    [one] = found
    return one


def pod_spec(objects: list[dict[str, Any]], name: str = manifests.WEBHOOK) -> dict[str, Any]:
    return find(objects, "Deployment", name)["spec"]["template"]["spec"]


@pytest.mark.parametrize("name, opts", [
    ("cert-manager", options(network_policy=True, monitoring=True)),
    ("self-managed", options(certificates=manifests.SelfManaged(), controller_replicas=1)),
    ("ca-bundle", options(certificates=manifests.UserCertificate(CA), replicas=1, namespace="jobrules",
                          exclude_namespaces=("monitoring",), flow_control=False)),
])
def test_golden(name: str, opts: manifests.Options) -> None:
    plan = (GOLDEN / "plan.json").read_text(encoding="utf-8")
    text = manifests.dump(manifests.render(planlib.loads(plan), plan, opts))
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("JOBRULES_UPDATE_GOLDENS") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Which objects, in which order

W, C = manifests.WEBHOOK, manifests.CONTROLLER
# kustomize's legacy order, which `kubectl apply -k` applies a folder in (written out by hand
# from sigs.k8s.io/kustomize's lists; tests/integration/test_manifests_cluster.py holds the
# output to `kubectl kustomize`'s): listed kinds first, by their place in the list, then the
# others by group, version and kind (Certificate, Issuer, ServiceMonitor, NetworkPolicy), the
# webhook configuration last; one kind by namespace and name.
ORDER = [("Namespace", "jobrules-system"), ("ServiceAccount", C), ("ServiceAccount", W),
         ("Role", C), ("ClusterRole", C), ("RoleBinding", C), ("ClusterRoleBinding", C),
         ("ConfigMap", "jobrules-plan"), ("Secret", "jobrules-webhook-tls"), ("Service", W),
         ("Deployment", C), ("Deployment", W), ("PodDisruptionBudget", C),
         ("PodDisruptionBudget", W), ("Certificate", W), ("Issuer", "jobrules-selfsigned"),
         ("FlowSchema", C), ("PriorityLevelConfiguration", C), ("ServiceMonitor", W), ("NetworkPolicy", C), ("NetworkPolicy", W),
         ("MutatingWebhookConfiguration", "0-jobrules")]
CERTS = [manifests.CertManager(), manifests.CertManager(manifests.Issuer("Issuer", "corp-ca")),
         manifests.CertManager(manifests.Issuer("ClusterIssuer", "corp-ca")),
         manifests.UserCertificate(CA), manifests.SelfManaged()]
CLUSTER_WIDE = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                "FlowSchema", "PriorityLevelConfiguration"}


@pytest.mark.parametrize("certs, replicas, controller_replicas, network_policy, monitoring",
                         list(itertools.product(CERTS, [1, 2, 5], [1, 2], [False, True], [False, True])))
def test_objects_and_their_order(certs: manifests.Certificates, replicas: int,
                                 controller_replicas: int, network_policy: bool,
                                 monitoring: bool) -> None:
    objects = render(certificates=certs, replicas=replicas, controller_replicas=controller_replicas,
                     network_policy=network_policy, monitoring=monitoring)
    expected = {("Namespace", "jobrules-system"), ("ServiceAccount", W), ("ServiceAccount", C),
                ("ClusterRole", C), ("ClusterRoleBinding", C), ("Role", C), ("RoleBinding", C),
                ("ConfigMap", "jobrules-plan"), ("Deployment", W), ("Service", W),
                ("Deployment", C), ("MutatingWebhookConfiguration", "0-jobrules"),
                ("FlowSchema", C), ("PriorityLevelConfiguration", C)}
    if isinstance(certs, manifests.CertManager):
        expected |= {("Certificate", W)} | ({("Issuer", "jobrules-selfsigned")}
                                            if certs.issuer is None else set())
    expected |= {("Secret", "jobrules-webhook-tls")} if isinstance(certs, manifests.SelfManaged) else set()
    expected |= {("PodDisruptionBudget", W)} if replicas > 1 else set()
    expected |= {("PodDisruptionBudget", C)} if controller_replicas > 1 else set()
    expected |= {("NetworkPolicy", W), ("NetworkPolicy", C)} if network_policy else set()
    expected |= {("ServiceMonitor", W)} if monitoring else set()
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [k for k in ORDER if k in expected]
    assert find(objects, "Deployment", W)["spec"]["replicas"] == replicas
    assert find(objects, "Deployment", C)["spec"]["replicas"] == controller_replicas
    for obj in objects[:-1]:   # all but the configuration (runtime.registration's)
        assert ("namespace" in obj["metadata"]) == (obj["kind"] not in CLUSTER_WIDE)
        assert obj["metadata"].get("namespace", "jobrules-system") == "jobrules-system"
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "jobrules"


def test_the_namespace_enforces_the_restricted_pod_security_profile() -> None:
    namespace = render(namespace="batch-infra")[0]
    assert namespace["metadata"]["name"] == "batch-infra"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("certs", CERTS)
def test_the_webhook_has_an_identity_without_token_or_role(certs: manifests.Certificates) -> None:
    objects = render(certificates=certs)
    account = find(objects, "ServiceAccount", W)
    assert account["automountServiceAccountToken"] is False
    spec = pod_spec(objects)
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    subjects = [s for o in objects if o["kind"].endswith("Binding") for s in o["subjects"]]
    assert subjects == [{"kind": "ServiceAccount", "name": C, "namespace": "jobrules-system"}] * 2


# ---------------------------------------------------------------------------------------------
# The plan ConfigMap


def test_the_plan_travels_verbatim_with_its_digest() -> None:
    plan, text = shipped()
    configmap = find(render(), "ConfigMap")
    assert configmap["metadata"]["name"] == "jobrules-plan"
    assert configmap["data"] == {"plan.json": text}
    assert configmap["metadata"]["annotations"] == {"jobrules.dev/plan-digest": plan.digest}


@pytest.mark.parametrize("extra, fits", [(0, True), (1, False)])
def test_a_plan_past_one_mebibyte_is_refused(extra: int, fits: bool) -> None:
    plan, text = shipped()
    # Pad the text (JSON allows trailing whitespace) to exactly the limit, key included.
    padded = text + " " * (manifests.CONFIGMAP_LIMIT - len("plan.json") - len(text.encode()) + extra)
    if fits:
        assert find(manifests.render(plan, padded, options()), "ConfigMap")["data"]["plan.json"] == padded
    else:
        with pytest.raises(manifests.ManifestError, match=r"1,048,577 bytes: a ConfigMap holds at most 1,048,576"):
            manifests.render(plan, padded, options())


# ---------------------------------------------------------------------------------------------
# The Deployment


def test_the_environment_gives_the_settings_the_manifests_assume() -> None:
    [container] = pod_spec(render())["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert Settings.from_env(env) == manifests.SETTINGS
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert os.path.dirname(env["JOBRULES_PLAN"]) in mounts
    assert os.path.dirname(env["JOBRULES_TLS_CERT"]) == os.path.dirname(env["JOBRULES_TLS_KEY"])
    assert mounts[os.path.dirname(env["JOBRULES_TLS_CERT"])]["readOnly"] is True


def test_the_pod_runs_non_root_on_a_read_only_root_with_writable_temp_dirs() -> None:
    spec = pod_spec(render())
    [container] = spec["containers"]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                       "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts.values()) == set(volumes)
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert volumes["plan"]["configMap"]["name"] == "jobrules-plan"
    assert volumes["tls"]["secret"]["secretName"] == "jobrules-webhook-tls"
    # The two files by name: the kubelet waits for a Secret that has them.
    assert volumes["tls"]["secret"]["items"] == [{"key": "tls.crt", "path": "tls.crt"},
                                                 {"key": "tls.key", "path": "tls.key"}]
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}


def test_probes_and_a_drain_that_fits_the_grace_period() -> None:
    spec = pod_spec(render())
    [container] = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": 8443, "metrics": 9090}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert spec["terminationGracePeriodSeconds"] > pause + manifests.SETTINGS.graceful_timeout


def test_replicas_spread_over_nodes_and_roll_without_dropping_one() -> None:
    deployment = find(render(), "Deployment")
    [spread] = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert find(render(), "PodDisruptionBudget")["spec"] == {
        "minAvailable": 1, "selector": deployment["spec"]["selector"]}


@pytest.mark.parametrize("policy, critical", [("Ignore", False), ("Fail", True)])
def test_a_fail_closed_webhook_runs_at_cluster_critical_priority(policy: str, critical: bool) -> None:
    spec = pod_spec(render(injecting(policy)))
    assert spec.get("priorityClassName") == ("system-cluster-critical" if critical else None)


# ---------------------------------------------------------------------------------------------
# The controller: its roles and its Deployment


def resolved(env: list[dict[str, Any]], namespace: str, pod: str) -> dict[str, str]:
    """The container's environment as the kubelet gives it (field references resolved)."""
    fields = {"metadata.namespace": namespace, "metadata.name": pod}
    return {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
            for e in env}


@pytest.mark.parametrize("certs", CERTS)
def test_the_controller_environment_gives_the_settings_the_manifests_assume(
        certs: manifests.Certificates) -> None:
    objects = render(certificates=certs, namespace="infra")
    [container] = pod_spec(objects, C)["containers"]
    settings = ControllerSettings.from_env(resolved(container["env"], "infra", "controller-0"))
    managed = isinstance(certs, manifests.SelfManaged)
    assert settings == ControllerSettings(**{
        **{f: getattr(manifests.CONTROLLER_SETTINGS, f) for f in ControllerSettings.__slots__},
        "lease_namespace": "infra", "identity": "controller-0",
        "webhook_secret": ("infra", manifests.TLS_SECRET) if managed else None,
        "webhook_service": ("infra", W) if managed else None})
    assert settings.leader_elect and settings.lease_name == C
    # What the settings name exists: the plan's mount, the Lease the Role names, the Secret and
    # the Service and configuration of the rendering.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert os.path.dirname(settings.plan_path) in mounts
    role = find(objects, "Role", C)
    assert [C] in [r.get("resourceNames") for r in role["rules"]]
    if managed:
        names = {(o["kind"], o["metadata"]["name"]) for o in objects}
        assert {("Secret", settings.webhook_secret[1]), ("Service", settings.webhook_service[1]),
                ("MutatingWebhookConfiguration", settings.webhook_configuration)} <= names


def test_the_controller_runs_non_root_on_a_read_only_root_with_its_token() -> None:
    objects = render()
    spec = pod_spec(objects, C)
    [container] = spec["containers"]
    assert spec["serviceAccountName"] == C and spec["automountServiceAccountToken"] is True
    assert spec["securityContext"] == pod_spec(objects)["securityContext"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert container["command"] == ["/opt/jobrules/bin/jobrules-controller"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert {m["name"] for m in mounts.values()} == set(volumes)
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert mounts["/etc/jobrules/plan"]["readOnly"] is True
    assert volumes["plan"]["configMap"]["name"] == "jobrules-plan"
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}


def test_the_controller_is_probed_on_its_health_port() -> None:
    [container] = pod_spec(render(), C)["containers"]
    assert container["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JOBRULES_HEALTH_BIND"].endswith(":8080")
    for probe, path in (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"),
                        ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "health", "scheme": "HTTP"}
    assert "lifecycle" not in container   # no Service sends it traffic: SIGTERM is enough


def test_controller_replicas_spread_and_keep_one_through_a_drain() -> None:
    objects = render(controller_replicas=3)
    deployment = find(objects, "Deployment", C)
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == "controller"
    assert selector != find(objects, "Deployment", W)["spec"]["selector"]["matchLabels"]
    [spread] = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"] == selector
    assert find(objects, "PodDisruptionBudget", C)["spec"] == {
        "minAvailable": 1, "selector": {"matchLabels": selector}}


@pytest.mark.parametrize("certs", CERTS)
def test_the_cluster_role_is_the_plans_and_says_why(certs: manifests.Certificates) -> None:
    plan, _ = shipped()
    objects = render(certificates=certs)
    role = find(objects, "ClusterRole", C)
    rules = rbac.controller_rules(plan)
    if isinstance(certs, manifests.SelfManaged):
        rules += rbac.webhook_configuration(registration.DEFAULT_NAME)
    assert role["rules"] == [r.policy_rule() for r in rules]
    assert role["metadata"]["annotations"] == {"jobrules.dev/needed-by": rbac.explain(rules)}
    binding = find(objects, "ClusterRoleBinding", C)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": C}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": C, "namespace": "jobrules-system"}]


@pytest.mark.parametrize("certs", CERTS)
def test_the_role_holds_the_lease_and_the_self_managed_secret(certs: manifests.Certificates) -> None:
    objects = render(certificates=certs, namespace="infra")
    role = find(objects, "Role", C)
    rules = rbac.leader_election("infra", C)
    if isinstance(certs, manifests.SelfManaged):
        rules += rbac.serving_secret("infra", manifests.TLS_SECRET)
    assert role["rules"] == [r.policy_rule() for r in rules]
    assert role["metadata"]["annotations"] == {"jobrules.dev/needed-by": rbac.explain(rules)}
    binding = find(objects, "RoleBinding", C)
    assert (binding["metadata"]["namespace"], binding["roleRef"]["kind"]) == ("infra", "Role")
    assert "secrets" not in str(find(objects, "ClusterRole", C)["rules"])


def test_self_managed_makes_the_secret_empty_and_leaves_the_ca_bundle_to_the_controller() -> None:
    objects = render(injecting(), certificates=manifests.SelfManaged())
    secret = find(objects, "Secret", manifests.TLS_SECRET)
    assert secret["type"] == "Opaque" and "data" not in secret   # the controller fills it
    config = objects[-1]
    assert "cert-manager.io/inject-ca-from" not in config["metadata"]["annotations"]
    assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])
    assert not [o for o in objects if o["kind"] in ("Certificate", "Issuer")]


# ---------------------------------------------------------------------------------------------
# Service, network policy, monitoring


# The built-in priority levels a workload controller is weighed against (the API server's
# suggested configuration, flowcontrol.apiserver.k8s.io/v1): nominal shares, lendable percent.
WORKLOAD_HIGH = (40, 50)    # kube-controller-manager, kube-system service accounts
WORKLOAD_LOW = (100, 90)    # `service-accounts`: every other service account
SERVICE_ACCOUNTS_PRECEDENCE = 9000
SYSTEM_PRECEDENCES = 900    # the last built-in schema before `service-accounts`


def test_the_controller_gets_a_priority_level_of_its_own_that_queues() -> None:
    level = find(render(), "PriorityLevelConfiguration", C)
    assert level["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert "namespace" not in level["metadata"]
    assert level["spec"] == {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 20, "lendablePercent": 50, "borrowingLimitPercent": 100,
        "limitResponse": {"type": "Queue", "queuing": {
            "queues": 64, "handSize": 6, "queueLengthLimit": 50}}}}
    limited = level["spec"]["limited"]
    # Less than the built-in workload levels, so it cannot crowd them out, and enough to be
    # served through a flood of other service accounts in `workload-low`.
    assert limited["nominalConcurrencyShares"] < WORKLOAD_HIGH[0] < WORKLOAD_LOW[0]
    assert limited["lendablePercent"] == WORKLOAD_HIGH[1]
    queuing = limited["limitResponse"]["queuing"]
    assert queuing["handSize"] <= queuing["queues"]   # the API server refuses otherwise


@pytest.mark.parametrize("namespace", ["jobrules-system", "batch-ops"])
def test_the_flow_schema_sends_the_controllers_account_there_before_the_catch_alls(
        namespace: str) -> None:
    objects = render(namespace=namespace)
    schema = find(objects, "FlowSchema", C)
    account = find(objects, "ServiceAccount", C)["metadata"]
    [binding] = find(objects, "ClusterRoleBinding", C)["subjects"]
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": find(objects, "PriorityLevelConfiguration", C)
                                                  ["metadata"]["name"]}
    assert SYSTEM_PRECEDENCES < spec["matchingPrecedence"] < SERVICE_ACCOUNTS_PRECEDENCE
    assert spec["distinguisherMethod"] == {"type": "ByNamespace"}
    [rule] = spec["rules"]
    # the account the Deployment runs as and the ClusterRoleBinding grants
    assert rule["subjects"] == [{"kind": "ServiceAccount", "serviceAccount": {
        "name": account["name"], "namespace": account["namespace"]}}]
    assert (binding["name"], binding["namespace"]) == (account["name"], namespace)
    assert pod_spec(objects, C)["serviceAccountName"] == account["name"]
    assert rule["resourceRules"] == [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                      "clusterScope": True, "namespaces": ["*"]}]
    assert rule["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def test_flow_control_can_be_left_out_and_nothing_else_changes() -> None:
    kept, left_out = render(), render(flow_control=False)
    assert [o for o in kept if o["kind"] not in ("FlowSchema", "PriorityLevelConfiguration")] == left_out


def test_the_flow_schema_and_its_level_are_applied_together() -> None:
    """Both in one `kubectl apply`: the schema comes first in kustomize's order (by kind), which
    the API server accepts (it is marked dangling until its level exists, moments later)."""
    kinds = [o["kind"] for o in render()]
    assert kinds.index("FlowSchema") + 1 == kinds.index("PriorityLevelConfiguration")


def test_the_service_sends_443_to_the_webhook_port_and_serves_metrics() -> None:
    objects = render()
    svc = find(objects, "Service")
    assert svc["spec"]["selector"] == find(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("https", 443, "https"), ("metrics", 9090, "metrics")]


def test_the_network_policy_lets_admission_in_metrics_from_one_namespace_and_nothing_out() -> None:
    policy = find(render(network_policy=True, metrics_namespace="prometheus"), "NetworkPolicy", W)["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["egress"] == []
    admission, metrics = policy["ingress"]
    assert admission == {"ports": [{"port": "https", "protocol": "TCP"}]}
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "prometheus"}}}]


def test_the_service_monitor_selects_the_service() -> None:
    objects = render(monitoring=True)
    monitor = find(objects, "ServiceMonitor")["spec"]
    labels = find(objects, "Service")["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["endpoints"][0]["port"] == "metrics"


# ---------------------------------------------------------------------------------------------
# Certificates and the webhook configuration


@pytest.mark.parametrize("issuer, ref", [
    (None, {"group": "cert-manager.io", "kind": "Issuer", "name": "jobrules-selfsigned"}),
    (manifests.Issuer("Issuer", "corp"), {"group": "cert-manager.io", "kind": "Issuer", "name": "corp"}),
    (manifests.Issuer("ClusterIssuer", "corp"),
     {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp"}),
])
def test_cert_manager_issues_the_secret_and_injects_the_ca(issuer: manifests.Issuer | None,
                                                           ref: dict[str, str]) -> None:
    objects = render(injecting(), certificates=manifests.CertManager(issuer), namespace="infra")
    cert = find(objects, "Certificate")
    assert cert["spec"]["issuerRef"] == ref
    assert cert["spec"]["secretName"] == pod_spec(objects)["volumes"][1]["secret"]["secretName"]
    assert cert["spec"]["dnsNames"] == ["jobrules-webhook", "jobrules-webhook.infra.svc",
                                        "jobrules-webhook.infra.svc.cluster.local"]
    config = objects[-1]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "infra/jobrules-webhook"
    hook = config["webhooks"][0]   # the entry for every namespace
    assert "caBundle" not in hook["clientConfig"]


def test_a_user_certificate_is_trusted_through_its_ca_bundle() -> None:
    objects = render(injecting(), certificates=manifests.UserCertificate(CA))
    hook = objects[-1]["webhooks"][0]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == CA
    assert "cert-manager.io/inject-ca-from" not in objects[-1]["metadata"]["annotations"]


def test_the_configuration_calls_the_service_and_skips_its_namespace() -> None:
    objects = render(injecting(), namespace="infra", exclude_namespaces=("monitoring",))
    hook = objects[-1]["webhooks"][0]
    assert hook["clientConfig"]["service"] == {"namespace": "infra", "name": "jobrules-webhook",
                                               "port": 443, "path": "/mutate-pods"}
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "infra", "kube-system", "monitoring"]
    assert hook["objectSelector"] == {"matchExpressions": [
        {"key": "jobrules.dev/skip", "operator": "DoesNotExist"}]}


@pytest.mark.parametrize("text, expected", [
    ("corp", manifests.Issuer("Issuer", "corp")),
    ("Issuer/corp", manifests.Issuer("Issuer", "corp")),
    ("ClusterIssuer/letsencrypt.prod", manifests.Issuer("ClusterIssuer", "letsencrypt.prod")),
])
def test_parse_issuer(text: str, expected: manifests.Issuer) -> None:
    assert manifests.parse_issuer(text) == expected


@pytest.mark.parametrize("text", ["", "Corp", "Secret/corp", "ClusterIssuer/", "a/b/c", "corp-"])
def test_parse_issuer_rejects(text: str) -> None:
    with pytest.raises(manifests.ManifestError, match="expected NAME, Issuer/NAME or ClusterIssuer/NAME"):
        manifests.parse_issuer(text)


@pytest.mark.parametrize("changes, message", [
    ({"namespace": "Jobrules"}, "namespace 'Jobrules': not a valid namespace name"),
    ({"namespace": "a" * 64}, "not a valid namespace name"),
    ({"exclude_namespaces": ("ok", "not_ok")}, "excluded namespace 'not_ok'"),
    ({"metrics_namespace": "-x"}, "metrics namespace '-x'"),
    ({"replicas": 0}, "replicas 0: must be at least 1"),
    ({"image": ""}, "image '': expected an image reference"),
    ({"image": "jobrules 0.1"}, "expected an image reference"),
    ({"certificates": manifests.UserCertificate(b"not pem")}, "holds no PEM certificate"),
])
def test_bad_choices(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(manifests.ManifestError, match=message):
        render(**changes)


def test_a_timeout_the_api_server_refuses_is_a_manifest_error() -> None:
    plan, text = shipped()
    data = json.loads(text)
    data["webhook"]["timeoutSeconds"] = 31
    text = json.dumps(data)
    with pytest.raises(manifests.ManifestError, match="1 to 30 seconds"):
        manifests.render(planlib.loads(text), text, options())


# ---------------------------------------------------------------------------------------------
# YAML, files, kustomization


def test_dump_round_trips_and_writes_the_plan_as_a_block() -> None:
    objects = render(injecting(), network_policy=True, monitoring=True)
    text = manifests.dump(objects)
    assert list(yaml.safe_load_all(text)) == objects
    assert "  plan.json: |\n    {\n" in text
    assert "&id" not in text and "*id" not in text   # shared dicts written out, not aliased
    assert text.startswith("---\napiVersion: v1\nkind: Namespace\n")


def test_file_names_and_kustomization_keep_the_order() -> None:
    objects = render(replicas=1)
    names = manifests.file_names(objects)
    assert names == ["00-namespace-jobrules-system.yaml",
                     "01-serviceaccount-jobrules-controller.yaml",
                     "02-serviceaccount-jobrules-webhook.yaml", "03-role-jobrules-controller.yaml",
                     "04-clusterrole-jobrules-controller.yaml",
                     "05-rolebinding-jobrules-controller.yaml",
                     "06-clusterrolebinding-jobrules-controller.yaml",
                     "07-configmap-jobrules-plan.yaml", "08-service-jobrules-webhook.yaml",
                     "09-deployment-jobrules-controller.yaml",
                     "10-deployment-jobrules-webhook.yaml",
                     "11-poddisruptionbudget-jobrules-controller.yaml",
                     "12-certificate-jobrules-webhook.yaml", "13-issuer-jobrules-selfsigned.yaml",
                     "14-flowschema-jobrules-controller.yaml",
                     "15-prioritylevelconfiguration-jobrules-controller.yaml",
                     "16-mutatingwebhookconfiguration-0-jobrules.yaml"]
    # No sortOptions: `kubectl apply -k` warns about any, and its legacy order is ours.
    assert manifests.kustomization(names) == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": names}


def test_the_apply_order_is_kustomizes_legacy_order() -> None:
    """Whatever order the objects are made in, rendered in kustomize's: the kinds it lists
    first in its order, those it lists last at the end, the others between by group, version
    and kind, then by namespace and name."""
    def obj(api_version: str, kind: str, name: str, namespace: str | None = "ns") -> dict:
        return {"apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}

    expected = [obj("v1", "Namespace", "ns", None), obj("v1", "ServiceAccount", "a"),
                obj("v1", "ServiceAccount", "b"), obj("rbac.authorization.k8s.io/v1", "Role", "r"),
                obj("rbac.authorization.k8s.io/v1", "ClusterRole", "r", None),
                obj("apps/v1", "Deployment", "d"), obj("policy/v1", "PodDisruptionBudget", "p"),
                obj("a.example/v1", "Zebra", "z"), obj("b.example/v1", "Apple", "a"),
                obj("b.example/v2", "Apple", "a"), obj("v1", "Pod", "p"),
                obj("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "m", None),
                obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "v", None)]
    for seed in range(5):
        shuffled = expected[:]
        random.Random(seed).shuffle(shuffled)
        assert sorted(shuffled, key=manifests.apply_order) == expected


# ---------------------------------------------------------------------------------------------
# The CLI


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["manifests", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prints_the_stream(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--plan", str(RULES_PLAN), "--image", IMAGE, "--certs", "cert-manager",
                         "--network-policy", "--monitoring")
    assert code == 0
    assert out == manifests.dump(render(network_policy=True, monitoring=True))
    assert "no injection in the plan" in err


def test_cli_compiles_rules_and_takes_a_ca_bundle(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ca.pem").write_bytes(CA)
    monkeypatch.chdir(ROOT)
    code, out, err = run(capsys, "--rules", *EXAMPLES, "--image", IMAGE, "--ca-bundle",
                         str(tmp_path / "ca.pem"), "--replicas", "3", "--namespace", "infra",
                         "--namespace-exclude", "monitoring")
    assert (code, err) == (0, "")
    objects = list(yaml.safe_load_all(out))
    assert objects == render(injecting(), certificates=manifests.UserCertificate(CA), replicas=3,
                             namespace="infra", exclude_namespaces=("monitoring",))


def test_cli_cert_manager_with_an_issuer(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--plan", str(RULES_PLAN), "--image", IMAGE,
                       "--certs", "cert-manager=ClusterIssuer/corp")
    assert code == 0
    objects = list(yaml.safe_load_all(out))
    assert "Issuer" not in [o["kind"] for o in objects]
    assert find(objects, "Certificate")["spec"]["issuerRef"]["kind"] == "ClusterIssuer"


def test_cli_self_managed_with_one_controller(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--plan", str(RULES_PLAN), "--image", IMAGE, "--certs", "self-managed",
                       "--controller-replicas", "1")
    assert code == 0
    assert list(yaml.safe_load_all(out)) == render(certificates=manifests.SelfManaged(),
                                                   controller_replicas=1)


def test_cli_shards_the_controller(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--plan", str(RULES_PLAN), "--image", IMAGE, "--certs", "cert-manager",
                       "--controller-replicas", "3", "--shards", "8")
    assert code == 0
    assert list(yaml.safe_load_all(out)) == render(controller_replicas=3, shards=8)


def test_cli_leaves_flow_control_out_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--plan", str(RULES_PLAN), "--image", IMAGE, "--certs", "cert-manager",
                       "--no-flow-control")
    assert code == 0
    assert list(yaml.safe_load_all(out)) == render(flow_control=False)
    assert {o["kind"] for o in render()} - {o["kind"] for o in yaml.safe_load_all(out)} == {
        "FlowSchema", "PriorityLevelConfiguration"}


def test_cli_writes_a_folder_and_replaces_its_own_earlier_output(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    folder = tmp_path / "deploy"
    base = ["--plan", str(RULES_PLAN), "--image", IMAGE, "--certs", "cert-manager", "--output-dir", str(folder)]
    code, out, err = run(capsys, *base, "--monitoring")
    assert (code, out) == (0, "") and "wrote 19 objects and kustomization.yaml" in err
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert kustomization["resources"][-2] == "17-servicemonitor-jobrules-webhook.yaml"   # after Issuer
    streamed = render(monitoring=True)
    assert [yaml.safe_load((folder / n).read_text()) for n in kustomization["resources"]] == streamed
    assert sorted(os.listdir(folder)) == sorted(["kustomization.yaml", *kustomization["resources"]])

    assert run(capsys, *base)[0] == 0   # again, without the ServiceMonitor: its file goes
    assert sorted(os.listdir(folder)) == sorted(["kustomization.yaml", *manifests.file_names(render())])


@pytest.mark.parametrize("contents", [{"notes.txt": "mine"}, {"00-namespace-x.yaml": "kind: Namespace"},
                                      {"kustomization.yaml": "resources: []", "base.yaml": "{}"}])
def test_cli_leaves_a_folder_of_other_files_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  contents: dict[str, str]) -> None:
    for name, text in contents.items():
        (tmp_path / name).write_text(text)
    code, out, err = run(capsys, "--plan", str(RULES_PLAN), "--image", IMAGE, "--certs", "cert-manager",
                         "--output-dir", str(tmp_path))
    assert (code, out) == (2, "")
    assert "not empty and not an earlier `rulec manifests` output" in err
    assert sorted(os.listdir(tmp_path)) == sorted(contents)


@pytest.mark.parametrize("argv, message", [
    (["--certs", "self-managed=x"], "--certs 'self-managed=x': expected cert-manager[=ISSUER] | self-managed"),
    (["--certs", "self-managed", "--controller-replicas", "0"], "controller replicas 0"),
    (["--certs", "vault"], "--certs 'vault': expected cert-manager[=ISSUER] | self-managed"),
    (["--certs", "cert-manager=Secret/x"], "issuer 'Secret/x'"),
    (["--ca-bundle", "missing.pem"], "missing.pem: No such file or directory"),
    (["--certs", "cert-manager", "--replicas", "0"], "replicas 0"),
    (["--certs", "cert-manager", "--shards", "0"], "shards 0"),
    (["--certs", "cert-manager", "--plan-file-is-missing"], "unrecognized arguments"),
])
def test_cli_errors_exit_2_without_traceback(capsys: pytest.CaptureFixture[str], argv: list[str],
                                             message: str) -> None:
    code, out, err = run(capsys, "--plan", str(RULES_PLAN), "--image", IMAGE, *argv)
    assert (code, out) == (2, "")
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--plan", "missing.json", "--certs", "cert-manager"], "missing.json: cannot read"),
    (["--rules", "missing.rules", "--certs", "cert-manager"], "missing.rules"),
    (["--plan", "PLAN"], "one of the arguments --certs --ca-bundle is required"),
    (["--certs", "cert-manager"], "one of the arguments --plan --rules is required"),
])
def test_cli_needs_a_plan_and_a_certificate_mode(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                 message: str) -> None:
    argv = [str(RULES_PLAN) if a == "PLAN" else a for a in argv]
    code, out, err = run(capsys, *argv, "--image", IMAGE)
    assert (code, out) == (2, "")
    assert message in err and "Traceback" not in err


def test_shards_set_the_controller_and_its_role_holds_their_leases() -> None:
    objects = render(controller_replicas=3, shards=8, namespace="infra")
    [container] = pod_spec(objects, C)["containers"]
    settings = ControllerSettings.from_env(resolved(container["env"], "infra", "controller-0"))
    assert (settings.shards, settings.leader_elect, settings.lease_namespace) == (8, True, "infra")
    assert find(objects, "Deployment", C)["spec"]["replicas"] == 3
    [rule] = find(objects, "Role", C)["rules"]
    # The member Leases are named from the pods' names: no resourceNames can list them.
    assert rule == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["list", "create", "get", "update", "patch", "delete"]}
    assert "shards" in find(objects, "Role", C)["metadata"]["annotations"]["jobrules.dev/needed-by"]
    one = pod_spec(render(), C)["containers"][0]["env"]
    assert "JOBRULES_SHARDS" not in {e["name"] for e in one}
    with pytest.raises(manifests.ManifestError, match="shards 0"):
        render(shards=0)
