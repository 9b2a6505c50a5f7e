"""Fuzzing `rulec eval`, `mutate` and `test` through the CLI with damaged objects, pods and
suites: whatever they are given, they exit 0, 1 or 2, and never print a traceback or an
internal error."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from rulec.commands import cli

ROOT = Path(__file__).resolve().parents[3]
VOLCANO = ROOT / "examples" / "volcano-oomkilled"
ARGO = ROOT / "examples" / "argo-wait-main"
JOB = yaml.safe_load((VOLCANO / "job.yaml").read_text())
MASTER = yaml.safe_load((VOLCANO / "pods" / "master-oomkilled.yaml").read_text())
PODS = [MASTER, {**MASTER, "metadata": {**MASTER["metadata"], "name": "worker-0", "uid": "w0",
                                        "labels": {"volcano.sh/task-spec": "worker"}}}]
POD = yaml.safe_load((ARGO / "pod.yaml").read_text())
OWNER = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
         "metadata": {"name": "wf", "namespace": "argo", "uid": "w1"}}

WORDS = st.sampled_from(["", "x", "Failed", "Running", "True", "main", "v1", "Pod", "List",
                         "2024-05-01T12:00:00Z", "OOMKilled", "\x00", "\ufeff", "\ud800", "NaN",
                         "{golden: x}", "items", "metadata", "status", "((", "30s"])
SCALARS = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats()
           | WORDS | st.text(max_size=8))
KEYS = st.sampled_from(["metadata", "name", "uid", "labels", "annotations", "status", "spec",
                        "phase", "containerStatuses", "state", "terminated", "exitCode", "reason",
                        "kind", "apiVersion", "items", "ownerReferences", "containers",
                        "jobrules.dev/state", "regex", "golden"]) | st.text(max_size=4)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(KEYS, inner, max_size=3), max_leaves=10)


@st.composite
def damaged(draw: st.DrawFn, doc: Any, inside: tuple[str, ...] = ()) -> Any:
    """`doc` with a few values replaced, dropped, or nested absurdly deep: anywhere, or (half
    the time) only under one of the dotted paths `inside`, so that the damaged input often
    still gets past the reader into the evaluator and the mutator."""
    doc = copy.deepcopy(doc)
    root = doc
    if inside and draw(st.booleans()):
        for key in draw(st.sampled_from(inside)).split("."):
            root = root[int(key) if isinstance(root, list) else key]
    for _ in range(draw(st.integers(0, 4))):
        parent, key = _place(draw, root)
        if parent is None or not draw(st.integers(0, 30)):
            return draw(VALUES) if root is doc else doc
        action = draw(st.sampled_from(["replace"] * 6 + ["drop"] * 2 + ["deep"]))
        if action == "drop" and isinstance(parent, dict):
            parent.pop(key, None)
        elif action == "deep":
            value: Any = draw(SCALARS)
            for _ in range(draw(st.sampled_from([50, 99, 101, 1200]))):
                value = [value]
            parent[key] = value
        else:
            parent[key] = draw(VALUES)
    return doc


def _place(draw: st.DrawFn, doc: Any) -> tuple[Any, Any]:
    """A container inside `doc` and one of its keys (or indexes), usually well inside;
    (None, None) for the root (rarely)."""
    parent, key = None, None
    node = doc
    while isinstance(node, (dict, list)) and node and (parent is None or draw(st.integers(0, 4))):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        parent, key = node, draw(st.sampled_from(keys))
        node = node[key]
    return parent, key


@st.composite
def text_of(draw: st.DrawFn, docs: st.SearchStrategy[Any]) -> str:
    """A drawn document as JSON, as YAML, or as a damaged copy of either text."""
    doc = draw(docs)
    form = draw(st.sampled_from(["json"] * 4 + ["yaml"] * 4 + ["cut", "garbage"]))
    try:
        text = json.dumps(doc) if form != "yaml" else yaml.safe_dump(doc)
    except (RecursionError, ValueError):  # too deep (or NaN) for the dumper: then as text
        text = repr(doc)
    if form == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    elif form == "garbage":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=6)) + text[at:]
    return text


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example rules compiled once (each command then reads a plan, not rules)."""
    folder = tmp_path_factory.mktemp("plans")
    out = {}
    for name, rules in (("volcano", VOLCANO / "vcjob.rules"), ("argo", ARGO / "workflow.rules")):
        out[name] = folder / f"{name}.json"
        assert cli.main(["compile", str(rules), "-o", str(out[name])]) == 0
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: Any) -> None:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in out + err and "internal error" not in err, err


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@SETTINGS
@given(job=text_of(damaged(JOB, ("spec", "status", "metadata"))),
       pods=text_of(damaged(PODS, ("0.status", "1.status", "0.metadata", "1.spec"))),
       name=st.sampled_from(
    ["pods.json", "pods.yaml", "pods"]), explain=st.booleans())
def test_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str], plans: dict[str, Path],
              job: str, pods: str, name: str, explain: bool) -> None:
    (tmp_path / "job").write_text(job, encoding="utf-8", errors="surrogatepass")
    (tmp_path / name).write_text(pods, encoding="utf-8", errors="surrogatepass")
    _run(capsys, "eval", "--rules", plans["volcano"], "--object", tmp_path / "job",
         "--pods", tmp_path / name, "--now", "2020-03-12T11:15:00Z",
         *(["--explain", "--format", "text"] if explain else []))


@SETTINGS
@given(pod=text_of(damaged(POD, ("spec", "spec.containers", "metadata"))),
       owner=text_of(damaged(OWNER, ("metadata",))), explain=st.booleans())
def test_mutate(tmp_path: Path, capsys: pytest.CaptureFixture[str], plans: dict[str, Path],
                pod: str, owner: str, explain: bool) -> None:
    (tmp_path / "pod.yaml").write_text(pod, encoding="utf-8", errors="surrogatepass")
    (tmp_path / "owner.json").write_text(owner, encoding="utf-8", errors="surrogatepass")
    _run(capsys, "mutate", "--rules", plans["argo"], "--pod", tmp_path / "pod.yaml",
         "--owner", tmp_path / "owner.json", "--namespace", "argo",
         *(["--explain", "--format", "text"] if explain else []))


SUITE = {
    "rules": "vcjob.rules",
    "defaults": {"job": "job.yaml", "now": "2020-03-12T11:15:00Z"},
    "cases": [
        {"name": "fails", "pods": ["pods/master-oomkilled.yaml"],
         "expect": {"phase": "Failed", "message": {"regex": "OOMKilled"}, "actions": []}},
        {"name": "steps", "steps": [
            {"pods": PODS, "expect": {"phase": "Running"}},
            {"after": "1m", "state": {"v": 1}, "expect": {"events": []}}]},
        {"name": "mutation", "pod": POD, "owner": OWNER, "namespace": "argo",
         "expect": {"applied": [], "patch": {"golden": "out.yaml"}}},
    ],
}


@SETTINGS
@given(suite=text_of(damaged(SUITE, ("cases.0", "cases.0.expect", "cases.1.steps", "cases.2",
                                      "cases.2.pod.spec", "defaults"))))
def test_test(tmp_path: Path, capsys: pytest.CaptureFixture[str], suite: str) -> None:
    (tmp_path / "vcjob.rules").write_text((VOLCANO / "vcjob.rules").read_text())
    (tmp_path / "job.yaml").write_text((VOLCANO / "job.yaml").read_text())
    (tmp_path / "pods").mkdir(exist_ok=True)
    (tmp_path / "pods" / "master-oomkilled.yaml").write_text(
        (VOLCANO / "pods" / "master-oomkilled.yaml").read_text())
    (tmp_path / "suite.yaml").write_text(suite, encoding="utf-8", errors="surrogatepass")
    _run(capsys, "test", tmp_path)
