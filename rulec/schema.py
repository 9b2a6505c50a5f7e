"""Field paths checked against CRD schemas (`rulec check --crd`).

A typo in a JMESPath expression or a status path never fails at runtime: it silently reads
`null`. Checking the paths against the kind's OpenAPI schema turns that into a diagnostic.
Imported only when `--crd` is given.

Real CRDs are large (the pod template schema makes some 800 KB of YAML), and parsing them
costs far more than checking. Only the schema keywords the checks read are kept (`_KEPT`),
and what each file yields (its pruned schemas and its problems) is cached as JSON under
`${XDG_CACHE_HOME:-~/.cache}/jobrules/crd-index/`, named by the SHA-256 of the file's bytes
and of `_CACHE_STAMP`. The cache never changes a result: an entry that cannot be read or has
another shape is ignored, one that cannot be written is skipped, and `RULEC_NO_CACHE=1`
turns it off.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jmespath.parser

from rulec import cache

Schema = Mapping[str, Any]
GVK = tuple[str, str, str]

_INDEX = re.compile(r"-?\d+\Z")


@dataclass(frozen=True, slots=True)
class PathProblem:
    """Where a path leaves its schema: `segment` (at `index`) is not among `expected`."""

    index: int
    segment: str
    expected: tuple[str, ...]
    suggestion: str | None


@dataclass(frozen=True, slots=True)
class SchemaIndex:
    """The `openAPIV3Schema` of every (group, version, kind) known, built-ins included.

    Schemas from files keep only the keywords the checks read (`_KEPT`), at every level.
    """

    schemas: Mapping[GVK, Schema] = field(hash=False)

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> tuple[SchemaIndex, list[str]]:
        """Index the CRDs in `paths` (multi-document YAML or a `kind: List`); never raises."""
        schemas: dict[GVK, Schema] = dict(_BUILTIN)
        errors: list[str] = []
        folder = cache.folder("crd-index")
        for path in paths:
            try:
                data = Path(path).read_bytes()
            except OSError as exc:
                errors.append(f"{path}: cannot read: {exc}")
                continue
            name = f"{hashlib.sha256(_CACHE_STAMP + data).hexdigest()}.json"
            found = _cache_read(folder / name) if folder is not None else None
            if found is None:
                try:
                    found = _index_file(data)
                except _FileError as exc:
                    errors.append(f"{path}: {exc}")
                    continue
                if folder is not None:
                    _cache_write(folder, name, found)
            entries, problems = found
            schemas.update(((group, version, kind), schema)
                           for group, version, kind, schema in entries)
            errors.extend(f"{path}: {msg}" for msg in problems)
        return cls(schemas), errors

    def has_kind(self, api_version: str, kind: str) -> bool:
        return (*_split_api_version(api_version), kind) in self.schemas

    def check_path(
        self, api_version: str, kind: str, path: tuple[str, ...]
    ) -> PathProblem | None:
        """The first segment of `path` the kind's schema does not allow, or None.

        None as well for a kind the index does not know: the caller reports that once,
        through `has_kind`, rather than once per path.
        """
        schema = self.schemas.get((*_split_api_version(api_version), kind))
        if schema is None or not path or path[0] == "metadata":
            return None
        return _walk(schema, path)


def paths_in_jmespath(expr: str) -> list[tuple[str, ...]]:
    """The field paths `expr` (valid JMESPath) reads from its root, without prefixes or repeats.

    Paths that continue through a projection name the items' fields directly (arrays are
    transparent, as in `check_path`); what is read relative to an unknown value (the
    elements of a function's result, an `&expr`, the values of `*`) is left out.
    """
    seen: list[tuple[str, ...]] = []
    _reads(jmespath.parser.Parser().parse(expr).parsed, _At((), False), seen)
    longest = [p for p in seen if not any(len(q) > len(p) and q[: len(p)] == p for q in seen)]
    return list(dict.fromkeys(longest))


def _documents(docs: list[Any]) -> Iterable[Mapping[str, Any]]:
    """The CRDs among the documents, looking into `kind: List` items."""
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        if doc.get("kind") == "List":
            items = doc.get("items")
            yield from _documents(items if isinstance(items, list) else [])
        elif doc.get("kind") == "CustomResourceDefinition":
            yield doc


# What a file yields: its (group, version, kind, pruned schema) in file order, and its problems
# (without the file's name, so that an entry holds for any copy of the file).
_Indexed = tuple[list[tuple[str, str, str, Schema]], list[str]]


class _FileError(Exception):
    """A file that is not UTF-8 or not YAML: reported, and never cached."""


def _index_file(data: bytes) -> _Indexed:
    """Parse a file's bytes (UTF-8, read as text is: universal newlines) and index its CRDs."""
    import yaml  # only when the cache does not answer: importing it costs more than a hit

    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise _FileError(f"cannot read: {exc}") from None
    try:  # libyaml's parser when PyYAML was built with it: several times faster
        docs = list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except yaml.YAMLError as exc:
        raise _FileError(f"invalid YAML: {exc}") from None
    entries: list[tuple[str, str, str, Schema]] = []
    problems: list[str] = []
    found = 0
    for doc in _documents(docs):
        found += 1
        problems.extend(_index_crd(doc, entries))
    if not found:
        problems.append("no CustomResourceDefinition found")
    return entries, problems


def _index_crd(crd: Mapping[str, Any], into: list[tuple[str, str, str, Schema]]) -> list[str]:
    name = _dig(crd, "metadata", "name") or "?"
    group, kind = _dig(crd, "spec", "group"), _dig(crd, "spec", "names", "kind")
    if not isinstance(group, str) or not isinstance(kind, str):
        return [f"CustomResourceDefinition {name}: spec.group or spec.names.kind missing"]
    versions = _dig(crd, "spec", "versions")
    if not isinstance(versions, list) or not versions:
        return [f"{kind}.{group}: no spec.versions"]
    errors = []
    for version in versions:
        schema = _dig(version, "schema", "openAPIV3Schema")
        if not isinstance(schema, Mapping):
            errors.append(f"{kind}.{group}/{_dig(version, 'name')}: no openAPIV3Schema")
            continue
        into.append((group, str(_dig(version, "name")), kind, _pruned(schema)))
    return errors


# The schema keywords that `_walk`, `_child` and the checker's field typing read; the rest
# (descriptions, formats, enums, validations: most of a CRD's bytes) is dropped when indexing.
# Reading another keyword means adding it here and changing `_CACHE_VERSION`.
_KEPT = frozenset({
    "type", "properties", "items", "additionalProperties",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
})
_SUBSCHEMA = ("items", "additionalProperties")


def _pruned(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with only the `_KEPT` keywords, at every level; other values as they are."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in _KEPT:
            continue
        if key == "properties" and isinstance(value, Mapping):
            value = {_property_name(name): _pruned(sub) if isinstance(sub, Mapping) else sub
                     for name, sub in value.items()}
        elif key in _SUBSCHEMA and isinstance(value, Mapping):
            value = _pruned(value)
        out[key] = value
    return out


def _property_name(name: Any) -> str:
    """A property's name as the API server has it: YAML 1.1 reads an unquoted `on`, `yes` or
    `200` as a boolean or a number, which Kubernetes' YAML reader turns into a JSON string."""
    if isinstance(name, bool):
        return "true" if name else "false"
    return "null" if name is None else str(name)


# ------------------------------------------------------------------ on-disk cache of _Indexed

# Part of every entry's name: change it whenever what `_index_file` yields for the same bytes
# changes (another keyword kept, another message). PyYAML's reading of valid YAML is taken as
# stable (files it rejects are never cached), so its version is not part of the name: that
# would mean importing it on every run.
_CACHE_VERSION = 2
_CACHE_STAMP = f"jobrules crd-index {_CACHE_VERSION}\0".encode()


def _cache_read(path: Path) -> _Indexed | None:
    """The entry at `path`, or None when it is missing, unreadable or not shaped as written."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON
        return None
    if not isinstance(data, dict):
        return None
    entries, problems = data.get("entries"), data.get("problems")
    if not isinstance(entries, list) or not isinstance(problems, list):
        return None
    if not all(isinstance(p, str) for p in problems):
        return None
    out: list[tuple[str, str, str, Mapping[str, Any]]] = []
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 4
                and all(isinstance(x, str) for x in entry[:3]) and isinstance(entry[3], dict)):
            return None
        out.append((entry[0], entry[1], entry[2], entry[3]))
    return out, problems


def _cache_write(folder: Path, name: str, indexed: _Indexed) -> None:
    """Store `indexed` atomically (a temporary file renamed), if JSON holds it exactly."""
    entries, problems = indexed
    data = {"entries": [list(e) for e in entries], "problems": problems}
    try:
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):  # a YAML value JSON has no form for (a date, a NaN)
        return
    if json.loads(text) != data:  # non-string keys would come back as strings
        return
    cache.write(folder, name, text.encode())


def _dig(value: Any, *keys: str) -> Any:
    """`value[k1][k2]...`, or None where the YAML has another shape than a CRD's."""
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _walk(schema: Schema, path: tuple[str, ...]) -> PathProblem | None:
    node = schema
    for i, segment in enumerate(path):
        while node.get("type") == "array":  # arrays are transparent; a numeric segment indexes
            node = node.get("items") or {}
            if _INDEX.match(segment):
                break
        else:
            nxt = _child(node, segment)
            if nxt is None:
                return None
            if nxt is _MISSING:
                import difflib  # only for a path that leaves its schema

                known = tuple(sorted(node.get("properties") or {}))
                close = difflib.get_close_matches(segment, known, n=1)
                return PathProblem(i, segment, known, close[0] if close else None)
            node = nxt
    return None


_MISSING: Schema = {}
_ANY: Schema = {"x-kubernetes-preserve-unknown-fields": True}


def _child(node: Schema, key: str) -> Schema | None:
    """The schema of `node[key]`: `_MISSING` if the schema forbids it, None if anything goes."""
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return None
    properties = node.get("properties") or {}
    if key in properties:
        return properties[key]
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):
        return extra or None
    if extra is True or not any(k in node for k in _SHAPED):
        return None  # a map of anything, or a schema that says nothing of its shape
    return _MISSING


_SHAPED = ("type", "properties", "additionalProperties", "x-kubernetes-int-or-string")


@dataclass(frozen=True, slots=True)
class _At:
    """A value's path from the root; `listed` when it is a list of the items at that path."""

    path: tuple[str, ...] | None
    listed: bool


_UNKNOWN = _At(None, False)


def _reads(node: Mapping[str, Any], at: _At, seen: list[tuple[str, ...]]) -> _At:
    """Record the paths `node` reads when evaluated at `at`; return where its value sits."""
    kind, children = node["type"], node.get("children", [])
    if kind == "field":
        if at.path is None:
            return _UNKNOWN
        path = (*at.path, node["value"])
        seen.append(path)
        return _At(path, False)
    if kind in ("current", "identity"):
        return at
    if kind == "subexpression":
        for child in children:
            at = _reads(child, at, seen)
        return at
    if kind == "index_expression":
        left = _reads(children[0], at, seen)
        index = children[1]
        if left.path is None or index["type"] == "slice" or left.listed:
            return _At(left.path, False)
        path = (*left.path, str(index["value"]))
        seen.append(path)
        return _At(path, False)
    if kind in ("projection", "filter_projection"):
        left = _reads(children[0], at, seen)
        item = _At(left.path, False)
        if kind == "filter_projection":
            _reads(children[2], item, seen)
        right = _reads(children[1], item, seen)
        return _At(right.path, True)
    if kind == "flatten":
        return _reads(children[0], at, seen)
    if kind == "value_projection":
        _reads(children[0], at, seen)
        _reads(children[1], _UNKNOWN, seen)
        return _UNKNOWN
    if kind == "pipe":
        return _reads(children[1], _reads(children[0], at, seen), seen)
    if kind == "expref":
        _reads(children[0], _UNKNOWN, seen)
        return _UNKNOWN
    for child in children:  # comparators, and/or/not, functions, multi-selects, key/value pairs
        _reads(child, at, seen)
    return _UNKNOWN


def _obj(**properties: Schema) -> Schema:
    return {"type": "object", "properties": properties}


def _arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_BOOL: Schema = {"type": "boolean"}

# batch/v1 Job, enough of the real API for rules to read (pod template details are not modelled).
_JOB: Schema = _obj(
    apiVersion=_STR,
    kind=_STR,
    metadata={"type": "object"},
    spec=_obj(
        activeDeadlineSeconds=_INT,
        backoffLimit=_INT,
        backoffLimitPerIndex=_INT,
        completionMode=_STR,
        completions=_INT,
        managedBy=_STR,
        manualSelector=_BOOL,
        maxFailedIndexes=_INT,
        parallelism=_INT,
        podFailurePolicy=_obj(
            rules=_arr(
                _obj(
                    action=_STR,
                    onExitCodes=_obj(containerName=_STR, operator=_STR, values=_arr(_INT)),
                    onPodConditions=_arr(_obj(status=_STR, type=_STR)),
                )
            )
        ),
        podReplacementPolicy=_STR,
        selector=_obj(
            matchExpressions=_arr(_obj(key=_STR, operator=_STR, values=_arr(_STR))),
            matchLabels={"type": "object", "additionalProperties": _STR},
        ),
        successPolicy=_obj(rules=_arr(_obj(succeededCount=_INT, succeededIndexes=_STR))),
        suspend=_BOOL,
        template=_ANY,
        ttlSecondsAfterFinished=_INT,
    ),
    status=_obj(
        active=_INT,
        completedIndexes=_STR,
        completionTime=_STR,
        conditions=_arr(
            _obj(
                lastProbeTime=_STR,
                lastTransitionTime=_STR,
                message=_STR,
                reason=_STR,
                status=_STR,
                type=_STR,
            )
        ),
        failed=_INT,
        failedIndexes=_STR,
        ready=_INT,
        startTime=_STR,
        succeeded=_INT,
        terminating=_INT,
        uncountedTerminatedPods=_obj(failed=_arr(_STR), succeeded=_arr(_STR)),
    ),
)

_BUILTIN: Mapping[GVK, Schema] = {("batch", "v1", "Job"): _JOB}
