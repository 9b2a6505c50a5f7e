"""Kinds: a kind's header, pods, verdicts and status; its policies (`policies`) and its schema
paths (`schema_paths`) are checked from here."""
from __future__ import annotations

import re

from rulec import diagnostics, nodes
from rulec.checks import filters, policies, schema_paths, values
from rulec.checks.context import Context
from rulec.diagnostics import Note
from rulec.source import Span
from runtime import vocabulary

_NAME_PREFIX = re.compile(r"[a-z0-9][a-z0-9-]{0,61}")


def kind(ctx: Context, k: nodes.Kind) -> None:
    if k.scope is not None:
        scope(ctx, k.scope)
    if k.primary_prefix is not None and not _NAME_PREFIX.fullmatch(k.primary_prefix.value):
        ctx.report("invalid-dns-label", k.primary_prefix.span,
                   f"invalid container name prefix \"{k.primary_prefix.value}\": no container "
                   "name starts with it",
                   help="container names are lower-case letters, digits and `-`, starting "
                        "with a letter or digit, at most 63 characters")
    for label in k.pod_labels:
        values.key(ctx, label.key, "label")
        values.template(ctx, label.value, vocabulary.JOB_PLACEHOLDERS, "a pod selector")
        literal = label.value.literal()
        if literal is not None:
            values.label_value(ctx, literal, label.value.span)
    if k.task_label is not None:
        values.key(ctx, k.task_label, "label")
    if k.primary_pods is not None:
        filters.filter_root(ctx, k.primary_pods, k, failure=False)
    for name in k.primary_containers or ():
        values.dns_label(ctx, name, "container")
    for v in k.verdicts:
        if v.when is not None:
            filters.condition(ctx, v.when, k)
        values.template(ctx, v.reason, vocabulary.VERDICT_PLACEHOLDERS, "a verdict")
        values.template(ctx, v.message, vocabulary.VERDICT_PLACEHOLDERS, "a verdict")
    verdict_order(ctx, k)
    for p in k.policies:
        policies.policy(ctx, p, k)
    policies.policy_ids(ctx, k)
    policies.recipes(ctx, k)
    policies.shadowing(ctx, k)
    policies.task_failures(ctx, k)
    for e in ctx.extensions(k):
        for p in e.policies:
            policies.policy(ctx, p, k)
    if k.status is not None:
        values.phase_list(ctx, k.status.phase_only or (), "listed")
        values.phase_list(ctx, [e.phase for e in k.status.phase_map], "mapped")
        firsts: dict[str, Span] = {}
        for value in k.status.phase_over or ():
            first = firsts.setdefault(value.value, value.span)
            if first is not value.span:
                ctx.report("duplicate-clause", value.span,
                           f"value {value.value!r} is listed twice in `over`",
                           notes=(Note("first listed here", first),))
    schema_paths.check_kind(ctx, k)


def scope(ctx: Context, scope: nodes.Node) -> None:
    """A kind's scope: an `and` of label tests and `namespace` lists (a label selector and
    the namespaces to watch)."""
    for term in scope.args if isinstance(scope, nodes.And) else (scope,):
        negated = isinstance(term, nodes.Not)
        inner = term.arg if isinstance(term, nodes.Not) else term
        if isinstance(inner, nodes.KeyTest) and inner.what == "label":
            filters.filter_terms(ctx, inner, None, failure=False, positive=True)
        elif isinstance(inner, nodes.Namespace) and not negated and not inner.negate:
            pass
        else:
            ctx.report("invalid-filter", term.span,
                       "a kind's scope is an `and` of `label` tests and `namespace` lists",
                       help="it must be a Kubernetes label selector and the namespaces to "
                            "watch: `where label \"team\" = \"ml\" and namespace in [\"a\"]`")


def extend(ctx: Context, e: nodes.Extend) -> None:
    if e.name.value not in ctx.kinds and e.name.value not in ctx.unsure:
        ctx.report("unknown-kind", e.name.span, f"no kind is called `{e.name.value}`",
                   help=diagnostics.did_you_mean(e.name.value, ctx.kinds))


def verdict_order(ctx: Context, k: nodes.Kind) -> None:
    reachable: list[nodes.Verdict] = []
    otherwise = None
    for v in k.verdicts:
        if otherwise is not None:
            ctx.report("unreachable-verdict", v.span,
                       f"this `{v.phase.lower()}` verdict is never used",
                       notes=(Note("`otherwise` before it always holds", otherwise.span),))
            continue
        reachable.append(v)
        if v.when is None:
            otherwise = v
    if not any(v.phase in vocabulary.TERMINAL_PHASES for v in reachable):
        ctx.report("no-terminal-verdict", k.name.span,
                   f"kind `{k.name.value}` never becomes Succeeded or Failed",
                   help="add verdicts such as `succeeded when all pods succeeded` and "
                        "`failed when any pod failed`")
