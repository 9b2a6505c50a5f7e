"""JMESPath inside rules: parse errors at the exact file position, double-quoted "strings",
`!` applied to less than was meant, calls of functions the runtime does not have (or with the
wrong number of arguments), and what types an expression can produce (to reject conditions
that cannot be truth values)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rulec import diagnostics, nodes
from rulec.diagnostics import Diagnostic
from rulec.source import Span, advance
from runtime import functions

# How deep conditions, filters and expressions may nest (R005): the runtime evaluates them by
# recursion, and handles some hundreds of levels; no sensible rule comes near this.
MAX_NESTING = 100
# Every function the runtime's expressions can call: JMESPath's own and `functions.NAMES`,
# each with its signature (one entry per argument; a last `variadic` one may repeat).
SIGNATURES: dict[str, tuple[dict[str, Any], ...]] = {
    name: tuple(entry["signature"])
    for name, entry in functions.RuleFunctions.FUNCTION_TABLE.items()}

# Fields that Kubernetes conventions make strings whose presence is not a truth value.
STRING_FIELDS = frozenset({"phase", "reason", "message", "type"})
# Inside list items (conditions), `status` is the string "True"/"False"/"Unknown".
ITEM_STRING_FIELDS = STRING_FIELDS | {"status"}

_COMPARATORS = frozenset({"eq", "ne", "lt", "gt", "lte", "gte"})
_FUNCTION_TYPES: dict[str, frozenset[str]] = {
    **{f: frozenset({"boolean"}) for f in ("contains", "starts_with", "ends_with")},
    **{f: frozenset({"number"}) for f in ("abs", "avg", "ceil", "floor", "length", "sum",
                                          "to_number")},
    **{f: frozenset({"string"}) for f in ("join", "to_string", "type")},
    **{f: frozenset({"array"}) for f in ("keys", "values", "sort", "sort_by", "map", "to_array")},
    "max": frozenset({"number", "string", "null"}), "min": frozenset({"number", "string", "null"}),
    "merge": frozenset({"object"}), "reverse": frozenset({"array", "string"}),
}
ANY = frozenset({"any"})
SCALARS = frozenset({"string", "number"})
# The JSON types a field path from the root holds, when a schema says (None: unknown).
FieldTypes = Callable[[tuple[str, ...]], "frozenset[str] | None"]


@dataclass(frozen=True, slots=True)
class Parsed:
    expr: nodes.Expr
    tree: dict[str, Any] | None


def position(e: nodes.Expr, offset: int, length: int = 1) -> Span:
    """The file span of `length` characters at `offset` inside the expression."""
    offset = max(0, min(offset, len(e.text)))
    line, column = advance(e.line, e.column, e.text[:offset])
    end_line, end_column = advance(line, column, e.text[offset:offset + max(1, length)])
    if offset >= len(e.text):  # past the end: point at the closing `>>`
        end_line, end_column = line, column + 2
    return Span(e.span.path, line, column, end_line, end_column)


def parse(e: nodes.Expr, out: list[Diagnostic]) -> Parsed:
    """The jmespath AST of `e`, or None after reporting why it does not parse (or nests too
    deeply to evaluate)."""
    from jmespath import exceptions, parser

    try:
        tree = parser.Parser().parse(e.text).parsed
    except RecursionError:
        out.append(_too_deep(e, "too deeply for JMESPath to parse it"))
    except exceptions.EmptyExpressionError:
        out.append(diagnostics.make("jmespath-syntax", e.span, "empty JMESPath expression"))
    except exceptions.LexerError as err:
        value = err.lexer_value or ""
        message = err.message or "invalid token"
        out.append(diagnostics.make(
            "jmespath-syntax", position(e, err.lexer_position or 0, len(value)),
            f"invalid JMESPath: {message[:1].lower()}{message[1:]}"))
    except exceptions.IncompleteExpressionError as err:
        out.append(diagnostics.make(
            "jmespath-syntax", position(e, err.lex_position or len(e.text)),
            "invalid JMESPath: the expression ends too early"))
    except exceptions.ParseError as err:
        value = "" if err.token_value is None else str(err.token_value)
        shown = f"`{value}`" if value else "end of expression"
        out.append(diagnostics.make(
            "jmespath-syntax", position(e, err.lex_position or 0, len(value)),
            f"invalid JMESPath: unexpected {shown}"))
    else:
        depth = _depth(tree)
        if depth <= MAX_NESTING:
            return Parsed(e, tree)
        out.append(_too_deep(e, f"{depth} levels deep"))
    return Parsed(e, None)


def _too_deep(e: nodes.Expr, how: str) -> Diagnostic:
    return diagnostics.make(
        "nesting-too-deep", e.span, f"this expression nests {how}; at most {MAX_NESTING} levels "
        "can be evaluated", help="split it: `define` filters, or several conditions")


def _depth(tree: dict[str, Any]) -> int:
    """How many levels of nodes the tree has (counted without recursion)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in node.get("children", []) if isinstance(c, dict))
    return deepest


def check_functions(p: Parsed, out: list[Diagnostic]) -> None:
    """Report calls of functions the runtime does not have, or with the wrong number of
    arguments: either fails when evaluated, which reads as null."""
    if p.tree is None or "(" not in p.expr.text:
        return
    calls = [n for n in _in_source_order(p.tree) if n["type"] == "function_expression"]
    if not calls:
        return
    from jmespath import lexer

    tokens = list(lexer.Lexer().tokenize(p.expr.text))
    names = [t for t, after in zip(tokens, tokens[1:])
             if t["type"] == "unquoted_identifier" and after["type"] == "lparen"]
    for call, token in zip(calls, names):
        name, given = call["value"], len(call["children"])
        span = position(p.expr, token["start"], len(name))
        signature = SIGNATURES.get(name)
        if signature is None:
            out.append(diagnostics.make(
                "unknown-function", span, f"no JMESPath function is called `{name}`",
                help=diagnostics.did_you_mean(name, SIGNATURES)
                or "see the functions in docs/evaluation.md and the JMESPath specification"))
            continue
        variadic = bool(signature) and bool(signature[-1].get("variadic"))
        if given == len(signature) or variadic and given > len(signature):
            continue
        wanted = len(signature)
        takes = f"at least {wanted}" if variadic else "no" if wanted == 0 else str(wanted)
        plural = "argument" if wanted == 1 else "arguments"
        params = ", ".join("|".join(a["types"]) or "any" for a in signature) + (
            ", ..." if variadic else "")
        out.append(diagnostics.make(
            "wrong-argument-count", span,
            f"`{name}()` takes {takes} {plural}, and is given {given}",
            help=f"{name}({params})"))


def check_quotes(e: nodes.Expr, out: list[Diagnostic]) -> None:
    """Report `"text"` compared as if it were a string (it is a field name); a quoted name
    after a dot (`labels."app.kubernetes.io/name"`) is the legitimate use."""
    from jmespath import exceptions, lexer

    try:
        tokens = list(lexer.Lexer().tokenize(e.text))
    except exceptions.JMESPathError:
        return
    for i, tok in enumerate(tokens):
        if tok["type"] != "quoted_identifier":
            continue
        before = tokens[i - 1]["type"] if i else ""
        after = tokens[i + 1]["type"] if i + 1 < len(tokens) else ""
        if before != "dot" and (before in _COMPARATORS or after in _COMPARATORS):
            value = tok["value"]
            raw = e.text[tok["start"]:_closing_quote(e.text, tok["start"]) + 1]
            quoted = value.replace("'", "\\'")
            out.append(diagnostics.make(
                "double-quoted-string", position(e, tok["start"], len(raw)),
                f"`{raw}` is a field name in JMESPath, not a string",
                help=f"use '{quoted}' for the string"))


# Nodes that read from the value of their first child. `!` binds tighter than `.`, `[?`, `[]`
# and `.*`, so a `!` as that child negates less than the path that follows it.
_READS_LEFT = frozenset({"subexpression", "index_expression", "projection", "value_projection",
                         "filter_projection", "flatten"})


def check_not_precedence(p: Parsed, out: list[Diagnostic]) -> None:
    """Report `!metadata.deletionTimestamp`: it means `(!metadata).deletionTimestamp`, a field
    read from a boolean, always null; `!(metadata.deletionTimestamp)` was meant."""
    if p.tree is None or "!" not in p.expr.text:
        return
    found = _negated_reads(p.tree)
    if not found:
        return
    from jmespath import lexer

    tokens = list(lexer.Lexer().tokenize(p.expr.text))
    bangs = [t for t in tokens if t["type"] == "not"]
    order = {id(n): i for i, n in enumerate(
        n for n in _in_source_order(p.tree) if n["type"] == "not_expression")}
    for top, negation in found:
        bang = bangs[order[id(negation)]]
        stack, core = _not_stack(negation)
        after = tokens[tokens.index(bang) + stack:]
        text = p.expr.text
        meant = _source_of(text, after, _replace_left(top, negation, core))
        operand = _source_of(text, after, core)
        if meant is not None and operand is not None:
            bangs_text = _one_line(text[bang["start"]:after[0]["start"]])
            negated = _one_line(text[after[0]["start"]:operand])
            rest = _one_line(text[operand:meant])
            message = (f"`{bangs_text}{negated}{rest}` means `({'!' * stack}{negated}){rest}`: "
                       f"`!` binds tighter, and reading from a boolean finds only null")
            help = f"write {'!' * stack}({negated}{rest})"
        else:  # explicit parentheses such as `(!a).b`: the source is no `!` + path
            message = "reading from the boolean result of `!` finds only null"
            help = "put the path that `!` should negate in parentheses, e.g. `!(a.b)`"
        out.append(diagnostics.make("not-precedence", position(p.expr, bang["start"]),
                                    message, help=help))


def _one_line(text: str) -> str:
    """`text` with each run of whitespace that holds a newline made one space."""
    import re

    return re.sub(r"\s*\n\s*", " ", text)


def _negated_reads(tree: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(outermost read, `!` node) for each `!` whose result is read by the path around it."""
    found = []
    stack: list[tuple[dict[str, Any], dict[str, Any] | None]] = [(tree, None)]
    while stack:
        node, top = stack.pop()
        children = [c for c in node.get("children", []) if isinstance(c, dict)]
        reads = node["type"] in _READS_LEFT
        if reads:
            top = node if top is None else top
            if children and children[0]["type"] == "not_expression":
                found.append((top, children[0]))
        for i, child in enumerate(children):
            stack.append((child, top if reads and i == 0 else None))
    return found


def _in_source_order(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes in the order their first token appears (a filter's condition comes before
    the projection after it, unlike its children)."""
    nodes = []
    stack = [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        children = [c for c in node.get("children", []) if isinstance(c, dict)]
        if node["type"] == "filter_projection":
            children = [children[0], children[2], children[1]]
        stack.extend(reversed(children))
    return nodes


def _not_stack(node: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """How many `!` are stacked at `node` (`!!a`: 2), and what they negate."""
    count = 0
    while node["type"] == "not_expression":
        count, node = count + 1, node["children"][0]
    return count, node


def _replace_left(top: dict[str, Any], old: dict[str, Any],
                  new: dict[str, Any]) -> dict[str, Any]:
    """`top` with `old`, reached through first children, replaced by `new`."""
    spine = [top]
    while spine[-1] is not old:
        spine.append(spine[-1]["children"][0])
    rebuilt = new
    for node in reversed(spine[:-1]):
        rebuilt = {**node, "children": [rebuilt, *node["children"][1:]]}
    return rebuilt


def _source_of(text: str, tokens: list[dict[str, Any]], tree: dict[str, Any]) -> int | None:
    """The end offset of the shortest run of `tokens` that parses to `tree`, if any.

    Runs end where the next token starts (the lexer's own `end` is not an offset for every
    token type)."""
    from jmespath import exceptions, parser

    start = tokens[0]["start"]
    for tok in tokens[1:]:
        end = len(text[:tok["start"]].rstrip())
        try:
            if parser.Parser().parse(text[start:end]).parsed == tree:
                return end
        except exceptions.JMESPathError:
            continue
    return None


def _closing_quote(text: str, start: int) -> int:
    i = start + 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return min(i, len(text) - 1)


def check_condition(p: Parsed, out: list[Diagnostic], field_types: FieldTypes | None = None) -> None:
    """Report a condition whose value can only be a string or a number, or a list of them
    (true whenever it has an item, whatever the items say)."""
    if p.tree is None:
        return
    produced = shape(p.tree, item=False, field_types=field_types)
    if _scalar(produced.types):
        what = " or ".join(sorted(produced.types & SCALARS))
        out.append(diagnostics.make(
            "non-boolean-condition", p.expr.span,
            f"this condition can only be a {what}, which is true whenever it is non-empty",
            help="compare it, e.g. `status.phase == 'Failed'`, or test it with a function such "
                 "as `contains(...)`"))
    elif produced.types <= {"array", "null"} and _scalar(produced.items):
        what = " or ".join(f"{t}s" for t in sorted(produced.items & SCALARS))
        out.append(diagnostics.make(
            "non-boolean-condition", p.expr.span,
            f"this condition can only be a list of {what}, which is true whenever it has an "
            "item, whatever the items are",
            help="compare inside the filter, e.g. `status.conditions[?type=='Ready' && "
                 "status=='True']`"))


def _scalar(produced: frozenset[str]) -> bool:
    """Whether values of these types are only ever strings or numbers (or null)."""
    return "any" not in produced and produced <= SCALARS | {"null"} and bool(produced & SCALARS)


@dataclass(frozen=True, slots=True)
class Shape:
    """What an expression can evaluate to: its JSON types and, when it is a list, its items'."""

    types: frozenset[str]
    items: frozenset[str] = ANY


_UNKNOWN = Shape(ANY)


def types(node: dict[str, Any], item: bool,
          field_types: FieldTypes | None = None) -> frozenset[str]:
    """The JSON types `node` can evaluate to; `item` when evaluated on list items."""
    return shape(node, item, field_types).types


def shape(node: dict[str, Any], item: bool, field_types: FieldTypes | None = None,
          current: Shape = _UNKNOWN) -> Shape:
    """What `node` can evaluate to; `item` when evaluated on list items, `current` what `@`
    (the value a pipe feeds in) can be.

    `field_types` (from a CRD schema) types the plain field paths read from the root; other
    fields fall back to Kubernetes conventions (`STRING_FIELDS`).
    """
    kind = node["type"]
    children = node.get("children", [])
    path = _root_path(node) if field_types is not None and not item else None
    known = field_types(path) if path and field_types is not None else None
    if known is not None:
        return Shape(known | {"null"})
    if kind == "literal":
        value = node["value"]
        items = frozenset(map(_json_type, value)) if isinstance(value, list) and value else ANY
        return Shape(frozenset({_json_type(value)}), items)
    if kind in ("comparator", "not_expression"):
        return Shape(frozenset({"boolean", "null"}) if kind == "comparator"
                     else frozenset({"boolean"}))
    if kind in ("and_expression", "or_expression"):
        left = shape(children[0], item, field_types, current)
        right = shape(children[1], item, field_types, current)
        return Shape(left.types | right.types, left.items | right.items)
    if kind == "field":
        names = ITEM_STRING_FIELDS if item else STRING_FIELDS
        return Shape(frozenset({"string", "null"})) if node["value"] in names else _UNKNOWN
    if kind in ("identity", "current"):
        return current
    if kind == "subexpression":
        return shape(children[-1], item or _through_list(children[:-1]))
    if kind == "pipe":
        left = shape(children[0], item, field_types, current)
        return shape(children[1], item or _through_list(children[:1]), None, left)
    if kind == "index_expression":
        left = shape(children[0], item, field_types, current)
        if children[1]["type"] == "index":
            return Shape(left.items | {"null"})
        return Shape(frozenset({"array", "null"}), left.items)
    if kind in ("projection", "filter_projection"):
        left = shape(children[0], item, field_types, current)
        right = shape(children[1], True, None, Shape(left.items))
        return Shape(frozenset({"array", "null"}), right.types - {"null"} or ANY)
    if kind in ("value_projection", "flatten", "slice"):
        return Shape(frozenset({"array", "null"}))
    if kind == "multi_select_list":
        items = frozenset().union(*(shape(c, item, field_types, current).types for c in children))
        return Shape(frozenset({"array", "null"}), items or ANY)
    if kind == "multi_select_dict":
        return Shape(frozenset({"object", "null"}))
    if kind == "function_expression":
        return Shape(_FUNCTION_TYPES.get(node["value"], ANY))
    return _UNKNOWN


def _root_path(node: dict[str, Any]) -> tuple[str, ...] | None:
    """`a.b.c` as ("a", "b", "c") when the node is nothing but fields."""
    if node["type"] == "field":
        return (node["value"],)
    children = node.get("children", [])
    if node["type"] == "subexpression" and all(c["type"] == "field" for c in children):
        return tuple(c["value"] for c in children)
    return None


def _through_list(nodes: list[dict[str, Any]]) -> bool:
    """Whether the value reaching the next step came out of a list (index, filter, projection)."""
    return any(n["type"] in ("index_expression", "filter_projection", "projection", "flatten")
               or _through_list(n.get("children", [])) for n in nodes)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "array" if isinstance(value, list) else "object"
