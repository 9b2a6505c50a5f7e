"""What the controller watches for a plan, and which changes call for a reconcile: pure.

A kind's jobs are one watch; pods are watched once per label key the kinds find their pods by
(`batch.kubernetes.io/controller-uid`, `volcano.sh/job-name`, ...: one watch serves every kind
that selects on the same key), or all pods for a kind that has no selector. Each cache is cut
to its projection (runtime.projection) and indexed so that a pod leads to its jobs and a job to
its candidate pods without a scan. A change matters only when what a reconcile reads changed:
our own writes (the resourceVersion, our annotations and condition) do not wake another pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, Mapping

from runtime import functions, objects, plan, projection, templates, vocabulary
from runtime import pods as podlib
from runtime import store as storelib

Significant = Callable[[Any], Any]
_SEARCH = templates.searcher(functions.options(datetime.now(timezone.utc)))


def pod_selector(kind: plan.Kind) -> str:
    """The pod watch a kind reads from: pods with its first selector label's key, else all."""
    return kind.pod_labels[0][0] if kind.pod_labels else ""


def pod_watches(kinds: Iterable[plan.Kind]) -> dict[str, list[plan.Kind]]:
    """The pod watches a plan needs, by selector, with the kinds each serves."""
    out: dict[str, list[plan.Kind]] = {}
    for kind in kinds:
        out.setdefault(pod_selector(kind), []).append(kind)
    return out


def rewatch(old: plan.Kind, new: plan.Kind) -> bool:
    """Whether a kind's job watch must start again under new rules: another resource, or a
    projection that keeps other fields (its cache holds the wrong cut)."""
    return ((old.api_version, old.plural) != (new.api_version, new.plural)
            or projection.of_kind(old).job != projection.of_kind(new).job)


# ---------------------------------------------------------------------------------------------
# The caches: what each keeps of an object, what of it matters, how it is indexed


def job_store(kind: plan.Kind) -> storelib.Store:
    """The cache of a kind's jobs: each cut to the kind's projection, its changes judged by
    `significant`, indexed by `job_indexes`. The controller's caches hold one per kind;
    `rulec why` reads a job through one too, so it sees the job as the controller does."""
    tree = projection.of_kind(kind).job
    return storelib.Store(lambda obj: projection.project(obj, tree), significant(kind),
                          job_indexes(kind))


def pod_store(selector: str, kinds: Iterable[plan.Kind]) -> storelib.Store:
    """The cache of one pod watch (`selector`, see `pod_selector`) serving `kinds`: each pod cut
    to the projection they share (`projection.pod_tree`), indexed by `pod_indexes`."""
    tree = projection.pod_tree(kinds)   # every change of it matters (its version is kept apart)
    return storelib.Store(lambda obj: projection.project(obj, tree), None, pod_indexes(selector))


def pod_query(selector: str) -> list[tuple[str, str]]:
    """The query a pod watch lists and watches with: pods that have the selector's label key
    (all pods for the empty selector)."""
    return [("labelSelector", selector)] if selector else []


# ---------------------------------------------------------------------------------------------
# Indexes


def job_indexes(kind: plan.Kind) -> dict[str, storelib.IndexFn]:
    """A kind's jobs by uid (pods owned), by namespace, and by the value of the pod label that
    selects their pods (`selector`: (namespace, value))."""
    out: dict[str, storelib.IndexFn] = {"uid": lambda job: [objects.uid(job)],
                                        "ns": lambda job: [storelib.key_of(job)[0]]}
    if kind.pod_labels:
        template = kind.pod_labels[0][1]
        out["selector"] = lambda job: [(storelib.key_of(job)[0], _render(template, job))]
    return out


def pod_indexes(selector: str) -> dict[str, storelib.IndexFn]:
    """Pods by controller owner uid, by namespace and, under a selector, by its label value."""
    out: dict[str, storelib.IndexFn] = {"owner": storelib.owner_uids,
                                        "ns": lambda pod: [storelib.key_of(pod)[0]]}
    if selector:
        out["label"] = storelib.label_values(selector)
    return out


def candidates(kind: plan.Kind, pods: storelib.Store, job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cached pods that may belong to the job (runtime.pods.pods_of decides)."""
    namespace = storelib.key_of(job)[0]
    if kind.pod_labels:
        return pods.lookup("label", (namespace, _render(kind.pod_labels[0][1], job)))
    if kind.pods_owned:
        return pods.lookup("owner", objects.uid(job))
    return pods.lookup("ns", namespace)


def owners(kind: plan.Kind, jobs: storelib.Store, pod: Mapping[str, Any]) -> list[storelib.Key]:
    """The cached jobs of `kind` a pod may belong to."""
    namespace = storelib.key_of(pod)[0]
    if kind.pod_labels:
        value = objects.labels(pod).get(kind.pod_labels[0][0])
        return jobs.lookup_keys("selector", (namespace, value))
    if kind.pods_owned:
        return [k for uid in storelib.owner_uids(pod) for k in jobs.lookup_keys("uid", uid)]
    return jobs.lookup_keys("ns", namespace)


def _render(template: plan.Template, job: Any) -> str | None:
    return templates.render_text(template, job, podlib.job_variables(job), _SEARCH)


# ---------------------------------------------------------------------------------------------
# Which changes matter


def significant(kind: plan.Kind) -> Significant:
    """A job without what our own writes change (its version, our annotations, phase label and
    condition): a change there alone calls for no reconcile."""
    ours = kind.status.condition

    def cut(job: Any) -> Any:
        meta = dict(objects.meta(job))
        meta.pop("resourceVersion", None)
        meta["annotations"] = {k: v for k, v in objects.annotations(job).items()
                               if k not in projection.OURS}
        meta["labels"] = {k: v for k, v in objects.labels(job).items()
                          if k != vocabulary.PHASE_LABEL}
        out = {**job, "metadata": meta}
        status = job.get("status")
        if isinstance(status, dict) and ours is not None:
            conditions = status.get("conditions")
            if isinstance(conditions, list):
                out["status"] = {**status, "conditions": [
                    c for c in conditions if not (isinstance(c, dict) and c.get("type") == ours)]}
        return out
    return cut
