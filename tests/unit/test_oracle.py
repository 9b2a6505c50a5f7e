"""jobrules against Kubernetes' own decision functions, case by case.

The Job controller decides a failed pod with `matchPodFailurePolicy` and an Indexed Job's
success with `matchSuccessPolicy` (pkg/controller/job, the k8s.io/kubernetes version
tools/k8s/go.mod pins). tools/oracle/ calls them (tests/unit/oracle.py); jobrules decides the
same cases from the policy translated by the tables of docs/language.md
(tests/unit/native_policies.py), compiled by `rulec` and evaluated by `runtime.evaluator`.
Every answer must agree: the rule that decides (or none), its action, whether the failure
counts, the Job failure message; for success, the rule that matched and its message.

The cases: pods from a bounded enumeration (a main container, a sidecar and an init container,
each running, waiting, crash-looping or terminated with one of a few exit codes; pod conditions)
against random policies drawn from the native grammar; random success policies against sets of
succeeded indexes. The seed is fixed so that a run is repeatable; JOBRULES_ORACLE_SEED picks
another.
"""

from __future__ import annotations

import itertools
import os
import random
import re
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import rulec
from runtime import evaluator, plan
from tests.unit import oracle
from tests.unit.native_policies import decision, indexes, translate, translate_success

SEED = int(os.environ.get("JOBRULES_ORACLE_SEED", "26"))
POLICIES = 110           # random pod failure policies per run
PODS_PER_POLICY = 1_000  # pods of the enumeration (17,100) each policy decides
SUCCESS_CASES = 100_000  # sets of succeeded indexes, over as many random success policies as it takes
LAYOUTS = 4             # pods laid out for each set of succeeded indexes (at most 6)

NOW = datetime(2024, 5, 1, 12, 10, tzinfo=timezone.utc)
JOB_UID = "3e1f7c0a-0000-4000-8000-00000000f00b"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
FINISHED = "2024-05-01T12:09:00Z"

EXIT_CODES = (0, 1, 42, 137, 143, -1073741510)
STATES: tuple[Any, ...] = ("running", "waiting", "crashloop") + EXIT_CODES
CONDITION_SETS: tuple[tuple[tuple[str, str], ...], ...] = (
    (),
    (("DisruptionTarget", "True"),),
    (("DisruptionTarget", "False"),),
    (("DisruptionTarget", "Unknown"),),
    (("ConfigIssue", "True"),),
    (("ConfigIssue", "False"),),
    (("DisruptionTarget", "True"), ("ConfigIssue", "True")),
    (("ConfigIssue", "True"), ("DisruptionTarget", "True")),
    (("PodScheduled", "True"), ("Ready", "False"), ("ContainersReady", "False")),
)
CONDITION_TYPES = ("DisruptionTarget", "ConfigIssue", "Ready")


def _container(name: str, state: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "restartCount": 0, "ready": False, "image": "img"}
    if state == "running":
        status["state"] = {"running": {"startedAt": "2024-05-01T12:01:00Z"}}
    elif state == "waiting":
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}
    elif state == "crashloop":
        status["restartCount"] = 1
        status["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        status["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                              "finishedAt": "2024-05-01T12:05:00Z"}}
    else:
        reason = "Completed" if state == 0 else "OOMKilled" if state == 137 else "Error"
        status["state"] = {"terminated": {"exitCode": state, "reason": reason, "finishedAt": FINISHED}}
    return status


def enumerated_pods() -> list[dict[str, Any]]:
    """Failed pods: main in every state; a sidecar absent, or in every state as a regular
    container after main or as a native sidecar after init; init absent or in every state;
    times each set of pod conditions, and a pod the kubelet evicted (reason Evicted)."""
    sidecars = [None] + [(where, s) for where in ("regular", "native") for s in STATES]
    out = []
    for main, sidecar, init in itertools.product(STATES, sidecars, (None,) + STATES):
        regular = [_container("main", main)]
        inits = [] if init is None else [_container("init", init)]
        if sidecar is not None:
            (regular if sidecar[0] == "regular" else inits).append(_container("sidecar", sidecar[1]))
        for conditions in CONDITION_SETS + ("evicted",):
            status: dict[str, Any] = {"phase": "Failed", "containerStatuses": regular}
            if inits:
                status["initContainerStatuses"] = inits
            if conditions == "evicted":
                status["reason"] = "Evicted"
                status["message"] = "The node was low on resource: memory."
            elif conditions:
                status["conditions"] = [{"type": t, "status": s, "lastTransitionTime": FINISHED}
                                        for t, s in conditions]
            out.append({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "status": status})
    for n, pod in enumerate(out):
        pod["metadata"] = {
            "name": f"mypod-{n}", "namespace": "default", "uid": f"pod-{n}",
            "creationTimestamp": "2024-05-01T12:00:01Z", "labels": {"foo": "bar"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "foobar",
                                 "uid": JOB_UID, "controller": True}]}
    return out


def _values(rng: random.Random, operator: str) -> list[int]:
    size = rng.choices([rng.randint(1, 5), rng.randint(6, 40), rng.randint(41, 255)], [80, 15, 5])[0]
    pool = [1, 42, 137, 143, -1073741510, 2, 3, 255, 128]
    if operator == "NotIn":
        pool.append(0)
    values = set(rng.sample(pool, min(len(pool), rng.randint(0, 3))))
    while len(values) < size:
        values.add(rng.randint(1, 255))
    return sorted(values)[:255]


def random_policy(rng: random.Random) -> dict[str, Any]:
    """A Job spec with a podFailurePolicy of one to three rules from the native grammar."""
    rules = []
    for _ in range(rng.randint(1, 3)):
        action = rng.choice(["FailJob", "Ignore", "Count", "FailIndex"])
        if rng.random() < 0.6:
            operator = rng.choice(["In", "NotIn"])
            codes: dict[str, Any] = {"operator": operator, "values": _values(rng, operator)}
            if rng.random() < 0.5:
                codes["containerName"] = rng.choice(["main", "sidecar", "init"])
            rules.append({"action": action, "onExitCodes": codes})
        else:
            count = rng.choices([1, 2, 3], [5, 4, 1])[0]
            types = rng.sample(CONDITION_TYPES, count) if rng.random() < 0.8 else \
                [rng.choice(CONDITION_TYPES) for _ in range(count)]
            patterns = [{"type": t, "status": rng.choices(["True", "False", "Unknown"], [6, 2, 2])[0]}
                        for t in types]
            rules.append({"action": action, "onPodConditions": patterns})
    spec = job_spec(rules, rng.choice([0, 1, 6]))
    if any(r["action"] == "FailIndex" for r in rules) or rng.random() < 0.2:
        spec.update(completionMode="Indexed", completions=3, parallelism=3,
                    backoffLimitPerIndex=rng.choice([0, 1, 2]))
    return spec


def job_spec(rules: list[dict[str, Any]], backoff_limit: int = 6) -> dict[str, Any]:
    return {
        "parallelism": 1, "completions": 1, "backoffLimit": backoff_limit,
        "selector": {"matchLabels": {"foo": "bar"}},
        "template": {"metadata": {"labels": {"foo": "bar"}}, "spec": {
            "restartPolicy": "Never",
            "initContainers": [{"name": "init", "image": "img"}],
            "containers": [{"name": "main", "image": "img"}, {"name": "sidecar", "image": "img"}]}},
        "podFailurePolicy": {"rules": rules}}


def compile_kind(text: str) -> plan.Kind:
    built = rulec.build_sources([rulec.SourceFile.from_text("job.rules", text)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [kind] = plan.loads(rulec.dumps(built.plan)).kinds
    return kind


def jobrules_pod_failure(kind: plan.Kind, job: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """What jobrules decides for one failed pod, in the oracle's terms."""
    return decision(evaluator.evaluate(kind, job, [pod], None, NOW), pod["metadata"]["name"])


def test_pod_failure_policies_decide_as_match_pod_failure_policy() -> None:
    rng = random.Random(SEED)
    pods = enumerated_pods()
    cases = [(random_policy(rng), rng.sample(range(len(pods)), PODS_PER_POLICY))
             for _ in range(POLICIES)]
    answers = oracle.ask("pod-failure-policy", (
        {"podFailurePolicy": spec["podFailurePolicy"], "podIndexes": chosen} | ({"pods": pods} if n == 0 else {})
        for n, (spec, chosen) in enumerate(cases)))
    indexed = [{**p, "metadata": {**p["metadata"], "labels": {"foo": "bar", INDEX_LABEL: "0"}}}
               for p in pods]
    disagreements, documented = [], 0
    seen: Counter[str] = Counter()
    for (spec, chosen), theirs in zip(cases, answers, strict=True):
        kind = compile_kind(translate(spec))
        job = _job(spec)
        these = indexed if "backoffLimitPerIndex" in spec else pods
        for pod, their in zip((these[i] for i in chosen), theirs, strict=True):
            ours = jobrules_pod_failure(kind, job, pod)
            seen[str(their["action"])] += 1
            if ours == their:
                continue
            if condition_order_difference(spec["podFailurePolicy"], pod, their, ours):
                documented += 1
            else:
                disagreements.append((spec["podFailurePolicy"], pod["status"], their, ours))
    compared = sum(seen.values())
    print(f"\n{compared} pod failures compared with matchPodFailurePolicy: "
          f"{len(disagreements) + documented} disagreements, {documented} of them the documented "
          f"difference (a FailJob message naming one of two matching conditions); Kubernetes' "
          f"actions: {dict(sorted(seen.items()))}")
    assert compared >= 100_000
    assert set(seen) == {"None", "FailJob", "Ignore", "Count", "FailIndex"}, seen
    assert not disagreements, _show(disagreements)


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "foobar", "namespace": "default", "uid": JOB_UID,
                         "creationTimestamp": "2024-05-01T12:00:00Z"}, "spec": spec}


def condition_order_difference(policy: dict[str, Any], pod: dict[str, Any], theirs: dict[str, Any],
                               ours: dict[str, Any]) -> bool:
    """Whether a disagreement is the one docs/language.md documents: the same FailJob rule decides
    on both sides, the pod has conditions matching several of its patterns, and jobrules' message
    names the condition of the rule's first pattern that the pod matches (where the Job controller
    names the first of the pod's conditions that some pattern matches)."""
    if theirs["action"] != "FailJob" or {**ours, "message": None} != {**theirs, "message": None}:
        return False
    patterns = policy["rules"][theirs["index"]].get("onPodConditions") or []
    held = {(c["type"], c["status"]) for c in pod["status"].get("conditions", [])}
    matching = [p["type"] for p in patterns if (p["type"], p["status"]) in held]
    name = pod["metadata"]["name"]
    return len(set(matching)) > 1 and ours["message"] == (
        f"Pod default/{name} has condition {matching[0]} matching FailJob rule at index {theirs['index']}")


def _show(disagreements: list[tuple[Any, ...]]) -> str:
    """The first disagreement of each kind (what each side decided)."""
    kinds = {}
    for d in disagreements:
        kinds.setdefault((str(d[2].get("action")), str(d[3].get("action", d[3]))), d)
    lines = [f"{len(disagreements)} disagreements of {len(kinds)} kinds; the first of each:"]
    for policy, status, theirs, ours in list(kinds.values())[:8]:
        lines += [f"  policy     {_short(policy)}", f"  pod status {status}",
                  f"  Kubernetes {theirs}", f"  jobrules   {ours}", ""]
    return "\n".join(lines)


def _short(policy: dict[str, Any]) -> str:
    """A policy with long lists of exit codes cut short."""
    text = str(policy)
    return re.sub(r"\[((?:-?\d+, ){8})(?:-?\d+, )+(-?\d+)\]", r"[\1..., \2]", text)


def random_success_policy(rng: random.Random) -> dict[str, Any]:
    completions = rng.choice([1, 2, 3, 4, 5, 6, 8, 12])
    rules = []
    for _ in range(rng.randint(1, 4)):
        form = rng.choice(["indexes", "count", "both"])
        rule: dict[str, Any] = {}
        if form != "count":
            chosen = sorted(rng.sample(range(completions), rng.randint(0, completions)))
            rule["succeededIndexes"] = _intervals(rng, chosen)
        if form != "indexes":
            top = completions if form == "count" else len(indexes(rule["succeededIndexes"], completions))
            rule["succeededCount"] = rng.randint(0, top)
        rules.append(rule)
    return {"completionMode": "Indexed", "completions": completions, "parallelism": completions,
            "successPolicy": {"rules": rules}}


def _intervals(rng: random.Random, chosen: list[int]) -> str:
    """Indexes as an ordered list of intervals, runs sometimes written as ranges."""
    parts: list[str] = []
    run: list[int] = []
    for i in chosen + [None]:  # type: ignore[list-item]
        if i is not None and run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            if len(run) > 1 and rng.random() < 0.7:
                parts.append(f"{run[0]}-{run[-1]}")
            else:
                parts.extend(str(r) for r in run)
        run = [] if i is None else [i]
    return ",".join(parts)


def success_pods(rng: random.Random, completions: int, succeeded: list[int]) -> list[dict[str, Any]]:
    """One pod per index (succeeded ones sometimes after a failed one); others running, failed
    or not there."""
    out = []
    for index in range(completions):
        phases = ["Succeeded"] if index in succeeded else [rng.choice(["Running", "Failed", None])]
        if index in succeeded and rng.random() < 0.3:
            phases.insert(0, "Failed")
        if index in succeeded and rng.random() < 0.05:
            phases.append("Succeeded")
        for n, phase in enumerate(p for p in phases if p):
            out.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"foobar-{index}-{n}", "namespace": "default",
                                     "uid": f"pod-{index}-{n}", "labels": {INDEX_LABEL: str(index)},
                                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                          "name": "foobar", "uid": JOB_UID,
                                                          "controller": True}]},
                        "status": {"phase": phase}})
    return out


def test_success_policies_decide_as_match_success_policy() -> None:
    rng = random.Random(SEED)
    cases: list[tuple[dict[str, Any], list[list[int]]]] = []
    while sum(len(sets) for _, sets in cases) < SUCCESS_CASES:
        spec = random_success_policy(rng)
        c = spec["completions"]
        if c <= 6:  # every set, each with pods laid out LAYOUTS ways
            sets = [[i for i in range(c) if m >> i & 1] for m in range(2 ** c)] * LAYOUTS
        else:
            sets = [sorted(rng.sample(range(c), rng.randint(0, c))) for _ in range(256)]
        cases.append((spec, sets))
    answers = oracle.ask("success-policy", ({"successPolicy": s["successPolicy"],
                                             "completions": s["completions"], "cases": sets}
                                            for s, sets in cases))
    disagreements, documented = [], 0
    matched: Counter[bool] = Counter()
    for (spec, sets), theirs in zip(cases, answers, strict=True):
        kind = compile_kind(translate_success(spec))
        job = _job(spec)
        for succeeded, their in zip(sets, theirs, strict=True):
            pods = success_pods(rng, spec["completions"], succeeded)
            ours = jobrules_success(kind, job, pods)
            matched[their["matched"]] += 1
            if ours == their:
                continue
            if jobrules_success(kind, job, without_second_successes(pods)) == their:
                documented += 1
            else:
                disagreements.append((spec["completions"], spec["successPolicy"], succeeded, their, ours))
    compared = sum(matched.values())
    print(f"\n{compared} sets of succeeded indexes compared with matchSuccessPolicy: "
          f"{len(disagreements) + documented} disagreements, {documented} of them the documented "
          f"difference (an index with two succeeded pods counts twice); matched: {matched[True]}")
    assert compared >= 100_000 and matched[True] and matched[False]
    assert not disagreements, "\n".join(
        f"completions {c} {p} succeeded {s}:\n  Kubernetes {t}\n  jobrules   {o}"
        for c, p, s, t, o in disagreements[:5])


def jobrules_success(kind: plan.Kind, job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """What jobrules decides for an Indexed Job's pods, in the oracle's terms."""
    verdict = evaluator.evaluate(kind, job, pods, None, NOW).verdict
    if verdict.phase != "Succeeded" or verdict.reason != "SuccessPolicy":
        return {"matched": False, "message": "", "index": -1}
    found = re.fullmatch(r"Matched rules at index (\d+)", verdict.message or "")
    return {"matched": True, "message": verdict.message, "index": int(found.group(1)) if found else None}


def without_second_successes(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods less every succeeded pod of an index after its first."""
    seen: set[str] = set()
    out = []
    for pod in pods:
        index = pod["metadata"]["labels"][INDEX_LABEL]
        if pod["status"]["phase"] == "Succeeded":
            if index in seen:
                continue
            seen.add(index)
        out.append(pod)
    return out


# -- the documented differences, each shown on one case ---------------------------------------

def test_documented_difference_a_fail_job_message_names_the_first_pattern_that_matches() -> None:
    """docs/language.md: a pod whose conditions match two patterns of the deciding FailJob rule,
    listed in the other order: the same rule and action, the message names another condition."""
    spec = job_spec([{"action": "FailJob", "onPodConditions": [
        {"type": "ConfigIssue", "status": "True"}, {"type": "DisruptionTarget", "status": "True"}]}])
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "mypod-0", "namespace": "default", "uid": "pod-0",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "foobar",
                                             "uid": JOB_UID, "controller": True}]},
           "status": {"phase": "Failed", "conditions": [
               {"type": "DisruptionTarget", "status": "True"}, {"type": "ConfigIssue", "status": "True"}]}}
    [[theirs]] = oracle.ask("pod-failure-policy", [{"podFailurePolicy": spec["podFailurePolicy"], "pods": [pod]}])
    ours = jobrules_pod_failure(compile_kind(translate(spec)), _job(spec), pod)
    assert theirs["message"] == "Pod default/mypod-0 has condition DisruptionTarget matching FailJob rule at index 0"
    assert ours["message"] == "Pod default/mypod-0 has condition ConfigIssue matching FailJob rule at index 0"
    assert condition_order_difference(spec["podFailurePolicy"], pod, theirs, ours)


def test_documented_difference_an_index_with_two_succeeded_pods_counts_twice() -> None:
    """docs/language.md: `succeededCount` counts succeeded pods; the Job controller counts indexes."""
    spec = {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
            "successPolicy": {"rules": [{"succeededCount": 2}]}}
    pods = success_pods(random.Random(0), 3, [])
    for n in range(2):
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"foobar-0-s{n}", "namespace": "default", "uid": f"pod-0-s{n}",
            "labels": {INDEX_LABEL: "0"}, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                               "name": "foobar", "uid": JOB_UID,
                                                               "controller": True}]},
            "status": {"phase": "Succeeded"}})
    [[theirs]] = oracle.ask("success-policy", [{"successPolicy": spec["successPolicy"], "completions": 3,
                                                "cases": [[0]]}])
    kind = compile_kind(translate_success(spec))
    assert theirs["matched"] is False
    assert jobrules_success(kind, _job(spec), pods)["matched"] is True
    assert jobrules_success(kind, _job(spec), without_second_successes(pods)) == theirs
