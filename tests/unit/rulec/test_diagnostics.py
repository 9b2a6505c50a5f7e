"""Diagnostics: one golden input per code, rendered concise and full, compared byte for byte.

Refresh the expected files with JOBRULES_UPDATE_GOLDENS=1 and review them as a diff.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rulec import api, diagnostics
from rulec.source import Span

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "diagnostics"
INPUTS = sorted(GOLDEN.glob("*.rules"))
UPDATE = os.environ.get("JOBRULES_UPDATE_GOLDENS") == "1"


def _build(path: Path) -> api.Build:
    crd = path.with_suffix(".crd.yaml")
    relative = path.relative_to(ROOT).as_posix()
    crds = [crd.relative_to(ROOT).as_posix()] if crd.exists() else []
    return api.build([relative], crds, emit_plan=False)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("fmt", ["concise", "full"])
def test_golden(path: Path, fmt: str) -> None:
    result = _build(path)
    text = diagnostics.render(result.diagnostics, fmt, result.sources)
    expected = path.with_suffix(f".{fmt}")
    if UPDATE:
        expected.write_text(text, encoding="utf-8")
    assert expected.exists(), f"missing {expected.name}: run with JOBRULES_UPDATE_GOLDENS=1"
    assert text == expected.read_text(encoding="utf-8")


@pytest.mark.parametrize("code", diagnostics.CODES, ids=lambda c: c.code)
def test_every_code_has_a_golden_that_reports_it(code: diagnostics.Code) -> None:
    path = GOLDEN / f"{code.code}-{code.name}.rules"
    assert path.exists(), f"no golden input {path.name}"
    assert code.code in {d.code for d in _build(path).diagnostics}


def test_every_golden_names_a_code() -> None:
    known = {f"{c.code}-{c.name}" for c in diagnostics.CODES}
    assert {p.stem.split(".")[0] for p in INPUTS} <= known


def test_registry_is_consistent() -> None:
    codes = [c.code for c in diagnostics.CODES]
    names = [c.name for c in diagnostics.CODES]
    assert len(set(codes)) == len(codes) and len(set(names)) == len(names)
    for c in diagnostics.CODES:
        assert c.severity in (diagnostics.ERROR, diagnostics.WARNING)
        assert c.summary and c.doc and c.name == c.name.lower()
        assert diagnostics.lookup(c.code) is c and diagnostics.lookup(c.name) is c


SAMPLE = diagnostics.make(
    "unknown-kind", Span("a.rules", 3, 5, 3, 9), 'no kind "x, y"\n', help="did you mean `x`?")


def test_json_rendering() -> None:
    [item] = json.loads(diagnostics.render([SAMPLE], "json", {}))
    assert item["code"] == "R101" and item["name"] == "unknown-kind"
    assert (item["path"], item["line"], item["column"]) == ("a.rules", 3, 5)
    assert item["help"] == "did you mean `x`?" and item["notes"] == []


def test_github_rendering_escapes() -> None:
    raw = diagnostics.Diagnostic("R101", "error", 'no kind "x, y"\n', SAMPLE.span)
    line = diagnostics.render([raw], "github", {})
    assert line.startswith("::error file=a.rules,line=3,col=5,endLine=3,endColumn=9,")
    assert "title=R101 unknown-kind::" in line
    assert line.count("\n") == 1 and "%0A" in line


@pytest.mark.parametrize("fmt", ["concise", "full", "github"])
def test_a_message_quoting_a_line_break_stays_one_line(fmt: str) -> None:
    d = diagnostics.make("invalid-key", SAMPLE.span, 'invalid label key "a\nb\tc\x1b"',
                         help="not\nthis", notes=[diagnostics.Note("see\nhere")])
    assert d.message == 'invalid label key "a\\nb\\tc\\x1b"'
    assert (d.help, d.notes[0].message) == ("not\\nthis", "see\\nhere")
    out = diagnostics.render([d], fmt, {})
    assert "\x1b" not in out and "a\\nb" in out


DOC = ROOT / "docs" / "language.md"
START, END = "<!-- codes:start -->\n", "<!-- codes:end -->\n"


def _codes_table() -> str:
    rows = ["| code | name | severity | what |", "|---|---|---|---|"]
    # Each code has an anchor of its own: the helpUri of each SARIF rule links to it.
    rows += [f'| <a id="{c.code.lower()}"></a>{c.code} | `{c.name}` | {c.severity} | {c.summary} |'
             for c in diagnostics.CODES]
    return "\n".join(rows) + "\n"


def test_language_reference_lists_every_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    if UPDATE:
        DOC.write_text(head + START + _codes_table() + END + tail, encoding="utf-8")
        text = DOC.read_text(encoding="utf-8")
    assert START + _codes_table() + END in text


def test_concise_carries_the_suggestion_and_every_note_at_its_position() -> None:
    d = diagnostics.make("conflicting-injection", Span("a.rules", 13, 5, 13, 9), "set differently",
                         help="did you mean `x`?", notes=(
                             diagnostics.Note("set here", Span("b.rules", 8, 5, 8, 9)),
                             diagnostics.Note("no place of its own")))
    assert diagnostics.render([d], "concise", {}) == (
        "a.rules:13:5: error[R501] set differently (did you mean `x`?)\n"
        "b.rules:8:5: note: set here\n"
        "a.rules:13:5: note: no place of its own\n")
    other = diagnostics.make("unknown-kind", Span("a.rules", 1, 1, 1, 2), "x", help="add a kind")
    assert diagnostics.render([other], "concise", {}) == "a.rules:1:1: error[R101] x\n"


@pytest.mark.parametrize("char, shown", [
    ("a", "`a`"), ("é", "`é`"), ("@", "`@`"),
    (" ", "U+0020 (space)"), ("\u00a0", "U+00A0 (no-break space)"),
    ("\u200b", "U+200B (zero width space)"), ("\ufeff", "U+FEFF (byte order mark)"),
    ("\x00", "U+0000 (null)"), ("\t", "U+0009 (tab)"), ("\x7f", "U+007F (delete)"),
    ("\x01", "U+0001 (control character)"),
])
def test_characters_are_shown_so_that_they_can_be_seen(char: str, shown: str) -> None:
    assert diagnostics.show_char(char) == shown


def test_full_shows_control_characters_as_their_pictures() -> None:
    from rulec.source import SourceFile

    source = SourceFile.from_text("a.rules", "job j: v1 Pod {\x00 }\n")
    d = diagnostics.make("syntax-error", Span("a.rules", 1, 16, 1, 17), "unexpected")
    text = diagnostics.render([d], "full", {"a.rules": source})
    assert "1 | job j: v1 Pod {\u2400 }\n  |                ^\n" in text and "\x00" not in text
