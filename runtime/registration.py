"""The MutatingWebhookConfiguration that makes the API server call the webhook for a plan's pods.

Pure: a plan and where the webhook listens in, a configuration dict out. The API server is told
to call only for pod CREATEs outside the system namespaces, and a CEL match condition narrows
the calls to pods owned by a kind that some injection names, so unrelated pods never wait on us.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime import plan as planlib

MUTATE_PATH = "/mutate-pods"
DEFAULT_NAME = "jobrules"
WEBHOOK_NAME = "pods.jobrules.dev"   # must be a DNS subdomain of three segments or more
ALWAYS_EXCLUDED = ("kube-system",)
SKIP_LABEL = "jobrules.dev/skip"   # a pod with this label, whatever its value, is never sent

_SERVICE = re.compile(
    r"(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)/(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"(:(?P<port>\d{1,5}))?(?P<path>/\S*)?\Z"
)


class RegistrationError(ValueError):
    """A plan or a target that cannot be turned into a valid configuration."""


@dataclass(frozen=True, slots=True)
class Url:
    url: str


@dataclass(frozen=True, slots=True)
class Service:
    namespace: str
    name: str
    port: int = 443
    path: str = MUTATE_PATH


Target = Url | Service


def parse_service(text: str) -> Service:
    """`namespace/name[:port][/path]` as a Service target."""
    found = _SERVICE.match(text)
    if found is None:
        raise RegistrationError(f"service {text!r}: expected namespace/name[:port][/path]")
    port = int(found["port"] or 443)
    if not 1 <= port <= 65535:
        raise RegistrationError(f"service {text!r}: port {port} is out of range")
    return Service(found["namespace"], found["name"], port, found["path"] or MUTATE_PATH)


def injected_kinds(plan: planlib.Plan) -> list[planlib.Kind]:
    """The kinds some injection names, in plan order: the only owners worth a call."""
    named = {name for injection in plan.injections for name in injection.kinds}
    return [kind for kind in plan.kinds if kind.name in named]


def match_condition(owners: Iterable[tuple[str, str]]) -> str:
    """CEL that holds for a pod with an owner reference to one of the (apiVersion, kind) pairs."""
    terms = " || ".join(
        f"(r.apiVersion == {_cel_string(api_version)} && r.kind == {_cel_string(kind)})"
        for api_version, kind in owners
    )
    return ("has(object.metadata.ownerReferences) && "
            f"object.metadata.ownerReferences.exists(r, {terms})")


def render(plan: planlib.Plan, target: Target, ca_bundle: bytes | None = None, *,
           name: str = DEFAULT_NAME, webhook_name: str = WEBHOOK_NAME,
           exclude_namespaces: Iterable[str] = (),
           annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The configuration, or a RegistrationError saying why the plan or target cannot have one.

    `annotations` are added to the object's (a CA injector's, for instance)."""
    timeout = plan.webhook.timeout_seconds
    if not 1 <= timeout <= 30:
        raise RegistrationError(f"webhook timeout {timeout}s: the API server accepts 1 to 30 seconds")
    excluded = set(ALWAYS_EXCLUDED) | set(exclude_namespaces)
    if isinstance(target, Service):
        excluded.add(target.namespace)
    kinds = injected_kinds(plan)
    webhooks = [] if not kinds else [{
        "name": webhook_name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(target, ca_bundle),
        "rules": [{
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }],
        "namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": sorted(excluded),
        }]},
        # The escape hatch: label a pod (or a pod template) and it is admitted without a call.
        "objectSelector": {"matchExpressions": [{"key": SKIP_LABEL, "operator": "DoesNotExist"}]},
        "matchConditions": [{"name": "owned-by-injected-kind", "expression": match_condition(
            (kind.api_version, kind.kind) for kind in kinds)}],
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "reinvocationPolicy": "IfNeeded",
        "timeoutSeconds": timeout,
        "failurePolicy": plan.webhook.failure_policy,
    }]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "rulec"},
            "annotations": ({"jobrules.dev/plan-digest": plan.digest} if plan.digest else {})
            | dict(annotations or {}),
        },
        "webhooks": webhooks,
    }


def _client_config(target: Target, ca_bundle: bytes | None) -> dict[str, Any]:
    if isinstance(target, Url):
        if not target.url.startswith("https://"):
            raise RegistrationError(f"url {target.url!r}: the API server calls webhooks over https only")
        config: dict[str, Any] = {"url": target.url}
    else:
        config = {"service": {"namespace": target.namespace, "name": target.name,
                              "port": target.port, "path": target.path}}
    if ca_bundle is not None:
        config["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return config


def _cel_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"
