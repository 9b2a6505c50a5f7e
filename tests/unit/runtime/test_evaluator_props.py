"""Properties over random pod histories: an action is taken once per pod incarnation, budgets are
never exceeded, evaluating the same inputs again (with the state stored as JSON) does nothing, a
terminal verdict never changes back, and a count budget acts exactly once when exceeded.
"""

from __future__ import annotations

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
    that exceeds the budget, and the job is failed from then on."""
    slots: list[Slot | None] = [Slot(f"uid-{i}-0") for i in range(SLOTS)]
    prior = state.EMPTY
    now = T0
    failures = counted = failed = 0
    for serial, (op, i, seconds) in enumerate(steps, 1):
        slots = step(slots, op, i, serial)
        now += timedelta(seconds=seconds)
        objects = [s.obj(n) for n, s in enumerate(slots) if s is not None]
        result = evaluator.evaluate(COUNT_KIND, job(), objects, prior, now)
        prior = state.decode(state.encode(result.state)).state
        taken = [e for e in result.events if e.event == "podFailed" and e.policy == "failures"]
        failures += len(taken)
        counted += sum(a.status == "counted" for a in result.actions)
        runs = [a for a in result.actions if a.action == "failJob"]
        failed += len(runs)
        if runs:
            assert failures == COUNTED + 1, "the fallback ran before the budget was exceeded"
        assert failures <= COUNTED + 1, "counting went on after the job failed"
        assert (result.verdict.phase == "Failed") == (failed == 1)
    assert counted == min(failures, COUNTED)
    assert failed == (1 if failures > COUNTED else 0)
