"""The compiler of the rules language, as a library: rules in, a plan and diagnostics out.

This is its face, so that a program compiling rules (a CI script, the runtime's tests, the
`rulec` command itself) needs no map of the stages: `build` reads, parses, lowers, checks and
emits the rules under some paths (`build_sources` takes them as text) and answers a `Build`,
whose `diagnostics` are what `rulec check` prints and whose `plan` is what `rulec compile` writes
(`dumps` gives its JSON text); `InputError` is an input that cannot be read.

The stages (source, syntax, lower, nodes, checker and checks, schema, emit, expr, template, fmt,
names, manifests) stay importable for the tools that need one. `rulec.commands` holds the
command's shells, over this library; nothing here imports them.

The names load on first use, so `import rulec.source` or `rulec --version` pays for no parser.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rulec.api import Build, InputError, build, build_sources, read, rule_files
    from rulec.diagnostics import Diagnostic
    from rulec.emit import dumps
    from rulec.source import SourceFile

_HOMES = {
    "Build": "rulec.api", "InputError": "rulec.api", "build": "rulec.api",
    "build_sources": "rulec.api", "read": "rulec.api", "rule_files": "rulec.api",
    "Diagnostic": "rulec.diagnostics", "dumps": "rulec.emit", "SourceFile": "rulec.source",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rulec' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
