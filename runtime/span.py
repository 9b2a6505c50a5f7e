"""Where a rule stands in its source file: the one position type of the compiler and the runtime.

A module of its own, importing nothing, so that `rulec` shares it without loading the plan
types and JMESPath (which would cost a `rulec fmt` or `rulec explain` run twice its start-up).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a file: 1-based line and column, end exclusive."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        """`path:line:column`, the way diagnostics, logs and Events cite a rule."""
        return f"{self.path}:{self.line}:{self.column}"

    def to_json(self) -> dict[str, object]:
        """The plan's `Span` object (docs/plan.md)."""
        return {"path": self.path, "line": self.line, "column": self.column,
                "endLine": self.end_line, "endColumn": self.end_column}
