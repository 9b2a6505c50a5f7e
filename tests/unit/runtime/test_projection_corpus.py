"""What the controller's cache keeps is enough for every rule in the repository.

Two oracles that do not share the projection's own walk:
- the plan's JSON, read as docs/plan.md defines it: every `expr` anywhere in a kind, evaluated
  against the pod under `filter`, `primaryPods` and the task expression, else against the job.
  Each path it reads must be kept by the projection of its object;
- evaluation itself: the suites' own jobs and pods, their values changed at random and padded
  with fields no rule reads, evaluated for several steps with the stored state carried from step
  to step, whole and projected, give the same verdicts, actions, budgets and state.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import evaluator, plan, projection, state
from tests.unit.runtime import corpus

PLANS = corpus.plans()


def plan_expressions(node: Any, context: str = projection.JOB) -> Iterator[tuple[str, str]]:
    """(what it reads, expression text) of every `expr` in a plan JSON node (docs/plan.md)."""
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            yield context, node["expr"]
        for key, value in node.items():
            pod = key in ("filter", "primaryPods") or (key == "task" and isinstance(value, dict))
            yield from plan_expressions(value, projection.POD if pod else context)
    elif isinstance(node, list):
        for item in node:
            yield from plan_expressions(item, context)


def kept(tree: projection.Tree, path: tuple[str, ...]) -> bool:
    for key in path:
        if tree is projection.WHOLE:
            return True
        assert isinstance(tree, dict)
        if key not in tree:
            return False
        tree = tree[key]
    return tree is projection.WHOLE


def dropped(raw: dict[str, Any], loaded: plan.Plan) -> list[str]:
    """Every (kind, expression, path) whose path the projection of its object would drop."""
    out = []
    for raw_kind, kind in zip(raw["kinds"], loaded.kinds, strict=True):
        keep = projection.of_kind(kind)
        for context, text in plan_expressions(raw_kind):
            tree = keep.pod if context == projection.POD else keep.job
            for path in projection.reads(plan.compile_expression(text)):
                if not kept(tree, path):
                    out.append(f"{kind.name}: <<{text}>> reads {'.'.join(path)} of the {context}")
    return out


@pytest.mark.parametrize("compiled", PLANS, ids=[p.name for p in PLANS])
def test_the_cache_keeps_every_field_a_plan_reads(compiled: corpus.Plan) -> None:
    assert dropped(compiled.raw, compiled.loaded) == []


def test_the_corpus_reads_job_fields_from_every_place_of_a_kind() -> None:
    """The corpus has expressions in budgets, `final until` and awaits, the places the cache
    once dropped: the check above is not vacuous."""
    texts = {text for p in PLANS for k in p.raw["kinds"] for _, text in plan_expressions(k)}
    assert {"spec.backoffLimit", "status.finishedAt", "status.retryCount"} <= texts
    awaits = [s for p in PLANS for k in p.loaded.kinds for r in k.actions.values()
              if not isinstance(r, str) for s in r if isinstance(s, plan.Await)]
    assert awaits


def test_a_walk_that_misses_a_place_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant the old bug: a projection that does not look into budgets. The check names the
    budget's expression and the field it would drop."""
    walk = projection._exprs

    def without_budgets(node: Any, context: str) -> Iterator[tuple[str, plan.Expr]]:
        if isinstance(node, plan.Budget):
            return
        yield from walk(node, context)
    monkeypatch.setattr(projection, "_exprs", without_budgets)
    trainer = next(p for p in PLANS if p.name.endswith("failure-policies/backoff.suite.yaml"))
    assert dropped(trainer.raw, trainer.loaded) == [
        "group: <<spec.failurePolicy.maxRestarts>> reads spec.failurePolicy.maxRestarts of the job",
        "trainer: <<spec.backoffLimit>> reads spec.backoffLimit of the job"]


# ---------------------------------------------------------------------------------------------
# Whole and projected objects evaluate alike, step after step

CASES = corpus.cases()
WORDS = ["Failed", "Succeeded", "Running", "Pending", "Completed", "Evicted", "OOMKilled",
         "Error", "DisruptionTarget", "FailureTarget", "True", "False", ""]
LEAF = st.one_of(st.sampled_from(WORDS), st.integers(-1, 5), st.sampled_from([137, 143, 42]),
                 st.booleans(), st.none(),
                 st.sampled_from(["2024-05-01T11:00:00Z", "2024-05-01T12:30:00Z"]))
JUNK = st.recursive(LEAF, lambda inner: st.dictionaries(st.sampled_from(["x", "y", "zz"]), inner,
                                                        max_size=2), max_leaves=4)


def leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, (*path, key))
    elif isinstance(node, list):
        for n, value in enumerate(node):
            yield from leaves(value, (*path, n))
    else:
        yield path


def dicts(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        yield path
        for key, value in node.items():
            yield from dicts(value, (*path, key))
    elif isinstance(node, list):
        for n, value in enumerate(node):
            yield from dicts(value, (*path, n))


def at(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@st.composite
def changed(draw: st.DrawFn, obj: dict[str, Any], under: tuple[str, ...]) -> dict[str, Any]:
    """`obj` with some values under the top-level keys `under` changed, and fields no rule
    reads added anywhere."""
    out = copy.deepcopy(obj)
    paths = [p for p in leaves(out) if p and p[0] in under]
    for path in draw(st.lists(st.sampled_from(paths), max_size=4)) if paths else ():
        at(out, path[:-1])[path[-1]] = draw(LEAF)
    places = list(dicts(out))
    for path in draw(st.lists(st.sampled_from(places), max_size=3)):
        at(out, path)[draw(st.sampled_from(["junk", "managedFields", "zz"]))] = draw(JUNK)
    return out


@st.composite
def histories(draw: st.DrawFn) -> tuple[corpus.Case, list[tuple[Any, ...]]]:
    case = draw(st.sampled_from(CASES))
    steps = []
    for step in case.steps[:draw(st.integers(1, len(case.steps)))]:
        for _ in range(draw(st.integers(1, 2))):
            job = draw(changed(step.job, ("spec", "status")))
            pods = [draw(changed(p, ("status",))) for p in step.pods]
            steps.append((step.now + timedelta(seconds=draw(st.integers(0, 900))), job, pods))
    return case, steps


def evaluate(kind: plan.Kind, job: dict[str, Any], pod_objects: list[dict[str, Any]],
             stored: state.State | None, now: Any) -> evaluator.Evaluation:
    return evaluator.evaluate(kind, job, evaluator.pods_of(kind, job, pod_objects, now), stored, now)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_projected_objects_decide_like_whole_ones_over_a_history(history: Any) -> None:
    case, steps = history
    whole_state: state.State | None = None
    cut_state: state.State | None = None
    for now, job, pod_objects in steps:
        kind = evaluator.kind_for(case.plan, job) if case.plan.kind_for(
            job.get("apiVersion", ""), job.get("kind", "")) else None
        if kind is None or not kind.covers(job):
            return
        keep = projection.of_kind(kind)
        whole = evaluate(kind, job, pod_objects, whole_state, now)
        cut = evaluate(kind, projection.project(job, keep.job),
                       [projection.project(p, keep.pod) for p in pod_objects], cut_state, now)
        assert evaluator.to_json(cut) == evaluator.to_json(whole)
        whole_state, cut_state = whole.state, cut.state


def test_the_histories_reach_budgets_and_final_verdicts() -> None:
    """The suites the histories start from spend budgets read from the job and end in verdicts
    that hold: the property above meets what it is about."""
    kinds = {k.name for c in CASES for k in c.plan.kinds
             for p in k.policies for a in (p.action, p.action.fallback)
             if a is not None and a.budget is not None and isinstance(a.budget.max, plan.Expr)}
    assert {"trainer", "group"} <= kinds
    assert any(k.final_until is not None for c in CASES for k in c.plan.kinds)


def steps_of(kind: plan.Kind) -> list[plan.Step]:
    return [s for r in kind.actions.values() if not isinstance(r, str) for s in r]


@pytest.mark.parametrize("compiled", PLANS, ids=[p.name for p in PLANS])
def test_the_cache_keeps_what_action_steps_compare(compiled: corpus.Plan) -> None:
    """A `set` step compares the field before it writes it; a `create` step is made only while
    the job's status is as it was when the action was decided (a digest of the whole status)."""
    for kind in compiled.loaded.kinds:
        keep = projection.of_kind(kind).job
        for step in steps_of(kind):
            if isinstance(step, plan.SetField):
                assert kept(keep, step.path), (kind.name, step.path)
            if isinstance(step, plan.CreateObject):
                assert kept(keep, ("status",)), kind.name


def test_the_corpus_has_set_and_create_steps() -> None:
    found = {type(s) for p in PLANS for k in p.loaded.kinds for s in steps_of(k)}
    assert {plan.SetField, plan.CreateObject} <= found
