"""Schema paths: a kind's status paths, the fields its recipes write and its job-side JMESPath
reads, looked up in the CRD schemas `--crd` gave (rulec.schema)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Sequence

from rulec import expr, nodes
from rulec.checks.context import Context, api_versions
from rulec.source import Span

if TYPE_CHECKING:
    from rulec.schema import PathProblem, SchemaIndex


def field_types(ctx: Context, k: nodes.Kind) -> expr.FieldTypes | None:
    """The JSON types of a kind's fields, from its CRD schema when `--crd` gave one."""
    if ctx.schemas is None:
        return None
    group, _, version = k.api_version.value.rpartition("/")
    schema = ctx.schemas.schemas.get((group, version, k.kind.value))
    if schema is None:
        return None
    return lambda path: _schema_types(schema, path)


def check_kind(ctx: Context, k: nodes.Kind) -> None:
    """Look the kind's status paths and job-side JMESPath reads up in the CRD schema of
    each version it serves."""
    index = ctx.schemas
    if index is None:
        return
    kind = k.kind.value
    for api, span in api_versions(k):
        if not index.has_kind(api, kind):
            ctx.report("no-schema", span if span is not k.api_version.span else k.kind.span,
                       f"no CRD given defines `{api} {kind}`; its paths are not checked")
            continue
        if k.status is not None:
            for path in (k.status.phase, k.status.reason, k.status.message):
                if path is not None:
                    _status_path(ctx, index, k, api, path)
        _recipe_paths(ctx, index, k, api)
        for e in _job_exprs(k, ctx.extensions(k)):
            parsed = ctx.parsed.get(e)
            if parsed is None or parsed.tree is None:
                continue
            _expr_paths(ctx, index, k, api, e)


def _status_path(ctx: Context, index: SchemaIndex, k: nodes.Kind, api: str,
                 path: nodes.FieldPath) -> None:
    problem = index.check_path(api, k.kind.value, path.segments)
    if problem is None:
        return
    column = path.span.column + sum(len(s) + 1 for s in path.segments[:problem.index])
    span = Span(path.span.path, path.span.line, column, path.span.line,
                column + len(problem.segment))
    _unknown_field(ctx, k.kind.value, api, span, path.segments[:problem.index + 1], problem)


def _recipe_paths(ctx: Context, index: SchemaIndex, k: nodes.Kind, api: str) -> None:
    """The fields the kind's recipes write, and those of the objects they create where a
    CRD given defines them."""
    for r in k.recipes:
        for step in r.steps:
            if step.op == "set" and step.path is not None and step.on is not None:
                on = step.on     # another kind's field: checked where a CRD given defines it
                if index.has_kind(on.api_version.value, on.kind.value):
                    problem = index.check_path(on.api_version.value, on.kind.value,
                                               step.path.segments)
                    if problem is not None:
                        _unknown_field(ctx, on.kind.value, on.api_version.value, step.path.span,
                                       step.path.segments[:problem.index + 1], problem)
            elif step.op == "set" and step.path is not None:
                _status_path(ctx, index, k, api, step.path)
            elif step.op == "condition":
                problem = index.check_path(api, k.kind.value, ("status", "conditions"))
                if problem is not None:
                    _unknown_field(ctx, k.kind.value, api, step.span,
                                   ("status", "conditions")[:problem.index + 1], problem)
            elif step.op == "create" and step.api_version and step.kind and \
                    index.has_kind(step.api_version.value, step.kind.value):
                for key, _ in step.body:
                    problem = index.check_path(step.api_version.value, step.kind.value,
                                               (key.value,))
                    if problem is not None:
                        _unknown_field(ctx, step.kind.value, step.api_version.value,
                                       key.span, (key.value,), problem)


def _expr_paths(ctx: Context, index: SchemaIndex, k: nodes.Kind, api: str,
                e: nodes.Expr) -> None:
    from rulec import schema

    reported: set[tuple[str, ...]] = set()
    for path in schema.paths_in_jmespath(e.text):
        problem = index.check_path(api, k.kind.value, path)
        if problem is None:
            continue
        bad = path[:problem.index + 1]
        if bad in reported:
            continue
        reported.add(bad)
        _unknown_field(ctx, k.kind.value, api, _field_span(e, problem.segment), bad, problem)


def _unknown_field(ctx: Context, kind: str, api: str, span: Span, path: tuple[str, ...],
                   problem: PathProblem) -> None:
    parent = ".".join(path[:-1]) or "the object"
    help = f"did you mean `{problem.suggestion}`?" if problem.suggestion else None
    if help is None and problem.expected:
        shown = ", ".join(problem.expected[:8]) + (", ..." if len(problem.expected) > 8 else "")
        help = f"fields of {parent}: {shown}"
    ctx.report("unknown-field", span,
               f"`{'.'.join(path)}` is not in the schema of `{api} {kind}`",
               help=help)


def _job_exprs(k: nodes.Kind, extensions: Sequence[nodes.Extend] = ()) -> Iterator[nodes.Expr]:
    """The expressions of a kind that read the job object (not the pod)."""
    def in_condition(n: nodes.Node) -> Iterator[nodes.Expr]:
        if isinstance(n, (nodes.And, nodes.Or)):
            for a in n.args:
                yield from in_condition(a)
        elif isinstance(n, nodes.Not):
            yield from in_condition(n.arg)
        elif isinstance(n, nodes.JobExpr):
            yield n.expr
        elif isinstance(n, (nodes.PodCount, nodes.TaskCount)) and isinstance(n.value, nodes.Expr):
            yield n.value

    def in_template(t: nodes.Template | None) -> Iterator[nodes.Expr]:
        for part in t.parts if t is not None else ():
            if isinstance(part, nodes.Expr):
                yield part

    for label in k.pod_labels:
        yield from in_template(label.value)
    for v in k.verdicts:
        if v.when is not None:
            yield from in_condition(v.when)
        yield from in_template(v.reason)
        yield from in_template(v.message)
    if k.final is not None and k.final.until is not None:
        yield k.final.until
    if k.foreign is not None:
        yield k.foreign.when
    for p in (*k.policies, *(p for e in extensions for p in e.policies)):
        action: nodes.Action | None = p.action
        while action is not None:
            yield from in_template(action.reason)
            yield from in_template(action.message)
            if isinstance(action.max, nodes.Expr):
                yield action.max
            action = action.fallback


def _schema_types(schema: Any, path: tuple[str, ...]) -> frozenset[str] | None:
    """The JSON types an OpenAPI schema gives `path`, or None when it does not say."""
    node = schema
    for segment in path:
        if not isinstance(node, dict) or node.get("x-kubernetes-preserve-unknown-fields"):
            return None
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        node = properties.get(segment, extra if isinstance(extra, dict) else None)
        if node is None:
            return None
    if node.get("x-kubernetes-int-or-string"):
        return frozenset({"number", "string"})
    kind = node.get("type")
    if kind is None or node.get("x-kubernetes-preserve-unknown-fields"):
        return None
    return frozenset({"number" if kind == "integer" else kind})


def _field_span(e: nodes.Expr, segment: str) -> Span:
    """Where `segment` is first read in the expression (the whole expression if not found)."""
    from jmespath import lexer

    for tok in lexer.Lexer().tokenize(e.text):
        if tok["type"] in ("unquoted_identifier", "quoted_identifier") and tok["value"] == segment:
            length = len(segment) + (2 if tok["type"] == "quoted_identifier" else 0)
            return expr.position(e, tok["start"], length)
    return e.span
