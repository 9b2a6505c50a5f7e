"""Reading and building parts of Kubernetes objects, which are plain dicts everywhere.

Objects come from the API server, from files and from tests, and any part of one may have the
wrong shape; every reader here answers an empty value rather than raising, so the modules that
decide never spell out `(obj.get("metadata") or {}).get(...)` again. One builder makes every
REST path the controller sends requests to.
"""

# No `from __future__ import annotations`: this module defines a function by that name.
import re
from typing import Any, Mapping

Path = tuple[str, ...]
# A condition's reason and message as Kubernetes validates them (metav1.Condition).
CONDITION_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
CONDITION_REASON_MAX = 1024
CONDITION_MESSAGE_MAX = 32 * 1024


def obj(value: Any) -> Mapping[str, Any]:
    """`value` if it is an object, else {}."""
    return value if isinstance(value, dict) else {}


def objs(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list, skipping anything else; [] for what is not a list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def meta(o: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj(o.get("metadata"))


def name(o: Mapping[str, Any]) -> str | None:
    return text(meta(o).get("name"))


def namespace(o: Mapping[str, Any]) -> str | None:
    return text(meta(o).get("namespace"))


def uid(o: Mapping[str, Any]) -> str | None:
    return text(meta(o).get("uid"))


def resource_version(o: Mapping[str, Any]) -> str | None:
    return text(meta(o).get("resourceVersion"))


def annotations(o: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj(meta(o).get("annotations"))


def labels(o: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj(meta(o).get("labels"))


def annotation(o: Mapping[str, Any], key: str) -> str | None:
    return text(annotations(o).get(key))


def generation(o: Mapping[str, Any]) -> int | None:
    value = meta(o).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def deleting(o: Mapping[str, Any]) -> bool:
    return bool(meta(o).get("deletionTimestamp"))


def conditions(o: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`status.conditions`, only its objects."""
    value = obj(o.get("status")).get("conditions")
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def condition(o: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions(o) if c.get("type") == type_), None)


def condition_reason(value: str | None, otherwise: str) -> str:
    """`value` if it fits the condition schema (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at
    most 1,024), else `otherwise`: free text would make a kind whose conditions are
    metav1.Conditions (JobSet) reject the write."""
    if value and len(value) <= CONDITION_REASON_MAX and CONDITION_REASON.fullmatch(value):
        return value
    return otherwise


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def at(o: Any, path: Path) -> Any:
    """The value at `path` (field names), None where any step is missing or not an object."""
    for key in path:
        if not isinstance(o, dict):
            return None
        o = o.get(key)
    return o


def put(patch: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    """`value` set at `path` in a nested merge patch, making the objects on the way."""
    node = patch
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return patch


def merged(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Two merge patches as one (RFC 7386 objects merge key by key; anything else replaces)."""
    out = dict(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def bounded(value: str, limit: int) -> str:
    """`value` cut to `limit` characters, an ellipsis marking the cut."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
         subresource: str | None = None) -> str:
    """The REST path of a collection or an object. No `namespace` (None or "") is the path
    across all namespaces, which is also that of a cluster-scoped resource."""
    parts = ["/api/v1" if api_version == "v1" else f"/apis/{api_version}"]
    if namespace:
        parts += ["namespaces", namespace]
    parts.append(plural)
    parts += [p for p in (name, subresource) if p]
    return "/".join(parts)
