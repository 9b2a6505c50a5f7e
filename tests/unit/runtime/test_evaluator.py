"""Verdicts: ordered rules, conditions over pods, tasks, time and the job, and their templates."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runtime import evaluator, state
from builders import (
    T0, action, at, condition, count, evicted, exit_in, job, jp, load, load_kind, kind, negate,
    pod, pods_cond, policy, reason_in, running, span, terminated, tmpl, verdict, waiting,
)

NOW = T0 + timedelta(minutes=5)
MESSAGE = "task {task} pod {pod}: container {container} {container_reason} (exit {exit_code})"


def decide(verdicts: list, pod_objects: list, job_obj: dict | None = None, now=NOW,
           **kind_options: Any) -> evaluator.Verdict:
    k = load_kind(verdicts, **kind_options)
    return evaluator.evaluate(k, job_obj or job(), pod_objects, None, now).verdict


VOLCANO = [
    verdict("Failed", pods_cond("any", "failed"), reason="PodFailed", message=MESSAGE),
    verdict("Succeeded", pods_cond("all", "succeeded")),
    verdict("Running", pods_cond("any", "running")),
    verdict("Pending"),
]


def test_oomkilled_master_fails_the_job_and_says_why() -> None:
    oom = pod("train-master-0", "Failed", task="master",
              init=[terminated("runtime", 0, finished=5)],
              containers=[terminated("main", 137, "OOMKilled")])
    v = decide(VOLCANO, [oom])
    assert (v.phase, v.reason) == ("Failed", "PodFailed")
    assert v.message == "task master pod train-master-0: container main OOMKilled (exit 137)"
    assert v.rule.startswith("t.rules:")


def test_the_earliest_failing_pod_decides_then_the_name() -> None:
    late = pod("a-late", "Failed", containers=[terminated("main", 1, finished=90)])
    early = pod("z-early", "Failed", containers=[terminated("main", 2, finished=20)])
    tie = pod("b-tie", "Failed", containers=[terminated("main", 3, finished=20)])
    assert "pod z-early" in decide(VOLCANO, [late, early]).message
    assert "pod b-tie" in decide(VOLCANO, [late, early, tie]).message


def test_a_sidecar_at_index_zero_does_not_hide_mains_exit_code() -> None:
    p = pod("p", "Failed", containers=[terminated("istio-proxy", 0), terminated("main", 42)])
    assert decide(VOLCANO, [p]).message.endswith("container main Error (exit 42)")


def test_init_container_failure_is_reported() -> None:
    p = pod("p", "Failed", init=[terminated("fetch", 2, finished=5)], containers=[waiting("main", "PodInitializing")])
    assert decide(VOLCANO, [p]).message.endswith("container fetch Error (exit 2)")


def test_the_matching_container_decides_under_a_filter() -> None:
    rules = [verdict("Failed", pods_cond("any", "failed", reason_in("OOMKilled")), message=MESSAGE),
             verdict("Running")]
    p = pod("p", "Failed", containers=[terminated("a", 1), terminated("b", 137, "OOMKilled")])
    assert decide(rules, [p]).message.endswith("container b OOMKilled (exit 137)")


@pytest.mark.parametrize("name, objects, phase", [
    ("no pods: all succeeded is false", [], "Pending"),
    ("all succeeded", [pod("a", "Succeeded"), pod("b", "Succeeded")], "Succeeded"),
    ("one running", [pod("a", "Succeeded"), pod("b", "Running")], "Running"),
    ("one failed wins over running", [pod("a", "Failed"), pod("b", "Running")], "Failed"),
    ("evicted is not failed", [evicted("a")], "Pending"),
    ("pending", [pod("a", "Pending")], "Pending"),
])
def test_first_matching_rule_wins(name: str, objects: list, phase: str) -> None:
    assert decide(VOLCANO, objects).phase == phase


def test_no_rule_matching_is_pending_without_a_rule() -> None:
    v = decide([verdict("Running", pods_cond("any", "running"))], [])
    assert (v.phase, v.rule) == ("Pending", None)


@pytest.mark.parametrize("cond, objects, holds", [
    (pods_cond("none", "failed"), [pod("a")], True),
    (pods_cond("none", "failed"), [pod("a", "Failed")], False),
    (pods_cond("any", "failed", task="master"), [pod("a", "Failed", task="worker")], False),
    (pods_cond("all", "succeeded", task="worker"),
     [pod("m", "Running", task="master"), pod("w", "Succeeded", task="worker")], True),
    (pods_cond("any", "evicted"), [evicted("a")], True),
    (pods_cond("any", "terminating"), [pod("a", deleting=10)], True),
    (pods_cond("any", "running", reason_in("CrashLoopBackOff")),
     [pod("a", containers=[waiting("main", restarts=3, last_exit=1)])], True),
    (pods_cond("any", "pending", for_=600), [pod("a", "Pending", created=0)], False),
    (pods_cond("any", "pending", for_=240), [pod("a", "Pending", created=0)], True),
    (pods_cond("any", "failed", exit_in(1), for_=120), [pod("a", "Failed")], True),  # finished at 60s
    (count(">=", "<<spec.minAvailable>>", "succeeded"),
     [pod("a", "Succeeded"), pod("b", "Succeeded"), pod("c", "Failed")], True),
    (count(">=", "<<spec.minAvailable>>", "succeeded"), [pod("a", "Succeeded"), pod("c", "Failed")], False),
    (count("==", "2"), [pod("a"), pod("b")], True),
    (count("<", "<<spec.missing>>"), [pod("a")], False),  # null never compares
    ({"op": "task", "quant": "any", "task": None, "state": "failed"},
     [pod("a", "Failed", task="ps"), pod("b", task="worker")], True),
    ({"op": "task", "quant": "all", "task": None, "state": "succeeded"},
     [pod("a", "Succeeded", task="ps"), pod("b", task="worker")], False),
    ({"op": "task", "quant": "any", "task": "worker", "state": "succeeded"},
     [pod("a", "Running", task="service"), pod("b", "Succeeded", task="worker")], True),
    ({"op": "task", "quant": "any", "task": "worker", "state": "running"},
     [pod("a", "Pending", task="worker"), pod("b", "Running", task="worker")], True),
    ({"op": "task", "quant": "any", "task": "worker", "state": "pending"},
     [pod("a", "Pending", task="worker")], True),
    ({"op": "jobAge", "longerThan": 300}, [], True),
    ({"op": "jobAge", "longerThan": 301}, [], False),
    (jp("spec.suspend"), [], True),
    (jp("status.conditions[?type=='Failed']"), [], False),  # [] is false
    (jp("spec.tasks"), [], True),
    (negate(jp("spec.suspend")), [], False),
])
def test_conditions(cond: dict, objects: list, holds: bool) -> None:
    j = job(spec={"minAvailable": 2, "suspend": True, "tasks": [{"name": "x"}]})
    v = decide([verdict("Failed", cond), verdict("Running")], objects, j)
    assert (v.phase == "Failed") == holds


def test_job_age_counts_from_start_time_when_set() -> None:
    j = job(status={"startTime": at(200)})
    assert decide([verdict("Failed", {"op": "jobAge", "longerThan": 120}), verdict("Running")], [], j).phase == "Running"


@pytest.mark.parametrize("reason, expected", [
    ("<<status.restarts>>", "3"),
    ("<<status.list>>", '["a",1]'),
    ("<<status.text>>", "Boom"),
    ("<<status.missing>>", None),
    ("n=<<status.restarts>>", "n=3"),
    ("{count} of {total}", "1 of 2"),
])
def test_reason_templates(reason: str, expected: str | None) -> None:
    j = job(status={"restarts": 3, "list": ["a", 1], "text": "Boom"})
    v = decide([verdict("Failed", pods_cond("any", "failed"), reason=reason)], [pod("a", "Failed"), pod("b")], j)
    assert v.reason == expected


def test_placeholders_of_count_and_all() -> None:
    rules = [verdict("Succeeded", count(">=", "2", "succeeded"), message="{count}/{total} ok, first {pod}"),
             verdict("Running")]
    objs = [pod("b", "Succeeded", containers=[terminated("main", 0, finished=10)]),
            pod("a", "Succeeded", containers=[terminated("main", 0, finished=50)]), pod("c")]
    assert decide(rules, objs).message == "2/3 ok, first b"
    last = [verdict("Succeeded", pods_cond("all", "succeeded"), message="last {pod}")]
    assert decide(last, objs[:2]).message == "last a"


def test_a_plan_selects_the_kind_of_the_job() -> None:
    p = load(kind([verdict("Failed")], name="a"),
             kind([verdict("Succeeded")], name="b", api_version="kubeflow.org/v1", job_kind="TFJob"))
    assert evaluator.evaluate(p, job(api_version="kubeflow.org/v1", kind="TFJob"), [], None, NOW).verdict.phase == "Succeeded"
    with pytest.raises(evaluator.UnknownKind):
        evaluator.evaluate(p, job(kind="CronJob"), [], None, NOW)


def test_expression_errors_are_reported_not_raised() -> None:
    e = evaluator.evaluate(load_kind([verdict("Failed", jp("abs(metadata.name)")), verdict("Running")]),
                           job(), [], None, NOW)
    assert e.verdict.phase == "Running"
    assert len(e.problems) == 1 and "abs(metadata.name)" in e.problems[0]


def test_explain_gives_the_first_false_condition() -> None:
    k = load_kind([verdict("Failed", {"op": "and", "args": [pods_cond("any", "running"), jp("spec.bad")]}),
                   verdict("Succeeded", pods_cond("all", "succeeded")),
                   verdict("Running", pods_cond("any", "running")), verdict("Pending")])
    e = evaluator.evaluate(k, job(), [pod("a"), pod("b", "Succeeded")], None, NOW, explain=True)
    found = [(f.name, f.matched, f.why) for f in e.explanation if f.what == "verdict"]
    assert found == [
        ("Failed", False, "<<spec.bad>> is null"),
        ("Succeeded", False, "all pods succeeded: 1 of 2 pods match"),
        ("Running", True, "holds"),
        ("Pending", True, "otherwise, but an earlier rule decided"),
    ]
    assert all(f.rule.startswith("t.rules:") for f in e.explanation)


def test_wake_at_is_the_next_time_a_duration_passes() -> None:
    k = load_kind([verdict("Failed", pods_cond("any", "pending", for_=600)), verdict("Pending")])
    e = evaluator.evaluate(k, job(), [pod("a", "Pending", created=60)], None, NOW)
    assert e.wake_at == T0 + timedelta(seconds=660)
    assert evaluator.evaluate(k, job(), [pod("a")], None, NOW).wake_at is None


def test_verdict_and_state_of_a_running_job_are_stable() -> None:
    k = load_kind(VOLCANO, [policy("podPending", action("ignore")),
                            policy("podRunning", action("ignore"))])
    first = evaluator.evaluate(k, job(), [pod("a"), pod("b", "Pending")], None, NOW)
    again = evaluator.evaluate(k, job(), [pod("a"), pod("b", "Pending")], first.state, NOW)
    assert again.verdict == first.verdict and again.state == first.state
    assert state.decode(state.encode(again.state)).state == again.state
    assert [e.event for e in first.events] == ["podPending", "podRunning", "jobVerdictChanged"]  # by time
    assert again.events == ()


def test_running_pod_with_a_last_state_reports_the_last_exit() -> None:
    rules = [verdict("Restarting", pods_cond("any", "running", exit_in(1)), message=MESSAGE), verdict("Running")]
    p = pod("a", task="w", containers=[running("main", restarts=1, last_exit=1)])
    assert decide(rules, [p]).message == "task w pod a: container main Error (exit 1)"


def test_condition_filters_see_disruption_reasons() -> None:
    preempted = pod("a", "Failed", conditions=[condition("DisruptionTarget", "PreemptionByScheduler")])
    rules = [verdict("Restarting", pods_cond("any", "evicted", {
        "op": "condition", "type": "DisruptionTarget", "reasons": ["PreemptionByScheduler"], "negate": False})),
        verdict("Failed")]
    assert decide(rules, [preempted]).phase == "Restarting"
    assert decide(rules, [evicted("b")]).phase == "Failed"


def test_template_builder_splits_literals_vars_and_expressions() -> None:
    assert tmpl("pod {pod}: <<a.b>>!") == ["pod ", {"var": "pod"}, ": ",
                                          {"expr": "a.b", "span": span(1, 1)}, "!"]


def test_builders_load_as_a_plan() -> None:
    k = load_kind([verdict("Running", pods_cond("any", "running")), verdict("Pending")],
                  [policy("podFailed", action("restartPod", max=2))])
    assert k.verdicts[0].phase == "Running" and k.policies[0].action.budget.max == 2


# -- the `rulec eval` output contract (docs/evaluation.md), its explanation, and wake times ------

def test_the_json_of_an_evaluation_names_every_part() -> None:
    pol = policy("podFailed", action("restartPod", reason="Retry", message="pod {pod}", max=2, delay=30), id="retry")
    k = load_kind([verdict("Failed", jp("abs(metadata.name)")), verdict("Running", pods_cond("any", "running")),
                   verdict("Pending")], [pol])
    e = evaluator.evaluate(k, job(), [pod("a", "Failed"), pod("b")], None, NOW, explain=True)
    out = evaluator.to_json(e)
    [scheduled] = out["actions"]
    assert scheduled == {"action": "restartPod", "status": "scheduled", "policy": "retry", "event": "podFailed",
                         "rule": f"t.rules:{pol['span']['line']}:5", "reason": "Retry", "message": "pod a",
                         "target": {"job": "train", "namespace": "ml", "task": "worker", "pod": "a", "uid": "uid-a"},
                         "due": "2024-05-01T12:05:30Z"}
    assert len(out["problems"]) == 1 and "abs(metadata.name)" in out["problems"][0]
    assert [(f["what"], f["name"], f["matched"]) for f in out["explain"]][:3] == [
        ("verdict", "Failed", False), ("verdict", "Running", True), ("verdict", "Pending", True)]
    assert out["wakeAt"] == "2024-05-01T12:05:30Z"
    quiet = evaluator.to_json(evaluator.evaluate(load_kind([verdict("Pending")]), job(), [pod("b")], None, NOW))
    assert "problems" not in quiet and "explain" not in quiet


def test_the_explanation_of_rules_and_policies() -> None:
    pols = [policy("podFailed", action("ignore"), id="watch", task="worker"),
            policy("podEvicted", action("failJob"), id="evict")]
    k = load_kind([verdict("Running", pods_cond("any", "running")), verdict("Running", pods_cond("any", "running")),
                   verdict("Pending")], pols)
    e = evaluator.evaluate(k, job(), [pod("a")], None, NOW, explain=True)
    verdicts = [(f.name, f.matched, f.why) for f in e.explanation if f.what == "verdict"]
    assert verdicts == [("Running", True, "holds"), ("Running", True, "holds, but an earlier rule decided"),
                        ("Pending", True, "otherwise, but an earlier rule decided")]
    policies = [f for f in e.explanation if f.what == "policy"]
    assert [(f.name, f.matched) for f in policies] == [("watch", False), ("evict", False)]
    assert all(f.rule.startswith("t.rules:") for f in policies)
    assert "for task worker" in policies[0].why
    pending = evaluator.evaluate(k, job(), [], None, NOW, explain=True)
    assert [f.why for f in pending.explanation if f.what == "verdict"][-1] == "otherwise"


def test_policies_wake_the_job_when_their_durations_pass() -> None:
    pending = [policy("podPending", action("failJob"), for_=600, id="slow")]
    k = load_kind([verdict("Pending")], pending)
    e = evaluator.evaluate(k, job(), [pod("a", "Pending", created=60), pod("b")], None, NOW)
    assert e.wake_at == T0 + timedelta(seconds=660)
    long = [policy("jobRunningLongerThan", action("failJob"), for_=3600, id="long")]
    k = load_kind([verdict("Pending")], long)
    assert evaluator.evaluate(k, job(created=100), [], None, NOW).wake_at == T0 + timedelta(seconds=3700)
    # exactly due: it fires now, and nothing is left to wake for
    fired = evaluator.evaluate(k, job(created=100), [], None, T0 + timedelta(seconds=3700))
    assert [a.action for a in fired.actions] == ["failJob"] and fired.wake_at is None


def test_a_job_without_rules_is_told_why() -> None:
    p = load(kind([verdict("Failed")], name="scoped", selector=[{"key": "team", "operator": "In", "values": ["ml"]}],
                  namespaces=["ml", "research"]))
    with pytest.raises(evaluator.UnknownKind) as err:
        evaluator.evaluate(p, job(kind="CronJob"), [], None, NOW)
    assert str(err.value) == "no rules for batch.volcano.sh/v1alpha1 CronJob"
    with pytest.raises(evaluator.UnknownKind) as err:
        evaluator.evaluate(p, job(), [], None, NOW)
    assert str(err.value) == ("no rules for this Job: it is outside the scope of kind scoped "
                              "(label selector team=ml; namespaces ml, research)")
    labelled = job()
    labelled["metadata"]["labels"] = {"team": "ml"}
    assert evaluator.evaluate(p, labelled, [], None, NOW).verdict.phase == "Failed"
    labelled["metadata"]["namespace"] = "other"
    with pytest.raises(evaluator.UnknownKind):
        evaluator.evaluate(p, labelled, [], None, NOW)
    only_namespaces = load(kind([verdict("Failed")], name="ns", namespaces=["research"]))
    with pytest.raises(evaluator.UnknownKind) as err:
        evaluator.evaluate(only_namespaces, job(), [], None, NOW)
    assert str(err.value).endswith("outside the scope of kind ns (namespaces research)")


def test_templates_read_values_as_compact_sorted_json_and_know_the_rules_functions() -> None:
    k = load_kind([verdict("Failed", jp("spec.fail"), reason="R",
                           message="at <<now()>>: <<spec.detail>> <<abs(spec.bad)>>|")], [])
    e = evaluator.evaluate(k, job(spec={"fail": True, "detail": {"z": 1, "a": "é", "m": [1, None]}, "bad": "x"}),
                           [], None, NOW)
    assert e.verdict.message == 'at 2024-05-01T12:05:00Z: {"a":"é","m":[1,null],"z":1} |'
    [problem] = e.problems
    assert problem.startswith("t.rules:") and "abs(spec.bad)" in problem and "invalid type" in problem


def test_the_pods_of_a_job_are_chosen_at_the_time_given() -> None:
    """A selector's template that reads `now()` reads the time given, not the clock."""
    k = load_kind(VOLCANO, labels={"age": "<<age('2024-05-01T12:00:00Z')>>"}, owned=False)
    mine = pod("a", labels={"age": "300"})   # NOW is 5 minutes after
    other = pod("b", labels={"age": "301"})
    assert [p["metadata"]["name"] for p in evaluator.pods_of(k, job(), [mine, other], NOW)] == ["a"]


def test_the_output_names_a_cause_only_when_one_matched() -> None:
    e = evaluator.evaluate(load_kind(VOLCANO), job(), [pod("a", "Failed")], None, NOW)
    assert e.verdict.cause is None and "cause" not in evaluator.to_json(e)
