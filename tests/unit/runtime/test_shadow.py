"""Shadow mode (runtime.shadow): on a Job that carries the compiled fragment the native policies
are only audited, and jobrules' decision is compared with the Job controller's conditions."""
from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rulec import api
from runtime import plan, reconcile, shadow

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2024, 5, 1, 12, 10, tzinfo=timezone.utc)
UID = "3e1f7c0a-0000-4000-8000-00000000f00b"
# exit-codes: Ignore 1,2,3 (rule 0); FailJob 5,6,7 (rule 1); the default count on the Job's limit.
EXIT_CODES = ROOT / "examples" / "pod-failure-policy" / "exit-codes"


def kind_of(path: Path) -> plan.Kind:
    built = api.build([str(path)])
    assert built.plan is not None
    [kind] = plan.load(built.plan).kinds
    return kind


KIND = kind_of(EXIT_CODES)


def job(*, fragment: bool = True, conditions: tuple[tuple[str, str, str], ...] = (),
        failed: int = 0) -> dict[str, Any]:
    assert KIND.native is not None
    spec: dict[str, Any] = {"backoffLimit": 6, "selector": {"matchLabels": {"foo": "bar"}},
                            "template": {"spec": {"restartPolicy": "Never"}}}
    if fragment:
        spec.update(copy.deepcopy(dict(KIND.native.fragment)))
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "foobar", "namespace": "default", "uid": UID,
                         "creationTimestamp": "2024-05-01T12:00:00Z"},
            "spec": spec,
            "status": {"failed": failed, "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions]}}


def pod(n: int, exit_code: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{n}", "namespace": "default", "uid": f"pod-{n}",
                         "creationTimestamp": "2024-05-01T12:00:01Z", "labels": {"foo": "bar"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "foobar", "uid": UID, "controller": True}]},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "main", "restartCount": 0, "state": {"terminated": {
                    "exitCode": exit_code, "reason": "Error",
                    "finishedAt": "2024-05-01T12:09:00Z"}}}]}}


def rule_failed(index: int) -> tuple[str, str, str]:
    return ("FailureTarget", "PodFailurePolicy",
            f"Container main for pod default/p0 failed with exit code 5 matching FailJob rule at index {index}")


def test_a_job_carries_the_fragment_only_when_every_field_is_equal() -> None:
    assert KIND.native is not None
    assert shadow.carries(KIND.native, job())
    assert not shadow.carries(KIND.native, job(fragment=False))
    other = job()
    other["spec"]["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"] = [5, 6]
    assert not shadow.carries(KIND.native, other)


# exit-codes with `fail job` deleting the Job's pods, so that the policy has an action to take
ACTING = dataclasses.replace(KIND, actions={"failJob": (plan.DeletePods(None, "job", False),)})


def test_a_job_without_the_fragment_is_handled_as_before() -> None:
    bare = job(fragment=False)
    assert shadow.owned(ACTING, bare) == frozenset()
    assert shadow.judge(ACTING, bare, [pod(0, 5)], NOW) == ("none", None)
    writes = reconcile.reconcile(ACTING, bare, [pod(0, 5)], NOW)
    assert writes.evaluation.verdict.phase == "Failed"
    assert [(i.policy, i.action) for i in writes.new] == [("rule-1", "failJob")]


def test_with_the_fragment_the_verdict_is_written_and_no_action_taken() -> None:
    carried = job()
    assert shadow.owned(ACTING, carried) == {"rule-0", "rule-1", "default"}
    writes = reconcile.reconcile(ACTING, carried, [pod(0, 5)], NOW)
    assert (writes.evaluation.verdict.phase, writes.evaluation.verdict.reason) == (
        "Failed", "PodFailurePolicy")
    assert writes.new == ()   # the Job controller's to carry out


def test_ours_is_what_the_rules_decide_with_the_native_policies_enforced() -> None:
    # the Job's own conditions are set aside: the verdicts that read them would decide first
    decided = job(conditions=(rule_failed(1),), failed=1)
    assert shadow.ours(KIND, decided, [pod(0, 5)], NOW) == shadow.Outcome("Failed", "PodFailurePolicy", 1)
    assert shadow.ours(KIND, decided, [pod(0, 1)], NOW) is None   # ignored
    budget = job(failed=7)
    budget["spec"]["backoffLimit"] = 1
    assert shadow.ours(KIND, budget, [pod(0, 9), pod(1, 9)], NOW) == shadow.Outcome(
        "Failed", "BackoffLimitExceeded")


def test_theirs_reads_the_job_controllers_conditions() -> None:
    assert shadow.theirs(job()) is None
    assert shadow.theirs(job(conditions=(rule_failed(1),))) == shadow.Outcome("Failed", "PodFailurePolicy", 1)
    assert shadow.theirs(job(conditions=(("Complete", "CompletionsReached", ""),))) == shadow.Outcome(
        "Succeeded", "CompletionsReached")


F = shadow.Outcome("Failed", "PodFailurePolicy", 1)


@pytest.mark.parametrize("theirs, ours, caught_up, disagree", [
    (None, F, True, False),                                     # the Job controller has not decided
    (F, F, True, False),
    (F, shadow.Outcome("Failed", "PodFailurePolicy", 0), True, True),   # another rule
    (F, shadow.Outcome("Failed", "BackoffLimitExceeded"), True, True),
    (F, None, True, True),                                      # it failed, we would not have
    (F, None, False, False),                                    # ... unless our pods lag its
    (shadow.Outcome("Succeeded", "CompletionsReached"), F, True, True),
    (shadow.Outcome("Succeeded", "CompletionsReached"), None, True, False),
    (shadow.Outcome("Failed", "DeadlineExceeded"), None, True, False),  # no native rule's
])
def test_compare(theirs: Any, ours: Any, caught_up: bool, disagree: bool) -> None:
    assert (shadow.compare(theirs, ours, caught_up_=caught_up) is not None) == disagree


def test_judge_and_the_event_name_both_decisions() -> None:
    # The Job controller failed the Job by rule 1 on a pod that exited 1, which the rules ignore.
    carried = job(conditions=(rule_failed(1),), failed=1)
    assert shadow.judge(KIND, carried, [pod(0, 5)], NOW) == ("agree", None)
    result, found = shadow.judge(KIND, carried, [pod(0, 1)], NOW)
    assert result == "disagree" and found is not None and found.rule == "1"
    spec = shadow.event(carried, found)
    assert spec.type == "Warning" and spec.reason == "NativeDisagreement"
    assert "Failed (PodFailurePolicy, rule 1)" in spec.note
    assert "no failure by a native policy" in spec.note
    assert shadow.judge(KIND, carried, [], NOW) == ("wait", None)   # the failed pod not seen yet
    # one Event per disagreement: named from the Job (its uid) and the Job controller's outcome
    assert shadow.event(carried, found).name == spec.name and spec.name.startswith("foobar.")
    other_job = copy.deepcopy(carried)
    other_job["metadata"]["uid"] = "another-uid"
    assert shadow.event(other_job, found).name != spec.name
    other_outcome = dataclasses.replace(found, theirs=shadow.Outcome("Failed", "PodFailurePolicy", 2))
    assert shadow.event(carried, other_outcome).name != spec.name


def test_the_controllers_cache_keeps_what_shadow_mode_reads() -> None:
    """The controller caches projected Jobs: the fragment's fields and the failed counts stay."""
    from runtime import projection

    carried = job(conditions=(rule_failed(1),), failed=1)
    carried["status"]["uncountedTerminatedPods"] = {"failed": ["pod-0"]}
    kept = projection.project(carried, projection.of_kind(KIND).job)
    assert shadow.carries(KIND.native, kept)  # type: ignore[arg-type]
    assert shadow.caught_up(kept, [pod(0, 5)]) is False
    assert shadow.judge(KIND, kept, [pod(0, 5), pod(1, 5)], NOW) == ("agree", None)
