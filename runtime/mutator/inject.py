"""The top of the mutator: which prepared injections match a pod, and the patch they make.

`prepare(plan)` compiles the plan's injections once, when the plan (re)loads; `mutate` runs the
matching ones over a draft of the received pod and emits one patch.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from runtime.mutator.draft import Draft
from runtime.mutator.steps import Program, program
from runtime.mutator.view import ExpressionFailed, MutationError, Received, mapping, owner_reference
from runtime.plan import FieldPath, Injection, Kind, Plan, Sidecar, expressions


class Mutation(NamedTuple):
    """What `mutate` answers, once per request: a named tuple, immutable like the frozen
    dataclasses elsewhere but made for a third of what a frozen dataclass's `__init__` costs."""

    patch: tuple[dict, ...]  # RFC 6902 ops that apply to the exact pod received
    applied: tuple[str, ...]  # injections that matched and changed something, in plan order
    kind: str | None  # plan kind the pod belongs to (None: no declared owner kind)
    failed: tuple[MutationError, ...] = ()  # with `isolate`: injections left out, each's failure


@dataclass(frozen=True, slots=True)
class Injector:
    """A plan's injections compiled for admission; built by `prepare` when the plan (re)loads
    and held beside it, so no request pays for it."""

    plan: Plan
    kinds: dict[tuple[str, str], Kind]  # (apiVersion, kind) of every served version -> kind
    # (kind name, namespace selector) -> the injections for its pods that the webhook entry of
    # that namespace selector serves (None: the entry for every namespace), prepared
    programs: dict[tuple[str, str | None], tuple[Program, ...]]
    sidecars: frozenset[str]  # every sidecar name in the plan: never a target of other ops
    reads_pod: bool  # whether an expression `mutate` may evaluate reads the pod beyond PodView
    # injection name -> `digest` of it: the record's entry for it is `name@digest`
    digests: Mapping[str, str] = dataclasses.field(default_factory=dict)


def prepare(plan: Plan) -> Injector:
    kinds: dict[tuple[str, str], Kind] = {}
    for kind in plan.kinds:
        for api_version in kind.api_versions():
            kinds.setdefault((api_version, kind.kind), kind)
    programs = {i.name: program(i) for i in plan.injections}
    by_kind = {(k.name, selector): tuple(programs[i.name] for i in plan.injections
                                         if k.name in i.kinds and i.namespace_selector == selector)
               for k in plan.kinds for selector in plan.namespace_selectors()}
    sidecars = frozenset(op.name for i in plan.injections for op in i.ops if isinstance(op, Sidecar))
    return Injector(plan, kinds, by_kind, sidecars, _reads_pod(plan),
                    {i.name: digest(i) for i in plan.injections})


def digest(injection: Injection) -> str:
    """12 hex digits of what an injection does (its name, kinds, filter, ops and completion
    containers), not of where it is written: the record names the version of each injection a
    pod got, which an edit elsewhere in the rules (a comment, another kind, another injection)
    leaves as it was, where the whole plan's digest would change."""
    text = orjson.dumps(_canonical(injection), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(text).hexdigest()[:12]


# Fields that say where a thing is written (`span`) or repeat another (`compiled`: `source`
# compiled), left out of `digest`.
_POSITIONS = frozenset({"span", "compiled"})


def _canonical(value: Any) -> Any:
    """A plan value as plain JSON data: dataclasses as objects tagged with their type, sets
    sorted; anything else is refused (a new plan type must be thought about here)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"": type(value).__name__, **{f.name: _canonical(getattr(value, f.name))
                                             for f in dataclasses.fields(value)
                                             if f.name not in _POSITIONS}}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_canonical(v) for v in value),
                      key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"no canonical form for a {type(value).__name__} in an injection")


def serving(plan: Plan, namespace_labels: dict[str, str]) -> tuple[str | None, ...]:
    """The webhook entries (by namespace selector) that the API server calls for a pod in a
    namespace with these labels, in order: what `rulec mutate --namespace-label` runs."""
    out: list[str | None] = [None]
    for selector in plan.namespace_selectors():
        if selector is None:
            continue
        injection = next(i for i in plan.injections if i.namespace_selector == selector)
        if all(r.holds(namespace_labels) for r in injection.namespace_requirements):
            out.append(selector)
    return tuple(out)


def mutate(injector: Injector, pod: dict, owner: dict | None = None,
           namespace: str | None = None, namespace_selector: str | None = None, *,
           isolate: bool = False) -> Mutation:
    """The patch that applies every matching injection of the prepared plan to `pod`.

    `owner` is the owner job object when the caller has it (else a stub is built from the owner
    reference); `namespace` is the request's namespace, since pods at CREATE may lack it.
    `namespace_selector` names the webhook entry that called: only the injections with those
    `namespace label` tests apply (None: those without), and the API server has checked them.

    An injection that fails on the pod raises its MutationError; with `isolate` (a fail-open
    plan) it is left out instead, with whatever it had drafted, and the others apply as if it
    were not in the plan (`Mutation.failed` says which failed and why).
    """
    if not isinstance(pod, dict):
        return Mutation((), (), None)
    meta = mapping(pod.get("metadata"))
    ref = owner_reference(meta)
    owner = owner if isinstance(owner, dict) else None
    kind = _kind_of(injector, ref if ref is not None else owner)
    if kind is None:
        return Mutation((), (), None)
    if namespace is None and isinstance(meta.get("namespace"), str):
        namespace = meta["namespace"]
    if kind.namespaces is not None and namespace not in kind.namespaces:
        return Mutation((), (), None)  # outside the kind's scope
    if owner is None and ref is not None:
        owner = {"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind"),
                 "metadata": {"name": ref.get("name"), "uid": ref.get("uid")}}
    received = Received(pod, meta, kind, owner, namespace, injector.sidecars)
    programs = injector.programs.get((kind.name, namespace_selector), ())
    failed: list[MutationError] = []
    while True:   # each failure leaves one injection out: at most one try per injection
        try:
            return _apply(injector, received, programs, kind.name, tuple(failed))
        except MutationError as err:
            if not isolate or all(p.injection.name != err.injection for p in programs):
                raise
            failed.append(err)
            programs = tuple(p for p in programs if p.injection.name != err.injection)


def _apply(injector: Injector, received: Received, programs: tuple[Program, ...], kind: str,
           failed: tuple[MutationError, ...]) -> Mutation:
    """The programs that match the pod, drafted in order on a fresh draft, as one patch."""
    matched: list[Program] = []
    try:   # loops rather than calls: an expression failing is the failure of the one `running`
        for running in programs:
            if running.test(received):
                matched.append(running)
        if not matched:
            return Mutation((), (), kind, failed)
        draft = Draft(received)
        for running in matched:
            for step in running.steps:
                step(draft)
    except ExpressionFailed as err:
        raise MutationError(running.injection.name, err.expr.span, str(err)) from None
    ops, applied = draft.finish([p.injection for p in matched], injector.digests)
    return Mutation(tuple(ops), applied, kind, failed)


def _kind_of(injector: Injector, source: dict | None) -> Kind | None:
    """The declared kind an owner reference (or owner object) names by apiVersion + kind."""
    if not isinstance(source, dict):
        return None
    api_version, kind = source.get("apiVersion"), source.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str):
        return injector.kinds.get((api_version, kind))
    return None


def _reads_pod(plan: Plan) -> bool:
    """Expressions over the pod itself (a kind's task expression or `primary pods` filter)
    read it; over {pod, owner, namespace}, all do but field paths not starting at `pod`."""
    used = {name for injection in plan.injections for name in injection.kinds}
    if any(k.task_expr is not None or next(expressions(k.primary_pods), None) is not None
           for k in plan.kinds if k.name in used):
        return True
    return any(not isinstance(e.compiled, FieldPath) or e.compiled.keys[0] == "pod"
               for i in plan.injections for e in expressions((i.match, i.ops)))
