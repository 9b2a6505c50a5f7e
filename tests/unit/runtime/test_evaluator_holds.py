"""Verdicts over a job's life: terminal verdicts hold, restarts of ours read Restarting, and the
kind's own restart semantics (`final until`, `restart job`) let a job start again."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runtime import evaluator, state
from builders import (
    T0, action, job, jp, load_kind, pod, pods_cond, policy, terminated, verdict,
)

NOW = T0 + timedelta(minutes=5)
# A Volcano-like kind: the pods decide, and the operator's phase too once the pods are gone.
RULES = [
    verdict("Failed", pods_cond("any", "failed"), reason="PodFailed",
            message="pod {pod}: container {container} {container_reason} (exit {exit_code})"),
    verdict("Succeeded", {"op": "or", "args": [pods_cond("all", "succeeded"),
                                               jp("status.state.phase == 'Completed'")]}),
    verdict("Running", pods_cond("any", "running")),
    verdict("Pending"),
]
OOM = pod("master-0", "Failed", task="master", containers=[terminated("main", 137, "OOMKilled")])
COMPLETED = {"state": {"phase": "Completed"}}


def evaluate(kind, objects, prior=None, status=None, now=NOW) -> evaluator.Evaluation:
    result = evaluator.evaluate(kind, job(status=status), objects, prior, now)
    again = evaluator.evaluate(kind, job(status=status), objects,
                               state.decode(state.encode(result.state)).state, now)
    assert (again.verdict, again.events, again.actions) == (result.verdict, (), ()), "not idempotent"
    return result


def test_a_failed_verdict_holds_once_the_pod_is_gone_and_the_operator_says_completed() -> None:
    kind = load_kind(RULES)
    failed = evaluate(kind, [OOM], status={"state": {"phase": "Running"}})
    assert (failed.verdict.phase, failed.verdict.final) == ("Failed", True)
    assert failed.state.final == state.Final(
        "Failed", "PodFailed", "pod master-0: container main OOMKilled (exit 137)",
        failed.verdict.rule, "verdict")
    later = evaluate(kind, [], failed.state, COMPLETED, NOW + timedelta(minutes=1))
    assert later.verdict == failed.verdict          # same phase, reason, message and rule
    assert later.events == ()                        # the pod is gone, but it had finished


def test_a_replacement_pod_does_not_make_a_failed_job_run_again() -> None:
    kind = load_kind(RULES)
    failed = evaluate(kind, [OOM])
    replacement = pod("master-0", "Running", task="master", uid="uid-master-0-b")
    assert evaluate(kind, [replacement], failed.state).verdict.phase == "Failed"


def test_succeeded_holds_too() -> None:
    kind = load_kind(RULES)
    done = evaluate(kind, [pod("a", "Succeeded")])
    assert (done.verdict.phase, done.verdict.final) == ("Succeeded", True)
    assert evaluate(kind, [OOM], done.state).verdict.phase == "Succeeded"


def test_final_never_re_decides_every_time() -> None:
    kind = load_kind(RULES, final={"sticky": False, "until": None})
    failed = evaluate(kind, [OOM])
    assert (failed.verdict.phase, failed.verdict.final, failed.state.final) == ("Failed", False, None)
    assert evaluate(kind, [], failed.state, COMPLETED).verdict.phase == "Succeeded"


def test_final_never_drops_a_stored_verdict_of_the_rules_but_not_one_of_an_action() -> None:
    kind = load_kind(RULES, final={"sticky": False, "until": None})
    by_rules = state.State(verdict="Failed", final=state.Final("Failed", "PodFailed", "m", "t:1:1", "verdict"))
    by_policy = state.State(verdict="Failed", final=state.Final("Failed", "TooMany", "m", "t:2:1"))
    assert evaluate(kind, [], by_rules, COMPLETED).verdict.phase == "Succeeded"
    assert evaluate(kind, [], by_policy, COMPLETED).verdict.reason == "TooMany"


UNTIL = {"sticky": True, "until": {"expr": "status.retryCount", "span": {
    "path": "t.rules", "line": 1, "column": 1, "endLine": 1, "endColumn": 2}}}


def test_a_new_run_of_the_job_releases_a_terminal_verdict() -> None:
    """Volcano restarting the job (`RestartJob` bumps status.retryCount): it starts again."""
    kind = load_kind(RULES, final=UNTIL)
    failed = evaluate(kind, [OOM], status={"retryCount": 0})
    assert failed.state.final is not None and failed.state.final.run == "0"
    same_run = evaluate(kind, [], failed.state, {"retryCount": 0, **COMPLETED})
    assert same_run.verdict.phase == "Failed"
    rerun = evaluate(kind, [pod("master-0", "Running", task="master", uid="uid-2")],
                     failed.state, {"retryCount": 1})
    assert (rerun.verdict.phase, rerun.verdict.final) == ("Running", False)
    assert rerun.state.final is None


def test_an_action_verdict_holds_until_the_job_starts_again_too() -> None:
    kind = load_kind(RULES, [policy("podFailed", action("failJob", reason="Boom"))], final=UNTIL)
    failed = evaluate(kind, [OOM], status={"retryCount": 3})
    assert (failed.state.final.by, failed.state.final.run) == ("policy", "3")
    assert evaluate(kind, [], failed.state, {"retryCount": 4}).verdict.phase == "Pending"


def test_a_restart_job_of_ours_on_the_failed_verdict_starts_the_job_again() -> None:
    pol = [policy("jobVerdictChanged", action("restartJob", max=1), to="Failed")]
    kind = load_kind(RULES, pol)
    first = evaluate(kind, [OOM])
    assert [(a.action, a.status) for a in first.actions] == [("restartJob", "run")]
    assert (first.verdict.phase, first.verdict.final) == ("Restarting", False)
    assert first.state.final is None and first.state.restarting is not None
    # the old pod is gone, a new one runs: the rules decide again
    rerun = evaluate(kind, [pod("master-0", "Running", task="master", uid="uid-2")], first.state)
    assert rerun.verdict.phase == "Running" and rerun.state.restarting is None


def test_restarting_lasts_while_the_pods_we_stopped_are_there() -> None:
    pol = [policy("podFailed", action("restartPod", max=3))]
    kind = load_kind(RULES, pol)
    restarted = evaluate(kind, [OOM, pod("worker-0", task="worker")])
    assert restarted.verdict.phase == "Restarting" and not restarted.verdict.final
    assert restarted.verdict.message == "pod master-0: container main OOMKilled (exit 137)"
    lingering = evaluate(kind, [OOM, pod("worker-0", task="worker")], restarted.state,
                         now=NOW + timedelta(seconds=30))
    assert lingering.verdict == restarted.verdict
    gone = evaluate(kind, [pod("worker-0", task="worker")], lingering.state,
                    now=NOW + timedelta(seconds=40))
    assert (gone.verdict.phase, gone.state.restarting) == ("Running", None)


def test_a_restart_waiting_for_its_delay_keeps_the_job_from_failing() -> None:
    pol = [policy("podFailed", action("restartPod", max=3, delay=60))]
    kind = load_kind(RULES, pol)
    waiting = evaluate(kind, [OOM])
    assert [(a.action, a.status) for a in waiting.actions] == [("restartPod", "scheduled")]
    assert (waiting.verdict.phase, waiting.state.final) == ("Restarting", None)
    fired = evaluate(kind, [OOM], waiting.state, now=NOW + timedelta(seconds=60))
    assert [(a.action, a.status) for a in fired.actions] == [("restartPod", "run")]
    assert fired.verdict.phase == "Restarting"


def test_pods_we_stopped_count_in_no_verdict() -> None:
    pol = [policy("podFailed", action("abortJob"))]
    kind = load_kind(RULES, pol)
    aborted = evaluate(kind, [OOM, pod("worker-0", task="worker")])
    assert aborted.verdict.phase == "Pending"   # both pods are on their way out, by our doing


@pytest.mark.parametrize("verdicts, expected", [
    ([verdict("Failed", jp("status.failed > `0`"), reason="Operator")], "Failed"),
    ([verdict("Running", jp("status.failed > `0`"))], "Running"),
])
def test_stickiness_is_for_terminal_verdicts_only(verdicts: list, expected: str) -> None:
    kind = load_kind(verdicts + [verdict("Pending")])
    first = evaluate(kind, [], status={"failed": 1})
    assert first.verdict.phase == expected
    assert evaluate(kind, [], first.state, {"failed": 0}).verdict.phase == (
        "Failed" if expected == "Failed" else "Pending")
