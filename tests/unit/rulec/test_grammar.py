"""The grammar builds without conflicts and is the one the installed package loads."""
from __future__ import annotations

from pathlib import Path

import lark
import pytest

from rulec import syntax

ROOT = Path(__file__).resolve().parents[3]
GRAMMAR = ROOT / "grammar" / "rules.lark"


def test_grammar_builds_strict() -> None:
    """strict=True fails on any shift/reduce conflict or terminal collision."""
    lark.Lark(GRAMMAR.read_text(), parser="lalr", lexer="contextual", strict=True,
              propagate_positions=True, maybe_placeholders=False)


def test_packaged_grammar_is_the_source_grammar() -> None:
    assert syntax.GRAMMAR.read_bytes() == GRAMMAR.read_bytes()


@pytest.mark.parametrize("path", sorted((ROOT / "rules").glob("*.rules")), ids=lambda p: p.name)
def test_shipped_rules_parse(path: Path) -> None:
    syntax.parser().parse(path.read_text())
