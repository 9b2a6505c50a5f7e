"""Canonical layout for `.rules` files (`rulec fmt`).

A printer over the full token tree: tokens are printed verbatim (so the plan cannot change,
except for spans), layout comes from the tree, and comments are put back by position.
Layout: four spaces per block level, one statement per line, phases padded to one width with
`reason`/`message` on continuation lines under `when`, lines over 100 columns broken
(before `->` and `where`, then as needed before action clauses and top-level `or`/`and`),
source blank lines between statements kept (at most one), trailing commas dropped.
Idempotent: the layout depends only on the tokens and on which token each comment follows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rulec import syntax
from rulec.diagnostics import Diagnostic
from rulec.lower import spine
from rulec.source import SourceFile
from rulec.syntax import Comment

if TYPE_CHECKING:
    from lark import Token, Tree

WIDTH = 100
INDENT = 4
# Fixed widths, so adding or removing a verdict never realigns the others (stable diffs).
PHASE_WIDTH = len("restarting") + 1     # `failed     when`: conditions start in one column
STATUS_WIDTH = len("message") + 1       # `reason  at`
RECIPE_WIDTH = len("terminate job") + 1  # `fail job      ->`: recipes start in one column
_INLINE_BRACES = frozenset({"phase_map", "step_create"})   # `{ ... }` kept on one line
_STATUS_FIELDS = ("status_phase", "status_reason", "status_message")
_CHAINS = frozenset({"c_or", "c_and", "f_or", "f_and"})
_NO_SPACE_BEFORE = frozenset({"COMMA", "RSQB", "RPAR", "COLON"})
_NO_SPACE_AFTER = frozenset({"LSQB", "LPAR"})


@dataclass(frozen=True, slots=True)
class Formatted:
    text: str
    diagnostics: tuple[Diagnostic, ...]


def format_source(source: SourceFile) -> Formatted:
    """The canonical text of a file; a file that does not parse comes back unchanged.

    Raises api.InputError when the file nests too deeply to walk (as `check` does)."""
    parsed = syntax.parse(source, keep_all_tokens=True)
    if parsed.tree is None:
        return Formatted(source.text, parsed.diagnostics)
    items = _Items()
    try:
        for decl in parsed.tree.children:
            items.visit(decl, level=0, brk="stmt")
    except RecursionError:
        from rulec import api

        raise api.too_deep("format", source.path) from None
    return Formatted(_render(items.items, parsed.comments), ())


def format_text(text: str, path: str = "<text>") -> str:
    return format_source(SourceFile.from_text(path, text)).text


@dataclass(slots=True)
class _Item:
    token: Token
    brk: str | None      # stmt: starts a statement; clause: own continuation line;
                         # soft: breaks when the line is too wide; fill: breaks as needed after
    indent: int          # columns when it starts a statement line
    cont: int            # columns when it starts a continuation line
    pad: int = 0         # minimum width of the token with the space after it


class _Items:
    """The tokens of the tree in order, each with where it may or must start a line."""

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.pending: str | None = None

    def push(self, token: Token, level: int, cont: int, pad: int = 0) -> None:
        self.items.append(_Item(token, self.pending, level * INDENT, cont, pad))
        self.pending = None

    def visit(self, node: Tree | Token, level: int, brk: str | None = None,
              cont: int | None = None, chain: str | None = None) -> None:
        """Add `node`'s tokens; `chain` names the connective (`c_or`) whose words may break."""
        from lark import Token

        if brk is not None:
            self.pending = brk
        cont = (level + 1) * INDENT if cont is None else cont
        if isinstance(node, Token):
            self.push(node, level, cont)
            return
        kind = node.data
        if kind == "verdict":
            cont = level * INDENT + PHASE_WIDTH
        block = kind not in _INLINE_BRACES and any(
            isinstance(c, Token) and c.type == "LBRACE" for c in node.children)
        inside = False
        children = spine(node) if kind in _CHAINS else node.children
        for i, child in enumerate(children):
            if isinstance(child, Token):
                if block and child.type == "LBRACE":
                    self.push(child, level, cont)
                    inside = True
                elif block and child.type == "RBRACE":
                    self.pending = "stmt"
                    self.push(child, level, cont)
                    inside = False
                elif child.type == "COMMA" and _closes(children, i + 1):
                    continue  # trailing comma
                else:
                    if kind == "policy" and str(child) == "->" \
                            or kind == "cause_decl" and str(child) == "hint":
                        self.pending = "soft"
                    elif kind == chain:
                        self.pending = "fill"
                    elif kind == "recipe" and child.type == "COMMA":
                        self.push(child, level, cont)
                        self.pending = "fill"
                        continue
                    elif kind == "recipe" and str(child) == "->" and _guarded(node):
                        # `VERB when EXPR` on its own line, `->` where the others' stand
                        self.pending = "clause"
                        self.push(child, level, level * INDENT + RECIPE_WIDTH)
                        continue
                    elif kind == "objects_ref" and str(child) == "label":
                        self.pending = "fill"   # the selector under the step, as needed
                        self.push(child, level, cont + INDENT)
                        continue
                    pad = STATUS_WIDTH if kind in _STATUS_FIELDS and i == 0 else 0
                    self.push(child, level, cont, pad)
            elif inside:
                self.visit(child, level + 1, brk="stmt")
            elif kind == "verdict" and child.data in ("reason_clause", "message_clause"):
                self.visit(child, level, brk="clause", cont=cont)
            elif kind == "verdict" and child.data in ("c_or", "c_and"):
                self.visit(child, level, cont=cont + len("when "), chain=child.data)
            elif kind == "verdict" and child.data == "phase":
                self.visit(child, level, cont=cont)
                self.items[-1].pad = PHASE_WIDTH
            elif kind == "recipe" and child.data == "action_verb":
                self.visit(child, level, cont=cont)
                words = child.children
                if not _guarded(node):
                    self.items[-1].pad = RECIPE_WIDTH - sum(len(str(w)) + 1 for w in words[:-1])
            elif kind == "recipe" and child.data == "recipe_when":
                self.visit(child, level, cont=level * INDENT + RECIPE_WIDTH)
            elif kind == "recipe":
                self.visit(child, level, cont=level * INDENT + RECIPE_WIDTH + len("-> "))
            elif kind == "cause_decl" and child.data in _CHAINS:
                self.visit(child, level, cont=cont, chain=child.data)
            elif kind in ("inject_where", "kind_where") and child.data in _CHAINS:
                self.visit(child, level, cont=cont + len("where "), chain=child.data)
            elif kind == "policy" and child.data == "policy_id":
                self.visit(child, level, brk="fill", cont=(level + 1) * INDENT + len("-> "))
            elif kind == "action" and child.data in ("reason_clause", "message_clause"):
                verb = " ".join(str(t) for t in node.children[0].children)
                self.visit(child, level, brk="fill",
                           cont=(level + 1) * INDENT + len(f"-> {verb} "))
            elif kind in ("inject_decl", "kind_decl") and child.data in ("inject_where",
                                                                          "kind_where"):
                self.visit(child, level, brk="soft", cont=(level + 2) * INDENT)
            else:
                self.visit(child, level, cont=cont)


def _guarded(recipe: Tree) -> bool:
    """A recipe with `when EXPR`."""
    return any(getattr(c, "data", None) == "recipe_when" for c in recipe.children)


def _closes(children: list, start: int) -> bool:
    from lark import Token

    nxt = children[start] if start < len(children) else None
    return isinstance(nxt, Token) and nxt.type in ("RSQB", "RBRACE")


def _render(items: list[_Item], comments: tuple[Comment, ...]) -> str:
    out: list[str] = []
    line: list[_Item] = []
    indent = 0
    last_end = 0               # source line where the last printed thing ended
    force = False              # the next token must start a line (a comment ended the last one)
    queue = sorted(comments, key=lambda c: (c.span.line, c.span.column))
    ci = 0

    def flush() -> None:
        nonlocal line
        if line:
            out.extend(_lines(line, indent))
            line = []

    def blank_if(gap_from: int, at: int) -> None:
        if at - gap_from > 1 and out and out[-1] != "" and not out[-1].endswith("{"):
            out.append("")

    for item in items:
        tok = item.token
        # A token of the parse has its position (Lark's type allows a token made without one).
        assert tok.line is not None and tok.end_line is not None
        while ci < len(queue) and (queue[ci].span.line, queue[ci].span.column) < (
                tok.line, tok.column):
            comment = queue[ci]
            ci += 1
            text = comment.text.rstrip()
            if line and comment.span.line == last_end:
                out.extend(_lines(line, indent, trailing=text))
                line = []
            else:
                flush()
                if item.brk == "stmt" or tok.type == "RBRACE" or not out:
                    blank_if(last_end, comment.span.line)
                where = item.indent + INDENT if tok.type == "RBRACE" else (
                    item.indent if item.brk == "stmt" else item.cont)
                out.append(" " * where + text)
            force = True
            last_end = comment.span.end_line
        if not line or force or item.brk in ("stmt", "clause"):
            flush()
            if item.brk == "stmt" and tok.type != "RBRACE":
                blank_if(last_end, tok.line)
            indent = item.indent if item.brk == "stmt" else item.cont
            force = False
        line.append(item)
        last_end = tok.end_line
    trailing = None
    rest = queue[ci:]
    if rest and line and rest[0].span.line == last_end:
        trailing = rest[0].text.rstrip()
        last_end = rest[0].span.end_line
        rest = rest[1:]
    if line:
        out.extend(_lines(line, indent, trailing=trailing))
    for comment in rest:
        blank_if(last_end, comment.span.line)
        out.append(comment.text.rstrip())
        last_end = comment.span.end_line
    return "\n".join(out).rstrip("\n") + "\n" if out else ""


def _lines(items: list[_Item], indent: int, trailing: str | None = None) -> list[str]:
    """One logical line; when too wide, broken at every `soft` point, then each piece filled
    greedily up to its `fill` points."""
    pieces = [items]
    if _width(_join(items, indent)) > WIDTH:
        pieces = _split(items, "soft")
    lines: list[str] = []
    for n, piece in enumerate(pieces):
        segments = _split(piece, "fill")
        current, at = segments[0], indent if n == 0 else piece[0].cont
        for segment in segments[1:]:
            if _width(_join(current + segment, at)) <= WIDTH:
                current = current + segment
            else:
                lines.append(_join(current, at))
                current, at = segment, segment[0].cont
        lines.append(_join(current, at))
    lines[-1] += "  " + trailing if trailing else ""
    return "\n".join(lines).split("\n")


def _split(items: list[_Item], brk: str) -> list[list[_Item]]:
    parts: list[list[_Item]] = [[]]
    for i, item in enumerate(items):
        if i and item.brk == brk:
            parts.append([])
        parts[-1].append(item)
    return parts


def _spelled(token: Token) -> str:
    """A token as printed: as written, but `failed or evicted` (one token) with single spaces."""
    return "failed or evicted" if token.type == "FAILED_OR_EVICTED" else str(token)


def _width(text: str) -> int:
    return max(len(line) for line in text.split("\n"))


def _join(items: list[_Item], indent: int) -> str:
    parts = [" " * indent]
    prev: _Item | None = None
    for item in items:
        value = _spelled(item.token)
        if prev is not None:
            pv = str(prev.token)
            if prev.token.type in _NO_SPACE_AFTER or item.token.type in _NO_SPACE_BEFORE \
                    or value == ".." or pv == "..":
                sep = ""
            else:
                sep = " " * max(1, prev.pad - len(pv))
            parts.append(sep)
        parts.append(value)
        prev = item
    return "".join(parts)
