"""`rulec fmt`: golden layout, idempotence, comments kept, the plan unchanged but for spans."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rulec import api, fmt
from rulec.source import SourceFile

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "fmt"
UPDATE = os.environ.get("JOBRULES_UPDATE_GOLDENS") == "1"
SAMPLES = sorted([*GOLDEN.glob("*.rules"), *(ROOT / "rules").glob("*.rules"),
                  *(ROOT / "tests" / "golden" / "diagnostics").glob("R[1-9]*.rules")])


def _comments(text: str) -> list[str]:
    return [c.text.rstrip() for c in fmt.syntax.parse(SourceFile.from_text("x", text)).comments]


def _plan_without_spans(text: str) -> Any:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("span", "sha256")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    build = api.build_sources([SourceFile.from_text("x.rules", text)])
    return strip(build.plan), [d.code for d in build.diagnostics]


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.rules")), ids=lambda p: p.stem)
def test_golden(path: Path) -> None:
    out = fmt.format_text(path.read_text())
    expected = path.with_suffix(".expected")
    if UPDATE:
        expected.write_text(out)
    assert out == expected.read_text()


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_idempotent_and_faithful(path: Path) -> None:
    text = path.read_text()
    once = fmt.format_text(text)
    assert fmt.format_text(once) == once
    assert _comments(once) == _comments(text)
    assert _plan_without_spans(once) == _plan_without_spans(text)


def test_file_that_does_not_parse_is_left_alone() -> None:
    result = fmt.format_source(SourceFile.from_text("bad.rules", "job x: v1 Pod {\n"))
    assert result.text == "job x: v1 Pod {\n"
    assert [d.code for d in result.diagnostics] == ["R001"]


_SPACES = re.compile(r"(?<=\S)[ \t]+(?=[^\s#])")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(SAMPLES), data=st.data())
def test_layout_ignores_spacing(path: Path, data: st.DataObject) -> None:
    """Changing the spaces between tokens (strings and expressions aside) changes nothing."""
    text = path.read_text()
    protected = _protected_ranges(text)
    widths = iter(data.draw(st.lists(st.integers(1, 4), min_size=len(text), max_size=len(text))))

    def respace(m: re.Match[str]) -> str:
        return m.group() if any(a <= m.start() < b for a, b in protected) else " " * next(widths)

    assert fmt.format_text(_SPACES.sub(respace, text)) == fmt.format_text(text)


def _protected_ranges(text: str) -> list[tuple[int, int]]:
    """Where strings, expressions and comments are: spaces inside them are content."""
    tree = fmt.syntax.parse(SourceFile.from_text("x", text), keep_all_tokens=True)
    assert tree.tree is not None
    ranges = [(t.start_pos, t.end_pos) for t in tree.tree.scan_values(lambda v: True)
              if getattr(t, "type", "") in ("STRING", "EXPR")]
    starts = SourceFile.from_text("x", text).line_starts
    for c in tree.comments:
        begin = starts[c.span.line - 1] + c.span.column - 1
        ranges.append((begin, begin + len(c.text)))
    return ranges
