"""Policies: events, actions and their budgets, a kind's recipes, policy ids, shadowed
policies."""
from __future__ import annotations

from collections import defaultdict

from rulec import nodes
from rulec.checks import filters, values
from rulec.checks.context import Context
from rulec.diagnostics import Note
from rulec.source import Span
from runtime import vocabulary


def policy(ctx: Context, p: nodes.Policy, k: nodes.Kind) -> None:
    e = p.event
    if e.task is not None:
        ctx.need_task(k, e.task.span, "a task-scoped event")
    elif e.name in vocabulary.TASK_EVENTS:
        ctx.need_task(k, e.span, f"`{vocabulary.EVENTS[e.name]}`")
    if e.to is not None:
        values.phase(ctx, e.to)
    if p.filter is not None:
        if e.name in vocabulary.JOB_EVENTS:
            ctx.report("invalid-filter", p.filter.span,
                       f"`{vocabulary.EVENTS[e.name]}` concerns the job: there is no pod to filter",
                       help="use a verdict condition for the job's own state")
        else:
            filters.filter_root(ctx, p.filter, k, failure=e.name in vocabulary.FAILURE_EVENTS)
    action(ctx, p.action, e, k)


def action(ctx: Context, a: nodes.Action, e: nodes.Event, k: nodes.Kind) -> None:
    event = vocabulary.EVENTS[e.name]
    verb = vocabulary.ACTIONS[a.verb]
    if a.verb == "restartPod" and e.name not in vocabulary.POD_EVENTS:
        ctx.report("action-not-allowed", a.span,
                   f"`restart pod` needs a pod event, and `{event}` has no pod",
                   help="restart the job or the task instead")
    elif a.verb in vocabulary.TASK_ACTIONS:
        if e.name in vocabulary.JOB_EVENTS:
            ctx.report("action-not-allowed", a.span,
                       f"`{verb}` needs a pod or task event, and `{event}` has no task")
        elif not k.has_task:
            ctx.report("action-not-allowed", a.span,
                       f"`{verb}` needs a task, but kind `{k.name.value}` declares "
                       "no `task`",
                       help='add `task label "..."` or `task <<expr>>` to the kind')
    if a.verb == "count" and (a.max is None or a.fallback is None):
        ctx.report("invalid-budget", a.span,
                   "`count` only counts: it needs `max N` and `then ACTION`, the action "
                   "taken once more than N occurrences were counted",
                   help="e.g. `count max 2 then fail job`")
    if a.max is not None:
        least = 0 if a.verb == "count" else 1
        if a.verb == "ignore":
            ctx.report("invalid-budget", a.max.span, "`ignore` counts nothing: `max` does "
                       "not apply")
        elif isinstance(a.max, nodes.Number) and a.max.value < least:
            ctx.report("value-out-of-range", a.max.span, f"`max` must be at least {least}")
        if a.per is not None and a.per.value == "task" and (
                e.name in vocabulary.JOB_EVENTS or not k.has_task):
            ctx.report("invalid-budget", a.per.span,
                       "`per task` needs an event with a task and a kind that declares "
                       "`task`")
        if a.per is not None and a.per.value == "pod" and e.name not in vocabulary.POD_EVENTS:
            ctx.report("invalid-budget", a.per.span,
                       f"`per pod` needs a pod event, and `{event}` has no pod")
    else:
        if a.doubling is not None:
            ctx.report("invalid-budget", a.doubling.span,
                       "`doubling` doubles the delay with each use of the budget, but there "
                       "is no `max`", help=f"add `max N`, e.g. `{verb} max 6 after 10s "
                                           "doubling up to 6m`")
        if a.fallback is not None:
            ctx.report("invalid-budget", a.fallback.span,
                       "`then` runs when the budget is spent, but there is no `max`",
                       help=f"add `max N` before `then`, e.g. `{verb} max 3 then ...`")
        if a.budget is not None:
            ctx.report("invalid-budget", a.budget.span, "`budget` names a budget, but "
                       "there is no `max`")
        if a.verb in vocabulary.RESTARTS:
            ctx.report("restart-without-budget", a.span,
                       f"`{verb}` has no budget and may repeat forever",
                       help=f"add `max N`, e.g. `{verb} max 3 then fail job`")
    if a.delay is not None and a.delay_cap is not None and a.delay_cap.seconds < a.delay.seconds:
        ctx.report("value-out-of-range", a.delay_cap.span,
                   "the delay's cap is shorter than the first delay")
    values.template(ctx, a.reason, vocabulary.VERDICT_PLACEHOLDERS, "an action")
    values.template(ctx, a.message, vocabulary.VERDICT_PLACEHOLDERS, "an action")
    if a.grow is not None:
        grow(ctx, a, e, k)
    supported(ctx, a, k)
    if a.fallback is not None:
        action(ctx, a.fallback, e, k)


# What a job-wide action only recorded leaves the job reading, while its pods run on.
_RECORDED = {"failJob": "Failed", "completeJob": "Succeeded", "terminateJob": "Failed"}


# The events a restart with more memory follows: a pod that failed (or was evicted), or a
# container the kubelet restarted in place (`restartPolicy: OnFailure`).
_GROWS_ON = frozenset({"podFailed", "podEvicted", "containerRestarted"})


def grow(ctx: Context, a: nodes.Action, e: nodes.Event, k: nodes.Kind) -> None:
    """`with memory * F up to MAX`: a restart, on a pod's failure, of a kind whose recipe for
    it writes the new sizes somewhere (a `resize` step); F above 1 (MAX is a quantity by the
    grammar)."""
    assert a.grow is not None
    verb = vocabulary.ACTIONS[a.verb]
    if a.verb not in vocabulary.RESTARTS or e.name not in _GROWS_ON:
        ctx.report("action-not-allowed", a.grow.span,
                   f"`with memory` raises the memory of a failed pod's containers before a "
                   f"restart; `{verb}` on `{vocabulary.EVENTS[e.name]}` is not one",
                   help="use it on `restart job|task|pod` after `on pod failed ...` or `on "
                        "container restarted ...`")
        return
    if not 1 < a.grow.factor <= 16:
        ctx.report("value-out-of-range", a.grow.span,
                   f"the factor must be above 1 and at most 16, not {a.grow.factor:g}")
    # every recipe the action may be done by (`when` ones too) must write the new sizes
    found: list[nodes.Recipe | None] = [r for r in k.recipes if r.verb == a.verb]
    if not any(r is not None and r.when is None for r in found):
        found.append(None)   # the default, which writes none
    for recipe in found:
        if recipe is None or not any(s.op == "resize" for s in recipe.steps):
            which = "" if recipe is None or recipe.when is None else \
                f" when `<<{recipe.when.text}>>`"
            ctx.report("action-unsupported", a.grow.span,
                       f"kind `{k.name.value}` cannot `{verb}` with more memory: its `{verb}`"
                       f"{which} writes no new size anywhere",
                       notes=() if recipe is None else (Note("its steps are here", recipe.span),),
                       help=f"add a `resize PATH` step (the job's pod template) to its `{verb}` "
                            "in `actions { ... }`, between stopping the pods and starting them "
                            "again (docs/language.md, Actions)")
            return


def supported(ctx: Context, a: nodes.Action, k: nodes.Kind) -> None:
    """R409: the kind can do the action (its `actions` block, else the default); R410: a
    job-wide action done by the default `record` only, which the author did not say."""
    if a.verb not in vocabulary.EFFECTS:
        return
    recipe = next((r for r in k.recipes if r.verb == a.verb and r.when is None), None)
    word = recipe.word if recipe is not None else vocabulary.DEFAULT_RECIPES.get(a.verb)
    verb = vocabulary.ACTIONS[a.verb]
    if recipe is None and word == "record" and a.verb in _RECORDED:
        ctx.report("action-only-records", a.span,
                   f"`{verb}` on kind `{k.name.value}` only records the verdict: the job reads "
                   f"{_RECORDED[a.verb]} while its pods run on",
                   help=f"say how in the kind's `actions {{ ... }}` (e.g. `{verb} -> set "
                        f"spec.suspend = true`), or `{verb} -> record` if recording is meant")
    if word != "unsupported":
        return
    if recipe is not None:
        ctx.report("action-unsupported", a.span,
                   f"kind `{k.name.value}` cannot `{verb}`: its `actions` say so",
                   notes=(Note("said here", recipe.span),))
    else:
        ctx.report("action-unsupported", a.span,
                   f"kind `{k.name.value}` has no way to `{verb}`",
                   help=f"say how in the kind's `actions {{ ... }}`, e.g. `{verb} -> set "
                        "spec.suspend = true` (docs/language.md, Actions)")


def _objects_step(ctx: Context, k: nodes.Kind, step: nodes.Step) -> None:
    """R412: `set ... on OBJECTS` writes other objects than the job, and not their status."""
    on = step.on
    assert on is not None and step.path is not None
    values.template(ctx, on.value, vocabulary.JOB_PLACEHOLDERS, "a label value")
    if (on.api_version.value, on.kind.value) == (k.api_version.value, k.kind.value):
        ctx.report("invalid-objects-step", on.span,
                   f"`on {on.api_version.value} {on.kind.value}` names the job's own kind: it "
                   "would write every job the label finds",
                   help=f"write the job's own field with `set {'.'.join(step.path.segments)} "
                        f"= ...`")
    elif step.path.segments[0] == "status":
        ctx.report("invalid-objects-step", step.path.span,
                   f"`set {'.'.join(step.path.segments)} on {on.kind.value}` would write the "
                   f"status of another controller's objects",
                   help="write a field of their spec or metadata, which their controller reads")


def recipes(ctx: Context, k: nodes.Kind) -> None:
    for r in k.recipes:
        verb = vocabulary.ACTIONS[r.verb]
        if r.verb not in vocabulary.EFFECTS:
            ctx.report("action-not-allowed", r.span, f"`{verb}` has no effect to describe")
            continue
        for step in r.steps:
            if step.op == "deletePods" and step.scope == "task" and not k.has_task:
                ctx.need_task(k, step.span, "`delete pods of task`")
            elif step.op == "deletePods" and step.scope == "pod" and r.verb != "restartPod":
                ctx.report("action-not-allowed", step.span,
                           f"`delete pod` deletes the pod an action is about, and `{verb}` "
                           "is about no pod", help="write `delete pods` (all of the job's) "
                           "or `delete pods of task`")
            elif step.op == "deletePods" and step.scope == "task" and \
                    r.verb not in vocabulary.TASK_ACTIONS:
                ctx.report("action-not-allowed", step.span,
                           f"`delete pods of task` needs an action about a task, and "
                           f"`{verb}` is not")
            elif step.op == "await" and step.when is not None:
                filters.condition(ctx, step.when, k)
            elif step.op == "resize" and r.verb not in vocabulary.RESTARTS:
                ctx.report("action-not-allowed", step.span,
                           f"`resize` writes the new sizes of a restart with more memory, and "
                           f"`{verb}` is no restart")
            elif step.op == "resize" and step.within is not None and not k.has_task:
                ctx.need_task(k, step.span, "`resize PATH[task]`")
            elif step.op == "set" and step.on is not None:
                _objects_step(ctx, k, step)
            elif step.op == "condition" and step.type is not None and not step.type.value:
                ctx.report("empty-value", step.type.span, "a condition type cannot be empty")
            elif step.op == "create":
                seen: dict[str, Span] = {}
                for key, value in step.body:
                    first = seen.setdefault(key.value, key.span)
                    if first is not key.span:
                        ctx.report("duplicate-clause", key.span,
                                   f"field `{key.value}` is given twice",
                                   notes=(Note("first given here", first),))
                    if not isinstance(value, str):
                        values.template(ctx, value, vocabulary.VERDICT_PLACEHOLDERS, "a created object")


def policy_ids(ctx: Context, k: nodes.Kind) -> None:
    counters: dict[str, int] = defaultdict(int)
    firsts: dict[str, Span] = {}
    for p in (*k.policies, *(p for e in ctx.extensions(k) for p in e.policies)):
        n = counters[p.event.name]
        counters[p.event.name] += 1
        policy_id = p.id.value if p.id else f"{p.event.name}#{n}"
        span = p.id.span if p.id else p.span
        first = firsts.setdefault(policy_id, span)
        if first is not span:
            ctx.report("duplicate-name", span, f"policy id `{policy_id}` is used twice",
                       help="policy ids key the stored state; give each policy its own "
                            "`as \"id\"`",
                       notes=(Note("first used here", first),))


def shadowing(ctx: Context, k: nodes.Kind) -> None:
    policies = (*k.policies, *(p for e in ctx.extensions(k) for p in e.policies))
    for i, later in enumerate(policies):
        for earlier in policies[:i]:
            if _catches_all(earlier, later):
                ctx.report(
                    "shadowed-policy", later.span, "this policy is never used",
                    help="policies are tried in order; put the narrower one first",
                    notes=(Note("this earlier policy catches every "
                                f"`{vocabulary.EVENTS[later.event.name]}` first", earlier.span),))
                break


def task_failures(ctx: Context, k: nodes.Kind) -> None:
    """R411: a `task failed` policy that acts on the failure a pod policy is retrying."""
    policies = (*k.policies, *(p for e in ctx.extensions(k) for p in e.policies))
    for p in policies:
        if p.event.name != "taskFailed" or p.action.verb in ("ignore", "count"):
            continue
        task = p.event.task.value if p.event.task else None
        retry = next((q for q in policies if q.event.name == "podFailed"
                      and q.action.verb in vocabulary.RESTARTS and q.action.max is not None
                      and (task is None or q.event.task is None or q.event.task.value == task)),
                     None)
        if retry is None:
            continue
        scope = f'task "{task}"' if task else "a task"
        ctx.report("task-failure-preempts-retries", p.span,
                   f"{scope} fails with its first failed pod: this policy takes "
                   f"`{vocabulary.ACTIONS[p.action.verb]}` before any retry of the pod policy "
                   "could help",
                   help=f"to act when the retries are spent, write it as the pod policy's "
                        f"fallback: `... then {vocabulary.ACTIONS[p.action.verb]}`",
                   notes=(Note("the pod policy that retries", retry.span),))


def _catches_all(earlier: nodes.Policy, later: nodes.Policy) -> bool:
    """Whether `earlier` matches every case `later` would (same event and scope, no filter)."""
    a, b = earlier.event, later.event
    if a.name != b.name or earlier.filter is not None or b.evicted and not a.evicted:
        return False
    if (a.task.value if a.task else None) != (b.task.value if b.task else None):
        return False
    if a.for_ is not None and (b.for_ is None or a.for_.seconds > b.for_.seconds):
        return False
    if a.to is not None and (b.to is None or a.to.value.lower() != b.to.value.lower()):
        return False
    return True
