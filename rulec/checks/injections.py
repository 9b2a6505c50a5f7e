"""Injections: the kinds they name, their filters, ops, shells and sidecars; the webhook's
settings."""
from __future__ import annotations

import re

from rulec import diagnostics, nodes
from rulec.checks import filters, values
from rulec.checks.context import Context, walk
from rulec.diagnostics import Note
from rulec.source import Span
from runtime import vocabulary

_EXEC_ARGV = re.compile(r"(?:^|[\s;&|(])exec\s+$")
_PIPE = re.compile(r"(?<![|>])\|(?!\|)")   # a pipeline's `|`, not `||` nor the clobbering `>|`
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")


def injection(ctx: Context, i: nodes.Injection) -> None:
    for name in i.kinds:
        if name.value not in ctx.kinds and name.value not in ctx.unsure:
            ctx.report("unknown-kind", name.span, f"no kind is called `{name.value}`",
                       help=diagnostics.did_you_mean(name.value, ctx.kinds))
    if i.match is not None:
        filters.filter_terms(ctx, i.match, None, failure=False, positive=True)
        top = i.match.args if isinstance(i.match, nodes.And) else (i.match,)
        top = tuple(n.arg if isinstance(n, nodes.Not) else n for n in top)
        for node in walk(i.match):
            if isinstance(node, nodes.KeyTest) and node.what == "namespace label" \
                    and node not in top:
                ctx.report("invalid-filter", node.span,
                           "a `namespace label` test must be joined with `and` at the top "
                           "of the injection's `where`",
                           help="the API server tests it, as the webhook's "
                                "namespaceSelector, before the webhook sees the pod")
    firsts: dict[tuple[str, str], Span] = {}
    for op in i.ops:
        operation(ctx, op, firsts)
    for container in i.wait or ():
        values.dns_label(ctx, container, "container")
    sidecar_names(ctx, i)


def sidecar_names(ctx: Context, i: nodes.Injection) -> None:
    """A sidecar named like a primary container of a kind it is injected into would be
    taken for that container, already injected (R504)."""
    for op in i.ops:
        if not isinstance(op, nodes.Sidecar):
            continue
        for name in i.kinds:
            k = ctx.kinds.get(name.value)
            primary = next((c for c in (k.primary_containers or ()) if c.value == op.name.value),
                           None) if k is not None else None
            if k is not None and primary is not None:
                ctx.report("sidecar-shadows-container", op.name.span,
                           f"sidecar `{op.name.value}` has the name of a primary container "
                           f"of kind `{k.name.value}`",
                           help="give the sidecar a name of its own",
                           notes=(Note("the primary container", primary.span),))
                break


def operation(ctx: Context, op: nodes.Op, firsts: dict[tuple[str, str], Span]) -> None:
    def unique(space: str, name: nodes.Text) -> None:
        first = firsts.setdefault((space, name.value), name.span)
        if first is not name.span:
            ctx.report("duplicate-name", name.span,
                       f"{space} `{name.value}` is declared twice in this injection",
                       notes=(Note("first declared here", first),))

    with_container = vocabulary.CONTAINER_PLACEHOLDERS
    if isinstance(op, nodes.Annotate):
        values.key(ctx, op.key, "annotation")
        values.template(ctx, op.value, vocabulary.INJECT_PLACEHOLDERS, "an injection")
    elif isinstance(op, nodes.SetLabel):
        values.key(ctx, op.key, "label")
        values.template(ctx, op.value, vocabulary.INJECT_PLACEHOLDERS, "an injection")
        literal = op.value.literal()
        if literal is not None:
            values.label_value(ctx, literal, op.value.span)
    elif isinstance(op, nodes.Env):
        values.env_name(ctx, op.name)
        containers(ctx, op.containers)
        values.template(ctx, op.value, with_container, "an `env` value")
    elif isinstance(op, nodes.Volume):
        values.dns_label(ctx, op.name, "volume")
        unique("volume", op.name)
    elif isinstance(op, nodes.Mount):
        values.dns_label(ctx, op.volume, "volume")
        values.mount_path(ctx, op.path)
        containers(ctx, op.containers)
    elif isinstance(op, nodes.Sidecar):
        values.dns_label(ctx, op.name, "sidecar")
        unique("sidecar", op.name)
        if op.image is None:
            ctx.report("missing-clause", op.name.span,
                       f"sidecar `{op.name.value}` has no `image`")
        elif op.image.literal() == "":
            ctx.report("empty-value", op.image.span,
                       f"sidecar `{op.name.value}` has an empty image",
                       help="the API server refuses a container without an image")
        for tpl in (op.image, *(op.command or ()), *(op.args or ())):
            values.template(ctx, tpl, vocabulary.INJECT_PLACEHOLDERS, "a sidecar")
        for env in op.env:
            values.env_name(ctx, env.name)
            values.template(ctx, env.value, vocabulary.INJECT_PLACEHOLDERS, "a sidecar")
        for mount in op.mounts:
            values.dns_label(ctx, mount.volume, "volume")
            values.mount_path(ctx, mount.path)
    else:
        containers(ctx, op.containers)
        for tpl in op.argv or ():
            values.template(ctx, tpl, with_container, "a `wrap`")
        if op.shell is not None:
            values.template(ctx, op.shell, vocabulary.SHELL_PLACEHOLDERS, "a `wrap ... shell`")
            shell(ctx, op.shell)


def shell(ctx: Context, tpl: nodes.Template) -> None:
    text = ""
    for n, part in enumerate(tpl.parts):
        if isinstance(part, nodes.Placeholder) and part.name == "argv":
            if not _EXEC_ARGV.search(text):
                ctx.report("wrap-without-exec", part.span,
                           "`{argv}` runs as a child of the shell, so it gets no signals",
                           help="write `exec {argv}` so the program replaces the shell")
            after = "".join(p if isinstance(p, str) else "_" for p in tpl.parts[n + 1:])
            if _PIPE.search(_QUOTED.sub("", after.split("\n")[0])):
                ctx.report("wrap-loses-status", part.span,
                           "the output of `{argv}` is piped: the container exits with the "
                           "status of the pipeline's last command, not the program's",
                           help="redirect to the file instead (`exec {argv} >>FILE 2>&1`), "
                                "or through a FIFO to keep stdout too: `mkfifo /tmp/out; "
                                "tee -a FILE </tmp/out & exec {argv} >/tmp/out 2>&1`")
            return
        text += part if isinstance(part, str) else "_"
    ctx.report("wrap-drops-command", tpl.span,
               "this shell never runs the container's own command",
               help="include `{argv}` (usually as `exec {argv}`)")


def containers(ctx: Context, c: nodes.Containers | None) -> None:
    for name in c.names if c is not None else ():
        values.dns_label(ctx, name, "container")


def webhooks(ctx: Context, hooks: list[nodes.Webhook]) -> None:
    failure = timeout = None
    for h in hooks:
        if h.failure is not None:
            if failure is not None:
                ctx.report("duplicate-clause", h.failure.span,
                           "`webhook failure` is set twice",
                           notes=(Note("first set here", failure),))
            failure = failure or h.failure.span
        if h.timeout is not None:
            if timeout is not None:
                ctx.report("duplicate-clause", h.timeout.span,
                           "`webhook timeout` is set twice",
                           notes=(Note("first set here", timeout),))
            timeout = timeout or h.timeout.span
            if not 1 <= h.timeout.seconds <= 30:
                ctx.report("value-out-of-range", h.timeout.span,
                           "the webhook timeout must be between 1s and 30s")
