"""Named failure causes in the runtime: which containers a reason is read from, the cause a
Failed verdict carries (and the `Cause_NAME` reason it gives one that names none), how it is
kept and written, and the plan's shape for them."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from rulec import api, emit
from runtime import evaluator, functions, plan, pods, projection, state, templates, writeback

NOW = datetime(2025, 3, 3, 10, 6, tzinfo=timezone.utc)
SEARCH = templates.searcher(functions.options(NOW))
CAUSES = """
cause "oom" when reason "OOMKilled" hint "the container ran out of memory: raise its limit"
cause "deadline" when pod reason "DeadlineExceeded" hint "raise activeDeadlineSeconds"
cause "sigkill" when exit 137 hint "killed"
cause "labelled" when where <<metadata.labels.tier == 'batch'>> hint "a batch pod"
"""


def compiled(rules: str) -> plan.Plan:
    built = api.build_sources([api.SourceFile.from_text("t.rules", CAUSES + rules)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    return plan.loads(emit.dumps(built.plan))


KIND = """
job trainer: example.dev/v1 Trainer {
    pods owned
    on pod failed cause "sigkill" -> fail job
    failed     when any pod failed
    succeeded  when all pods succeeded
    pending    otherwise
    actions {
        fail job      -> record
    }
}
"""
JOB = {"apiVersion": "example.dev/v1", "kind": "Trainer",
       "metadata": {"name": "t", "namespace": "ns", "uid": "uid-t"}}


def pod(phase: str, *containers: tuple[str, int, str], reason: str | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p-0", "namespace": "ns", "uid": "uid-p0",
                         "labels": labels or {},
                         "ownerReferences": [{"apiVersion": "example.dev/v1", "kind": "Trainer",
                                              "name": "t", "uid": "uid-t"}]},
            "status": {"phase": phase, **({"reason": reason} if reason else {}),
                       "containerStatuses": [
                           {"name": n, "restartCount": 0, "state": {"terminated": {
                               "exitCode": code, "reason": why,
                               "finishedAt": "2025-03-03T10:05:00Z"}}}
                           for n, code, why in containers]}}


def facts(obj: dict[str, Any]) -> pods.Pod:
    return pods.facts(compiled(KIND).kinds[0], obj, SEARCH)


OOM = plan.ContainerReason(frozenset({"OOMKilled"}), False, None)


# -- which containers a reason is read from ------------------------------------------------------

def test_on_a_failure_a_reason_is_read_from_a_container_that_exited_0() -> None:
    p = facts(pod("Failed", ("main", 0, "OOMKilled"), ("shipper", 2, "Error")))
    ok, container = pods.witness(OOM, p, SEARCH, failure=True)
    assert ok and container is not None and container.name == "main"


def test_a_container_that_exited_0_gives_no_exit_code_on_a_failure() -> None:
    """Exit terms keep podFailurePolicy's reading: only a failed container's code counts."""
    p = facts(pod("Failed", ("main", 0, "OOMKilled"), ("shipper", 2, "Error")))
    for codes, negate in (({0}, False), ({1}, True)):   # exit 0; exit not in [1]
        both = plan.And((OOM, plan.ExitCode(frozenset(codes), (), negate, None)))
        assert pods.witness(both, p, SEARCH, failure=True) == (False, None)
    named = plan.ContainerReason(frozenset({"OOMKilled"}), False, "main")
    assert pods.witness(named, p, SEARCH, failure=True)[0]


def test_a_negated_reason_still_reads_the_failed_containers_only() -> None:
    """`not reason "OOMKilled"` on a pod whose only failed container was OOMKilled: false, as
    before, though a clean sidecar's reason (Completed) is no OOMKilled."""
    p = facts(pod("Failed", ("main", 137, "OOMKilled"), ("shipper", 0, "Completed")))
    assert pods.witness(plan.Not(OOM), p, SEARCH, failure=True) == (False, None)


# -- the verdict's cause -------------------------------------------------------------------------

def evaluate(rules: str, *objs: dict[str, Any]) -> evaluator.Evaluation:
    return evaluator.evaluate(compiled(rules), JOB, list(objs), None, NOW)


def test_the_first_declared_cause_that_matches_the_failure_wins() -> None:
    rules = KIND.replace('    on pod failed cause "sigkill" -> fail job\n', "")
    e = evaluate(rules, pod("Failed", ("main", 137, "OOMKilled"), reason="DeadlineExceeded"))
    assert (e.verdict.phase, e.verdict.cause, e.verdict.reason) == ("Failed", "oom", "Cause_oom")
    assert e.verdict.hint == "the container ran out of memory: raise its limit"
    assert e.state.final is not None and e.state.final.cause == "oom"


def test_the_deciding_policys_cause_comes_before_those_declared_earlier() -> None:
    e = evaluate(KIND, pod("Failed", ("main", 137, "Error"), reason="DeadlineExceeded"))
    assert [a.action for a in e.actions] == ["failJob"]
    assert (e.verdict.cause, e.verdict.reason, e.verdict.hint) == ("sigkill", "Cause_sigkill",
                                                                    "killed")


def test_a_reason_the_rules_name_is_kept() -> None:
    rules = KIND.replace("failed     when any pod failed", 'failed     when any pod failed\n'
                         '               reason "PodFailed"').replace(
        '    on pod failed cause "sigkill" -> fail job\n', "")
    e = evaluate(rules, pod("Failed", ("main", 137, "OOMKilled")))
    assert (e.verdict.reason, e.verdict.cause) == ("PodFailed", "oom")


def test_only_failures_carry_a_cause() -> None:
    e = evaluate(KIND, pod("Succeeded", ("main", 0, "OOMKilled")))
    assert (e.verdict.phase, e.verdict.cause, e.verdict.reason) == ("Succeeded", None, None)


def test_the_cause_holds_with_the_final_verdict_once_the_pod_is_gone() -> None:
    first = evaluate(KIND, pod("Failed", ("main", 137, "Error")))
    again = evaluator.evaluate(compiled(KIND), JOB, [], first.state, NOW)
    assert (again.verdict.phase, again.verdict.cause, again.verdict.hint) == (
        "Failed", "sigkill", "killed")
    decoded = state.decode(state.encode(first.state))
    assert decoded.error is None and decoded.state == first.state
    assert decoded.state.final is not None and decoded.state.final.cause == "sigkill"


def test_the_controller_keeps_what_a_causes_expression_reads_of_pods() -> None:
    kind = compiled(KIND).kinds[0]
    kept = projection.project(pod("Failed", ("main", 1, "Error"), labels={"tier": "batch"}),
                              projection.of_kind(kind).pod)
    assert kept["metadata"]["labels"] == {"tier": "batch"}
    rules = KIND.replace('    on pod failed cause "sigkill" -> fail job\n', "")
    e = evaluator.evaluate(compiled(rules), JOB, [kept], None, NOW)
    assert e.verdict.cause == "labelled"


# -- writing it -----------------------------------------------------------------------------------

def test_the_annotation_and_the_condition_say_the_cause_and_its_hint() -> None:
    v = evaluator.Verdict("Failed", "PodFailed", "pod p-0 OOMKilled", "t.rules:9:5", True,
                          "oom", "raise its limit")
    body = json.loads(writeback.verdict_annotation(v, JOB, NOW))
    assert (body["cause"], body["hint"]) == ("oom", "raise its limit")
    [condition] = writeback.condition(compiled(KIND).kinds[0], JOB, v, NOW) or []
    assert condition["message"] == "pod p-0 OOMKilled (cause oom: raise its limit) (t.rules:9:5)"


def test_a_verdict_without_a_cause_writes_as_before() -> None:
    v = evaluator.Verdict("Failed", "PodFailed", "pod p-0 crashed", "t.rules:9:5", True)
    assert "cause" not in json.loads(writeback.verdict_annotation(v, JOB, NOW))
    [condition] = writeback.condition(compiled(KIND).kinds[0], JOB, v, NOW) or []
    assert condition["message"] == "pod p-0 crashed (t.rules:9:5)"


# -- the plan -------------------------------------------------------------------------------------

def test_the_plan_lists_the_causes_in_declaration_order_and_the_policys_own() -> None:
    kind = compiled(KIND).kinds[0]
    assert [c.name for c in kind.causes] == ["oom", "deadline", "sigkill", "labelled"]
    assert [p.cause for p in kind.policies] == ["sigkill"]


def test_a_cause_under_not_is_no_policys_cause() -> None:
    kind = compiled(KIND.replace('cause "sigkill" ->', 'not cause "oom" ->')).kinds[0]
    assert [p.cause for p in kind.policies] == [None]


def test_a_program_without_causes_has_a_plan_without_them() -> None:
    built = api.build_sources([api.SourceFile.from_text("t.rules", KIND.replace(
        '    on pod failed cause "sigkill" -> fail job\n', ""))])
    assert built.plan is not None and "causes" not in built.plan["kinds"][0]


@pytest.mark.parametrize("change, error", [
    (lambda k: k["policies"][0].update(cause="nope"), "'nope' is not one of the kind's causes"),
    (lambda k: k["causes"].append(dict(k["causes"][0])), "cause 'oom' is declared twice"),
    (lambda k: k["causes"][0].update(hint=3), "hint"),
])
def test_the_loader_refuses_causes_that_do_not_hold_together(change: Any, error: str) -> None:
    built = api.build_sources([api.SourceFile.from_text("t.rules", CAUSES + KIND)])
    assert built.plan is not None
    change(built.plan["kinds"][0])
    with pytest.raises(plan.PlanError, match=error):
        plan.load(built.plan)


def _named(obj: dict[str, Any], name: str, finished: str) -> dict[str, Any]:
    """`obj` as another pod: its own name and uid, its containers finished at `finished`."""
    meta = dict(obj["metadata"], name=name, uid=f"uid-{name}")
    statuses = [{**cs, "state": {"terminated": {**cs["state"]["terminated"], "finishedAt": finished}}}
                for cs in obj["status"]["containerStatuses"]]
    return {**obj, "metadata": meta, "status": {**obj["status"], "containerStatuses": statuses}}


def test_the_cause_is_read_first_on_the_pod_that_made_the_verdict_hold() -> None:
    """p-0 ran out of memory first; p-1, killed later, is the one the rule names: the verdict's
    cause is p-1's, though `oom` is declared before `sigkill` and p-0 failed earlier."""
    rules = KIND.replace('    on pod failed cause "sigkill" -> fail job\n', "").replace(
        "failed     when any pod failed", "failed     when any pod failed with exit 137")
    oom = _named(pod("Failed", ("main", 1, "OOMKilled")), "p-0", "2025-03-03T10:01:00Z")
    killed = _named(pod("Failed", ("main", 137, "Error")), "p-1", "2025-03-03T10:05:00Z")
    e = evaluate(rules, oom, killed)
    assert (e.verdict.cause, e.verdict.reason, e.verdict.hint) == ("sigkill", "Cause_sigkill", "killed")


@pytest.mark.parametrize("clauses", ["", ' message "pod failed"'])
def test_a_verdict_that_is_never_final_carries_its_cause_and_hint(clauses: str) -> None:
    """`final never`: the rules' verdict itself is the answer (no final one stands for it);
    a message without a reason still takes `Cause_NAME` for its reason."""
    rules = KIND.replace('    on pod failed cause "sigkill" -> fail job\n', "    final never\n").replace(
        "failed     when any pod failed", "failed     when any pod failed" + clauses)
    e = evaluate(rules, pod("Failed", ("main", 137, "OOMKilled")))
    assert (e.verdict.phase, e.verdict.final, e.verdict.cause, e.verdict.reason, e.verdict.hint) == (
        "Failed", False, "oom", "Cause_oom", "the container ran out of memory: raise its limit")
    assert e.verdict.message == ("pod failed" if clauses else None)
