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


# -- the helpers, case by case (Kubernetes' own forms as the oracle) ---------------------------

@pytest.mark.parametrize("text, expected", [
    ("1e3", 1000), ("1E3", 1000), ("1e+3", 1000), ("5e-3", 0.005), ("2E", 2 * 10**18),
    ("1Ei", 2**60), ("1Pi", 2**50), ("3Ti", 3 * 2**40), ("1P", 10**15), ("1T", 10**12),
    ("1M", 10**6), ("4Ki", 4096), ("2n", 2e-9), ("3u", 3e-6), ("+5", 5), ("-5", -5),
    (".5", 0.5), ("5.", 5), (" 64Mi ", 64 * 2**20), ("1.5Gi", 1.5 * 2**30),
])
def test_quantities(text: str, expected: float) -> None:
    assert functions.quantity(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["1e", "1ex", "1e3i", "1E+", "12Q", "Mi", "", "1 Mi", "1m5", "e3", "1eX3", "1k3", "1e+-3x"])
def test_not_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        functions.quantity(text)


def test_whole_numbers_are_ints_and_others_floats() -> None:
    """JSON output shows `600`, not `600.0`."""
    assert type(functions.quantity("600")) is int and type(functions.quantity("2k")) is int
    assert type(functions.quantity("250m")) is float
    assert jmespath.search("duration('1.5s')", {}, functions.options(NOW)) == 1.5
    assert type(jmespath.search("duration('2m')", {}, functions.options(NOW))) is int
    assert type(jmespath.search("age(t)", {"t": "2024-05-01T12:09:59Z"}, functions.options(NOW))) is int


@pytest.mark.parametrize("text, seconds", [
    (" 10m ", 600), ("1d2h3m4s", 93784), ("500ms", 0.5), ("2.5m", 150), ("1.5", 1.5), ("0s", 0),
])
def test_more_durations(text: str, seconds: float) -> None:
    assert functions.seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "  ", "10x", "x10m", "10m x", "10m5", "1m 2s", "m", "10mm", "5s10"])
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        functions.seconds(text)


def test_a_timestamp_without_a_zone_is_utc() -> None:
    moment = functions.timestamp("2024-05-01T12:00:00")
    assert moment is not None and moment.utcoffset() is not None
    assert moment == datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    assert functions.timestamp("") is None and functions.timestamp("2024-13-01T00:00:00Z") is None


def test_rfc3339_is_utc_in_whole_seconds() -> None:
    from datetime import timedelta
    moment = datetime(2024, 5, 1, 14, 0, 0, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert functions.rfc3339(moment) == "2024-05-01T12:00:00Z"


def test_rfc3339_does_not_depend_on_the_machine_s_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert functions.rfc3339(datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)) == "2024-05-01T12:00:00Z"
    finally:
        monkeypatch.undo()
        time.tzset()
