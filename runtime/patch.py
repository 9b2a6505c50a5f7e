"""RFC 6902 JSON Patch: pointer escaping, op builders, and an exact applier for add/replace/remove/test.

The mutator emits patches that the API server applies; `rulec mutate` applies them itself to show
the resulting pod. Only the four ops the mutator emits are supported, and each follows the RFC to
the letter (no creating missing parents, strict array indexes, type-exact `test`), so a patch that
applies here applies on the server.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any, Iterable

_BAD_ESCAPE = re.compile(r"~(?![01])")


class PatchError(ValueError):
    """A patch that does not apply to the document, or is not a well-formed patch."""


def escape(token: str | int) -> str:
    """One reference token as written in a JSON Pointer: `~` -> `~0`, then `/` -> `~1`."""
    text = token if isinstance(token, str) else str(token)
    if "~" in text or "/" in text:
        return text.replace("~", "~0").replace("/", "~1")
    return text


def pointer(*tokens: str | int) -> str:
    """The JSON Pointer naming `tokens` from the root (no tokens: the root itself)."""
    return "".join("/" + escape(t) for t in tokens)


def tokens(path: str) -> list[str]:
    """The unescaped reference tokens of a JSON Pointer (RFC 6901)."""
    if path == "":
        return []
    if path[0] != "/":
        raise PatchError(f"pointer {path!r} does not start with '/'")
    parts = path[1:].split("/")
    if "~" not in path:
        return parts
    if _BAD_ESCAPE.search(path):   # a `~` before `/` or at the end is as bad as `~2`
        raise PatchError(f"pointer {path!r} has an invalid '~' escape")
    return [p.replace("~1", "/").replace("~0", "~") if "~" in p else p for p in parts]


def add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


def remove(path: str) -> dict[str, Any]:
    return {"op": "remove", "path": path}


def test(path: str, value: Any) -> dict[str, Any]:
    return {"op": "test", "path": path, "value": value}


def apply(doc: Any, patch: Iterable[dict[str, Any]]) -> Any:
    """The document after `patch`, sharing no node with `doc` or the patch (both are left
    untouched). Raises PatchError."""
    doc = copy.deepcopy(doc)
    for number, op in enumerate(patch):
        try:
            doc = _apply_one(doc, op)
        except PatchError as err:
            raise PatchError(f"op {number} ({_describe(op)}): {err}") from None
    return doc


def equal(a: Any, b: Any) -> bool:
    """JSON equality as RFC 6902 `test` defines it: numbers by value, but true is not 1."""
    if type(a) is str:
        return type(b) is str and a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _describe(op: Any) -> str:
    if isinstance(op, dict):
        return f"{op.get('op')} {op.get('path')!r}"
    return repr(op)


def _apply_one(doc: Any, op: Any) -> Any:
    """`doc` (the caller's own copy) after `op`, written in place where it can be."""
    if not isinstance(op, dict):
        raise PatchError("an operation must be an object")
    name, path = op.get("op"), op.get("path")
    if not isinstance(path, str):
        raise PatchError("'path' must be a string")
    if name in ("add", "replace", "test") and "value" not in op:
        raise PatchError(f"'{name}' needs a 'value'")
    if name == "add" or name == "replace":
        value = copy.deepcopy(op["value"])
    elif name == "test":
        if not equal(_get(doc, _tokens(path)), op["value"]):
            raise PatchError("test failed: value differs")
        return doc
    elif name == "remove":
        value = None
    else:
        raise PatchError(f"unsupported op {name!r}")
    if path == "":
        if name == "remove":
            raise PatchError("cannot remove the whole document")
        return value
    where, last = _split(path)
    parent = _get(doc, _tokens(where))
    if isinstance(parent, dict):
        if name != "add" and last not in parent:
            raise PatchError(f"no member {last!r} to {name}")
        if name == "remove":
            del parent[last]
        else:
            parent[last] = value
    elif isinstance(parent, list):
        if name == "add" and last == "-":
            parent.append(value)
        else:
            index = _index(last, len(parent) + (name == "add"))
            if name == "add":
                parent.insert(index, value)
            elif name == "remove":
                del parent[index]
            else:
                parent[index] = value
    else:
        raise PatchError(f"parent of {path!r} is not an object or array")
    return doc


@functools.lru_cache(maxsize=4096)
def _tokens(path: str) -> tuple[str, ...]:
    """`tokens`, remembered: the same few paths come in every patch the mutator writes."""
    return tuple(tokens(path))


@functools.lru_cache(maxsize=4096)
def _split(path: str) -> tuple[str, str]:
    """The pointer of the parent of `path` (not the root) and the last token, unescaped."""
    return path.rpartition("/")[0], _tokens(path)[-1]


def _index(token: str, bound: int) -> int:
    # RFC 6901 array index: "0", or ASCII digits without a leading zero
    if not (token.isdigit() and token.isascii() and (token[0] != "0" or token == "0")):
        raise PatchError(f"{token!r} is not an array index")
    index = int(token)
    if index >= bound:
        raise PatchError(f"array index {index} out of range")
    return index


def _get(doc: Any, parts: tuple[str, ...]) -> Any:
    """The node at `parts`."""
    node = doc
    for part in parts:
        if isinstance(node, dict):
            if part not in node:
                raise PatchError(f"no member {part!r}")
            node = node[part]
        elif isinstance(node, list):
            node = node[_index(part, len(node))]
        else:
            raise PatchError(f"cannot descend into a {type(node).__name__} with {part!r}")
    return node
