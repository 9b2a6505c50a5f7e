"""Kubernetes' podFailurePolicy, rule by rule, in the rules language.

`examples/pod-failure-policy/` holds the cases of the Job controller's own table
(`TestSyncJobWithJobPodFailurePolicy`, pkg/controller/job/job_controller_test.go in
k8s.io/kubernetes v1.36.3) as `rulec test` suites: each case's Job, with its podFailurePolicy, its
pods, and the controller's decision as the expectation. This module holds each suite's rules to
the translation table of docs/language.md ("Kubernetes' podFailurePolicy"): the rules a suite
runs are exactly `translate(spec.podFailurePolicy)` of its Jobs. `rulec test examples/` runs the
suites themselves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulec import fmt

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "pod-failure-policy"
SUITES = sorted(CORPUS.glob("*/suite.yaml"))

HEADER = """\
# The Job controller's podFailurePolicy, translated by the table of docs/language.md. Generated
# from the suite's Jobs (tests/unit/test_pod_failure_policy.py holds them equal):
"""
KIND = """\
job batchjob: batch/v1 Job {
    pods owned
    task label "batch.kubernetes.io/job-completion-index"

"""
VERDICTS = """\
    succeeded  when count pods succeeded >= <<spec.completions || `1`>>
    running    when any pod running
    pending    otherwise

"""
PER_INDEX = """\
    failed     when count tasks failed > <<spec.maxFailedIndexes>>
               reason "MaxFailedIndexesExceeded"
               message "Job has exceeded the specified maximal number of failed indexes"
    failed     when any task failed and count tasks >= <<spec.completions>>
                    and not any task running and not any task pending
               reason "FailedIndexes" message "Job has failed indexes"
"""
ACTIONS = """
    # The Job controller carries its podFailurePolicy out itself: these rules say what it
    # decides, and record it.
    actions {
        fail job -> record
    }
"""
COUNT = ('count max <<spec.backoffLimit>> budget "backoff" then fail job reason '
         '"BackoffLimitExceeded" message "Job has reached the specified backoff limit"')
COUNT_PER_INDEX = 'count max <<spec.backoffLimitPerIndex>> per task budget "backoff" then fail task'


def translate(spec: dict[str, Any]) -> str:
    """The rules of a batch/v1 Job whose pods fail by its `podFailurePolicy` (and, with
    `backoffLimitPerIndex`, whose indexes fail one by one)."""
    rules = spec["podFailurePolicy"]["rules"]
    per_index = "backoffLimitPerIndex" in spec
    lines = [HEADER] + [f"#   {json.dumps(rule, sort_keys=True)}\n" for rule in rules]
    lines.append("\n" + KIND + (PER_INDEX if per_index else "") + VERDICTS)
    count = COUNT_PER_INDEX if per_index else COUNT
    for index, rule in enumerate(rules):
        for term in _terms(rule):
            lines.append(f"    on pod failed or evicted {term} -> {_action(rule, index, count)} "
                         f"as \"rule-{index}{_suffix(rule, term)}\"\n")
    lines.append(f"    on pod failed or evicted -> {count} as \"default\"\n")
    lines.append(ACTIONS + "}\n")
    return fmt.format_text("".join(lines))


def _terms(rule: dict[str, Any]) -> list[str]:
    """The filter of a rule; one per pattern of `onPodConditions` (the first that a pod's
    conditions match decides)."""
    codes = rule.get("onExitCodes")
    if codes is not None:
        values = ", ".join(str(v) for v in codes["values"])
        test = f"exit {'in' if codes['operator'] == 'In' else 'not in'} [{values}]"
        name = codes.get("containerName")
        return [f'container "{name}" and {test}' if name else test]
    out = []
    for pattern in rule["onPodConditions"]:
        status = pattern.get("status", "True")
        out.append(f'condition "{pattern["type"]}"' + ("" if status == "True" else f' = "{status}"'))
    return out


def _suffix(rule: dict[str, Any], term: str) -> str:
    patterns = rule.get("onPodConditions") or []
    return "" if len(patterns) < 2 else "-" + term.split('"')[1]


def _action(rule: dict[str, Any], index: int, count: str) -> str:
    action = rule["action"]
    if action == "Ignore":
        return "ignore"
    if action == "Count":
        return count
    if action == "FailIndex":
        return "fail task"
    if rule.get("onExitCodes") is not None:
        message = ("Container {container} for pod {namespace}/{pod} failed with exit code "
                   f"{{exit_code}} matching FailJob rule at index {index}")
    else:
        kind = rule["onPodConditions"][0]["type"]
        message = f"Pod {{namespace}}/{{pod}} has condition {kind} matching FailJob rule at index {index}"
    return f'fail job reason "PodFailurePolicy" message "{message}"'


def jobs(suite: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(suite.read_text())
    found = [doc.get("defaults", {}).get("job")] + [c.get("job") for c in doc["cases"]]
    found += [s.get("job") for c in doc["cases"] for s in c.get("steps", [])]
    return [j for j in found if isinstance(j, dict)]


def test_the_corpus_is_the_job_controllers_table() -> None:
    docs = [yaml.safe_load(s.read_text()) for s in SUITES]
    names = [c["name"] for d in docs if d.get("x-source") == "TestSyncJobWithJobPodFailurePolicy"
             for c in d["cases"]]
    assert len(names) == len(set(names)) == 21


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
    assert 'on pod failed or evicted condition "DisruptionTarget" -> ignore as "rule-0-DisruptionTarget"' in text
    assert 'on pod failed or evicted condition "ConfigIssue" = "Unknown" -> ignore as "rule-0-ConfigIssue"' in text


def table() -> list[tuple[str, str, str]]:
    """The translation table of docs/language.md: (construct, rules, tested by) per line."""
    text = (ROOT / "docs" / "language.md").read_text()
    section = text.split("## Kubernetes' podFailurePolicy and JobSet's failurePolicy")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [tuple(c.strip() for c in row.strip().strip("|").split(" | ")) for row in rows[1:]]


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
