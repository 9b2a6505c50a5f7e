"""Events, policies, budgets, delays and the state that makes every action happen once."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from runtime import evaluator, functions, pods, state, templates, vocabulary
from runtime.evaluation import verdicts
from runtime.evaluation.outcomes import Target
from builders import (
    T0, action, at, both, condition, evicted, exit_in, job, jp, load_kind, negate, pod, pods_cond, policy,
    reason_in, running, span, terminated, verdict, waiting,
)

NOW = T0 + timedelta(minutes=5)
RULES = [verdict("Failed", pods_cond("any", "failed")), verdict("Succeeded", pods_cond("all", "succeeded")),
         verdict("Running", pods_cond("any", "running")), verdict("Pending")]


def run(policies: list, objects: list, prior: state.State | None = None, now=NOW,
        verdicts: list | None = None, **kind_options: Any) -> evaluator.Evaluation:
    k = load_kind(RULES if verdicts is None else verdicts, policies, **kind_options)
    return evaluator.evaluate(k, job(), objects, prior, now)


# A policy that takes every pod and task event and does nothing: a kind remembers only what some
# policy listens for, so tests of what is detected listen for everything.
EARS = [policy(e, action("ignore")) for e in sorted(vocabulary.POD_EVENTS | vocabulary.TASK_EVENTS)]


def seen(*objects: dict, now=NOW) -> state.State:
    """The state after a job with these pods was evaluated once (every event listened for)."""
    return run(EARS, list(objects), now=now).state


def ran(e: evaluator.Evaluation) -> list[tuple[str, str]]:
    return [(a.action, a.status) for a in e.actions]


def pod_events(e: evaluator.Evaluation) -> list[str]:
    return [ev.event for ev in e.events if ev.event.startswith(("pod", "container"))]


def all_events(e: evaluator.Evaluation) -> list[str]:
    return [ev.event for ev in e.events if ev.event != "jobVerdictChanged"]


# -- detection ---------------------------------------------------------------------------------

DELETING = pod("a", deleting=100)
RESTARTED = pod("a", containers=[running("main", restarts=1, last_exit=1)])

DETECTION = [
    ("new pending pod", None, [pod("a", "Pending")], ["podPending"]),
    ("new running pod", None, [pod("a")], ["podRunning"]),
    ("pending -> running", [pod("a", "Pending")], [pod("a")], ["podRunning"]),
    ("running -> succeeded", [pod("a")], [pod("a", "Succeeded")], ["podSucceeded"]),
    ("running -> failed", [pod("a")], [pod("a", "Failed")], ["podFailed"]),
    ("running -> evicted", [pod("a")], [evicted("a")], ["podEvicted", "podFailed"]),
    ("preemption while running", [pod("a")],
     [pod("a", conditions=[condition("DisruptionTarget", "PreemptionByScheduler")])], ["podEvicted"]),
    ("evicted, then failed: a failure for `pod failed or evicted` only",
     [pod("a", conditions=[condition("DisruptionTarget", "X")])], [evicted("a")], ["podFailed"]),
    ("deletion requested", [pod("a")], [DELETING], ["podDeleted", "podEvicted"]),
    ("deleted then gone: once", [DELETING], [], []),
    ("gone without finishing", [pod("a")], [], ["podDeleted", "podEvicted"]),
    ("gone after finishing", [pod("a", "Succeeded")], [], []),
    ("restart count grew", [pod("a")], [RESTARTED], ["containerRestarted"]),
    ("unchanged", [pod("a")], [pod("a")], []),
    ("replaced by a new incarnation", [pod("a", "Failed")], [pod("a", uid="uid-a2")], ["podRunning"]),
]


@pytest.mark.parametrize("before, after, expected", [row[1:] for row in DETECTION],
                         ids=[row[0] for row in DETECTION])
def test_event_detection(before: list | None, after: list, expected: list[str]) -> None:
    prior = seen(*before) if before is not None else None
    assert pod_events(run(EARS, after, prior)) == expected


@pytest.mark.parametrize("before, after, expected", [row[1:] for row in DETECTION],
                         ids=[row[0] for row in DETECTION])
def test_an_event_no_policy_listens_for_is_none(before: list | None, after: list,
                                                 expected: list[str]) -> None:
    prior = seen(*before) if before is not None else None
    assert pod_events(run([], after, prior)) == []


def test_task_events_fire_once_per_transition() -> None:
    first = run(EARS, [pod("m", "Succeeded", task="master"), pod("w", "Failed", task="worker")])
    assert all_events(first) == ["podSucceeded", "podFailed", "taskCompleted", "taskFailed"]
    assert [e.task for e in first.events if e.event.startswith("task")] == ["master", "worker"]
    assert all_events(run(EARS, [pod("m", "Succeeded", task="master")], first.state)) == []


def test_verdict_change_fires_with_the_new_phase_once() -> None:
    pol = [policy("jobVerdictChanged", action("abortJob"), to="Failed")]
    first = run(pol, [pod("a")])
    assert ran(first) == [] and first.events[-1].detail == "to Running"
    failed = run(pol, [pod("a", "Failed")], first.state)
    assert ran(failed) == [("abortJob", "run")]
    assert ran(run(pol, [pod("a", "Failed")], failed.state)) == []


def test_pending_for_fires_once_after_the_duration() -> None:
    pol = [policy("podPending", action("failJob", reason="Unschedulable", message="pod {pod} pending"), for_=600)]
    early = run(pol, [pod("a", "Pending")], now=T0 + timedelta(seconds=599))
    assert ran(early) == [] and early.wake_at == T0 + timedelta(seconds=600)
    late = run(pol, [pod("a", "Pending")], early.state, now=T0 + timedelta(seconds=601))
    assert ran(late) == [("failJob", "run")]
    assert (late.verdict.phase, late.verdict.reason, late.verdict.message) == ("Failed", "Unschedulable", "pod a pending")
    assert ran(run(pol, [pod("a", "Pending")], late.state, now=T0 + timedelta(hours=1))) == []


def _started_pending(name: str, created: float, started: float) -> dict:
    """A pod still Pending (pulling its image) that the kubelet started at `started`."""
    p = pod(name, "Pending", created=created)
    p["status"]["startTime"] = at(started)
    return p


def test_pending_for_counts_from_the_pods_creation_to_the_second() -> None:
    """Not from its start (a pod pulling its image has one); at exactly D it fires, once per
    pod (a fired timer is kept while the pod stays pending), and the wake time is the
    earliest of each pod's and each duration's own."""
    pol = [policy("podPending", action("ignore")),
           policy("podPending", action("count"), for_=600),
           policy("podPending", action("count"), for_=1200)]
    pending = [_started_pending("a", 0, 300), _started_pending("b", 100, 200)]
    e = run(pol, pending, now=T0 + timedelta(seconds=600))
    assert [(ev.pod, ev.uid, ev.task, ev.detail) for ev in e.events
            if ev.event == "podPending" and ev.detail] == [("a", "uid-a", "worker", "for 600s")]
    assert [(a.action, a.target.task, a.target.pod, a.target.uid) for a in e.actions] == [
        ("count", "worker", "a", "uid-a")]
    assert e.state.fired == {f"podPending>600 {pods.digest('uid-a')}"}
    assert e.wake_at == T0 + timedelta(seconds=700)
    again = run(pol, pending, e.state, now=T0 + timedelta(seconds=650))
    assert again.actions == () and again.state.fired == e.state.fired
    assert run(pol, pending, again.state, now=T0 + timedelta(seconds=660)).actions == ()


def test_a_stopped_pods_fired_timers_stay_fired_when_a_shorter_one_is_added() -> None:
    """A pod we stopped raises no timer, but those it fired stay fired while it is pending:
    a shorter duration added to the rules meanwhile skips none of them."""
    ten = [policy("podPending", action("restartPod"), for_=600)]
    a = [pod("a", "Pending")]
    first = run(ten, a, now=T0 + timedelta(seconds=700))
    token = f"podPending>600 {pods.digest('uid-a')}"
    assert ran(first) == [("restartPod", "run")] and first.state.fired == {token}
    five = [policy("podPending", action("restartPod"), for_=300)] + ten
    again = run(five, a, first.state, now=T0 + timedelta(seconds=710))
    assert again.actions == () and again.state.fired == {token}


def test_plain_pod_pending_is_not_a_timer() -> None:
    pol = [policy("podPending", action("abortJob"), for_=600), policy("podPending", action("ignore"))]
    e = run(pol, [pod("a", "Pending")], now=T0 + timedelta(seconds=700))
    assert [(ev.event, ev.detail, ev.policy) for ev in e.events[:2]] == [
        ("podPending", None, pol[1]["id"]), ("podPending", "for 600s", pol[0]["id"])]


def test_job_running_longer_than_fires_once_and_not_for_finished_jobs() -> None:
    pol = [policy("jobRunningLongerThan", action("terminateJob"), for_=3600)]
    e = run(pol, [pod("a")], now=T0 + timedelta(hours=2))
    assert ran(e) == [("terminateJob", "run")] and e.verdict.phase == "Failed"
    assert ran(run(pol, [pod("a")], e.state, now=T0 + timedelta(hours=3))) == []
    assert ran(run(pol, [pod("a", "Succeeded")], now=T0 + timedelta(hours=2))) == []


def test_a_fired_job_age_timer_is_remembered_while_its_policy_is_out_of_the_rules() -> None:
    """The rules lose the policy and get it back (a plan edited twice): it does not fire again."""
    pol = [policy("jobRunningLongerThan", action("count"), for_=3600)]
    first = run(pol, [pod("a")], now=T0 + timedelta(hours=2))
    assert ran(first) == [("count", "counted")]
    without = run([], [pod("a")], first.state, now=T0 + timedelta(hours=3))
    assert "jobRunningLongerThan>3600" in without.state.fired
    assert ran(run(pol, [pod("a")], without.state, now=T0 + timedelta(hours=4))) == []


def test_the_job_age_is_not_timed_once_a_policy_made_the_verdict_final() -> None:
    """A pod failure fails the job (final) while the rules alone would say Running: the age
    timer is measured against the final verdict, so it neither fires nor is reported."""
    pol = [policy("podFailed", action("failJob")),
           policy("jobRunningLongerThan", action("count"), for_=3600)]
    e = run(pol, [pod("a", "Failed"), pod("b")], now=T0 + timedelta(hours=2),
            verdicts=[verdict("Running", pods_cond("any", "running")), verdict("Pending")])
    assert ran(e) == [("failJob", "run")] and e.state.final is not None
    assert [ev.event for ev in e.events if ev.event == "jobRunningLongerThan"] == []


def test_a_second_job_age_timer_does_not_act_once_the_first_made_the_verdict_final() -> None:
    pol = [policy("jobRunningLongerThan", action("failJob"), for_=3600),
           policy("jobRunningLongerThan", action("count"), for_=7200)]
    e = run(pol, [pod("a")], now=T0 + timedelta(hours=3))
    assert ran(e) == [("failJob", "run")]
    assert [(ev.detail, ev.policy) for ev in e.events if ev.event == "jobRunningLongerThan"] == [
        ("for 3600s", pol[0]["id"]), ("for 7200s", None)]


# -- actions and targets -----------------------------------------------------------------------

@pytest.mark.parametrize("name, target", [
    ("restartPod", ("train", "worker", "a", "uid-a")),
    ("restartTask", ("train", "worker", "a", "uid-a")),
    ("restartJob", ("train", "worker", "a", "uid-a")),
    ("abortJob", ("train", "worker", "a", "uid-a")),
])
def test_actions_carry_targets_and_the_rule(name: str, target: tuple) -> None:
    e = run([policy("podFailed", action(name, reason="Crash", message="{pod} exit {exit_code}"))],
            [pod("a", "Failed")], seen(pod("a")))
    (a,) = e.actions
    assert (a.action, a.status, a.event, a.reason, a.message) == (name, "run", "podFailed", "Crash", "a exit 1")
    assert (a.target.job, a.target.task, a.target.pod, a.target.uid) == target
    assert a.target.namespace == "ml" and a.rule.startswith("t.rules:")


def test_same_inputs_twice_yield_no_new_actions() -> None:
    pol = [policy("podFailed", action("restartPod", max=5))]
    first = run(pol, [pod("a", "Failed"), pod("b")])
    again = run(pol, [pod("a", "Failed"), pod("b")], first.state)
    assert ran(first) == [("restartPod", "run")] and again.actions == () and again.events == ()


def test_pods_we_stop_do_not_raise_deleted_events() -> None:
    pol = [policy("podFailed", action("restartJob")), policy("podDeleted", action("failJob"))]
    first = run(pol, [pod("a", "Failed"), pod("b")])
    assert ran(first) == [("restartJob", "run")]
    gone = run(pol, [], first.state)
    assert gone.actions == () and gone.state.pods == {}


def test_first_match_wins() -> None:
    pol = [policy("podFailed", action("restartPod"), filter=exit_in(137)),
           policy("podFailed", action("restartTask")),
           policy("podFailed", action("failJob"))]
    e = run(pol, [pod("a", "Failed", containers=[terminated("main", 137, "OOMKilled")]), pod("b", "Failed")])
    assert [(a.action, a.target.pod) for a in e.actions] == [("restartPod", "a"), ("restartTask", "b")]


def test_task_scoped_policies_shadow_job_wide_ones() -> None:
    pol = [policy("podFailed", action("failJob")),
           policy("podFailed", action("restartPod"), task="worker")]
    e = run(pol, [pod("w", "Failed", task="worker")])
    assert ran(e) == [("restartPod", "run")]
    e = run(pol, [pod("m", "Failed", task="master")])
    assert ran(e) == [("failJob", "run")]


def test_a_task_scoped_policy_whose_filter_fails_falls_through() -> None:
    pol = [policy("podFailed", action("failJob")),
           policy("podFailed", action("restartPod"), task="worker", filter=exit_in(137))]
    assert ran(run(pol, [pod("w", "Failed", task="worker")])) == [("failJob", "run")]


def test_task_completed_completes_the_job_while_a_service_task_runs() -> None:
    pol = [policy("taskCompleted", action("completeJob"), task="worker")]
    objs = [pod("w", "Succeeded", task="worker"), pod("svc", task="service")]
    e = run(pol, objs)
    assert ran(e) == [("completeJob", "run")]
    assert (e.verdict.phase, e.verdict.final, e.verdict.reason) == ("Succeeded", True, "TaskCompleted")
    assert e.actions[0].target.task == "worker"
    assert run(pol, objs, e.state).verdict.phase == "Succeeded"


def test_task_completed_is_not_a_failed_task() -> None:
    """The Volcano OOMKilled case: the task's only pod failed, so the task did not complete."""
    pol = [policy("taskCompleted", action("completeJob"), task="master")]
    e = run(pol, [pod("m", "Failed", task="master", containers=[terminated("main", 137, "OOMKilled")])])
    assert e.actions == () and e.verdict.phase == "Failed"


def test_eviction_is_handled_as_an_eviction_not_a_crash() -> None:
    pol = [policy("podFailed", action("failJob")), policy("podEvicted", action("restartJob", max=3))]
    e = run(pol, [evicted("a")], seen(pod("a")))
    assert ran(e) == [("restartJob", "run")] and e.events[0].event == "podEvicted"
    crash = run(pol, [pod("a", "Failed")], seen(pod("a")))
    assert ran(crash) == [("failJob", "run")]


def test_an_evicted_pod_is_not_a_failure_unless_a_policy_asks_for_both() -> None:
    plain = run([policy("podFailed", action("restartPod"))], [evicted("a")], seen(pod("a")))
    assert plain.actions == ()
    assert [(ev.event, ev.policy) for ev in plain.events[:1]] == [("podFailed", None)]
    e = run([policy("podFailed", action("restartPod")),
             policy("podFailed", action("restartJob"), evicted=True)], [evicted("a")], seen(pod("a")))
    assert ran(e) == [("restartJob", "run")] and e.actions[0].event == "podFailed"
    assert [(ev.event, ev.policy) for ev in e.events[:1]] == [("podFailed", e.actions[0].policy)]


def test_pod_failed_or_evicted_sees_a_pod_evicted_while_running_when_it_fails() -> None:
    pol = [policy("podFailed", action("count", max=5, then=action("failJob")), evicted=True)]
    preempted = pod("a", conditions=[condition("DisruptionTarget", "PreemptionByScheduler")])
    first = run(pol, [preempted], seen(pod("a")))
    assert first.actions == () and pod_events(first) == []   # nothing listens for an eviction
    then = run(pol, [evicted("a")], first.state)
    assert ran(then) == [("count", "counted")] and pod_events(then) == ["podFailed"]


def test_ignore_counts_nothing_and_stops_matching() -> None:
    pol = [policy("podFailed", action("ignore"), filter=exit_in(143)),
           policy("podFailed", action("restartPod", max=1))]
    sigterm = pod("a", "Failed", containers=[terminated("main", 143)])
    e = run(pol, [sigterm])
    assert e.actions == () and e.events[0].policy == pol[0]["id"] and e.state.budgets == {}


# -- budgets -----------------------------------------------------------------------------------

def evictions(pol: list, n: int) -> list[evaluator.Evaluation]:
    """n successive evictions of distinct pods, each evaluated once with the state so far."""
    out, prior, objs = [], None, []
    for i in range(n):
        objs = [o for o in objs] + [evicted(f"p{i}")]
        e = run(pol, objs, prior)
        out.append(e)
        prior = e.state
    return out


def test_restart_budget_runs_out_into_the_fallback() -> None:
    pol = [policy("podEvicted", action("restartJob", max=3, then=action("failJob")))]
    steps = evictions(pol, 4)
    assert [ran(e) for e in steps] == [[("restartJob", "run")]] * 3 + [[("failJob", "run")]]
    last = steps[-1]
    assert last.verdict.phase == "Failed" and last.verdict.final
    assert last.verdict.reason == "restart budget 3/3 for pod evicted spent"
    assert last.verdict.message.startswith("pod p3 evicted: restart job budget 3/3 spent (t.rules:")
    assert last.actions[0].budget == evaluator.BudgetUse(pol[0]["id"], 3, 3)
    assert last.state.budgets == {pol[0]["id"]: 3}


def test_a_fallback_reason_template_wins_over_the_generated_one() -> None:
    pol = [policy("podEvicted", action("restartJob", max=1, then=action(
        "failJob", reason="TooManyEvictions", message="{budget_used} of {budget_max} used")))]
    last = evictions(pol, 2)[-1]
    assert (last.verdict.reason, last.verdict.message) == ("TooManyEvictions", "1 of 1 used")


def test_spent_budget_without_fallback_does_nothing() -> None:
    pol = [policy("podEvicted", action("restartPod", max=1))]
    steps = evictions(pol, 2)
    assert ran(steps[1]) == [("restartPod", "spent")]
    assert steps[1].actions[0].reason == "restart budget 1/1 for pod evicted spent"


def test_budgets_per_task_count_separately() -> None:
    pol = [policy("podFailed", action("restartPod", max=1, per="task"))]
    e = run(pol, [pod("w0", "Failed", task="worker"), pod("p0", "Failed", task="ps"),
                  pod("w1", "Failed", task="worker")])
    assert [(a.target.pod, a.status) for a in e.actions] == [("p0", "run"), ("w0", "run"), ("w1", "spent")]
    assert e.state.budgets == {f"{pol[0]['id']}[ps]": 1, f"{pol[0]['id']}[worker]": 1}


def test_policies_naming_one_budget_share_it() -> None:
    pol = [policy("podEvicted", action("restartPod", max=2, key="restarts")),
           policy("podFailed", action("restartPod", max=2, key="restarts"))]
    e = run(pol, [evicted("a"), pod("b", "Failed"), pod("c", "Failed")], seen(pod("a"), pod("b"), pod("c")))
    assert [a.status for a in e.actions] == ["run", "run", "spent"]


def test_preemption_consumes_its_own_budget() -> None:
    preempt = {"op": "condition", "type": "DisruptionTarget", "reasons": ["PreemptionByScheduler"], "negate": False}
    pol = [policy("podEvicted", action("restartPod", max=10, key="preemption"), filter=preempt),
           policy("podFailed", action("restartPod", max=1, then=action("failJob")))]
    preempted = [pod(f"p{i}", "Failed", conditions=[condition("DisruptionTarget", "PreemptionByScheduler")])
                 for i in range(3)]
    e = run(pol, preempted)
    assert ran(e) == [("restartPod", "run")] * 3 and e.state.budgets == {"preemption": 3}
    crash = run(pol, [pod("c", "Failed")], e.state)
    assert ran(crash) == [("restartPod", "run")] and crash.state.budgets[pol[1]["id"]] == 1


def test_crashloop_under_on_failure_fails_the_job() -> None:
    pol = [policy("containerRestarted", action("failJob", reason="CrashLoop",
                                               message="{container} restarted {restarts} times"),
                  filter={"op": "restarts", "cmp": ">=", "value": 3, "container": None})]
    loop = lambda n: pod("a", containers=[waiting("main", "CrashLoopBackOff", n, last_exit=1)])
    prior = None
    phases = []
    for n in (1, 2, 3):
        e = run(pol, [loop(n)], prior)
        phases.append(e.verdict.phase)
        prior = e.state
    assert phases == ["Running", "Running", "Failed"]
    assert e.verdict.message == "main restarted 3 times"


# -- delays ------------------------------------------------------------------------------------

DELAYED = [policy("podFailed", action("restartTask", max=2, delay=30), id="retry")]


def test_delayed_action_is_scheduled_then_fires_once_after_its_due_time() -> None:
    first = run(DELAYED, [pod("a", "Failed")])
    (a,) = first.actions
    assert (a.status, a.due) == ("scheduled", NOW + timedelta(seconds=30))
    assert first.wake_at == a.due and first.state.budgets == {}
    waiting_ = run(DELAYED, [pod("a", "Failed")], first.state, now=NOW + timedelta(seconds=10))
    assert waiting_.actions == () and len(waiting_.state.delayed) == 1
    due = run(DELAYED, [pod("a", "Failed")], waiting_.state, now=NOW + timedelta(seconds=31))
    assert ran(due) == [("restartTask", "run")] and due.actions[0].due == a.due
    assert due.state.delayed == () and due.state.budgets == {"retry": 1}
    assert run(DELAYED, [pod("a", "Failed")], due.state, now=NOW + timedelta(minutes=5)).actions == ()


def test_a_delayed_action_fires_on_its_pod_with_its_event_and_container() -> None:
    pol = [policy("podFailed", action("restartPod", message="{event} {task} {pod} {phase} "
                                      "{container} {exit_code}", delay=30), id="later")]
    failed = [pod("a", "Failed", containers=[terminated("main", 3)])]
    first = run(pol, failed)
    due = run(pol, failed, first.state, now=NOW + timedelta(seconds=31))
    assert [(a.action, a.status, a.event, a.message, a.target) for a in due.actions] == [
        ("restartPod", "run", "podFailed", "podFailed worker a Failed main 3",
         Target("train", "ml", "worker", "a", "uid-a"))]


def _named(name: str) -> dict:
    return jp(f"metadata.name == '{name}'")


def test_delayed_actions_each_run_when_due_whatever_the_others_do() -> None:
    """a's waits longer than b's and then its policy leaves the rules: b's runs all the same."""
    pol = [policy("podFailed", action("restartPod", delay=60), id="slow", filter=_named("a")),
           policy("podFailed", action("restartPod", delay=10), id="quick", filter=_named("b"))]
    failed = [pod("a", "Failed"), pod("b", "Failed")]
    first = run(pol, failed)
    assert [d.policy for d in first.state.delayed] == ["slow", "quick"]
    later = run(pol, failed, first.state, now=NOW + timedelta(seconds=20))
    assert [(a.policy, a.status, a.target.pod) for a in later.actions] == [("quick", "run", "b")]
    assert [d.policy for d in later.state.delayed] == ["slow"]
    changed = run(pol[1:], failed, first.state, now=NOW + timedelta(seconds=20))
    assert [(a.policy, a.status, a.target.pod) for a in changed.actions] == [("quick", "run", "b")]
    # b is gone: its action runs on what the state kept of it
    gone = run(pol, failed[:1], first.state, now=NOW + timedelta(seconds=20))
    assert [(a.policy, a.status, a.target) for a in gone.actions] == [
        ("quick", "run", Target("train", "ml", "worker", "b", pods.digest("uid-b")))]


def test_delayed_action_is_cancelled_when_the_pod_recovers() -> None:
    first = run(DELAYED, [pod("a", "Failed")])
    replaced = [pod("a", uid="uid-a2")]
    e = run(DELAYED, replaced, first.state, now=NOW + timedelta(seconds=31))
    assert ran(e) == [("restartTask", "cancelled")] and e.state.delayed == ()


def test_a_restart_since_scheduling_is_not_a_recovery() -> None:
    pol = [policy("containerRestarted", action("failJob", delay=60))]
    first = run(pol, [pod("a", containers=[running("main", 1, last_exit=1)])])
    e = run(pol, [pod("a", containers=[running("main", 2, last_exit=1)])], first.state,
            now=NOW + timedelta(seconds=61))
    assert ran(e) == [("failJob", "run")]
    calm = run(pol, [pod("a", containers=[running("main", 1, last_exit=1)])], first.state,
               now=NOW + timedelta(seconds=61))
    assert ran(calm) == [("failJob", "cancelled")]


def test_delayed_pending_action_is_cancelled_as_soon_as_the_pod_runs() -> None:
    pol = [policy("podPending", action("failJob", delay=600))]
    first = run(pol, [pod("a", "Pending")])
    e = run(pol, [pod("a")], first.state, now=NOW + timedelta(seconds=5))
    assert ran(e) == [("failJob", "cancelled")]


def test_a_final_verdict_cancels_delayed_actions_and_stops_policies() -> None:
    pol = [policy("podFailed", action("restartPod", delay=30), task="worker"),
           policy("podFailed", action("failJob"), task="master")]
    worker = pod("w", "Failed", task="worker", containers=[terminated("main", 1, finished=30)])
    e = run(pol, [worker, pod("m", "Failed", task="master")])
    assert sorted(ran(e)) == [("failJob", "run"), ("restartPod", "scheduled")]
    assert e.state.delayed == ()
    later = run(pol, [worker, pod("m", "Failed", task="master"),
                      pod("w2", "Failed", task="worker")], e.state)
    assert later.actions == () and later.verdict.final


def test_state_prunes_pods_that_are_gone() -> None:
    first = run(EARS, [pod("a", "Succeeded"), pod("b")])
    assert len(first.state.pods) == 2
    assert set(run(EARS, [pod("b")], first.state).state.pods) == {pods.digest("uid-b")}


def test_explain_policies() -> None:
    pol = [policy("podFailed", action("restartPod"), filter=exit_in(137)),
           policy("podFailed", action("failJob")), policy("podEvicted", action("restartJob"))]
    k = load_kind(RULES, pol)
    e = evaluator.evaluate(k, job(), [pod("a", "Failed")], None, NOW, explain=True)
    found = {f.name: (f.matched, f.why) for f in e.explanation if f.what == "policy"}
    assert found[pol[0]["id"]] == (False, "on pod failed exit 137 -> restart pod: pod a: filter false: exit 137")
    assert found[pol[1]["id"]] == (True, "on pod failed -> fail job: pod a: matched")
    assert found[pol[2]["id"]] == (False, "on pod evicted -> restart job: no pod evicted event")


def test_reason_filter_on_gone_pods_is_false_and_task_filter_works() -> None:
    pol = [policy("podDeleted", action("restartPod"), filter=reason_in("OOMKilled")),
           policy("podDeleted", action("restartTask"), filter={"op": "task", "values": ["w"], "negate": False})]
    e = run(pol, [], seen(pod("a", task="w")))
    assert ran(e) == [("restartTask", "run")] and e.actions[0].target.task == "w"
    assert e.actions[0].target.pod is None


# action -> the verdict it leaves, whether that verdict is final, and which pods it stops (their
# changes are ours, not events, and they count in no verdict)
CONSEQUENCES = [
    ("failJob", "Failed", True, set()),
    ("completeJob", "Succeeded", True, set()),
    ("terminateJob", "Failed", True, {"a", "b", "c"}),
    ("abortJob", "Pending", False, {"a", "b", "c"}),
    ("restartJob", "Restarting", False, {"a", "b", "c"}),
    ("restartTask", "Restarting", False, {"a", "b"}),
    ("restartPod", "Restarting", False, {"a"}),
    ("failTask", "Running", False, {"a", "b"}),
    ("ignore", "Failed", True, set()),   # the rules' Failed: terminal verdicts hold
]


@pytest.mark.parametrize("name, phase, final, stopped", CONSEQUENCES,
                         ids=[row[0] for row in CONSEQUENCES])
def test_action_consequences(name: str, phase: str, final: bool, stopped: set[str]) -> None:
    objs = [pod("a", "Failed", task="w"), pod("b", task="w"), pod("c", task="ps")]
    pol = [policy("podFailed", action(name)), policy("podDeleted", action("ignore"))]
    e = run(pol, objs, seen(pod("a", task="w"), pod("b", task="w"), pod("c", task="ps")))
    assert (e.verdict.phase, e.verdict.final) == (phase, final)
    ours = {p["metadata"]["name"] for p in objs if e.state.pods[pods.digest(p["metadata"]["uid"])].ours}
    assert ours == stopped
    assert ran(e) == ([] if name == "ignore" else [(name, "run")])
    assert run(pol, objs, e.state).verdict == e.verdict  # holds
    later = run(pol, [], e.state)
    deleted = sorted(ev.pod or ev.uid for ev in later.events if ev.event == "podDeleted")
    assert len(deleted) == len({"b", "c"} - stopped)  # only pods nobody asked to stop count as deleted


# -- counting without acting -------------------------------------------------------------------

def fail_replaced(pol: list, n: int, **kw: Any) -> list[evaluator.Evaluation]:
    """The executor pod fails n times, each time replaced by a new pod of the same name."""
    out, prior = [], None
    for i in range(n):
        failed = pod("exec-0", "Failed", task="executor", uid=f"uid-exec-0-{i}")
        e = run(pol, [failed], prior, now=NOW + timedelta(minutes=i), **kw)
        out.append(e)
        prior = e.state
    return out


def test_a_count_budget_acts_only_once_exceeded() -> None:
    pol = [policy("podFailed", action("count", max=2, then=action("failJob",
                  reason="TooManyExecutorFailures")), task="executor", id="executors")]
    runs = fail_replaced(pol, 3, verdicts=[verdict("Running")])
    assert [ran(e) for e in runs] == [[("count", "counted")], [("count", "counted")],
                                      [("failJob", "run")]]
    assert [e.actions[0].budget.used for e in runs] == [1, 2, 2]
    assert [e.verdict.phase for e in runs] == ["Running", "Running", "Failed"]
    assert runs[2].verdict.reason == "TooManyExecutorFailures"


@pytest.mark.parametrize("per, keys", [
    ("job", ["c"]), ("task", ["c[executor]"]), ("pod", ["c[exec-0]"]),
])
def test_count_budgets_per_job_task_and_pod(per: str, keys: list[str]) -> None:
    pol = [policy("podFailed", action("count", max=5, per=per, key="c", then=action("failJob")))]
    [e] = fail_replaced(pol, 1)
    assert list(e.state.budgets) == keys


def test_per_pod_budgets_are_kept_apart() -> None:
    pol = [policy("podFailed", action("restartPod", max=1, per="pod", then=action("failJob")))]
    e = run(pol, [pod("a", "Failed"), pod("b", "Failed")])
    assert ran(e) == [("restartPod", "run"), ("restartPod", "run")]


@pytest.mark.parametrize("limit, outcome", [
    (0, [("failJob", "run")]),              # backoffLimit 0: the first counted failure fails it
    (1, [("count", "counted")]),
])
def test_a_budget_read_from_the_job(limit: int, outcome: list) -> None:
    budget = {"expr": "spec.backoffLimit", "span": {"path": "t.rules", "line": 1, "column": 1,
                                                    "endLine": 1, "endColumn": 2}}
    pol = [policy("podFailed", action("count", max=1, then=action("failJob")))]
    pol[0]["action"]["budget"]["max"] = budget
    k = load_kind(RULES, pol)
    e = evaluator.evaluate(k, job(spec={"backoffLimit": limit}), [pod("a", "Failed")], None, NOW)
    assert ran(e) == outcome and e.actions[0].budget.max == limit


def test_an_unreadable_budget_counts_as_spent_and_says_so() -> None:
    pol = [policy("podFailed", action("count", max=1, then=action("failJob")))]
    pol[0]["action"]["budget"]["max"] = {"expr": "spec.backoffLimit", "span": {
        "path": "t.rules", "line": 3, "column": 9, "endLine": 3, "endColumn": 10}}
    e = evaluator.evaluate(load_kind(RULES, pol), job(), [pod("a", "Failed")], None, NOW)
    assert ran(e) == [("failJob", "run")]
    assert e.problems == ("t.rules:3:9: <<spec.backoffLimit>>: None is not a budget (a whole "
                          "number, 0 or more); the budget counts as spent",)


def test_delays_that_double_with_each_use_up_to_a_cap() -> None:
    act = action("restartPod", max=9, delay=10)
    act.update(doubling=True, delayCap=35)
    pol = [policy("podFailed", act, id="backoff")]
    dues, prior = [], None
    for i in range(4):
        failed = pod("a", "Failed", uid=f"uid-a-{i}")
        now = NOW + timedelta(minutes=10 * i)
        scheduled = run(pol, [failed], prior, now=now)
        [waiting] = [a for a in scheduled.actions if a.status == "scheduled"]
        dues.append((waiting.due - now).total_seconds())
        fired = run(pol, [failed], scheduled.state, now=waiting.due)
        prior = run(pol, [], fired.state, now=waiting.due + timedelta(seconds=1)).state
    assert dues == [10, 20, 35, 35]


# -- failing one task ----------------------------------------------------------------------------

def test_fail_task_fails_one_task_and_lets_the_others_go_on() -> None:
    verdicts = [verdict("Failed", {"op": "taskCount", "state": "failed", "cmp": ">",
                                   "value": [{"expr": "`1`", "span": {
                                       "path": "t", "line": 1, "column": 1, "endLine": 1,
                                       "endColumn": 2}}]}, reason="MaxFailedIndexesExceeded"),
                verdict("Running", pods_cond("any", "running")), verdict("Pending")]
    pol = [policy("podFailed", action("failTask"), filter=exit_in(42), id="fail-index")]
    objs = [pod("i0", "Failed", task="0", containers=[terminated("main", 42)]),
            pod("i1", task="1"), pod("i2", task="2")]
    e = run(pol, objs, verdicts=verdicts)
    assert ran(e) == [("failTask", "run")] and e.actions[0].target.task == "0"
    assert e.state.failed_tasks == {"0"} and e.verdict.phase == "Running"
    # the index stays failed whatever its pods do; a second failed index fails the job
    objs[0] = pod("i0", "Running", task="0", uid="uid-i0-b")
    objs[1] = pod("i1", "Failed", task="1", containers=[terminated("main", 42)])
    e = run(pol, objs, e.state, verdicts=verdicts)
    assert e.state.failed_tasks == {"0", "1"}
    assert (e.verdict.phase, e.verdict.reason) == ("Failed", "MaxFailedIndexesExceeded")


def test_a_spent_budget_does_not_wait_out_its_delay() -> None:
    """The fallback of a budget already spent comes at once: a doubling delay of 80 s before
    failing the job would only show a restart that will never happen."""
    act = action("restartPod", max=2, delay=10, then=action("failJob"))
    act.update(doubling=True)
    pol = [policy("podFailed", act, id="backoff")]
    spent = state.State(verdict="Running", budgets={"backoff": 2})
    e = run(pol, [pod("a", "Failed")], spent)
    assert ran(e) == [("failJob", "run")] and e.verdict.phase == "Failed"
    assert e.wake_at is None or e.wake_at > NOW   # nothing scheduled for later
    # with a use left, the delay is waited out as before
    e = run(pol, [pod("a", "Failed")], state.State(verdict="Running", budgets={"backoff": 1}))
    assert ran(e) == [("restartPod", "scheduled")]


# -- audit ---------------------------------------------------------------------------------------

def audited(p: dict) -> dict:
    return dict(p, audit=True)


def test_a_policy_in_audit_records_what_it_would_do_and_does_nothing() -> None:
    pol = [audited(policy("podFailed", action("restartJob", max=2, then=action("failJob")),
                          id="retry"))]
    failed = pod("a", "Failed", containers=[terminated("main", 1)])
    e = run(pol, [failed])
    assert ran(e) == [("restartJob", "audited")]
    assert e.actions[0].budget is not None and e.actions[0].budget.key == "audit/retry"
    # the verdict is the rules' own (a failed pod fails the job): no restart under way
    assert e.verdict.phase == "Failed" and e.state.restarting is None
    # nothing spent of the budget the enforced policy will draw on
    assert e.state.budgets == {"audit/retry": 1}


def test_a_policy_in_audit_falls_back_in_audit_too() -> None:
    pol = [audited(policy("podFailed", action("restartPod", max=1, then=action("failJob")),
                          id="retry"))]
    spent = state.State(verdict="Running", budgets={"audit/retry": 1, "retry": 0})
    e = run(pol, [pod("a", "Failed")], spent)
    assert ran(e) == [("failJob", "audited")]
    assert e.state.final is None or e.state.final.by != "policy"   # not the policy's verdict


def test_a_delayed_action_in_audit_is_audited_when_due_and_holds_nothing_meanwhile() -> None:
    pol = [audited(policy("podFailed", action("restartPod", max=3, delay=30), id="later"))]
    verdicts = [verdict("Restarting", pods_cond("any", "failed")), *RULES]
    first = run(pol, [pod("a", "Failed")], verdicts=verdicts)
    assert ran(first) == [("restartPod", "scheduled")]
    assert first.state.restarting is None and first.verdict.phase == "Restarting"
    due = run(pol, [pod("a", "Failed")], first.state, now=first.actions[0].due,
              verdicts=verdicts)
    assert ran(due) == [("restartPod", "audited")]


def test_the_same_policy_enforced_acts() -> None:
    """The mirror of the audit tests: without `audit` the same history runs the action."""
    pol = [policy("podFailed", action("restartJob", max=2, then=action("failJob")), id="retry")]
    e = run(pol, [pod("a", "Failed", containers=[terminated("main", 1)])])
    assert ran(e) == [("restartJob", "run")] and e.state.budgets == {"retry": 1}
    assert e.verdict.phase == "Restarting" and e.state.restarting is not None


# -- a job its own status says is over -----------------------------------------------------------

def test_a_terminal_verdict_from_the_jobs_own_status_takes_no_action() -> None:
    """The operator decided (a FailureTarget it set): that verdict holds with its message, and
    the failed pod it may no longer name raises no action of ours."""
    from builders import jp

    said = "status.conditions[?type=='FailureTarget'] | [0]"
    verdicts = [verdict("Failed", jp(f"{said}.status == 'True'"), reason="Target"), *RULES]
    pol = [policy("podFailed", action("failJob", reason="Ours"), id="fail")]
    k = load_kind(verdicts, pol)
    target = job(status={"conditions": [{"type": "FailureTarget", "status": "True"}]})
    e = evaluator.evaluate(k, target, [pod("a", "Failed")], None, NOW)
    assert (e.verdict.phase, e.verdict.reason, e.verdict.final) == ("Failed", "Target", True)
    assert ran(e) == [] and [ev.event for ev in e.events if ev.event == "podFailed"]
    # without it, the policy decides
    e = evaluator.evaluate(k, job(), [pod("a", "Failed")], None, NOW)
    assert ran(e) == [("failJob", "run")] and e.verdict.reason == "Ours"


def test_a_terminal_verdict_read_from_pods_still_comes_after_the_policies() -> None:
    """`failed when any pod failed` is the rules' own reading of pods: a restart takes it first."""
    pol = [policy("podFailed", action("restartPod", max=1), id="retry")]
    e = run(pol, [pod("a", "Failed")])
    assert ran(e) == [("restartPod", "run")] and e.verdict.phase == "Restarting"


# -- recovery of a delayed action, as docs/evaluation.md ("Delays") words it -------------------

def _side(state_: dict) -> dict:
    return {"name": "side", "restartCount": 0, "ready": False, "state": state_}


RUNNING_MAIN = running("main")
RECOVERY = [
    # at the due time the pod (or a replacement of the same name) is Running or Succeeded ...
    ("replacement running", [pod("a", uid="uid-a2")], "cancelled"),
    ("replacement succeeded", [pod("a", "Succeeded", uid="uid-a2")], "cancelled"),
    ("replacement pending", [pod("a", "Pending", uid="uid-a2")], "run"),
    ("still failed", [pod("a", "Failed")], "run"),
    ("gone", [], "run"),
    ("still failed beside a healthy pod", [pod("a", "Failed"), pod("b")], "run"),
    # ... not evicted or deleting ...
    ("replacement running but deleting", [pod("a", uid="uid-a2", deleting=100)], "run"),
    ("replacement running but disrupted", [pod("a", uid="uid-a2", conditions=[
        condition("DisruptionTarget", "PreemptionByScheduler")])], "run"),
    # ... no counted container waiting on an error or exited non-zero
    ("a container in crash loop", [pod("a", uid="uid-a2", containers=[RUNNING_MAIN, waiting("side")])], "run"),
    ("a container still being created", [pod("a", uid="uid-a2", containers=[
        RUNNING_MAIN, waiting("side", "ContainerCreating")])], "cancelled"),
    ("a container still initializing", [pod("a", uid="uid-a2", containers=[
        RUNNING_MAIN, waiting("side", "PodInitializing")])], "cancelled"),
    ("a container waiting for no reason given", [pod("a", uid="uid-a2", containers=[
        RUNNING_MAIN, _side({"waiting": {}})])], "cancelled"),
    ("a container exited non-zero", [pod("a", uid="uid-a2", containers=[
        RUNNING_MAIN, terminated("side", 1)])], "run"),
    ("a container exited zero", [pod("a", uid="uid-a2", containers=[
        RUNNING_MAIN, terminated("side", 0)])], "cancelled"),
]


@pytest.mark.parametrize("at_due, expected", [row[1:] for row in RECOVERY], ids=[row[0] for row in RECOVERY])
def test_a_delayed_failure_action_is_cancelled_only_when_the_pod_recovered(at_due: list, expected: str) -> None:
    first = run(DELAYED, [pod("a", "Failed")])
    [scheduled] = first.actions
    # exactly at the due time: it is decided now, fired or cancelled, not kept waiting
    e = run(DELAYED, at_due, first.state, now=scheduled.due)
    assert ran(e) == [("restartTask", expected)] and e.state.delayed == ()


def test_a_delayed_failure_action_waits_however_the_pod_does_before_its_due_time() -> None:
    first = run(DELAYED, [pod("a", "Failed")])
    e = run(DELAYED, [pod("a", uid="uid-a2")], first.state, now=first.actions[0].due - timedelta(seconds=1))
    assert e.actions == () and len(e.state.delayed) == 1


def test_a_delayed_pending_action_waits_while_the_same_pod_is_pending() -> None:
    pol = [policy("podPending", action("failJob", delay=600))]
    first = run(pol, [pod("a", "Pending")])
    assert run(pol, [pod("a", "Pending")], first.state, now=NOW + timedelta(seconds=5)).actions == ()
    # no pod at all, or a new pending incarnation of that name (scheduled afresh): the pending
    # pod is gone
    e = run(pol, [], first.state, now=NOW + timedelta(seconds=5))
    assert ran(e) == [("failJob", "cancelled")]
    e = run(pol, [pod("a", "Pending", uid="uid-a2")], first.state, now=NOW + timedelta(seconds=5))
    assert ran(e) == [("failJob", "cancelled"), ("failJob", "scheduled")]


def test_a_delayed_task_action_is_cancelled_when_the_task_is_no_longer_failed() -> None:
    verdicts = [verdict("Failed", {"op": "taskCount", "state": "failed", "cmp": ">",
                                   "value": [{"expr": "`5`", "span": {
                                       "path": "t", "line": 1, "column": 1, "endLine": 1,
                                       "endColumn": 2}}]}),
                verdict("Running", pods_cond("any", "running")), verdict("Pending")]
    pol = [policy("taskFailed", action("restartTask", delay=30), id="later")]
    first = run(pol, [pod("a", "Failed")], verdicts=verdicts)
    [scheduled] = first.actions
    assert (scheduled.status, scheduled.target.task) == ("scheduled", "worker")
    still = run(pol, [pod("a", "Failed")], first.state, now=scheduled.due, verdicts=verdicts)
    assert ran(still) == [("restartTask", "run")]
    recovered = run(pol, [pod("a", uid="uid-a2")], first.state, now=scheduled.due, verdicts=verdicts)
    assert ran(recovered) == [("restartTask", "cancelled")]


# -- what an action says without a reason or message of its own --------------------------------

SAYS = [
    ("podFailed", [pod("a", "Failed")], "PodFailed", "pod a failed: fail job (t.rules:{line}:5)"),
    ("containerRestarted", [pod("a", containers=[running("main", restarts=1, last_exit=1)])],
     "ContainerRestarted", "pod a: container restarted: fail job (t.rules:{line}:5)"),
    ("taskFailed", [pod("a", "Failed")], "TaskFailed", "task worker failed: fail job (t.rules:{line}:5)"),
]


@pytest.mark.parametrize("event, objects, reason, message", SAYS,
                         ids=[r[0] for r in SAYS])
def test_a_terminal_action_names_what_happened(event: str, objects: list, reason: str, message: str) -> None:
    pol = policy(event, action("failJob"))
    e = run([pol], objects, verdicts=[verdict("Running", pods_cond("any", "running")), verdict("Pending")])
    assert (e.verdict.phase, e.verdict.reason) == ("Failed", reason)
    assert e.verdict.message == message.format(line=pol["span"]["line"])


def test_a_restart_names_what_happened_and_when_it_is_due() -> None:
    pol = policy("podFailed", action("restartPod", delay=30))
    e = run([pol], [pod("a", "Failed")], verdicts=[verdict("Running", pods_cond("any", "running")),
                                                   verdict("Pending")])
    assert (e.verdict.phase, e.verdict.reason) == ("Restarting", "PodFailed")
    assert e.verdict.message == (f"pod a failed: restart pod at 2024-05-01T12:05:30Z "
                                 f"(t.rules:{pol['span']['line']}:5)")
    e = run([policy("podFailed", action("restartPod"))], [pod("a", "Failed")],
            verdicts=[verdict("Running", pods_cond("any", "running")), verdict("Pending")])
    assert e.verdict.message.startswith("pod a failed: restart pod (t.rules:")


# -- budgets read from the job, and delays -----------------------------------------------------

def _read_budget(act: dict) -> dict:
    act["budget"]["max"] = {"expr": "spec.backoffLimit", "span": {
        "path": "t.rules", "line": 3, "column": 9, "endLine": 3, "endColumn": 10}}
    return act


@pytest.mark.parametrize("limit, outcome", [
    (0, [("failJob", "run")]), (1, [("count", "counted")]), (2.0, [("count", "counted")]),
])
def test_a_budget_read_from_the_job_takes_any_whole_number_from_0(limit: float, outcome: list) -> None:
    pol = [policy("podFailed", _read_budget(action("count", max=1, then=action("failJob"))))]
    e = evaluator.evaluate(load_kind(RULES, pol), job(spec={"backoffLimit": limit}), [pod("a", "Failed")], None, NOW)
    assert ran(e) == outcome and e.problems == ()


@pytest.mark.parametrize("limit", [-1, 2.5, True, "3"])
def test_a_budget_read_from_the_job_that_is_no_whole_number_from_0_is_spent(limit: object) -> None:
    pol = [policy("podFailed", _read_budget(action("count", max=1, then=action("failJob"))))]
    e = evaluator.evaluate(load_kind(RULES, pol), job(spec={"backoffLimit": limit}), [pod("a", "Failed")], None, NOW)
    assert ran(e) == [("failJob", "run")]
    assert e.problems == (f"t.rules:3:9: <<spec.backoffLimit>>: {limit!r} is not a budget (a whole "
                          "number, 0 or more); the budget counts as spent",)


def test_an_unreadable_budget_of_a_delayed_action_falls_back_at_once() -> None:
    pol = [policy("podFailed", _read_budget(action("restartPod", max=1, delay=30, then=action("failJob"))))]
    e = evaluator.evaluate(load_kind(RULES, pol), job(spec={"backoffLimit": -1}), [pod("a", "Failed")], None, NOW)
    assert ran(e) == [("failJob", "run")] and len(e.problems) == 1


def test_the_last_use_of_a_budget_waits_out_its_delay() -> None:
    pol = [policy("podFailed", action("restartPod", max=1, delay=10, then=action("failJob")), id="once")]
    e = run(pol, [pod("a", "Failed")])
    assert ran(e) == [("restartPod", "scheduled")]


def _dues(pol: list, uses: dict[str, int], failed: list[str]) -> list[float]:
    e = run(pol, [pod(n, "Failed") for n in failed], state.State(verdict="Running", budgets=uses))
    return [(a.due - NOW).total_seconds() for a in e.actions if a.status == "scheduled"]


def test_a_delay_doubles_only_with_doubling() -> None:
    plain = [policy("podFailed", action("restartPod", max=99, delay=10), id="b")]
    assert _dues(plain, {"b": 3}, ["a"]) == [10]
    act = action("restartPod", max=99, delay=10)
    act.update(doubling=True)
    assert _dues([policy("podFailed", act, id="b")], {"b": 3}, ["a"]) == [80]


def test_a_doubling_delay_counts_the_uses_of_its_own_pod() -> None:
    act = action("restartPod", max=99, per="pod", delay=10)
    act.update(doubling=True)
    pol = [policy("podFailed", act, id="b")]
    assert _dues(pol, {"b[a]": 2}, ["a", "c"]) == [40, 10]


@pytest.mark.parametrize("delay, uses, due", [
    (1, 20, 2.0 ** 20),
    (1, 45, 100 * 365 * 86400),      # a due time past year 9999 could not be computed nor stored
    (3600, 40, 100 * 365 * 86400),   # nor could a delay past timedelta's 999,999,999 days
])
def test_a_doubling_delay_without_a_cap_stops_at_100_years(delay: int, uses: int, due: float) -> None:
    act = action("restartPod", max=99, delay=delay)
    act.update(doubling=True)
    e = run([policy("podFailed", act, id="b")], [pod("a", "Failed")], state.State(verdict="Running", budgets={"b": uses}))
    [scheduled] = e.actions
    assert (scheduled.due - NOW).total_seconds() == due
    again = run([policy("podFailed", act, id="b")], [pod("a", "Failed")], e.state)
    assert again.state.delayed == e.state.delayed   # and the state writes it and reads it back


def test_a_delayed_action_says_what_its_pod_did_when_scheduled_and_when_it_fires() -> None:
    pol = [policy("podFailed", action("failJob", reason="Retried{task}",
                                      message="{pod}: {container} exited {exit_code} ({container_reason}), "
                                              "{restarts} restarts, {pod_reason}", delay=30))]
    failed = pod("a", "Failed", reason="OOMKilled", containers=[terminated("main", 137, "OOMKilled", restarts=2)])
    quiet = [verdict("Running", pods_cond("any", "running")), verdict("Pending")]
    first = run(pol, [failed], verdicts=quiet)
    [scheduled] = first.actions
    said = ("Retriedworker", "a: main exited 137 (OOMKilled), 2 restarts, OOMKilled")
    assert (scheduled.reason, scheduled.message, scheduled.target.pod) == (*said, "a")
    # the pod is gone when it fires: what it did is remembered with the delayed action
    fired = run(pol, [], first.state, now=scheduled.due, verdicts=quiet)
    [done] = fired.actions
    assert (done.status, done.reason, done.message) == ("run", *said)
    assert (fired.verdict.reason, fired.verdict.message) == said


def test_each_pod_is_scheduled_once() -> None:
    pol = [policy("podFailed", action("restartPod", delay=30), id="one")]
    failed = [pod("a", "Failed"), pod("b", "Failed")]
    first = run(pol, failed)
    assert sorted((a.policy, a.target.pod, a.status) for a in first.actions) == [
        ("one", "a", "scheduled"), ("one", "b", "scheduled")]
    assert len(first.state.delayed) == 2
    # evaluated again before they are due: nothing new
    again = run(pol, failed, first.state, now=NOW + timedelta(seconds=10))
    assert again.actions == () and again.state.delayed == first.state.delayed


# -- actions the controller gave up (state.released), as docs/evaluation.md words it ------------

GIVE_UP = [policy("podFailed", action("restartPod", max=3, then=action("failJob")), id="retry")]


def _given_up(pol: list, objects: list, released: list) -> tuple[evaluator.Evaluation, evaluator.Evaluation]:
    first = run(pol, objects)
    prior = replace(first.state, released=tuple(released))
    return first, run(pol, objects, prior, now=NOW + timedelta(seconds=5))


def _digest(e: evaluator.Evaluation) -> str:
    """The pod the evaluation's action holds (ours)."""
    return next(d for d, r in e.state.pods.items() if r.ours)


def test_a_restart_given_up_runs_the_fallback_saying_why() -> None:
    first = run(GIVE_UP, [pod("a", "Failed")])
    assert ran(first) == [("restartPod", "run")] and first.verdict.phase == "Restarting"
    d = _digest(first)
    _, e = _given_up(GIVE_UP, [pod("a", "Failed")],
                     [state.Released("retry", "restartPod", "worker", "a", d, (d,), "refused: forbidden")])
    assert ran(e) == [("failJob", "run")]
    line = GIVE_UP[0]["span"]["line"]
    assert (e.verdict.phase, e.verdict.reason, e.verdict.message) == (
        "Failed", "PodFailed",
        f"pod a failed: restart pod given up (refused: forbidden): fail job (t.rules:{line}:5)")
    assert e.state.restarting is None and e.state.released == ()


def test_a_fallback_is_found_down_the_chain_of_fallbacks() -> None:
    pol = [policy("podFailed", action("restartPod", max=1, then=action("restartTask", max=1, then=action("failJob"))),
                  id="chain")]
    first = run(pol, [pod("a", "Failed")])
    d = _digest(first)
    _, e = _given_up(pol, [pod("a", "Failed")], [state.Released("chain", "restartTask", "worker", "a", d, (d,), "x")])
    assert ran(e) == [("failJob", "run")]
    _, e = _given_up(pol, [pod("a", "Failed")], [state.Released("chain", "restartPod", "worker", "a", d, (d,), "x")])
    assert ran(e) == [("restartTask", "run")]


def test_a_restart_given_up_lets_go_of_its_pods_and_its_restart() -> None:
    first = run(GIVE_UP, [pod("a", "Failed"), pod("b")])
    d = _digest(first)
    assert first.state.restarting is not None and first.state.pods[d].ours
    no_fallback = [policy("podFailed", action("restartPod", max=3), id="retry")]
    _, e = _given_up(no_fallback, [pod("a", "Failed"), pod("b")],
                     [state.Released("retry", "restartPod", "worker", "a", d, (d,), "x")])
    assert e.actions == () and e.state.restarting is None and not e.state.pods[d].ours
    assert e.verdict.phase == "Failed"   # the rules decide again: a pod failed


def test_every_action_given_up_at_once_lets_go_of_everything_and_falls_back_on_nothing() -> None:
    first = run(GIVE_UP, [pod("a", "Failed")])
    d = _digest(first)
    _, e = _given_up(GIVE_UP, [pod("a", "Failed")], [state.Released(None)])
    assert e.actions == () and e.state.restarting is None and not e.state.pods[d].ours


def test_an_action_given_up_that_held_nothing_lets_go_of_nothing_else() -> None:
    first = run(GIVE_UP, [pod("a", "Failed")])
    d = _digest(first)
    _, e = _given_up(GIVE_UP, [pod("a", "Failed")], [state.Released("other", "restartPod", "worker", "z", "zz", ("zz",), "x")])
    assert e.state.pods[d].ours and e.state.restarting == first.state.restarting and e.actions == ()


def test_a_terminal_verdict_of_an_action_given_up_is_over() -> None:
    pol = [policy("podFailed", action("failJob"), id="fail")]
    quiet = [verdict("Running", pods_cond("any", "running")), verdict("Pending")]
    first = run(pol, [pod("a", "Failed"), pod("b")], verdicts=quiet)
    assert first.verdict.final and first.state.final is not None
    prior = replace(first.state, released=(state.Released("fail", "failJob", "worker", "a", None, (), "x"),))
    e = run(pol, [pod("a", "Failed"), pod("b")], prior, verdicts=quiet)
    assert e.state.final is None and e.verdict.phase == "Running"
    # given up by another policy: the verdict holds
    prior = replace(first.state, released=(state.Released("other", "failJob", None, None, None, (), "x"),))
    assert run(pol, [pod("a", "Failed"), pod("b")], prior, verdicts=quiet).verdict.phase == "Failed"


# -- every field of the actions reported, as docs/evaluation.md lists them ------------------------

def _rule(p: dict) -> str:
    return f"t.rules:{p['span']['line']}:5"


def test_a_cancelled_action_names_its_policy_event_rule_target_and_due() -> None:
    first = run(DELAYED, [pod("a", "Failed")])
    [scheduled] = first.actions
    e = run(DELAYED, [pod("a", uid="uid-a2")], first.state, now=scheduled.due)
    [cancelled] = e.actions
    assert cancelled == evaluator.Action("restartTask", "cancelled", "retry", "podFailed", _rule(DELAYED[0]),
                                         None, None, evaluator.Target("train", "ml", "worker", "a", pods.digest("uid-a")),
                                         scheduled.due)


def test_a_fired_delayed_action_keeps_its_due_and_names_its_pod() -> None:
    first = run(DELAYED, [pod("a", "Failed")])
    [scheduled] = first.actions
    e = run(DELAYED, [pod("a", "Failed")], first.state, now=scheduled.due + timedelta(seconds=5))
    [fired] = e.actions
    assert (fired.status, fired.due, fired.target, fired.event) == ("run", scheduled.due, scheduled.target, "podFailed")


def test_a_spent_action_says_so_with_its_budget() -> None:
    pol = [policy("podFailed", action("restartPod", max=1), id="once")]
    e = run(pol, [pod("a", "Failed")], state.State(verdict="Running", budgets={"once": 1}))
    [spent] = e.actions
    assert spent == evaluator.Action("restartPod", "spent", "once", "podFailed", _rule(pol[0]),
                                     "restart budget 1/1 for pod failed spent", None,
                                     evaluator.Target("train", "ml", "worker", "a", "uid-a"), None,
                                     evaluator.BudgetUse("once", 1, 1))


def test_an_action_reads_its_budget_in_its_text() -> None:
    pol = [policy("podFailed", action("restartPod", max=3, reason="Try{budget_used}", message="{budget_used} of {budget_max}"),
                  id="b")]
    e = run(pol, [pod("a", "Failed")], state.State(verdict="Running", budgets={"b": 1}))
    [a] = e.actions
    assert (a.reason, a.message, a.budget) == ("Try2", "2 of 3", evaluator.BudgetUse("b", 2, 3))
    spent = [policy("podFailed", action("restartPod", max=1, then=action("failJob", message="{budget_used}/{budget_max} {task}")),
                    id="s")]
    e = run(spent, [pod("a", "Failed")], state.State(verdict="Running", budgets={"s": 1}))
    assert [(a.action, a.message) for a in e.actions] == [("failJob", "1/1 worker")]


def test_an_audited_delayed_action_says_what_it_would_have_done() -> None:
    pol = [audited(policy("podFailed", action("restartPod", reason="R {pod}", message="M {exit_code}", delay=30), id="later"))]
    verdicts = [verdict("Restarting", pods_cond("any", "failed")), *RULES]
    first = run(pol, [pod("a", "Failed")], verdicts=verdicts)
    [scheduled] = first.actions
    e = run(pol, [pod("a", "Failed")], first.state, now=scheduled.due, verdicts=verdicts)
    [done] = e.actions
    assert (done.status, done.policy, done.event, done.rule, done.reason, done.message, done.due) == (
        "audited", "later", "podFailed", _rule(pol[0]), "R a", "M 1", scheduled.due)


def test_a_fallback_of_an_action_given_up_reads_its_pod() -> None:
    pol = [policy("podFailed", action("restartPod", max=3, then=action("failJob", reason="Gave{task}",
                                                                          message="{pod} exit {exit_code} on {event}")),
                  id="retry")]
    quiet = [verdict("Running", pods_cond("any", "running")), verdict("Pending")]
    first = run(pol, [pod("a", "Failed"), pod("b")], verdicts=quiet)
    d = _digest(first)
    prior = replace(first.state, released=(state.Released("retry", "restartPod", "worker", "a", d, (d,), "x"),))
    e = run(pol, [pod("a", "Failed"), pod("b")], prior, verdicts=quiet)
    [fell_back] = e.actions
    assert (fell_back.action, fell_back.reason, fell_back.message) == ("failJob", "Gaveworker", "a exit 1 on podFailed")
    assert fell_back.target == evaluator.Target("train", "ml", "worker", "a", d)


# -- what the mutation run found unpinned (scripts/mutation.sh evaluator) ---------------------------

QUIET = [verdict("Running", pods_cond("any", "running")), verdict("Pending")]


def test_a_per_pod_budget_of_pods_gone_counts_each_pod_apart() -> None:
    """A gone pod has no name left, only its digest: its `per pod` budget is keyed by that."""
    pol = [policy("podDeleted", action("restartPod", max=1, per="pod"), id="gone")]
    prior = seen(pod("a"), pod("b"))
    e = run(pol, [], prior, verdicts=QUIET)
    assert ran(e) == [("restartPod", "run"), ("restartPod", "run")]
    assert e.state.budgets == {f"gone[{digest}]": 1 for digest in prior.pods} and len(prior.pods) == 2


def test_an_audited_fallback_draws_on_an_audit_budget_of_its_own() -> None:
    pol = [audited(policy("podFailed", action("restartPod", max=1, key="r",
                                              then=action("failJob", max=1, key="f")), id="p"))]
    spent = state.State(verdict="Running", budgets={"audit/r": 1})
    e = run(pol, [pod("a", "Failed")], spent)
    assert ran(e) == [("failJob", "audited")]
    assert e.state.budgets == {"audit/r": 1, "audit/f": 1}


def test_a_verdict_of_a_policy_without_causes_carries_none() -> None:
    for act in ("failJob", "completeJob"):
        e = run([policy("podFailed", action(act))], [pod("a", "Failed")])
        assert e.verdict.final and e.verdict.cause is None and e.state.final.cause is None
        assert "cause" not in evaluator.to_json(e)


CAUSES = [
    {"name": "exit1", "span": span(), "hint": "exited 1", "filter": exit_in(1)},
    {"name": "oom", "span": span(), "hint": "out of memory", "filter": reason_in("OOMKilled")},
    {"name": "labelled", "span": span(), "hint": "a batch pod",
     "filter": jp("metadata.labels.tier == 'batch'")},
]


def caused(policies: list, objects: list, prior: state.State | None = None,
           verdicts: list | None = None, causes: list | None = None, **kw: Any) -> evaluator.Evaluation:
    return run(policies, objects, prior, verdicts=verdicts, causes=CAUSES if causes is None else causes, **kw)


def test_the_pod_a_failing_policy_acted_on_gives_the_cause_before_earlier_failures() -> None:
    """`a` failed first (exit 1, a cause declared first); the policy fails the job on `b`'s
    OOMKill: the cause is `b`'s, and the rules' own cause (`a`'s) gives no reason."""
    pol = [policy("podFailed", action("failJob"), filter=reason_in("OOMKilled"))]
    a = pod("a", "Failed", containers=[terminated("main", 1, finished=20)])
    b = pod("b", "Failed", containers=[terminated("main", 137, "OOMKilled", finished=90)])
    prior = caused(pol, [pod("a"), pod("b")]).state
    e = caused(pol, [a, b], prior)
    assert ran(e) == [("failJob", "run")]
    assert (e.verdict.phase, e.verdict.reason, e.verdict.cause, e.verdict.hint) == (
        "Failed", "Cause_oom", "oom", "out of memory")


def test_completing_a_job_names_no_cause() -> None:
    pol = [policy("podSucceeded", action("completeJob"))]
    done = pod("a", "Succeeded", labels={"tier": "batch"})
    e = caused(pol, [done])
    assert (e.verdict.phase, e.verdict.reason, e.verdict.cause, e.verdict.hint) == (
        "Succeeded", "PodSucceeded", None, None)


def test_a_cause_is_read_from_every_failed_pod_and_from_a_pod_on_its_way_out() -> None:
    """No pod decides (the job's status fails it): the failed pods are read (two of them), then
    the others, a running pod being deleted among them."""
    rules = [verdict("Failed", jp("status.failed == `true`")), *RULES]
    going = pod("c", labels={"tier": "batch"}, deleting=100)
    failed = [pod("a", "Failed", containers=[terminated("main", 2, finished=30)]),
              pod("b", "Failed", containers=[terminated("main", 3, finished=20)])]
    k = load_kind(rules, [], causes=CAUSES)
    e = evaluator.evaluate(k, job(status={"failed": True}), [*failed, going], None, NOW)
    assert (e.verdict.phase, e.verdict.cause, e.verdict.hint) == ("Failed", "labelled", "a batch pod")


def test_on_a_failure_a_cause_reads_only_the_containers_that_failed() -> None:
    """`exit 0` is no failure's exit code: the sidecar that exited 0 is not the cause."""
    causes = [{"name": "clean", "span": span(), "hint": "h0", "filter": exit_in(0)},
              {"name": "two", "span": span(), "hint": "h2", "filter": exit_in(2)}]
    p = pod("a", "Failed", containers=[terminated("side", 0), terminated("main", 2)])
    e = caused([], [p], causes=causes)
    assert (e.verdict.phase, e.verdict.cause, e.verdict.hint) == ("Failed", "two", "h2")


def test_a_failed_task_is_failed_until_a_restart_of_that_task() -> None:
    counting = [policy("podRunning", action("count"))]
    failing = state.State(verdict="Running", failed_tasks=frozenset({"worker"}))
    # another action on the failed task's pods leaves it failed, and fails no task itself
    e = run(counting, [pod("a")], failing)
    assert ran(e) == [("count", "counted")] and e.state.failed_tasks == frozenset({"worker"})
    e = run(counting, [pod("a")])
    assert ran(e) == [("count", "counted")] and e.state.failed_tasks == frozenset()
    # a restart of the task ends it
    restarting = [policy("podRunning", action("restartTask"))]
    e = run(restarting, [pod("a")], failing)
    assert ran(e) == [("restartTask", "run")] and e.state.failed_tasks == frozenset()
    # a restart of a task not failed fails none
    e = run(restarting, [pod("a")])
    assert e.state.failed_tasks == frozenset()


def test_a_policy_on_the_verdict_changed_by_a_failed_task_reads_the_rules_again() -> None:
    """`fail task` changes the verdict; a policy on that change then fails (or restarts) the
    job, with the rules' verdict over the pods as they were before the policies."""
    rules = [verdict("Failed", pods_cond("any", "failed")), verdict("Running")]
    for act, phase, delay, status in (("failJob", "Failed", None, "run"),
                                      ("restartJob", "Restarting", None, "run"),
                                      ("restartJob", "Restarting", 60, "scheduled")):
        pol = [policy("podFailed", action("failTask")),
               policy("jobVerdictChanged", action(act, delay=delay))]
        e = run(pol, [pod("a", "Failed"), pod("b", task="master")], state.State(verdict="Pending"),
                verdicts=rules)
        assert ran(e) == [("failTask", "run"), (act, status)]
        assert e.verdict.phase == phase


def test_a_restart_says_the_actions_message_and_the_policys_rule() -> None:
    pol = [policy("podFailed", action("restartJob", message="pod {pod} crashed"))]
    e = run(pol, [pod("a", "Failed")])
    assert (e.verdict.phase, e.verdict.message, e.verdict.rule) == (
        "Restarting", "pod a crashed", _rule(pol[0]))
    assert e.state.restarting is not None and e.state.restarting.rule == _rule(pol[0])


def _oom(name: str = "a", limit: str = "1Gi") -> dict:
    p = pod(name, "Failed", containers=[terminated("main", 137, "OOMKilled")])
    p["spec"] = {"containers": [{"name": "main", "resources": {"limits": {"memory": limit}}}]}
    return p


def _memory(act: dict, factor: float = 2, cap: str | None = "1536Mi") -> dict:
    return dict(act, grow={"resource": "memory", "factor": factor, "max": cap})


def test_a_restart_with_more_memory_says_and_records_the_sizes_up_to_the_cap() -> None:
    e = run([policy("podFailed", _memory(action("restartPod")))], [_oom()])
    [a] = e.actions
    assert [(r.container, r.before, r.after) for r in a.resize] == [("main", "1Gi", "1536Mi")]
    assert a.message == "main: memory 1Gi -> 1536Mi after OOMKilled"
    budgeted = run([policy("podFailed", _memory(action("restartPod", max=3)))], [_oom()])
    assert budgeted.actions[0].message == "main: memory 1Gi -> 1536Mi after OOMKilled, 1 of 3"
    # in audit: the same sizes, recorded, not done
    [audit] = run([audited(policy("podFailed", _memory(action("restartPod"))))], [_oom()]).actions
    assert (audit.status, audit.resize, audit.message) == ("audited", a.resize, a.message)


def test_a_restart_with_more_memory_of_a_pod_gone_resizes_nothing() -> None:
    pol = [policy("podDeleted", _memory(action("restartPod")))]
    running_pod = dict(pod("a"), spec=_oom()["spec"])
    e = run(pol, [], seen(running_pod))
    assert ran(e) == [("restartPod", "run")] and e.actions[0].resize == ()


def test_a_delayed_action_falling_back_or_spent_when_due_keeps_its_due_time() -> None:
    """Two pods fail at once; both restarts wait 60 s; when due the first spends the budget, so
    the second falls back (or, without a fallback, is reported spent) at that due time."""
    for then, second in ((action("failJob"), ("failJob", "run")), (None, ("restartPod", "spent"))):
        pol = [policy("podFailed", action("restartPod", max=1, delay=60, then=then), id="p")]
        failed = [pod("a", "Failed"), pod("b", "Failed")]
        first = run(pol, failed, verdicts=QUIET)
        assert ran(first) == [("restartPod", "scheduled")] * 2
        due = first.actions[0].due
        e = run(pol, failed, first.state, now=due, verdicts=QUIET)
        assert ran(e) == [("restartPod", "run"), second]
        assert [a.due for a in e.actions] == [due, due]


def test_an_action_with_a_budget_still_reads_the_pod_and_the_event() -> None:
    pol = [policy("podFailed", action("failJob", reason="{event}",
                                      message="pod {pod} ({task}) {budget_used}/{budget_max}",
                                      max=3))]
    e = run(pol, [pod("a", "Failed")])
    assert (e.verdict.reason, e.verdict.message) == ("podFailed", "pod a (worker) 1/3")


def test_a_fallback_reason_reads_the_spent_budget() -> None:
    pol = [policy("podFailed", action("restartPod", max=1,
                                      then=action("failJob", reason="Spent{budget_used}of{budget_max}")),
                  id="s")]
    e = run(pol, [pod("a", "Failed")], state.State(verdict="Running", budgets={"s": 1}))
    assert e.verdict.reason == "Spent1of1"


def test_a_failure_of_a_pod_gone_is_said_of_the_pod_not_its_task() -> None:
    pol = [policy("podDeleted", action("failJob"))]
    e = run(pol, [], seen(pod("a")))
    assert e.verdict.message == f"pod deleted: fail job ({_rule(pol[0])})"


def test_a_job_event_aims_at_the_task_of_the_pod_its_filter_picked() -> None:
    pol = [policy("jobRunningLongerThan", action("failJob", message="task {task} pod {pod}"),
                  for_=60, filter=reason_in("OOMKilled"))]
    p = pod("a", containers=[running("main", restarts=1, last_exit=137, last_reason="OOMKilled")],
            task="master")
    e = run(pol, [p], now=T0 + timedelta(seconds=120))
    [a] = e.actions
    assert (a.target.task, a.target.pod, a.message) == ("master", "a", "task master pod a")


def test_an_action_on_a_nameless_job_aims_at_no_name() -> None:
    nameless = job()
    del nameless["metadata"]["name"]
    k = load_kind(RULES, [policy("podFailed", action("count"))])
    e = evaluator.evaluate(k, nameless, [pod("a", "Failed")], None, NOW)
    assert e.actions[0].target.job == ""


def test_a_policys_texts_read_the_pods_phase_and_the_restarts() -> None:
    """`{restarts}` is the deciding container's own count, else the pod's."""
    text = "{phase} {restarts}"
    crashing = pod("a", containers=[running("side", restarts=4),
                                    waiting("main", restarts=2, last_exit=1)])
    e = run([policy("containerRestarted", action("count", message=text),
                    filter=exit_in(1))], [crashing])
    assert e.actions[0].message == "Running 2"
    e = run([policy("podPending", action("count", message=text))], [pod("a", "Pending")])
    assert e.actions[0].message == "Pending 0"


@pytest.mark.parametrize("when", [both(jp("status.state == 'Failed'"), jp("status.final == `true`")),
                                  negate(jp("status.state != 'Failed'"))],
                         ids=["and", "not"])
def test_a_verdict_of_the_jobs_status_alone_holds_before_the_policies(when: dict) -> None:
    rules = [verdict("Failed", when, reason="Operator"), *RULES]
    k = load_kind(rules, [policy("podFailed", action("failJob", reason="Ours"))])
    status = {"state": "Failed", "final": True}
    e = evaluator.evaluate(k, job(status=status), [pod("a", "Failed")], None, NOW)
    assert (e.verdict.reason, e.state.final.by) == ("Operator", "verdict")


def test_explain_goes_on_past_an_otherwise_and_joins_a_policys_notes() -> None:
    rules = [verdict("Pending"), verdict("Running", pods_cond("any", "running"))]
    k = load_kind(rules, [policy("podFailed", action("count"), filter=exit_in(2))])
    e = evaluator.evaluate(k, job(), [pod("a", "Failed"), pod("b", "Failed")], None, NOW,
                           explain=True)
    assert [(f.rule, f.what, f.matched) for f in e.explanation if f.what == "verdict"] == [
        (_rule(rules[0]), "verdict", True), (_rule(rules[1]), "verdict", False)]
    [found] = [f for f in e.explanation if f.what == "policy"]
    assert found.why == "on pod failed exit 2 -> count: pod a: filter false: exit 2; pod b: filter false: exit 2"


def test_a_pod_marked_for_disruption_fails_as_disrupted_after_the_mark_is_withdrawn() -> None:
    """A DisruptionTarget is remembered even when only `pod failed` is listened for: the pod
    that fails after it (the mark since set back to False, as Kubernetes does for a pod not
    deleted in time) failed disrupted, which a plain `on pod failed` does not take."""
    pol = [policy("podFailed", action("failJob"))]
    marked = pod("a", conditions=[condition("DisruptionTarget", "PreemptionByScheduler")])
    withdrawn = pod("a", "Failed", containers=[terminated("main", 137)],
                    conditions=[condition("DisruptionTarget", "PreemptionByScheduler", status="False")])
    first = run(pol, [pod("a")], verdicts=QUIET)
    second = run(pol, [marked], first.state, verdicts=QUIET)
    assert [r.evicted for r in second.state.pods.values()] == [True]
    third = run(pol, [withdrawn], second.state, verdicts=QUIET)
    assert ran(third) == [] and third.state.final is None


def test_a_policy_on_a_pod_gone_reads_the_task_it_was_of() -> None:
    pol = [policy("podDeleted", action("failJob", message="task {task}"))]
    e = run(pol, [], seen(pod("a", task="master")))
    assert e.verdict.message == "task master"


def test_a_delayed_action_waits_once_for_its_pod_and_keeps_only_the_containers_facts() -> None:
    """A second restart of the same pod while its action waits schedules nothing more; the
    state keeps of the occurrence only what the pod may no longer say when the action is due."""
    pol = [policy("containerRestarted", action("restartPod", delay=60), id="p")]
    first = run(pol, [pod("a", containers=[running("main", restarts=1, last_exit=3)])],
                verdicts=QUIET)
    assert ran(first) == [("restartPod", "scheduled")]
    [d] = first.state.delayed
    assert set(d.variables) <= {"container", "container_reason", "exit_code", "pod_reason", "restarts"}
    assert d.variables["restarts"] == 1
    again = run(pol, [pod("a", containers=[running("main", restarts=2, last_exit=3)])], first.state,
                now=NOW + timedelta(seconds=10), verdicts=QUIET)
    assert ran(again) == [] and len(again.state.delayed) == 1


def test_a_delayed_action_for_a_pod_gone_waits_with_no_restarts_counted() -> None:
    pol = [policy("podDeleted", action("restartPod", delay=60), id="p")]
    e = run(pol, [], seen(pod("a", containers=[running("main", restarts=3)])), verdicts=QUIET)
    assert ran(e) == [("restartPod", "scheduled")]
    [d] = e.state.delayed
    assert (d.pod, d.restarts) == (None, 0)


def test_a_delayed_restart_says_its_reason_and_message_while_it_waits() -> None:
    pol = [policy("podFailed", action("restartPod", reason="Retry{pod}", message="pod {pod} again",
                                      delay=60))]
    e = run(pol, [pod("a", "Failed")])
    assert ran(e) == [("restartPod", "scheduled")]
    assert (e.verdict.phase, e.verdict.reason, e.verdict.message) == ("Restarting", "Retrya", "pod a again")


# -- what the evaluation keeps for next time ---------------------------------------------------

def test_a_final_until_value_is_kept_as_compact_sorted_json() -> None:
    """The stored run key is compared with the next evaluation's, written by any release:
    its spelling is part of the stored state's format."""
    until = {"expr": "spec.run", "span": span(1, 1)}
    k = load_kind(RULES, [], final={"sticky": True, "until": until})
    run_of = job(spec={"run": {"b": 1, "a": [1, "x"]}})
    assert verdicts.run_key(k, run_of, templates.searcher(functions.options(NOW))) == \
        '{"a":[1,"x"],"b":1}'


def test_messages_name_the_jobs_kind_and_a_job_without_metadata_is_read() -> None:
    pol = [policy("podFailed", action("failJob", message="{kind} {job}"))]
    e = run(pol, [pod("a", "Failed")], verdicts=[verdict("Pending")])
    assert e.verdict.message == "Job train"
    bare = evaluator.evaluate(load_kind(RULES, pol), {"kind": "Job", "metadata": None},
                              [pod("a", "Failed")], None, NOW)
    assert bare.verdict.message == "Job "


def test_a_tasks_end_is_remembered_only_when_a_policy_listens_for_it() -> None:
    heard = [policy("taskCompleted", action("count"), task="worker")]
    done = run(heard, [pod("a", "Succeeded")], verdicts=[verdict("Pending")])
    assert done.state.tasks == {"worker": "succeeded"}
    failed = run(heard, [pod("a", "Failed")], verdicts=[verdict("Pending")])
    assert failed.state.tasks == {}


def test_a_pending_timer_is_no_job_age_timer() -> None:
    pol = [policy("podPending", action("count"), for_=600)]
    e = run(pol, [pod("a")], now=T0 + timedelta(hours=1))
    assert e.state.fired == frozenset()
    assert [ev.event for ev in e.events if ev.event == "jobRunningLongerThan"] == []


def test_every_delayed_action_is_cancelled_when_the_job_itself_says_it_is_over() -> None:
    rules = [verdict("Failed", jp("status.gone")), verdict("Running", pods_cond("any", "running")),
             verdict("Pending")]
    pol = [policy("podFailed", action("restartPod", delay=60), id="later")]
    k = load_kind(rules, pol)
    failed = [pod("a", "Failed"), pod("b", "Failed"), pod("c")]
    first = evaluator.evaluate(k, job(), failed, None, NOW)
    assert len(first.state.delayed) == 2
    over = evaluator.evaluate(k, job(status={"gone": True}), failed, first.state,
                              NOW + timedelta(seconds=5))
    assert [(a.status, a.target.pod) for a in over.actions] == [("cancelled", "a"), ("cancelled", "b")]
    assert over.state.delayed == ()


def test_each_action_given_up_falls_back_on_its_own_whatever_the_others() -> None:
    """Given up at once: one of a policy no longer in the rules, one whose action is the last of
    its chain, one whose action is none of its chain's, and the restart of pod a, since gone:
    only the last falls back, on what the state kept of its pod."""
    pol = [policy("podFailed", action("restartPod", max=3,
                                      then=action("failJob", message="{task} {pod}")), id="retry")]
    first = run(pol, [pod("a", "Failed")])
    d = _digest(first)
    released = [state.Released("gone", "restartPod", "worker", "z", "zz", ("zz",), "x"),
                state.Released("retry", "failJob", "worker", "y", "yy", (), "x"),
                state.Released("retry", "abortJob", "worker", "y", "yy", (), "x"),
                state.Released("retry", "restartPod", "worker", "a", d, (d,), "refused")]
    e = run(pol, [], replace(first.state, released=tuple(released)), now=NOW + timedelta(seconds=5))
    assert [(a.action, a.status, a.message, a.target) for a in e.actions] == [
        ("failJob", "run", "worker a", Target("train", "ml", "worker", "a", d))]


def test_a_restart_given_up_is_over_though_a_pod_it_stopped_is_still_ours() -> None:
    """The release names only pod a among the pods the restart stopped: b stays ours (its end
    is the restart's doing), but the restart the given-up action made is over all the same."""
    pol = [policy("podFailed", action("restartJob", max=3), id="retry")]
    objects = [pod("a", "Failed"), pod("b")]
    first = run(pol, objects)
    ours = sorted(d for d, r in first.state.pods.items() if r.ours)
    assert len(ours) == 2 and first.state.restarting is not None
    da = pods.digest("uid-a")
    prior = replace(first.state, released=(state.Released("retry", "restartJob", "worker", "a", da, (da,), "x"),))
    e = run(pol, objects, prior, now=NOW + timedelta(seconds=5))
    assert e.state.restarting is None and e.verdict.phase != "Restarting"
    assert [d for d, r in e.state.pods.items() if r.ours] == [pods.digest("uid-b")]


# -- task-scoped listening, pods of ours, `final until` -----------------------------------------

def test_a_task_scoped_policy_hears_its_tasks_pods_come_and_go() -> None:
    """Only `on task "worker" ...` listens: worker's pods are remembered, and one gone is
    offered to it."""
    pol = [policy("podDeleted", action("count"), task="worker")]
    first = run(pol, [pod("a")], verdicts=[verdict("Pending")])
    assert list(first.state.pods) == [pods.digest("uid-a")]
    gone = run(pol, [], first.state, verdicts=[verdict("Pending")])
    assert [(a.action, a.target.task, a.target.uid) for a in gone.actions] == [
        ("count", "worker", pods.digest("uid-a"))]


def test_a_tasks_event_is_offered_with_the_pods_of_that_task_only() -> None:
    pol = [policy("taskFailed", action("count"), filter=exit_in(2))]
    objects = [pod("a", "Failed", task="w", containers=[terminated("main", 1)]),
               pod("b", "Failed", task="ps", containers=[terminated("main", 2)])]
    e = run(pol, objects, verdicts=[verdict("Pending")])
    assert [(a.target.task, a.target.pod) for a in e.actions] == [("ps", "b")]


def test_a_pod_our_restart_stopped_stays_ours_when_it_changes() -> None:
    pol = [policy("podFailed", action("restartJob", max=3))]
    first = run(pol, [pod("a"), pod("b", "Failed")])
    assert ran(first) == [("restartJob", "run")]
    killed = run(pol, [pod("a", "Failed", containers=[terminated("main", 137)]), pod("b", "Failed")],
                 first.state, now=NOW + timedelta(seconds=5))
    assert ran(killed) == [] and all(r.ours for r in killed.state.pods.values())


UNTIL = {"sticky": True, "until": {"expr": "spec.run", "span": span(1, 1)}}


def test_a_verdict_the_job_itself_gives_is_final_for_its_run() -> None:
    k = load_kind([verdict("Failed", jp("status.over")), *RULES], [], final=UNTIL)
    e = evaluator.evaluate(k, job(spec={"run": 1}, status={"over": True}), [pod("a")], None, NOW)
    assert e.verdict.final and e.state.final is not None and e.state.final.run == "1"


def test_a_terminal_verdict_released_by_a_new_run_is_final_again_for_that_run() -> None:
    """The run changed and the pods still say Failed: the same phase, final again, new run."""
    k = load_kind(RULES, [], final=UNTIL)
    failed = [pod("a", "Failed")]
    first = evaluator.evaluate(k, job(spec={"run": 1}), failed, None, NOW)
    assert first.verdict.final and first.state.final.run == "1"   # type: ignore[union-attr]
    again = evaluator.evaluate(k, job(spec={"run": 2}), failed, first.state, NOW)
    assert (again.verdict.phase, again.verdict.final) == ("Failed", True)
    assert again.state.final is not None and again.state.final.run == "2"


def test_a_task_failed_by_a_policy_counts_in_the_same_evaluations_verdict() -> None:
    """An evicted pod's failure fails no task by itself; `fail task` on it does, at once."""
    verdicts = [verdict("Failed", {"op": "taskCount", "state": "failed", "cmp": ">",
                                   "value": [{"expr": "`0`", "span": span(1, 1)}]}),
                verdict("Running", pods_cond("any", "running")), verdict("Pending")]
    pol = [policy("podFailed", action("failTask"), evicted=True)]
    e = run(pol, [pod("a"), evicted("b")], verdicts=verdicts)
    assert ran(e) == [("failTask", "run")] and e.state.failed_tasks == {"worker"}
    assert e.verdict.phase == "Failed"


def test_a_task_failed_by_a_delayed_action_whose_pods_are_gone_counts_at_once() -> None:
    """No pod is stopped by the action (its task has none left): the verdict still sees the task
    failed in the evaluation that ran it."""
    verdicts = [verdict("Failed", {"op": "taskCount", "state": "failed", "cmp": ">",
                                   "value": [{"expr": "`0`", "span": span(1, 1)}]}),
                verdict("Running", pods_cond("any", "running")), verdict("Pending")]
    pol = [policy("podFailed", action("failTask", delay=30), evicted=True, task="worker")]
    first = run(pol, [pod("m", task="master"), evicted("b")], verdicts=verdicts)
    assert ran(first) == [("failTask", "scheduled")] and first.verdict.phase == "Running"
    due = run(pol, [pod("m", task="master")], first.state, now=NOW + timedelta(seconds=31),
              verdicts=verdicts)
    assert ran(due) == [("failTask", "run")] and due.state.failed_tasks == {"worker"}
    assert due.verdict.phase == "Failed"


def test_a_counts_value_may_use_the_jobs_placeholders() -> None:
    """A plan may give a count's value as `{job}`, `{namespace}` or `{kind}` (rulec writes an
    expression): the placeholder's value is compared as a number."""
    k = load_kind([verdict("Failed", {"op": "count", "state": "failed", "cmp": ">=",
                                      "value": [{"var": "job"}]}),
                   verdict("Running")], [])
    one = [pod("a", "Failed"), pod("b")]
    assert evaluator.evaluate(k, job("2"), one, None, NOW).verdict.phase == "Running"
    two = [pod("a", "Failed"), pod("b", "Failed")]
    assert evaluator.evaluate(k, job("2"), two, None, NOW).verdict.phase == "Failed"
    assert evaluator.evaluate(k, job("3"), two, None, NOW).verdict.phase == "Running"
