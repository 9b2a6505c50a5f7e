"""Parsing: text to a Lark tree, and a syntax error to a diagnostic that says, in words, what
was expected there and which `{` is still open."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import sys
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, cast

from rulec import cache as disk_cache
from rulec import diagnostics
from rulec.diagnostics import Diagnostic, Note
from rulec.source import SourceFile, Span

if TYPE_CHECKING:
    import lark

# The packaged grammar; in the repository it is a link to grammar/rules.lark.
GRAMMAR = Path(__file__).with_name("rules.lark")


@dataclass(frozen=True, slots=True)
class Comment:
    span: Span
    text: str


@dataclass(frozen=True, slots=True)
class Parsed:
    source: SourceFile
    tree: "lark.Tree | None"           # None when the file has a syntax error
    comments: tuple[Comment, ...]
    diagnostics: tuple[Diagnostic, ...]
    # After a syntax error, with `recover`: the declarations that parsed cleanly, and the kind
    # and define names the broken declarations may declare (references to them are not errors).
    partial: "lark.Tree | None" = None
    unsure: frozenset[str] = frozenset()

    @property
    def decls(self) -> "lark.Tree | None":
        """The tree to lower: the whole file, or after recovery the declarations that parsed."""
        return self.tree if self.tree is not None else self.partial


class _CommentSink:
    """Lexer callback collecting the comments of the parse in progress."""

    __slots__ = ("tokens",)

    def __init__(self) -> None:
        self.tokens: list[lark.Token] = []

    def __call__(self, token: "lark.Token") -> "lark.Token":
        self.tokens.append(token)
        return token

    def __reduce__(self) -> str:
        """Pickled by name, so that a parser loaded from the cache feeds `_SINK` itself."""
        return "_SINK"


_SINK = _CommentSink()
_LOCK = threading.Lock()


@cache
def parser(keep_all_tokens: bool = False) -> "lark.Lark":
    """The LALR parser, built once per process. Building it takes Lark some 0.7 s, loading a
    built one some 35 ms, so it is kept in the cache folder `parser` (rulec.cache), named by
    what it is made from: the grammar, the options, Lark's version and Python's. An entry that
    cannot be read or loaded is built again and replaced. Its lexer scans with
    `rulec.scanning`, which spares each parser state compiling a regular expression of its own."""
    import lark

    from rulec import scanning

    grammar = GRAMMAR.read_text(encoding="utf-8")
    options = dict(parser="lalr", lexer="contextual", propagate_positions=True,
                   maybe_placeholders=False, keep_all_tokens=keep_all_tokens)
    name = cached_parser_name(grammar, options, lark.__version__)
    folder = disk_cache.folder("parser")
    if folder is not None:
        try:
            with open(folder / name, "rb") as f:
                return scanning.load(f)
        except Exception:  # missing, unreadable, or damaged (unpickling it may raise anything)
            pass
    built = lark.Lark(grammar, **options, lexer_callbacks={"COMMENT": _SINK},
                      _plugins=scanning.PLUGINS)
    if folder is not None:
        saved = io.BytesIO()
        built.save(saved)
        disk_cache.write(folder, name, saved.getvalue())
    return built


def cached_parser_name(grammar: str, options: Mapping[str, object], lark_version: str) -> str:
    """The name of the cache entry of the parser made from these (and this Python)."""
    made_from = repr((grammar, sorted(options.items()), lark_version, sys.version_info[:2]))
    return f"{hashlib.sha256(made_from.encode()).hexdigest()}.pickle"


def parse(source: SourceFile, keep_all_tokens: bool = False, *,
          recover: bool = False) -> Parsed:
    """Parse one file. On a syntax error `tree` is None; with `recover`, every top-level
    declaration is then parsed on its own, so that each broken one is reported and the others
    are kept in `partial`. A file that parses pays nothing for recovery."""
    import lark

    p = parser(keep_all_tokens)
    with _LOCK:
        _SINK.tokens = []
        try:
            tree, problem = p.parse(source.text), None
        except lark.exceptions.UnexpectedInput as err:
            tree, problem = None, syntax_error(source, err, p)
            failed_at = _error_offset(source, err)
        tokens, _SINK.tokens = _SINK.tokens, []
        if problem is not None and recover:
            return _recover(source, p, problem, failed_at)
    comments = tuple(Comment(token_span(source.path, t), str(t)) for t in tokens)
    return Parsed(source, tree, comments, (problem,) if problem else ())


# ---------------------------------------------------------------- recovery

# Syntax errors reported per file; the last one says that the others are not shown.
MAX_SYNTAX_ERRORS = 20

# A top-level declaration starts a line with its keyword. `job` also starts the conditions and
# events `job running longer than` and `job verdict changed`, so `job running`/`job verdict`
# count only when a `:` follows (a kind may be called `running`).
_NAME = r"[a-z](?:[a-z0-9-]*[a-z0-9])?"
_DECL_START = re.compile(
    rf"^(?:job[ \t]+(?:(?!(?:running|verdict)(?![a-z0-9-]))[a-z]|{_NAME}[ \t]*:)"
    r"|(?:extend|inject|define|cause|webhook)(?![A-Za-z0-9_-]))", re.M)
# Names a broken chunk may declare: `job NAME:` and `define NAME =`, and any `WORD NAME :`
# or `WORD NAME =` starting a line, so that a misspelled `jbo NAME:` counts too.
_MAYBE_DECLARED = re.compile(rf"^[ \t]*[A-Za-z]+[ \t]+({_NAME})[ \t]*[:=]", re.M)
# Causes a broken chunk may declare: `cause "NAME" when`, a misspelled keyword too.
_MAYBE_CAUSE = re.compile(r'^[ \t]*[A-Za-z]+[ \t]+"([^"\\\n]*)"[ \t\r\n]+when(?![A-Za-z0-9_-])', re.M)


def _error_offset(source: SourceFile, err: "lark.exceptions.UnexpectedInput") -> int:
    import lark

    if isinstance(err, lark.exceptions.UnexpectedCharacters):
        return _char_offset(err)
    token = _token(err)
    return len(source.text) if token.type == "$END" else _start(token)


def _char_offset(err: "lark.exceptions.UnexpectedCharacters") -> int:
    """Where the lexer found no token. (Lark declares `pos_in_stream = None` on the errors' base
    class, so its type is None; the lexer's error always sets it.)"""
    return cast(int, err.pos_in_stream)


def _token(err: "lark.exceptions.UnexpectedInput") -> "lark.Token":
    """The token a parser's error is at (`$END` at the end of the text): the lexer's have none."""
    import lark

    assert isinstance(err, (lark.exceptions.UnexpectedToken, lark.exceptions.UnexpectedEOF))
    return err.token


def _start(token: "lark.Token") -> int:
    """A lexed token's offset in the text (see token_span)."""
    assert token.start_pos is not None
    return token.start_pos


def _recover(source: SourceFile, p: "lark.Lark", first: Diagnostic, failed_at: int) -> Parsed:
    """Parse each top-level declaration on its own after the whole file failed at `failed_at`
    with the error `first`.

    A chunk runs from one declaration start to the next. It is parsed in a copy of the text cut
    at its end, with everything before it blanked (newlines kept), so positions and offsets are
    those of the file. A chunk that ends before the parser is done (an unclosed block, a
    condition cut short) runs on into the next one, as it does in the whole file; so each error
    is worded as the whole-file parse words it, and the first one is `first`. Caller holds
    _LOCK.
    """
    import lark

    text = source.text
    starts = sorted({0, *(m.start() for m in _DECL_START.finditer(text))})
    ends = [*starts[1:], len(text)]
    blank = re.sub(r"[^\n]", " ", text)
    decls: list[lark.Token | lark.Tree[lark.Token]] = []   # the start rule's: declarations
    problems: list[tuple[int, int, Diagnostic]] = []    # chunk start, end, error
    comments: dict[int, lark.Token] = {}    # by offset: a chunk that runs on is read twice
    i = 0
    while i < len(starts):
        start, j, chunk_ok = starts[i], i, False
        while True:
            _SINK.tokens = []
            try:
                chunk = p.parse(blank[:start] + text[start:ends[j]])
            except lark.exceptions.UnexpectedInput as err:
                if isinstance(err, lark.exceptions.UnexpectedToken) and \
                        err.token.type == "$END" and j + 1 < len(starts):
                    j += 1    # not finished: it runs on into the next chunk
                    continue
                chunk_source = SourceFile(source.path, text[:ends[j]], source.line_starts)
                problems.append((start, starts[j] if j > i else ends[i],
                                 syntax_error(chunk_source, err, p)))
            else:
                decls.extend(chunk.children)
                chunk_ok = True
            break
        comments.update((_start(t), t) for t in _SINK.tokens)
        # A chunk that ran on into others and failed in the last of them: that one is then
        # parsed on its own too (its declaration may well be sound).
        i = j if j > i and not chunk_ok else j + 1
    _SINK.tokens = []
    # The whole-file error is reported as it was, by the chunk it falls in. Read alone, a chunk
    # may fail before it (a `<<` closed only in a later declaration): that error comes first
    # and explains the other.
    if problems and all(d != first for _, _, d in problems):
        at = next((n for n, (s, e, _) in enumerate(problems) if s <= failed_at <= e), None)
        if at is not None:
            problems[at] = (*problems[at][:2], first)
        elif all(d.sort_key() > first.sort_key() for _, _, d in problems):
            problems.append((failed_at, failed_at, first))
    unsure = frozenset(m.group(1) for start, end, _ in problems
                       for found in (_MAYBE_DECLARED, _MAYBE_CAUSE)
                       for m in found.finditer(text, start, end))
    # A chunk that ran on and failed in the next one may fail there on its own as well.
    reported = sorted(dict.fromkeys(d for _, _, d in problems), key=Diagnostic.sort_key) or [first]
    if len(reported) > MAX_SYNTAX_ERRORS:
        hidden = len(reported) - MAX_SYNTAX_ERRORS
        reported = reported[:MAX_SYNTAX_ERRORS]
        last = reported[-1]
        reported[-1] = dataclasses.replace(last, notes=(*last.notes, Note(
            f"{hidden} more declaration(s) with a syntax error in this file are not reported")))
    return Parsed(source, None,
                  tuple(Comment(token_span(source.path, comments[k]), str(comments[k]))
                        for k in sorted(comments)),
                  tuple(reported), lark.Tree("start", decls), unsure)


def token_span(path: str, token: "lark.Token") -> Span:
    """Where a token of the parse stands. (Lark types a token's position Optional, for tokens
    made by hand; the lexer's always have one.)"""
    line, column, end_line, end_column = token.line, token.column, token.end_line, token.end_column
    assert line is not None and column is not None and end_line is not None \
        and end_column is not None
    return Span(path, line, column, end_line, end_column)


# ---------------------------------------------------------------- syntax errors

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")

_DESCRIBED = {
    "STRING": "a string", "EXPR": "a JMESPath expression `<<...>>`", "INT": "a number",
    "DURATION": "a duration such as `10m`", "NAME": "a name", "KIND": "a kind such as `Job`",
    "GROUP_VERSION": "an API version such as `batch/v1`",
    "PATH": "a field path such as `status.phase`", "WORD": "a phase such as `Succeeded`",
    "FAILED_OR_EVICTED": "`failed or evicted`",
    "$END": "the end of the file",
}

_PHASES = ("pending", "running", "suspended", "restarting", "succeeded", "failed")
# When every word of a group is expected, the group is named instead of its words.
_GROUPS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("declaration", "a declaration (`job`, `extend`, `inject`, `define`, `cause`, `webhook`)",
     frozenset({"job", "extend", "inject", "define", "cause", "webhook"})),
    ("kind statement", "a kind statement (`pods`, `task`, `primary`, `plural`, `final`, `mode`, "
     "`foreign`, a verdict such as `failed when ...`, `[audit] on ...`, `status {...}`)",
     frozenset({"plural", "pods", "task", "primary", "final", "mode", "foreign", "on", "audit",
                "status", *_PHASES})),
    ("filter", "a pod filter (`exit`, `reason`, `container`, `pod reason`, `condition`, `task`, "
     "`restarts`, `label`, `where`, `is`)",
     frozenset({"exit", "reason", "container", "pod", "condition", "task", "restarts", "label",
                "where", "is"})),
    ("filter", "a pod filter after `with` (`exit`, `reason`, `condition`, `label`, ...)",
     frozenset({"exit", "reason", "container", "pod", "condition", "task", "restarts", "label",
                "where"})),
    ("action", "an action (`fail job|task`, `complete job`, `restart job|task|pod`, `abort job`, "
     "`terminate job`, `ignore`, `count`)",
     frozenset({"fail", "complete", "restart", "abort", "terminate", "ignore", "count"})),
    ("action clause", "an action clause (`reason`, `message`, `max`, `budget`, `after`, `then`)",
     frozenset({"reason", "message", "max", "budget", "after", "then"})),
    ("event", "an event (`pod ...`, `container restarted`, `task ...`, `job ...`)",
     frozenset({"pod", "container", "task", "job"})),
    ("pod state", "a pod state (`pending`, `running`, `succeeded`, `failed`, `failed or evicted`, "
     "`evicted`, `terminating`)",
     frozenset({"pending", "running", "succeeded", "failed", "FAILED_OR_EVICTED", "evicted",
                "terminating"})),
    ("pod event", "a pod event (`pending`, `running`, `succeeded`, `failed`, `failed or evicted`, "
     "`evicted`, `deleted`)",
     frozenset({"pending", "running", "succeeded", "failed", "FAILED_OR_EVICTED", "evicted",
                "deleted"})),
    ("task state", "a task state (`pending`, `running`, `succeeded`, `failed`)",
     frozenset({"pending", "running", "succeeded", "failed"})),
    ("condition", "a condition (`<<expr>>`, `any`/`all`/`no pod ...`, `count pods ...`, `task ...`, "
     "`job running longer than ...`, `not`, `(`)",
     frozenset({"any", "all", "no", "count", "task", "job", "not", "(", "EXPR"})),
    ("injection operation", "an injection operation (`annotate`, `label`, `env`, `volume`, `mount`, `sidecar`, "
     "`wrap`, `wait`)",
     frozenset({"annotate", "label", "env", "volume", "mount", "sidecar", "wrap", "wait"})),
    ("status statement", "a status statement (`phase at`, `reason at`, `message at`, `condition`, `no ...`)",
     frozenset({"phase", "reason", "message", "condition", "no"})),
)
_FILTER_WORDS = frozenset({"exit", "reason", "container", "pod", "condition", "restarts",
                           "label", "where", "is"})


def syntax_error(source: SourceFile, err: "lark.exceptions.UnexpectedInput",
                 p: "lark.Lark") -> Diagnostic:
    import lark

    text = source.text
    state = getattr(err, "state", None)
    pos = _char_offset(err) if isinstance(err, lark.exceptions.UnexpectedCharacters) else (
        None if _token(err).type == "$END" else _start(_token(err)))
    if pos is not None and text.startswith("<<", pos):
        closed = _expression(p).match(text, pos)
        if closed is None:
            return _error(source.span(pos, pos + 2), "this `<<` is never closed by `>>`", state,
                          help="a JMESPath expression runs from `<<` to the next `>>` outside "
                               "its quoted strings and literals")
        expected = _accepts(state, getattr(err, "allowed", None) or getattr(err, "expected", ()))
        span = source.span(pos, closed.end())
        words = {_literal(n, p) for n in expected}
        shown = _show(closed.group())[1:-1]
        if "where" in words:
            return _error(span, "a JMESPath test of the pod needs `where` before it", state,
                          help=f"write `where {shown}`")
        if "with" in words:
            return _error(span, "a JMESPath test of the pod needs `with where` before it", state,
                          help=f"write `with where {shown}`, or `and {shown}` for a test of "
                               "the job")
        return _error(span, f"unexpected JMESPath expression; expected {_expected(expected, p)}",
                      state)
    if pos is not None and text.startswith('"', pos) and \
            isinstance(err, lark.exceptions.UnexpectedCharacters):
        end = text.find("\n", pos)
        return _error(source.span(pos, end if end >= 0 else len(text)),
                      "this string is never closed", state,
                      help='strings end on the line they start; write `\\"` for a quote')
    if isinstance(err, lark.exceptions.UnexpectedCharacters):
        expected = _accepts(state, err.allowed)
        at = _char_offset(err)
        word = _WORD.match(text, at)
        if word:
            return _unexpected_word(source, word.group(), source.span(word.start(), word.end()),
                                    expected, p, state)
        return _error(source.span(at, at + 1),
                      f"unexpected character {diagnostics.show_char(text[at])}; "
                      f"expected {_expected(expected, p)}", state)
    assert isinstance(err, lark.exceptions.UnexpectedToken)
    expected = _accepts(state, err.expected)
    token = err.token
    if token.type == "$END":
        return _error(source.end_span(),
                      f"unexpected end of file; expected {_expected(expected, p)}", state,
                      at_end=True)
    span = token_span(source.path, token)
    if _WORD.fullmatch(str(token)):
        return _unexpected_word(source, str(token), span, expected, p, state)
    return _error(span, f"unexpected {_show(str(token))}; expected {_expected(expected, p)}",
                  state)


def _unexpected_word(source: SourceFile, word: str, span: Span, expected: set[str],
                     p: "lark.Lark", state: object) -> Diagnostic:
    keywords = [w for w in (_keyword(n, p) for n in expected) if w]
    suggestion = diagnostics.did_you_mean(word, keywords)
    if suggestion and word not in all_keywords(p):
        close = suggestion.split("`")[1]
        category = next((short for short, _, group in _GROUPS
                         if close in group and group <= set(keywords) | expected), "keyword")
        return _error(span, f"unknown {category} `{word}`", state, code="unknown-word",
                      help=suggestion, extra=(Note(f"expected {_expected(expected, p)}"),))
    literals = {v for v in (_literal(n, p) for n in expected) if v}
    return _error(span, f"unexpected {_show(word)}; expected {_expected(expected, p)}", state,
                  help=_hint(word, expected, literals, state) or suggestion)


_ACTION_WORDS = frozenset({"fail", "complete", "restart", "abort", "terminate", "ignore",
                           "count"})


def _hint(word: str, expected: set[str], literals: set[str], state: object) -> str | None:
    """Advice for the mistakes that the expected tokens alone do not explain."""
    if {"any", "count", "not"} <= literals:
        if word in ("pod", "pods"):
            return "a pod condition starts with a quantifier: `any pod`, `all pods`, " \
                   "`no pod` or `count pods`"
        if word in _FILTER_WORDS and _after_with_filter(state):
            return ("after `with`, a pod filter is one term: parenthesize longer ones, "
                    "as in `with (exit 1 and reason \"OOMKilled\")`")
    if word in _ACTION_WORDS and "->" in literals:
        return "the action comes after `->`: `on EVENT [FILTER] -> ACTION`"
    if "STRING" in expected and not any(_WORD.fullmatch(v) for v in literals):
        return f'strings are quoted: write "{word}"'
    return None


def _after_with_filter(state: object) -> bool:
    """Whether the parser just read `with TERM and` (or `or`) in a condition."""
    import lark

    stack = list(getattr(state, "value_stack", None) or ())
    if len(stack) < 2 or not isinstance(stack[-1], lark.Token) or \
            stack[-1].type not in ("AND", "OR"):
        return False
    quant = stack[-2]
    last = quant.children[-1] if isinstance(quant, lark.Tree) and quant.children else None
    return isinstance(quant, lark.Tree) and quant.data in ("pod_quant", "pod_count") and \
        isinstance(last, lark.Tree) and last.data.endswith("_term")


def _error(span: Span, message: str, state: object, *, code: str = "syntax-error",
           help: str | None = None, at_end: bool = False,
           extra: Iterable[Note] = ()) -> Diagnostic:
    notes = list(extra)
    brace = _open_brace(state)
    if brace is not None and (at_end or "RBRACE" in _accepts(state, ())):
        opener = token_span(span.path, brace)
        notes.append(Note("the block opened by this `{` is not closed" if at_end
                          else "inside the block opened by this `{`", opener))
    return diagnostics.make(code, span, message, help, notes)


def _accepts(state: object, fallback: Iterable[str] | None) -> set[str]:
    """The terminals the parser would really accept next.

    LALR merges states, so a state's table can list tokens that fail after a reduction;
    feeding each candidate to a copy of the parser keeps only the real ones.
    """
    import copy

    import lark

    table = getattr(getattr(state, "parse_conf", None), "parse_table", None)
    if table is None:
        return set(fallback or ())
    accepted = set()
    for name in table.states[state.position]:  # type: ignore[attr-defined]
        if not name.isupper():
            continue
        trial = copy.copy(state)
        try:
            trial.feed_token(lark.Token(name, ""), name == "$END")  # type: ignore[attr-defined]
        except lark.exceptions.UnexpectedInput:
            continue
        accepted.add(name)
    return accepted or set(fallback or ())


def _open_brace(state: object) -> "lark.Token | None":
    """The innermost `{` the parser has shifted but not yet matched by a `}`."""
    import lark

    open_braces: list[lark.Token] = []
    for item in getattr(state, "value_stack", None) or ():
        if isinstance(item, lark.Token) and item.type == "LBRACE":
            open_braces.append(item)
        elif isinstance(item, lark.Token) and item.type == "RBRACE" and open_braces:
            open_braces.pop()
    return open_braces[-1] if open_braces else None


@cache
def _expression(p: "lark.Lark") -> "re.Pattern[str]":
    """The pattern of a whole `<<...>>` expression (the grammar's EXPR)."""
    return re.compile(p.get_terminal("EXPR").pattern.to_regexp())


def _literal(name: str, p: "lark.Lark") -> str | None:
    """The text of a literal terminal (`job`, `->`), None for a pattern such as STRING."""
    try:
        term = p.get_terminal(name)
    except KeyError:
        return None
    return term.pattern.value if term.pattern.type == "str" else None


def _keyword(name: str, p: "lark.Lark") -> str | None:
    value = _literal(name, p)
    return value if value and _WORD.fullmatch(value) else None


def all_keywords(p: "lark.Lark | None" = None) -> frozenset[str]:
    """The words a grammar (the language's own by default) spells as literal tokens: the
    keywords, which the editor grammar (editors/vscode/) must highlight too."""
    return frozenset(t.pattern.value for t in (p or parser()).terminals
                     if t.pattern.type == "str" and _WORD.fullmatch(t.pattern.value))


def _describe(name: str, p: "lark.Lark") -> str:
    if name in _DESCRIBED:
        return _DESCRIBED[name]
    try:
        term = p.get_terminal(name)
    except KeyError:
        return name
    return f"`{term.pattern.value}`" if term.pattern.type == "str" else name.lower()


def _expected(names: set[str], p: "lark.Lark") -> str:
    words = {(_literal(n, p) or n): n for n in names}
    remaining = set(names)
    described: list[str] = []
    for _, label, group in _GROUPS:
        if group <= words.keys() and all(words[w] in remaining for w in group):
            described.append(label)
            remaining -= {words[w] for w in group}
    described += sorted((_describe(n, p) for n in remaining), key=_order)
    if not described:
        return "nothing more"
    if len(described) == 1:
        return described[0]
    return ", ".join(described[:-1]) + " or " + described[-1]


def _order(text: str) -> tuple[int, str]:
    """Keywords first, then symbols, then descriptions such as `a string`."""
    if text.startswith("`"):
        return (0 if _WORD.fullmatch(text.strip("`")) else 1, text)
    return (2, text)


def _show(text: str) -> str:
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"`{text}`"
