"""The fragment `rulec native` compiles, on real batch/v1 Jobs under kube-controller-manager's Job
controller, with the controller beside it in shadow mode (docs/native.md, docs/controller.md):
the Job controller carries the native policies out, jobrules only decides them too and compares.
Each case's Job ends as jobrules decides (type, reason, message of its conditions; our verdict),
and the controller counts every outcome compared and no disagreement. Without the controller, a
Job with the fragment still fails by its podFailurePolicy."""

from __future__ import annotations

import json
import random
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from support import apiserver, controllers

sys.path.insert(0, str(controllers.REPO))
from rulec import api as rulec_api  # noqa: E402
from rulec import native  # noqa: E402
from runtime import evaluator  # noqa: E402
from runtime import plan as plan_lib  # noqa: E402
from tests.unit import test_oracle  # noqa: E402
from tests.unit.native_policies import translate  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("controller_manager")]

EXAMPLES = controllers.REPO / "examples" / "pod-failure-policy"
RANDOM_SEED = 26
RANDOM_JOBS = 8      # random policies of tests/unit/test_oracle.py, one Job each
FAILED = ("FailureTarget", "Failed")

# (example, [(failure, expected outcome)]): a failure is ("exit", code) in the main container,
# ("evicted",) or ("condition", type, status); the outcome the Job's reason, None: not ended.
EXAMPLE_CASES: list[tuple[str, list[tuple[tuple[Any, ...], str | None]]]] = [
    ("exit-codes", [(("exit", 5), "PodFailurePolicy"), (("exit", 9), "BackoffLimitExceeded"),
                    (("exit", 2), None)]),
    ("not-in", [(("exit", 1), "PodFailurePolicy"), (("exit", 6), "BackoffLimitExceeded")]),
    ("container-name", [(("exit", 6), "PodFailurePolicy"), (("exit", 3), None)]),
    ("fail-disruption", [(("evicted",), "PodFailurePolicy")]),
    ("ignore-disruption", [(("evicted",), None), (("exit", 1), "BackoffLimitExceeded")]),
    ("count-exit-codes", [(("exit", 2), "BackoffLimitExceeded")]),
    ("multi-pattern", [(("condition", "ConfigIssue", "True"), "PodFailurePolicy"),
                       (("condition", "ConfigIssue", "Unknown"), None)]),
]


def fragment_of(rules: Path) -> dict[str, Any]:
    built = rulec_api.build([str(rules)])
    assert built.plan is not None
    [report] = native.decide(built.plan)
    assert report.native_count == len(report.decisions), [d.text() for d in report.decisions]
    return report.fragment()


def job_manifest(namespace: str, name: str, fragment: dict[str, Any],
                 containers: tuple[str, ...], init: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Job of one pod carrying the fragment; backoffLimit 0 where the rules leave it to the Job
    (`max <<spec.backoffLimit>>`), so that a counted failure ends the Job at once."""
    pod = apiserver.pod_manifest(namespace, name, containers=containers, init_containers=init)
    spec = {"backoffLimit": 0, "template": {"spec": pod["spec"]}, **fragment}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def fail(api: Any, pod: dict[str, Any], failure: tuple[Any, ...]) -> None:
    """The pod fails as `failure` says, written through pods/status as a kubelet would."""
    if failure[0] == "evicted":
        apiserver.report_evicted(api, pod)
        return
    main = pod["spec"]["containers"][0]["name"]
    if failure[0] == "exit":
        apiserver.report_failed(api, pod, exit_code=failure[1], container=main)
        return
    _, type_, status = failure
    started = pod.get("status", {}).get("startTime") or apiserver._now()
    conditions = apiserver._conditions(ready=False, reason="PodFailed")
    conditions.append({"type": type_, "status": status, "lastTransitionTime": apiserver._now()})
    apiserver.set_status(api, pod, {
        "phase": "Failed", "startTime": started, "conditions": conditions,
        "initContainerStatuses": apiserver._init_done(pod, started),
        "containerStatuses": [apiserver._terminated(n, i, started, 1 if n == main else 0,
                                                    "Error" if n == main else "Completed")
                              for n, i in apiserver._containers(pod)]})


def ended(job: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for t in FAILED if (c := apiserver.condition(job, t)) and c["status"] == "True"), None)


def run_jobs(api: Any, namespace: str, rules: Path, cases: list[tuple[str, tuple[Any, ...], str | None]],
             containers: tuple[str, ...], init: tuple[str, ...] = (),
             kind: plan_lib.Kind | None = None) -> list[dict[str, Any]]:
    """Create a Job with the rules' fragment per case, fail its pod, and wait for the outcome:
    the Job's failure condition, or (no outcome expected) the failed pod accounted for by the
    Job controller (its tracking finalizer gone) with no failure. With `kind`, the outcome
    expected is jobrules' own, decided offline on the failed pod. The Jobs as they ended."""
    fragment = fragment_of(rules)
    jobs = [apiserver.create(api, apiserver.JOBS, job_manifest(namespace, name, fragment, containers, init))
            for name, _, _ in cases]
    pods = []
    for job, (name, failure, _) in zip(jobs, cases):
        [pod] = apiserver.job_pods(api, job)
        fail(api, apiserver.report_running(api, pod), failure)
        pods.append(apiserver.PODS.path(namespace, pod["metadata"]["name"]))
    out = []
    for job, pod_path, (name, failure, expected) in zip(jobs, pods, cases):
        path = apiserver.JOBS.path(namespace, name)
        if kind is not None:
            decided = evaluator.evaluate(kind, job, [apiserver.get(api, pod_path)], None,
                                         datetime.now(timezone.utc))
            expected = decided.verdict.reason if decided.verdict.phase == "Failed" else None
        if expected is None:
            apiserver.wait_for(f"{name}'s failed pod accounted for", lambda: "batch.kubernetes.io/job-tracking"
                               not in (apiserver.get(api, pod_path)["metadata"].get("finalizers") or []))
            done = apiserver.get(api, path)
            assert ended(done) is None, (name, failure, done["status"])
        else:
            done = apiserver.wait_for(f"{name} to end", lambda: (j if ended(j := apiserver.get(api, path)) else None))
            assert ended(done)["reason"] == expected, (name, failure, ended(done))
        out.append(done)
    return out


def check_shadow(api: Any, controller: Any, namespace: str, jobs: list[dict[str, Any]]) -> None:
    """Our verdict says the Job controller's outcome, each ended Job was compared, none differs."""
    ended_jobs = [j for j in jobs if ended(j)]
    for job in ended_jobs:
        path = apiserver.JOBS.path(namespace, job["metadata"]["name"])
        verdict = controllers.verdict(controllers.wait_for_verdict(api, path, "Failed"))
        theirs = ended(apiserver.get(api, path))
        assert (verdict["reason"], verdict["message"]) == (theirs["reason"], theirs["message"])
    apiserver.wait_for("every ended Job compared", lambda: controller.metric(
        "jobrules_native_comparisons_total") >= len(ended_jobs))
    assert controller.metric("jobrules_native_comparisons_total", result="agree") == len(ended_jobs)
    assert controller.metric("jobrules_native_disagreements_total") == 0, controller.logs()


@pytest.mark.parametrize("example, cases", EXAMPLE_CASES, ids=[e for e, _ in EXAMPLE_CASES])
def test_the_examples_end_as_jobrules_decides(control_plane: Any, api: Any, namespace: str,
                                              tmp_path: Path, example: str, cases: Any) -> None:
    plan = controllers.compile_plan(EXAMPLES / example, tmp_path / "plan.json")
    named = [(f"{example[:40]}-{n}", failure, expected) for n, (failure, expected) in enumerate(cases)]
    with controllers.running(control_plane, plan, namespace, tmp_path) as controller:
        jobs = run_jobs(api, namespace, EXAMPLES / example, named, ("main-container",))
        check_shadow(api, controller, namespace, jobs)


def random_cases() -> list[tuple[dict[str, Any], tuple[Any, ...]]]:
    """The first RANDOM_JOBS non-Indexed policies test_oracle draws (one pod per Job: FailIndex
    needs an Indexed Job), each with a random failure of its main container or an eviction."""
    rng = random.Random(RANDOM_SEED)
    out = []
    while len(out) < RANDOM_JOBS:
        spec = test_oracle.random_policy(rng)
        failure = rng.choice([("exit", 1), ("exit", 42), ("exit", 137), ("exit", 143),
                              ("exit", 2), ("exit", 255), ("evicted",)])
        if "completionMode" not in spec:
            out.append((spec, failure))
    return out


@pytest.mark.parametrize("n", range(RANDOM_JOBS))
def test_random_policies_end_as_jobrules_decides(control_plane: Any, api: Any, namespace: str,
                                                 tmp_path: Path, n: int) -> None:
    spec, failure = random_cases()[n]
    rules = tmp_path / "job.rules"
    rules.write_text(translate(spec))
    assert fragment_of(rules)["podFailurePolicy"]["rules"]  # the policy went native
    plan = controllers.compile_plan(rules, tmp_path / "plan.json")
    kind = plan_lib.load_file(plan).kinds[0]
    with controllers.running(control_plane, plan, namespace, tmp_path) as controller:
        jobs = run_jobs(api, namespace, rules, [(f"random-{n}", failure, None)],
                        ("main", "sidecar"), ("init",), kind=kind)
        check_shadow(api, controller, namespace, jobs)


def test_without_the_controller_the_fragment_still_fails_the_job(api: Any, namespace: str) -> None:
    """Nothing of jobrules runs: the Job controller alone fails the Job by the compiled rule."""
    fragment = fragment_of(EXAMPLES / "exit-codes")
    job = apiserver.create(api, apiserver.JOBS, job_manifest(namespace, "alone", fragment, ("main-container",)))
    [pod] = apiserver.job_pods(api, job)
    fail(api, apiserver.report_running(api, pod), ("exit", 7))
    failed = apiserver.wait_for_condition(api, apiserver.JOBS.path(namespace, "alone"), "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert failed["message"].endswith("failed with exit code 7 matching FailJob rule at index 1")


def test_a_disagreement_is_counted_and_reported(control_plane: Any, api: Any, namespace: str,
                                                tmp_path: Path) -> None:
    """A plan whose rules say otherwise than the fragment the Job carries (rule-1 made to ignore
    what the fragment's rule 1 fails on): the Job controller fails the Job, jobrules would not;
    the controller counts it and sends a Warning Event naming both decisions."""
    plan = controllers.compile_plan(EXAMPLES / "exit-codes", tmp_path / "plan.json")
    source = json.loads(plan.read_text())
    policies = {p["id"]: p for p in source["kinds"][0]["policies"]}
    policies["rule-1"]["action"] = policies["rule-0"]["action"]
    plan.write_text(json.dumps(source))
    with controllers.running(control_plane, plan, namespace, tmp_path) as controller:
        [job] = run_jobs(api, namespace, EXAMPLES / "exit-codes",
                         [("differs", ("exit", 5), "PodFailurePolicy")], ("main-container",))
        apiserver.wait_for("the disagreement counted", lambda: controller.metric(
            "jobrules_native_disagreements_total", kind="batchjob", rule="1") == 1)
        assert controller.metric("jobrules_native_comparisons_total", result="disagree") == 1
        event = apiserver.wait_for("the Warning Event", lambda: next(
            (e for e in controllers.events_of(api, namespace, "differs")
             if e.get("reason") == "NativeDisagreement"), None))
        assert event["type"] == "Warning"
        assert "the Job controller decided Failed (PodFailurePolicy, rule 1)" in event["note"]
        assert "jobrules decided no failure by a native policy" in event["note"]
