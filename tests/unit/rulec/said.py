"""What the checker says about rules, every part of every diagnostic in one line each: the
position, code, message, help and notes. The checker's topic tests compare these lines whole,
so a changed code, span, text or note fails them."""
from __future__ import annotations

from rulec import api
from rulec.diagnostics import Diagnostic
from rulec.source import SourceFile


def lines(found: list[Diagnostic], ends: bool = False) -> list[str]:
    """With `ends`, each position is `path:line:column-end_line:end_column`."""
    out = []
    for d in found:
        s = d.span
        end = f"-{s.end_line}:{s.end_column}" if ends else ""
        out.append(f"{s.path}:{s.line}:{s.column}{end} {d.code} {d.message}")
        if d.help is not None:
            out.append(f"  help: {d.help}")
        for n in d.notes:
            where = f"{n.span.path}:{n.span.line}:{n.span.column}" if n.span else "-"
            out.append(f"  note {where}: {n.message}")
    return out


def said(text: str, *more: str, crds: tuple[str, ...] = (), ends: bool = False) -> list[str]:
    """The diagnostics of `text` (t.rules) with files `more` (m0.rules, ...) beside it, and
    the CRD files `crds`."""
    sources = [SourceFile.from_text("t.rules", text)]
    sources += [SourceFile.from_text(f"m{i}.rules", m) for i, m in enumerate(more)]
    return lines(api.build_sources(sources, crds, emit_plan=False).diagnostics, ends)


JOB = "job j: batch/v1 Job {\n    succeeded when all pods succeeded\n"
TASKED = "job j: batch/v1 Job {\n    task label \"role\"\n    succeeded when all pods succeeded\n"


def job(body: str, head: str = JOB) -> str:
    """A batch Job kind (no task) with `body` from line 3 (line 4 with TASKED)."""
    return head + body + "\n}\n"
