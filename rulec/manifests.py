"""The Kubernetes objects that run the jobrules webhook for a plan, in apply order.

Pure: a plan, its text and the choices `rulec manifests` takes in; plain object dicts out. The
webhook makes no API call, so its ServiceAccount has no role and no token; the plan travels in
a ConfigMap the webhook reloads; the MutatingWebhookConfiguration (runtime.registration) comes
last, so the API server calls the webhook only once everything it needs has been sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from runtime import plan as planlib
from runtime import registration
from runtime.webhook.settings import Settings

Obj = dict[str, Any]

WEBHOOK = "jobrules-webhook"        # Deployment, Service, ServiceAccount, PDB, ... of the webhook
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
LABELS = {**SELECTOR, "app.kubernetes.io/part-of": "jobrules", "app.kubernetes.io/managed-by": "rulec"}
ISSUER_KINDS = ("Issuer", "ClusterIssuer")

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


Certificates = CertManager | UserCertificate


@dataclass(frozen=True, slots=True)
class Options:
    image: str
    certificates: Certificates
    namespace: str = "jobrules-system"
    replicas: int = 2
    exclude_namespaces: tuple[str, ...] = ()
    network_policy: bool = False
    metrics_namespace: str = "monitoring"   # who may scrape, with the network policy
    monitoring: bool = False                # a prometheus-operator ServiceMonitor


def parse_issuer(text: str) -> Issuer:
    """`NAME` (an Issuer in the webhook's namespace), `Issuer/NAME` or `ClusterIssuer/NAME`."""
    kind, _, name = text.rpartition("/")
    kind = kind or "Issuer"
    if kind not in ISSUER_KINDS or not _DNS_SUBDOMAIN.match(name):
        raise ManifestError(f"issuer {text!r}: expected NAME, Issuer/NAME or ClusterIssuer/NAME "
                            "(NAME a lowercase DNS name)")
    return Issuer(kind, name)


def render(plan: planlib.Plan, plan_text: str, options: Options) -> list[Obj]:
    """Every object, in the order they are applied."""
    _check(options)
    ns = options.namespace
    certs = options.certificates
    objects = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": "jobrules",
                                             # everything here passes the strictest profile
                                             "pod-security.kubernetes.io/enforce": "restricted"}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(WEBHOOK, ns),
         "automountServiceAccountToken": False},
        plan_configmap(plan, plan_text, ns),
    ]
    if isinstance(certs, CertManager):
        if certs.issuer is None:
            objects.append({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                            "metadata": _meta(SELF_SIGNED_ISSUER, ns), "spec": {"selfSigned": {}}})
        objects.append(certificate(ns, certs.issuer or Issuer("Issuer", SELF_SIGNED_ISSUER)))
    objects += [deployment(plan, options), service(ns)]
    if options.replicas > 1:
        objects.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": _meta(WEBHOOK, ns),
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": SELECTOR}}})
    if options.network_policy:
        objects.append(network_policy(ns, options.metrics_namespace))
    if options.monitoring:
        objects.append({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                        "metadata": _meta(WEBHOOK, ns), "spec": {
                            "selector": {"matchLabels": SELECTOR},
                            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}]}})
    objects.append(webhook_configuration(plan, options))
    return objects


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
    service = f"{WEBHOOK}.{namespace}.svc"
    return {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": _meta(WEBHOOK, namespace), "spec": {
                "secretName": TLS_SECRET,
                "dnsNames": [WEBHOOK, service, f"{service}.cluster.local"],
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
            {"name": "tls", "secret": {"secretName": TLS_SECRET, "defaultMode": 0o440}},
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


def webhook_configuration(plan: planlib.Plan, options: Options) -> Obj:
    certs = options.certificates
    target = registration.Service(options.namespace, WEBHOOK)
    try:
        if isinstance(certs, CertManager):
            return registration.render(
                plan, target, None, exclude_namespaces=options.exclude_namespaces,
                annotations={"cert-manager.io/inject-ca-from": f"{options.namespace}/{WEBHOOK}"})
        return registration.render(plan, target, certs.ca_bundle,
                                   exclude_namespaces=options.exclude_namespaces)
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
    """Lists the files in apply order and keeps that order (kustomize sorts by kind otherwise)."""
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "sortOptions": {"order": "fifo"}, "resources": names}


def _check(options: Options) -> None:
    for what, name in [("namespace", options.namespace),
                       ("metrics namespace", options.metrics_namespace),
                       *(("excluded namespace", n) for n in options.exclude_namespaces)]:
        if not _DNS_LABEL.match(name):
            raise ManifestError(f"{what} {name!r}: not a valid namespace name "
                                "(lowercase letters, digits and '-', at most 63)")
    if options.replicas < 1:
        raise ManifestError(f"replicas {options.replicas}: must be at least 1")
    if not options.image or any(c.isspace() for c in options.image):
        raise ManifestError(f"image {options.image!r}: expected an image reference such as "
                            "registry.example.com/jobrules:0.1.0")
    certs = options.certificates
    if isinstance(certs, UserCertificate) and b"-----BEGIN CERTIFICATE-----" not in certs.ca_bundle:
        raise ManifestError("the CA bundle holds no PEM certificate (-----BEGIN CERTIFICATE-----)")


def _meta(name: str, namespace: str) -> Obj:
    return {"name": name, "namespace": namespace, "labels": dict(LABELS)}


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
