"""The contextual lexer's scanners, without compiling one big regular expression per parser state.

Lark's contextual lexer gives every LALR state its own scanner: one alternation of the terminals
that state accepts, compiled the first time the state is met. A check of the shipped rules meets
some 80 states, and compiling their alternations took about 55 ms of a ~200 ms `rulec check` (the
parser itself loads from the cache). Here each terminal's pattern is compiled once per process
and a state tries its terminals one after another, in Lark's order. That is what an alternation
does: the first alternative that matches wins, with the text it matches alone, so the tokens are
the same (tests/unit/rulec/test_scanning.py compares both over every rules file the project has).

Plugged in through Lark's `_plugins` option (the `ContextualLexer` entry), for a built parser and
for one loaded from the cache alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import lark
from lark.lexer import (BasicLexer, ContextualLexer, Pattern, PatternRE, PatternStr, TerminalDef,
                        Token)

_COMPILED: dict[tuple[str, str, tuple[str, ...], int], re.Pattern[str]] = {}


def _compiled(pattern: Pattern, flags: int) -> re.Pattern[str]:
    """One compiled pattern per terminal and process, shared by every state that accepts it."""
    key = (pattern.type, pattern.value, tuple(pattern.flags), flags)
    found = _COMPILED.get(key)
    if found is None:
        found = _COMPILED[key] = re.compile(pattern.to_regexp(), flags)
    return found


class OrderedScanner:
    """Lark's `Scanner`, answering the same `match` and `fullmatch` from the terminals' own
    patterns tried in order."""

    def __init__(self, terminals: Iterable[TerminalDef], flags: int) -> None:
        listed = list(terminals)
        self.terminals = listed
        self.allowed_types = {t.name for t in listed}
        self._patterns = [(t.name, _compiled(t.pattern, flags)) for t in listed]

    def match(self, text: Any, pos: int) -> tuple[str, str] | None:
        """The first terminal matching at `pos` (text is Lark's `TextSlice`), as (value, type)."""
        string, end = text.text, text.end
        for name, pattern in self._patterns:
            m = pattern.match(string, pos, end)
            if m:
                return m.group(0), name
        return None

    def fullmatch(self, text: str) -> str | None:
        """The first terminal matching all of `text`."""
        for name, pattern in self._patterns:
            if pattern.fullmatch(text):
                return name
        return None


class _Unless:
    """A keyword matched by a name's pattern becomes that keyword (Lark's `UnlessCallback`)."""

    def __init__(self, scanner: OrderedScanner) -> None:
        self.scanner = scanner

    def __call__(self, token: Token) -> Token:
        found = self.scanner.fullmatch(token.value)
        if found is not None:
            token.type = found
        return token


class _Chain:
    """A keyword's callback, then the user's when the token is still of that type."""

    def __init__(self, first: Callable[[Token], Token], then: Callable[[Token], Token],
                 type_: str) -> None:
        self.first, self.then, self.type_ = first, then, type_

    def __call__(self, token: Token) -> Token:
        token = self.first(token)
        return self.then(token) if token.type == self.type_ else token


class OrderedBasicLexer(BasicLexer):
    """Lark's `BasicLexer` with an `OrderedScanner`; the keywords a name's pattern also matches
    are folded into that pattern as Lark folds them."""

    def _build_scanner(self) -> Any:
        flags = self.g_regex_flags
        strings = [t for t in self.terminals if isinstance(t.pattern, PatternStr)]
        folded: set[str] = set()
        self.callback = {}
        for pattern_term in (t for t in self.terminals if isinstance(t.pattern, PatternRE)):
            regexp = _compiled(pattern_term.pattern, flags)
            unless = []
            for string_term in strings:
                if string_term.priority != pattern_term.priority:
                    continue
                value = string_term.pattern.value
                m = regexp.match(value)
                if m and m.group(0) == value:
                    unless.append(string_term)
                    if set(string_term.pattern.flags) <= set(pattern_term.pattern.flags):
                        folded.add(string_term.name)
            if unless:
                self.callback[pattern_term.name] = _Unless(OrderedScanner(unless, flags))
        for type_, user in self.user_callbacks.items():
            known = self.callback.get(type_)
            self.callback[type_] = user if known is None else _Chain(known, user, type_)
        return OrderedScanner((t for t in self.terminals if t.name not in folded), flags)


class OrderedContextualLexer(ContextualLexer):
    """Lark's contextual lexer whose per-state lexers scan with `OrderedScanner`s."""

    BasicLexer = OrderedBasicLexer


PLUGINS: dict[str, type] = {"ContextualLexer": OrderedContextualLexer}


def load(f: Any, **options: Any) -> lark.Lark:
    """A parser saved with `Lark.save`, loaded with these scanners (Lark's public `load` takes
    no options)."""
    return lark.Lark.__new__(lark.Lark)._load(f, _plugins=PLUGINS, **options)
