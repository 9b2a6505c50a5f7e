"""Plan conditions and filters written back in the rules language, for explanations and messages.

`rulec eval --explain` and the evaluator's budget messages cite what a rule says; rendering the
plan back to (approximately) its source text keeps those messages readable without the compiler.
"""

from __future__ import annotations

import json
from typing import Any

from runtime import plan, vocabulary


def event(name: str) -> str:
    """`podEvicted` -> `pod evicted`, `jobRunningLongerThan` -> `job running longer than`."""
    return vocabulary.EVENTS[name]


def action(name: str) -> str:
    """`restartJob` -> `restart job`."""
    return vocabulary.ACTIONS[name]


def _strs(values: Any) -> str:
    return "[" + ", ".join(json.dumps(v) for v in sorted(values)) + "]"


def _codes(f: plan.ExitCode) -> str:
    items = [str(c) for c in sorted(f.codes)] + [f"{lo}..{hi}" for lo, hi in f.ranges]
    if len(items) == 1 and not f.negate:
        return items[0]
    return ("not in [" if f.negate else "in [") + ", ".join(items) + "]"


def _in(values: Any, negate: bool) -> str:
    if len(values) == 1 and not negate:
        return json.dumps(next(iter(values)))
    return ("not in " if negate else "in ") + _strs(values)


def filter(f: Any) -> str:
    """A pod filter (or an injection's match filter) as rules text."""
    if isinstance(f, plan.And):
        return " and ".join(_group(a) for a in f.args)
    if isinstance(f, plan.Or):
        return " or ".join(_group(a) for a in f.args)
    if isinstance(f, plan.Not):
        return "not " + _group(f.arg)
    if isinstance(f, plan.ExitCode):
        return _scoped(f.container, f"exit {_codes(f)}")
    if isinstance(f, plan.ContainerReason):
        return _scoped(f.container, f"reason {_in(f.values, f.negate)}")
    if isinstance(f, plan.PodReason):
        return f"pod reason {_in(f.values, f.negate)}"
    if isinstance(f, plan.PodCondition):
        text = f"condition {json.dumps(f.type)}"
        if f.statuses != {"True"}:
            text += f" in {_strs(f.statuses)}" if len(f.statuses) > 1 else \
                f" = {json.dumps(next(iter(f.statuses)))}"
        if f.reasons:
            text += f" reason {_in(f.reasons, False)}"
        return ("not " + text) if f.negate else text
    if isinstance(f, plan.TaskIs):
        return f"task {_in(f.values, f.negate)}"
    if isinstance(f, plan.Restarts):
        return _scoped(f.container, f"restarts {f.cmp} {f.value}")
    if isinstance(f, plan.LabelIs):
        word = "annotation" if f.annotation else "label"
        test = "exists" if f.values is None else f"= {_strs(f.values)}" if len(f.values) > 1 else \
            f"= {json.dumps(next(iter(f.values)))}"
        return ("not " if f.negate else "") + f"{word} {json.dumps(f.key)} {test}"
    if isinstance(f, plan.JmesPath):
        return f"where <<{f.expr.source}>>"
    if isinstance(f, plan.NamespaceIs):
        return f"namespace {_in(f.values, f.negate)}"
    if isinstance(f, plan.NamespaceLabel):
        return filter(plan.LabelIs(f.key, f.values, f.negate)).replace("label", "namespace label", 1)
    if isinstance(f, plan.IsPrimary):
        return "primary"
    return repr(f)


def _scoped(container: str | None, text: str) -> str:
    return f"container {json.dumps(container)} {text}" if container else text


def _group(f: Any) -> str:
    text = filter(f) if not _is_condition(f) else condition(f)
    return f"({text})" if isinstance(f, (plan.And, plan.Or)) else text


def _is_condition(c: Any) -> bool:
    return isinstance(c, (plan.Pods, plan.Count, plan.TaskState, plan.TaskCount, plan.JobAge))


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _scope(task: str | None, state: str | None, f: Any) -> str:
    text = f" of task {json.dumps(task)}" if task else ""
    text += f" {vocabulary.POD_STATE_WORDS.get(state, state)}" if state else ""
    text += f" {filter(f)}" if f is not None else ""
    return text


def template(t: plan.Template) -> str:
    out = []
    for part in t:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, plan.Var):
            out.append("{" + part.name + "}")
        else:
            out.append("<<" + part.source + ">>")
    return "".join(out)


def condition(c: Any) -> str:
    """A verdict condition as rules text."""
    if isinstance(c, plan.And):
        return " and ".join(_cgroup(a) for a in c.args)
    if isinstance(c, plan.Or):
        return " or ".join(_cgroup(a) for a in c.args)
    if isinstance(c, plan.Not):
        return "not " + _cgroup(c.arg)
    if isinstance(c, plan.JmesPath):
        return f"<<{c.expr.source}>>"
    if isinstance(c, plan.Pods):
        head = {"any": "any pod", "all": "all pods", "none": "no pod"}[c.quant]
        tail = f" for {_duration(c.for_seconds)}" if c.for_seconds is not None else ""
        return head + _scope(c.task, c.state, c.filter) + tail
    if isinstance(c, plan.Count):
        return f"count pods{_scope(c.task, c.state, c.filter)} {c.cmp} {template(c.value)}"
    if isinstance(c, plan.TaskCount):
        return f"count tasks{' ' + c.state if c.state else ''} {c.cmp} {template(c.value)}"
    if isinstance(c, plan.TaskState):
        if c.task:
            return f"task {json.dumps(c.task)} {c.state}"
        return f"{'any task' if c.quant == 'any' else 'all tasks'} {c.state}"
    if isinstance(c, plan.JobAge):
        return f"job running longer than {_duration(c.longer_than)}"
    return repr(c)


def _cgroup(c: Any) -> str:
    text = condition(c)
    return f"({text})" if isinstance(c, (plan.And, plan.Or)) else text


def policy(p: plan.Policy) -> str:
    """`on pod failed exit 137 -> restart pod`."""
    head = "on "
    if p.task and p.event.startswith("task"):
        head += f"task {json.dumps(p.task)} " + event(p.event).removeprefix("task ")
    else:
        head += (f"task {json.dumps(p.task)} " if p.task else "") + event(p.event)
        head += " or evicted" if p.evicted else ""
    if p.to:
        head += f" to {p.to}"
    if p.for_seconds is not None:
        head += f" {_duration(p.for_seconds)}" if p.event == "jobRunningLongerThan" else \
            f" for {_duration(p.for_seconds)}"
    if p.filter is not None:
        head += " " + filter(p.filter)
    return f"{head} -> {action(p.action.action)}"
