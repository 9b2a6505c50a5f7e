"""Templates inside strings: `{name}` placeholders, `{<<expr>>}` JMESPath, `{{` and `}}`."""
from __future__ import annotations

import re

from rulec import diagnostics
from rulec.nodes import Expr, Placeholder, Template
from rulec.diagnostics import Diagnostic
from rulec.source import Span, advance

EXPR = re.compile(r"""<<(?:[^'"`>]|>(?!>)|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`\\]|\\.)*`)*>>""")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t"}
_SPECIAL = re.compile(r"[\\{}]")
_PLAIN = re.compile(r"[^\\{}]+")


def from_string(raw: str, span: Span, out: list[Diagnostic]) -> Template:
    """The template a string token spells; `raw` includes the quotes."""
    body = raw[1:-1]
    if not _SPECIAL.search(body):
        return Template(span, (body,) if body else ())
    parts: list[str | Placeholder | Expr] = []
    buf: list[str] = []
    line, col = span.line, span.column + 1
    i = 0

    def here(k: int) -> Span:
        """From the current character up to body[k]."""
        end_line, end_col = advance(line, col, body[i:k])
        return Span(span.path, line, col, end_line, end_col)

    def literal() -> None:
        if buf:
            parts.append("".join(buf))
            buf.clear()

    n = len(body)
    while i < n:
        c = body[i]
        step = 1
        plain = _PLAIN.match(body, i)
        if plain:
            buf.append(plain.group())
            step = plain.end() - i
        elif c == "\\":
            esc = body[i + 1] if i + 1 < n else ""
            step = 2
            if esc in _ESCAPES:
                buf.append(_ESCAPES[esc])
            else:
                out.append(diagnostics.make(
                    "invalid-escape", here(i + 2), f"unknown escape `\\{esc}` in a string",
                    help='escapes are `\\"`, `\\\\`, `\\n` and `\\t`'))
                buf.append(esc)
        elif c == "{":
            expr = EXPR.match(body, i + 1)
            placeholder = _PLACEHOLDER.match(body, i)
            if body.startswith("{{", i):
                buf.append("{")
                step = 2
            elif expr and body.startswith("}", expr.end()):
                literal()
                e_line, e_col = advance(line, col, body[i:i + 3])
                parts.append(Expr(here(expr.end() + 1), expr.group()[2:-2], e_line, e_col))
                step = expr.end() + 1 - i
            elif placeholder:
                literal()
                parts.append(Placeholder(here(placeholder.end()), placeholder.group(1)))
                step = placeholder.end() - i
            else:
                out.append(diagnostics.make(
                    "invalid-template", here(i + 1), "`{` opens no placeholder",
                    help="a placeholder is `{name}`, JMESPath is `{<<expr>>}`; "
                         "write `{{` for a literal `{`"))
                buf.append("{")
        else:  # "}"
            if body.startswith("}}", i):
                step = 2
            else:
                out.append(diagnostics.make(
                    "invalid-template", here(i + 1), "`}` closes no placeholder",
                    help="write `}}` for a literal `}`"))
            buf.append("}")
        line, col = advance(line, col, body[i:i + step])
        i += step
    literal()
    return Template(span, tuple(parts))


def expr_of(raw: str, span: Span) -> Expr:
    """The expression of an `<<...>>` token."""
    return Expr(span, raw[2:-2], span.line, span.column + 2)


def decode(raw: str, span: Span, out: list[Diagnostic]) -> str:
    """The value of a plain (non-template) string token; `raw` includes the quotes."""
    body = raw[1:-1]
    if "\\" not in body:
        return body
    chars: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            chars.append(c)
            i += 1
            continue
        esc = body[i + 1]
        if esc not in _ESCAPES:
            line, col = advance(span.line, span.column + 1, body[:i])
            out.append(diagnostics.make(
                "invalid-escape", Span(span.path, line, col, line, col + 2),
                f"unknown escape `\\{esc}` in a string",
                help='escapes are `\\"`, `\\\\`, `\\n` and `\\t`'))
        chars.append(_ESCAPES.get(esc, esc))
        i += 2
    return "".join(chars)
