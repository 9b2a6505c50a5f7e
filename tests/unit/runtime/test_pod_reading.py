"""Admission and evaluation read a pod alike: its task, its `primary pods` filter and JMESPath
truthiness, over random pods, through the public entry points (`evaluator.evaluate`,
`mutator.mutate`) of one plan."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import T0, action, policy, span
from runtime import evaluator, mutator, plan

TASKS = [
    {"label": "role"},
    {"expr": "spec.priority", "span": span(1)},
    {"expr": "metadata.labels.role", "span": span(1)},
    {"expr": "spec.containers[0].name", "span": span(1)},
    {"expr": "spec.tags", "span": span(1)},
]

LEAVES = [
    {"op": "label", "key": "role", "values": None, "negate": False},
    {"op": "label", "key": "role", "values": ["master"], "negate": False},
    {"op": "label", "key": "role", "values": ["master"], "negate": True},
    {"op": "task", "values": ["master", "3"], "negate": False},
    {"op": "task", "values": ["worker"], "negate": True},
    {"op": "jmespath", "expr": "spec.priority > `2`", "span": span(1)},
    {"op": "jmespath", "expr": "spec.tags", "span": span(1)},
    {"op": "jmespath", "expr": "metadata.labels.role", "span": span(1)},
    {"op": "podReason", "values": ["Evicted"], "negate": True},
    {"op": "podReason", "values": ["Evicted"], "negate": False},
    {"op": "condition", "type": "Ready", "reasons": [], "negate": False},
    {"op": "restarts", "cmp": ">=", "value": 0, "container": None},
    {"op": "exitCode", "codes": [0], "ranges": [], "negate": True, "container": None},
    {"op": "containerReason", "values": ["Completed"], "negate": True, "container": None},
]

filters = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.one_of(
        st.builds(lambda args: {"op": "and", "args": args}, st.lists(inner, max_size=3)),
        st.builds(lambda args: {"op": "or", "args": args}, st.lists(inner, max_size=3)),
        st.builds(lambda arg: {"op": "not", "arg": arg}, inner)),
    max_leaves=5)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 5), st.sampled_from(
    ["", "master", "worker", "3", "x y"]))
values = st.one_of(scalars, st.lists(scalars, max_size=2),
                   st.dictionaries(st.sampled_from(["a", "b"]), scalars, max_size=2))


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    labels = draw(st.dictionaries(st.sampled_from(["role", "app"]),
                                  st.sampled_from(["master", "worker", "", "3"]), max_size=2))
    spec: dict[str, Any] = {"containers": [{"name": draw(st.sampled_from(["main", "master"])),
                                            "image": "i"}]}
    for key in ("priority", "tags"):
        if draw(st.booleans()):
            spec[key] = draw(values)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p-0", "namespace": "ns", "uid": "u-1", "labels": labels,
                         "creationTimestamp": "2024-05-01T11:00:00Z",
                         "ownerReferences": [{"apiVersion": "x.dev/v1", "kind": "Thing",
                                              "name": "j", "uid": "j-1", "controller": True}]},
            "spec": spec}


def _plan(task: dict[str, Any], primary: dict[str, Any]) -> plan.Plan:
    kind = {"name": "thing", "span": span(1), "group": "x.dev", "version": "v1", "kind": "Thing",
            "plural": "things", "apiVersion": "x.dev/v1", "pods": {"owned": True, "labels": {}},
            "task": task, "primaryPods": primary, "primaryContainers": None,
            "verdicts": [
                {"span": span(2), "phase": "Running", "reason": None, "message": None,
                 "when": {"op": "pods", "quant": "any", "task": None, "state": None,
                          "filter": primary, "for": None}},
                {"span": span(3), "phase": "Pending", "when": None, "reason": None,
                 "message": None}],
            # the event that says which task a pod is: a policy must listen for it
            "policies": [policy("podPending", action("ignore"))], "status": {}}
    annotate = {"op": "annotate", "span": span(4), "key": "task", "value": ["<", {"var": "task"}, ">"]}
    mark = {"op": "annotate", "span": span(5), "key": "primary", "value": ["yes"]}
    return plan.load({"planVersion": 1, "files": [], "kinds": [kind], "injections": [
        {"name": "task", "span": span(4), "kinds": ["thing"], "match": None, "ops": [annotate],
         "completionContainers": None},
        {"name": "primary", "span": span(5), "kinds": ["thing"], "match": {"op": "primary"},
         "ops": [mark], "completionContainers": None}]})


JOB = {"apiVersion": "x.dev/v1", "kind": "Thing",
       "metadata": {"name": "j", "namespace": "ns", "uid": "j-1"}}


def _evaluated(compiled: plan.Plan, pod: dict[str, Any]) -> tuple[str | None, bool] | str:
    """What evaluation reads; an expression that fails on the pod (read as null there)."""
    result = evaluator.evaluate(compiled, JOB, [pod], None, T0)
    [event] = [e for e in result.events if e.event == "podPending"]
    if result.problems:
        return result.problems[0].split(": ")[0]
    return event.task, result.verdict.phase == "Running"


def _admitted(compiled: plan.Plan, pod: dict[str, Any]) -> tuple[str | None, bool] | str:
    """What admission reads; an expression that fails on the pod (the injection's failure)."""
    try:
        mutation = mutator.mutate(mutator.prepare(compiled), pod, None, "ns")
    except mutator.MutationError as err:
        return str(err.span)
    task = next(op["value"] for op in mutation.patch
                if op["path"] in ("/metadata/annotations", "/metadata/annotations/task"))
    task = task["task"] if isinstance(task, dict) else task
    return task[1:-1] or None, "primary" in mutation.applied


@settings(max_examples=500, deadline=None)
@given(pod=pods(), task=st.sampled_from(TASKS), primary=filters)
def test_eval_and_mutate_agree_on_task_and_filter(pod: dict[str, Any], task: dict[str, Any],
                                                  primary: dict[str, Any]) -> None:
    """The same task and filter result, or the same expression failing (each with its own
    policy: evaluation reads it as null and notes it, admission fails the injection)."""
    compiled = _plan(task, primary)
    assert _admitted(compiled, pod) == _evaluated(compiled, pod)


@pytest.mark.parametrize("priority, task", [(3, "3"), ("3", "3"), (None, None), ("", None),
                                            (True, "true"), ([1, "a"], '[1,"a"]')])
def test_a_task_read_by_an_expression_is_its_text(priority: Any, task: str | None) -> None:
    """`task <<spec.priority>>`: a number is the task "3" at admission as in evaluation."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                        "ownerReferences": [{"apiVersion": "x.dev/v1", "kind": "Thing",
                                             "name": "j", "uid": "j-1"}]},
           "spec": {"containers": [{"name": "main"}], "priority": priority}}
    compiled = _plan({"expr": "spec.priority", "span": span(1)},
                     {"op": "task", "values": ["3"], "negate": False})
    assert _admitted(compiled, pod) == _evaluated(compiled, pod) == (task, task == "3")
