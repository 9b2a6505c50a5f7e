"""Expressions that only name fields are searched without the JMESPath interpreter, with the
interpreter's results: checked on chosen shapes and on random JSON."""

from __future__ import annotations

import jmespath
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.plan import FieldPath, compile_expression

KEYS = ("a", "b", "metadata", "name", "x.y", "a b")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=12,
)


def _quoted(key: str) -> str:
    return key if key.isidentifier() else f'"{key}"'


@pytest.mark.parametrize("text, keys", [
    ("a", ("a",)),
    ("owner.metadata.name", ("owner", "metadata", "name")),
    ('metadata.labels."batch.kubernetes.io/job-name"', ("metadata", "labels", "batch.kubernetes.io/job-name")),
    ('"a b".c', ("a b", "c")),
])
def test_field_chains_become_field_paths(text: str, keys: tuple[str, ...]) -> None:
    assert compile_expression(text) == FieldPath(keys)


@pytest.mark.parametrize("text", [
    "a[0]", "a.b[*]", "@", "a.b == `1`", "length(a)", "a || b", "a.*", "`1`", "'a'", "a.b[?c]",
    "a | b", "{x: a}", "[a, b]", "!a", "a && b",
])
def test_everything_else_keeps_the_interpreter(text: str) -> None:
    assert not isinstance(compile_expression(text), FieldPath)


@pytest.mark.parametrize("data, expected", [
    ({"a": {"b": 1}}, 1),
    ({"a": {"b": None}}, None),
    ({"a": [{"b": 1}]}, None),      # a field of a list is null, not a projection
    ({"a": "text"}, None),
    ({"a": {"b": False}}, False),
    ([], None),
    (None, None),
])
def test_field_paths_read_like_jmespath(data: object, expected: object) -> None:
    assert compile_expression("a.b").search(data) == expected == jmespath.search("a.b", data)


@given(json_values, st.lists(st.sampled_from(KEYS), min_size=1, max_size=4))
def test_field_paths_agree_with_the_interpreter(data: object, keys: list[str]) -> None:
    text = ".".join(_quoted(key) for key in keys)
    compiled = compile_expression(text)
    assert isinstance(compiled, FieldPath)
    assert compiled.search(data) == jmespath.search(text, data)


# -- the loader's checks of the new plan entries -------------------------------------------------

def _plan_with(kind_extra: dict | None = None, match: dict | None = None):
    from builders import kind, load, sidecar_injection

    injection = sidecar_injection("x")
    injection["match"] = match
    return load(kind(**(kind_extra or {})), injections=[injection])


SPAN = {"path": "j.rules", "line": 1, "column": 5, "endLine": 1, "endColumn": 9}


@pytest.mark.parametrize("extra, message", [
    ({"versions": ["v1beta1", "v1alpha1"]}, "must start with the kind's version"),
    ({"selector": [{"key": "a", "operator": "Near", "values": []}]}, "not one of"),
    ({"selector": [{"key": "a", "operator": "In", "values": []}]}, "needs values"),
    ({"selector": [{"key": "a", "operator": "Exists", "values": ["b"]}]}, "takes no values"),
    ({"actions": {"ignore": "record"}}, "not one of"),
    ({"actions": {"failJob": "maybe"}}, "not one of"),
    ({"actions": {"failJob": {"steps": [{"op": "explode"}]}}}, "not one of"),
    ({"actions": {"restartJob": {"steps": [{"span": SPAN, "op": "deletePods", "scope": "node"}]}}},
     "not one of"),
    ({"actions": {"abortJob": {"steps": [{"span": SPAN, "op": "set", "path": ["spec", "x"], "value": 1.5}]}}},
     "expected null, a bool, an integer or a string, got float"),
    ({"actions": {"abortJob": {"steps": [{"span": SPAN, "op": "set", "path": ["spec"], "value": {"a": 1}}]}}},
     "got dict"),
    ({"actions": {"failJob": {"steps": [{"span": SPAN, "op": "await", "when": {
        "op": "pods", "quant": "any", "task": None, "state": "running", "filter": None,
        "for": None}}]}}},
     "timeout"),
])
def test_kind_entries_that_cannot_be_used_are_refused(extra: dict, message: str) -> None:
    from runtime.plan import PlanError

    with pytest.raises(PlanError, match=message):
        _plan_with(extra)


def test_namespace_label_tests_stand_at_the_top_level_and() -> None:
    from runtime.plan import PlanError

    label = {"op": "namespaceLabel", "key": "inject", "values": ["yes"], "negate": False}
    plan = _plan_with(match={"op": "and", "args": [label, {"op": "label", "key": "a", "values": None,
                                                           "negate": False}]})
    assert plan.injections[0].namespace_selector == "inject=yes"
    assert plan.namespace_selectors() == (None, "inject=yes")
    with pytest.raises(PlanError, match="top-level `and`"):
        _plan_with(match={"op": "or", "args": [label, label]})


def test_the_injected_containers_of_a_kind_come_from_the_injections() -> None:
    assert _plan_with().kinds[0].injected == {"x"}


def test_the_events_heard_for_a_task_are_its_policies_and_the_job_wide_ones() -> None:
    import dataclasses

    from builders import action, kind, load, policy

    heard = load(kind(policies=[
        policy("podFailed", action("failJob")),
        policy("podEvicted", action("restartPod"), task="worker"),
        policy("taskCompleted", action("completeJob"), task="master"),
    ])).kinds[0]
    assert heard.heard(None) == {"podFailed"}
    assert heard.heard("worker") == {"podFailed", "podEvicted"}
    assert heard.heard("master") == {"podFailed", "taskCompleted"}
    assert heard.heard("ps") == {"podFailed"}   # a task no policy names
    # worked out again for a kind made from another
    quiet = dataclasses.replace(heard, policies=heard.policies[1:2])
    assert quiet.heard("worker") == {"podEvicted"} and quiet.heard(None) == set()
    assert quiet != heard and dataclasses.replace(quiet) == quiet


# -- policies put in audit by the controller's JOBRULES_AUDIT ------------------------------------

def _two_kinds():
    from builders import action, kind, load, policy

    return load(kind(name="a", policies=[policy("podFailed", action("failJob"), id="x"),
                                         policy("podEvicted", action("failJob"), id="y")]),
                kind(name="b", api_version="example.dev/v1", job_kind="B",
                     policies=[policy("podFailed", action("failJob"), id="x")]))


@pytest.mark.parametrize("selectors, expected", [
    ([], {"a/x": False, "a/y": False, "b/x": False}),
    (["*"], {"a/x": True, "a/y": True, "b/x": True}),
    (["a"], {"a/x": True, "a/y": True, "b/x": False}),
    (["a/y", "b/x"], {"a/x": False, "a/y": True, "b/x": True}),
    ([" a/y ", ""], {"a/x": False, "a/y": True, "b/x": False}),
])
def test_audit_selectors_pick_kinds_and_policies(selectors: list[str],
                                                 expected: dict[str, bool]) -> None:
    from runtime import plan

    chosen = plan.audited(_two_kinds(), selectors)
    assert {f"{k.name}/{p.id}": p.audit for k in chosen.kinds for p in k.policies} == expected


def test_audit_selectors_that_name_nothing_are_found() -> None:
    from runtime import plan

    assert plan.unknown_audits(_two_kinds(), ["*", "a", "a/x", "b/y", "c"]) == ["b/y", "c"]
