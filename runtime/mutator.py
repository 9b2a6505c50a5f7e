"""Pod injection at admission: the plan's injections that apply to a pod, as one RFC 6902 patch.

Pure: no I/O and no API call (the clock is read only if an expression calls `now()` or `age()`,
since admission has no other notion of time). The owner comes from the pod's own ownerReferences, and the patch is
computed against exactly the pod received, because that is the object the API server applies it
to: containers are addressed by their index in that pod (guarded by a `test` of their name), and
everything new is appended with `/-`. Every decision (conflicts, idempotence, malformed pods) is
written down in docs/injection.md.
"""

from __future__ import annotations

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
    applied = draft.finish(matched, plan.digest[:12])
    return Mutation(tuple(draft.ops), applied, kind_name)


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
    refs = [r for r in _list(meta.get("ownerReferences")) if isinstance(r, dict)]
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return refs[0] if refs else None


def _kind_of(index: _Index, source: dict | None) -> Kind | None:
    """The declared kind an owner reference (or owner object) names by apiVersion + kind."""
    api_version, kind = _dict(source).get("apiVersion"), _dict(source).get("kind")
    if isinstance(api_version, str) and isinstance(kind, str):
        return index.kinds.get((api_version, kind))
    return None


class _Pod:
    """The received pod with the facts filters and templates need, computed at most once."""

    __slots__ = ("pod", "meta", "labels", "annotations", "spec", "kind", "owner", "namespace",
                 "sidecars", "_data", "_found", "_options", "_task", "_primary", "_selected",
                 "_containers")

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
        self._selected: dict[int, list[tuple[str, int, dict, str]]] = {}   # by id(Containers)
        self._containers: dict[str, list[tuple[int, dict, str]]] = {}

    def search(self, expr: Expr, injection: Injection, data: Any = None) -> Any:
        """Evaluate `expr` over `data` (default: {pod, owner, namespace}); failures cite it.

        Over the default data the value is kept: templates often name the same expression
        (`<<owner.metadata.name>>`) several times, and it cannot change within one pod.
        """
        if data is None:
            found = self._found.get(expr.source, _UNSET)
            if found is _UNSET:
                found = self._found[expr.source] = self._search(expr, injection, self._default_data())
            return found
        return self._search(expr, injection, data)

    def _default_data(self) -> dict:
        if self._data is None:
            self._data = {"pod": self.pod, "owner": self.owner, "namespace": self.namespace}
        return self._data

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

    def containers(self, field: str) -> list[tuple[int, dict, str]]:
        """(index, container, name) of the well-formed containers of spec.<field>."""
        found = self._containers.get(field)
        if found is None:
            found = self._containers[field] = [
                (i, c, c["name"]) for i, c in enumerate(_list(self.spec.get(field)))
                if isinstance(c, dict) and isinstance(c.get("name"), str)]
        return found

    def select(self, which: Containers) -> list[tuple[str, int, dict, str]]:
        """The pod's own containers an op targets; sidecars declared in the plan never are."""
        selected = self._selected.get(id(which))   # the plan's own objects: ids are stable
        if selected is None:
            selected = self._selected[id(which)] = self._select(which)
        return selected

    def _select(self, which: Containers) -> list[tuple[str, int, dict, str]]:
        if which.select == "named":
            names, fields = set(which.names), _LISTS
        elif which.select == "primary" and self.kind.primary_containers is not None:
            names, fields = set(self.kind.primary_containers), ("containers",)
        else:
            names, fields = None, ("containers",)
        return [(field, i, c, name) for field in fields for i, c, name in self.containers(field)
                if (names is None or name in names) and name not in self.sidecars]


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
    if len(template) == 1 and isinstance(template[0], str):
        return template[0]
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
                 "mount_paths", "command", "args", "wrapped", "changed")

    def __init__(self, field: str, index: int, name: str, container: dict) -> None:
        self.field, self.index, self.name, self.container = field, index, name, container
        self.env: list[dict] = []
        self.env_names = _Names("name", container.get("env"))
        self.mounts: list[dict] = []
        self.mount_paths = _Names("mountPath", container.get("volumeMounts"))
        self.command: Any = container.get("command")
        self.args: Any = container.get("args")
        self.wrapped = False
        self.changed = False


class _Draft:
    """Gathers the changes of every matched injection, then emits them as patch ops."""

    def __init__(self, pod: _Pod) -> None:
        self.pod = pod
        self.meta: dict[str, dict[str, tuple[str, str]]] = {"annotations": {}, "labels": {}}
        self.volumes: list[dict] = []
        self.volume_names = _Names("name", pod.spec.get("volumes"))
        self.edits: dict[tuple[str, int], _Edit] = {}
        self.sidecars: dict[str, list[dict]] = {"containers": [], "initContainers": []}
        self.container_names = _Names("name", pod.spec.get("containers"),
                                      pod.spec.get("initContainers"))
        self.recorded = _recorded(pod.annotations)
        self.credit: set[str] = set()   # injections that changed the pod (metadata: see finish)
        self.ops: list[dict] = []
        self.writable: set[tuple[str, ...]] = set()   # paths _writable has passed
        self.created: set[str] = set()   # top-level objects (/metadata, /spec) an op adds

    # -- ops ------------------------------------------------------------------------------------

    def inject(self, injection: Injection) -> None:
        for op in injection.ops:
            _STEPS[type(op)](self, op, injection)
        if injection.completion_containers is not None:
            self._meta("annotations", COMPLETION_ANNOTATION,
                       ",".join(injection.completion_containers), injection, injection.span)

    def _annotate(self, op: Annotate, injection: Injection) -> None:
        self._meta("annotations", op.key, _render(op.value, self.pod, injection, op.span),
                   injection, op.span)

    def _label(self, op: Label, injection: Injection) -> None:
        text = _render(op.value, self.pod, injection, op.span)
        if not _LABEL_VALUE.fullmatch(text):
            raise MutationError(injection.name, op.span,
                                f"label {op.key!r}: {text!r} is not a valid label value")
        self._meta("labels", op.key, text, injection, op.span)

    def _meta(self, field: str, key: str, value: str, injection: Injection, span: Span) -> None:
        self._writable(("metadata", field), dict, injection, span)
        self.meta[field][key] = (value, injection.name)

    def _env(self, op: Env, injection: Injection) -> None:
        for field, i, container, name in self.pod.select(op.containers):
            edit = self._edit(field, i, container, name)
            if op.name in edit.env_names:
                continue  # the pod's own variable wins (docs/injection.md)
            self._container_list(edit, "env", injection, op.span)
            edit.env.append({"name": op.name, "value": _render(op.value, self.pod, injection,
                                                                op.span, container=name)})
            edit.env_names.add(op.name)
            edit.changed = True
            self.credit.add(injection.name)

    def _volume(self, op: Volume, injection: Injection) -> None:
        if op.name in self.volume_names:
            return  # a volume of that name already exists: the pod's wins
        self._writable(("spec", "volumes"), list, injection, op.span)
        volume = {"name": op.name}
        volume.update({k: dict(v) if isinstance(v, dict) else v for k, v in op.source.items()})
        self.volumes.append(volume)
        self.volume_names.add(op.name)
        self.credit.add(injection.name)

    def _mount(self, op: Mount, injection: Injection) -> None:
        self._known_volume(op.volume, injection, op.span)
        for field, i, container, name in self.pod.select(op.containers):
            edit = self._edit(field, i, container, name)
            if op.path in edit.mount_paths:
                continue  # something is mounted there already
            self._container_list(edit, "volumeMounts", injection, op.span)
            edit.mounts.append(_mount(op.volume, op.path, op.read_only))
            edit.mount_paths.add(op.path)
            edit.changed = True
            self.credit.add(injection.name)

    def _sidecar(self, op: Sidecar, injection: Injection) -> None:
        if op.name in self.container_names:
            return  # already there (injected before, or the pod brings its own)
        field = "initContainers" if op.native else "containers"
        self._writable(("spec", field), list, injection, op.span)
        image = _render(op.image, self.pod, injection, op.span, container=op.name)
        if not image:
            raise MutationError(injection.name, op.span, f"sidecar {op.name!r}: image is empty")
        container: dict[str, Any] = {"name": op.name, "image": image}
        for key, argv in (("command", op.command), ("args", op.args)):
            if argv is not None:
                container[key] = [_render(t, self.pod, injection, op.span, container=op.name)
                                  for t in argv]
        env = [{"name": name, "value": _render(value, self.pod, injection, op.span,
                                               container=op.name)} for name, value in op.env]
        if injection.completion_containers is not None \
                and COMPLETION_ENV not in [e["name"] for e in env]:
            env.append({"name": COMPLETION_ENV, "value": ",".join(injection.completion_containers)})
        if env:
            container["env"] = env
        for m in op.mounts:
            self._known_volume(m.volume, injection, op.span)
        if op.mounts:
            container["volumeMounts"] = [_mount(m.volume, m.path, m.read_only) for m in op.mounts]
        if op.native:
            container["restartPolicy"] = "Always"
        self.sidecars[field].append(container)
        self.container_names.add(op.name)
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
                edit.command = [_render(t, self.pod, injection, op.span, container=name)
                                for t in op.argv] + original
            else:
                assert op.shell is not None
                edit.command = ["/bin/sh", "-c", _render(op.shell, self.pod, injection, op.span,
                                                         container=name, argv=shlex.join(original))]
            edit.args = None
            edit.wrapped = True
            edit.changed = True
            self.credit.add(injection.name)

    # -- checks and helpers ---------------------------------------------------------------------

    def _edit(self, field: str, index: int, container: dict, name: str) -> _Edit:
        edit = self.edits.get((field, index))
        if edit is None:
            edit = self.edits[(field, index)] = _Edit(field, index, name, container)
        return edit

    def _writable(self, path: tuple[str, ...], leaf: type, injection: Injection, span: Span) -> None:
        """Raise unless each level of `path` in the pod is absent/null or of the right type."""
        if path in self.writable:
            return
        node: Any = self.pod.pod
        for depth, key in enumerate(path):
            node = node.get(key)
            want = leaf if depth == len(path) - 1 else dict
            if node is None:
                break
            if not isinstance(node, want):
                raise MutationError(injection.name, span,
                                    f"pod field {'.'.join(path[:depth + 1])} is a "
                                    f"{type(node).__name__}, not {_JSON_TYPE[want]}")
        self.writable.add(path)

    def _container_list(self, edit: _Edit, key: str, injection: Injection, span: Span) -> None:
        value = edit.container.get(key)
        if value is not None and not isinstance(value, list):
            raise MutationError(injection.name, span,
                                f"container {edit.name!r}: {key} is a {type(value).__name__}, "
                                f"not an array")

    def _known_volume(self, volume: str, injection: Injection, span: Span) -> None:
        if volume not in self.volume_names:
            raise MutationError(injection.name, span,
                                f"mount of volume {volume!r}, which neither the pod nor an "
                                f"earlier `volume` op declares")

    # -- emitting -------------------------------------------------------------------------------

    def finish(self, matched: list[Injection], digest: str) -> tuple[str, ...]:
        """Emit the ops into self.ops; return the injections that contributed one, in plan order."""
        credit = self.credit
        meta: dict[str, dict[str, str]] = {}
        for field, current in (("annotations", self.pod.annotations), ("labels", self.pod.labels)):
            meta[field] = items = {}
            for key, (value, owner) in self.meta[field].items():
                if current.get(key) != value:   # else already so: no op, no credit
                    items[key] = value
                    credit.add(owner)
        applied = tuple([i.name for i in matched if i.name in credit])
        new = [i for i in matched if i.name in credit and i.name not in self.recorded]
        if new:
            self._writable(("metadata", "annotations"), dict, new[0], new[0].span)
            entries = [*self.recorded.values(), *[f"{i.name}@{digest}" for i in new]]
            meta["annotations"][RECORD_ANNOTATION] = orjson.dumps(entries).decode()
        self._emit_map("metadata", "annotations", meta["annotations"])
        self._emit_map("metadata", "labels", meta["labels"])
        self._emit_list("spec", "volumes", self.volumes)
        keys = sorted(self.edits, key=lambda k: (_LISTS.index(k[0]), k[1])) \
            if len(self.edits) > 1 else self.edits
        for key in keys:
            if self.edits[key].changed:
                self._emit_edit(self.edits[key])
        for field in _LISTS:
            self._emit_list("spec", field, self.sidecars[field])
        return applied

    def _current(self, top: str, field: str) -> Any:
        """pod[top][field] as received, first adding an empty object at /top if there is none.
        (_writable has checked that each level is absent, null or of the right type.)"""
        parent = self.pod.pod.get(top)
        if parent is None:
            if top not in self.created:
                self.ops.append(jp.add(f"/{top}", {}))
                self.created.add(top)
            return None
        return parent.get(field)

    def _emit_map(self, top: str, field: str, items: dict[str, str]) -> None:
        if not items:
            return
        current = self._current(top, field)
        where = f"/{top}/{field}"
        if current is None:
            self.ops.append(jp.add(where, items))
            return
        self.ops.extend([(jp.replace if key in current else jp.add)(f"{where}/{jp.escape(key)}", value)
                         for key, value in items.items()])

    def _emit_list(self, top: str, field: str, items: list) -> None:
        if not items:
            return
        where = f"/{top}/{field}"
        if self._current(top, field) is None:
            self.ops.append(jp.add(where, items))
            return
        self.ops.extend([jp.add(f"{where}/-", item) for item in items])

    def _emit_edit(self, edit: _Edit) -> None:
        base = f"/spec/{edit.field}/{edit.index}"
        self.ops.append(jp.test(f"{base}/name", edit.name))
        for key, items in (("env", edit.env), ("volumeMounts", edit.mounts)):
            if not items:
                continue
            if edit.container.get(key) is None:
                self.ops.append(jp.add(f"{base}/{key}", items))
            else:
                self.ops.extend([jp.add(f"{base}/{key}/-", item) for item in items])
        if edit.wrapped:
            self.ops.append(jp.replace(f"{base}/command", edit.command))
            if "args" in edit.container:
                self.ops.append(jp.remove(f"{base}/args"))


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


class _Names:
    """The names taken in lists of the pod (the `key` of their objects) or added by the draft.

    The pod's lists are scanned when asked about a name rather than turned into a set: a
    container's env can be long, and is asked about once or twice.
    """

    __slots__ = ("key", "lists", "added")

    def __init__(self, key: str, *lists: Any) -> None:
        self.key = key
        self.lists = lists
        self.added: set[str] = set()

    def __contains__(self, name: str) -> bool:
        if name in self.added:
            return True
        for items in self.lists:
            if isinstance(items, list) and _listed(items, self.key, name):
                return True
        return False

    def add(self, name: str) -> None:
        self.added.add(name)


def _listed(items: list, key: str, value: str) -> bool:
    """Whether an object of `items` has `value` (a string) at `key`."""
    try:
        return value in map(dict.get, items, itertools.repeat(key))   # the loop runs in C
    except TypeError:   # an item that is not an object: look at the objects only
        return any(isinstance(i, dict) and i.get(key) == value for i in items)


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
