"""The examples of docs/language.md compile without errors."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rulec import api
from rulec.source import SourceFile

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
BLOCKS = [b for b in re.findall(r"^```\n(.*?)^```", DOC, re.S | re.M)
          if not b.startswith("rulec")]
KINDS = """
job tfjob: kubeflow.org/v1 TFJob { succeeded when all pods succeeded }
job pytorchjob: kubeflow.org/v1 PyTorchJob { succeeded when all pods succeeded }
job workflow: argoproj.io/v1alpha1 Workflow { succeeded when all pods succeeded }
define not-deleted = where <<metadata.deletionTimestamp == null>>
"""


def _program(block: str) -> str:
    if block.startswith("    "):  # statements of a kind body
        return 'job example: example.org/v1 Example {\n    task label "role"\n' + block + "}\n"
    return block.replace("...verdicts, policies, status...", "succeeded when all pods succeeded")


def test_there_are_examples() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.split("\n")[0][:40])
def test_example_compiles(block: str) -> None:
    text = _program(block)
    sources = [SourceFile.from_text("example.rules", text)]
    if "define not-deleted" not in text and "job tfjob" not in text:
        sources.append(SourceFile.from_text("kinds.rules", KINDS))
    build = api.build_sources(sources)
    assert not build.errors, [f"{d.span} {d.message}" for d in build.errors]
