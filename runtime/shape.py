"""Type checks for decoded JSON that the runtime reads back (plans, stored state).

Each check names where a value went wrong; the plan loader and the state decoder turn a
ShapeError into their own error type at their entry points.
"""

from __future__ import annotations

import json
from typing import Any, Mapping


class ShapeError(ValueError):
    """A decoded JSON value of the wrong shape, with the place it was found."""


class NotJSON(ShapeError):
    """Text that is not JSON at all, or nests too deeply to decode."""


def load(text: str) -> Any:
    """JSON text that anyone may have written (an annotation), decoded; a NotJSON saying why,
    never another exception, when it cannot be."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise NotJSON(f"not JSON ({err})") from None
    except RecursionError:
        raise NotJSON("nested too deeply to be read") from None


def obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ShapeError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ShapeError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ShapeError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def opt_string(value: Any, where: str) -> str | None:
    return None if value is None else string(value, where)


def integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ShapeError(f"{where}: expected an integer, got {value!r}")
    return value


def count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ShapeError(f"{where}: expected a non-negative integer, got {value!r}")
    return value
