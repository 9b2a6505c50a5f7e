"""Fuzzing `rulec check` with damaged copies of the shipped rules: it never crashes, exits
0/1, and every finding (and note) points inside the file."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rulec import fmt
from rulec.commands import cli

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = sorted((ROOT / "rules").glob("*.rules")) or sorted(
    (ROOT / "tests" / "golden" / "fmt").glob("*.rules"))
TEXTS = [p.read_text() for p in SAMPLES]
TOKEN = re.compile(r"<<.*?>>|\"(?:[^\"\\\n]|\\.)*\"|\w[\w.-]*|\S", re.S)
# A finding, or one of its notes (concise output puts each on a line of its own).
FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): "
                     r"(?:(?:error|warning)\[R\d{3}\]|note:) ", re.M)
ALPHABET = st.sampled_from(list('{}[]()<>"\'`#\\,.:=!-|&@ \n\t') + ["<<", ">>", "->", "..",
                                                                    "when", "on", "pod", "x"])


@st.composite
def damaged(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 6))):
        tokens = [m.span() for m in TOKEN.finditer(text)]
        kind = draw(st.sampled_from(["delete", "insert", "swap", "drop-token", "dup-token",
                                     "swap-tokens"]))
        if kind in ("drop-token", "dup-token", "swap-tokens") and len(tokens) > 2:
            i = draw(st.integers(0, len(tokens) - 2))
            (a, b), (c, d) = tokens[i], tokens[i + 1]
            if kind == "drop-token":
                text = text[:a] + text[b:]
            elif kind == "dup-token":
                text = text[:b] + " " + text[a:b] + text[b:]
            else:
                text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        elif text:
            i = draw(st.integers(0, len(text) - 1))
            if kind == "delete":
                text = text[:i] + text[i + 1:]
            elif kind == "insert":
                text = text[:i] + draw(ALPHABET) + text[i:]
            elif i + 1 < len(text):
                text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
    return text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=damaged())
def test_check_survives_damage(text: str, workdir: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    path = workdir / "damaged.rules"
    path.write_text(text)
    code = cli.main(["check", str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "Traceback" not in out + err and "internal error" not in err
    lines = text.split("\n")
    for m in FINDING.finditer(out):
        line, col = int(m["line"]), int(m["col"])
        assert m["path"] == str(path)
        assert 1 <= line <= len(lines), m.group()
        assert 1 <= col <= len(lines[line - 1]) + 1, m.group()
    assert len(FINDING.findall(out)) == out.count("\n")
    formatted = fmt.format_text(text)
    assert fmt.format_text(formatted) == formatted
