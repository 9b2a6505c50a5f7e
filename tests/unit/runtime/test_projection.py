"""runtime.projection: which paths an expression reads, and that a projected job and its
projected pods evaluate exactly like the whole objects (the shipped rules, random objects)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rulec import api, emit
from runtime import evaluator, plan, projection

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
SHIPPED = plan.loads(emit.dumps(api.build([str(ROOT / "rules")]).plan))  # type: ignore[arg-type]


@pytest.mark.parametrize("expr, paths", [
    ("metadata.name", [("metadata", "name")]),
    ("spec.suspend", [("spec", "suspend")]),
    ('metadata.annotations."volcano.sh/task-spec"', [("metadata", "annotations", "volcano.sh/task-spec")]),
    ("status.conditions[?type=='Failed' && status=='True']", [("status", "conditions")]),
    ("status.conditions[?type=='Failed'] | [0].reason", [("status", "conditions")]),
    ("contains(['Failed', 'Error'], status.phase)", [("status", "phase")]),
    ("status.state.reason || status.state.phase", [("status", "state", "phase"),
                                                   ("status", "state", "reason")]),
    ("status.a[0].b", [("status", "a")]),
    ("spec.x.*.y", [("spec", "x")]),
    ("spec.list[].name", [("spec", "list")]),
    ("status.failed > `0`", [("status", "failed")]),
    ("!(metadata.deletionTimestamp)", [("metadata", "deletionTimestamp")]),
    ("{a: spec.x, b: status.y}", [("spec", "x"), ("status", "y")]),
    ("length(@)", [()]),
    ("keys(@)", [()]),
    ("`true`", []),
    ("'text'", []),
    ("age(status.startTime) > `60`", [("status", "startTime")]),
])
def test_reads(expr: str, paths: list[tuple[str, ...]]) -> None:
    assert projection.reads(plan.compile_expression(expr)) == sorted(paths)


def test_trees_keep_the_widest_path() -> None:
    assert projection.tree([("a", "b"), ("a",), ("c", "d")]) == \
        {"a": projection.WHOLE, "c": {"d": projection.WHOLE}}
    assert projection.tree([("a",), ()]) is projection.WHOLE


def test_project_drops_what_is_not_read() -> None:
    pod = {"metadata": {"name": "p", "managedFields": [{"big": "x" * 1000}], "labels": {"a": "b"}},
           "spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}]},
           "status": {"phase": "Failed", "containerStatuses": [
               {"name": "main", "image": "i", "imageID": "x", "restartCount": 1,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "m",
                                         "finishedAt": "2024-05-01T11:00:00Z"}}}]}}
    out = projection.project(pod, projection.POD_FIELDS)
    assert out == {"metadata": {"name": "p", "labels": {"a": "b"}},
                   "status": {"phase": "Failed", "containerStatuses": [
                       {"name": "main", "restartCount": 1, "state": {"terminated": {
                           "exitCode": 137, "reason": "OOMKilled",
                           "finishedAt": "2024-05-01T11:00:00Z"}}}]}}


def test_odd_shapes_are_kept_as_they_are() -> None:
    assert projection.project({"metadata": "oops", "status": 7}, projection.POD_FIELDS) == \
        {"metadata": "oops", "status": 7}
    assert projection.project({"status": {"conditions": "x"}}, projection.POD_FIELDS) == \
        {"status": {"conditions": "x"}}


# ---------------------------------------------------------------------------------------------
# A projected object evaluates like the whole one

words = st.sampled_from(["Failed", "Succeeded", "Running", "Restarting", "Suspended", "Completed",
                         "FailureTarget", "Complete", "True", "False", "Unknown", "Error", ""])
junk = st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                    lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=5)
conditions = st.lists(st.fixed_dictionaries(
    {"type": words, "status": st.sampled_from(["True", "False", "Unknown"])},
    optional={"reason": words, "message": st.text(max_size=8), "lastTransitionTime":
              st.just("2024-05-01T11:00:00Z")}), max_size=4)


@st.composite
def jobs(draw: st.DrawFn, kind: plan.Kind) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": draw(conditions), "junk": draw(junk)}
    if draw(st.booleans()):
        status["state"] = {"phase": draw(words), "reason": draw(words), "message": "m"}
    if draw(st.booleans()):
        status["phase"] = draw(words)
    spec: dict[str, Any] = {"suspend": draw(st.booleans()), "junk": draw(junk),
                            "runPolicy": {"suspend": draw(st.booleans())}}
    if draw(st.booleans()):
        spec["status"] = draw(st.sampled_from(["PipelineRunPending", ""]))
    return {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": "j", "namespace": "ns", "uid": "u-j", "managedFields": draw(junk),
                         "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": spec, "status": status}


_STATE = st.one_of(
    st.just({"running": {"startedAt": "2024-05-01T11:00:00Z"}}),
    st.builds(lambda code, reason: {"terminated": {"exitCode": code, "reason": reason,
                                                   "finishedAt": "2024-05-01T11:30:00Z",
                                                   "message": "x"}},
              st.sampled_from([0, 1, 137, 143]), st.sampled_from(["OOMKilled", "Error", "Completed"])),
    st.builds(lambda reason: {"waiting": {"reason": reason}},
              st.sampled_from(["CrashLoopBackOff", "ContainerCreating"])))


@st.composite
def pods(draw: st.DrawFn, kind: plan.Kind, index: int) -> dict[str, Any]:
    labels = {key: "j" for key, _ in kind.pod_labels}
    labels.update(draw(st.dictionaries(st.sampled_from(
        ["volcano.sh/task-spec", "training.kubeflow.org/replica-type",
         "training.kubeflow.org/job-role", "jobset.sigs.k8s.io/replicatedjob-name",
         "tekton.dev/pipelineTask"]), st.sampled_from(["master", "worker"]), max_size=3)))
    statuses = [{"name": name, "image": "i", "restartCount": draw(st.integers(0, 3)),
                 "state": draw(_STATE)} for name in ("main", "pytorch", "tensorflow")[:draw(st.integers(1, 3))]]
    status = {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])),
              "containerStatuses": statuses, "conditions": draw(st.lists(st.fixed_dictionaries(
                  {"type": st.sampled_from(["Ready", "DisruptionTarget"]),
                   "status": st.sampled_from(["True", "False"]),
                   "lastTransitionTime": st.just("2024-05-01T11:40:00Z")}), max_size=2))}
    if draw(st.booleans()):
        status["reason"] = "Evicted"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{index}", "namespace": "ns", "uid": f"u-{index}",
                         "labels": labels, "managedFields": draw(junk),
                         "creationTimestamp": "2024-05-01T10:30:00Z",
                         "ownerReferences": [{"apiVersion": kind.api_version, "kind": kind.kind,
                                              "name": "j", "uid": "u-j", "controller": True}]},
            "spec": {"containers": [{"name": "main", "env": draw(junk)}]}, "status": status}


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[plan.Kind, dict[str, Any], list[dict[str, Any]]]:
    kind = draw(st.sampled_from(SHIPPED.kinds))
    return kind, draw(jobs(kind)), [draw(pods(kind, i)) for i in range(draw(st.integers(0, 3)))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_projected_objects_evaluate_like_whole_ones(scenario: Any) -> None:
    kind, job, pod_objects = scenario
    keep = projection.of_kind(kind)
    whole = evaluator.evaluate(kind, job, pod_objects, None, NOW)
    cut = evaluator.evaluate(kind, projection.project(job, keep.job),
                             [projection.project(p, keep.pod) for p in pod_objects], None, NOW)
    assert evaluator.to_json(cut) == evaluator.to_json(whole)


def test_projection_saves_most_of_a_pod() -> None:
    """A pod of the bench's shape (managedFields, env, resources) keeps a small part."""
    import orjson
    kind = SHIPPED.kind_named("tfjob")
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"},
                        "managedFields": [{"manager": "kubelet", "fieldsV1": {f"f:{i}": {} for i in range(200)}}]},
           "spec": {"containers": [{"name": "tensorflow", "image": "img",
                                    "env": [{"name": f"E{i}", "value": "v" * 40} for i in range(30)]}]},
           "status": {"phase": "Running", "containerStatuses": [
               {"name": "tensorflow", "restartCount": 0, "image": "img", "imageID": "id" * 20,
                "state": {"running": {"startedAt": "2024-05-01T11:00:00Z"}}}]}}
    whole, cut = len(orjson.dumps(pod)), len(orjson.dumps(projection.project(pod, projection.of_kind(kind).pod)))
    assert cut * 10 < whole
