"""Source files and spans: the single position format every stage reports in.

`Span` is the runtime's (`runtime.span`, re-exported by `runtime.plan`): the plan's spans and
the compiler's are one type.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from runtime.span import Span

__all__ = ["SourceFile", "Span", "advance"]


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One `.rules` file: its text and the offsets where its lines start."""

    path: str
    text: str
    line_starts: tuple[int, ...]

    @classmethod
    def from_text(cls, path: str, text: str) -> SourceFile:
        starts = [0]
        starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
        return cls(path, text, tuple(starts))

    @property
    def line_count(self) -> int:
        return len(self.line_starts)

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its newline."""
        if not 1 <= line <= len(self.line_starts):
            return ""
        start = self.line_starts[line - 1]
        end = self.line_starts[line] - 1 if line < len(self.line_starts) else len(self.text)
        return self.text[start:end].rstrip("\r")

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a 0-based character offset."""
        offset = max(0, min(offset, len(self.text)))
        index = bisect.bisect_right(self.line_starts, offset) - 1
        return index + 1, offset - self.line_starts[index] + 1

    def span(self, start: int, end: int) -> Span:
        line, column = self.position(start)
        end_line, end_column = self.position(max(start, end))
        return Span(self.path, line, column, end_line, end_column)

    def end_span(self) -> Span:
        """A one-character span just after the last non-blank character (where EOF errors go)."""
        end = len(self.text.rstrip())
        line, column = self.position(end)
        return Span(self.path, line, column, line, column + 1)


def advance(line: int, column: int, text: str) -> tuple[int, int]:
    """The position reached from (line, column) after reading `text`."""
    newlines = text.count("\n")
    if not newlines:
        return line, column + len(text)
    return line + newlines, len(text) - text.rfind("\n")
