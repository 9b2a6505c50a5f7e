"""Pod facts and pod filters: which container counts, and how it ended."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

import pytest

import builders
from runtime import functions, pods, templates, vocabulary
from builders import (
    T0, both, condition, either, evicted, exit_in, job, jp, load_kind, negate, pod, pods_cond,
    reason_in, running, terminated, verdict, waiting,
)

OPTS = templates.searcher(functions.options(T0))
KIND = load_kind()
PRIMARY_MAIN = load_kind(primary_containers=["main"])

OOM = pod("p", "Failed", containers=[terminated("main", 137, "OOMKilled")])
SIDECAR_FIRST = pod("p", "Failed", containers=[running("istio-proxy"), terminated("main", 42)])
INIT_FAILED = pod("p", "Failed", init=[terminated("setup", 2, finished=5)],
                  containers=[waiting("main", "PodInitializing")])
CRASHLOOP = pod("p", "Running", containers=[waiting("main", "CrashLoopBackOff", 4, last_exit=1)])
CRASHLOOP_OOM = pod("p", "Running", containers=[waiting("main", "CrashLoopBackOff", 2, last_exit=137,
                                                        last_reason="OOMKilled")])
EVICTED = evicted("p")
PREEMPTED = pod("p", "Running", conditions=[condition("DisruptionTarget", "PreemptionByScheduler")])


def facts(obj: dict[str, Any], kind=KIND) -> pods.Pod:
    return pods.facts(kind, obj, OPTS)


def test_facts_of_an_oomkilled_pod() -> None:
    p = facts(OOM)
    assert (p.name, p.task, p.phase, p.evicted, p.restarts) == ("p", "worker", "Failed", False, 0)
    (c,) = p.counted
    assert (c.name, c.exit_code, c.reason, c.state) == ("main", 137, "OOMKilled", "terminated")
    assert p.ended == functions.timestamp("2024-05-01T12:01:00Z")


def test_reason_prefers_waiting_over_last_terminated() -> None:
    (c,) = facts(CRASHLOOP).counted
    assert (c.reason, c.exit_code, c.restarts) == ("CrashLoopBackOff", 1, 4)


def test_init_containers_are_read_first() -> None:
    p = facts(INIT_FAILED)
    assert [(c.name, c.init) for c in p.containers] == [("setup", True), ("main", False)]
    assert p.counted[0].name == "setup"  # the non-zero exit decides


def test_sidecar_at_index_zero_does_not_take_the_place_of_main() -> None:
    assert facts(SIDECAR_FIRST).counted[0].name == "main"


def test_primary_containers_limit_what_counts() -> None:
    p = facts(SIDECAR_FIRST, PRIMARY_MAIN)
    assert [c.name for c in p.counted] == ["main"]


@pytest.mark.parametrize("obj, evicted_, states", [
    (OOM, False, {"failed", "failedOrEvicted"}),
    (EVICTED, True, {"failedOrEvicted", "evicted"}),
    (PREEMPTED, True, {"running", "failedOrEvicted", "evicted"}),
    (pod("p", "Pending"), False, {"pending"}),
    (pod("p", "Succeeded"), False, {"succeeded"}),
    (pod("p", "Running", deleting=100), False, {"running", "terminating"}),
    (pod("p", "Running", conditions=[condition("DisruptionTarget", status="False")]), False, {"running"}),
])
def test_pod_states(obj: dict, evicted_: bool, states: set[str]) -> None:
    p = facts(obj)
    assert p.evicted == evicted_
    assert {s for s in vocabulary.POD_STATES if p.is_(s)} == states
    assert {s for s in vocabulary.POD_STATES if pods.in_state([p], s) == [p]} == states


def test_pods_in_a_state_are_those_it_says_in_order() -> None:
    every = [facts(o) for o in (OOM, EVICTED, PREEMPTED, pod("p", "Pending"), pod("p", "Succeeded"),
                                pod("p", "Running", deleting=100), pod("p", "Running"))]
    for state in vocabulary.POD_STATES:
        assert pods.in_state(every, state) == [p for p in every if p.is_(state)], state


# filter, pod, primary containers, expected match, expected deciding container
FILTERS = [
    ("exit 137", exit_in(137), OOM, None, True, "main"),
    ("exit in 128..255", exit_in(ranges=[[128, 255]]), OOM, None, True, "main"),
    ("exit not in [137]", exit_in(137, negate=True), OOM, None, False, None),
    ("exit 42 with a sidecar at 0", exit_in(42), SIDECAR_FIRST, None, True, "main"),
    ("exit 42, primary main", exit_in(42), SIDECAR_FIRST, ["main"], True, "main"),
    ("exit 2 reads init containers", exit_in(2), INIT_FAILED, None, True, "setup"),
    ("exit 2 with primary main: init not read", exit_in(2), INIT_FAILED, ["main"], False, None),
    ("a named container is read even when not primary", exit_in(2, container="setup"),
     INIT_FAILED, ["main"], True, "setup"),
    ("reason OOMKilled", reason_in("OOMKilled"), OOM, None, True, "main"),
    ("reason CrashLoopBackOff", reason_in("CrashLoopBackOff"), CRASHLOOP, None, True, "main"),
    ("exit from last state", exit_in(1), CRASHLOOP, None, True, "main"),
    ("reason of the kill a container crash-loops after", reason_in("OOMKilled"), CRASHLOOP_OOM,
     None, True, "main"),
    ("crash-looping after a kill: both reasons", reason_in("CrashLoopBackOff"), CRASHLOOP_OOM,
     None, True, "main"),
    ("crash-looping after a kill is not 'not OOMKilled'", reason_in("OOMKilled", negate=True),
     CRASHLOOP_OOM, None, False, None),
    ("exit and reason speak of one container",
     both(exit_in(137), reason_in("OOMKilled", negate=True)), OOM, None, False, None),
    ("exit or reason", either(exit_in(1), reason_in("OOMKilled")), OOM, None, True, "main"),
    ("not exit 137 on a pod with no exit codes", negate(exit_in(137)), pod("p", "Pending"), None, True, None),
    ("no exit code is neither in nor not in", exit_in(0, negate=True), pod("p", "Pending"), None, False, None),
    ("pod reason", {"op": "podReason", "values": ["Evicted"], "negate": False}, EVICTED, None, True, "main"),
    ("pod reason not in", {"op": "podReason", "values": ["Evicted"], "negate": True}, OOM, None, True, "main"),
    ("condition any reason", {"op": "condition", "type": "DisruptionTarget", "reasons": [], "negate": False},
     PREEMPTED, None, True, "main"),
    ("condition reason", {"op": "condition", "type": "DisruptionTarget",
                          "reasons": ["TerminationByKubelet"], "negate": False}, PREEMPTED, None, False, None),
    ("task", {"op": "task", "values": ["worker"], "negate": False}, OOM, None, True, "main"),
    ("task not in", {"op": "task", "values": ["worker"], "negate": True}, OOM, None, False, None),
    ("restarts", {"op": "restarts", "cmp": ">=", "value": 3, "container": None}, CRASHLOOP, None, True, "main"),
    ("restarts named", {"op": "restarts", "cmp": ">", "value": 0, "container": "main"}, OOM, None, False, None),
    ("label exists", {"op": "label", "key": "volcano.sh/task-spec", "values": None, "negate": False},
     OOM, None, True, "main"),
    ("label value", {"op": "label", "key": "volcano.sh/task-spec", "values": ["ps"], "negate": False},
     OOM, None, False, None),
    ("jmespath over the pod", jp("metadata.name == 'p'"), OOM, None, True, "main"),
    ("jmespath error reads as null", jp("abs(metadata.name)"), OOM, None, False, None),
]


@pytest.mark.parametrize("f, obj, primary, ok, container", [row[1:] for row in FILTERS],
                         ids=[row[0] for row in FILTERS])
def test_filters(f: dict, obj: dict, primary: list | None, ok: bool, container: str | None) -> None:
    kind = load_kind([], [{"id": "x", "span": {"path": "t", "line": 1, "column": 1, "endLine": 1,
                                                 "endColumn": 2},
                           "event": "podFailed", "task": None, "filter": f, "for": None,
                           "to": None, "action": {"action": "ignore"}}], primary_containers=primary)
    got, chosen = pods.witness(kind.policies[0].filter, pods.facts(kind, obj, OPTS), OPTS)
    assert (got, chosen.name if chosen else None) == (ok, container)


def test_digest_is_short_stable_and_distinct() -> None:
    digests = {pods.digest(f"uid-{i}") for i in range(5000)}
    assert len(digests) == 5000
    assert pods.digest("uid-1") == pods.digest("uid-1") and len(pods.digest("uid-1")) == 6


def test_task_from_an_expression() -> None:
    expr = load_kind([verdict("Running", jp("metadata.labels.role"))]).verdicts[0].when.expr
    kind = dataclasses.replace(load_kind(task_label=None), task_expr=expr)
    assert pods.task_of(kind, pod("p", labels={"role": "ps"}), OPTS) == "ps"
    assert pods.task_of(kind, pod("p"), OPTS) is None


def test_since_uses_the_pods_own_timestamps() -> None:
    p = facts(pod("p", "Pending", created=30))
    assert p.since("pending") == functions.timestamp("2024-05-01T12:00:30Z")
    assert facts(EVICTED).since("evicted") == functions.timestamp("2024-05-01T12:00:50Z")


@pytest.mark.parametrize("owned, labels, candidate, belongs", [
    (True, {}, pod("a"), True),
    (True, {}, pod("a", owner_uid="someone-else"), False),
    (False, {"volcano.sh/job-name": "<<metadata.name>>"}, pod("a", labels={"volcano.sh/job-name": "train"}), True),
    (False, {"volcano.sh/job-name": "<<metadata.name>>"}, pod("a", labels={"volcano.sh/job-name": "other"}), False),
    (True, {"volcano.sh/job-name": "<<metadata.name>>"}, pod("a"), False),  # both must hold
    (False, {}, pod("a"), True),
])
def test_pods_of(owned: bool, labels: dict, candidate: dict, belongs: bool) -> None:
    kind = load_kind(owned=owned, labels=labels)
    assert (pods.pods_of(kind, job(), [candidate], T0) == [candidate]) == belongs


def test_pods_of_skips_other_namespaces_and_matches_by_name_without_uid() -> None:
    other_ns = pod("a")
    other_ns["metadata"]["namespace"] = "elsewhere"
    no_uid = job(uid="")
    assert pods.pods_of(KIND, job(), [other_ns], T0) == []
    assert pods.pods_of(KIND, no_uid, [pod("b")], T0) != []


def test_primary_pods() -> None:
    kind = load_kind(primary_pods={"op": "task", "values": ["master"], "negate": False})
    assert pods.is_primary(kind, pod("m", task="master"), OPTS)
    assert not pods.is_primary(kind, pod("w", task="worker"), OPTS)
    assert pods.is_primary(KIND, pod("w"), OPTS)


@pytest.mark.parametrize("values, negate", [(["master"], False), (["master"], True),
                                            (None, False), (None, True)])
def test_primary_pods_by_label_read_as_the_filter_reads_them(values, negate) -> None:
    """`primary pods label ...` is read off the labels without the pod's facts: the same answer
    as the filter tested on those facts."""
    label = {"op": "label", "key": "role", "values": values, "negate": negate}
    kind = load_kind(primary_pods=label)
    for role in ("master", "worker", None, 3):
        obj = pod("m")
        if role is not None:
            obj["metadata"]["labels"] = {"role": role}
        expected = pods.matches(kind.primary_pods, pods.facts(kind, obj, OPTS), OPTS)
        assert pods.is_primary(kind, obj, OPTS) == expected
        assert expected == ((role == "master" if values else role is not None) != negate)


# -- on a failure, as the Job controller reads a failed pod (pod_failure_policy.go) ---------------

INIT_CLEAN_MAIN_111 = pod("p", "Failed", init=[terminated("setup", 0, finished=5)],
                          containers=[terminated("main", 111)])
INIT_5_MAIN_143 = pod("p", "Failed", init=[terminated("init-container", 5, finished=5)],
                      containers=[terminated("main-container", 143, finished=20)])
RESTARTED_137 = pod("p", "Failed", containers=[
    waiting("main", "CrashLoopBackOff", 3, last_exit=137, last_reason="OOMKilled"),
    terminated("helper", 1)])


@pytest.mark.parametrize("obj, f, normal, failure", [
    # `exit not in [111]`: a clean init container is no failure, so it matches nothing
    (INIT_CLEAN_MAIN_111, exit_in(111, negate=True), "setup", None),
    # regular containers are tried before init containers, whatever finished first
    (INIT_5_MAIN_143, exit_in(5, 143), "init-container", "main-container"),
    (INIT_5_MAIN_143, exit_in(5), "init-container", "init-container"),
    # a container's last state is not a failure of this pod: only what is terminated now
    (RESTARTED_137, exit_in(137), "main", None),
    (RESTARTED_137, reason_in("CrashLoopBackOff"), "main", None),
    (RESTARTED_137, None, "main", "helper"),
    # a named container must itself have failed: its last state is no failure either
    (INIT_CLEAN_MAIN_111, exit_in(0, container="setup"), "setup", None),
    (RESTARTED_137, exit_in(137, container="main"), "main", None),
    (RESTARTED_137, exit_in(1, negate=True, container="main"), "main", None),
], ids=["not-in-skips-clean-init", "regular-first", "init-when-only-it", "last-state-is-not-now",
        "last-reason-is-not-now", "no-filter-names-the-failed", "named-must-have-failed",
        "named-last-state-is-not-now", "named-not-in-last-state-is-not-now"])
def test_failure_scope_reads_what_terminated_non_zero(obj: dict, f: Any, normal: str | None,
                                                     failure: str | None) -> None:
    p = facts(obj)
    for scoped, expected in ((False, normal), (True, failure)):
        ok, container = pods.witness(loaded(f), p, OPTS, failure=scoped)
        assert ok == (expected is not None), scoped
        assert (container.name if ok and container else None) == expected, scoped


def test_exit_codes_are_32_bit_signed() -> None:
    windows = pod("p", "Failed", containers=[terminated("main", -1073741819)])
    assert pods.matches(loaded(exit_in(-1073741819)), facts(windows), OPTS, failure=True)
    assert pods.matches(loaded(exit_in(ranges=[[-1073741824, -1]])), facts(windows), OPTS,
                        failure=True)


# -- which containers count --------------------------------------------------------------------

def test_containers_the_plan_injects_never_count() -> None:
    kind = load_kind(injections=[builders.sidecar_injection("log-shipper", "metrics")])
    assert kind.injected == {"log-shipper", "metrics"}
    obj = pod("p", "Failed", containers=[terminated("log-shipper", 137, "Error", restarts=2),
                                         terminated("main", 1)],
              init=[terminated("metrics", 143, restarts=4)])
    p = facts(obj, kind)
    assert [c.name for c in p.counted] == ["main"] and p.restarts == 0
    assert not pods.matches(loaded(exit_in(137)), p, OPTS, failure=True)
    named = exit_in(137, container="log-shipper")
    assert pods.matches(loaded(named), p, OPTS, failure=True)  # asked for by name, it is read


def test_primary_containers_by_prefix() -> None:
    kind = load_kind(primaryContainerPrefix="step-")
    obj = pod("p", "Failed", init=[terminated("prepare", 1)],
              containers=[terminated("step-build", 2), terminated("sidecar-tekton-log", 3)])
    assert [c.name for c in facts(obj, kind).counted] == ["step-build"]


@pytest.mark.parametrize("status, statuses, hit", [
    ("True", ["True"], True), ("False", ["True"], False), ("False", ["False"], True),
    ("Unknown", ["False", "Unknown"], True), ("True", ["False", "Unknown"], False),
])
def test_pod_conditions_match_their_status(status: str, statuses: list, hit: bool) -> None:
    obj = pod("p", "Failed", conditions=[condition("ConfigIssue", "Bad", status=status)])
    f = {"op": "condition", "type": "ConfigIssue", "status": statuses, "reasons": [], "negate": False}
    assert pods.matches(loaded(f), facts(obj), OPTS) == hit


def loaded(f: dict | None) -> Any:
    """A pod filter's plan JSON, loaded."""
    if f is None:
        return None
    return load_kind([verdict("Failed", pods_cond("any", None, f))]).verdicts[0].when.filter


# -- facts, field by field -------------------------------------------------------------------------

def _at(seconds: float) -> Any:
    return functions.timestamp(builders.at(seconds))


def test_restarts_add_up_over_counted_containers_init_included() -> None:
    obj = pod("p", "Running", init=[terminated("setup", 0, restarts=2)],
              containers=[running("main", restarts=3), running("side", restarts=5)])
    assert facts(obj).restarts == 10
    assert facts(obj, PRIMARY_MAIN).restarts == 3


@pytest.mark.parametrize("count", [True, -2, "3", 2.0, None])
def test_a_restart_count_that_is_not_a_count_is_zero(count: Any) -> None:
    obj = pod("p", "Running", containers=[running("main")])
    obj["status"]["containerStatuses"][0]["restartCount"] = count
    assert facts(obj).restarts == 0 and facts(obj).containers[0].restarts == 0


@pytest.mark.parametrize("uid", ["", 7, None])
def test_an_empty_or_malformed_uid_is_no_uid(uid: Any) -> None:
    obj = pod("p", "Running", containers=[running("main")])
    obj["metadata"]["namespace"] = "ns"
    obj["metadata"]["uid"] = uid
    assert facts(obj).uid == "ns/p" and facts(obj).digest == pods.digest("ns/p")


def test_a_malformed_pod_reads_as_a_pending_one_without_name() -> None:
    p = facts({"metadata": {"namespace": "ns"}, "status": {"phase": 3, "reason": 4,
                                                          "containerStatuses": [3, {"name": 5}]}})
    assert (p.name, p.phase, p.reason, p.evicted, p.terminating) == ("", "Pending", None, False, False)
    assert p.uid == "ns/" and p.digest == pods.digest("ns/")
    assert [c.name for c in p.containers] == [""]
    bare = facts({})
    assert (bare.uid, bare.namespace, bare.containers) == ("/", None, ())


def test_a_pod_without_a_uid_is_named_by_namespace_and_name() -> None:
    obj = pod("p")
    del obj["metadata"]["uid"]
    assert facts(obj).uid == "ml/p"


def test_an_evicted_reason_alone_is_an_eviction() -> None:
    assert facts(pod("p", "Failed", reason="Evicted")).evicted
    assert not facts(pod("p", "Failed", reason="DeadlineExceeded")).evicted


def test_a_disruption_target_counts_only_when_true() -> None:
    obj = pod("p", "Running", conditions=[condition("DisruptionTarget", status="False"),
                                          condition("Other", "X")])
    assert not facts(obj).evicted


def test_container_states_and_exit_codes() -> None:
    obj = pod("p", "Running", containers=[running("a"), waiting("b", "ImagePullBackOff"),
                                          terminated("c", 0), {"name": "d"}])
    obj["status"]["containerStatuses"].append(
        {"name": "e", "state": {"terminated": {"exitCode": True, "reason": "Odd"}}})
    p = facts(obj)
    assert [(c.name, c.index, c.state, c.exit_code) for c in p.containers] == [
        ("a", 0, "running", None), ("b", 1, "waiting", None), ("c", 2, "terminated", 0),
        ("d", 3, "", None), ("e", 4, "terminated", None)]
    assert p.container("c") is p.containers[2] and p.container("zz") is None
    assert p.containers[1].reason == "ImagePullBackOff"


def test_a_container_s_finish_is_from_its_current_state_else_its_last() -> None:
    p = facts(pod("p", "Running", containers=[terminated("a", 1, finished=90),
                                              running("b", 1, last_exit=2)]))
    assert [c.finished for c in p.containers] == [_at(90), _at(30)]
    assert [c.exit_code for c in p.containers] == [1, 2]


def test_the_most_telling_container_comes_first() -> None:
    """Non-zero exits, then other reasons, then clean exits, then the rest; earlier finish first."""
    obj = pod("p", "Failed", containers=[
        running("plain"), terminated("clean", 0, finished=10), waiting("pulling", "ErrImagePull"),
        terminated("late", 2, finished=50), terminated("early", 3, finished=20),
        terminated("done", 0, "Completed", finished=5)])
    assert [c.name for c in facts(obj).counted] == ["early", "late", "pulling", "done", "clean", "plain"]


def test_failures_are_regular_before_init_each_in_status_order() -> None:
    obj = pod("p", "Failed", init=[terminated("i1", 1), terminated("i2", 0)],
              containers=[terminated("b", 2, finished=90), terminated("a", 3, finished=10),
                          waiting("w", "CrashLoopBackOff", last_exit=9)])
    p = facts(obj)
    assert [c.name for c in p.failures] == ["b", "a", "i1"]
    assert p.deciding(True).name == "b" and p.deciding(False).name == "a"
    assert facts(pod("p", "Running")).deciding(True).name == "main"   # no failure: the counted
    assert facts(pod("p", "Pending")).deciding(False) is None


@pytest.mark.parametrize("obj, state, since", [
    (pod("p", "Pending", created=30), "pending", 30),
    (pod("p", "Running", created=30), "running", 31),
    (pod("p", "Failed", containers=[terminated("a", 1, finished=70), terminated("b", 1, finished=80)]),
     "failed", 80),
    (pod("p", "Succeeded", containers=[terminated("a", 0, finished=70)]), "succeeded", 70),
    (evicted("p"), "evicted", 50),
    (evicted("p"), "failedOrEvicted", 50),
    # disrupted (a preemption's DisruptionTarget at 50), then it exited 0: succeeded when it ended
    (pod("p", "Succeeded", containers=[terminated("a", 0, finished=70)],
         conditions=[condition("DisruptionTarget", "PreemptionByScheduler")]), "succeeded", 70),
    (pod("p", "Failed", containers=[terminated("a", 1, finished=70)]), "failedOrEvicted", 70),
    (pod("p", "Running", deleting=100), "terminating", 100),
])
def test_since_for_each_state(obj: dict, state: str, since: float) -> None:
    assert facts(obj).since(state) == _at(since)


def test_since_falls_back_when_a_timestamp_is_missing() -> None:
    no_start = pod("p", "Running", created=30)
    del no_start["status"]["startTime"]
    assert facts(no_start).since("running") == _at(30)
    # an eviction with no DisruptionTarget time: when it ended
    ev = pod("p", "Failed", reason="Evicted", containers=[terminated("main", 137, finished=77)])
    assert facts(ev).since("evicted") == _at(77)
    # a finished pod with no container finish: its Ready condition's time
    ready = pod("p", "Failed", containers=[running("main")],
                conditions=[condition("Other", at_seconds=10), condition("Ready", status="False", at_seconds=60)])
    assert facts(ready).ended == _at(60) and facts(ready).since("failed") == _at(60)
    # a pod still running has not ended, whatever its containers say
    assert facts(pod("p", "Running", containers=[terminated("a", 1)])).ended is None
    nothing = pod("p", "Failed", containers=[running("main")])
    nothing["status"].pop("startTime")
    assert facts(nothing).since("failed") == _at(0)   # then when it was created


def test_deletion_is_requested_a_grace_period_before_its_timestamp() -> None:
    obj = pod("p", "Running", deleting=100)
    obj["metadata"]["deletionGracePeriodSeconds"] = 30
    assert facts(obj).deleting == _at(70)
    obj["metadata"]["deletionGracePeriodSeconds"] = -5
    assert facts(obj).deleting == _at(100)
    assert facts(pod("p")).deleting is None


def test_an_unknown_state_reads_as_terminating() -> None:
    assert facts(pod("p", deleting=5)).is_("terminating")
    assert not facts(pod("p")).is_("terminating")


def test_change_key_orders_by_when_the_state_was_entered_then_name() -> None:
    early = facts(pod("b", "Failed", containers=[terminated("main", 1, finished=20)]))
    late = facts(pod("a", "Failed", containers=[terminated("main", 1, finished=40)]))
    ev = facts(evicted("c"))
    odd = facts(pod("d", "Unknown", containers=[], created=5))
    assert pods.change_key(early) == (_at(20), "b", "uid-b")
    assert pods.change_key(ev)[0] == _at(50)
    assert pods.change_key(odd)[0] == _at(5)    # a phase that is no state: since its creation
    undated = pod("e", "Pending")
    del undated["metadata"]["creationTimestamp"]
    assert pods.change_key(facts(undated))[0] == datetime.max.replace(tzinfo=timezone.utc)
    assert sorted([late, ev, early], key=pods.change_key) == [early, late, ev]


def test_sort_key_reads_the_container_then_the_pod() -> None:
    p = facts(pod("p", "Failed", containers=[terminated("a", 1, finished=20), terminated("b", 1, finished=40)]))
    assert pods.sort_key(p, p.containers[0]) == (_at(20), "p")
    assert pods.sort_key(p, None) == (_at(40), "p")
    assert pods.sort_key(facts(pod("q", "Running", conditions=[condition("DisruptionTarget", at_seconds=9)])),
                         None) == (_at(9), "q")
    assert pods.sort_key(facts(pod("r")), None) == (datetime.max.replace(tzinfo=timezone.utc), "r")


@pytest.mark.parametrize("value, true", [
    (None, False), (False, False), ("", False), ([], False), ({}, False), (0, True), (0.0, True),
    (True, True), ("x", True), ([0], True), ({"a": None}, True),
])
def test_truthy_as_jmespath(value: Any, true: bool) -> None:
    assert pods.truthy(value) is true


@pytest.mark.parametrize("labels, task", [({"volcano.sh/task-spec": ""}, None),
                                          ({"volcano.sh/task-spec": 3}, None),
                                          ({"volcano.sh/task-spec": "ps"}, "ps"), ({}, None)])
def test_a_task_label_must_be_a_non_empty_string(labels: dict, task: str | None) -> None:
    obj = pod("p", task=None, labels=labels)
    assert pods.task_of(KIND, obj, OPTS) == task


def test_a_task_expression_s_value_as_text() -> None:
    expr = load_kind([verdict("Running", jp("metadata.labels.role"))]).verdicts[0].when.expr
    kind = dataclasses.replace(load_kind(task_label=None), task_expr=expr)
    assert pods.task_of(kind, pod("p", labels={"role": ""}), OPTS) is None
    num = load_kind([verdict("Running", jp("`3`"))]).verdicts[0].when.expr
    assert pods.task_of(dataclasses.replace(kind, task_expr=num), pod("p"), OPTS) == "3"
    assert pods.task_of(dataclasses.replace(kind, task_expr=None), pod("p"), OPTS) is None


def test_counted_names_prefix_or_all_but_the_injected() -> None:
    assert pods.ALL("main") and pods.ALL("side")
    assert pods.Counted(("main",), None, frozenset())("main")
    assert not pods.Counted(("main",), None, frozenset())("side")
    assert not pods.Counted(None, "step-", frozenset())("main")
    assert pods.Counted(None, None, frozenset({"side"}))("main")
    both_ = pods.Counted(("main",), "step-", frozenset())
    assert both_("main") and both_("step-x") and not both_("other")
    assert not pods.Counted(None, None, frozenset({"side"}))("side")


# -- filters, in detail -----------------------------------------------------------------------------

@pytest.mark.parametrize("f, obj, ok", [
    (exit_in(ranges=[[130, 136]]), OOM, False),
    (exit_in(ranges=[[137, 137]]), OOM, True),
    (exit_in(ranges=[[138, 140]]), OOM, False),
    (exit_in(ranges=[[1, 2], [100, 200]]), OOM, True),
    (exit_in(ranges=[[130, 140]], negate=True), OOM, False),
    (exit_in(1, ranges=[[130, 140]], negate=True), pod("p", "Failed", containers=[terminated("main", 2)]), True),
    (reason_in("Error", negate=True), pod("p", "Pending"), False),      # no reason: neither
    (reason_in("OOMKilled", negate=True), pod("p", "Failed", containers=[terminated("main", 1, "Error")]), True),
    ({"op": "restarts", "cmp": "<", "value": 1, "container": None}, pod("p", "Pending"), True),
    ({"op": "restarts", "cmp": "==", "value": 4, "container": "main"}, CRASHLOOP, True),
    ({"op": "restarts", "cmp": "!=", "value": 4, "container": "main"}, CRASHLOOP, False),
    ({"op": "restarts", "cmp": "<=", "value": 3, "container": "main"}, CRASHLOOP, False),
    ({"op": "restarts", "cmp": ">=", "value": 1, "container": "nosuch"}, CRASHLOOP, False),
    ({"op": "condition", "type": "DisruptionTarget", "reasons": ["PreemptionByScheduler"], "negate": True},
     PREEMPTED, False),
    ({"op": "condition", "type": "DisruptionTarget", "reasons": [], "negate": True}, OOM, True),
    ({"op": "label", "key": "team", "values": None, "negate": True}, pod("p"), True),
    ({"op": "label", "key": "team", "values": None, "negate": True}, pod("p", labels={"team": "a"}), False),
    ({"op": "label", "key": "team", "values": ["a"], "negate": False},
     pod("p", labels={"team": "a"}), True),
    ({"op": "label", "key": "team", "values": ["a"], "negate": True},
     pod("p", labels={"team": "a"}), False),
    ({"op": "podReason", "values": ["Evicted"], "negate": False}, OOM, False),
])
def test_more_filters(f: dict, obj: dict, ok: bool) -> None:
    assert pods.matches(loaded(f), facts(obj), OPTS) is ok


def test_an_annotation_filter_reads_annotations_not_labels() -> None:
    """(An injection's `annotation` filter, tested against the pod as a pod filter.)"""
    from runtime import plan
    obj = pod("p", labels={"team": "a"})
    obj["metadata"]["annotations"] = {"owner": "x"}
    assert not pods.matches(plan.LabelIs("owner", None, False, False), facts(obj), OPTS)
    assert pods.matches(plan.LabelIs("owner", None, False, True), facts(obj), OPTS)
    assert pods.matches(plan.LabelIs("owner", frozenset({"x"}), False, True), facts(obj), OPTS)
    assert not pods.matches(plan.LabelIs("team", None, False, True), facts(obj), OPTS)


def test_a_named_container_inside_not_and_or_is_the_one_tested() -> None:
    obj = pod("p", "Failed", containers=[terminated("main", 1), terminated("side", 2)])
    f = negate(either(exit_in(9), exit_in(2, container="side")))
    ok, chosen = pods.witness(loaded(f), facts(obj), OPTS)
    assert ok is False and chosen is None
    ok, chosen = pods.witness(loaded(negate(exit_in(3, container="side"))), facts(obj), OPTS)
    assert ok is True and chosen is not None and chosen.name == "side"


def test_a_filter_that_no_container_passes_is_tried_on_each() -> None:
    obj = pod("p", "Failed", containers=[terminated("a", 1, finished=10), terminated("b", 2, finished=20)])
    ok, chosen = pods.witness(loaded(exit_in(2)), facts(obj), OPTS)
    assert ok and chosen is not None and chosen.name == "b"
    assert pods.witness(loaded(exit_in(3)), facts(obj), OPTS) == (False, None)


# -- membership, in detail --------------------------------------------------------------------------

def test_owned_without_a_uid_needs_kind_name_and_api_version() -> None:
    no_uid = job(uid="")
    for key, value in (("kind", "Other"), ("name", "other"), ("apiVersion", "x/v1")):
        candidate = pod("a")
        candidate["metadata"]["ownerReferences"][0][key] = value
        assert pods.pods_of(KIND, no_uid, [candidate], T0) == [], key
    assert pods.pods_of(KIND, no_uid, [pod("a")], T0) != []


def test_a_pod_with_no_namespace_and_a_job_with_none_belong() -> None:
    candidate = pod("a")
    del candidate["metadata"]["namespace"]
    assert pods.pods_of(KIND, job(), [candidate], T0) == [candidate]
    other = pod("b")
    other["metadata"]["namespace"] = "elsewhere"
    nameless_job = job()
    del nameless_job["metadata"]["namespace"]
    assert pods.pods_of(KIND, nameless_job, [other], T0) == [other]


def test_a_selector_that_renders_nothing_selects_nothing() -> None:
    kind = load_kind(owned=False, labels={"app": "<<metadata.labels.app>>"})
    assert pods.pods_of(kind, job(), [pod("a", labels={"app": "x"})], T0) == []
    assert pods.pods_of(kind, job(), [pod("b")], T0) == []   # nor a pod without the label


@pytest.mark.parametrize("owned, labels", [(True, {}), (False, {"app": "<<metadata.name>>"}),
                                            (True, {"app": "<<metadata.name>>"})])
@pytest.mark.parametrize("where, malformed", [
    ("metadata", ["not", "an", "object"]), ("labels", "app=train"),
    ("ownerReferences", {"uid": "uid-train"}), ("ownerReferences", ["uid-train", None])])
def test_a_malformed_candidate_belongs_to_no_job_that_reads_it(
        owned: bool, labels: dict, where: str, malformed: Any) -> None:
    """A pod whose metadata, labels or owner references are not what Kubernetes writes is
    no member of a job selecting on them, and reading it raises nothing."""
    kind = load_kind(owned=owned, labels=labels)
    candidate = pod("a", labels={"app": "train"})
    if where == "metadata":
        candidate["metadata"] = malformed
    else:
        candidate["metadata"][where] = malformed
    assert pods.pods_of(kind, job(), [pod("b", labels={"app": "train"})], T0) != []
    reads = where == "metadata" or (where == "labels" and labels) or (
        where == "ownerReferences" and owned)
    assert (pods.pods_of(kind, job(), [candidate], T0) == []) == bool(reads)


def test_membership_reads_the_clock_only_for_now() -> None:
    kind = load_kind(owned=False, labels={"stamp": "<<now()>>"})
    candidate = pod("a", labels={"stamp": "2024-05-01T12:00:00Z"})
    assert pods.pods_of(kind, job(), [candidate], T0) == [candidate]
    assert pods.pods_of(kind, job(), [candidate]) == []   # the wall clock is years later


def test_a_pod_ends_when_its_last_container_terminated_now() -> None:
    """A container running again (its last state terminated later) or one with no finish time
    says nothing of when the pod ended."""
    obj = pod("p", "Failed", containers=[terminated("a", 1, finished=20), running("b", 1, last_exit=2)])
    obj["status"]["containerStatuses"].append({"name": "c", "state": {"terminated": {"exitCode": 1}}})
    assert facts(obj).ended == _at(20)


def test_a_non_zero_exit_speaks_before_an_earlier_reason_and_a_clean_exit_before_the_rest() -> None:
    unexplained = {"name": "x", "state": {"terminated": {"finishedAt": builders.at(1)}}}
    obj = pod("p", "Failed", containers=[
        unexplained, terminated("clean", 0, finished=10), terminated("odd", 0, "Error", finished=5),
        terminated("bad", 3, finished=20)])
    assert [c.name for c in facts(obj).counted] == ["bad", "odd", "clean", "x"]


def test_matches_reads_a_failure_as_asked() -> None:
    f = loaded(exit_in(137))
    assert pods.matches(f, facts(RESTARTED_137), OPTS)
    assert not pods.matches(f, facts(RESTARTED_137), OPTS, failure=True)


def test_membership_on_the_wall_clock_reads_ages() -> None:
    kind = load_kind(owned=False, labels={"old": "<<to_string(age(metadata.creationTimestamp) > `0`)>>"})
    candidate = pod("a", labels={"old": "true"})
    assert pods.pods_of(kind, job(), [candidate]) == [candidate]


def test_a_selector_s_placeholders_name_this_job() -> None:
    """docs/language.md: a `pods label ... = VALUE` may name `job`, `namespace` and `kind`."""
    kind = load_kind(owned=False, labels={"app": "{kind}.{namespace}.{job}"})
    mine, other = pod("a", labels={"app": "Job.ml.train"}), pod("b", labels={"app": ".."})
    assert pods.pods_of(kind, job(), [mine, other], T0) == [mine]


def test_both_parts_of_an_and_read_the_same_container() -> None:
    ok, chosen = pods.witness(loaded(both(exit_in(137), reason_in("OOMKilled"))), facts(OOM), OPTS)
    assert ok and chosen is not None and chosen.name == "main"


def test_a_named_container_s_filter_still_reads_the_pod() -> None:
    f = both(exit_in(137, container="main"), {"op": "podReason", "values": ["OOMKilled"], "negate": True})
    assert pods.matches(loaded(f), facts(OOM), OPTS)
    g = both(exit_in(137, container="main"), jp("metadata.name == 'p'"))
    assert pods.matches(loaded(g), facts(OOM), OPTS)


def test_a_container_without_a_name_counts_under_no_prefix() -> None:
    kind = load_kind(primaryContainerPrefix="step-")
    obj = pod("p", "Running", containers=[running("step-a", restarts=1)])
    obj["status"]["containerStatuses"].append({"name": 5, "restartCount": 7})
    assert facts(obj, kind).restarts == 1


def test_a_pod_s_namespace_is_read_from_its_metadata() -> None:
    assert facts(pod("p")).namespace == "ml"
    assert facts({"metadata": {"namespace": 3}}).namespace is None


def test_a_filter_of_no_known_type_is_refused_naming_it() -> None:
    for ask in (pods.matches, pods.witness):
        with pytest.raises(TypeError, match=r"^not a pod filter: 'nonsense'$"):
            ask("nonsense", facts(OOM), OPTS)


def test_matches_answers_as_witness_does() -> None:
    """`matches` skips the containers when no term reads them; a term under `not` does."""
    exit_1 = pod("p", "Failed", containers=[terminated("main", 1)])
    for f in (None, negate(exit_in(1)), negate(exit_in(2)), jp("metadata.name == 'p'")):
        for failure in (False, True):
            expected = pods.witness(loaded(f), facts(exit_1), OPTS, failure)[0]
            assert pods.matches(loaded(f), facts(exit_1), OPTS, failure) is expected
    assert pods.matches(None, facts(exit_1), OPTS)
    assert not pods.matches(loaded(negate(exit_in(1))), facts(exit_1), OPTS, True)


# -- a named container that did not fail, on a failure -------------------------------------------

def test_a_named_container_that_did_not_fail_is_read_for_its_reason_alone() -> None:
    """OOMKilled with exit 0 while another container failed: asked for by name and reason, it
    is the deciding container, whole but for its exit code (an exit of 0 is no failure's)."""
    obj = pod("p", "Failed", containers=[terminated("main", 0, "OOMKilled", finished=40, restarts=2),
                                         terminated("side", 1, finished=50)])
    main = pods.Container("main", 0, False, 2, "terminated", None, "OOMKilled", _at(40), None)
    for f in (reason_in("OOMKilled", container="main"),
              both(reason_in("OOMKilled", container="main"),
                   {"op": "restarts", "cmp": ">", "value": 1, "container": "main"})):
        assert pods.witness(loaded(f), facts(obj), OPTS, failure=True) == (True, main)
    restarts_3 = both(reason_in("OOMKilled", container="main"),
                      {"op": "restarts", "cmp": ">", "value": 2, "container": "main"})
    assert pods.witness(loaded(restarts_3), facts(obj), OPTS, failure=True) == (False, None)


def test_a_named_waiting_container_keeps_the_reason_of_the_termination_it_waits_after() -> None:
    obj = pod("p", "Failed", containers=[waiting("main", "CrashLoopBackOff", 3, last_exit=0,
                                                 last_reason="OOMKilled")])
    main = pods.Container("main", 0, False, 3, "waiting", None, "CrashLoopBackOff", _at(30), "OOMKilled")
    assert pods.witness(loaded(reason_in("OOMKilled", container="main")), facts(obj), OPTS,
                        failure=True) == (True, main)


@pytest.mark.parametrize("state", [
    {"terminated": {"exitCode": 1, "reason": "Error"}},
    {"terminated": {"exitCode": 1, "reason": "Error"}, "waiting": {"reason": "CrashLoopBackOff"}},
], ids=["terminated", "terminated-and-waiting"])
def test_a_container_terminated_now_has_only_its_own_reason(state: dict) -> None:
    """Only a container waiting after a termination keeps that termination's reason."""
    cs = {"name": "main", "restartCount": 1, "state": state,
          "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
    (main,) = facts(pod("p", "Failed", containers=[cs])).containers
    assert (main.reason, main.reasons) == ("Error", ("Error",))


# -- a container that ended cleanly, read for its reason on a failure ----------------------------

WORKER = {"op": "task", "values": ["worker"], "negate": False}
# `side` failed (exit 1, Error); `main` ended with exit 0 but was OOMKilled
CLEAN_OOM = pod("p", "Failed", containers=[terminated("main", 0, "OOMKilled", finished=40, restarts=2),
                                           terminated("side", 1, finished=50)])
# `main` ended with exit 0, Completed
CLEAN_DONE = pod("p", "Failed", containers=[terminated("main", 0, finished=40),
                                            terminated("side", 1, finished=50)])


@pytest.mark.parametrize("obj, kind, f, expected", [
    # a reason asked for (positively, under any number of `not`) reads a clean container's
    (CLEAN_OOM, KIND, reason_in("OOMKilled"), "main"),
    (CLEAN_OOM, KIND, negate(reason_in("OOMKilled", negate=True)), "main"),
    # with the terms beside it, which read the pod and the clock's search
    (CLEAN_OOM, KIND, both(reason_in("OOMKilled"), WORKER, jp("metadata.name == 'p'")), "main"),
    # a reason asked not to be, alone or under `not (... and ...)`, does not
    (CLEAN_DONE, KIND, both(reason_in("Error", negate=True), WORKER), None),
    (CLEAN_DONE, KIND, negate(both(reason_in("Error"), WORKER)), None),
    # only the containers that count are read: the primary one here, `side` not
    (CLEAN_OOM, PRIMARY_MAIN, reason_in("OOMKilled"), "main"),
    # a named clean container is read for its reason only, not for its restarts
    (CLEAN_OOM, KIND, {"op": "restarts", "cmp": ">", "value": 1, "container": "main"}, None),
], ids=["reason", "not-not-in", "with-pod-terms", "not-in", "not-and", "primary", "named-restarts"])
def test_a_failure_reads_a_clean_container_only_for_a_reason_asked_for(
        obj: dict, kind: Any, f: dict, expected: str | None) -> None:
    ok, container = pods.witness(loaded(f), facts(obj, kind), OPTS, failure=True)
    assert (ok, container.name if container else None) == (expected is not None, expected)
