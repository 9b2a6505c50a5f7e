"""The examples of docs/language.md compile without errors; its CI snippets use only hooks and
options that exist."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rulec import api
from rulec.commands import cli
from rulec.source import SourceFile

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
FENCED = re.findall(r"^```(\w*)\n(.*?)^```$", DOC, re.S | re.M)  # (language, text)
BLOCKS = [b for lang, b in FENCED if not lang and not b.startswith("rulec")]
YAML = [yaml.safe_load(b) for lang, b in FENCED if lang == "yaml"]
KINDS = """
job tfjob: kubeflow.org/v1 TFJob { succeeded when all pods succeeded }
job pytorchjob: kubeflow.org/v1 PyTorchJob { succeeded when all pods succeeded }
job workflow: argoproj.io/v1alpha1 Workflow { succeeded when all pods succeeded }
define not-deleted = where <<metadata.deletionTimestamp == null>>
"""


def _program(block: str) -> str:
    if block.startswith("    "):  # statements of a kind body
        return 'job example: example.org/v1 Example {\n    task label "role"\n' + block + "}\n"
    return re.sub(r"\.\.\.verdicts, policies, status(, actions)?\.\.\.",
                  "succeeded when all pods succeeded", block)


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


def test_the_workflow_runs_rulec_as_it_parses() -> None:
    [workflow] = [y for y in YAML if "jobs" in y]
    runs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"]
            if step.get("run", "").startswith("rulec ")]
    assert {r.split()[1] for r in runs} == {"check", "test"}
    for run in runs:
        argv = run.split(">")[0].split()[1:]
        args = cli._parser(argv).parse_args(argv)
        assert args.format in ("sarif", "junit") and args.paths == ["rules/"]


def test_the_pre_commit_snippet_names_the_shipped_hooks(tmp_path: Path) -> None:
    from pre_commit.clientlib import load_config, load_manifest

    [config] = [y for y in YAML if "repos" in y]
    path = tmp_path / ".pre-commit-config.yaml"
    path.write_text(yaml.safe_dump(config))
    load_config(str(path))  # pre-commit's own validation; raises on a bad config
    shipped = {h["id"] for h in load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))}
    assert {h["id"] for h in config["repos"][0]["hooks"]} == shipped


def test_the_snippets_name_jobrules_by_a_commit_or_a_tag_that_exists() -> None:
    """No made-up tag: the jobrules ref of the CI snippet's install and of the pre-commit
    snippet is the marked placeholder (explained under "Pinning jobrules"), a full commit SHA,
    or a tag this repository has."""
    import subprocess

    [workflow] = [y for y in YAML if "jobs" in y]
    [config] = [y for y in YAML if "repos" in y]
    installs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"]
                if "github.com/jobrules/jobrules" in step.get("run", "")]
    refs = [re.search(r"jobrules/jobrules@([^\s\"']+)", run).group(1)  # type: ignore[union-attr]
            for run in installs] + [config["repos"][0]["rev"]]
    assert len(refs) == 2
    listed = subprocess.run(["git", "tag", "--list"], cwd=ROOT, capture_output=True, text=True)
    tags = set(listed.stdout.split()) if listed.returncode == 0 else set()
    for ref in refs:
        assert ref == "COMMIT_SHA" or re.fullmatch(r"[0-9a-f]{40}", ref) or ref in tags, ref
    if "COMMIT_SHA" in refs:
        pinning = DOC.split("**Pinning jobrules.**", 1)[1].split("\n\n", 1)[0]
        assert "COMMIT_SHA" in pinning and "full 40-hex SHA" in pinning
