"""Budgets: how many times a policy's action may run, counted in the state under a key, and the
delays that double with each use.

`max N` counts runs per key (the policy id, or `budget "name"` shared between policies; `per
task` and `per pod` add the task or the pod); `max <<expr>>` reads the limit from the job, and
an unreadable limit is spent. When a budget is spent the policy's fallback runs instead
(`runtime.evaluation.decisions`), or the action is reported spent.
"""

from __future__ import annotations

from runtime import describe, plan
from runtime.evaluation.ledger import Inputs, Ledger
from runtime.evaluation.outcomes import BudgetUse, Target


def key(budget: plan.Budget, target: Target) -> str:
    """The budget's key; `per task` and `per pod` add the task or the pod (name, else uid)."""
    if budget.per == "task" and target.task:
        return f"{budget.key}[{target.task}]"
    if budget.per == "pod" and (target.pod or target.uid):
        return f"{budget.key}[{target.pod or target.uid}]"
    return budget.key


def limit(inputs: Inputs, ledger: Ledger, budget: plan.Budget) -> int:
    """A budget's `max`: a number, or read from the job; unreadable is spent (0)."""
    if isinstance(budget.max, int):
        return budget.max
    value = inputs.search(budget.max, inputs.job)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
            or value != int(value):
        problem = (f"{budget.max.span}: <<{budget.max.source}>>: {value!r} is not a budget (a "
                   "whole number, 0 or more); the budget counts as spent")
        if problem not in ledger.problems:   # read again when a delay asks whether any is left
            ledger.problems.append(problem)
        return 0
    return int(value)


def draw(inputs: Inputs, ledger: Ledger, budget: plan.Budget,
         target: Target) -> tuple[bool, BudgetUse]:
    """Use the budget once if it has a use left: whether it had, and its uses after."""
    k = key(budget, target)
    most = limit(inputs, ledger, budget)
    used = ledger.budgets.get(k, 0)
    if used >= most:
        return False, BudgetUse(k, used, most)
    ledger.budgets[k] = used + 1
    return True, BudgetUse(k, used + 1, most)


def spent(inputs: Inputs, ledger: Ledger, budget: plan.Budget | None, target: Target) -> bool:
    """Whether the budget has no use left (nothing is drawn): a spent budget's action does not
    wait out its delay, its fallback (or the report that it is spent) comes at once."""
    return budget is not None and ledger.budgets.get(key(budget, target), 0) >= limit(
        inputs, ledger, budget)


# The longest delay: a due time must stay a date (year 9999 at most) that the state can write.
MAX_DELAY = 100 * 365 * 86400.0


def delay(ledger: Ledger, action: plan.Action, target: Target) -> float:
    """`after D`, or with `doubling` D times 2 to the budget's uses so far (up to the cap), and
    never more than 100 years."""
    seconds = float(action.delay or 0)
    if action.doubling and action.budget is not None:
        used = ledger.budgets.get(key(action.budget, target), 0)
        seconds *= 2 ** min(used, 40)
        if action.delay_cap is not None:
            seconds = min(seconds, action.delay_cap)
    return min(seconds, MAX_DELAY)


def spent_reason(action: plan.Action, use: BudgetUse, event: str) -> str:
    verb = describe.action(action.action).split()[0]
    return f"{verb} budget {use.used}/{use.max} for {describe.event(event)} spent"
