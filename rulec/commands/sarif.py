"""Diagnostics as a SARIF 2.1.0 log, the format GitHub code scanning and SARIF viewers read.

One run: `tool.driver` lists every diagnostic code as a rule (so a viewer can show the long
description of any result, and a fixed result can be matched to its rule later), results point
at their rule by id and index. Locations are relative to the current folder (the repository
root in CI) under the base id `%SRCROOT%`, which the log defines; a file outside that folder
gets an absolute `file:` URI. Columns count code points, as in every other rulec output, so
`columnKind` says so (SARIF's default would be UTF-16 units).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote

from rulec import about
from rulec.diagnostics import CODES, Code, Diagnostic
from rulec.source import Span

VERSION = "2.1.0"
SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
ROOT_ID = "%SRCROOT%"
_INDEX = {c.code: i for i, c in enumerate(CODES)}


def render(diagnostics: Sequence[Diagnostic]) -> str:
    """The log for `diagnostics`, in the order given."""
    base = Path(os.getcwd())
    run = {
        "tool": {"driver": {
            "name": "rulec",
            "version": about.version(),
            "informationUri": about.DOCS_URL + "language.md",
            "rules": [_rule(c) for c in CODES],
        }},
        "originalUriBaseIds": {ROOT_ID: {"uri": base.as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": [_result(d, base) for d in diagnostics],
    }
    log = {"$schema": SCHEMA, "version": VERSION, "runs": [run]}
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def _help_uri(code: Code) -> str:
    """The code's row in the reference's table of codes."""
    return f"{about.DOCS_URL}language.md#{code.code.lower()}"


def _rule(code: Code) -> dict[str, Any]:
    return {
        "id": code.code,
        "name": code.name,
        "shortDescription": {"text": code.summary},
        "fullDescription": {"text": code.doc},
        "helpUri": _help_uri(code),
        "defaultConfiguration": {"level": code.severity},
    }


def _result(d: Diagnostic, base: Path) -> dict[str, Any]:
    text = d.message + (f"\nhelp: {d.help}" if d.help else "")
    text += "".join(f"\nnote: {n.message}" for n in d.notes if n.span is None)
    result: dict[str, Any] = {
        "ruleId": d.code,
        "ruleIndex": _INDEX[d.code],
        "level": d.severity,
        "message": {"text": text},
        "locations": [{"physicalLocation": _physical(d.span, base)}],
    }
    placed = [(n.message, n.span) for n in d.notes if n.span is not None]
    related = [{"id": i, "message": {"text": message}, "physicalLocation": _physical(span, base)}
               for i, (message, span) in enumerate(placed)]
    if related:
        result["relatedLocations"] = related
    return result


def _physical(span: Span, base: Path) -> dict[str, Any]:
    return {"artifactLocation": _artifact(span.path, base),
            "region": {"startLine": span.line, "startColumn": span.column,
                       "endLine": span.end_line, "endColumn": span.end_column}}


def _artifact(path: str, base: Path) -> dict[str, str]:
    absolute = Path(os.path.abspath(path))  # as given: a link stays where the user put it
    if absolute.is_relative_to(base):
        return {"uri": quote(absolute.relative_to(base).as_posix()), "uriBaseId": ROOT_ID}
    return {"uri": absolute.as_uri()}
