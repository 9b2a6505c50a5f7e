"""JMESPath functions that rules may call, and the time helpers they share with the evaluator.

Rules compare ages and sizes, which plain JMESPath cannot: it has no clock, no durations and no
Kubernetes quantities. The clock is the evaluation time handed in by the caller, never the wall
clock, so an evaluation is a pure function of its inputs: `options(now)` builds the (cheap)
`jmespath.Options` for one evaluation, and every compiled expression is searched with it.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

import jmespath
import jmespath.exceptions
import jmespath.functions

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(.*)")
_SUFFIX: dict[str, Decimal | int] = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def timestamp(value: object) -> datetime | None:
    """A Kubernetes (RFC 3339) timestamp as an aware datetime; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def rfc3339(moment: datetime) -> str:
    """The form Kubernetes writes: UTC, whole seconds, `Z`."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(value: str) -> float:
    """`'1h30m'` -> 5400.0; a bare number is seconds. Raises ValueError on anything else."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    total, pos = 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {value!r}")
    return total


def quantity(value: str) -> float:
    """A Kubernetes quantity (`512Mi`, `250m`, `1.5G`, `1e3`) as a plain number."""
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    try:
        if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit():
            amount = Decimal(number) * Decimal(10) ** int(suffix[1:])
        else:
            amount = Decimal(number) * _SUFFIX[suffix]
    except (KeyError, InvalidOperation):
        raise ValueError(f"not a quantity: {value!r}") from None
    return _number(float(amount))


def _number(value: float) -> float:
    """Whole numbers as int, so JSON output shows `600`, not `600.0`."""
    return int(value) if value == int(value) else value


@functools.lru_cache(maxsize=256)
def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text)


class RuleFunctions(jmespath.functions.Functions):
    """`now()`, `age(ts)`, `duration(s)`, `quantity(s)`, `regex_match(pattern, s)`."""

    def __init__(self, now: datetime) -> None:
        self._now = now

    @jmespath.functions.signature()
    def _func_now(self) -> str:
        return rfc3339(self._now)

    @jmespath.functions.signature({"types": ["string", "null"]})
    def _func_age(self, value: str | None) -> float | None:
        moment = timestamp(value)
        return None if moment is None else _number((self._now - moment).total_seconds())

    @jmespath.functions.signature({"types": ["string"]})
    def _func_duration(self, value: str) -> float:
        try:
            return _number(seconds(value))
        except ValueError as err:
            raise jmespath.exceptions.JMESPathError(f"duration(): {err}") from None

    @jmespath.functions.signature({"types": ["string", "number"]})
    def _func_quantity(self, value: str | float) -> float:
        if not isinstance(value, str):
            return value
        try:
            return quantity(value)
        except ValueError as err:
            raise jmespath.exceptions.JMESPathError(f"quantity(): {err}") from None

    @jmespath.functions.signature({"types": ["string"]}, {"types": ["string", "null"]})
    def _func_regex_match(self, pattern: str, value: str | None) -> bool:
        if value is None:
            return False
        try:
            return _pattern(pattern).search(value) is not None
        except re.error as err:
            raise jmespath.exceptions.JMESPathError(f"regex_match(): {err}") from None


NAMES = tuple(sorted(RuleFunctions.FUNCTION_TABLE.keys() - jmespath.functions.Functions.FUNCTION_TABLE.keys()))


def options(now: datetime) -> jmespath.Options:
    """Search options for one evaluation at time `now` (aware datetime)."""
    return jmespath.Options(custom_functions=RuleFunctions(now))
