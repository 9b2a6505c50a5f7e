"""What every check reads and writes: the program's declarations and where diagnostics go."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from rulec import diagnostics, expr, nodes
from rulec.diagnostics import Diagnostic, Note
from rulec.source import Span

if TYPE_CHECKING:
    from rulec.schema import SchemaIndex


@dataclass(slots=True)
class Context:
    """One check of a whole program. `kinds` and `defines` are filled by the names check,
    which runs first; `parsed` holds every expression's JMESPath parse."""

    files: list[nodes.File]
    unsure: frozenset[str]           # names a declaration with a syntax error may declare
    schemas: SchemaIndex | None      # the CRD schemas of `--crd`, if any
    out: list[Diagnostic] = field(default_factory=list)
    decls: list[nodes.Decl] = field(default_factory=list)
    kinds: dict[str, nodes.Kind] = field(default_factory=dict)
    defines: dict[str, nodes.Define] = field(default_factory=dict)
    causes: dict[str, nodes.Cause] = field(default_factory=dict)
    parsed: dict[nodes.Expr, expr.Parsed] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.decls = [d for f in self.files for d in f.decls]

    def report(self, name: str, span: Span, message: str, help: str | None = None,
               notes: Iterable[Note] = ()) -> None:
        self.out.append(diagnostics.make(name, span, message, help, notes))

    def extensions(self, k: nodes.Kind) -> list[nodes.Extend]:
        return [d for d in self.decls
                if isinstance(d, nodes.Extend) and d.name.value == k.name.value]

    def need_task(self, k: nodes.Kind | None, span: Span, what: str) -> None:
        if k is not None and not k.has_task:
            self.report("no-task-selector", span,
                        f"{what} needs a task, but kind `{k.name.value}` declares no `task`",
                        help='add `task label "..."` or `task <<expr>>` to the kind')


def walk(node: Any) -> Iterator[Any]:
    """Every AST node under `node` (itself included), depth first, in field order."""
    stack = [node]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(reversed(children(item)))


def children(node: Any) -> list[Any]:
    """The AST nodes held by `node`'s fields, in field order (tuples of nodes flattened)."""
    out: list[Any] = []
    stack = [getattr(node, name) for name in reversed(node.__struct_fields__)]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        elif isinstance(item, nodes.AstNode):
            out.append(item)
    return out


def api_versions(k: nodes.Kind) -> Iterator[tuple[str, Span]]:
    """Every apiVersion a kind serves, with where it is written."""
    yield k.api_version.value, k.api_version.span
    group = f"{k.group}/" if k.group else ""
    for v in k.more_versions:
        yield group + v.value, v.span
