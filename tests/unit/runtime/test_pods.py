"""Pod facts and pod filters: which container counts, and how it ended."""

from __future__ import annotations

import dataclasses
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
