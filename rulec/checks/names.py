"""Names: declarations declared once, defines that do not use themselves, and declarations
nested no deeper than can be evaluated."""
from __future__ import annotations

import re
import unicodedata
from typing import Any

from rulec import expr, nodes
from rulec.checks.context import Context, api_versions, children, walk
from rulec.diagnostics import Note
from rulec.source import Span


def declarations(ctx: Context) -> None:
    firsts: dict[tuple[str, str], Span] = {}

    def unique(space: str, key: str, span: Span, what: str, help: str | None = None) -> bool:
        first = firsts.setdefault((space, key), span)
        if first is not span:
            ctx.report("duplicate-name", span, f"{what} is declared twice", help=help,
                       notes=(Note("first declared here", first),))
            return False
        return True

    defaults = ("unnamed injections are called FILESTEM#N, N counting the file's injections "
                "from 0")
    for f in ctx.files:
        for i, name in f.injection_names():
            if i.name is not None:
                unique("inject", name, i.name.span, f"injection \"{name}\"",
                       help=f"{defaults}; choose another name" if "#" in name else None)
            else:
                keyword = Span(i.span.path, i.span.line, i.span.column, i.span.line,
                               i.span.column + len("inject"))
                unique("inject", name, keyword, f"unnamed injection \"{name}\"",
                       help=f"{defaults}; name this one: `inject \"name\" into ...`")
    for d in ctx.decls:
        if isinstance(d, nodes.Kind):
            if unique("kind", d.name.value, d.name.span, f"kind `{d.name.value}`"):
                ctx.kinds[d.name.value] = d
            versions: dict[str, Span] = {}
            for api, span in api_versions(d):
                first = versions.setdefault(api, span)
                if first is not span:
                    ctx.report("duplicate-clause", span, f"version `{api}` is listed twice",
                               notes=(Note("first listed here", first),))
                else:
                    unique("gvk", f"{api} {d.kind.value}", span, f"`{api} {d.kind.value}`")
        elif isinstance(d, nodes.Define):
            if unique("define", d.name.value, d.name.span, f"define `{d.name.value}`"):
                ctx.defines[d.name.value] = d
        elif isinstance(d, nodes.Cause):
            if unique("cause", d.name.value, d.name.span, f"cause \"{d.name.value}\""):
                ctx.causes[d.name.value] = d


CAUSE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
HINT_MAX = 200


def cause(ctx: Context, c: nodes.Cause) -> None:
    """A cause's name labels a metric and ends a reason; its hint is read by people, on one
    line; its `when` names no cause (so that inlining one always ends)."""
    if c.name.value == "none":
        ctx.report("invalid-cause-name", c.name.span,
                   "expected a cause name other than \"none\", the metric's label for failures "
                   "that no cause matched")
    elif not CAUSE_NAME.fullmatch(c.name.value):
        ctx.report("invalid-cause-name", c.name.span,
                   f"expected a cause name such as \"oom\" or \"image_pull\", got "
                   f"\"{c.name.value}\"",
                   help="a lower-case letter, then lower-case letters, digits and `_`, at most "
                        "63 characters")
    hint = c.hint.value
    problem = ("is empty" if not hint.strip() else
               f"is {len(hint)} characters long" if len(hint) > HINT_MAX else
               "is not one line" if any(ch in hint for ch in "\n\r\u2028\u2029") else
               "holds a control character" if any(unicodedata.category(ch) == "Cc" for ch in hint)
               else "has a space at one end" if hint != hint.strip() else None)
    if problem is not None:
        ctx.report("invalid-hint", c.hint.span,
                   f"expected a hint of one line of 1 to {HINT_MAX} characters; this one "
                   f"{problem}",
                   help="say what the job's owner can do: \"the container ran out of memory: "
                        "raise its limit\"")
    nested_causes(ctx, c.filter, f"the `when` of cause \"{c.name.value}\"")


def nested_causes(ctx: Context, root: nodes.Node, where: str) -> None:
    """`cause "x"` inside a define or a cause: refused, so that causes and defines never
    inline each other in a loop."""
    for n in walk(root):
        if isinstance(n, nodes.IsCause):
            ctx.report("invalid-filter", n.span, f"expected no `cause` term in {where}",
                       help="put the filter both need in a `define` and use `is NAME` in each")


def define_cycles(ctx: Context) -> None:
    uses = {name: [n for n in walk(d.filter) if isinstance(n, nodes.IsDefine)]
            for name, d in ctx.defines.items()}
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycle = trail[trail.index(name):] + [name]
            first = ctx.defines[cycle[0]]
            ctx.report("define-cycle", first.name.span,
                       f"define `{cycle[0]}` uses itself: {' -> '.join(cycle)}")
            return
        if name in done or name not in uses:
            return
        for use in uses[name]:
            visit(use.name.value, [*trail, name])
        done.add(name)

    for name in ctx.defines:
        visit(name, [])


def nesting(ctx: Context) -> set[nodes.Decl]:
    """Report declarations nested more than MAX_NESTING levels, defines expanded (a use of
    a define that is too deep itself is not reported again); returns the ones too deep."""
    depths: dict[str, int] = {}
    deep: set[nodes.Decl] = set()
    over: set[str] = set()
    causes = [d for d in ctx.decls if isinstance(d, nodes.Cause)]
    for decl in [*_defines_in_order(ctx), *causes,
                 *(d for d in ctx.decls if not isinstance(d, (nodes.Define, nodes.Cause)))]:
        if isinstance(decl, nodes.Define):
            depth, where = _nesting(decl.filter, depths)
            depths[decl.name.value] = depth
        elif isinstance(decl, nodes.Cause):
            depth, where = _nesting(decl.filter, depths)
            depths.setdefault(_CAUSE + decl.name.value, depth)
        else:
            depth, where = _nesting(decl, depths)
        if depth <= expr.MAX_NESTING:
            continue
        deep.add(decl)
        uses = {n.name.value if isinstance(n, nodes.IsDefine) else _CAUSE + n.name.value
                for n in walk(decl) if isinstance(n, (nodes.IsDefine, nodes.IsCause))}
        if not uses & over:
            ctx.report("nesting-too-deep", where,
                       f"this nests {depth} levels deep"
                       + (" with the defines it uses" if uses and not any(
                           u.startswith(_CAUSE) for u in uses) else
                          " with the causes and defines it uses" if uses else "")
                       + f"; at most {expr.MAX_NESTING} levels can be evaluated",
                       help="use defines side by side rather than each inside the next"
                       if uses else None)
        if isinstance(decl, nodes.Define):
            over.add(decl.name.value)
        elif isinstance(decl, nodes.Cause):
            over.add(_CAUSE + decl.name.value)
    return deep


_CAUSE = "cause "  # depths of causes are kept beside those of defines, apart by this prefix


def _defines_in_order(ctx: Context) -> list[nodes.Define]:
    """The defines, each after the defines it uses (a cycle, reported apart, in any order)."""
    order: list[nodes.Define] = []
    entered: set[str] = set()
    for first in ctx.defines:
        stack: list[tuple[str, bool]] = [(first, False)]
        while stack:
            name, done = stack.pop()
            if done:
                order.append(ctx.defines[name])
                continue
            if name in entered or name not in ctx.defines:
                continue
            entered.add(name)
            stack.append((name, True))
            stack.extend((n.name.value, False) for n in walk(ctx.defines[name].filter)
                         if isinstance(n, nodes.IsDefine))
    return order


def _nesting(root: Any, defines: dict[str, int]) -> tuple[int, Span]:
    """How many levels of AST nodes `root` nests, each `is NAME` counting as the define's
    filter (its depth in `defines`), and where the first level past MAX_NESTING is (when none
    is, the deepest)."""
    deepest, where = 0, root.span
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        below = children(node)
        if isinstance(node, nodes.IsDefine):
            depth += defines.get(node.name.value, 0)
        elif isinstance(node, nodes.IsCause):
            depth += defines.get(_CAUSE + node.name.value, 0)
        elif not below:
            continue  # a name, a number, an expression (checked on its own): no level
        if depth > deepest:
            if deepest <= expr.MAX_NESTING:
                where = node.span
            deepest = depth
        stack.extend((child, depth + 1) for child in reversed(below))
    return deepest, where
