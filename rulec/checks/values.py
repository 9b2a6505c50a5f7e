"""Values: the leaves every topic checks (keys, label values, names, placeholders, phases)."""
from __future__ import annotations

from typing import Sequence

from rulec import diagnostics, names, nodes
from rulec.checks.context import Context
from rulec.diagnostics import Note
from rulec.source import Span
from runtime import vocabulary


def phase_list(ctx: Context, phases: Sequence[nodes.Name], what: str) -> None:
    """Phases of `only [...]` or a status map: each known, none given twice."""
    firsts: dict[str, Span] = {}
    for name in phases:
        phase(ctx, name)
        first = firsts.setdefault(name.value.lower(), name.span)
        if first is not name.span:
            ctx.report("duplicate-clause", name.span,
                       f"phase `{name.value}` is {what} twice",
                       notes=(Note(f"first {what} here", first),))


def phase(ctx: Context, name: nodes.Name) -> None:
    if name.value.lower() not in {p.lower() for p in vocabulary.PHASES}:
        ctx.report("unknown-phase", name.span, f"unknown phase `{name.value}`",
                   help=diagnostics.did_you_mean(name.value, vocabulary.PHASES)
                   or f"phases are {', '.join(vocabulary.PHASES)}")


def template(ctx: Context, tpl: nodes.Template | None, allowed: Sequence[str], where: str) -> None:
    for part in tpl.parts if tpl is not None else ():
        if not isinstance(part, nodes.Placeholder) or part.name in allowed:
            continue
        if part.name in vocabulary.VERDICT_PLACEHOLDERS or part.name == "argv":
            hint = ("`{argv}` exists only in `wrap ... with shell`" if part.name == "argv"
                    else f"placeholders here: {', '.join(allowed)}")
            ctx.report("unknown-placeholder", part.span,
                       f"placeholder `{{{part.name}}}` has no value in {where}", help=hint)
        else:
            ctx.report("unknown-placeholder", part.span,
                       f"unknown placeholder `{{{part.name}}}`",
                       help=diagnostics.did_you_mean(part.name, allowed)
                       or f"placeholders here: {', '.join(allowed)}")


def key(ctx: Context, key: nodes.Text, what: str) -> None:
    problem = names.key_problem(key.value)
    if problem:
        ctx.report("invalid-key", key.span, f"invalid {what} key \"{key.value}\": {problem}")


def label_value(ctx: Context, value: str, span: Span) -> None:
    problem = names.label_value_problem(value)
    if problem:
        ctx.report("invalid-label-value", span, f"invalid label value \"{value}\": {problem}")


def env_name(ctx: Context, name: nodes.Text) -> None:
    """Names the API server accepts: not empty, printable ASCII, no `=` (R307)."""
    value = name.value
    odd = next((c for c in value if not " " <= c <= "~"), None)
    if not value:
        problem = "it is empty"
    elif "=" in value:
        problem = "it holds `=`, which ends a name in the environment"
    elif odd is not None:
        problem = f"it holds {diagnostics.show_char(odd)}, which is not printable ASCII"
    else:
        return
    shown = f" \"{value}\"" if odd is None else ""
    ctx.report("invalid-env-name", name.span,
               f"invalid environment variable name{shown}: {problem}",
               help="the API server refuses the pod, so every pod the injection matches "
                    "would be refused")


def mount_path(ctx: Context, path: nodes.Text) -> None:
    if not path.value:
        ctx.report("empty-value", path.span, "the mount path is empty",
                   help="mount the volume at an absolute path such as \"/var/run/x\"")


def dns_label(ctx: Context, name: nodes.Text, what: str) -> None:
    problem = names.dns_label_problem(name.value)
    if problem:
        ctx.report("invalid-dns-label", name.span,
                   f"invalid {what} name \"{name.value}\": {problem}")
