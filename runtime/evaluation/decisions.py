"""The actions decided for the policies that matched: run now or scheduled for later, a budget
drawn on or its fallback taken, and what a run action leaves the job with (a terminal verdict
that holds, a restart under way, tasks failed, pods we stopped).

Delayed actions come here too, each evaluation: one whose pod recovered (or whose job ended) is
cancelled, one that is due runs, the others wait on in the ledger.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from runtime import conditions, describe, functions, plan, pods, resources, state, vocabulary
from runtime.evaluation import budgets, verdicts
from runtime.evaluation.ledger import Inputs, Ledger
from runtime.evaluation.occurrences import Occurrence
from runtime.evaluation.outcomes import Action, BudgetUse, Target

TERMINAL = {"failJob": "Failed", "completeJob": "Succeeded", "terminateJob": "Failed"}
STOPS_PODS = ("restartJob", "abortJob", "terminateJob")
FAILURES = ("podFailed", "podEvicted", "podDeleted", "containerRestarted")


def take(inputs: Inputs, ledger: Ledger, policy: plan.Policy, name: str, occ: Occurrence,
         w: conditions.Witness) -> None:
    """Run or schedule the policy's action for an occurrence."""
    action = action_of(policy)
    if action.action == "ignore":
        return
    variables = inputs.variables(w, event=name)
    if variables.get("task") is None:
        variables["task"] = occ.task
    pod = w.decide()[0]
    target = inputs.target(occ.task, pod, occ.digest)
    if action.delay and not budgets.spent(inputs, ledger, action.budget, target):
        if any(d.policy == policy.id and d.digest == occ.digest and d.task == target.task
               for d in ledger.delayed):
            return  # already waiting for this pod
        due = inputs.now + timedelta(seconds=budgets.delay(ledger, action, target))
        keep = {k: v for k, v in variables.items()
                if k in ("container", "container_reason", "exit_code", "pod_reason", "restarts")
                and v is not None}
        ledger.delayed.append(state.Delayed(policy.id, name, due, target.pod, occ.digest,
                                            target.task, pod.restarts if pod else 0, keep))
        reason = inputs.text(action.reason, variables)
        message = inputs.text(action.message, variables)
        ledger.actions.append(Action(action.action, "scheduled", policy.id, name, str(policy.span),
                                     reason, message, target, due))
        if action.action in vocabulary.RESTARTS and not policy.audit:
            _restarting(inputs, ledger, policy, name, action.action, reason, message, target, due)
        return
    fire(inputs, ledger, policy, name, action, variables, target, None, None)


def fire(inputs: Inputs, ledger: Ledger, policy: plan.Policy, name: str, action: plan.Action,
         variables: dict[str, Any], target: Target, due: datetime | None,
         spent: tuple[plan.Action, BudgetUse] | None,
         given_up: tuple[str, str] | None = None) -> None:
    """Run an action now, spending its budget or falling back when the budget is gone.
    `given_up`: the action it falls back from could not be done (which, and why)."""
    use = None
    if action.budget is not None:
        granted, use = budgets.draw(inputs, ledger, action.budget, target)
        if not granted:
            if action.fallback is not None:
                fire(inputs, ledger, policy, name, action.fallback, variables, target, due,
                     (action, use))
            else:
                ledger.actions.append(Action(action.action, "spent", policy.id, name,
                                             str(policy.span),
                                             budgets.spent_reason(action, use, name), None,
                                             target, due, use))
            return
        variables = dict(variables, budget_used=use.used, budget_max=use.max)
    reason = inputs.text(action.reason, variables)
    message = inputs.text(action.message, variables)
    if spent is not None:
        spent_action, spent_use = spent
        variables = dict(variables, budget_used=spent_use.used, budget_max=spent_use.max)
        reason = (inputs.text(action.reason, variables)
                  or budgets.spent_reason(spent_action, spent_use, name))
        message = inputs.text(action.message, variables) or (
            f"{_happened(name, target)}: {describe.action(spent_action.action)} budget "
            f"{spent_use.used}/{spent_use.max} spent ({policy.span})")
        use = use or spent_use
    if given_up is not None:
        dropped, why = given_up
        message = message or (f"{_happened(name, target)}: {describe.action(dropped)} given up "
                              f"({why}): {describe.action(action.action)} ({policy.span})")
    sizes = _grown(inputs, action, target)
    if sizes and message is None:
        message = resources.said(sizes) + (f", {use.used} of {use.max}" if use else "")
    if policy.audit:   # decided and recorded; nothing done, nothing held
        ledger.actions.append(Action(action.action, "audited", policy.id, name, str(policy.span),
                                     reason, message, target, due, use, sizes))
        return
    status = "counted" if action.action == "count" else "run"
    ledger.actions.append(Action(action.action, status, policy.id, name, str(policy.span),
                                 reason, message, target, due, use, sizes))
    _consequences(inputs, ledger, action.action, policy, name, reason, message, target)


def _grown(inputs: Inputs, action: plan.Action, target: Target) -> tuple[resources.Resize, ...]:
    """A restart with more memory: the new sizes of the target pod's containers that ran out
    of memory (none without `with memory`, or without such a container)."""
    if action.grow is None or target.uid is None:
        return ()
    pod = next((p for p in inputs.pods if p.uid == target.uid), None)
    if pod is None:
        return ()
    return resources.grown(pod.obj, action.grow.factor, action.grow.max_bytes)


def action_of(policy: plan.Policy) -> plan.Action:
    """The policy's action; in audit, with budgets of their own (`audit/KEY`), so what an
    audit counted is not spent when the policy is enforced."""
    return _audit_budgets(policy.action) if policy.audit else policy.action


def _audit_budgets(action: plan.Action) -> plan.Action:
    budget = action.budget
    return replace(
        action, budget=None if budget is None else replace(budget, key=f"audit/{budget.key}"),
        fallback=None if action.fallback is None else _audit_budgets(action.fallback))


def _consequences(inputs: Inputs, ledger: Ledger, action: str, policy: plan.Policy, name: str,
                  reason: str | None, message: str | None, target: Target) -> None:
    """What a run action leaves the job with: a terminal verdict, a restart under way, tasks
    failed or no longer, and the pods it stops (which then raise nothing and count in no
    verdict)."""
    if action in TERMINAL and ledger.final is None:
        phase = TERMINAL[action]
        said = verdicts.rules_verdict(inputs, ledger)
        cause = None
        if phase == "Failed" and inputs.kind.causes:
            pod = next((p for p in inputs.pods if target.uid is not None and p.uid == target.uid),
                       None)
            found = verdicts.cause_of(inputs, ledger.snapshot, pod, policy.cause)
            cause = found.name if found is not None else None
        if reason is None and message is None and said.phase == phase:
            reason, message = said.reason, said.message  # it says why
            if said.cause is not None and reason == verdicts.CAUSE_REASON + said.cause:
                reason = None  # a reason the rules' cause gave: this failure's cause gives it
        default = verdicts.CAUSE_REASON + cause if cause else name[0].upper() + name[1:]
        ledger.final = state.Final(
            phase, reason or default,
            message or f"{_happened(name, target)}: {describe.action(action)} ({policy.span})",
            str(policy.span), "policy", inputs.run, cause)
    if action in vocabulary.RESTARTS:
        _restarting(inputs, ledger, policy, name, action, reason, message, target, None)
    if action == "restartJob":
        ledger.final = None  # the job starts again
        ledger.failed_tasks = frozenset()
    elif action == "restartTask" and target.task in ledger.failed_tasks:
        ledger.failed_tasks = ledger.failed_tasks - {target.task}
    elif action == "failTask" and target.task is not None:
        ledger.failed_tasks = ledger.failed_tasks | {target.task}
    doomed: tuple[pods.Pod, ...] | list[pods.Pod]
    if action in STOPS_PODS:
        doomed = inputs.pods
    elif action in ("restartTask", "failTask"):
        doomed = [p for p in inputs.pods if p.task == target.task]
    elif action == "restartPod":
        doomed = [p for p in inputs.pods if p.uid == target.uid]
    else:
        doomed = []
    for p in doomed:
        ledger.records[p.digest] = ledger.records[p.digest]._replace(ours=True)


def _restarting(inputs: Inputs, ledger: Ledger, policy: plan.Policy, name: str, action: str,
                reason: str | None, message: str | None, target: Target,
                due: datetime | None) -> None:
    """Note the restart under way (the first one speaks for the job while it lasts)."""
    if ledger.restarting is not None:
        return
    said = verdicts.rules_verdict(inputs, ledger)
    if reason is None and message is None and said.phase in ("Restarting", "Failed"):
        reason, message = said.reason, said.message  # it says why
    when = f" at {functions.rfc3339(due)}" if due is not None else ""
    ledger.restarting = state.Restarting(
        reason or name[0].upper() + name[1:],
        message or f"{_happened(name, target)}: {describe.action(action)}{when} ({policy.span})",
        str(policy.span))


def run_delayed(inputs: Inputs, ledger: Ledger) -> None:
    """The stored delayed actions: cancelled when the job ended or their pod recovered, run
    when due, else kept waiting."""
    by_id = {p.id: p for p in inputs.kind.policies}
    for d in inputs.stored.delayed:
        policy = by_id.get(d.policy)
        target = Target(inputs.job_vars["job"] or "", inputs.job_vars["namespace"], d.task, d.pod,
                        d.digest)
        if policy is None:
            continue  # the rules changed: the policy is gone
        current = _current(inputs, d)
        if ledger.final is not None or _recovered(inputs, ledger, d, current):
            ledger.actions.append(Action(policy.action.action, "cancelled", policy.id, d.event,
                                         str(policy.span), None, None, target, d.due))
            continue
        if d.due > inputs.now:
            ledger.delayed.append(d)
            continue
        w = conditions.Witness(((current, None),) if current is not None else ())
        variables = {**inputs.variables(w, event=d.event), "task": d.task, "pod": d.pod,
                     **d.variables}
        fire(inputs, ledger, policy, d.event, action_of(policy), variables,
             inputs.target(d.task, current, d.digest, d.pod), d.due, None)


def let_go(kind: plan.Kind, stored: state.State) -> state.State:
    """The stored state without what the actions given up held: their pods are no longer ours
    (their later events are seen again), a restart or a terminal verdict they made is over."""
    if not stored.released:
        return stored
    rules = {p.id: str(p.span) for p in kind.policies}
    every = any(r.policy is None for r in stored.released)
    gone = {d for r in stored.released for d in r.targets}
    held = {rules.get(r.policy or "") for r in stored.released}
    pods_ = {d: r._replace(ours=False) if r.ours and (every or d in gone) else r
             for d, r in stored.pods.items()}
    restarting = stored.restarting
    if restarting is not None and (every or restarting.rule in held):
        restarting = None
    final = stored.final
    if final is not None and final.by == "policy" and final.rule in held:
        final = None
    return replace(stored, pods=pods_, restarting=restarting, final=final)


def run_released(inputs: Inputs, ledger: Ledger) -> None:
    """The fallback of each action given up (`restart pod max 3 then fail job`: a restart that
    cannot be done fails the job), as if its budget were spent."""
    by_id = {p.id: p for p in inputs.kind.policies}
    for r in inputs.stored.released:
        policy = by_id.get(r.policy or "")
        if policy is None:
            continue   # every action at once, or the rules changed: nothing to fall back on
        action: plan.Action | None = policy.action
        while action is not None and action.action != r.action:
            action = action.fallback
        fallback = action.fallback if action is not None else None
        target = Target(inputs.job_vars["job"] or "", inputs.job_vars["namespace"], r.task,
                        r.pod, r.digest)
        if fallback is None or ledger.final is not None:
            continue
        current = next((p for p in inputs.pods if p.digest == r.digest), None)
        w = conditions.Witness(((current, None),) if current is not None else ())
        variables = {**inputs.variables(w, event=policy.event), "task": r.task, "pod": r.pod}
        fire(inputs, ledger, policy, policy.event, fallback, variables, target, None, None,
             given_up=(r.action, r.why))


def _current(inputs: Inputs, d: state.Delayed) -> pods.Pod | None:
    """The delayed action's pod now: the same incarnation, else a replacement of that name."""
    same = next((p for p in inputs.pods if p.digest == d.digest), None)
    if same is not None or d.pod is None:
        return same
    return next((p for p in inputs.pods if p.name == d.pod), None)


def _recovered(inputs: Inputs, ledger: Ledger, d: state.Delayed, current: pods.Pod | None) -> bool:
    """podPending: the pod left Pending (checked every time). Failures: checked at the due
    time, the pod (or its replacement) runs or succeeded cleanly, with no restart since."""
    if d.event == "podPending":
        return current is None or current.digest != d.digest or not current.is_("pending")
    if d.due > inputs.now:
        return False
    if d.event == "taskFailed":
        return ledger.snapshot.task_states().get(d.task or "") != "failed"
    if d.event not in FAILURES or current is None:
        return False
    if current.digest == d.digest and current.restarts > d.restarts:
        return False
    return _healthy(current)


def _healthy(p: pods.Pod) -> bool:
    """Running or succeeded, not on its way out, no counted container failing or waiting."""
    if p.phase not in ("Running", "Succeeded") or p.evicted or p.terminating:
        return False
    for c in p.counted:
        if c.state == "waiting" and c.reason not in (None, "ContainerCreating", "PodInitializing"):
            return False
        if c.state == "terminated" and c.exit_code not in (0, None):
            return False
    return True


def _happened(name: str, target: Target) -> str:
    words = describe.event(name)
    if name.startswith("pod") and target.pod:
        return f"pod {target.pod} " + words.removeprefix("pod ")
    if name.startswith("container") and target.pod:
        return f"pod {target.pod}: {words}"
    if name.startswith("task") and target.task:
        return f"task {target.task} " + words.removeprefix("task ")
    return words
