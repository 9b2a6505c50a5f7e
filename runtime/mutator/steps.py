"""Each injection compiled once per plan: its `where` filter into a test of the received pod,
its ops into steps over a draft.

What does not depend on the pod (literal texts, volume and mount objects, the completion wiring,
which filter term tests what) is made when the plan loads; a step then only renders what names
the pod and records its wish in the draft. Templates render as everywhere else
(`runtime.templates`), over {pod, owner, namespace} with the pod's placeholders.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import orjson

from runtime import pods, templates, vocabulary
from runtime.mutator.draft import TOKEN_PATH, Draft, listed, mount
from runtime.mutator.view import MutationError, Received
from runtime.plan import (
    And, Annotate, Env, Expr, FieldPath, Injection, IsPrimary, JmesPath, Label, LabelIs, Mount,
    NamespaceIs, NamespaceLabel, Not, Or, Sidecar, TaskIs, Template, Var, Volume, Wrap,
)

COMPLETION_ANNOTATION = vocabulary.COMPLETION_ANNOTATION
COMPLETION_ENV = "JOBRULES_COMPLETION_CONTAINERS"

_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")

Step = Callable[[Draft], None]
Test = Callable[[Received], bool]


@dataclass(frozen=True, slots=True)
class _Rendered:
    """A template that names the pod, and whether it has placeholders (else no variables need
    making for it); `field` when it is one expression that only names fields (the commonest,
    `<<owner.metadata.name>>`), read without the renderer."""

    template: Template
    has_vars: bool
    field: FieldPath | None = None


Text = Union[str, _Rendered]   # a template as prepared: a str when it has only literal text


@dataclass(frozen=True, slots=True)
class Program:
    """An injection prepared for admission: its filter as a test, its ops as steps."""

    injection: Injection
    steps: tuple[Step, ...]
    test: Test = lambda pod: True


def program(injection: Injection) -> Program:
    steps = [_MAKERS[type(op)](op, injection) for op in injection.ops]
    if injection.completion_containers is not None:
        steps.append(_completion(injection))
    return Program(injection, tuple(steps), _test(injection.match))


def _test(node: Any) -> Test:
    """An injection's `where` filter (None: none) as a test of the received pod."""
    match node:
        case None | NamespaceLabel():
            # a namespace label is the webhook entry's namespaceSelector: the API server checked it
            return lambda pod: True
        case And(args):
            return _all(tuple(map(_test, args)))
        case Or(args):
            return _any(tuple(map(_test, args)))
        case Not(arg):
            test = _test(arg)
            return lambda pod: not test(pod)
        case LabelIs(key, values, negate, annotation):
            if annotation:
                return lambda pod: _has(pod.annotations, key, values) != negate
            return lambda pod: _has(pod.labels, key, values) != negate
        case NamespaceIs(namespaces, negate):
            return lambda pod: (pod.namespace in namespaces) != negate
        case TaskIs(tasks, negate):
            return lambda pod: (pod.task() in tasks) != negate
        case IsPrimary():
            return Received.primary
        case JmesPath(expr):
            return lambda pod: pods.truthy(pod.search(expr, pod.data))
    raise TypeError(f"not an injection filter: {node!r}")


def _all(tests: tuple[Test, ...]) -> Test:
    def every(pod: Received) -> bool:   # a loop: all() over a generator costs a frame per pod
        for test in tests:
            if not test(pod):
                return False
        return True
    return every


def _any(tests: tuple[Test, ...]) -> Test:
    def some(pod: Received) -> bool:
        for test in tests:
            if test(pod):
                return True
        return False
    return some


def _has(mapping_: dict, key: str, values: frozenset[str] | None) -> bool:
    if values is None:
        return key in mapping_
    value = mapping_.get(key)
    return isinstance(value, str) and value in values


def _fold(template: Template) -> Text:
    """A template of literal parts only as its text; any other template prepared to render."""
    if all(isinstance(part, str) for part in template):
        return "".join(template)   # type: ignore[arg-type]
    lone = template[0] if len(template) == 1 else None
    field = lone.compiled if isinstance(lone, Expr) else None
    return _Rendered(template, any(isinstance(part, Var) for part in template),
                     field if isinstance(field, FieldPath) else None)


def _text(text: Text, pod: Received, container: str | None = None, argv: str | None = None) -> str:
    """A prepared text for this pod; `container` and `argv` are the placeholders an op's
    context gives (the plan loader allows no other placeholder where they are absent)."""
    if isinstance(text, str):
        return text
    if text.field is not None:   # as render and Received.search would read it
        return templates.text(text.field.search(pod.data))
    variables: dict[str, Any] = {}
    if text.has_vars:
        variables = pod.variables()
        variables.update(container=container, argv=argv)
    return templates.text(templates.render(text.template, pod.data, variables, pod.search))


@dataclass(frozen=True, slots=True)
class _Strings:
    """A list of templates prepared: the literal ones in place, the rest rendered per pod."""

    fixed: tuple[str | None, ...]   # None where a template is rendered
    rendered: tuple[tuple[int, _Rendered], ...]

    @classmethod
    def of(cls, templates_: tuple[Template, ...]) -> _Strings:
        texts = [_fold(t) for t in templates_]
        return cls(tuple(t if isinstance(t, str) else None for t in texts),
                   tuple((i, t) for i, t in enumerate(texts) if isinstance(t, _Rendered)))

    def render(self, pod: Received, container: str) -> list[str]:
        out: list[str | None] = list(self.fixed)
        for i, template in self.rendered:
            out[i] = _text(template, pod, container)
        return out   # type: ignore[return-value]


def _annotate(op: Annotate, injection: Injection) -> Step:
    key, value, span, name = op.key, _fold(op.value), op.span, injection.name

    def annotate(draft: Draft) -> None:
        text = _text(value, draft.pod)
        draft.require("annotations", injection, span)
        draft.annotations[key] = (text, name)
    return annotate


def _label(op: Label, injection: Injection) -> Step:
    key, value, span, name = op.key, _fold(op.value), op.span, injection.name
    valid = isinstance(value, str) and _LABEL_VALUE.fullmatch(value) is not None

    def label(draft: Draft) -> None:
        text = _text(value, draft.pod)
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

    def completion(draft: Draft) -> None:
        draft.require("annotations", injection, injection.span)
        draft.annotations[COMPLETION_ANNOTATION] = value
    return completion


def _env(op: Env, injection: Injection) -> Step:
    var, value, span, name, which = op.name, _fold(op.value), op.span, injection.name, op.containers

    def env(draft: Draft) -> None:
        pod = draft.pod
        for field, i, container, cname in pod.select(which):
            edit = draft.edit(field, i, container, cname)
            if var in edit.env_names or listed(container.get("env"), "name", var):
                continue  # the pod's own variable wins (docs/injection.md)
            if not edit.env:
                edit.require_list("env", injection, span)
            edit.env.append({"name": var, "value": _text(value, pod, cname)})
            edit.env_names.add(var)
            draft.credit.add(name)
    return env


def _volume(op: Volume, injection: Injection) -> Step:
    volume, span, name = op.name, op.span, injection.name
    made = orjson.dumps({"name": volume, **op.source})   # read back as a fresh copy per pod

    def add_volume(draft: Draft) -> None:
        taken = draft.volume_names()
        if volume in taken:
            return  # a volume of that name already exists: the pod's wins
        draft.require("volumes", injection, span)
        draft.volumes.append(orjson.loads(made))
        taken.add(volume)
        draft.credit.add(name)
    return add_volume


def _mount(op: Mount, injection: Injection) -> Step:
    volume, path, span, name, which = op.volume, op.path, op.span, injection.name, op.containers
    made = mount(op.volume, op.path, op.read_only)

    def add_mount(draft: Draft) -> None:
        draft.known_volume(volume, injection, span)
        for field, i, container, cname in draft.pod.select(which):
            edit = draft.edit(field, i, container, cname)
            if path in edit.mount_paths or listed(container.get("volumeMounts"), "mountPath", path):
                continue  # something is mounted there already
            if not edit.mounts:
                edit.require_list("volumeMounts", injection, span)
            edit.mounts.append(dict(made))
            edit.mount_paths.add(path)
            draft.credit.add(name)
    return add_mount


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
    mounts = tuple(mount(m.volume, m.path, m.read_only) for m in op.mounts)

    def sidecar(draft: Draft) -> None:
        taken = draft.container_names()
        if cname in taken:
            return  # already there (injected before, or the pod brings its own)
        draft.require(field, injection, span)
        pod = draft.pod
        text = _text(image, pod, cname)
        if not text:
            raise MutationError(name, span, f"sidecar {cname!r}: image is empty")
        container: dict[str, Any] = {"name": cname, "image": text}
        if command is not None:
            container["command"] = command.render(pod, cname)
        if args is not None:
            container["args"] = args.render(pod, cname)
        if names:
            container["env"] = [{"name": key, "value": value} for key, value
                                in zip(names, env.render(pod, cname))]
        made = list(map(dict, mounts))
        for volume in volumes:
            draft.known_volume(volume, injection, span)
        token = draft.token_mount()   # else the API server adds it, and calls us again
        if token is not None and all(m["mountPath"] != TOKEN_PATH for m in made):
            made.append(token)
        if made:
            container["volumeMounts"] = made
        if op.native:
            container["restartPolicy"] = "Always"
        draft.sidecars[field].append(container)
        taken.add(cname)
        draft.credit.add(name)
    return sidecar


def _wrap(op: Wrap, injection: Injection) -> Step:
    span, name, which = op.span, injection.name, op.containers
    argv = None if op.argv is None else _Strings.of(op.argv)
    shell = None if op.shell is None else _fold(op.shell)

    def wrap(draft: Draft) -> None:
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
                edit.command = argv.render(pod, cname) + original
            else:
                assert shell is not None
                edit.command = ["/bin/sh", "-c", _text(shell, pod, cname, shlex.join(original))]
            edit.args = None
            edit.wrapped = True
            draft.credit.add(name)
    return wrap


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# How each op of an injection is prepared (the plan's op types are a closed set).
_MAKERS: dict[type, Callable[[Any, Injection], Step]] = {
    Annotate: _annotate, Label: _label, Env: _env, Volume: _volume, Mount: _mount,
    Sidecar: _sidecar, Wrap: _wrap}

