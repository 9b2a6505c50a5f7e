"""JMESPath custom functions: the clock is the evaluation's, durations and quantities are numbers."""

from __future__ import annotations

from datetime import datetime, timezone

import jmespath
import jmespath.exceptions
import pytest

from runtime import functions

NOW = datetime(2024, 5, 1, 12, 10, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("expr, data, expected", [
    ("now()", {}, "2024-05-01T12:10:00Z"),
    ("age(t)", {"t": "2024-05-01T12:00:00Z"}, 600),
    ("age(t)", {"t": "2024-05-01T12:00:00+02:00"}, 7800),
    ("age(t)", {}, None),
    ("age(t)", {"t": "yesterday"}, None),
    ("age(t) > duration('5m')", {"t": "2024-05-01T12:00:00Z"}, True),
    ("duration('10m')", {}, 600),
    ("duration('1h30m')", {}, 5400),
    ("duration('1d')", {}, 86400),
    ("duration('1.5h')", {}, 5400),
    ("duration('250ms')", {}, 0.25),
    ("duration('45')", {}, 45),
    ("quantity('512Mi')", {}, 512 * 2**20),
    ("quantity('1Gi')", {}, 2**30),
    ("quantity('250m')", {}, 0.25),
    ("quantity('2k')", {}, 2000),
    ("quantity('1.5G')", {}, 1_500_000_000),
    ("quantity('1e3')", {}, 1000),
    ("quantity('8')", {}, 8),
    ("quantity(`8`)", {}, 8),
    ("quantity(r.limits.memory) > quantity('100Mi')", {"r": {"limits": {"memory": "200Mi"}}}, True),
    ("regex_match('^train-', name)", {"name": "train-master-0"}, True),
    ("regex_match('master-[0-9]+$', name)", {"name": "train-master-x"}, False),
    ("regex_match('x', missing)", {}, False),
])
def test_functions(expr: str, data: dict, expected: object) -> None:
    assert jmespath.search(expr, data, functions.options(NOW)) == expected


@pytest.mark.parametrize("expr", [
    "duration('ten minutes')", "duration('')", "quantity('12Q')", "quantity('Mi')",
    "regex_match('(', 'x')", "duration(`1`)",
])
def test_bad_arguments_are_jmespath_errors(expr: str) -> None:
    with pytest.raises(jmespath.exceptions.JMESPathError):
        jmespath.search(expr, {}, functions.options(NOW))


def test_the_clock_is_per_options_not_global() -> None:
    later = datetime(2024, 5, 1, 13, 0, 0, tzinfo=timezone.utc)
    first, second = functions.options(NOW), functions.options(later)
    expr = jmespath.compile("now()")
    assert (expr.search({}, first), expr.search({}, second)) == ("2024-05-01T12:10:00Z",
                                                                 "2024-05-01T13:00:00Z")


def test_names_lists_only_our_functions() -> None:
    assert functions.NAMES == ("age", "duration", "now", "quantity", "regex_match")


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("10m", 600), ("2h", 7200), ("1h30m", 5400)])
def test_seconds(text: str, seconds: float) -> None:
    assert functions.seconds(text) == seconds


def test_timestamp_round_trip() -> None:
    assert functions.rfc3339(functions.timestamp("2024-05-01T12:00:00Z")) == "2024-05-01T12:00:00Z"
    assert functions.timestamp(None) is None and functions.timestamp(17) is None
