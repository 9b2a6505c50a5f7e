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


# How an application treats the document and the values the patch places (see `check`).
_COPY, _COPY_ON_WRITE, _CONSUME = 0, 1, 2


def apply(doc: Any, patch: Iterable[dict[str, Any]]) -> Any:
    """The document after `patch`, sharing no node with `doc` or the patch (both are left
    untouched). Raises PatchError."""
    return _run(copy.deepcopy(doc), patch, _COPY)


def check(doc: Any, patch: Iterable[dict[str, Any]], consume: bool = False) -> None:
    """Raise the PatchError `apply(doc, patch)` would raise, if any, without copying `doc`.

    The patch is applied copy-on-write: only the arrays and objects along the paths it writes
    are copied, one level each, into `_Own*` types that mark them as copies (the values it adds
    are placed as they are, and copied in turn if a later op writes into them), so `doc` and the
    patch are left untouched and the cost does not grow with the size of the document. Exact
    for documents decoded from JSON, where no node is reachable by two paths (`apply`'s deep
    copy would keep such sharing).

    With `consume`, the caller gives `doc` up: it is written in place, and only the values the
    patch places are copied (one level, when placed, and below that when written into), so the
    patch is still left untouched. Its values must share no node with `doc`.
    """
    _run(doc, patch, _CONSUME if consume else _COPY_ON_WRITE)


class _OwnDict(dict):
    """A copy made by `check`: written in place from then on."""


class _OwnList(list):
    """A copy made by `check`: written in place from then on."""


def _run(doc: Any, patch: Iterable[dict[str, Any]], mode: int) -> Any:
    """Apply the ops in turn: into `doc` as the caller's own copy, copying each value as it is
    placed (_COPY); copy-on-write (_COPY_ON_WRITE); or into `doc` given up (_CONSUME)."""
    for number, op in enumerate(patch):
        try:
            doc = _apply_one(doc, op, mode)
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


def _apply_one(doc: Any, op: Any, mode: int) -> Any:
    """`doc` after `op`."""
    if not isinstance(op, dict):
        raise PatchError("an operation must be an object")
    name, path = op.get("op"), op.get("path")
    if not isinstance(path, str):
        raise PatchError("'path' must be a string")
    if name in ("add", "replace", "test") and "value" not in op:
        raise PatchError(f"'{name}' needs a 'value'")
    if name == "add" or name == "replace":
        value = op["value"]
        if mode == _CONSUME:
            value = _own(value)   # written into later: its own top level; deeper, copy-on-write
        elif mode == _COPY:
            value = copy.deepcopy(value)
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
    if mode == _COPY_ON_WRITE:
        doc = _own(doc)
    parent = _get(doc, _tokens(where), mode)
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


def _get(doc: Any, parts: tuple[str, ...] | list[str], mode: int = _COPY) -> Any:
    """The node at `parts`, which may then be written. Copy-on-write, every array and object on
    the way (`doc` must be owned already) is replaced by a copy of its own; consuming, only those
    below a copy (which was placed from the patch) are."""
    node = doc
    plain = mode != _COPY_ON_WRITE   # steps into plain objects copy nothing: the common step
    try:
        for part in parts:
            kind = type(node)
            if kind is dict and plain:
                node = node[part]
                continue
            if isinstance(node, dict):
                key: str | int = part
                child = node[part]
            elif isinstance(node, list):
                key = _index(part, len(node))
                child = node[key]
            else:
                raise PatchError(f"cannot descend into a {kind.__name__} with {part!r}")
            if mode and (mode == _COPY_ON_WRITE or kind in _OWNED) and type(child) not in _OWNED \
                    and isinstance(child, (dict, list)):
                child = node[key] = _own(child)
            node = child
    except KeyError:   # only an object's missing member raises it
        raise PatchError(f"no member {part!r}") from None
    return node


def _own(node: Any) -> Any:
    """`node` if it is a copy made by `check` (or not an array or object), else such a copy."""
    if type(node) in _OWNED:
        return node
    if isinstance(node, dict):
        return _OwnDict(node)
    if isinstance(node, list):
        return _OwnList(node)
    return node


_OWNED = (_OwnDict, _OwnList)
