"""Names: declarations declared once, defines that do not use themselves, and declarations
nested no deeper than can be evaluated."""
from __future__ import annotations

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
    for decl in [*_defines_in_order(ctx),
                 *(d for d in ctx.decls if not isinstance(d, nodes.Define))]:
        is_define = isinstance(decl, nodes.Define)
        if isinstance(decl, nodes.Define):
            depth, where = _nesting(decl.filter, depths)
            depths[decl.name.value] = depth
        else:
            depth, where = _nesting(decl, depths)
        if depth <= expr.MAX_NESTING:
            continue
        deep.add(decl)
        uses = {n.name.value for n in walk(decl) if isinstance(n, nodes.IsDefine)}
        if not uses & over:
            ctx.report("nesting-too-deep", where,
                       f"this nests {depth} levels deep"
                       + (" with the defines it uses" if uses else "")
                       + f"; at most {expr.MAX_NESTING} levels can be evaluated",
                       help="use defines side by side rather than each inside the next"
                       if uses else None)
        if isinstance(decl, nodes.Define):
            over.add(decl.name.value)
    return deep


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
        elif not below:
            continue  # a name, a number, an expression (checked on its own): no level
        if depth > deepest:
            if deepest <= expr.MAX_NESTING:
                where = node.span
            deepest = depth
        stack.extend((child, depth + 1) for child in reversed(below))
    return deepest, where
