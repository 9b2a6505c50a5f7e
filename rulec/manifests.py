"""The Kubernetes objects that run jobrules for a plan (the webhook and the controller), in
apply order: kustomize's legacy order, the one `kubectl apply -k` applies a folder in.

Pure: a plan, its text and the choices `rulec manifests` takes in; plain object dicts out. The
webhook makes no API call, so its ServiceAccount has no role and no token; the controller's
ClusterRole is derived from the plan (runtime.rbac: per kind only the verbs its verdict, status
block and actions need, each rule traced to the rules that need it); the plan travels in a
ConfigMap both reload; the MutatingWebhookConfiguration (runtime.registration) comes last, so
the API server calls the webhook only once everything it needs has been sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from runtime import plan as planlib
from runtime import rbac, registration
from runtime.controller.settings import ControllerSettings
from runtime.webhook.settings import Settings

Obj = dict[str, Any]

WEBHOOK = "jobrules-webhook"        # Deployment, Service, ServiceAccount, PDB, ... of the webhook
CONTROLLER = "jobrules-controller"  # Deployment, ServiceAccount, roles, bindings, Lease, PDB
PLAN_CONFIGMAP = "jobrules-plan"    # fixed: the webhook reloads the file when it changes
PLAN_KEY = "plan.json"
TLS_SECRET = "jobrules-webhook-tls"
SELF_SIGNED_ISSUER = "jobrules-selfsigned"
CONFIGMAP_LIMIT = 1024 * 1024       # the API server's limit on a ConfigMap's data
UID = 65532                         # the image's user (scripts/image.sh, Containerfile)
PRE_STOP_SECONDS = 5                # time for the endpoint to leave the Service before SIGTERM
PLAN_DIR, TLS_DIR = "/etc/jobrules/plan", "/etc/jobrules/tls"
SETTINGS = Settings(plan_path=f"{PLAN_DIR}/{PLAN_KEY}", tls_cert=f"{TLS_DIR}/tls.crt",
                    tls_key=f"{TLS_DIR}/tls.key")
HTTPS_PORT = int(SETTINGS.bind.rpartition(":")[2])
METRICS_PORT = SETTINGS.metrics[1]  # type: ignore[index]  # on by default
SELECTOR = {"app.kubernetes.io/name": "jobrules", "app.kubernetes.io/component": "webhook"}
_PART_OF = {"app.kubernetes.io/part-of": "jobrules", "app.kubernetes.io/managed-by": "rulec"}
LABELS = {**SELECTOR, **_PART_OF}
CONTROLLER_SELECTOR = {**SELECTOR, "app.kubernetes.io/component": "controller"}
CONTROLLER_SETTINGS = ControllerSettings(plan_path=f"{PLAN_DIR}/{PLAN_KEY}", leader_elect=True,
                                         lease_name=CONTROLLER)
HEALTH_PORT = CONTROLLER_SETTINGS.health[1]  # type: ignore[index]  # on by default
CONTROLLER_COMMAND = "/opt/jobrules/bin/jobrules-controller"   # the image's second entry point
# API Priority and Fairness (flowcontrol.apiserver.k8s.io/v1); docs/deploy.md says why.
FLOWCONTROL = "flowcontrol.apiserver.k8s.io/v1"
FLOW_PRECEDENCE = 1000           # after every built-in system schema (<= 900), before
                                 # `service-accounts` (9000), `global-default` and `catch-all`
FLOW_SHARES = 20                 # half of `workload-high` (kube-controller-manager's 40)
FLOW_LENDABLE_PERCENT = 50       # as `workload-high`: idle seats go to others
FLOW_BORROWING_LIMIT_PERCENT = 100   # borrow at most as much again as its own
FLOW_QUEUES = 64                 # flows are namespaces (ByNamespace)
FLOW_HAND_SIZE = 6
FLOW_QUEUE_LENGTH_LIMIT = 50
NEEDED_BY = "jobrules.dev/needed-by"   # the ClusterRole's: which rules need each of its rules
ISSUER_KINDS = ("Issuer", "ClusterIssuer")
# kustomize's legacy order (sigs.k8s.io/kustomize, `resid.orderFirst`, `orderLast`): kinds listed
# first come first in this order, listed last come last, the others between; then by API group,
# version and kind, then namespace and name. `kubectl apply -k` sorts by it (it asks kustomize
# for `--reorder legacy`, and warns when a kustomization.yaml sets `sortOptions`, whatever their
# order), so the output is in that order everywhere: the stream, the numbered files and what
# `-k` applies agree. It applies what others need first (the Namespace, accounts and roles, the
# ConfigMap and Secret) and the webhook configuration last.
LEGACY_FIRST = ("Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition",
                "ServiceAccount", "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding",
                "ClusterRoleBinding", "ConfigMap", "Secret", "Endpoints", "Service", "LimitRange",
                "PriorityClass", "PersistentVolume", "PersistentVolumeClaim", "Deployment",
                "StatefulSet", "CronJob", "PodDisruptionBudget")
LEGACY_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")


class ManifestError(ValueError):
    """Choices or a plan that cannot give valid objects; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Issuer:
    kind: str   # Issuer (in the webhook's namespace) or ClusterIssuer
    name: str


@dataclass(frozen=True, slots=True)
class CertManager:
    """cert-manager issues the serving certificate into the TLS Secret, and its CA injector
    copies the CA into the webhook configuration. No issuer: a self-signed one is rendered."""

    issuer: Issuer | None = None


@dataclass(frozen=True, slots=True)
class UserCertificate:
    """The user creates the TLS Secret; `ca_bundle` (PEM) is the CA that signed it."""

    ca_bundle: bytes


@dataclass(frozen=True, slots=True)
class SelfManaged:
    """The controller's leader issues the serving certificate into the TLS Secret (made empty
    here), renews it before it expires, and keeps the webhook configuration's caBundle current."""


Certificates = CertManager | UserCertificate | SelfManaged


@dataclass(frozen=True, slots=True)
class Options:
    image: str
    certificates: Certificates
    namespace: str = "jobrules-system"
    replicas: int = 2
    controller_replicas: int = 2            # one leads, the other keeps its caches warm
    shards: int = 1                         # > 1: the jobs sharded over the replicas
    exclude_namespaces: tuple[str, ...] = ()
    network_policy: bool = False
    metrics_namespace: str = "monitoring"   # who may scrape, with the network policy
    monitoring: bool = False                # a prometheus-operator ServiceMonitor
    flow_control: bool = True               # the controller's FlowSchema and priority level
    native: bool = False                    # the MutatingAdmissionPolicies (rulec native)


def parse_issuer(text: str) -> Issuer:
    """`NAME` (an Issuer in the webhook's namespace), `Issuer/NAME` or `ClusterIssuer/NAME`."""
    kind, _, name = text.rpartition("/")
    kind = kind or "Issuer"
    if kind not in ISSUER_KINDS or not _DNS_SUBDOMAIN.match(name):
        raise ManifestError(f"issuer {text!r}: expected NAME, Issuer/NAME or ClusterIssuer/NAME "
                            "(NAME a lowercase DNS name)")
    return Issuer(kind, name)


def render(plan: planlib.Plan, plan_text: str, options: Options) -> list[Obj]:
    """Every object, in the order they are applied (`apply_order`)."""
    _check(options)
    ns = options.namespace
    certs = options.certificates
    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": "jobrules",
                                             # everything here passes the strictest profile
                                             "pod-security.kubernetes.io/enforce": "restricted"}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(WEBHOOK, ns),
         "automountServiceAccountToken": False},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(CONTROLLER, ns, CONTROLLER_SELECTOR)},
        *controller_rbac(plan, options),
        plan_configmap(plan, plan_text, ns),
    ]
    if isinstance(certs, SelfManaged):   # made empty, so that the controller needs no `create`
        objects.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(TLS_SECRET, ns),
                        "type": "Opaque"})
    if isinstance(certs, CertManager):
        if certs.issuer is None:
            objects.append({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                            "metadata": _meta(SELF_SIGNED_ISSUER, ns), "spec": {"selfSigned": {}}})
        objects.append(certificate(ns, certs.issuer or Issuer("Issuer", SELF_SIGNED_ISSUER)))
    objects += [deployment(plan, options), service(ns)]
    if options.replicas > 1:
        objects.append(_disruption_budget(WEBHOOK, ns, SELECTOR))
    objects.append(controller_deployment(options))
    if options.controller_replicas > 1:
        objects.append(_disruption_budget(CONTROLLER, ns, CONTROLLER_SELECTOR))
    if options.network_policy:
        objects += [network_policy(ns, options.metrics_namespace),
                    controller_network_policy(ns, options.metrics_namespace)]
    if options.monitoring:
        objects.append({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                        "metadata": _meta(WEBHOOK, ns), "spec": {
                            "selector": {"matchLabels": SELECTOR},
                            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}]}})
    if options.flow_control:
        objects += flow_control(ns)
    if options.native:
        from rulec import native_admission

        objects += native_admission.objects(plan)
    objects.append(webhook_configuration(plan, options))
    return sorted(objects, key=apply_order)


def apply_order(obj: Obj) -> tuple[int, str, str]:
    """Where an object goes in kustomize's legacy order (see LEGACY_FIRST)."""
    kind = obj["kind"]
    rank = (LEGACY_FIRST.index(kind) - len(LEGACY_FIRST) if kind in LEGACY_FIRST
            else 1 + LEGACY_LAST.index(kind) if kind in LEGACY_LAST else 0)
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj["metadata"]
    return (rank, f"{group or '~G'}_{version or '~V'}_{kind or '~K'}",
            f"{meta.get('namespace') or '~X'}|{meta.get('name') or '~N'}")


def plan_configmap(plan: planlib.Plan, plan_text: str, namespace: str) -> Obj:
    size = len(PLAN_KEY.encode()) + len(plan_text.encode())
    if size > CONFIGMAP_LIMIT:
        raise ManifestError(f"the plan is {size:,} bytes: a ConfigMap holds at most "
                            f"{CONFIGMAP_LIMIT:,} (1 MiB); split the rules across installations")
    meta = _meta(PLAN_CONFIGMAP, namespace)
    if plan.digest:
        meta["annotations"] = {"jobrules.dev/plan-digest": plan.digest}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {PLAN_KEY: plan_text}}


def certificate(namespace: str, issuer: Issuer) -> Obj:
    return {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": _meta(WEBHOOK, namespace), "spec": {
                "secretName": TLS_SECRET,
                "dnsNames": list(registration.dns_names(registration.Service(namespace, WEBHOOK))),
                "issuerRef": {"group": "cert-manager.io", "kind": issuer.kind, "name": issuer.name},
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            }}


def deployment(plan: planlib.Plan, options: Options) -> Obj:
    """The webhook's pods: non-root on a read-only root, spread over nodes, drained gently."""
    pod: Obj = {
        "serviceAccountName": WEBHOOK,
        "automountServiceAccountToken": False,
        # Pre-stop pause, then gunicorn's graceful drain, then a margin before SIGKILL.
        "terminationGracePeriodSeconds": PRE_STOP_SECONDS + SETTINGS.graceful_timeout + 5,
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
                            "fsGroup": UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": SELECTOR}}],
        "containers": [{
            "name": "webhook",
            "image": options.image,
            "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "https", "containerPort": HTTPS_PORT, "protocol": "TCP"},
                      {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
            "env": [{"name": "JOBRULES_PLAN", "value": SETTINGS.plan_path},
                    {"name": "JOBRULES_TLS_CERT", "value": SETTINGS.tls_cert},
                    {"name": "JOBRULES_TLS_KEY", "value": SETTINGS.tls_key},
                    {"name": "JOBRULES_GRACEFUL_TIMEOUT", "value": str(SETTINGS.graceful_timeout)}],
            "readinessProbe": _probe("/readyz", period=5, failures=2),
            "livenessProbe": _probe("/healthz", period=10, failures=3),
            "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
            "resources": {"requests": {"cpu": "100m", "memory": "192Mi"},
                          "limits": {"memory": "512Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "plan", "mountPath": PLAN_DIR, "readOnly": True},
                             {"name": "tls", "mountPath": TLS_DIR, "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"},
                             {"name": "dev-shm", "mountPath": "/dev/shm"}],
        }],
        "volumes": [
            {"name": "plan", "configMap": {"name": PLAN_CONFIGMAP}},
            # The two files by name: until the Secret holds both (a self-managed certificate
            # not issued yet), the kubelet waits rather than start a webhook without them.
            {"name": "tls", "secret": {"secretName": TLS_SECRET, "defaultMode": 0o440, "items": [
                {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},          # metrics files
            {"name": "dev-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},   # heartbeats
        ],
    }
    if plan.webhook.failure_policy == "Fail":   # pods of the plan's kinds wait on these
        pod = {"priorityClassName": "system-cluster-critical", **pod}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(WEBHOOK, options.namespace),
            "spec": {
                "replicas": options.replicas,
                "selector": {"matchLabels": SELECTOR},
                "strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                "template": {"metadata": {"labels": LABELS}, "spec": pod},
            }}


def controller_rbac(plan: planlib.Plan, options: Options) -> list[Obj]:
    """The controller's ClusterRole (from the plan), its Role in the namespace (the Lease and,
    self-managed, the TLS Secret) and their bindings to its ServiceAccount."""
    ns = options.namespace
    self_managed = isinstance(options.certificates, SelfManaged)
    cluster = rbac.controller_rules(plan) + (
        rbac.webhook_configuration(registration.DEFAULT_NAME) if self_managed else ())
    leases = (rbac.shard_leases(ns, CONTROLLER, options.shards) if options.shards > 1
              else rbac.leader_election(ns, CONTROLLER))
    local = leases + (
        rbac.serving_secret(ns, TLS_SECRET) if self_managed else ())
    subject = [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": ns}]
    out = []
    for kind, rules, meta in (("ClusterRole", cluster, _meta(CONTROLLER, None, CONTROLLER_SELECTOR)),
                              ("Role", local, _meta(CONTROLLER, ns, CONTROLLER_SELECTOR))):
        # Why each rule is there, as an annotation: YAML comments would not survive `kubectl
        # kustomize` or reach the cluster; the annotation does both.
        meta["annotations"] = {NEEDED_BY: rbac.explain(rules)}
        out += [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
                 "rules": [r.policy_rule() for r in rules]},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": f"{kind}Binding",
                 "metadata": _meta(CONTROLLER, meta.get("namespace"), CONTROLLER_SELECTOR),
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind,
                             "name": CONTROLLER},
                 "subjects": subject}]
    return out


def controller_deployment(options: Options) -> Obj:
    """The controller's pods: non-root on a read-only root, one leading on the Lease while the
    others keep their caches warm. No preStop pause: no Service sends it traffic, and on SIGTERM
    it finishes its reconciles and releases the Lease at once, so another replica takes over."""
    env: list[Obj] = [
        {"name": "JOBRULES_PLAN", "value": CONTROLLER_SETTINGS.plan_path},
        {"name": "JOBRULES_LEADER_ELECT", "value": "true"},
        {"name": "JOBRULES_LEASE_NAME", "value": CONTROLLER_SETTINGS.lease_name},
        {"name": "JOBRULES_HEALTH_BIND", "value": f"0.0.0.0:{HEALTH_PORT}"},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if options.shards > 1:
        env.append({"name": "JOBRULES_SHARDS", "value": str(options.shards)})
    if isinstance(options.certificates, SelfManaged):
        env += [{"name": "JOBRULES_WEBHOOK_SECRET", "value": f"{options.namespace}/{TLS_SECRET}"},
                {"name": "JOBRULES_WEBHOOK_SERVICE", "value": f"{options.namespace}/{WEBHOOK}"},
                {"name": "JOBRULES_WEBHOOK_CONFIGURATION", "value": registration.DEFAULT_NAME}]
    probe = {"port": "health", "scheme": "HTTP"}
    pod: Obj = {
        "serviceAccountName": CONTROLLER,
        "automountServiceAccountToken": True,
        # Reconciles drain for up to 10 s, then the Lease is released.
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
                            "fsGroup": UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": CONTROLLER_SELECTOR}}],
        "containers": [{
            "name": "controller",
            "image": options.image,
            "imagePullPolicy": "IfNotPresent",
            "command": [CONTROLLER_COMMAND],   # the image's CMD (the webhook's) is then ignored
            "ports": [{"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
            "env": env,
            # Ready once every watch has listed: a large cluster's first list takes a while.
            "startupProbe": {"httpGet": {"path": "/readyz", **probe}, "periodSeconds": 5,
                             "failureThreshold": 60, "timeoutSeconds": 2},
            "readinessProbe": {"httpGet": {"path": "/readyz", **probe}, "periodSeconds": 10,
                               "failureThreshold": 3, "timeoutSeconds": 2},
            "livenessProbe": {"httpGet": {"path": "/healthz", **probe}, "periodSeconds": 10,
                              "failureThreshold": 3, "timeoutSeconds": 2},
            # The cache grows with the pods of the watched kinds (about 5 MiB per 1,000).
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                          "limits": {"memory": "1Gi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "plan", "mountPath": PLAN_DIR, "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [
            {"name": "plan", "configMap": {"name": PLAN_CONFIGMAP}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},   # the client's temporary files
        ],
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _meta(CONTROLLER, options.namespace, CONTROLLER_SELECTOR),
            "spec": {
                "replicas": options.controller_replicas,
                "selector": {"matchLabels": CONTROLLER_SELECTOR},
                "strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                "template": {"metadata": {"labels": _labels(CONTROLLER_SELECTOR)}, "spec": pod},
            }}


def flow_control(namespace: str) -> list[Obj]:
    """The controller's share of the API server under API Priority and Fairness: its own
    priority level, so that a flood from other service accounts (all in the built-in
    `workload-low`) cannot starve it and it cannot take more than its share from them, and the
    FlowSchema that sends its ServiceAccount's requests there (docs/deploy.md says why these
    numbers)."""
    meta = _meta(CONTROLLER, None, CONTROLLER_SELECTOR)
    level = {"apiVersion": FLOWCONTROL, "kind": "PriorityLevelConfiguration", "metadata": meta,
             "spec": {"type": "Limited", "limited": {
                 "nominalConcurrencyShares": FLOW_SHARES,
                 "lendablePercent": FLOW_LENDABLE_PERCENT,
                 "borrowingLimitPercent": FLOW_BORROWING_LIMIT_PERCENT,
                 "limitResponse": {"type": "Queue", "queuing": {
                     "queues": FLOW_QUEUES, "handSize": FLOW_HAND_SIZE,
                     "queueLengthLimit": FLOW_QUEUE_LENGTH_LIMIT}}}}}
    schema = {"apiVersion": FLOWCONTROL, "kind": "FlowSchema", "metadata": meta, "spec": {
        "priorityLevelConfiguration": {"name": CONTROLLER},
        "matchingPrecedence": FLOW_PRECEDENCE,
        "distinguisherMethod": {"type": "ByNamespace"},
        "rules": [{
            "subjects": [{"kind": "ServiceAccount",
                          "serviceAccount": {"name": CONTROLLER, "namespace": namespace}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                               "clusterScope": True, "namespaces": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}
    return [schema, level]


def service(namespace: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(WEBHOOK, namespace), "spec": {
        "selector": SELECTOR,
        "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
                  {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}],
    }}


def network_policy(namespace: str, metrics_namespace: str) -> Obj:
    """Admission calls from anywhere (the API server's addresses cannot be selected portably),
    metrics from one namespace, and no connection out: the webhook makes none."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(WEBHOOK, namespace), "spec": {
                "podSelector": {"matchLabels": SELECTOR},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {"ports": [{"port": "https", "protocol": "TCP"}]},
                    {"from": [{"namespaceSelector": {"matchLabels": {
                        "kubernetes.io/metadata.name": metrics_namespace}}}],
                     "ports": [{"port": "metrics", "protocol": "TCP"}]},
                ],
                "egress": [],
            }}


def controller_network_policy(namespace: str, metrics_namespace: str) -> Obj:
    """Health and metrics from one namespace (kubelet probes are not subject to it); out, the
    API server, whose addresses cannot be selected portably: egress is left open."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(CONTROLLER, namespace, CONTROLLER_SELECTOR), "spec": {
                "podSelector": {"matchLabels": CONTROLLER_SELECTOR},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {"from": [{"namespaceSelector": {"matchLabels": {
                        "kubernetes.io/metadata.name": metrics_namespace}}}],
                     "ports": [{"port": "health", "protocol": "TCP"}]},
                ],
            }}


def webhook_configuration(plan: planlib.Plan, options: Options) -> Obj:
    certs = options.certificates
    target = registration.Service(options.namespace, WEBHOOK)
    ca_bundle, annotations = None, None
    if isinstance(certs, CertManager):
        annotations = {"cert-manager.io/inject-ca-from": f"{options.namespace}/{WEBHOOK}"}
    elif isinstance(certs, UserCertificate):   # else the controller's leader writes the caBundle
        ca_bundle = certs.ca_bundle
    try:
        return registration.render(plan, target, ca_bundle, annotations=annotations,
                                   exclude_namespaces=options.exclude_namespaces,
                                   native=options.native)
    except registration.RegistrationError as err:
        raise ManifestError(str(err)) from None


def dump(objects: Iterable[Obj]) -> str:
    """Multi-document YAML, every document started by `---`, multi-line strings as blocks."""
    return yaml.dump_all(list(objects), Dumper=_Dumper, sort_keys=False, explicit_start=True,
                         width=float("inf"))


def file_names(objects: list[Obj]) -> list[str]:
    """One file name per object, numbered in apply order: `03-configmap-jobrules-plan.yaml`."""
    return [f"{i:02d}-{o['kind'].lower()}-{o['metadata']['name']}.yaml" for i, o in enumerate(objects)]


def kustomization(names: list[str]) -> Obj:
    """Lists the files, in apply order. No `sortOptions`: kustomize's default, legacy, order is
    the files' own (`apply_order`), and `kubectl apply -k` warns about any `sortOptions`."""
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": names}


def _check(options: Options) -> None:
    for what, name in [("namespace", options.namespace),
                       ("metrics namespace", options.metrics_namespace),
                       *(("excluded namespace", n) for n in options.exclude_namespaces)]:
        if not _DNS_LABEL.match(name):
            raise ManifestError(f"{what} {name!r}: not a valid namespace name "
                                "(lowercase letters, digits and '-', at most 63)")
    if options.replicas < 1:
        raise ManifestError(f"replicas {options.replicas}: must be at least 1")
    if options.controller_replicas < 1:
        raise ManifestError(f"controller replicas {options.controller_replicas}: must be at least 1")
    if options.shards < 1:
        raise ManifestError(f"shards {options.shards}: must be at least 1")
    if not options.image or any(c.isspace() for c in options.image):
        raise ManifestError(f"image {options.image!r}: expected an image reference such as "
                            "registry.example.com/jobrules:0.1.0")
    certs = options.certificates
    if isinstance(certs, UserCertificate) and b"-----BEGIN CERTIFICATE-----" not in certs.ca_bundle:
        raise ManifestError("the CA bundle holds no PEM certificate (-----BEGIN CERTIFICATE-----)")


def _meta(name: str, namespace: str | None, selector: dict[str, str] = SELECTOR) -> Obj:
    """A name, a namespace (None: a cluster-wide object) and the labels of one component."""
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = _labels(selector)
    return meta


def _labels(selector: dict[str, str]) -> dict[str, str]:
    return {**selector, **_PART_OF}


def _disruption_budget(name: str, namespace: str, selector: dict[str, str]) -> Obj:
    """A node drain leaves one pod of the component running."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": _meta(name, namespace, selector),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}}}


def _probe(path: str, *, period: int, failures: int) -> Obj:
    return {"httpGet": {"path": path, "port": "https", "scheme": "HTTPS"},
            "periodSeconds": period, "failureThreshold": failures, "timeoutSeconds": 2}


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the plan), no anchors for shared values, the rest as
    PyYAML writes it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def represent_str(self, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _Dumper.represent_str)
