"""`rulec native` against the forward translation and against Kubernetes' own decision function.

Round trip: each random podFailurePolicy that tests/unit/test_oracle.py draws (its generator,
imported) is translated to rules by the table of docs/language.md (tests/unit/native_policies.py),
compiled by `rulec`, and given to `rulec.native`: every policy must go native and the fragment
must be the policy it came from (the same rules in the same order, set order normalised, and the
adjacent condition rules of one non-FailJob action as one rule: first match wins either way).

Differential: Kubernetes' `matchPodFailurePolicy` (the oracle of tests/unit/oracle.py) decides
the enumerated failed pods on the *generated* podFailurePolicy, and must decide as the jobrules
evaluator does on the rules it was generated from: the same rule (by the native decision's rule
number), action, count and FailJob message. Skipped, saying why, where Go or the module cache's
k8s.io/kubernetes is missing.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import rulec
from rulec import native
from tests.unit import oracle
from tests.unit.native_policies import translate
from tests.unit.test_oracle import (SEED, compile_kind, enumerated_pods, jobrules_pod_failure,
                                    random_policy, INDEX_LABEL, JOB_UID)

POLICIES = 110
PODS_PER_POLICY = 150


def _cases() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    return [random_policy(rng) for _ in range(POLICIES)]


def _report(text: str) -> native.KindReport:
    built = rulec.build_sources([rulec.SourceFile.from_text("job.rules", text)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [report] = native.decide(built.plan)
    return report


def _normalised(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A podFailurePolicy's rules with values sorted and adjacent condition rules of one
    non-FailJob action joined, as the native pass writes them."""
    out: list[dict[str, Any]] = []
    for rule in rules:
        rule = {**rule}
        if "onExitCodes" in rule:
            rule["onExitCodes"] = {**rule["onExitCodes"],
                                   "values": sorted(set(rule["onExitCodes"]["values"]))}
        elif (out and "onPodConditions" in out[-1] and out[-1]["action"] == rule["action"]
              and rule["action"] != "FailJob"):
            out[-1] = {**out[-1], "onPodConditions": out[-1]["onPodConditions"]
                       + rule["onPodConditions"]}
            continue
        out.append(rule)
    return out


def test_every_random_native_policy_comes_back_from_its_translation() -> None:
    merged = 0
    for spec in _cases():
        report = _report(translate(spec))
        assert all(d.native for d in report.decisions), [d.text() for d in report.decisions]
        rules = spec["podFailurePolicy"]["rules"]
        expected = _normalised(rules)
        merged += len(expected) < len(rules)
        fragment = report.fragment()
        assert fragment["podFailurePolicy"]["rules"] == expected, (rules, fragment)
        # The translation's budget is `max <<spec.backoffLimit>>` (per index:
        # `<<spec.backoffLimitPerIndex>>`): the Job's own limit, so the fragment sets none.
        assert set(fragment) == {"podFailurePolicy"}
        assert report.per_index == ("backoffLimitPerIndex" in spec)
        assert report.decisions[-1].default
    assert merged, "no case joined adjacent condition rules: the normalisation is untested"


def _native_index(report: native.KindReport) -> dict[str, int]:
    """The podFailurePolicy rule each policy of the translation went to (`rule-i[-j]`)."""
    return {d.policy: d.rule if d.rule is not None else -1 for d in report.decisions}


def test_the_generated_policy_decides_as_the_rules_it_came_from() -> None:
    rng = random.Random(SEED + 1)
    pods = enumerated_pods()
    cases = []
    for spec in _cases():
        report = _report(translate(spec))
        generated = report.fragment()["podFailurePolicy"]
        cases.append((spec, report, generated, rng.sample(range(len(pods)), PODS_PER_POLICY)))
    answers = oracle.ask("pod-failure-policy", (
        {"podFailurePolicy": generated, "podIndexes": chosen} | ({"pods": pods} if n == 0 else {})
        for n, (_, _, generated, chosen) in enumerate(cases)))
    indexed = [{**p, "metadata": {**p["metadata"], "labels": {"foo": "bar", INDEX_LABEL: "0"}}}
               for p in pods]
    seen: Counter[str] = Counter()
    disagreements = []
    for (spec, report, generated, chosen), theirs in zip(cases, answers, strict=True):
        kind = compile_kind(translate(spec))
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "foobar", "namespace": "default", "uid": JOB_UID,
                            "creationTimestamp": "2024-05-01T12:00:00Z"}, "spec": spec}
        where = _native_index(report)
        these = indexed if "backoffLimitPerIndex" in spec else pods
        for pod, their in zip((these[i] for i in chosen), theirs, strict=True):
            ours = jobrules_pod_failure(kind, job, pod)
            seen[str(their["action"])] += 1
            if "index" in ours and ours["index"] >= 0:
                taken = next(e.policy for e in evaluate_events(kind, job, pod))
                ours = {**ours, "index": where[taken]}
            if ours == their:
                continue
            # The one difference docs/language.md documents: a FailJob rule whose patterns the
            # pod matches twice names another condition; the rule and action agree.
            if their["action"] == "FailJob" and {**ours, "message": None} == {**their, "message": None}:
                continue
            disagreements.append((generated, pod["status"], their, ours))
    assert sum(seen.values()) == POLICIES * PODS_PER_POLICY
    assert set(seen) == {"None", "FailJob", "Ignore", "Count", "FailIndex"}, seen
    assert not disagreements, disagreements[:3]


def evaluate_events(kind: Any, job: dict[str, Any], pod: dict[str, Any]) -> list[Any]:
    """The events that a policy took for the pod's failure."""
    from runtime import evaluator
    from tests.unit.test_oracle import NOW

    found = evaluator.evaluate(kind, job, [pod], None, NOW)
    return [e for e in found.events if e.event in ("podFailed", "podEvicted")
            and e.pod == pod["metadata"]["name"] and e.policy]


def test_the_job_controllers_own_test_table_comes_back() -> None:
    """examples/pod-failure-policy/ holds the cases of the Job controller's
    TestSyncJobWithJobPodFailurePolicy, each suite's rules the translation of its Jobs' policy:
    `rulec native` on those rules gives the policy back, every policy native."""
    import yaml

    from tests.unit.test_pod_failure_policy import SUITES, jobs

    assert len(SUITES) >= 10
    for suite in SUITES:
        doc = yaml.safe_load(suite.read_text())
        [spec] = {json.dumps(j["spec"]["podFailurePolicy"], sort_keys=True)
                  for j in jobs(suite) if "podFailurePolicy" in j["spec"]}
        report = _report((suite.parent / doc["rules"]).read_text())
        assert report.native_count == len(report.decisions), suite
        assert report.fragment()["podFailurePolicy"]["rules"] == _normalised(
            json.loads(spec)["rules"]), suite


# -- random rules, not only the translation's shapes ------------------------------------------

FILTERS = ["exit 1", "exit in [42, 143]", "exit not in [0, 1]", "exit 138..143", "exit in [1, 100..137]",
           'container "main" and exit 42', 'container "init" and exit not in [0]',
           'container "sidecar" and exit in [1, 137]', 'condition "DisruptionTarget"',
           'condition "DisruptionTarget" in ["False", "Unknown"]',
           'condition "ConfigIssue" or condition "DisruptionTarget" = "Unknown"',
           'condition "ConfigIssue" = "False"']
PER_JOB = ["ignore", 'fail job reason "PodFailurePolicy"', 'count max 2 budget "backoff" then fail job']
PER_INDEX = ["ignore", 'fail job reason "PodFailurePolicy"', "fail task",
             'count max 1 per task budget "backoff" then fail task']
LAST = {"job": 'count max 2 budget "backoff" then fail job',
        "task": 'count max 1 per task budget "backoff" then fail task'}


def _random_rules(rng: random.Random) -> tuple[str, bool]:
    """A batch Job kind with two to eight random native policies and the default handling,
    in the forward translation's frame (tests/unit/native_policies.py); whether per index."""
    from tests.unit import native_policies as forward

    per_index = rng.random() < 0.4
    actions = PER_INDEX if per_index else PER_JOB
    lines = [f"    on pod failed or evicted {rng.choice(FILTERS)} -> {rng.choice(actions)} "
             f"as \"rule-{n}\"\n" for n in range(rng.randint(2, 8))]
    lines.append(f"    on pod failed or evicted -> {LAST['task' if per_index else 'job']} "
                 "as \"default\"\n")
    text = (forward.KIND + (forward.PER_INDEX if per_index else "") + forward.VERDICTS
            + "".join(lines) + forward.ACTIONS + "}\n")
    return text, per_index


def _what(found: Any, pod: str) -> dict[str, Any]:
    """jobrules' decision in the oracle's terms, the FailJob message aside (these rules write
    none of their own)."""
    from tests.unit.native_policies import decision

    out = decision(found, pod)
    verdict = out.get("verdict")
    if verdict is not None and (verdict.phase, verdict.reason) == ("Failed", "PodFailurePolicy"):
        taken = [e.policy for e in found.events if e.pod == pod and e.policy]
        return {"action": "FailJob", "policy": taken[0], "counts": True}
    return out


def _ask(cases: list[Any], pods: list[dict[str, Any]]) -> Any:
    """Kubernetes' answers for each case's compiled podFailurePolicy on its chosen pods."""
    return oracle.ask("pod-failure-policy", (
        {"podFailurePolicy": r.fragment()["podFailurePolicy"], "podIndexes": chosen}
        | ({"pods": pods} if n == 0 else {})
        for n, (_, _, r, chosen) in enumerate(cases)))


def _indexed(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods as pods of index 0 of an Indexed Job."""
    return [{**p, "metadata": {**p["metadata"], "labels": {"foo": "bar", INDEX_LABEL: "0"}}}
            for p in pods]


def _job(report: native.KindReport, per_index: bool) -> dict[str, Any]:
    """The Job carrying the report's fragment, Indexed when the rules count per index."""
    from tests.unit.test_oracle import job_spec

    spec = job_spec(report.fragment()["podFailurePolicy"]["rules"], 2)
    if per_index:
        spec.update(completionMode="Indexed", completions=3, parallelism=3, backoffLimitPerIndex=1)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "foobar", "namespace": "default", "uid": JOB_UID,
                         "creationTimestamp": "2024-05-01T12:00:00Z"}, "spec": spec}


def test_random_native_rules_decide_as_their_fragment() -> None:
    from runtime import evaluator
    from tests.unit.test_oracle import NOW

    rng = random.Random(SEED + 2)
    pods = enumerated_pods()
    cases = []
    while len(cases) < 60:
        text, per_index = _random_rules(rng)
        report = _report(text)
        if report.native_count < len(report.decisions):
            continue   # a rule after a count of another budget, and the like: not all native
        cases.append((text, per_index, report, rng.sample(range(len(pods)), 200)))
    answers = _ask(cases, pods)
    indexed = _indexed(pods)
    seen: Counter[str] = Counter()
    disagreements = []
    for (text, per_index, report, chosen), theirs in zip(cases, answers, strict=True):
        kind = compile_kind(text)
        job = _job(report, per_index)
        rule_of = {d.policy: -1 if d.default else d.rule for d in report.decisions}
        for pod in ((indexed if per_index else pods)[i] for i in chosen):
            ours = _what(evaluator.evaluate(kind, job, [pod], None, NOW), pod["metadata"]["name"])
            their = theirs.pop(0)
            seen[str(their["action"])] += 1
            if "policy" in ours:   # a FailJob: its rule by the native decision
                ours = {"action": "FailJob", "index": rule_of[ours["policy"]], "counts": True}
                their = {k: their[k] for k in ("action", "index", "counts")}
            elif "index" in ours and ours["index"] >= 0:
                ours = {**ours, "index": rule_of[f"rule-{ours['index']}"]}
            if ours != their:
                disagreements.append((report.fragment(), pod["status"], their, ours))
    assert sum(seen.values()) == 60 * 200
    assert set(seen) == {"None", "FailJob", "Ignore", "Count", "FailIndex"}, seen
    assert not disagreements, disagreements[:3]


def test_with_an_engine_tail_the_fragment_decides_only_the_native_prefix() -> None:
    """An engine-only policy among the random ones: the pods a native rule takes, Kubernetes
    gives to that rule, and every other pod (the engine's, or nobody's) to no rule at all, with
    a backoffLimit never reached, so the Job controller decides nothing the engine keeps."""
    from runtime import evaluator
    from tests.unit.test_oracle import NOW

    rng = random.Random(SEED + 3)
    pods = enumerated_pods()
    cases = []
    while len(cases) < 40:
        text, per_index = _random_rules(rng)
        lines = text.splitlines(keepends=True)
        policies = [n for n, line in enumerate(lines) if "as \"rule-" in line]
        at = rng.choice(policies[1:])
        lines.insert(at, f"    on pod failed or evicted {rng.choice(FILTERS)} -> restart pod max 2 "
                         "as \"engine\"\n")
        text = "".join(lines)
        report = _report(text)
        if not report.rules:
            continue
        assert report.fragment()["backoffLimit"] == native.UNLIMITED
        assert report.fragment().get("backoffLimitPerIndex") == (native.UNLIMITED if per_index
                                                                 else None)
        cases.append((text, per_index, report, rng.sample(range(len(pods)), 200)))
    answers = _ask(cases, pods)
    indexed = _indexed(pods)
    engine = native_taken = 0
    disagreements = []
    for (text, per_index, report, chosen), theirs in zip(cases, answers, strict=True):
        kind = compile_kind(text)
        job = _job(report, per_index)
        rule_of = {d.policy: d.rule for d in report.decisions if d.native}
        for pod, their in zip(((indexed if per_index else pods)[i] for i in chosen), theirs,
                              strict=True):
            found = evaluator.evaluate(kind, job, [pod], None, NOW)
            taken = [e.policy for e in found.events if e.pod == pod["metadata"]["name"] and e.policy]
            rule = rule_of.get(taken[0]) if taken else None
            if rule is not None:
                native_taken += 1
                ok = their["index"] == rule
            else:
                engine += bool(taken)
                ok = their["action"] is None
            if not ok:
                disagreements.append((report.fragment(), pod["status"], their, taken))
    assert native_taken and engine
    assert not disagreements, disagreements[:3]
