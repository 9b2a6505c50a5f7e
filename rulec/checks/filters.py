"""Filters: verdict conditions and the pod filters of conditions, policies and injections."""
from __future__ import annotations

from rulec import diagnostics, expr, nodes
from rulec.checks import schema_paths, values
from rulec.checks.context import Context, walk
from rulec.diagnostics import Note
from rulec.source import Span
from runtime import vocabulary

INT32 = (-2**31, 2**31 - 1)


def condition(ctx: Context, n: nodes.Node, k: nodes.Kind) -> None:
    if isinstance(n, (nodes.And, nodes.Or)):
        for a in n.args:
            condition(ctx, a, k)
    elif isinstance(n, nodes.Not):
        condition(ctx, n.arg, k)
    elif isinstance(n, nodes.JobExpr):
        expr.check_condition(ctx.parsed[n.expr], ctx.out, schema_paths.field_types(ctx, k))
    elif isinstance(n, (nodes.PodQuant, nodes.PodCount)):
        if n.task is not None:
            ctx.need_task(k, n.task.span, "`of task`")
        if n.filter is not None:
            filter_root(ctx, n.filter, k, failure=n.state in vocabulary.FAILURE_STATES)
        if isinstance(n, nodes.PodCount) and isinstance(n.value, nodes.Number) \
                and n.value.value < 0:
            ctx.report("value-out-of-range", n.value.span,
                       "a count of pods is never negative")
    elif isinstance(n, nodes.TaskQuant):
        ctx.need_task(k, n.span, "a task condition")
    elif isinstance(n, nodes.TaskCount):
        ctx.need_task(k, n.span, "`count tasks`")
        if isinstance(n.value, nodes.Number) and n.value.value < 0:
            ctx.report("value-out-of-range", n.value.span,
                       "a count of tasks is never negative")


def filter_root(ctx: Context, root: nodes.Node, k: nodes.Kind | None, failure: bool) -> None:
    top = root.args if isinstance(root, nodes.And) else (root,)
    scopes = [a for a in top if isinstance(a, nodes.ContainerScope)]
    for node in walk(root):
        if isinstance(node, nodes.ContainerScope) and node not in scopes:
            ctx.report("invalid-filter", node.span,
                       "`container` must be joined with `and` at the top of the filter",
                       help="it scopes every exit, reason and restarts term of its filter")
    for extra in scopes[1:]:
        ctx.report("invalid-filter", extra.span, "a filter scopes to one container",
                   notes=(Note("the first `container` term", scopes[0].span),))
    if scopes and not any(isinstance(n, (nodes.ExitCodes, nodes.ContainerReason, nodes.Restarts))
                          for n in walk(root)):
        ctx.report("invalid-filter", scopes[0].span, "this `container` term scopes nothing",
                   help="join it with an `exit`, `reason` or `restarts` term using `and`")
    filter_terms(ctx, root, k, failure, positive=True)


def filter_terms(ctx: Context, n: nodes.Node, k: nodes.Kind | None, failure: bool,
                 positive: bool) -> None:
    if isinstance(n, (nodes.And, nodes.Or)):
        for a in n.args:
            filter_terms(ctx, a, k, failure, positive)
    elif isinstance(n, nodes.Not):
        filter_terms(ctx, n.arg, k, failure, not positive)
    elif isinstance(n, nodes.ExitCodes):
        exit_codes(ctx, n, failure and positive and not n.negate)
    elif isinstance(n, nodes.ContainerScope):
        values.dns_label(ctx, n.name, "container")
    elif isinstance(n, nodes.TaskIs):
        ctx.need_task(k, n.span, "a task filter")
    elif isinstance(n, nodes.Restarts):
        if n.value.value < 0:
            ctx.report("value-out-of-range", n.value.span,
                       "a restart count is never negative")
    elif isinstance(n, nodes.KeyTest):
        values.key(ctx, n.key, n.what)
        if n.what != "annotation":
            for v in n.values or ():
                values.label_value(ctx, v.value, v.span)
    elif isinstance(n, nodes.PodCondition):
        for status in n.statuses:
            if status.value not in vocabulary.CONDITION_STATUSES:
                ctx.report("unknown-condition-status", status.span,
                           f"a condition status is never \"{status.value}\"",
                           help=diagnostics.did_you_mean(status.value,
                                                         vocabulary.CONDITION_STATUSES)
                           or "condition statuses are \"True\", \"False\" and \"Unknown\"")
    elif isinstance(n, nodes.Where):
        expr.check_condition(ctx.parsed[n.expr], ctx.out)
    elif isinstance(n, nodes.IsDefine):
        if n.name.value not in ctx.defines and n.name.value not in ctx.unsure:
            ctx.report("unknown-define", n.name.span, f"no define is called `{n.name.value}`",
                       help=diagnostics.did_you_mean(n.name.value, ctx.defines))
    elif isinstance(n, nodes.IsCause):
        if n.name.value not in ctx.causes and n.name.value not in ctx.unsure:
            ctx.report("unknown-cause", n.name.span,
                       f"expected the name of a declared cause, got \"{n.name.value}\"",
                       help=diagnostics.did_you_mean(n.name.value, ctx.causes)
                       or "declare it: `cause \"name\" when FILTER hint \"...\"`")


def exit_codes(ctx: Context, n: nodes.ExitCodes, on_failure: bool) -> None:
    low, high = INT32
    for code in (*n.codes, *(bound for pair in n.ranges for bound in pair)):
        if not low <= code.value <= high:
            ctx.report("exit-code-range", code.span,
                       f"exit code {code.value} is outside the 32-bit range of exit codes "
                       "and never matches")
    for lo, hi in n.ranges:
        if lo.value > hi.value:
            ctx.report("exit-code-range", Span(lo.span.path, lo.span.line, lo.span.column,
                                               hi.span.end_line, hi.span.end_column),
                       f"the range {lo.value}..{hi.value} is empty")
    zero = next((c.span for c in n.codes if c.value == 0), None)  # a range may well match
    if on_failure and zero is not None:
        ctx.report("exit-zero-on-failure", zero,
                   "exit 0 in a filter on a failure never matches",
                   help="on a failure only containers that exited non-zero are read; "
                        "match the code they exit with")
