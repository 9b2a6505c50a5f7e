"""The MutatingWebhookConfiguration that makes the API server call the webhook for a plan's pods.

Pure: a plan and where the webhook listens in, a configuration dict out. The API server is told
to call only for pod CREATEs outside the system namespaces, and a CEL match condition narrows
the calls to pods owned by a kind that some injection names, so unrelated pods never wait on us.
Injections opted into by namespace labels (`namespace label ...`) get one webhook entry per
distinct namespace selector, at a path of their own, so the webhook knows which entry called.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime import plan as planlib
from runtime import vocabulary

MUTATE_PATH = "/mutate-pods"
# Mutating webhooks are called in the order of their configurations' names: this one sorts before
# Istio's `istio-sidecar-injector` (and `istio-revision-tag-*`), so Istio sees annotations such as
# `sidecar.istio.io/inject: "false"` that injections set (docs/webhook.md, Ordering).
DEFAULT_NAME = "0-jobrules"
WEBHOOK_NAME = "pods.jobrules.dev"   # must be a DNS subdomain of three segments or more
ALWAYS_EXCLUDED = ("kube-system",)
SKIP_LABEL = vocabulary.SKIP_LABEL   # a pod with this label, whatever its value, is never sent

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


def dns_names(service: Service) -> tuple[str, ...]:
    """The names a serving certificate for `service` is for: the API server calls the first of
    the `.svc` ones; the short and the fully qualified names serve other clients."""
    svc = f"{service.name}.{service.namespace}.svc"
    return (service.name, svc, f"{svc}.cluster.local")


def parse_service(text: str) -> Service:
    """`namespace/name[:port][/path]` as a Service target."""
    found = _SERVICE.match(text)
    if found is None:
        raise RegistrationError(f"service {text!r}: expected namespace/name[:port][/path]")
    port = int(found["port"] or 443)
    if not 1 <= port <= 65535:
        raise RegistrationError(f"service {text!r}: port {port} is out of range")
    return Service(found["namespace"], found["name"], port, found["path"] or MUTATE_PATH)


def injected_kinds(plan: planlib.Plan, selector: str | None = None,
                   skip: Iterable[str] = ()) -> list[planlib.Kind]:
    """The kinds some injection of the namespace selector's entry names (but those in `skip`),
    in plan order: the only owners worth a call."""
    skipped = set(skip)
    named = {name for injection in plan.injections
             if injection.namespace_selector == selector and injection.name not in skipped
             for name in injection.kinds}
    return [kind for kind in plan.kinds if kind.name in named]


def entry_id(selector: str) -> str:
    """The short, stable name of a namespace selector's webhook entry (its path's last part)."""
    return "ns-" + hashlib.sha256(selector.encode()).hexdigest()[:10]


def entry_path(selector: str | None) -> str:
    """The path, under the webhook's own, of the entry for a namespace selector."""
    return "" if selector is None else "/" + entry_id(selector)


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
           annotations: Mapping[str, str] | None = None,
           native: bool = False) -> dict[str, Any]:
    """The configuration, or a RegistrationError saying why the plan or target cannot have one.

    `annotations` are added to the object's (a CA injector's, for instance). With `native`
    (the plan's MutatingAdmissionPolicies are shipped beside it), the injections they do are
    left out: an entry only they needed goes, and pods only they concern are not sent."""
    skip = tuple(plan.native_injections) if native else ()
    timeout = plan.webhook.timeout_seconds
    if not 1 <= timeout <= 30:
        raise RegistrationError(f"webhook timeout {timeout}s: the API server accepts 1 to 30 seconds")
    excluded = set(ALWAYS_EXCLUDED) | set(exclude_namespaces)
    if isinstance(target, Service):
        excluded.add(target.namespace)
    webhooks = []
    for selector in plan.namespace_selectors():
        kinds = injected_kinds(plan, selector, skip)
        if not kinds:
            continue
        injection = next((i for i in plan.injections if i.namespace_selector == selector
                          and i.name not in skip), None)
        requirements = injection.namespace_requirements if injection is not None else ()
        webhooks.append({
            "name": webhook_name if selector is None else f"{entry_id(selector)}.{webhook_name}",
            "admissionReviewVersions": ["v1"],
            "clientConfig": _client_config(target, ca_bundle, entry_path(selector)),
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
            }, *({"key": r.key, "operator": r.operator, **({"values": list(r.values)}
                                                            if r.values else {})}
                 for r in requirements)]},
            # The escape hatch: label a pod (or a pod template) and it is admitted without a call.
            "objectSelector": {"matchExpressions": [{"key": SKIP_LABEL, "operator": "DoesNotExist"}]},
            "matchConditions": [{"name": "owned-by-injected-kind", "expression": match_condition(
                (api_version, kind.kind) for kind in kinds for api_version in kind.api_versions())}],
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "reinvocationPolicy": "IfNeeded",
            "timeoutSeconds": timeout,
            "failurePolicy": plan.webhook.failure_policy,
        })
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "rulec"},
            "annotations": ({vocabulary.PLAN_DIGEST_ANNOTATION: plan.digest} if plan.digest else {})
            | dict(annotations or {}),
        },
        "webhooks": webhooks,
    }


def _client_config(target: Target, ca_bundle: bytes | None, suffix: str = "") -> dict[str, Any]:
    if isinstance(target, Url):
        if not target.url.startswith("https://"):
            raise RegistrationError(f"url {target.url!r}: the API server calls webhooks over https only")
        config: dict[str, Any] = {"url": target.url.rstrip("/") + suffix if suffix else target.url}
    else:
        path = target.path.rstrip("/") + suffix if suffix else target.path
        config = {"service": {"namespace": target.namespace, "name": target.name,
                              "port": target.port, "path": path}}
    if ca_bundle is not None:
        config["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return config


def _cel_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"
