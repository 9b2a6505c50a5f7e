"""The pod as admission receives it: what the mutator reads of it, read defensively, once.

The bottom of the mutator's stack (view <- draft <- steps <- inject). A pod at CREATE may lack a
name, a namespace or anything else, and any field may have an odd type: nothing here assumes a
shape. The task, the `primary pods` filter and JMESPath truthiness are `runtime.pods`'s, so a pod
reads the same at admission as in evaluation.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, TypedDict

import jmespath

from runtime import functions, pods, templates
from runtime.plan import Containers, Expr, FieldPath, Kind
from runtime.span import Span

# The pod's container lists, in patch order, which is also their sorted order (Draft.finish).
LISTS = ("containers", "initContainers")


class MutationError(Exception):
    """An injection that matched but cannot be applied to this pod; cites the rule."""

    def __init__(self, injection: str, span: Span, message: str) -> None:
        super().__init__(f"{span}: injection {injection}: {message}")
        self.injection = injection
        self.span = span
        self.message = message


class ExpressionFailed(Exception):
    """A JMESPath expression failing on this pod; the injection running it reports it as a
    MutationError citing the expression."""

    def __init__(self, expr: Expr, error: Exception) -> None:
        super().__init__(f"JMESPath {expr.source!r} failed: {error}")
        self.expr = expr


# ---------------------------------------------------------------------------------------------
# What the mutator reads of a pod: these fields, and whatever the plan's expressions read


class _Named(TypedDict, total=False):
    name: str


class _Mounted(TypedDict, total=False):
    mountPath: str


class _Container(TypedDict, total=False):
    name: str
    command: list[str] | None
    args: list[str] | None
    env: list[_Named] | None
    volumeMounts: list[_Mounted] | None


class _OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool | None


class _Metadata(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    ownerReferences: list[_OwnerReference] | None


class _Spec(TypedDict, total=False):
    containers: list[_Container] | None
    initContainers: list[_Container] | None
    volumes: list[_Named] | None
    automountServiceAccountToken: bool | None


class PodView(TypedDict, total=False):
    """The fields of a pod `mutate` reads, typed as a well-formed pod has them, for a decoder
    that skips the rest. A decoder falls back to the whole pod when one does not fit, so that
    `mutate` answers the same either way, for a plan whose expressions do not read the pod
    (`Injector.reads_pod`). Keep it in step with what the mutator reads."""

    metadata: _Metadata | None
    spec: _Spec | None


# ---------------------------------------------------------------------------------------------
# Reading


def mapping(value: Any) -> dict:
    """An object of the pod, or {} where the pod has something else."""
    return value if isinstance(value, dict) else {}


def array(value: Any) -> list:
    """A list of the pod, or [] where the pod has something else."""
    return value if isinstance(value, list) else []


def owner_reference(meta: dict) -> dict | None:
    """The controlling owner reference, else the first one (docs/plan.md, Injection)."""
    first = None
    for ref in array(meta.get("ownerReferences")):
        if isinstance(ref, dict):
            if ref.get("controller") is True:
                return ref
            if first is None:
                first = ref
    return first


Selected = tuple[str, int, dict, str]   # (container list, index there, container, name)
_UNSET: Any = object()


class Received:
    """The received pod with the facts filters and templates need, computed at most once."""

    __slots__ = ("pod", "meta", "labels", "annotations", "spec", "kind", "owner", "namespace",
                 "sidecars", "data", "_options", "_task", "_primary", "_selected")

    def __init__(self, pod: dict, meta: dict, kind: Kind, owner: dict | None,
                 namespace: str | None, sidecars: frozenset[str]) -> None:
        self.pod, self.meta, self.kind, self.owner = pod, meta, kind, owner
        self.labels = mapping(meta.get("labels"))
        self.annotations = mapping(meta.get("annotations"))
        self.spec = mapping(pod.get("spec"))
        self.namespace = namespace
        self.sidecars = sidecars
        # what injection expressions are evaluated against (made at once: cheaper than a property)
        self.data = {"pod": pod, "owner": owner, "namespace": namespace}
        self._options: jmespath.Options | None = None
        self._task: Any = _UNSET
        self._primary: Any = _UNSET
        self._selected: dict[tuple[str, tuple[str, ...]], list[Selected]] = {}

    def search(self, expr: Expr, data: Any) -> Any:
        """A templates.Search; a failure raises ExpressionFailed (never read as null here: an
        injection that cannot be worked out must not be half applied)."""
        if isinstance(expr.compiled, FieldPath):
            return expr.compiled.search(data)   # needs no functions, so no clock
        if self._options is None:
            self._options = functions.options(datetime.now(timezone.utc))
        try:
            return expr.compiled.search(data, self._options)
        except templates.SEARCH_ERRORS as err:
            raise ExpressionFailed(expr, err) from None

    def task(self) -> str | None:
        """The pod's task, read as the evaluator reads it (runtime.pods.task_of)."""
        if self._task is _UNSET:
            self._task = pods.task_of(self.kind, self.pod, self.search)
        return self._task

    def primary(self) -> bool:
        """Whether the kind's `primary pods` filter holds, tested as the evaluator tests it (a
        pod being created has no status: its status terms read as for a pod that has not run)."""
        if self._primary is _UNSET:
            self._primary = pods.is_primary(self.kind, self.pod, self.search)
        return self._primary

    def name(self) -> str:
        """`{pod}`: the name, else the generateName prefix (pods of a controller have no name
        yet at CREATE)."""
        name = self.meta.get("name") or self.meta.get("generateName")
        return name if isinstance(name, str) else ""

    def variables(self) -> dict[str, Any]:
        """The placeholders an injection template may name, but `container` and `argv`."""
        owner = mapping(mapping(self.owner).get("metadata"))
        return {"job": owner.get("name"), "namespace": self.namespace, "kind": self.kind.kind,
                "task": self.task(), "pod": self.name()}

    def select(self, which: Containers) -> list[Selected]:
        """The pod's own containers an op targets; sidecars declared in the plan never are.
        Equal selections of different ops are made once."""
        key = which.select, which.names   # a tuple hashes in C, the frozen dataclass in Python
        selected = self._selected.get(key)
        if selected is None:
            selected = self._selected[key] = self._select(which)
        return selected

    def _select(self, which: Containers) -> list[Selected]:
        names: tuple[str, ...] | None   # a few names: a tuple is as quick to ask as a set
        fields: tuple[str, ...]
        prefix = None
        kind = self.kind
        if which.select == "named":
            names, fields = which.names, LISTS
        elif which.select == "primary" and (kind.primary_containers is not None
                                            or kind.primary_prefix is not None):
            names, prefix, fields = kind.primary_containers or (), kind.primary_prefix, ("containers",)
        else:
            names, fields = None, ("containers",)
        found: list[Selected] = []
        for field in fields:
            for i, container in enumerate(array(self.spec.get(field))):
                if isinstance(container, dict):
                    name = container.get("name")
                    if isinstance(name, str) and (names is None or name in names or (
                            prefix is not None and name.startswith(prefix))) \
                            and name not in self.sidecars:
                        found.append((field, i, container, name))
        return found
