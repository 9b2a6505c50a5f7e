"""Pod injection at admission: the plan's injections that apply to a pod, as one RFC 6902 patch.

Pure: no I/O and no API call (the clock is read only if an expression calls `now()` or `age()`,
since admission has no other notion of time). The owner comes from the pod's own ownerReferences, and the patch is
computed against exactly the pod received, because that is the object the API server applies it
to: containers are addressed by their index in that pod (guarded by a `test` of their name), and
everything new is appended with `/-`. Every decision (conflicts, idempotence, malformed pods) is
written down in docs/injection.md.
"""

from __future__ import annotations

import functools
import itertools
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jmespath
import jmespath.exceptions
import orjson

from runtime import functions, templates
from runtime import patch as jp
from runtime.plan import (
    And,
    Annotate,
    Containers,
    Env,
    Expr,
    FieldPath,
    Injection,
    IsPrimary,
    JmesPath,
    Kind,
    Label,
    LabelIs,
    Mount,
    NamespaceIs,
    Not,
    Or,
    Plan,
    Sidecar,
    Span,
    TaskIs,
    Template,
    Var,
    Volume,
    Wrap,
)

RECORD_ANNOTATION = "jobrules.dev/injected"
COMPLETION_ANNOTATION = "jobrules.dev/completion-containers"
COMPLETION_ENV = "JOBRULES_COMPLETION_CONTAINERS"

_LISTS = ("containers", "initContainers")
_SPEC = {field: f"/spec/{field}" for field in _LISTS}   # their pointers
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class Mutation:
    patch: tuple[dict, ...]  # RFC 6902 ops that apply to the exact pod received
    applied: tuple[str, ...]  # injections that matched and changed something, in plan order
    kind: str | None  # plan kind the pod belongs to (None: no declared owner kind)


class MutationError(Exception):
    """An injection that matched but cannot be applied to this pod; cites the rule."""

    def __init__(self, injection: str, span: Span, message: str) -> None:
        super().__init__(f"{span}: injection {injection}: {message}")
        self.injection = injection
        self.span = span
        self.message = message


def mutate(plan: Plan, pod: dict, owner: dict | None = None,
           namespace: str | None = None) -> Mutation:
    """The patch that applies every matching injection of `plan` to `pod`.

    `owner` is the owner job object when the caller has it (else a stub is built from the owner
    reference); `namespace` is the request's namespace, since pods at CREATE may lack it.
    """
    if not isinstance(pod, dict):
        return Mutation((), (), None)
    index = _index(plan)
    meta = _dict(pod.get("metadata"))
    ref = _owner_reference(meta)
    owner = owner if isinstance(owner, dict) else None
    kind = _kind_of(index, ref if ref is not None else owner)
    if kind is None:
        return Mutation((), (), None)
    if owner is None and ref is not None:
        owner = {"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind"),
                 "metadata": {"name": ref.get("name"), "uid": ref.get("uid")}}
    if namespace is None and isinstance(meta.get("namespace"), str):
        namespace = meta["namespace"]
    view = _Pod(pod, meta, kind, owner, namespace, index.sidecars)
    kind_name = kind.name
    candidates = index.candidates[kind_name]
    matched = [i for i in candidates if i.match is None or _matches(i.match, view, i)]
    if not matched:
        return Mutation((), (), kind_name)
    draft = _Draft(view)
    for injection in matched:
        draft.inject(injection)
    ops, applied = draft.finish(matched, plan.digest[:12])
    return Mutation(tuple(ops), applied, kind_name)


# ---------------------------------------------------------------------------------------------
# Per-plan index, built once per Plan object


@dataclass(frozen=True, slots=True)
class _Index:
    kinds: dict[tuple[str, str], Kind]  # (apiVersion, kind) -> first declared kind
    candidates: dict[str, tuple[Injection, ...]]  # kind name -> injections for its pods
    sidecars: frozenset[str]  # every sidecar name in the plan: never a target of other ops


_INDEXES: dict[int, tuple[Plan, _Index]] = {}   # by id(plan); the Plan is kept, so ids stay unique


def _index(plan: Plan) -> _Index:
    """The index of `plan`, built on first use (plans are few: one per reload)."""
    entry = _INDEXES.get(id(plan))
    if entry is not None and entry[0] is plan:
        return entry[1]
    if len(_INDEXES) >= 16:
        _INDEXES.clear()
    index = _build_index(plan)
    _INDEXES[id(plan)] = (plan, index)
    return index


def _build_index(plan: Plan) -> _Index:
    kinds: dict[tuple[str, str], Kind] = {}
    for kind in plan.kinds:
        kinds.setdefault((kind.api_version, kind.kind), kind)
    candidates = {k.name: tuple(i for i in plan.injections if k.name in i.kinds)
                  for k in plan.kinds}
    sidecars = frozenset(op.name for i in plan.injections for op in i.ops if isinstance(op, Sidecar))
    return _Index(kinds, candidates, sidecars)


# ---------------------------------------------------------------------------------------------
# The received pod, read defensively


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _owner_reference(meta: dict) -> dict | None:
    """The controlling owner reference, else the first one (docs/plan.md, Injection)."""
    first = None
    for ref in _list(meta.get("ownerReferences")):
        if isinstance(ref, dict):
            if ref.get("controller") is True:
                return ref
            if first is None:
                first = ref
    return first


def _kind_of(index: _Index, source: dict | None) -> Kind | None:
    """The declared kind an owner reference (or owner object) names by apiVersion + kind."""
    if not isinstance(source, dict):
        return None
    api_version, kind = source.get("apiVersion"), source.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str):
        return index.kinds.get((api_version, kind))
    return None


class _Pod:
    """The received pod with the facts filters and templates need, computed at most once."""

    __slots__ = ("pod", "meta", "labels", "annotations", "spec", "kind", "owner", "namespace",
                 "sidecars", "_data", "_found", "_options", "_task", "_primary", "_selected")

    def __init__(self, pod: dict, meta: dict, kind: Kind, owner: dict | None,
                 namespace: str | None, sidecars: frozenset[str]) -> None:
        self.pod, self.meta, self.kind, self.owner = pod, meta, kind, owner
        self.labels = _dict(meta.get("labels"))
        self.annotations = _dict(meta.get("annotations"))
        self.spec = _dict(pod.get("spec"))
        self.namespace = namespace
        self.sidecars = sidecars
        self._data: dict | None = None
        self._found: dict[str, Any] = {}   # JMESPath source -> its value over _data
        self._options: jmespath.Options | None = None
        self._task: Any = _UNSET
        self._primary: Any = _UNSET
        self._selected: dict[tuple[str, tuple[str, ...]], list[tuple[str, int, dict, str]]] = {}

    def search(self, expr: Expr, injection: Injection, data: Any = None) -> Any:
        """Evaluate `expr` over `data` (default: {pod, owner, namespace}); failures cite it.

        Over the default data the value is kept: templates often name the same expression
        (`<<owner.metadata.name>>`) several times, and it cannot change within one pod.
        """
        if data is None:
            found = self._found.get(expr.source, _UNSET)
            if found is _UNSET:
                data = self._data
                if data is None:
                    data = self._data = {"pod": self.pod, "owner": self.owner,
                                         "namespace": self.namespace}
                found = self._found[expr.source] = self._search(expr, injection, data)
            return found
        return self._search(expr, injection, data)

    def _search(self, expr: Expr, injection: Injection, data: Any) -> Any:
        if isinstance(expr.compiled, FieldPath):
            return expr.compiled.search(data)   # needs no functions, so no clock
        if self._options is None:
            self._options = functions.options(datetime.now(timezone.utc))
        try:
            return expr.compiled.search(data, self._options)
        except (jmespath.exceptions.JMESPathError, TypeError, ValueError) as err:
            # the library raises plain TypeError/ValueError on some odd data; any pod may be odd
            raise MutationError(injection.name, expr.span,
                                f"JMESPath {expr.source!r} failed: {err}") from None

    def task(self, injection: Injection) -> str | None:
        """The pod's task from the kind's task label or expression (over the pod)."""
        if self._task is _UNSET:
            task = None
            if self.kind.task_label is not None:
                task = self.labels.get(self.kind.task_label)
            elif self.kind.task_expr is not None:
                task = self.search(self.kind.task_expr, injection, self.pod)
            self._task = task if isinstance(task, str) else None
        return self._task

    def primary(self, injection: Injection) -> bool:
        """Whether the kind's `primary pods` filter holds; every pod is primary without one."""
        if self._primary is _UNSET:
            rule = self.kind.primary_pods
            self._primary = rule is None or _pod_filter(rule, self, injection)
        return self._primary

    def select(self, which: Containers) -> list[tuple[str, int, dict, str]]:
        """The pod's own containers an op targets, as (field, index, container, name); sidecars
        declared in the plan never are."""
        key = (which.select, which.names)   # equal selections of different ops are one
        selected = self._selected.get(key)
        if selected is None:
            selected = self._selected[key] = self._select(which)
        return selected

    def _select(self, which: Containers) -> list[tuple[str, int, dict, str]]:
        names: tuple[str, ...] | None   # a few names: a tuple is as quick to ask as a set
        if which.select == "named":
            names, fields = which.names, _LISTS
        elif which.select == "primary" and self.kind.primary_containers is not None:
            names, fields = self.kind.primary_containers, ("containers",)
        else:
            names, fields = None, ("containers",)
        found = []
        for field in fields:
            items = self.spec.get(field)
            if not isinstance(items, list):
                continue
            for i, container in enumerate(items):
                if isinstance(container, dict):
                    name = container.get("name")
                    if isinstance(name, str) and (names is None or name in names) \
                            and name not in self.sidecars:
                        found.append((field, i, container, name))
        return found


# ---------------------------------------------------------------------------------------------
# Matching


def _matches(node: Any, pod: _Pod, injection: Injection) -> bool:
    match node:
        case And(args):
            return all(_matches(a, pod, injection) for a in args)
        case Or(args):
            return any(_matches(a, pod, injection) for a in args)
        case Not(arg):
            return not _matches(arg, pod, injection)
        case LabelIs(key, values, negate, annotation):
            return _has(pod.annotations if annotation else pod.labels, key, values) != negate
        case NamespaceIs(values, negate):
            return (pod.namespace in values) != negate
        case TaskIs(values, negate):
            return (pod.task(injection) in values) != negate
        case IsPrimary():
            return pod.primary(injection)
        case JmesPath(expr):
            return _truthy(pod.search(expr, injection))
    raise MutationError(injection.name, injection.span, f"unknown filter {type(node).__name__}")


def _pod_filter(node: Any, pod: _Pod, injection: Injection) -> bool:
    """The admission-time subset of a pod filter: labels, task, JMESPath over the pod.

    Status terms (exit codes, reasons, conditions, restarts) describe a pod that has run; a pod
    being created has none, so they are false here (and `not` of them true).
    """
    match node:
        case And(args):
            return all(_pod_filter(a, pod, injection) for a in args)
        case Or(args):
            return any(_pod_filter(a, pod, injection) for a in args)
        case Not(arg):
            return not _pod_filter(arg, pod, injection)
        case LabelIs(key, values, negate, _):
            return _has(pod.labels, key, values) != negate
        case TaskIs(values, negate):
            return (pod.task(injection) in values) != negate
        case JmesPath(expr):
            return _truthy(pod.search(expr, injection, pod.pod))
    return False


def _has(mapping: dict, key: str, values: frozenset[str] | None) -> bool:
    if values is None:
        return key in mapping
    value = mapping.get(key)
    return isinstance(value, str) and value in values


def _truthy(value: Any) -> bool:
    """JMESPath truthiness: false, null, and empty strings, lists and objects are false."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict)):
        return len(value) > 0
    return True


# ---------------------------------------------------------------------------------------------
# Templates


def _render(template: Template, pod: _Pod, injection: Injection, span: Span,
            container: str | None = None, argv: str | None = None) -> str:
    """A template as text; `container` and `argv` are the placeholders an op's context gives."""
    if len(template) == 1:
        part = template[0]
        if isinstance(part, str):
            return part
        if isinstance(part, Var):
            return _var(part.name, pod, injection, span, container, argv)
        return templates.text(pod.search(part, injection))
    out: list[str] = []
    for part in template:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Var):
            out.append(_var(part.name, pod, injection, span, container, argv))
        else:
            out.append(templates.text(pod.search(part, injection)))
    return "".join(out)


def _var(name: str, pod: _Pod, injection: Injection, span: Span, container: str | None,
         argv: str | None) -> str:
    if name == "job":
        meta = _dict(pod.owner.get("metadata")) if pod.owner else {}
        return templates.text(meta.get("name"))
    if name == "namespace":
        return pod.namespace or ""
    if name == "kind":  # the owner's Kubernetes kind, as the evaluator renders it
        return pod.kind.kind
    if name == "task":
        return pod.task(injection) or ""
    if name == "pod":
        name_ = pod.meta.get("name") or pod.meta.get("generateName")
        return name_ if isinstance(name_, str) else ""
    if name == "container" and container is not None:
        return container
    if name == "argv" and argv is not None:
        return argv
    where = {"argv": "outside `wrap ... shell`", "container": "outside a container op"}.get(
        name, "at admission")
    raise MutationError(injection.name, span, f"placeholder {{{name}}} has no value {where}")


# ---------------------------------------------------------------------------------------------
# Drafting: what the matched injections want, checked field by field against the received pod


class _Edit:
    """Changes to one container of the received pod, addressed by its index there."""

    __slots__ = ("field", "index", "name", "container", "env", "env_names", "mounts",
                 "mount_paths", "command", "args", "wrapped")

    def __init__(self, field: str, index: int, name: str, container: dict) -> None:
        self.field, self.index, self.name, self.container = field, index, name, container
        self.env: list[dict] = []
        self.env_names: set[str] = set()     # added here; the pod's own are scanned (_listed)
        self.mounts: list[dict] = []
        self.mount_paths: set[str] = set()
        self.command: Any = container.get("command")
        self.args: Any = container.get("args")
        self.wrapped = False


class _Draft:
    """Gathers the changes of every matched injection, then emits them as patch ops.

    Per request, so it does the least it can: the pod's volume and container names are
    collected once, when first asked about; a container's env and mounts are scanned in C."""

    __slots__ = ("pod", "annotations", "labels", "volumes", "volume_names", "edits", "sidecars",
                 "container_names", "recorded", "credit", "writable")

    def __init__(self, pod: _Pod) -> None:
        self.pod = pod
        self.annotations: dict[str, tuple[str, str]] = {}   # key -> (value, injection)
        self.labels: dict[str, tuple[str, str]] = {}
        self.volumes: list[dict] = []
        self.volume_names: set[Any] | None = None
        self.edits: dict[tuple[str, int], _Edit] = {}
        self.sidecars: list[tuple[str, dict]] = []   # (containers or initContainers, container)
        self.container_names: set[Any] | None = None
        self.recorded = _recorded(pod.annotations)
        self.credit: set[str] = set()   # injections that changed the pod (metadata: see finish)
        self.writable: set[str] = set()   # fields _writable has passed

    # -- ops ------------------------------------------------------------------------------------

    def inject(self, injection: Injection) -> None:
        for op in injection.ops:
            _STEPS[type(op)](self, op, injection)
        if injection.completion_containers is not None:
            self._writable("metadata", "annotations", dict, injection, injection.span)
            self.annotations[COMPLETION_ANNOTATION] = (",".join(injection.completion_containers),
                                                       injection.name)

    def _annotate(self, op: Annotate, injection: Injection) -> None:
        text = _render(op.value, self.pod, injection, op.span)
        self._writable("metadata", "annotations", dict, injection, op.span)
        self.annotations[op.key] = (text, injection.name)

    def _label(self, op: Label, injection: Injection) -> None:
        text = _render(op.value, self.pod, injection, op.span)
        if not _LABEL_VALUE.fullmatch(text):
            raise MutationError(injection.name, op.span,
                                f"label {op.key!r}: {text!r} is not a valid label value")
        self._writable("metadata", "labels", dict, injection, op.span)
        self.labels[op.key] = (text, injection.name)

    def _env(self, op: Env, injection: Injection) -> None:
        for field, i, container, name in self.pod.select(op.containers):
            edit = self._edit(field, i, container, name)
            taken = edit.env_names
            if op.name in taken or _listed(container.get("env"), "name", op.name):
                continue  # the pod's own variable wins (docs/injection.md)
            if not edit.env:
                _container_list(edit, "env", injection, op.span)
            edit.env.append({"name": op.name,
                             "value": _render(op.value, self.pod, injection, op.span, name)})
            taken.add(op.name)
            self.credit.add(injection.name)

    def _volume(self, op: Volume, injection: Injection) -> None:
        taken = self._volume_names()
        if op.name in taken:
            return  # a volume of that name already exists: the pod's wins
        self._writable("spec", "volumes", list, injection, op.span)
        volume = {"name": op.name}
        volume.update({k: dict(v) if isinstance(v, dict) else v for k, v in op.source.items()})
        self.volumes.append(volume)
        taken.add(op.name)
        self.credit.add(injection.name)

    def _mount(self, op: Mount, injection: Injection) -> None:
        self._known_volume(op.volume, injection, op.span)
        for field, i, container, name in self.pod.select(op.containers):
            edit = self._edit(field, i, container, name)
            taken = edit.mount_paths
            if op.path in taken or _listed(container.get("volumeMounts"), "mountPath", op.path):
                continue  # something is mounted there already
            if not edit.mounts:
                _container_list(edit, "volumeMounts", injection, op.span)
            edit.mounts.append(_mount(op.volume, op.path, op.read_only))
            taken.add(op.path)
            self.credit.add(injection.name)

    def _sidecar(self, op: Sidecar, injection: Injection) -> None:
        taken = self._container_names()
        if op.name in taken:
            return  # already there (injected before, or the pod brings its own)
        field = "initContainers" if op.native else "containers"
        self._writable("spec", field, list, injection, op.span)
        pod, span, name = self.pod, op.span, op.name
        image = _render(op.image, pod, injection, span, name)
        if not image:
            raise MutationError(injection.name, span, f"sidecar {name!r}: image is empty")
        container: dict[str, Any] = {"name": name, "image": image}
        if op.command is not None:
            container["command"] = [_render(t, pod, injection, span, name) for t in op.command]
        if op.args is not None:
            container["args"] = [_render(t, pod, injection, span, name) for t in op.args]
        env = [{"name": key, "value": _render(value, pod, injection, span, name)}
               for key, value in op.env]
        if injection.completion_containers is not None \
                and all(key != COMPLETION_ENV for key, _ in op.env):
            env.append({"name": COMPLETION_ENV, "value": ",".join(injection.completion_containers)})
        if env:
            container["env"] = env
        if op.mounts:
            for m in op.mounts:
                self._known_volume(m.volume, injection, span)
            container["volumeMounts"] = [_mount(m.volume, m.path, m.read_only) for m in op.mounts]
        if op.native:
            container["restartPolicy"] = "Always"
        self.sidecars.append((field, container))
        taken.add(name)
        self.credit.add(injection.name)

    def _wrap(self, op: Wrap, injection: Injection) -> None:
        if injection.name in self.recorded:
            return   # wrapped when first admitted: wrapping again would nest the wrapper
        if (op.argv is None) == (op.shell is None):
            raise MutationError(injection.name, op.span, "wrap needs exactly one of argv or shell")
        for field, i, container, name in self.pod.select(op.containers):
            edit = self._edit(field, i, container, name)
            if not edit.command:
                raise MutationError(
                    injection.name, op.span,
                    f"container {name!r} has no command: its entrypoint is in the image, which "
                    f"the webhook does not read; spell the command out in the pod template")
            if not _strings(edit.command) or not (edit.args is None or _strings(edit.args)):
                raise MutationError(injection.name, op.span,
                                    f"container {name!r}: command and args must be string lists")
            original = list(edit.command) + list(edit.args or [])
            if op.argv is not None:
                edit.command = [_render(t, self.pod, injection, op.span, name)
                                for t in op.argv] + original
            else:
                assert op.shell is not None
                edit.command = ["/bin/sh", "-c", _render(op.shell, self.pod, injection, op.span,
                                                         name, shlex.join(original))]
            edit.args = None
            edit.wrapped = True
            self.credit.add(injection.name)

    # -- checks and helpers ---------------------------------------------------------------------

    def _edit(self, field: str, index: int, container: dict, name: str) -> _Edit:
        edit = self.edits.get((field, index))
        if edit is None:
            edit = self.edits[(field, index)] = _Edit(field, index, name, container)
        return edit

    def _container_names(self) -> set[Any]:
        if self.container_names is None:
            spec = self.pod.spec
            self.container_names = _taken(spec.get("containers"), "name")
            self.container_names.update(_taken(spec.get("initContainers"), "name"))
        return self.container_names

    def _volume_names(self) -> set[Any]:
        if self.volume_names is None:
            self.volume_names = _taken(self.pod.spec.get("volumes"), "name")
        return self.volume_names

    def _writable(self, top: str, field: str, leaf: type, injection: Injection, span: Span) -> None:
        """Raise unless pod.<top> is absent, null or an object, and pod.<top>.<field> absent,
        null or a `leaf`. (No field name is used under both top levels: it keys the cache.)"""
        if field in self.writable:
            return
        parent = self.pod.pod.get(top)
        if parent is not None:
            if not isinstance(parent, dict):
                raise MutationError(injection.name, span, f"pod field {top} is a "
                                    f"{type(parent).__name__}, not {_JSON_TYPE[dict]}")
            node = parent.get(field)
            if node is not None and not isinstance(node, leaf):
                raise MutationError(injection.name, span, f"pod field {top}.{field} is a "
                                    f"{type(node).__name__}, not {_JSON_TYPE[leaf]}")
        self.writable.add(field)

    def _known_volume(self, volume: str, injection: Injection, span: Span) -> None:
        if volume not in self._volume_names():
            raise MutationError(injection.name, span,
                                f"mount of volume {volume!r}, which neither the pod nor an "
                                f"earlier `volume` op declares")

    # -- emitting -------------------------------------------------------------------------------

    def finish(self, matched: list[Injection], digest: str) -> tuple[list[dict], tuple[str, ...]]:
        """The patch ops, and the injections that contributed one, in plan order."""
        credit = self.credit
        annotations = _changed(self.annotations, self.pod.annotations, credit)
        labels = _changed(self.labels, self.pod.labels, credit)
        applied = tuple([i.name for i in matched if i.name in credit])
        new = [i for i in matched if i.name in credit and i.name not in self.recorded]
        if new:
            self._writable("metadata", "annotations", dict, new[0], new[0].span)
            entries = [*self.recorded.values(), *[f"{i.name}@{digest}" for i in new]]
            annotations[RECORD_ANNOTATION] = orjson.dumps(entries).decode()
        ops: list[dict] = []
        pod = self.pod.pod
        if annotations or labels:
            meta = pod.get("metadata")   # an object, or absent or null (see _writable)
            if meta is None:
                ops.append(jp.add("/metadata", {}))
                meta = {}
            _emit_map(ops, "/metadata/annotations", annotations, meta.get("annotations"))
            _emit_map(ops, "/metadata/labels", labels, meta.get("labels"))
        spec = pod.get("spec")   # an object, or absent or null (see _writable)
        if spec is None and (self.volumes or self.sidecars):
            ops.append(jp.add("/spec", {}))
            spec = {}
        if self.volumes:
            _emit_list(ops, "/spec/volumes", self.volumes, spec.get("volumes"))
        edits = self.edits
        keys = sorted(edits, key=_edit_order) if len(edits) > 1 else edits
        for key in keys:
            edit = edits[key]
            if edit.env or edit.mounts or edit.wrapped:
                _emit_edit(ops, edit)
        if self.sidecars:
            for field in _LISTS:
                _emit_list(ops, _SPEC[field], [c for f, c in self.sidecars if f == field],
                           spec.get(field))
        return ops, applied


def _changed(wanted: dict[str, tuple[str, str]], current: dict, credit: set[str]) -> dict[str, str]:
    """The wanted metadata entries the pod does not have yet; credit goes to whoever set them.
    (An entry the pod already has gives no op and no credit.)"""
    items = {}
    for key, (value, owner) in wanted.items():
        if current.get(key) != value:
            items[key] = value
            credit.add(owner)
    return items


def _edit_order(key: tuple[str, int]) -> tuple[int, int]:
    return _LISTS.index(key[0]), key[1]


def _emit_map(ops: list[dict], where: str, items: dict[str, str], current: Any) -> None:
    """Ops setting `items` in the object at `where` (`current`: that object, None if absent)."""
    if not items:
        return
    if current is None:
        ops.append(jp.add(where, items))
        return
    for key, value in items.items():
        ops.append((jp.replace if key in current else jp.add)(_member(where, key), value))


def _emit_list(ops: list[dict], where: str, items: list, current: Any) -> None:
    """Ops appending `items` to the array at `where` (`current`: that array, None if absent)."""
    if not items:
        return
    if current is None:
        ops.append(jp.add(where, items))
        return
    end = _member(where, "-")
    for item in items:
        ops.append(jp.add(end, item))


def _emit_edit(ops: list[dict], edit: _Edit) -> None:
    base = _member(_SPEC[edit.field], str(edit.index))
    ops.append(jp.test(_member(base, "name"), edit.name))
    container = edit.container
    if edit.env:
        _emit_list(ops, _member(base, "env"), edit.env, container.get("env"))
    if edit.mounts:
        _emit_list(ops, _member(base, "volumeMounts"), edit.mounts, container.get("volumeMounts"))
    if edit.wrapped:
        ops.append(jp.replace(_member(base, "command"), edit.command))
        if "args" in container:
            ops.append(jp.remove(_member(base, "args")))


@functools.lru_cache(maxsize=4096)
def _member(where: str, key: str) -> str:
    """The pointer to `key` in the object or array at `where`: the same few, pod after pod."""
    return f"{where}/{jp.escape(key)}"


def _container_list(edit: _Edit, key: str, injection: Injection, span: Span) -> None:
    value = edit.container.get(key)
    if value is not None and not isinstance(value, list):
        raise MutationError(injection.name, span,
                            f"container {edit.name!r}: {key} is a {type(value).__name__}, "
                            f"not an array")


_JSON_TYPE = {dict: "an object", list: "an array"}

# What each op of an injection does to the draft (the plan's op types are a closed set).
_STEPS = {Annotate: _Draft._annotate, Label: _Draft._label, Env: _Draft._env,
          Volume: _Draft._volume, Mount: _Draft._mount, Sidecar: _Draft._sidecar,
          Wrap: _Draft._wrap}


def _mount(volume: str, path: str, read_only: bool) -> dict:
    mount: dict[str, Any] = {"name": volume, "mountPath": path}
    if read_only:
        mount["readOnly"] = True
    return mount


def _listed(items: Any, key: str, value: str) -> bool:
    """Whether an object in `items` (a list of the pod) has `value` at `key`. Scanned rather
    than collected into a set: a container's env can be long, and is asked about once or twice."""
    if not isinstance(items, list):
        return False
    try:
        return value in map(dict.get, items, itertools.repeat(key))   # the loop runs in C
    except TypeError:   # an item that is not an object: look at the objects only
        return any(isinstance(i, dict) and i.get(key) == value for i in items)


def _taken(items: Any, key: str) -> set[Any]:
    """The values at `key` of the objects in `items` (a list of the pod), as a set the draft
    adds to. Made in C when every item is an object with a hashable value there."""
    if not isinstance(items, list):
        return set()
    try:
        return set(map(dict.get, items, itertools.repeat(key)))
    except TypeError:   # an item that is not an object, or a value that is not hashable
        return {v for i in items if isinstance(i, dict) and isinstance(v := i.get(key), str)}


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _recorded(annotations: dict) -> dict[str, str]:
    """Injection name -> record entry ("name@plan-digest") from the record annotation."""
    raw = annotations.get(RECORD_ANNOTATION)
    if raw is None:
        return {}
    try:
        entries = orjson.loads(raw) if isinstance(raw, str) else []
    except orjson.JSONDecodeError:
        entries = []
    if not isinstance(entries, list):
        return {}
    return {e.rsplit("@", 1)[0]: e for e in entries if isinstance(e, str)}
