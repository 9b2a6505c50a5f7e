"""Field paths checked against CRD schemas (`rulec check --crd`).

A typo in a JMESPath expression or a status path never fails at runtime: it silently reads
`null`. Checking the paths against the kind's OpenAPI schema turns that into a diagnostic.
Pure: reads the given files and nothing else; imported only when `--crd` is given.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jmespath.parser
import yaml

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
    """The `openAPIV3Schema` of every (group, version, kind) known, built-ins included."""

    schemas: Mapping[GVK, Schema] = field(hash=False)

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> tuple[SchemaIndex, list[str]]:
        """Index the CRDs in `paths` (multi-document YAML or a `kind: List`); never raises."""
        schemas: dict[GVK, Schema] = dict(_BUILTIN)
        errors: list[str] = []
        for path in paths:
            try:
                text = Path(path).read_text(encoding="utf-8")
                docs = list(yaml.load_all(text, Loader=_LOADER))
            except (OSError, UnicodeDecodeError) as exc:
                errors.append(f"{path}: cannot read: {exc}")
                continue
            except yaml.YAMLError as exc:
                errors.append(f"{path}: invalid YAML: {exc}")
                continue
            found = 0
            for doc in _documents(docs):
                found += 1
                errors.extend(f"{path}: {msg}" for msg in _index_crd(doc, schemas))
            if not found:
                errors.append(f"{path}: no CustomResourceDefinition found")
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


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def _index_crd(crd: Mapping[str, Any], into: dict[GVK, Schema]) -> list[str]:
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
        into[(group, str(_dig(version, "name")), kind)] = schema
    return errors


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
