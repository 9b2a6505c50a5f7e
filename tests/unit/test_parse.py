"""Parsing and syntax errors: messages in words, one position format, the open block named."""
from __future__ import annotations

import pytest

from rulec import lower, syntax
from rulec.source import SourceFile


def error(text: str):
    parsed = syntax.parse(SourceFile.from_text("t.rules", text))
    assert parsed.tree is None
    [d] = parsed.diagnostics
    return d


@pytest.mark.parametrize("text,code,message,position", [
    ("job j: v1 Pod { on pod faild -> ignore }", "R002", "unknown pod event `faild`", (1, 24)),
    ("job j: v1 Pod { on pod failed -> restrat pod }", "R002", "unknown action `restrat`", (1, 34)),
    ("job j: v1 Pod { faild when any pod failed }", "R002", "unknown kind statement `faild`",
     (1, 17)),
    ("job j: v1 Pod { primry container \"x\" }", "R002", "unknown kind statement `primry`",
     (1, 17)),
    ("jbo j: v1 Pod {}", "R002", "unknown declaration `jbo`", (1, 1)),
    ("job j: v1 Pod { on pod failed exit 1 restart pod }", "R001",
     "unexpected `restart`; expected `and`, `or`, `->` or `..`", (1, 38)),
    ("job j: v1 Pod { failed when }", "R001", "unexpected `}`; expected a condition", (1, 29)),
    ("job j: v1 Pod { failed when any pod failed @ }", "R001", "unexpected character `@`",
     (1, 44)),
    ("job j: v1 Pod {\n  failed when <<a\n}\n", "R001", "this `<<` is never closed by `>>`",
     (2, 15)),
    ('job j: v1 Pod {\n  failed when any pod failed reason "x\n}\n', "R001",
     "this string is never closed", (2, 37)),
    ("job j: v1 Pod {\n  pods owned\n\n", "R001", "unexpected end of file", (2, 13)),
    ("job j: v1 Pod { failed when any pod failed with exit 1 and exit 2 }", "R001",
     "unexpected `exit`; expected a condition", (1, 60)),
])
def test_syntax_errors(text: str, code: str, message: str, position: tuple[int, int]) -> None:
    d = error(text)
    assert d.code == code and d.message.startswith(message), d.message
    assert (d.span.line, d.span.column) == position


def test_expected_words_not_token_names() -> None:
    d = error("job j: v1 Pod { on pod failed -> }")
    assert "an action (`fail job`" in d.message
    assert "__ANON" not in d.message and "RBRACE" not in d.message and "NAME" not in d.message


def test_filter_after_with_hints_at_parentheses() -> None:
    d = error("job j: v1 Pod { failed when any pod failed with exit 1 and exit 2 }")
    assert d.help is not None and "with (exit 1 and" in d.help


def test_misspelling_suggests_the_keyword() -> None:
    d = error("job j: v1 Pod { on pod evcted -> ignore }")
    assert d.help == "did you mean `evicted`?"


def test_keyword_in_the_wrong_place_is_not_unknown() -> None:
    d = error("job j: v1 Pod { on pod failed -> fail pod }")
    assert d.code == "R001" and d.message.startswith("unexpected `pod`; expected `job`")


def test_unclosed_block_at_end_of_file_names_its_opener() -> None:
    d = error('job j: v1 Pod {\n  status {\n    no events\n  }\n')
    [note] = d.notes
    assert note.message == "the block opened by this `{` is not closed"
    assert note.span is not None and (note.span.line, note.span.column) == (1, 15)


def test_error_inside_a_block_names_it() -> None:
    d = error('inject into pods of j {\n  sidecar "s" {\n    imag "x"\n  }\n}\n')
    assert d.message == "unknown word `imag`" or d.message.startswith("unknown")
    assert any(n.span is not None and n.span.line == 2 for n in d.notes)


def test_comments_are_collected_with_positions() -> None:
    parsed = syntax.parse(SourceFile.from_text(
        "t.rules", '# head\njob j: v1 Pod { # a\n  pods owned  # b\n}\n'))
    assert [(c.text, c.span.line, c.span.column) for c in parsed.comments] == [
        ("# head", 1, 1), ("# a", 2, 17), ("# b", 3, 15)]


def test_hash_inside_strings_and_expressions_is_not_a_comment() -> None:
    parsed = syntax.parse(SourceFile.from_text(
        "t.rules", 'job j: v1 Pod { failed when any pod failed reason "#1" message <<\'#\'>> }'))
    assert parsed.tree is not None and parsed.comments == ()


def test_expression_may_hold_closing_marks_in_literals() -> None:
    text = "job j: v1 Pod { failed when <<a == '>>' || b == `\">>\"` || \"x>>\" == c>> }"
    parsed = syntax.parse(SourceFile.from_text("t.rules", text))
    assert parsed.tree is not None
    out: list = []
    file = lower.lower(parsed, out)
    verdict = file.decls[0].verdicts[0]
    assert verdict.when.expr.text == "a == '>>' || b == `\">>\"` || \"x>>\" == c"
    assert (verdict.when.expr.line, verdict.when.expr.column) == (1, 31)


def test_string_may_embed_an_expression_with_double_quotes() -> None:
    text = 'job j: v1 Pod { failed when any pod failed message "x {<<labels."a/b">>} y" }'
    parsed = syntax.parse(SourceFile.from_text("t.rules", text))
    out: list = []
    message = lower.lower(parsed, out).decls[0].verdicts[0].message
    assert message.parts[0] == "x " and message.parts[2] == " y"
    assert message.parts[1].text == 'labels."a/b"' and message.parts[1].column == 58


@pytest.mark.parametrize("text,seconds", [("30s", 30), ("10m", 600), ("1h30m", 5400),
                                          ("1d", 86400)])
def test_durations(text: str, seconds: int) -> None:
    assert lower.duration_seconds(text) == seconds


@pytest.mark.parametrize("text,hint", [
    ("job j: v1 Pod { failed when pod failed }", "starts with a quantifier"),
    ("job j: v1 Pod { on pod failed restart pod }", "the action comes after `->`"),
    ("job j: v1 Pod { primary container main }", 'write "main"'),
    ("job j: v1 Pod { failed when any pod failed reason PodFailed }", 'write "PodFailed"'),
])
def test_hints(text: str, hint: str) -> None:
    d = error(text)
    assert d.help is not None and hint in d.help, d.help


def test_no_parenthesis_hint_without_with() -> None:
    d = error("job j: v1 Pod { failed when any pod failed and exit 1 }")
    assert d.help is None or "parenthesize" not in d.help
