"""The compiler as a library: paths in, plan and diagnostics out.

`build` runs the stages as explicit steps (read, parse, lower, check, emit); the CLI and the
`rulec eval/mutate/test` commands call it rather than the stages.
"""
from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from rulec import checker, diagnostics, lower, nodes, syntax
from rulec.diagnostics import Diagnostic
from rulec.files import InputError, read, rule_files
from rulec.source import SourceFile

__all__ = ["Build", "InputError", "build", "build_sources", "read", "rule_files", "too_deep"]


def too_deep(doing: str, path: str | None = None) -> InputError:
    """Python's recursion limit reached on absurd nesting: an input error, not an internal one."""
    where = f"{path}: " if path else ""
    return InputError(f"{where}the rules nest too deeply to {doing} (hundreds of nested `not` "
                      "or parentheses)")


@dataclass(frozen=True, slots=True)
class Build:
    plan: dict[str, Any] | None       # None when there are errors (or emission was not asked)
    diagnostics: tuple[Diagnostic, ...]
    sources: Mapping[str, SourceFile]

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == diagnostics.ERROR)


def build(paths: Iterable[str], crds: Iterable[str] = (), *, emit_plan: bool = True) -> Build:
    """Compile the rules under `paths`; raises InputError only for unreadable inputs."""
    sources = [read(p) for p in rule_files(paths)]
    return build_sources(sources, crds, emit_plan=emit_plan)


def build_sources(sources: Iterable[SourceFile], crds: Iterable[str] = (), *,
                  emit_plan: bool = True) -> Build:
    ordered = sorted(sources, key=lambda s: s.path)
    try:
        with without_cyclic_gc():
            return _build(ordered, _schemas(tuple(crds)), emit_plan)
    except RecursionError:
        raise too_deep("compile") from None


def _build(ordered: list[SourceFile], schemas: Any, emit_plan: bool) -> Build:
    found: list[Diagnostic] = []
    files: list[tuple[SourceFile, nodes.File]] = []
    unsure: set[str] = set()
    for source in ordered:
        parsed = syntax.parse(source, recover=True)
        found.extend(parsed.diagnostics)
        unsure.update(parsed.unsure)
        files.append((source, lower.lower(parsed, found)))
    found = checker.check(files, found, unsure=frozenset(unsure), schemas=schemas)
    plan = None
    if emit_plan and not any(d.severity == diagnostics.ERROR for d in found):
        from rulec import emit

        plan = emit.plan(files)
    return Build(plan, tuple(sorted(found, key=Diagnostic.sort_key)),
                 {s.path: s for s in ordered})


@contextlib.contextmanager
def without_cyclic_gc() -> Any:
    """Pause the cyclic garbage collector while building (or reading a big input).

    A build allocates hundreds of thousands of small acyclic objects (tokens, trees, nodes),
    and so does decoding a pod list; the collector's repeated passes over them cost more than
    lowering, checking and emitting together, and as much as decoding. Anything cyclic is
    collected once the work is over.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _schemas(crds: tuple[str, ...]) -> Any:
    """The CRD schema index for `--crd`, imported only when asked (it needs YAML)."""
    if not crds:
        return None
    from rulec import schema

    index, errors = schema.SchemaIndex.load(crds)
    if errors:
        raise InputError("; ".join(errors))
    return index
