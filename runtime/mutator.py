"""Pod injection at admission: the plan's injections that apply to a pod, as one RFC 6902 patch.

Pure: no I/O and no API call (the clock is read only if an expression calls `now()` or `age()`,
since admission has no other notion of time). The owner comes from the pod's own ownerReferences, and the patch is
computed against exactly the pod received, because that is the object the API server applies it
to: containers are addressed by their index in that pod (guarded by a `test` of their name), and
everything new is appended with `/-`. Every decision (conflicts, idempotence, malformed pods) is
written down in docs/injection.md.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, TypedDict, Union

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


# ---------------------------------------------------------------------------------------------
# What this module reads of a pod: these fields, and whatever the plan's expressions read


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


class PodView(TypedDict, total=False):
    """The fields of a pod `mutate` reads, typed as a well-formed pod has them, for a decoder
    that skips the rest. A decoder falls back to the whole pod when one does not fit, so that
    `mutate` answers the same either way, for a plan whose expressions do not read the pod
    (`reads_pod`). Keep it in step with what this module reads."""

    metadata: _Metadata | None
    spec: _Spec | None


def mutate(injector: Injector, pod: dict, owner: dict | None = None,
           namespace: str | None = None) -> Mutation:
    """The patch that applies every matching injection of the prepared plan to `pod`.

    `owner` is the owner job object when the caller has it (else a stub is built from the owner
    reference); `namespace` is the request's namespace, since pods at CREATE may lack it.
    """
    if not isinstance(pod, dict):
        return Mutation((), (), None)
    meta = _dict(pod.get("metadata"))
    ref = _owner_reference(meta)
    owner = owner if isinstance(owner, dict) else None
    kind = _kind_of(injector, ref if ref is not None else owner)
    if kind is None:
        return Mutation((), (), None)
    if owner is None and ref is not None:
        owner = {"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind"),
                 "metadata": {"name": ref.get("name"), "uid": ref.get("uid")}}
    if namespace is None and isinstance(meta.get("namespace"), str):
        namespace = meta["namespace"]
    view = _Pod(pod, meta, kind, owner, namespace, injector.sidecars)
    kind_name = kind.name
    matched = [p for p in injector.programs[kind_name]
               if p.injection.match is None or _matches(p.injection.match, view, p.injection)]
    if not matched:
        return Mutation((), (), kind_name)
    draft = _Draft(view)
    for program in matched:
        for step in program.steps:
            step(draft)
    ops, applied = draft.finish(matched, injector.plan.digest[:12])
    return Mutation(tuple(ops), applied, kind_name)


# ---------------------------------------------------------------------------------------------
# A plan prepared for admission, once per plan (re)load


@dataclass(frozen=True, slots=True)
class Injector:
    """A plan's injections compiled for admission; built by `prepare` when the plan (re)loads
    and held beside it, so no request pays for it."""

    plan: Plan
    kinds: dict[tuple[str, str], Kind]  # (apiVersion, kind) -> first declared kind
    programs: dict[str, tuple[_Program, ...]]  # kind name -> injections for its pods, prepared
    sidecars: frozenset[str]  # every sidecar name in the plan: never a target of other ops
    reads_pod: bool  # whether an expression `mutate` may evaluate reads the pod beyond PodView


def prepare(plan: Plan) -> Injector:
    kinds: dict[tuple[str, str], Kind] = {}
    for kind in plan.kinds:
        kinds.setdefault((kind.api_version, kind.kind), kind)
    programs = {i.name: _program(i) for i in plan.injections}
    by_kind = {k.name: tuple(programs[i.name] for i in plan.injections if k.name in i.kinds)
               for k in plan.kinds}
    sidecars = frozenset(op.name for i in plan.injections for op in i.ops if isinstance(op, Sidecar))
    return Injector(plan, kinds, by_kind, sidecars, _reads_pod(plan))


def _reads_pod(plan: Plan) -> bool:
    """Expressions over the pod itself (a kind's task expression or `primary pods` filter)
    read it; over {pod, owner, namespace}, all do but field paths not starting at `pod`."""
    used = {name for injection in plan.injections for name in injection.kinds}
    if any(k.task_expr is not None or next(_exprs(k.primary_pods), None) is not None
           for k in plan.kinds if k.name in used):
        return True
    return any(not isinstance(e.compiled, FieldPath) or e.compiled.keys[0] == "pod"
               for i in plan.injections for e in _exprs((i.match, i.ops)))


def _exprs(node: Any) -> Iterator[Expr]:
    """Every expression in a plan node, however nested."""
    if isinstance(node, Expr):
        yield node
    elif isinstance(node, tuple):
        for item in node:
            yield from _exprs(item)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for field in dataclasses.fields(node):
            yield from _exprs(getattr(node, field.name))


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


def _kind_of(injector: Injector, source: dict | None) -> Kind | None:
    """The declared kind an owner reference (or owner object) names by apiVersion + kind."""
    if not isinstance(source, dict):
        return None
    api_version, kind = source.get("apiVersion"), source.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str):
        return injector.kinds.get((api_version, kind))
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

    def select(self, which: tuple[str, tuple[str, ...]]) -> list[tuple[str, int, dict, str]]:
        """The pod's own containers an op targets (`which`: the op's Containers, as
        (select, names)), as (field, index, container, name); sidecars declared in the plan
        never are. Equal selections of different ops are made once."""
        selected = self._selected.get(which)
        if selected is None:
            selected = self._selected[which] = self._select(*which)
        return selected

    def _select(self, select: str, named: tuple[str, ...]) -> list[tuple[str, int, dict, str]]:
        names: tuple[str, ...] | None   # a few names: a tuple is as quick to ask as a set
        if select == "named":
            names, fields = named, _LISTS
        elif select == "primary" and self.kind.primary_containers is not None:
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
                    # a name among `names` is a string; ask the few names first
                    if (name in names if names is not None else isinstance(name, str)) \
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
# Programs: each injection compiled once per plan into steps over a draft

Text = Union[str, Template]   # a template as prepared: a str when it has only literal text
Step = Callable[["_Draft"], None]


@dataclass(frozen=True, slots=True)
class _Program:
    """An injection prepared for admission: its ops as steps, with what does not depend on the
    pod (literal texts, volume and mount objects) made once per plan instead of once per pod."""

    injection: Injection
    steps: tuple[Step, ...]


def _program(injection: Injection) -> _Program:
    steps = [_MAKERS[type(op)](op, injection) for op in injection.ops]
    if injection.completion_containers is not None:
        steps.append(_completion(injection))
    return _Program(injection, tuple(steps))


def _fold(template: Template) -> Text:
    """A template of literal parts only as its text; any other template as it is."""
    if all(isinstance(part, str) for part in template):
        return "".join(template)   # type: ignore[arg-type]
    return template


def _text(text: Text, pod: _Pod, injection: Injection, span: Span,
          container: str | None = None, argv: str | None = None) -> str:
    return text if type(text) is str else _render(text, pod, injection, span, container, argv)


@dataclass(frozen=True, slots=True)
class _Strings:
    """A list of templates prepared: the literal ones in place, the rest rendered per pod."""

    fixed: tuple[str | None, ...]   # None where a template is rendered
    rendered: tuple[tuple[int, Template], ...]

    @classmethod
    def of(cls, templates: tuple[Template, ...]) -> _Strings:
        texts = [_fold(t) for t in templates]
        return cls(tuple(t if type(t) is str else None for t in texts),
                   tuple((i, t) for i, t in enumerate(texts) if type(t) is not str))

    def render(self, pod: _Pod, injection: Injection, span: Span, container: str) -> list[str]:
        out = list(self.fixed)
        for i, template in self.rendered:
            out[i] = _render(template, pod, injection, span, container)
        return out   # type: ignore[return-value]


def _selection(which: Containers) -> tuple[str, tuple[str, ...]]:
    return which.select, which.names


def _annotate(op: Annotate, injection: Injection) -> Step:
    key, value, span, name = op.key, _fold(op.value), op.span, injection.name

    def annotate(draft: _Draft) -> None:
        text = _text(value, draft.pod, injection, span)
        draft.require("annotations", injection, span)
        draft.annotations[key] = (text, name)
    return annotate


def _label(op: Label, injection: Injection) -> Step:
    key, value, span, name = op.key, _fold(op.value), op.span, injection.name
    valid = type(value) is str and _LABEL_VALUE.fullmatch(value) is not None

    def label(draft: _Draft) -> None:
        text = _text(value, draft.pod, injection, span)
        if not valid and not _LABEL_VALUE.fullmatch(text):
            raise MutationError(name, span, f"label {key!r}: {text!r} is not a valid label value")
        draft.require("labels", injection, span)
        draft.labels[key] = (text, name)
    return label


def _completion(injection: Injection) -> Step:
    """`wait for containers`: the annotation the completion wiring reads (the sidecars' env
    variable is added by their own step)."""
    assert injection.completion_containers is not None
    value = (",".join(injection.completion_containers), injection.name)

    def completion(draft: _Draft) -> None:
        draft.require("annotations", injection, injection.span)
        draft.annotations[COMPLETION_ANNOTATION] = value
    return completion


def _env(op: Env, injection: Injection) -> Step:
    var, value, span, name = op.name, _fold(op.value), op.span, injection.name
    which = _selection(op.containers)

    def env(draft: _Draft) -> None:
        pod = draft.pod
        for field, i, container, cname in pod.select(which):
            edit = draft.edit(field, i, container, cname)
            if var in edit.env_names or _listed(container.get("env"), "name", var):
                continue  # the pod's own variable wins (docs/injection.md)
            if not edit.env:
                _container_list(edit, "env", injection, span)
            edit.env.append({"name": var, "value": _text(value, pod, injection, span, cname)})
            edit.env_names.add(var)
            draft.credit.add(name)
    return env


def _volume(op: Volume, injection: Injection) -> Step:
    volume, span, name = op.name, op.span, injection.name
    source = dict(op.source)

    def add_volume(draft: _Draft) -> None:
        taken = draft.volume_names()
        if volume in taken:
            return  # a volume of that name already exists: the pod's wins
        draft.require("volumes", injection, span)
        item = {"name": volume}
        item.update({k: dict(v) if isinstance(v, dict) else v for k, v in source.items()})
        draft.volumes.append(item)
        taken.add(volume)
        draft.credit.add(name)
    return add_volume


def _mount_step(op: Mount, injection: Injection) -> Step:
    volume, path, span, name = op.volume, op.path, op.span, injection.name
    which, made = _selection(op.containers), _mount(op.volume, op.path, op.read_only)

    def mount(draft: _Draft) -> None:
        draft.known_volume(volume, injection, span)
        for field, i, container, cname in draft.pod.select(which):
            edit = draft.edit(field, i, container, cname)
            if path in edit.mount_paths \
                    or _listed(container.get("volumeMounts"), "mountPath", path):
                continue  # something is mounted there already
            if not edit.mounts:
                _container_list(edit, "volumeMounts", injection, span)
            edit.mounts.append(dict(made))
            edit.mount_paths.add(path)
            draft.credit.add(name)
    return mount


def _sidecar(op: Sidecar, injection: Injection) -> Step:
    cname, span, name = op.name, op.span, injection.name
    field = "initContainers" if op.native else "containers"
    image = _fold(op.image)
    command = None if op.command is None else _Strings.of(op.command)
    args = None if op.args is None else _Strings.of(op.args)
    pairs = list(op.env)
    if injection.completion_containers is not None \
            and all(key != COMPLETION_ENV for key, _ in pairs):
        pairs.append((COMPLETION_ENV, (",".join(injection.completion_containers),)))
    env = _Strings.of(tuple(value for _, value in pairs))
    names = tuple(key for key, _ in pairs)
    volumes = tuple(m.volume for m in op.mounts)
    mounts = tuple(_mount(m.volume, m.path, m.read_only) for m in op.mounts)

    def sidecar(draft: _Draft) -> None:
        taken = draft.container_names()
        if cname in taken:
            return  # already there (injected before, or the pod brings its own)
        draft.require(field, injection, span)
        pod = draft.pod
        text = _text(image, pod, injection, span, cname)
        if not text:
            raise MutationError(name, span, f"sidecar {cname!r}: image is empty")
        container: dict[str, Any] = {"name": cname, "image": text}
        if command is not None:
            container["command"] = command.render(pod, injection, span, cname)
        if args is not None:
            container["args"] = args.render(pod, injection, span, cname)
        if names:
            container["env"] = [{"name": key, "value": value} for key, value
                                in zip(names, env.render(pod, injection, span, cname))]
        if mounts:
            for volume in volumes:
                draft.known_volume(volume, injection, span)
            container["volumeMounts"] = [dict(m) for m in mounts]
        if op.native:
            container["restartPolicy"] = "Always"
        draft.sidecars[field].append(container)
        taken.add(cname)
        draft.credit.add(name)
    return sidecar


def _wrap(op: Wrap, injection: Injection) -> Step:
    span, name, which = op.span, injection.name, _selection(op.containers)
    argv = None if op.argv is None else _Strings.of(op.argv)
    shell = None if op.shell is None else _fold(op.shell)

    def wrap(draft: _Draft) -> None:
        if name in draft.recorded:
            return   # wrapped when first admitted: wrapping again would nest the wrapper
        if (argv is None) == (shell is None):
            raise MutationError(name, span, "wrap needs exactly one of argv or shell")
        pod = draft.pod
        for field, i, container, cname in pod.select(which):
            edit = draft.edit(field, i, container, cname)
            if not edit.command:
                raise MutationError(
                    name, span,
                    f"container {cname!r} has no command: its entrypoint is in the image, which "
                    f"the webhook does not read; spell the command out in the pod template")
            if not _strings(edit.command) or not (edit.args is None or _strings(edit.args)):
                raise MutationError(name, span,
                                    f"container {cname!r}: command and args must be string lists")
            original = list(edit.command) + list(edit.args or [])
            if argv is not None:
                edit.command = argv.render(pod, injection, span, cname) + original
            else:
                assert shell is not None
                edit.command = ["/bin/sh", "-c", _text(shell, pod, injection, span, cname,
                                                       shlex.join(original))]
            edit.args = None
            edit.wrapped = True
            draft.credit.add(name)
    return wrap


# How each op of an injection is prepared (the plan's op types are a closed set).
_MAKERS: dict[type, Callable[[Any, Injection], Step]] = {
    Annotate: _annotate, Label: _label, Env: _env, Volume: _volume, Mount: _mount_step,
    Sidecar: _sidecar, Wrap: _wrap}


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

    Per request, so it does the least it can: the pod's shape is checked once, and its volume
    and container names are collected once, when first asked about; a container's env and
    mounts are scanned in C."""

    __slots__ = ("pod", "annotations", "labels", "volumes", "_volume_names", "edits", "sidecars",
                 "_container_names", "recorded", "credit", "odd")

    def __init__(self, pod: _Pod) -> None:
        self.pod = pod
        self.annotations: dict[str, tuple[str, str]] = {}   # key -> (value, injection)
        self.labels: dict[str, tuple[str, str]] = {}
        self.volumes: list[dict] = []
        self._volume_names: set[Any] | None = None
        self.edits: dict[tuple[str, int], _Edit] = {}
        self.sidecars: dict[str, list[dict]] = {"containers": [], "initContainers": []}
        self._container_names: set[Any] | None = None
        self.recorded = _recorded(pod.annotations)
        self.credit: set[str] = set()   # injections that changed the pod (metadata: see finish)
        self.odd = _odd(pod.pod)   # fields no op can write into, with why; mostly empty

    def edit(self, field: str, index: int, container: dict, name: str) -> _Edit:
        edit = self.edits.get((field, index))
        if edit is None:
            edit = self.edits[(field, index)] = _Edit(field, index, name, container)
        return edit

    def container_names(self) -> set[Any]:
        if self._container_names is None:
            spec = self.pod.spec
            self._container_names = _taken(spec.get("containers"), "name")
            self._container_names.update(_taken(spec.get("initContainers"), "name"))
        return self._container_names

    def volume_names(self) -> set[Any]:
        if self._volume_names is None:
            self._volume_names = _taken(self.pod.spec.get("volumes"), "name")
        return self._volume_names

    def require(self, field: str, injection: Injection, span: Span) -> None:
        """Raise if the pod's `field` (see _odd) cannot be written, citing the op at `span`."""
        why = self.odd.get(field)
        if why is not None:
            raise MutationError(injection.name, span, why)

    def known_volume(self, volume: str, injection: Injection, span: Span) -> None:
        if volume not in self.volume_names():
            raise MutationError(injection.name, span,
                                f"mount of volume {volume!r}, which neither the pod nor an "
                                f"earlier `volume` op declares")

    # -- emitting -------------------------------------------------------------------------------

    def finish(self, matched: list[_Program], digest: str) -> tuple[list[dict], tuple[str, ...]]:
        """The patch ops, and the injections that contributed one, in plan order."""
        credit = self.credit
        annotations = _changed(self.annotations, self.pod.annotations, credit)
        labels = _changed(self.labels, self.pod.labels, credit)
        applied: list[str] = []
        entries = list(self.recorded.values())   # the record annotation, if it grows
        for program in matched:
            injection = program.injection
            if injection.name in credit:
                applied.append(injection.name)
                if injection.name not in self.recorded:
                    self.require("annotations", injection, injection.span)
                    entries.append(f"{injection.name}@{digest}")
        if len(entries) > len(self.recorded):
            annotations[RECORD_ANNOTATION] = orjson.dumps(entries).decode()
        ops: list[dict] = []
        pod = self.pod.pod
        if annotations or labels:
            meta = pod.get("metadata")   # an object, or absent or null (see _odd)
            if meta is None:
                ops.append({"op": "add", "path": "/metadata", "value": {}})
                meta = {}
            _emit_map(ops, "/metadata/annotations", annotations, meta.get("annotations"))
            _emit_map(ops, "/metadata/labels", labels, meta.get("labels"))
        sidecars = self.sidecars
        spec = pod.get("spec")   # an object, or absent or null (see _odd)
        if spec is None and (self.volumes or sidecars["containers"] or sidecars["initContainers"]):
            ops.append({"op": "add", "path": "/spec", "value": {}})
            spec = {}
        if self.volumes:
            _emit_list(ops, "/spec/volumes", self.volumes, spec.get("volumes"))
        edits = self.edits
        keys = sorted(edits, key=_edit_order) if len(edits) > 1 else edits
        for key in keys:
            edit = edits[key]
            if edit.env or edit.mounts or edit.wrapped:
                _emit_edit(ops, edit)
        for field in _LISTS:
            if sidecars[field]:
                _emit_list(ops, _SPEC[field], sidecars[field], spec.get(field))
        return ops, tuple(applied)


# The fields an op writes into, under the pod's top-level objects, and the type each must have.
_WRITES = (("metadata", ("annotations", "labels"), dict),
           ("spec", ("volumes",) + _LISTS, list))


def _odd(pod: dict) -> dict[str, str]:
    """Field -> why it cannot be written, for each field of _WRITES that is neither absent,
    null, nor of its type (nor under an absent or null parent). Empty for any sound pod."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    if type(meta) is dict and type(spec) is dict and type(meta.get("annotations")) in _OBJECT \
            and type(meta.get("labels")) in _OBJECT and type(spec.get("volumes")) in _ARRAY \
            and type(spec.get("containers")) in _ARRAY \
            and type(spec.get("initContainers")) in _ARRAY:
        return _SOUND   # the pods the API server sends: decided without a loop
    odd: dict[str, str] = {}
    for top, fields, leaf in _WRITES:
        parent = pod.get(top)
        if isinstance(parent, dict):
            for field in fields:
                node = parent.get(field)
                if node is not None and not isinstance(node, leaf):
                    odd[field] = (f"pod field {top}.{field} is a {type(node).__name__}, "
                                  f"not {_JSON_TYPE[leaf]}")
        elif parent is not None:
            why = f"pod field {top} is a {type(parent).__name__}, not {_JSON_TYPE[dict]}"
            odd.update(dict.fromkeys(fields, why))
    return odd


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
        ops.append({"op": "add", "path": where, "value": items})
        return
    for key, value in items.items():
        ops.append({"op": "replace" if key in current else "add", "path": _member(where, key),
                    "value": value})


def _emit_list(ops: list[dict], where: str, items: list, current: Any) -> None:
    """Ops appending `items` to the array at `where` (`current`: that array, None if absent)."""
    if current is None:
        ops.append({"op": "add", "path": where, "value": items})
        return
    end = _member(where, "-")
    for item in items:   # mostly one
        ops.append({"op": "add", "path": end, "value": item})


def _emit_edit(ops: list[dict], edit: _Edit) -> None:
    base = _member(_SPEC[edit.field], str(edit.index))
    ops.append({"op": "test", "path": _member(base, "name"), "value": edit.name})
    container = edit.container
    if edit.env:
        _emit_list(ops, _member(base, "env"), edit.env, container.get("env"))
    if edit.mounts:
        _emit_list(ops, _member(base, "volumeMounts"), edit.mounts, container.get("volumeMounts"))
    if edit.wrapped:
        ops.append({"op": "replace", "path": _member(base, "command"), "value": edit.command})
        if "args" in container:
            ops.append({"op": "remove", "path": _member(base, "args")})


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
_OBJECT, _ARRAY = frozenset({dict, type(None)}), frozenset({list, type(None)})
_SOUND: dict[str, str] = {}   # never written


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
