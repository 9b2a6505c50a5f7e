"""Checking: every rule the grammar cannot express, collected as diagnostics in one pass.

Never raises on user error. Cross-file references are resolved over the whole program; when a
file did not parse, "unknown name" errors are held back (the name may live in that file).

The checks themselves live in `rulec.checks`, one module per topic over a shared Context; this
module runs them in order (which is the order of the diagnostics) and applies the comments that
allow warnings.
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Iterable, Sequence

from rulec import diagnostics, expr, nodes
from rulec.checks import conflicts, filters, injections, kinds, names
from rulec.checks.context import Context
from rulec.diagnostics import Diagnostic
from rulec.source import SourceFile

if TYPE_CHECKING:
    from rulec.schema import SchemaIndex


def check(files: Sequence[tuple[SourceFile, nodes.File]], found: Iterable[Diagnostic], *,
          unsure: frozenset[str] = frozenset(),
          schemas: SchemaIndex | None = None) -> list[Diagnostic]:
    """`found` plus everything the checker finds, less the warnings that comments allow.

    `unsure`: kind and define names that a declaration with a syntax error may declare;
    references to them are not reported (the declaration could not be read)."""
    ctx = Context([f for _, f in files], unsure, schemas)
    _run(ctx)
    return _allowed([*found, *ctx.out], [f for _, f in files])


def _run(ctx: Context) -> None:
    for file in ctx.files:
        for e in file.exprs:
            ctx.parsed[e] = expr.parse(e, ctx.out)
            expr.check_quotes(e, ctx.out)
            expr.check_not_precedence(ctx.parsed[e], ctx.out)
            expr.check_functions(ctx.parsed[e], ctx.out)
    names.declarations(ctx)
    names.define_cycles(ctx)
    deep = names.nesting(ctx)
    for decl in ctx.decls:
        if decl in deep:
            continue  # checking it would recurse too deeply
        if isinstance(decl, nodes.Kind):
            kinds.kind(ctx, decl)
        elif isinstance(decl, nodes.Extend):
            kinds.extend(ctx, decl)
        elif isinstance(decl, nodes.Injection):
            injections.injection(ctx, decl)
        elif isinstance(decl, nodes.Define):
            filters.filter_root(ctx, decl.filter, None, failure=False)
            names.nested_causes(ctx, decl.filter, f"define `{decl.name.value}`")
        elif isinstance(decl, nodes.Cause):
            filters.filter_root(ctx, decl.filter, None, failure=False)
            names.cause(ctx, decl)
    conflicts.conflicts(ctx, [d for d in ctx.decls if isinstance(d, nodes.Injection)])
    injections.webhooks(ctx, [d for d in ctx.decls if isinstance(d, nodes.Webhook)])


def _allowed(found: list[Diagnostic], files: list[nodes.File]) -> list[Diagnostic]:
    """Drop the warnings that a `# rulec: allow NAME` comment covers; report unknown names.

    A comment covers its line, or the next line when it stands alone; when that line is part
    of a verdict or a policy, it covers the whole statement (which `rulec fmt` may break).
    """
    allows = [a for f in files for a in f.allows]
    if not allows:
        return found
    out: list[Diagnostic] = []
    for a in allows:
        for name in a.names:
            code = diagnostics.BY_NAME.get(name)
            if code is None:
                out.append(diagnostics.make(
                    "unknown-allow", a.span, f"`{name}` is not a diagnostic name",
                    help=diagnostics.did_you_mean(
                        name, [c.name for c in diagnostics.CODES
                               if c.severity == diagnostics.WARNING])))
            elif code.severity == diagnostics.ERROR:
                out.append(diagnostics.make(
                    "unknown-allow", a.span, f"`{name}` is an error and cannot be allowed"))
    # Verdicts and policies, the statements fmt may break: their first and last lines, by file.
    statements: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    for f in files:
        for kind in (d for d in f.decls if isinstance(d, nodes.Kind)):
            for span in (*(v.span for v in kind.verdicts), *(p.span for p in kind.policies)):
                statements[span.path].append((span.line, span.end_line))
    covered: defaultdict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for a in allows:
        line = a.span.line + 1 if a.own_line else a.span.line
        ranges = [r for r in statements[a.span.path] if r[0] <= line <= r[1]]
        for name in a.names:
            covered[(a.span.path, name)].extend(ranges or [(line, line)])
    for d in found:
        ranges = covered.get((d.span.path, d.name), [])
        if d.severity == diagnostics.WARNING and any(
                d.span.line <= end and start <= d.span.end_line for start, end in ranges):
            continue
        out.append(d)
    return out
