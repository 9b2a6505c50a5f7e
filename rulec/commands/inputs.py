"""Reading what `rulec eval`, `mutate` and `test` are given: rules or plans, objects, pod lists.

Every problem is an `api.InputError` with one line naming the file (and the line and column
where the text itself is wrong), which the commands report as a usage/IO error (exit 2)
without a traceback.

JSON is read as JSON (`kubectl get pods -o json` is the usual input, and megabytes of it go
through YAML's scanner very slowly); YAML by libyaml's parser where PyYAML was built with it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson
import yaml

from rulec import api, diagnostics, emit
from rulec.source import SourceFile
from runtime import plan as planlib

# No Kubernetes object nests anywhere near this deep; deeper input is refused when read, so that
# nothing after the reader (expressions, patches, output) meets an absurd depth.
MAX_DEPTH = 100
_SURROGATE_ESCAPE = re.compile(r"\\(?:u|U0000)[dD][89a-fA-F]")
_LOOKS_LIKE_JSON = re.compile(r"\s*[{\[]")
# The file name that means standard input (`kubectl get pods -o json | rulec eval --pods -`),
# and how messages name it.
STDIN = "-"
STDIN_NAME = "<stdin>"


def where(path: str | Path) -> str:
    """How messages name an input: its path, or `<stdin>`."""
    return STDIN_NAME if str(path) == STDIN else str(path)


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML 1.2-ish: timestamps stay strings, as Kubernetes objects carry them."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse(text: str, where: str) -> list[Any]:
    """Every document of a JSON or YAML text (empty documents left out).

    A `.json` file is JSON. Another text that starts like JSON is read as JSON, and when it is
    not JSON, as YAML (it may be a flow mapping such as `{a: 1}`); if that fails too, the JSON
    error is reported."""
    text = text.removeprefix("\ufeff")
    with api.without_cyclic_gc():
        if where.endswith(".json"):
            docs = [_json(text, where)]
        elif _LOOKS_LIKE_JSON.match(text):
            try:
                docs = [_json(text, where)]
            except api.InputError as err:
                try:
                    docs = _yaml(text, where)
                except api.InputError:
                    raise err from None
        else:
            docs = _yaml(text, where)
        docs = [d for d in docs if d is not None]
        _check_depth(docs, where)
    return docs


def _json(text: str, where: str) -> Any:
    """orjson's reading: strict (no NaN, no lone surrogates), its errors at a line and column."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as err:
        raise api.InputError(f"{where}:{err.lineno}:{err.colno}: not JSON: {err.msg}") from None


def _yaml(text: str, where: str) -> list[Any]:
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as err:
        raise api.InputError(_yaml_message(err, where)) from None
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        column = err.position - (text.rfind("\n", 0, err.position) + 1) + 1
        char = diagnostics.show_char(chr(err.character)) if isinstance(err.character, int) else ""
        raise api.InputError(f"{where}:{line}:{column}: not YAML or JSON: unacceptable character "
                         f"{char}: {err.reason}") from None
    except yaml.YAMLError as err:
        raise api.InputError(f"{where}: not YAML or JSON: {_one_line(str(err))}") from None
    except RecursionError:
        raise _too_deep(where) from None
    if _SURROGATE_ESCAPE.search(text):  # refused by libyaml, read by PyYAML's own parser
        _check_strings(docs, where)
    return docs


def _yaml_message(err: yaml.MarkedYAMLError, where: str) -> str:
    """`file:line:col: not YAML or JSON: problem (context at line:col)`, on one line."""
    def at(mark: yaml.Mark | None) -> str | None:
        return None if mark is None else f"{mark.line + 1}:{mark.column + 1}"

    problem_at = at(err.problem_mark) or at(err.context_mark)
    text = f"{where}:{problem_at}" if problem_at else where
    text += f": not YAML or JSON: {_one_line(err.problem or err.context or 'unreadable')}"
    if err.context and err.problem:
        context_at = at(err.context_mark)
        text += f" ({_one_line(err.context)}" + (
            f" at {context_at})" if context_at and context_at != problem_at else ")")
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _too_deep(where: str) -> api.InputError:
    return api.InputError(f"{where}: nested more than {MAX_DEPTH} levels deep (no Kubernetes object "
                      "is)")


def _check_depth(docs: list[Any], where: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, one level at a time (no recursion, and cheap)."""
    level = [d for d in docs if isinstance(d, (dict, list))]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise _too_deep(where)
        below: list[Any] = []
        for node in level:
            below.extend([v for v in (node.values() if type(node) is dict else node)
                          if type(v) is dict or type(v) is list])
        level = below


def _check_strings(docs: list[Any], where: str) -> None:
    """Refuse strings holding half of a UTF-16 surrogate pair (`"\\ud800"`): no output could
    carry them."""
    stack: list[Any] = list(docs)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise api.InputError(f"{where}: a string holds half of a surrogate pair "
                                 f"({node.encode('utf-8', 'backslashreplace').decode()[:40]!r})"
                                 ) from None


def read_text(path: str | Path) -> str:
    """A file's text, UTF-8; `-` is standard input (read to its end)."""
    try:
        if str(path) == STDIN:
            if sys.stdin is None:
                raise api.InputError(f"{STDIN_NAME}: cannot read: there is no standard input")
            return sys.stdin.buffer.read().decode("utf-8")
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise api.InputError(f"{where(path)}: not UTF-8 text (byte {err.object[err.start]:#04x} at "
                             f"offset {err.start})") from None
    except OSError as err:
        raise api.InputError(f"{where(path)}: cannot read: {err.strerror or err}") from None


def read_object(path: str | Path, what: str = "object") -> dict[str, Any]:
    """One Kubernetes object from a YAML or JSON file (`what`: object, or a pod to mutate)."""
    name = where(path)
    docs = parse(read_text(path), name)
    if len(docs) != 1:
        raise api.InputError(f"{name}: expected one {what}, found {len(docs)} documents")
    if what == "pod":
        return pod(docs[0], name, named=False)
    return kube_object(docs[0], name)


def read_objects(path: str | Path) -> list[dict[str, Any]]:
    """A pod list: a JSON array, a `kind: List`, or multi-document YAML."""
    name = where(path)
    return pods(parse(read_text(path), name), name)


def read_pod_files(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The pods of each file in turn, as one list (`--pods A --pods B`): no two may be one pod,
    in one file or across them."""
    given = list(paths)
    found = [p for path in given for p in read_objects(path)]
    return unique(found, " + ".join(where(p) for p in given)) if len(given) > 1 else found


def kube_object(doc: Any, where: str) -> dict[str, Any]:
    """`doc` if it has the parts of a Kubernetes object that the commands read: a mapping with
    an apiVersion and a kind, and mappings where metadata, labels, spec and status go."""
    obj = _mapping(doc, where)
    for key in ("apiVersion", "kind"):
        value = obj.get(key)
        if value is None:
            raise api.InputError(f"{where}: not a Kubernetes object: no `{key}`")
        if not isinstance(value, str) or not value:
            raise api.InputError(f"{where}: `{key}` is {_type(value) if value != '' else 'empty'}, "
                             "not a name")
    _parts(obj, where)
    return obj


def pod(doc: Any, where: str, named: bool = True) -> dict[str, Any]:
    """`doc` if it can be a pod: a mapping, of kind Pod when it says, with a metadata.name
    when `named` (a pod being created may have only a generateName), and every field the pod
    reader reads of the type the API server gives it (`POD_SHAPE`)."""
    obj = _mapping(doc, where)
    kind = obj.get("kind", "Pod")
    if kind != "Pod":
        raise api.InputError(f"{where}: not a pod: kind {kind!r}")
    _parts(obj, where)
    if named and not isinstance((obj.get("metadata") or {}).get("name"), str):
        raise api.InputError(f"{where}: not a pod: no metadata.name")
    _shaped(obj, POD_SHAPE, where, "")
    return obj


# The fields of a pod that verdicts and policies read (runtime/pods.py), with the types the API
# server gives them: a pod written by hand with another type (a list of numbers where objects
# belong, a string where a list belongs) would otherwise get a verdict made from nothing. A
# mapping is an object of these fields, a one-element list a list of such, a type the value's.
_STATE = {"running": {}, "waiting": {"reason": str, "message": str},
          "terminated": {"exitCode": int, "reason": str, "message": str, "startedAt": str,
                         "finishedAt": str}}
_CONTAINER_STATUS = {"name": str, "restartCount": int, "ready": bool, "state": _STATE,
                     "lastState": _STATE}
POD_SHAPE: dict[str, Any] = {
    "metadata": {"creationTimestamp": str, "deletionTimestamp": str,
                 "deletionGracePeriodSeconds": int,
                 "ownerReferences": [{"apiVersion": str, "kind": str, "name": str, "uid": str,
                                      "controller": bool}]},
    "spec": {"restartPolicy": str, "containers": [{"name": str}],
             "initContainers": [{"name": str, "restartPolicy": str}]},
    "status": {"phase": str, "reason": str, "message": str, "startTime": str,
               "conditions": [{"type": str, "status": str, "reason": str,
                               "lastTransitionTime": str}],
               "containerStatuses": [_CONTAINER_STATUS],
               "initContainerStatuses": [_CONTAINER_STATUS]},
}
_WORDS = {str: "a string", int: "an integer", bool: "a boolean"}


def _shaped(value: Any, shape: Any, where: str, path: str) -> None:
    """Raise an InputError naming the first field of `value` that `shape` says is of another
    type (null counts as absent, as the API server reads it)."""
    if value is None:
        return
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise api.InputError(f"{where}: `{path}` is {_type(value)}, not a mapping")
        for key, inner in shape.items():
            if key in value:
                _shaped(value[key], inner, where, f"{path}.{key}" if path else key)
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise api.InputError(f"{where}: `{path}` is {_type(value)}, not a list")
        for n, item in enumerate(value):
            _shaped(item, shape[0], where, f"{path}[{n}]")
    elif not isinstance(value, shape) or (shape is int and isinstance(value, bool)):
        raise api.InputError(f"{where}: `{path}` is {_type(value)}, not {_WORDS[shape]}")


def pods(docs: Iterable[Any], where: str) -> list[dict[str, Any]]:
    """Pods from documents (JSON arrays, `kind: List`, single pods), each checked by `pod`,
    and `unique`."""
    return unique([pod(doc, f"{where}: item {n}" if many else where)
                   for n, (doc, many) in enumerate(_flatten(docs, where), 1)], where)


def unique(found: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """The pods, if no two have one uid (or, without uids, one namespace and name): the stored
    state would take them for one pod."""
    seen: dict[str, str] = {}
    for p in found:
        meta = p.get("metadata") or {}
        uid = meta.get("uid")
        identity = uid if uid else f"{meta.get('namespace') or ''}/{meta['name']}"
        if identity in seen:
            same = f"the uid {uid!r}" if identity == uid else "one namespace and name"
            raise api.InputError(f"{where}: pods {seen[identity]!r} and {meta['name']!r} have {same}")
        seen[identity] = meta["name"]
    return found


def _flatten(docs: Iterable[Any], where: str) -> Iterable[tuple[Any, bool]]:
    """Each object of the documents, and whether it came out of a list."""
    for doc in docs:
        if isinstance(doc, list):
            yield from ((item, True) for item in doc)
        elif isinstance(doc, dict) and (str(doc.get("kind", "")).endswith("List")
                                        or "items" in doc and "kind" not in doc):
            items = doc.get("items")
            if not isinstance(items, list):
                raise api.InputError(f"{where}: the `items` of a {doc.get('kind') or 'list'} are "
                                 f"{_type(items)}, not a list")
            yield from ((item, True) for item in items)
        else:
            yield doc, False


_PARTS: dict[str, tuple[str, ...]] = {"": ("metadata", "spec", "status"),
                                      "metadata": ("labels", "annotations")}


def _parts(obj: Mapping[str, Any], where: str) -> None:
    meta = obj.get("metadata")
    for parent, keys in _PARTS.items():
        holder = obj if not parent else meta if isinstance(meta, dict) else {}
        for key in keys:
            if key in holder and holder[key] is not None and not isinstance(holder[key], dict):
                name = f"{parent}.{key}" if parent else key
                raise api.InputError(f"{where}: `{name}` is {_type(holder[key])}, not a mapping")
    if isinstance(meta, dict):
        for key in ("name", "namespace", "uid"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise api.InputError(f"{where}: `metadata.{key}` is {_type(meta[key])}, not a string")
        for key in ("labels", "annotations"):
            for name, value in (meta.get(key) or {}).items():
                if not isinstance(value, str):
                    raise api.InputError(f"{where}: `metadata.{key}` {name!r} is {_type(value)}, not a "
                                     "string (quote it in YAML)")


def _mapping(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise api.InputError(f"{where}: expected an object (a mapping), found {_type(doc)}")
    return doc


def _type(value: Any) -> str:
    """A value's JSON type in words: `a string`, `a list`, `null`..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "a mapping"


def read_state(path: str) -> Any:
    """A `--state` file: its JSON (a state, or an earlier eval output), or its text when it is
    not JSON (the state decoder then reports it as a problem and starts afresh)."""
    text = read_text(path)
    try:
        state = _json(text.removeprefix("\ufeff"), where(path))
    except api.InputError:
        return text
    _check_depth([state], where(path))
    return state


def load_plan(paths: Iterable[str], relative_to: str | None = None) -> planlib.Plan:
    """A compiled plan (`.json`), or `.rules` files and folders compiled on the fly.

    With `relative_to`, rules are compiled under their paths relative to that folder, so rule
    positions (and the plan digest) do not depend on where the command was run from.
    """
    return load_plan_text(paths, relative_to)[0]


def load_plan_text(paths: Iterable[str], relative_to: str | None = None) -> tuple[planlib.Plan, str]:
    """`load_plan`, and the plan's JSON text (the file's, or what `rulec compile` would write)."""
    given = list(paths)
    if not given:
        raise api.InputError("no rules given")
    plans = [p for p in given if p.endswith(".json")]
    if plans:
        if len(given) != 1:
            raise api.InputError("give either one compiled plan (.json) or .rules files and folders")
        text = read_text(plans[0])
        try:
            return planlib.loads(text), text
        except planlib.PlanError as err:
            raise api.InputError(f"{plans[0]}: {err}") from None
    files = api.rule_files(given)
    sources = [api.read(f) for f in files]
    if not sources:
        raise api.InputError(f"no .rules files in {' '.join(given)}")
    if relative_to is not None:
        sources = [SourceFile.from_text(os.path.relpath(s.path, relative_to), s.text) for s in sources]
    built = api.build_sources(sources)
    if built.plan is None:
        text = diagnostics.render(built.errors or built.diagnostics, "concise", dict(built.sources))
        raise api.InputError(f"the rules have errors:\n{text.rstrip()}")
    text = emit.dumps(built.plan)
    try:
        return planlib.loads(text), text   # digest as for a plan from `rulec compile`
    except planlib.PlanError as err:
        raise api.InputError(f"the compiled plan does not load: {err}") from None
