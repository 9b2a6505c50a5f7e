"""The parts of jobs and pods the controller keeps, derived from the plan.

The controller caches every job of the declared kinds and every pod they may own. Whole objects
would make memory grow with pod size (managedFields, env, probes...), so each is cut down to a
projection: the fields the pod reader and the write-back read, and every path any JMESPath
expression of the kind can reach. The expressions are found by a walk over every field of the
kind, so one in a place nobody listed (a budget's `max`, `final until`, an `await`) is kept all
the same. An expression that reads a path through anything but plain field steps (a filter, an
index, a function of `@`) keeps that path's whole subtree, so a projected object evaluates
exactly like the whole one (tests/unit/runtime/test_projection_corpus.py holds them to it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Union

from runtime import plan, vocabulary

Path = tuple[str, ...]


class _Whole:
    """Keep the whole subtree here."""

    def __repr__(self) -> str:
        return "WHOLE"


WHOLE = _Whole()
EACH = "[]"   # a key of a tree: apply the subtree to each element of a list

Tree = Union[_Whole, "dict[str, Tree]"]

# What the pod reader (runtime/pods.py) and the controller read of every pod.
_CONTAINER_STATUS: dict[str, Any] = {
    "name": WHOLE, "restartCount": WHOLE,
    "state": {"running": WHOLE, "waiting": {"reason": WHOLE},
              "terminated": {"exitCode": WHOLE, "reason": WHOLE, "finishedAt": WHOLE}},
    "lastState": {"terminated": {"exitCode": WHOLE, "reason": WHOLE, "finishedAt": WHOLE}},
}
POD_FIELDS: dict[str, Any] = {
    "apiVersion": WHOLE, "kind": WHOLE,
    "metadata": {"name": WHOLE, "namespace": WHOLE, "uid": WHOLE, "resourceVersion": WHOLE,
                 "labels": WHOLE, "ownerReferences": WHOLE, "creationTimestamp": WHOLE,
                 "deletionTimestamp": WHOLE, "deletionGracePeriodSeconds": WHOLE},
    "status": {"phase": WHOLE, "reason": WHOLE, "startTime": WHOLE,
               "conditions": {EACH: {"type": WHOLE, "status": WHOLE, "reason": WHOLE,
                                     "lastTransitionTime": WHOLE}},
               "containerStatuses": {EACH: _CONTAINER_STATUS},
               "initContainerStatuses": {EACH: _CONTAINER_STATUS}},
}
# What a restart with more memory (`with memory`) reads of the pod that failed: each container's
# name and resources (runtime.resources.grown).
POD_RESOURCES: dict[str, Any] = {"spec": {key: {EACH: {"name": WHOLE, "resources": WHOLE}}
                                          for key in ("containers", "initContainers")}}
# What the controller reads of every job besides the plan's paths: identity, our annotations,
# the conditions it writes among, and the status fields of the kind's `status` block.
OURS = vocabulary.JOB_ANNOTATIONS
JOB_FIELDS: dict[str, Any] = {
    "apiVersion": WHOLE, "kind": WHOLE,
    "metadata": {"name": WHOLE, "namespace": WHOLE, "uid": WHOLE, "resourceVersion": WHOLE,
                 "generation": WHOLE, "creationTimestamp": WHOLE, "deletionTimestamp": WHOLE,
                 "labels": WHOLE, "annotations": {key: WHOLE for key in OURS}},
    "status": {"startTime": WHOLE, "conditions": WHOLE},
}


@dataclass(frozen=True, slots=True)
class Projection:
    """How to cut one kind's jobs and pods down (trees of kept keys)."""

    job: Tree
    pod: Tree


def of_kind(kind: plan.Kind) -> Projection:
    job_paths: list[Path] = [f.path for f in _status_fields(kind)]
    pod_paths: list[Path] = []
    for context, expr in expressions(kind):
        (pod_paths if context == POD else job_paths).extend(reads(expr.compiled))
    for step in _steps(kind):
        if isinstance(step, plan.SetField):      # compared with the job's before it is written
            job_paths.append(step.path)
        elif isinstance(step, plan.CreateObject):  # made only while the status is as decided
            job_paths.append(("status",))
        elif isinstance(step, plan.ResizeTemplate) and step.within is not None:
            job_paths.append(step.path)   # the entry of any task: all of them
        elif isinstance(step, plan.ResizeTemplate):  # its container lists are written back whole
            job_paths += [(*step.path, "spec", "containers"), (*step.path, "spec", "initContainers")]
    if kind.native is not None:   # shadow mode: whether the Job carries the fragment, and
        # how many failed pods the Job controller counted (runtime.shadow)
        job_paths += [("spec", key) for key in plan.NATIVE_FIELDS]
        job_paths += [("status", "failed"), ("status", "uncountedTerminatedPods")]
    pods = merge(POD_FIELDS, tree(pod_paths))
    if any(a.grow is not None for p in kind.policies for a in p.action.chain()):
        pods = merge(pods, POD_RESOURCES)
    return Projection(merge(JOB_FIELDS, tree(job_paths)), pods)


def pod_tree(kinds: Iterable[plan.Kind]) -> Tree:
    """One projection for the pods several kinds share (one pod watch serves them all)."""
    out: Tree = POD_FIELDS
    for kind in kinds:
        out = merge(out, of_kind(kind).pod)
    return out


def project(value: Any, keep: Tree) -> Any:
    """`value` with only the kept parts. Where the object does not have the shape the tree
    expects (a string where an object was expected), the value is kept as it is: it is small,
    and JMESPath reads it the same."""
    if keep is WHOLE:
        return value
    assert isinstance(keep, dict)
    if isinstance(value, dict):
        return {key: project(value[key], sub) for key, sub in keep.items() if key in value}
    if isinstance(value, list) and EACH in keep:
        return [project(item, keep[EACH]) for item in value]
    return value if not isinstance(value, (dict, list)) else type(value)()


# ---------------------------------------------------------------------------------------------
# Which paths an expression reads


def reads(searchable: plan.Searchable) -> list[Path]:
    """The paths of the input an expression may read, each to be kept whole."""
    if isinstance(searchable, plan.FieldPath):
        return [searchable.keys]
    node = getattr(searchable, "parsed", None)
    if not isinstance(node, dict):
        return [()]   # an expression we cannot read: keep everything
    kept, tail = _walk(node, ())
    return sorted(kept | ({tail} if tail is not None else set()))


# Nodes whose value is made from their children's values, each read whole.
_COMBINING = frozenset({"comparator", "and_expression", "or_expression", "not_expression",
                        "multi_select_list", "multi_select_dict", "key_val_pair",
                        "function_expression"})
# Nodes whose left child gives a list (or object) whose elements the rest works on.
_PROJECTING = frozenset({"projection", "filter_projection", "value_projection", "flatten",
                         "index_expression", "slice"})


def _walk(node: dict[str, Any], base: Path) -> tuple[set[Path], Path | None]:
    """(paths kept whole, the path the node's value is, if it is a plain path) for `node`
    evaluated at `base`."""
    kind = node.get("type")
    children = node.get("children") or []
    if kind == "field":
        return set(), (*base, node["value"])
    if kind in ("current", "identity"):
        return set(), base
    if kind in ("literal", "raw_string", "index"):
        return set(), None
    if kind == "subexpression":
        kept: set[Path] = set()
        tail: Path | None = base
        for child in children:
            if tail is None:   # working on a value made here: it reads no more of the input
                return kept, None
            more, tail = _walk(child, tail)
            kept |= more
        return kept, tail
    if kind in _PROJECTING or kind == "pipe":
        kept, tail = _walk(children[0], base) if children else (set(), base)
        if tail is not None:
            kept = kept | {tail}
        return kept, None
    if kind in _COMBINING:
        kept = set()
        for child in children:
            more, tail = _walk(child, base)
            kept |= more | ({tail} if tail is not None else set())
        return kept, None
    return {base}, None   # a node this walk does not know: keep everything below `base`


# ---------------------------------------------------------------------------------------------
# Trees


def tree(paths: Iterable[Path]) -> Tree:
    """The tree keeping each path's whole subtree; the empty path keeps everything."""
    out: dict[str, Any] = {}
    for path in sorted(set(paths), key=len):
        if not path:
            return WHOLE
        node: Any = out
        for key in path[:-1]:
            child = node.get(key)
            if child is WHOLE:
                break
            node = node.setdefault(key, {})
        else:
            node[path[-1]] = WHOLE
    return out


def merge(a: Tree, b: Tree) -> Tree:
    """Keep what either keeps."""
    if a is WHOLE or b is WHOLE:
        return WHOLE
    assert isinstance(a, dict) and isinstance(b, dict)
    out = dict(a)
    for key, sub in b.items():
        out[key] = merge(out[key], sub) if key in out else sub
    return out


# ---------------------------------------------------------------------------------------------
# The plan's expressions, by what they are evaluated against

JOB, POD = "job", "pod"
# The fields whose expressions are evaluated against a pod (docs/plan.md: `filter`,
# `primaryPods` and the task expression); every other expression of a kind reads the job.
_POD_CONTEXT = frozenset({(plan.Kind, "task_expr"), (plan.Kind, "primary_pods"),
                          (plan.Pods, "filter"), (plan.Count, "filter"), (plan.Policy, "filter"),
                          (plan.Cause, "filter")})


def expressions(kind: plan.Kind) -> Iterator[tuple[str, plan.Expr]]:
    """Every expression of a kind, with what it reads (JOB or POD). The walk visits every field
    of every node (the `actions` recipes too), so an expression in a new place of the plan is
    kept without anyone listing it here."""
    yield from _exprs(kind, JOB)


def _exprs(node: Any, context: str) -> Iterator[tuple[str, plan.Expr]]:
    if isinstance(node, plan.Expr):
        yield context, node
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from _exprs(item, context)
    elif isinstance(node, Mapping):
        for item in node.values():
            yield from _exprs(item, context)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            inner = POD if (type(node), f.name) in _POD_CONTEXT else context
            yield from _exprs(getattr(node, f.name), inner)


def _steps(kind: plan.Kind) -> Iterator[plan.Step]:
    for recipe in (*kind.actions.values(), *(g.recipe for g in kind.guarded)):
        if not isinstance(recipe, str):
            yield from recipe


def _status_fields(kind: plan.Kind) -> list[plan.StatusField]:
    status = kind.status
    return [f for f in (status.phase, status.reason, status.message) if f is not None]
