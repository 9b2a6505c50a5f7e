"""rulec.scanning against Lark's own contextual lexer: the same trees, comments and errors, over
every rules file the project has and over broken copies of them."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lark
import pytest

from rulec import scanning, syntax

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted(p for top in ("rules", "examples", "tests") for p in (ROOT / top).rglob("*.rules"))


class Sink:
    """Collects the comments the lexer hands to its callback, as `syntax` does."""

    def __init__(self) -> None:
        self.tokens: list[lark.Token] = []

    def __call__(self, token: lark.Token) -> lark.Token:
        self.tokens.append(token)
        return token


def build(plugins: dict[str, type] | None, sink: Sink) -> lark.Lark:
    options: dict[str, Any] = dict(parser="lalr", lexer="contextual", propagate_positions=True,
                                   maybe_placeholders=False, lexer_callbacks={"COMMENT": sink})
    if plugins is not None:
        options["_plugins"] = plugins
    return lark.Lark(syntax.GRAMMAR.read_text(encoding="utf-8"), **options)


@pytest.fixture(scope="module")
def pair() -> tuple[tuple[lark.Lark, Sink], tuple[lark.Lark, Sink]]:
    """Lark's stock parser and ours, each with its own comment sink (built once: about 2 s)."""
    stock_sink, ours_sink = Sink(), Sink()
    return (build(None, stock_sink), stock_sink), (build(scanning.PLUGINS, ours_sink), ours_sink)


def outcome(parser: lark.Lark, sink: Sink, text: str) -> tuple[object, ...]:
    """The tree with every token's type, text and place, and the comments; or the error with
    where it is and what was expected there."""
    sink.tokens = []
    try:
        tree = parser.parse(text)
    except lark.exceptions.UnexpectedCharacters as err:
        return ("characters", err.pos_in_stream, err.line, err.column, sorted(err.allowed or ()))
    except lark.exceptions.UnexpectedToken as err:
        token = err.token
        return ("token", token.type, str(token), token.start_pos, sorted(err.expected))
    except lark.exceptions.UnexpectedEOF as err:
        return ("eof", sorted(err.expected))
    tokens = [(t.type, str(t), t.start_pos, t.end_pos, t.line, t.column, t.end_line, t.end_column)
              for t in tree.scan_values(lambda v: isinstance(v, lark.Token))]
    comments = [(str(t), t.start_pos) for t in sink.tokens]
    return ("tree", tree, tokens, comments)


def test_there_are_files_to_compare() -> None:
    assert len(FILES) > 100 and any(p.parent.name == "rules" for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_rules_file_lexes_and_parses_the_same(path: Path, pair: Any) -> None:
    (stock, stock_sink), (ours, ours_sink) = pair
    text = path.read_text(encoding="utf-8")
    assert outcome(ours, ours_sink, text) == outcome(stock, stock_sink, text)


def test_broken_copies_fail_the_same(pair: Any) -> None:
    """Characters dropped, doubled or replaced at random places of every file: the same tree or
    the same error, at the same place, expecting the same. Some copies must fail and some parse,
    or this compares nothing."""
    (stock, stock_sink), (ours, ours_sink) = pair
    rng = random.Random(20261204)
    kinds: dict[str, int] = {}
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for _ in range(6):
            at = rng.randrange(len(text))
            change = rng.choice(["drop", "double", "replace"])
            broken = (text[:at] + text[at + 1:] if change == "drop" else
                      text[:at] + text[at] + text[at:] if change == "double" else
                      text[:at] + rng.choice("{}<>\"'`#:=.,[]() \nAZaz09-_|&!") + text[at + 1:])
            expected = outcome(stock, stock_sink, broken)
            assert outcome(ours, ours_sink, broken) == expected, (path, change, at)
            kinds[str(expected[0])] = kinds.get(str(expected[0]), 0) + 1
    assert kinds.get("tree", 0) > 50 and kinds.get("token", 0) + kinds.get("characters", 0) > 50, kinds


def test_the_product_parser_scans_with_it() -> None:
    parser = syntax.parser()
    assert isinstance(parser.parser.lexer, scanning.OrderedContextualLexer)
    assert isinstance(parser.parser.lexer.root_lexer, scanning.OrderedBasicLexer)


# Small grammars, each with the inputs that tell apart one rule of Lark's keyword handling (a
# rule the project's grammar may not exercise today): which keywords a name's pattern takes
# over, which it leaves to scan on their own, and how the user's callback follows.
SMALL = {
    "a case-insensitive keyword stays a terminal of its own":
        ('start: (WORD | "select"i)*\nWORD: /[a-z]+/\n%ignore " "\n',
         ["select SELECT Select selected", "SeLeCt x"]),
    "a keyword of another priority is not taken over":
        ('start: (WORD | WHEN)*\nWHEN.2: "when"\nWORD: /[a-z]+/\n%ignore " "\n',
         ["when whenever", "whenwhen w"]),
    "a keyword the pattern matches only the start of is not taken over":
        ('start: (SHORT | "a-b" | "-")*\nSHORT: /[a-z]{1,2}/\n%ignore " "\n',
         ["a-b", "ab a-b -", "a - b"]),
    "a keyword taken over is not expected where the name is not":
        ('start: (WORD | "let")* "."\nWORD: /[a-z]+/\n%ignore " "\n',
         ["let x .", "let 5", "x 7 let", "let ."]),
}


@pytest.mark.parametrize("name", SMALL)
def test_small_grammars_scan_the_same(name: str) -> None:
    grammar, inputs = SMALL[name]
    seen = {"stock": Sink(), "ours": Sink()}
    parsers = {}
    for who, plugins in (("stock", None), ("ours", scanning.PLUGINS)):
        options: dict[str, Any] = {"_plugins": plugins} if plugins else {}
        parsers[who] = lark.Lark(grammar, parser="lalr", lexer="contextual",
                                 lexer_callbacks={"WORD": seen[who]}, **options)
    for text in inputs:
        theirs = outcome(parsers["stock"], seen["stock"], text)
        assert outcome(parsers["ours"], seen["ours"], text) == theirs, text
        assert seen["ours"].tokens == seen["stock"].tokens, text


def test_the_users_callback_sees_names_not_keywords() -> None:
    """The callback of a name's terminal is not called for a keyword it matched."""
    seen = Sink()
    parser = lark.Lark('start: (WORD | "let")*\nWORD: /[a-z]+/\n%ignore " "\n', parser="lalr",
                       lexer="contextual", lexer_callbacks={"WORD": seen}, _plugins=scanning.PLUGINS)
    parser.parse("let x let yy")
    assert [str(t) for t in seen.tokens] == ["x", "yy"]


def test_a_slice_is_scanned_only_up_to_its_end() -> None:
    """A name is not read past the end of a `TextSlice`, as with Lark's scanner."""
    grammar = 'start: WORD*\nWORD: /[a-z]+/\n'
    for plugins in (None, scanning.PLUGINS):
        options: dict[str, Any] = {"_plugins": plugins} if plugins else {}
        parser = lark.Lark(grammar, parser="lalr", lexer="contextual", **options)
        tree = parser.parse(lark.TextSlice("abc", 0, 2))
        assert [(t.type, str(t)) for t in tree.children] == [("WORD", "ab")], plugins
