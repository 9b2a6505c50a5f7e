"""Kubernetes' podFailurePolicy, rule by rule, in the rules language.

`examples/pod-failure-policy/` holds the cases of the Job controller's own table
(`TestSyncJobWithJobPodFailurePolicy`, pkg/controller/job/job_controller_test.go in the
k8s.io/kubernetes version tools/k8s/go.mod pins) as `rulec test` suites: each case's Job, with
its podFailurePolicy, its pods, and the controller's decision as the expectation. This module
holds the suites to that table as the Go test source in the module cache has it (read at test
time through tools/oracle/: names, Jobs, pods, the conditions and counts the test wants), and
each suite's rules to the translation table of docs/language.md ("Kubernetes' podFailurePolicy"):
the rules a suite runs are exactly `translate(spec.podFailurePolicy)` of its Jobs. `rulec test
examples/` runs the suites themselves.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulec.commands import suite as suites
from runtime import evaluator
from tests.unit import oracle
from tests.unit.native_policies import decision, translate
from tests.unit.runtime import corpus

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "pod-failure-policy"
SUITES = sorted(CORPUS.glob("*/suite.yaml"))
GO_TABLE = "TestSyncJobWithJobPodFailurePolicy"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
SPEC_KEYS = ("parallelism", "completions", "completionMode", "backoffLimit", "backoffLimitPerIndex",
             "maxFailedIndexes", "podFailurePolicy")
# Cases that would decide as the Job controller only because their suite seeds jobrules' own
# stored state: none. A FailureTarget the Job controller set holds as it is (the rules' first
# verdict reads it, and a job its own status says is over takes no action), so the two "job
# marked already as failure target" cases run from no state at all.
RELIES_ON_SEEDED_STATE: set[str] = set()


def jobs(suite: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(suite.read_text())
    found = [doc.get("defaults", {}).get("job")] + [c.get("job") for c in doc["cases"]]
    found += [s.get("job") for c in doc["cases"] for s in c.get("steps", [])]
    return [j for j in found if isinstance(j, dict)]


def _names() -> list[str]:
    docs = [yaml.safe_load(s.read_text()) for s in SUITES]
    return [c["name"] for d in docs if d.get("x-source") == GO_TABLE for c in d["cases"]]


NAMES = _names()


@functools.lru_cache(maxsize=None)
def ours() -> dict[str, corpus.Case]:
    """The suites' cases of the Go table, by name, their inputs resolved as `rulec test` does."""
    wanted = set(NAMES)
    return {c.name: c for c in corpus.cases()
            if c.suite.startswith("examples/pod-failure-policy/") and c.name in wanted}


def test_the_corpus_is_the_job_controllers_table() -> None:
    """The same cases by name, each once, as the Go test source has them."""
    table = oracle.pod_failure_policy_table()
    assert len(NAMES) == len(set(NAMES))
    assert sorted(NAMES) == sorted(table)


def _pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What of a pod the Job controller's decision reads."""
    status = pod.get("status") or {}

    def containers(key: str) -> list[tuple[Any, ...]]:
        return [(c.get("name", ""), next(iter(c.get("state") or {}), None),
                 ((c.get("state") or {}).get("terminated") or {}).get("exitCode"))
                for c in status.get(key) or []]

    return {"phase": status.get("phase", ""),
            "deleting": (pod.get("metadata") or {}).get("deletionTimestamp") is not None,
            "containers": containers("containerStatuses"),
            "init containers": containers("initContainerStatuses"),
            "conditions": [(c["type"], c["status"]) for c in status.get("conditions") or []]}


def _conditions(job: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in (job.get("status") or {}).get("conditions") or []]


@pytest.mark.parametrize("name", NAMES)
def test_each_case_is_its_entry_of_the_go_table(name: str) -> None:
    """The Job (its policy and the spec fields the decision reads, the conditions it already
    has) and the pods (named as the Go test names them; their phase, deletion, containers'
    states and exit codes, conditions) are the Go table's."""
    theirs = oracle.pod_failure_policy_table()[name]
    [step] = ours()[name].steps
    job, go_job = step.job, theirs["job"]
    assert {k: job["spec"].get(k) for k in SPEC_KEYS} == {k: go_job["spec"].get(k) for k in SPEC_KEYS}
    assert _conditions(job) == _conditions(go_job)
    assert [p["metadata"]["name"] for p in step.pods] == [f"mypod-{i}" for i in range(len(theirs["pods"]))]
    assert [_pod(p) for p in step.pods] == [_pod(p) for p in theirs["pods"]]
    if go_job["spec"].get("completionMode") == "Indexed":
        assert [p["metadata"]["labels"][INDEX_LABEL] for p in step.pods] == [str(i) for i in range(len(step.pods))]


def _evaluate(case: corpus.Case, seeded: bool = True) -> dict[str, Any]:
    [step] = case.steps
    return suites.eval_result(case.plan, step.job, step.pods, step.state if seeded else None, step.now)


def _wanted(conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The verdict a Job's wanted conditions mean: Failed with the reason and message of its
    Failed condition, else of its FailureTarget (the Job is doomed; JobManagedBy only delays the
    Failed condition); with neither, not failed."""
    by_type = {c["type"]: c for c in conditions or [] if c.get("status") == "True"}
    for kind in ("Failed", "FailureTarget"):
        if kind in by_type:
            return {"phase": "Failed", "reason": by_type[kind].get("reason"),
                    "message": by_type[kind].get("message")}
    assert not by_type, by_type
    return {}


@pytest.mark.parametrize("name", NAMES)
def test_each_case_decides_what_the_go_table_wants(name: str) -> None:
    """The verdict is the Job's wanted conditions (and so is the suite's expectation); the Go
    test's counts are those the verdict and the actions imply: succeeded pods; once Failed, no
    active pod and every failed pod that no Ignore rule took plus every active one (the
    controller stops them) failed; before, the failures that a policy counted."""
    theirs = oracle.pod_failure_policy_table()[name]
    case = ours()[name]
    [step] = case.steps
    got = _evaluate(case)
    wanted = _wanted(theirs["wantConditions"])
    expect = next(c for c in suites.load(str(ROOT / case.suite)).cases if c.name == name).steps[0].expect
    if wanted:
        assert {k: got.get(k) for k in wanted} == wanted
        assert {k: expect.get(k) for k in wanted} == wanted
    else:
        assert got["phase"] not in ("Failed", "Succeeded") and expect["phase"] not in ("Failed", "Succeeded")

    ignored = {e["pod"] for e in got["events"] if e.get("policy") and not any(
        a["policy"] == e["policy"] and a["target"].get("pod") in (e["pod"], None) for a in got["actions"])}
    phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in step.pods}
    active = [n for n, phase in phases.items() if phase in ("Running", "Pending")]
    counted = {e["pod"] for e in got["events"] if e["event"] in ("podFailed", "podEvicted")
               and e.get("policy") and e["pod"] not in ignored}
    implied = {"wantStatusSucceeded": sum(phase == "Succeeded" for phase in phases.values())}
    if got["phase"] == "Failed":
        implied["wantStatusActive"] = 0
        implied["wantStatusFailed"] = len(active) + sum(
            phase == "Failed" and n not in ignored for n, phase in phases.items())
    else:
        implied["wantStatusFailed"] = len(counted)
    assert implied == {k: theirs[k] for k in implied}


def test_the_cases_that_rely_on_seeded_state() -> None:
    """A case whose suite seeds jobrules' stored state, evaluated without it: only those named
    in RELIES_ON_SEEDED_STATE decide otherwise."""
    differ = set()
    for name, case in ours().items():
        if case.steps[0].explicit_state:
            keys = ("phase", "reason", "message")
            with_state, without = _evaluate(case), _evaluate(case, seeded=False)
            if {k: with_state.get(k) for k in keys} != {k: without.get(k) for k in keys}:
                differ.add(name)
    assert differ == RELIES_ON_SEEDED_STATE


def _single_failures() -> list[tuple[str, str]]:
    """The one-step cases of every suite here with one failed pod and no seeded state, whose
    Job is not already failed (the Job controller does not match the pods of a Job that carries
    a FailureTarget: it finishes it with that condition's message)."""
    out = []
    for case in corpus.cases():
        if not case.suite.startswith("examples/pod-failure-policy/") or len(case.steps) != 1:
            continue
        [step] = case.steps
        failed = [p for p in step.pods if (p.get("status") or {}).get("phase") == "Failed"]
        decided = any(c.get("type") in ("FailureTarget", "Failed") and c.get("status") == "True"
                      for c in (step.job.get("status") or {}).get("conditions") or [])
        if len(failed) == 1 and not step.explicit_state and not decided:
            out.append((case.suite, case.name))
    return out


def test_single_failure_cases_decide_as_match_pod_failure_policy() -> None:
    """Each such case's failed pod, given to the Job controller's matchPodFailurePolicy with its
    Job's policy: the rule, action and message are those the case decides."""
    cases = {(c.suite, c.name): c for c in corpus.cases()}
    chosen = [cases[key] for key in _single_failures()]
    assert any("multi-pattern" in c.suite for c in chosen)
    asked = []
    for case in chosen:
        [step] = case.steps
        [pod] = [p for p in step.pods if (p.get("status") or {}).get("phase") == "Failed"]
        asked.append((case, step, pod))
    answers = oracle.ask("pod-failure-policy", ({"podFailurePolicy": s.job["spec"]["podFailurePolicy"],
                                                 "pods": [p]} for _, s, p in asked))
    for (case, step, pod), [theirs] in zip(asked, answers, strict=True):
        found = evaluator.evaluate(case.plan, step.job, step.pods, None, step.now)
        assert decision(found, pod["metadata"]["name"]) == theirs, case.name


@pytest.mark.parametrize("suite", SUITES, ids=lambda p: p.parent.name)
def test_each_suite_runs_the_translation_of_its_jobs_policy(suite: Path) -> None:
    doc = yaml.safe_load(suite.read_text())
    keys = ("podFailurePolicy", "backoffLimitPerIndex")
    specs = {json.dumps({k: j["spec"][k] for k in keys if k in j["spec"]}, sort_keys=True)
             for j in jobs(suite)}
    assert len(specs) == 1, "one podFailurePolicy per suite"
    rules = (suite.parent / doc["rules"]).read_text()
    assert rules == translate(json.loads(specs.pop()))


def test_no_where_workaround() -> None:
    """The rules decide from what podFailurePolicy says, not from JMESPath over the pod."""
    for rules in CORPUS.glob("*/*.rules"):
        assert "where <<" not in rules.read_text()


def test_a_rule_with_several_condition_patterns_is_a_policy_per_pattern() -> None:
    text = translate({"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "True"}, {"type": "ConfigIssue", "status": "Unknown"}]}]}})
    assert 'on pod failed or evicted condition "DisruptionTarget" -> ignore as "rule-0-0"' in text
    assert 'on pod failed or evicted condition "ConfigIssue" = "Unknown" -> ignore as "rule-0-1"' in text


def table() -> list[tuple[str, str, str]]:
    """The translation tables of docs/language.md (podFailurePolicy, successPolicy): (construct,
    rules, tested by) per line."""
    text = (ROOT / "docs" / "language.md").read_text()
    out = []
    for title in ("Kubernetes' podFailurePolicy and JobSet's failurePolicy", "Kubernetes' successPolicy"):
        section = text.split(f"\n## {title}\n")[1].split("\n## ")[0]
        rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
        out += [tuple(c.strip() for c in row.strip().strip("|").split(" | ")) for row in rows[1:]]
    return out


@pytest.mark.parametrize("construct, rules, tested", table(), ids=[row[0] for row in table()])
def test_each_line_of_the_translation_table_is_tested(construct: str, rules: str, tested: str) -> None:
    """Every line names the suites (and cases) that run it, or says it cannot be expressed."""
    if tested == "—":
        assert rules.startswith("not expressible")
        return
    for ref in tested.split("; "):
        where, _, case = ref.partition(": ")
        path = where.strip("`")
        target = ROOT / path if path.startswith("tests/") else ROOT / "examples" / path
        if target.is_dir():
            target = target / "suite.yaml"
        assert target.is_file(), ref
        if case and target.suffix == ".yaml":
            names = [c["name"] for c in yaml.safe_load(target.read_text())["cases"]]
            wanted = case.removesuffix("...").strip()
            assert wanted == "both cases" or any(n.startswith(wanted) for n in names), ref
