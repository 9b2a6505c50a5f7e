"""Conflicts: two injections (or two ops of one) that set the same field of a pod differently,
unless their filters are provably disjoint."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from rulec import nodes
from rulec.checks.context import Context
from rulec.diagnostics import Note
from rulec.source import Span


@dataclass(frozen=True, slots=True)
class _Write:
    """One field an injection op sets, for conflict detection."""

    field: str
    value: Any
    injection: nodes.Injection
    containers: nodes.Containers | None
    span: Span


def conflicts(ctx: Context, injections: list[nodes.Injection]) -> None:
    by_field: dict[str, list[_Write]] = defaultdict(list)
    for i in injections:
        for op in i.ops:
            for w in _writes(op, i):
                by_field[w.field].append(w)
    injected = _injected_keys(injections)
    for writes in by_field.values():
        for n, later in enumerate(writes):
            for earlier in writes[:n]:
                if _clash(ctx, earlier, later, injected):
                    ctx.report(
                        "conflicting-injection", later.span,
                        f"{_describe_field(later.field)} is already set differently",
                        notes=(Note("set here", earlier.span),))
                    break


def _clash(ctx: Context, a: _Write, b: _Write, injected: frozenset[str]) -> bool:
    if a.injection is b.injection and a.field.startswith("sidecar:"):
        return False  # reported as a duplicate name
    shared = set(_kind_names(a.injection)) & set(_kind_names(b.injection))
    if a.injection is not b.injection:
        shared = {k for k in shared if not _disjoint(
            a.injection.match, b.injection.match, _key_resolver(ctx.kinds.get(k), injected))}
    if a.field.startswith("sidecar:"):
        return bool(shared)
    if a.value == b.value:
        return False
    if a.injection is b.injection:
        shared = shared or {""}
    if a.containers is None and b.containers is None:
        return bool(shared)
    return any(_overlap(a.containers, b.containers, ctx.kinds.get(k)) for k in shared)


def _overlap(a: nodes.Containers | None, b: nodes.Containers | None,
             k: nodes.Kind | None) -> bool:
    primary = None if k is None or k.primary_containers is None else {
        c.value for c in k.primary_containers}

    def resolve(c: nodes.Containers | None) -> set[str] | None:
        select = c.select if c is not None else "primary"
        if select == "all" or (select == "primary" and primary is None):
            return None
        return primary if select == "primary" else {n.value for n in c.names}  # type: ignore[union-attr]

    sa, sb = resolve(a), resolve(b)
    return sa is None or sb is None or bool(sa & sb)


def _kind_names(i: nodes.Injection) -> list[str]:
    return [k.value for k in i.kinds]


# ---------------------------------------------------------------- disjoint injection filters
# A test of one key's value: (values, negate); values None tests presence. Keys are
# `label:K`, `annotation:K`, `namespace` and `task`.
_Test = tuple[frozenset[str] | None, bool]
# The runtime records what it injected in annotations of its own (docs/injection.md).
_RUNTIME_ANNOTATIONS = "annotation:jobrules.dev/"


def _disjoint(a: nodes.Node | None, b: nodes.Node | None,
              resolve: Callable[[str], str | None]) -> bool:
    """Whether no pod can match both filters, provably from their top-level `and` of
    label, annotation, namespace and task tests on the keys that `resolve` keeps.

    Other terms (`or`, `where`, `primary`) are left out, which only widens what a filter
    matches: filters proved disjoint without them are disjoint with them."""
    tests: dict[str, list[_Test]] = defaultdict(list)
    for key, test in (*_tests(a), *_tests(b)):
        resolved = resolve(key)
        if resolved is not None:
            tests[resolved].append(test)
    return any(not _satisfiable(t) for t in tests.values())


def _tests(match: nodes.Node | None) -> Iterator[tuple[str, _Test]]:
    """The key tests that every pod `match` keeps passes (its top-level `and`)."""
    for term in (match.args if isinstance(match, nodes.And) else (match,) if match else ()):
        flip = isinstance(term, nodes.Not)
        term = term.arg if isinstance(term, nodes.Not) else term
        if isinstance(term, nodes.KeyTest):
            values = None if term.values is None else frozenset(v.value for v in term.values)
            yield f"{term.what}:{term.key.value}", (values, term.negate != flip)
        elif isinstance(term, (nodes.Namespace, nodes.TaskIs)):
            key = "namespace" if isinstance(term, nodes.Namespace) else "task"
            yield key, (frozenset(v.value for v in term.values), term.negate != flip)


def _satisfiable(tests: list[_Test]) -> bool:
    """Whether some value of one key, or its absence, passes every test (values None: present;
    negated: absent; else the value is one of them; negated: absent or none of them)."""
    allowed: frozenset[str] | None = None
    excluded: set[str] = set()
    present = absent = False
    for values, negate in tests:
        if values is None:
            absent, present = absent or negate, present or not negate
        elif negate:
            excluded |= values
        else:
            present = True
            allowed = values if allowed is None else allowed & values
    if absent:
        return not present
    return allowed is None or bool(allowed - excluded)


def _injected_keys(injections: list[nodes.Injection]) -> frozenset[str]:
    """The labels and annotations that injection writes: a filter on them may see the written
    value when the webhook is invoked again, so they prove nothing (nor do the runtime's own
    annotations, under `jobrules.dev/`: see `_key_resolver`)."""
    written: set[str] = set()
    for i in injections:
        for op in i.ops:
            if isinstance(op, nodes.SetLabel):
                written.add(f"label:{op.key.value}")
            elif isinstance(op, nodes.Annotate):
                written.add(f"annotation:{op.key.value}")
    return frozenset(written)


def _key_resolver(k: nodes.Kind | None, injected: frozenset[str]) -> Callable[[str], str | None]:
    """The key a test reads for pods of kind `k`, or None when it cannot prove disjointness.
    A task is the kind's task label (and proves nothing when an expression reads it: that
    may read anything)."""
    task_label = f"label:{k.task_label.value}" if k is not None and k.task_label else None

    def resolve(key: str) -> str | None:
        read = task_label if key == "task" else key
        if read is None or read in injected or read.startswith(_RUNTIME_ANNOTATIONS):
            return None
        return read

    return resolve


def _template_key(tpl: nodes.Template | None) -> Any:
    if tpl is None:
        return None
    return tuple(p if isinstance(p, str) else
                 ("var", p.name) if isinstance(p, nodes.Placeholder) else ("expr", p.text)
                 for p in tpl.parts)


def _writes(op: nodes.Op, i: nodes.Injection) -> list[_Write]:
    if isinstance(op, nodes.Annotate):
        return [_Write(f"annotation:{op.key.value}", _template_key(op.value), i, None, op.span)]
    if isinstance(op, nodes.SetLabel):
        return [_Write(f"label:{op.key.value}", _template_key(op.value), i, None, op.span)]
    if isinstance(op, nodes.Env):
        return [_Write(f"env:{op.name.value}", _template_key(op.value), i,
                       op.containers or nodes.Containers(op.span, "primary", ()), op.span)]
    if isinstance(op, nodes.Sidecar):
        return [_Write(f"sidecar:{op.name.value}", None, i, None, op.span)]
    if isinstance(op, nodes.Volume):
        return [_Write(f"volume:{op.name.value}", (op.source, op.ref.value if op.ref else None),
                       i, None, op.span)]
    return []


def _describe_field(field: str) -> str:
    what, _, name = field.partition(":")
    return {"annotation": f"annotation \"{name}\"", "label": f"label \"{name}\"",
            "env": f"environment variable `{name}`", "sidecar": f"sidecar `{name}`",
            "volume": f"volume `{name}`"}[what]
