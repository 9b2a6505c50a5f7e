"""Properties over random pod histories: an action is taken once per pod incarnation, budgets are
never exceeded, evaluating the same inputs again (with the state stored as JSON) does nothing, a
terminal verdict never changes back, and a count budget acts exactly once when exceeded.

Budgets and terminal verdicts are held to oracles computed from the generated history itself
(which incarnations failed, in what order), and a seeded sweep asserts that the histories reach
terminal verdicts often enough for those checks to run (Failed 114, Succeeded 59, neither 227 of
400 when written): an engine that dropped every terminal verdict, or counted one failed pod
again on each evaluation, fails them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import evaluator, state
from builders import (
    T0, action, condition, exit_in, job, load_kind, pod, pods_cond, policy, running, terminated,
    verdict, waiting,
)

RESTARTS = {"op": "restarts", "cmp": ">=", "value": 2, "container": None}
POLICIES = [
    policy("podEvicted", action("restartPod", max=3, key="disruptions"), id="evicted"),
    policy("podDeleted", action("restartTask", max=2, per="task"), id="deleted"),
    policy("podFailed", action("restartPod", max=2, key="oom"), filter=exit_in(137), id="oom"),
    policy("podFailed", action("restartPod", max=2, delay=30), filter=exit_in(1), id="crash-later"),
    policy("podFailed", action("restartTask", max=2, per="task", then=action("abortJob", max=1)),
           id="other-failure"),
    policy("containerRestarted", action("restartPod", max=4), filter=RESTARTS, id="looping"),
    policy("podPending", action("restartPod", max=2), for_=60, id="stuck"),
    policy("podSucceeded", action("ignore"), id="fine"),
    policy("taskFailed", action("restartTask", max=1, per="task"), task="ps", id="ps-failed"),
]
KIND = load_kind([verdict("Failed", pods_cond("any", "failed")), verdict("Succeeded", pods_cond("all", "succeeded")),
                  verdict("Running", pods_cond("any", "running")), verdict("Pending")], POLICIES)
BUDGETS = {a.budget.key: a.budget.max for p in KIND.policies
           for a in (p.action, p.action.fallback) if a is not None and a.budget is not None}
SLOTS = 4


@dataclass(frozen=True)
class Slot:
    uid: str
    phase: str = "Pending"
    restarts: int = 0
    exit: int = 1
    evicted: bool = False
    deleting: bool = False

    def obj(self, index: int) -> dict:
        task = "ps" if index == 0 else "worker"
        containers = []
        if self.phase == "Running":
            containers = [running("main", self.restarts, last_exit=self.exit if self.restarts else None)
                          if self.restarts % 2 == 0 else waiting("main", restarts=self.restarts, last_exit=self.exit)]
        elif self.phase in ("Succeeded", "Failed"):
            containers = [terminated("main", 0 if self.phase == "Succeeded" else self.exit,
                                     "OOMKilled" if self.exit == 137 else None, restarts=self.restarts)]
        conditions = [condition("DisruptionTarget", "TerminationByKubelet")] if self.evicted else None
        return pod(f"p{index}", self.phase, task=task, uid=self.uid, containers=containers,
                   conditions=conditions, deleting=0 if self.deleting else None)

    @property
    def incarnation(self) -> tuple:
        return self.uid, self.phase, self.restarts, self.evicted, self.deleting


def step(slots: list[Slot | None], op: str, i: int, serial: int) -> list[Slot | None]:
    """One status change of pod slot i (the kubelet, the scheduler or someone with kubectl)."""
    out = list(slots)
    s = out[i]
    if op == "create" or s is None:
        out[i] = Slot(f"uid-{i}-{serial}")
    elif op == "advance" and s.phase == "Pending":
        out[i] = replace(s, phase="Running")
    elif op == "advance" and s.phase == "Running":
        out[i] = replace(s, phase="Succeeded")
    elif op.startswith("fail-") and s.phase in ("Pending", "Running"):
        out[i] = replace(s, phase="Failed", exit=int(op.split("-")[1]))
    elif op == "restart" and s.phase == "Running":
        out[i] = replace(s, restarts=s.restarts + 1)
    elif op == "evict" and s.phase != "Succeeded":
        out[i] = replace(s, evicted=True, phase="Failed" if s.phase == "Failed" else s.phase)
    elif op == "delete-request" and s.phase in ("Pending", "Running"):
        out[i] = replace(s, deleting=True)
    elif op == "vanish":
        out[i] = None
    return out


OPS = st.sampled_from(["create", "advance", "advance", "fail-1", "fail-2", "fail-137", "restart", "restart",
                       "evict", "delete-request", "vanish", "nothing"])
STEPS = st.lists(st.tuples(OPS, st.integers(0, SLOTS - 1), st.integers(0, 90)), min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_actions_once_per_incarnation_and_within_budgets(steps: list[tuple[str, int, int]]) -> None:
    slots: list[Slot | None] = [Slot(f"uid-{i}-0") for i in range(SLOTS)]
    stored = ""
    now = T0
    taken: set[tuple] = set()
    spent: dict[str, int] = {}
    terminal: evaluator.Verdict | None = None
    for serial, (op, i, seconds) in enumerate(steps, 1):
        slots = step(slots, op, i, serial)
        now += timedelta(seconds=seconds)
        objects = [s.obj(n) for n, s in enumerate(slots) if s is not None]
        by_uid = {s.uid: s for s in slots if s is not None}
        prior = state.decode(stored)
        assert prior.error is None
        result = evaluator.evaluate(KIND, job(), objects, prior.state, now)
        for a in result.actions:
            if a.status == "scheduled" or (a.status == "run" and a.due is None):
                pod_now = by_uid.get(a.target.uid)
                key = (a.policy, a.event, pod_now.incarnation if pod_now else a.target.uid, a.target.task)
                assert key not in taken, f"action twice for one incarnation: {key}"
                taken.add(key)
            elif a.status == "run":
                key = ("fired", a.policy, a.target.uid, a.due)
                assert key not in taken, f"a delayed action fired twice: {key}"
                taken.add(key)
            if a.status == "run" and a.budget is not None and a.action == _primary(a.policy):
                spent[a.budget.key] = spent.get(a.budget.key, 0) + 1
                assert spent[a.budget.key] <= a.budget.max, f"budget {a.budget.key} exceeded"
        for key, used in result.state.budgets.items():
            assert used <= BUDGETS[key.split("[")[0]]
        stored = state.encode(result.state)
        again = evaluator.evaluate(KIND, job(), objects, state.decode(stored).state, now)
        assert again.actions == () and again.events == (), "same inputs, new actions"
        assert state.encode(again.state) == stored
        assert again.verdict == result.verdict
        # A terminal verdict holds (this kind never starts a job again), and only a terminal
        # verdict is final: a restart of ours under way reads Restarting instead.
        v = result.verdict
        if terminal is not None:
            assert (v.phase, v.reason, v.message, v.final) == (
                terminal.phase, terminal.reason, terminal.message, True), "a terminal verdict changed"
        elif v.phase in ("Succeeded", "Failed"):
            assert v.final
            terminal = v


def _primary(policy_id: str) -> str:
    return next(p.action.action for p in KIND.policies if p.id == policy_id)


COUNTED = 2
COUNT_KIND = load_kind([verdict("Running", pods_cond("any", "running")), verdict("Pending")],
                       [policy("podFailed", action("count", max=COUNTED, key="failures",
                                                  then=action("failJob", reason="TooManyFailures")),
                               id="failures"),
                        policy("podEvicted", action("restartPod", max=2), id="evicted")])


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_a_count_budget_acts_exactly_once_when_exceeded(steps: list[tuple[str, int, int]]) -> None:
    """Failures of pods, replaced or not, are counted; the fallback runs once, on the failure
    that exceeds the budget, and the job is failed from then on. What failed is counted from
    the history itself (each incarnation that ends Failed, not evicted or deleted first), not
    from the engine's events: an engine that counted one failure twice would agree with itself."""
    slots: list[Slot | None] = [Slot(f"uid-{i}-0") for i in range(SLOTS)]
    prior = state.EMPTY
    now = T0
    failures = counted = failed = 0
    seen: set[str] = set()
    for serial, (op, i, seconds) in enumerate(steps, 1):
        slots = step(slots, op, i, serial)
        after = slots[i]
        if (after is not None and after.phase == "Failed" and not after.evicted
                and not after.deleting and after.uid not in seen):
            seen.add(after.uid)
            if not failed:   # once the job has failed, failures are no longer the policy's
                failures += 1
        now += timedelta(seconds=seconds)
        objects = [s.obj(n) for n, s in enumerate(slots) if s is not None]
        result = evaluator.evaluate(COUNT_KIND, job(), objects, prior, now)
        prior = state.decode(state.encode(result.state)).state
        counted += sum(a.status == "counted" for a in result.actions)
        runs = [a for a in result.actions if a.action == "failJob"]
        failed += len(runs)
        if runs:
            assert failures == COUNTED + 1, "the fallback ran before the budget was exceeded"
        assert counted == min(failures, COUNTED), (counted, failures)
        assert result.state.budgets.get("failures", 0) == min(failures, COUNTED)
        assert (result.verdict.phase == "Failed") == (failures > COUNTED), (failures, result.verdict)
    assert failed == (1 if failures > COUNTED else 0)


# -- oracles independent of the engine ----------------------------------------------------------
#
# The properties above read the engine's own events to know what happened. Here what happened is
# computed from the generated history alone: which pod incarnations failed (exit != 0, not
# evicted), in what order. The rules: `on pod failed -> restart pod max 2 then fail job`. So the
# engine must restart the first two failed incarnations, fail the job on the third and hold that
# verdict whatever comes next; a job whose pods all succeed before that is Succeeded and holds.

CRASHES = 2
TERMINAL_KIND = load_kind(
    [verdict("Failed", pods_cond("any", "failed")), verdict("Succeeded", pods_cond("all", "succeeded")),
     verdict("Running", pods_cond("any", "running")), verdict("Pending")],
    [policy("podFailed", action("restartPod", max=CRASHES, key="crashes",
                                then=action("failJob", reason="TooManyCrashes")), id="crashes")])
TERMINAL_OPS = ["create", "advance", "advance", "advance", "fail-1", "fail-1", "fail-137",
                "evict", "vanish", "nothing"]
TERMINAL_STEPS = st.lists(st.tuples(st.sampled_from(TERMINAL_OPS), st.integers(0, 1),
                                    st.integers(0, 90)), min_size=1, max_size=30)


def replay(steps: list[tuple[str, int, int]]) -> str | None:
    """Run one history through the engine against the oracle; the terminal phase it reached."""
    slots: list[Slot | None] = [Slot(f"uid-{i}-0") for i in range(2)]
    prior, now = state.EMPTY, T0
    failed_uids: list[str] = []          # incarnations that failed, in order (the oracle)
    terminal: evaluator.Verdict | None = None
    for serial, (op, i, seconds) in enumerate(steps, 1):
        before = slots[i]
        slots = step(slots, op, i, serial)
        after = slots[i]
        if (after is not None and after.phase == "Failed" and not after.evicted
                and (before is None or before.uid != after.uid or before.phase != "Failed")
                and after.uid not in failed_uids and after.exit != 0):
            failed_uids.append(after.uid)
        now += timedelta(seconds=seconds)
        objects = [s.obj(n) for n, s in enumerate(slots) if s is not None]
        result = evaluator.evaluate(TERMINAL_KIND, job(), objects, prior, now)
        prior = state.decode(state.encode(result.state)).state
        failures = len(failed_uids)
        if terminal is None:
            # the budget, as the history counts it: one use per failed incarnation, at most two
            assert result.state.budgets.get("crashes", 0) == min(failures, CRASHES), (
                failures, result.state.budgets)
            if failures > CRASHES:
                assert (result.verdict.phase, result.verdict.reason, result.verdict.final) == (
                    "Failed", "TooManyCrashes", True), result.verdict
            if result.verdict.phase in ("Succeeded", "Failed"):
                assert result.verdict.final
                terminal = result.verdict
        else:
            v = result.verdict
            assert (v.phase, v.reason, v.message, v.final) == (
                terminal.phase, terminal.reason, terminal.message, True), "a terminal verdict changed"
    return terminal.phase if terminal is not None else None


@settings(max_examples=300, deadline=None)
@given(TERMINAL_STEPS)
def test_budgets_and_terminal_verdicts_against_the_history(steps: list[tuple[str, int, int]]) -> None:
    replay(steps)


def test_the_histories_reach_terminal_verdicts_often_enough_to_test_them() -> None:
    """The property above is only as good as the histories that reach its checks: in a seeded
    sweep at least a third end Succeeded or Failed, and each outcome is common."""
    rng = random.Random(20261204)
    outcomes: dict[str | None, int] = {}
    for _ in range(400):
        steps = [(rng.choice(TERMINAL_OPS), rng.randrange(2), rng.randrange(91))
                 for _ in range(rng.randrange(1, 31))]
        outcome = replay(steps)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    terminal = outcomes.get("Failed", 0) + outcomes.get("Succeeded", 0)
    assert terminal >= 400 // 3, outcomes
    assert outcomes.get("Failed", 0) >= 40 and outcomes.get("Succeeded", 0) >= 40, outcomes
