"""runtime.mutator: owner resolution, matching, every op, patch shape, idempotence, errors.

Plans are built from small JSON dicts through runtime.plan.load, exactly as the runtime reads them.
`run` applies every patch with the jsonpatch library and with runtime.patch (they must agree),
then mutates the result again and requires an empty patch: every test is also a reinvocation test.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import mutator, plan, patch
from runtime.mutator import inject as inject_module

SPAN = {"path": "t.rules", "line": 3, "column": 5, "endLine": 3, "endColumn": 9}
DIGEST = "0123456789abcdef0123"
RECORD = mutator.RECORD_ANNOTATION
DIGEST_OF = inject_module.digest


@pytest.fixture(autouse=True)
def fixed_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every injection's digest is DIGEST[:12] in these tests, which are about patches; the
    digest's own tests (`test_the_record_names_...`) call the real one, DIGEST_OF."""
    monkeypatch.setattr(inject_module, "digest", lambda injection: DIGEST[:12])


# ---------------------------------------------------------------------------------------------
# Builders


def kind(name: str, api_version: str, kind_: str, **extra) -> dict:
    group, _, version = api_version.rpartition("/")
    return {"name": name, "span": SPAN, "group": group, "version": version, "kind": kind_,
            "plural": kind_.lower() + "s", "apiVersion": api_version, **extra}


def label(key, values=None, negate=False):
    return {"op": "label", "key": key, "values": values, "negate": negate}


KINDS = [
    kind("tfjob", "kubeflow.org/v1", "TFJob",
         task={"label": "training.kubeflow.org/replica-type"},
         primaryPods=label("training.kubeflow.org/job-role", ["master"]),
         primaryContainers=["tensorflow"]),
    kind("workflow", "argoproj.io/v1alpha1", "Workflow", primaryContainers=["main"]),
    kind("job", "batch/v1", "Job"),
    kind("vcjob", "batch.volcano.sh/v1alpha1", "Job",
         task={"expr": 'metadata.annotations."volcano.sh/task-spec"', "span": SPAN}),
    kind("ran", "x.dev/v1", "Ran",
         primaryPods={"op": "or", "args": [
             {"op": "exitCode", "codes": [0], "ranges": [], "negate": False, "container": None},
             {"op": "containerReason", "values": ["Completed"], "negate": True, "container": None},
             {"op": "podReason", "values": ["Evicted"], "negate": True},
             {"op": "condition", "type": "Ready", "reasons": [], "negate": True},
             {"op": "restarts", "cmp": ">=", "value": 0, "container": None}]}),
    kind("notran", "x.dev/v1", "NotRan", primaryPods={"op": "not", "arg": {
        "op": "exitCode", "codes": [0], "ranges": [], "negate": False, "container": None}}),
    kind("bytask", "x.dev/v1", "ByTask", task={"label": "role"},
         primaryPods={"op": "task", "values": ["master"], "negate": False}),
    kind("byexpr", "x.dev/v1", "ByExpr",
         primaryPods={"op": "jmespath", "expr": "metadata.labels.role == 'master'", "span": SPAN}),
]
KIND_NAMES = [k["name"] for k in KINDS]
KIND_BY_NAME = {k["name"]: k for k in KINDS}


def op(name: str, /, **fields) -> dict:
    return {"op": name, "span": SPAN, **fields}


def expr(source: str) -> dict:
    return {"expr": source, "span": SPAN}


def var(name: str) -> dict:
    return {"var": name}


def primary():
    return {"select": "primary", "names": []}


def every():
    return {"select": "all", "names": []}


def named(*names):
    return {"select": "named", "names": list(names)}


def annotate(key="hit", value=("yes",)):
    return op("annotate", key=key, value=list(value))


def inj(*ops, name="inj", kinds=("job",), match=None, completion=None) -> dict:
    return {"name": name, "span": SPAN, "kinds": list(kinds), "match": match, "ops": list(ops),
            "completionContainers": completion}


def build(*injections: dict, digest: str = DIGEST) -> mutator.Injector:
    return mutator.prepare(plan.load(
        {"planVersion": 1, "files": [], "kinds": KINDS, "injections": list(injections)},
        digest=digest))


def ref(api_version: str, kind_: str, name: str = "owner-1", controller: bool | None = None) -> dict:
    r = {"apiVersion": api_version, "kind": kind_, "name": name, "uid": f"uid-{name}"}
    if controller is not None:
        r["controller"] = controller
    return r


def ref_of(kind_name: str, name: str = "owner-1") -> dict:
    k = KIND_BY_NAME[kind_name]
    return ref(k["apiVersion"], k["kind"], name, controller=True)


def container(name: str, command=("run",), **extra) -> dict:
    c = {"name": name, "image": f"img/{name}"}
    if command is not None:
        c["command"] = list(command)
    c.update(extra)
    return c


def pod(*containers, owner: str | None = "job", labels=None, annotations=None, init=(),
        name: str | None = None, namespace: str | None = None, **spec) -> dict:
    meta: dict = {"generateName": "owner-1-"}
    if name is not None:
        meta = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if owner is not None:
        meta["ownerReferences"] = [ref_of(owner)]
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    body = {"containers": [c if isinstance(c, dict) else container(c) for c in containers or ("main",)]}
    if init:
        body["initContainers"] = [c if isinstance(c, dict) else container(c) for c in init]
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def run(plan_: plan.Plan, pod_: dict, owner=None, namespace=None) -> tuple[mutator.Mutation, dict]:
    """Mutate, apply with both appliers, and check that mutating the result changes nothing."""
    before = copy.deepcopy(pod_)
    mutation = mutator.mutate(plan_, pod_, owner, namespace)
    assert pod_ == before, "mutate must not modify the pod"
    assert isinstance(mutation.patch, tuple) and isinstance(mutation.applied, tuple)
    result = jsonpatch.apply_patch(pod_, list(mutation.patch))
    assert patch.apply(pod_, mutation.patch) == result
    again = mutator.mutate(plan_, result, owner, namespace)
    assert again.patch == () and again.applied == (), f"not idempotent: {again.patch}"
    return mutation, result


def record(*names: str) -> str:
    return json.dumps([f"{n}@{DIGEST[:12]}" for n in names], separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# Owner resolution


@pytest.mark.parametrize(("refs", "owner", "expected"), [
    ([ref("batch/v1", "Job")], None, "job"),
    ([ref("apps/v1", "ReplicaSet"), ref("batch/v1", "Job", controller=True)], None, "job"),
    ([ref("batch/v1", "Job"), ref("kubeflow.org/v1", "TFJob")], None, "job"),
    ([ref("apps/v1", "ReplicaSet", controller=True), ref("batch/v1", "Job")], None, None),
    ([ref("batch/v2", "Job")], None, None),
    ([ref("batch.volcano.sh/v1alpha1", "Job")], None, "vcjob"),
    ([], {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t"}}, "tfjob"),
    ([ref("batch/v1", "Job")], {"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}, "job"),
    ([], None, None),
    (["garbage", {"apiVersion": ["x"], "kind": "Job"}], None, None),
    ({"not": "a list"}, None, None),
])
def test_owner_kind(refs, owner, expected):
    p = pod()
    p["metadata"]["ownerReferences"] = refs
    mutation = mutator.mutate(build(inj(annotate(), kinds=KIND_NAMES)), p, owner)
    assert mutation.kind == expected
    assert mutation.applied == (("inj",) if expected else ())


def test_owner_stub_from_reference():
    p = pod(owner="tfjob")
    p["metadata"]["ownerReferences"][0].update(name="mnist", uid="u-1")
    value = [var("job"), " ", expr("owner.metadata.uid"), " ", expr("owner.kind"),
             " ", expr("owner.apiVersion")]
    _, result = run(build(inj(annotate("o", value), kinds=["tfjob"])), p)
    assert result["metadata"]["annotations"]["o"] == "mnist u-1 TFJob kubeflow.org/v1"


def test_owner_argument_is_the_full_object():
    owner = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "full"},
             "spec": {"parallelism": 4}}
    value = [var("job"), "/", expr("owner.spec.parallelism")]
    _, result = run(build(inj(annotate("o", value))), pod(), owner)
    assert result["metadata"]["annotations"]["o"] == "full/4"


def test_pod_of_an_undeclared_kind_is_left_alone():
    plan_ = build(inj(annotate(), kinds=KIND_NAMES))
    assert mutator.mutate(plan_, pod(owner=None)) == mutator.Mutation((), (), None)


@pytest.mark.parametrize(("argument", "in_pod", "expected"), [
    ("arg", "meta", "arg|arg"),
    (None, "meta", "meta|meta"),
    (None, None, "|"),
])
def test_namespace_argument_wins(argument, in_pod, expected):
    _, result = run(build(inj(annotate("ns", [var("namespace"), "|", expr("namespace")]))),
                    pod(namespace=in_pod), namespace=argument)
    assert result["metadata"]["annotations"]["ns"] == expected


# ---------------------------------------------------------------------------------------------
# Matching


def annotation(key, values=None, negate=False):
    return {"op": "annotation", "key": key, "values": values, "negate": negate}


def namespace_in(*values, negate=False):
    return {"op": "namespace", "values": list(values), "negate": negate}


def task(*values, negate=False):
    return {"op": "task", "values": list(values), "negate": negate}


def where(source):
    return {"op": "jmespath", "expr": source, "span": SPAN}


def both(*args):
    return {"op": "and", "args": list(args)}


def either(*args):
    return {"op": "or", "args": list(args)}


def negated(arg):
    return {"op": "not", "arg": arg}


TRIAL = {"katib.kubeflow.org/trial": "t-1"}
MASTER = {"training.kubeflow.org/job-role": "master", "training.kubeflow.org/replica-type": "Master"}
WORKER = {"training.kubeflow.org/replica-type": "Worker"}


@pytest.mark.parametrize(("match", "owner", "labels", "annotations", "expected"), [
    (label("katib.kubeflow.org/trial"), "job", TRIAL, None, True),
    (label("katib.kubeflow.org/trial"), "job", {}, None, False),
    (label("katib.kubeflow.org/trial"), "job", None, None, False),
    (label("katib.kubeflow.org/trial", negate=True), "job", {}, None, True),
    (label("katib.kubeflow.org/trial", ["t-1", "t-2"]), "job", TRIAL, None, True),
    (label("katib.kubeflow.org/trial", ["t-2"]), "job", TRIAL, None, False),
    (label("katib.kubeflow.org/trial", ["t-2"], negate=True), "job", TRIAL, None, True),
    (label("katib.kubeflow.org/trial", ["t-2"], negate=True), "job", {}, None, True),
    (label("n", ["1"]), "job", {"n": 1}, None, False),
    (label("l", [""]), "job", {"l": ""}, None, True),
    (annotation("a/b~c"), "job", None, {"a/b~c": "x"}, True),
    (annotation("a/b~c"), "job", TRIAL, None, False),
    (annotation("a", ["x"]), "job", {"a": "x"}, None, False),
    (annotation("a", ["x"]), "job", None, {"a": "y"}, False),
    (annotation("a", ["x"]), "job", None, {"a": "x"}, True),
    (namespace_in("ns"), "job", None, None, True),
    (namespace_in("other"), "job", None, None, False),
    (namespace_in("other", negate=True), "job", None, None, True),
    (task("Master"), "tfjob", MASTER, None, True),
    (task("Master"), "tfjob", WORKER, None, False),
    (task("Master", negate=True), "tfjob", WORKER, None, True),
    (task("ps"), "vcjob", None, {"volcano.sh/task-spec": "ps"}, True),
    (task("ps"), "vcjob", None, None, False),
    (task("ps", negate=True), "job", None, None, True),
    ({"op": "primary"}, "tfjob", MASTER, None, True),
    ({"op": "primary"}, "tfjob", WORKER, None, False),
    ({"op": "primary"}, "job", None, None, True),
    # a pod being created reads as a pod that has not run, as in evaluation: no exit code or
    # container reason, so those terms are false, and `pod reason not in`, `not condition` and
    # `restarts >= 0` hold
    ({"op": "primary"}, "ran", None, None, True),
    ({"op": "primary"}, "notran", None, None, True),
    ({"op": "primary"}, "bytask", {"role": "master"}, None, True),
    ({"op": "primary"}, "bytask", {"role": "worker"}, None, False),
    ({"op": "primary"}, "byexpr", {"role": "master"}, None, True),
    ({"op": "primary"}, "byexpr", None, None, False),
    (where("namespace == 'ns'"), "job", None, None, True),
    (where("owner.metadata.name == 'owner-1' && owner.kind == 'Job'"), "job", None, None, True),
    (where("pod.spec.containers[0].name == 'main'"), "job", None, None, True),
    (where("pod.metadata.labels.x"), "job", None, None, False),
    (where("`0`"), "job", None, None, True),
    (where("''"), "job", None, None, False),
    (where("`[]`"), "job", None, None, False),
    (where("`{}`"), "job", None, None, False),
    (where("`false`"), "job", None, None, False),
    (where("regex_match('^own', owner.metadata.name)"), "job", None, None, True),
    (both(label("katib.kubeflow.org/trial"), namespace_in("ns")), "job", TRIAL, None, True),
    (both(label("katib.kubeflow.org/trial"), namespace_in("x")), "job", TRIAL, None, False),
    (either(label("nope"), namespace_in("ns")), "job", None, None, True),
    (either(label("nope"), namespace_in("x")), "job", None, None, False),
    (negated(label("nope")), "job", None, None, True),
    (both(), "job", None, None, True),
    (either(), "job", None, None, False),
])
def test_match(match, owner, labels, annotations, expected):
    injection = inj(annotate(), kinds=KIND_NAMES, match=match)
    mutation = mutator.mutate(build(injection),
                              pod(owner=owner, labels=labels, annotations=annotations), None, "ns")
    assert mutation.applied == (("inj",) if expected else ())


def test_no_match_means_no_patch():
    assert mutator.mutate(build(inj(annotate(), match=label("x"))), pod()) == \
        mutator.Mutation((), (), "job")


# ---------------------------------------------------------------------------------------------
# Annotations and labels: escaping, missing maps, existing values


@pytest.mark.parametrize(("annotations", "expected"), [
    (None, [patch.add("/metadata/annotations",
                      {"sidecar.istio.io/inject": "false", RECORD: record("inj")})]),
    ({}, [patch.add("/metadata/annotations/sidecar.istio.io~1inject", "false"),
          patch.add("/metadata/annotations/jobrules.dev~1injected", record("inj"))]),
    ({"sidecar.istio.io/inject": "true"},
     [patch.replace("/metadata/annotations/sidecar.istio.io~1inject", "false"),
      patch.add("/metadata/annotations/jobrules.dev~1injected", record("inj"))]),
    ({"sidecar.istio.io/inject": "false"}, []),
])
def test_annotate(annotations, expected):
    mutation, _ = run(build(inj(annotate("sidecar.istio.io/inject", ["false"]))),
                      pod(annotations=annotations))
    assert list(mutation.patch) == expected
    assert mutation.applied == (("inj",) if expected else ())


@pytest.mark.parametrize("key", ["a~b", "~1", "a/b/c", "~0/~1", "/", "~", "ü/ß"])
def test_annotation_keys_are_escaped(key):
    mutation, result = run(build(inj(annotate(key, ["v"]))), pod(annotations={"x": "y"}))
    assert mutation.patch[0] == patch.add("/metadata/annotations/" + patch.escape(key), "v")
    assert result["metadata"]["annotations"] == {"x": "y", key: "v", RECORD: record("inj")}


def test_missing_metadata_is_created_once():
    p = pod()
    del p["metadata"]
    plan_ = build(inj(annotate("a", ["1"]), op("label", key="l", value=["2"])))
    mutation, result = run(plan_, p, owner={"apiVersion": "batch/v1", "kind": "Job"})
    assert list(mutation.patch) == [
        patch.add("/metadata", {}),
        patch.add("/metadata/annotations", {"a": "1", RECORD: record("inj")}),
        patch.add("/metadata/labels", {"l": "2"}),
    ]


def test_null_maps_are_replaced():
    p = pod()
    p["metadata"]["annotations"] = None
    p["metadata"]["labels"] = None
    _, result = run(build(inj(annotate(), op("label", key="l", value=["v"]))), p)
    assert result["metadata"]["labels"] == {"l": "v"}


@pytest.mark.parametrize(("labels", "expected"), [
    (None, [patch.add("/metadata/labels", {"jobrules.dev/job": "owner-1"})]),
    ({"a": "b"}, [patch.add("/metadata/labels/jobrules.dev~1job", "owner-1")]),
    ({"jobrules.dev/job": "old"}, [patch.replace("/metadata/labels/jobrules.dev~1job", "owner-1")]),
])
def test_label(labels, expected):
    mutation, _ = run(build(inj(op("label", key="jobrules.dev/job", value=[var("job")]))),
                      pod(labels=labels))
    assert list(mutation.patch[1:]) == expected


def test_a_label_on_a_pod_whose_labels_cannot_be_written_cites_the_op():
    at = {**SPAN, "line": 22, "endLine": 22}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj({**op("label", key="l", value=["v"]), "span": at})),
                       pod(labels="x"))
    assert (info.value.injection, info.value.span.line, info.value.message) == (
        "inj", 22, "pod field metadata.labels is a str, not an object")


@pytest.mark.parametrize("value", ["has space", "-lead", "trail-", "x" * 64, "a/b"])
def test_invalid_label_value_is_an_error(value):
    """Refused whether the value is written in the rules or rendered, citing the op."""
    at = {**SPAN, "line": 21, "endLine": 21}
    for parts in ([value], [expr("pod.metadata.annotations.v")]):
        with pytest.raises(mutator.MutationError) as info:
            mutator.mutate(build(inj({**op("label", key="l", value=parts), "span": at})),
                           pod(annotations={"v": value}))
        assert (info.value.span.line, info.value.message) == (
            21, f"label 'l': {value!r} is not a valid label value")


# ---------------------------------------------------------------------------------------------
# Env, volumes, mounts: container selection, indexes, existing entries


def env(name="TRIAL", value=("t",), containers=None):
    return op("env", name=name, value=list(value), containers=containers or primary())


def test_env_to_declared_primary_container_by_index():
    p = pod("wait", "istio-proxy", "main", owner="workflow")
    mutation, result = run(build(inj(env(), kinds=["workflow"])), p)
    assert list(mutation.patch[1:]) == [
        patch.test("/spec/containers/2/name", "main"),
        patch.add("/spec/containers/2/env", [{"name": "TRIAL", "value": "t"}]),
    ]
    assert [("env" in c) for c in result["spec"]["containers"]] == [False, False, True]


@pytest.mark.parametrize(("owner", "containers", "selected"), [
    ("job", primary(), ["a", "b"]),                   # no primary containers declared: all
    ("tfjob", primary(), ["tensorflow"]),
    ("workflow", every(), ["a", "b"]),
    ("job", named("b", "init"), ["b", "init"]),       # named reaches init containers too
    ("job", named("absent"), []),
    ("workflow", primary(), []),                      # primary "main" is not in this pod
    ("job", named("metrics-collector"), []),          # sidecars of the plan are never targets
])
def test_container_selection(owner, containers, selected):
    p = pod("a", "b", "tensorflow" if owner == "tfjob" else "metrics-collector",
            init=["init"], owner=owner, labels=MASTER)
    injection = inj(env(containers=containers),
                    op("sidecar", name="metrics-collector", native=False, image=["i"],
                       command=None, args=None, env=[], mounts=[]),
                    kinds=[owner])
    _, result = run(build(injection), p)
    got = [c["name"] for c in result["spec"]["containers"] + result["spec"]["initContainers"]
           if any(e["name"] == "TRIAL" for e in c.get("env") or [])]
    assert got == selected


@pytest.mark.parametrize(("existing", "expected"), [
    (None, [patch.add("/spec/containers/0/env", [{"name": "TRIAL", "value": "t"}])]),
    ([], [patch.add("/spec/containers/0/env/-", {"name": "TRIAL", "value": "t"})]),
    ([{"name": "A", "value": "1"}],
     [patch.add("/spec/containers/0/env/-", {"name": "TRIAL", "value": "t"})]),
    ([{"name": "TRIAL", "value": "mine"}], None),
    ([{"name": "TRIAL", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}], None),
])
def test_env_existing(existing, expected):
    c = container("main")
    if existing is not None:
        c["env"] = existing
    mutation, _ = run(build(inj(env())), pod(c))
    if expected is None:
        assert mutation.patch == ()      # the pod's own variable wins, whatever its value
    else:
        assert list(mutation.patch[1:]) == [patch.test("/spec/containers/0/name", "main")] + expected


def test_env_the_pod_has_in_one_container_is_still_added_to_the_others():
    own = container("a", env=[{"name": "TRIAL", "value": "mine"}])
    _, result = run(build(inj(env(containers=every()))), pod(own, "b"))
    assert [c["env"] for c in result["spec"]["containers"]] == [
        [{"name": "TRIAL", "value": "mine"}], [{"name": "TRIAL", "value": "t"}]]


def test_env_one_variable_twice_keeps_the_first():
    plan_ = build(inj(env("A", ["1"]), name="one"), inj(env("A", ["2"]), name="two"))
    mutation, result = run(plan_, pod("main"))
    assert result["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert mutation.applied == ("one",)


def test_env_null_list_is_replaced():
    _, result = run(build(inj(env())), pod(container("main", env=None)))
    assert result["spec"]["containers"][0]["env"] == [{"name": "TRIAL", "value": "t"}]


def test_env_per_container_placeholder():
    _, result = run(build(inj(env("WHO", [var("container"), "@", var("pod")], every()))),
                    pod("a", "b"))
    assert [c["env"][0]["value"] for c in result["spec"]["containers"]] == \
        ["a@owner-1-", "b@owner-1-"]


def test_two_injections_edit_one_container_under_one_test():
    plan_ = build(inj(env("A"), name="one"), inj(env("B"), name="two"))
    mutation, result = run(plan_, pod("main"))
    tests = [o for o in mutation.patch if o["op"] == "test"]
    assert tests == [patch.test("/spec/containers/0/name", "main")]
    assert [e["name"] for e in result["spec"]["containers"][0]["env"]] == ["A", "B"]
    assert mutation.applied == ("one", "two")
    assert result["metadata"]["annotations"][RECORD] == json.dumps(
        ["one@0123456789ab", "two@0123456789ab"], separators=(",", ":"))


def test_stale_index_fails_safely():
    p = pod("a", "b", "main", owner="workflow")
    mutation = mutator.mutate(build(inj(env(), kinds=["workflow"])), p)
    reordered = copy.deepcopy(p)
    reordered["spec"]["containers"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(reordered, list(mutation.patch))
    with pytest.raises(patch.PatchError, match="test failed"):
        patch.apply(reordered, mutation.patch)


@pytest.mark.parametrize(("source", "volume"), [
    ({"emptyDir": {}}, {"name": "v", "emptyDir": {}}),
    ({"configMap": {"name": "cm"}}, {"name": "v", "configMap": {"name": "cm"}}),
    ({"secret": {"secretName": "s"}}, {"name": "v", "secret": {"secretName": "s"}}),
])
@pytest.mark.parametrize("existing", [None, [], [{"name": "other", "emptyDir": {}}]])
def test_volume(source, volume, existing):
    spec = {} if existing is None else {"volumes": existing}
    mutation, result = run(build(inj(op("volume", name="v", source=source))), pod(**spec))
    assert mutation.patch[-1] == (patch.add("/spec/volumes", [volume]) if existing is None
                                  else patch.add("/spec/volumes/-", volume))
    assert result["spec"]["volumes"][-1] == volume


def test_volume_already_present_is_kept():
    p = pod(volumes=[{"name": "v", "configMap": {"name": "theirs"}}])
    mutation, _ = run(build(inj(op("volume", name="v", source={"emptyDir": {}}))), p)
    assert mutation.patch == ()


def mount(volume="v", path="/data", read_only=False, containers=None):
    return op("mount", volume=volume, path=path, readOnly=read_only,
              containers=containers or primary())


@pytest.mark.parametrize(("read_only", "entry"), [
    (False, {"name": "v", "mountPath": "/data"}),
    (True, {"name": "v", "mountPath": "/data", "readOnly": True}),
])
def test_mount(read_only, entry):
    plan_ = build(inj(op("volume", name="v", source={"emptyDir": {}}), mount(read_only=read_only),
                      kinds=["tfjob"]))
    p = pod("tensorflow", "other", owner="tfjob")
    mutation, result = run(plan_, p)
    assert patch.add("/spec/containers/0/volumeMounts", [entry]) in mutation.patch
    assert "volumeMounts" not in result["spec"]["containers"][1]


def test_mount_skips_a_path_already_mounted():
    c = container("main", volumeMounts=[{"name": "theirs", "mountPath": "/data"}])
    mutation, _ = run(build(inj(mount())), pod(c, volumes=[{"name": "v", "emptyDir": {}}]))
    assert mutation.patch == ()
    # only in that container: the others still get it
    mutation, result = run(build(inj(mount(containers=every()))),
                           pod(c, "other", volumes=[{"name": "v", "emptyDir": {}}]))
    assert [c.get("volumeMounts") for c in result["spec"]["containers"]] == [
        [{"name": "theirs", "mountPath": "/data"}], [{"name": "v", "mountPath": "/data"}]]


@pytest.mark.parametrize(("written", "field", "value", "message"), [
    (lambda: mount(), "volumeMounts", {"x": 1}, "container 'main': volumeMounts is a dict, not an array"),
    (lambda: env(), "env", "x", "container 'main': env is a str, not an array"),
])
def test_a_container_list_that_is_not_an_array_fails_citing_the_op(written, field, value, message):
    at = {**SPAN, "line": 24, "endLine": 24}
    c = container("main", **{field: value})
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj({**written(), "span": at})),
                       pod(c, volumes=[{"name": "v", "emptyDir": {}}]))
    assert (info.value.injection, info.value.span.line, info.value.message) == ("inj", 24, message)


def test_a_mount_alone_credits_its_injection_and_one_path_is_mounted_once():
    plan_ = build(inj(mount(), name="one"), inj(mount("w"), name="two"))
    mutation, result = run(plan_, pod("main", volumes=[{"name": "v", "emptyDir": {}},
                                                      {"name": "w", "emptyDir": {}}]))
    assert mutation.applied == ("one",)
    assert result["spec"]["containers"][0]["volumeMounts"] == [{"name": "v", "mountPath": "/data"}]
    assert result["metadata"]["annotations"][RECORD] == record("one")


def test_a_volume_on_a_pod_whose_volumes_cannot_be_written_cites_the_op():
    at = {**SPAN, "line": 25, "endLine": 25}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj({**op("volume", name="v", source={"emptyDir": {}}), "span": at})),
                       pod("main", volumes={"v": 1}))
    assert (info.value.injection, info.value.span.line, info.value.message) == (
        "inj", 25, "pod field spec.volumes is a dict, not an array")


def test_a_volume_s_source_is_copied_into_each_patch():
    """A caller may edit what a patch adds (apply it in place, then change the pod): the next
    pod's patch still adds the volume as the plan writes it."""
    plan_ = build(inj(op("volume", name="v", source={"emptyDir": {}})))
    [first] = mutator.mutate(plan_, pod("main", volumes=[])).patch[-1:]
    first["value"]["emptyDir"]["medium"] = "Memory"
    [again] = mutator.mutate(plan_, pod("main", volumes=[])).patch[-1:]
    assert again["value"] == {"name": "v", "emptyDir": {}}
    # the loader checks the source's key, not its value: one that is not an object is kept
    plan_ = build(inj(op("volume", name="v", source={"emptyDir": None})))
    mutation, result = run(plan_, pod("main"))
    assert result["spec"]["volumes"] == [{"name": "v", "emptyDir": None}]
    assert mutation.applied == ("inj",)    # a volume alone is a change of its injection


def test_mount_of_an_unknown_volume_is_an_error():
    at = {**SPAN, "line": 23, "endLine": 23}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj({**mount(), "span": at})), pod())
    assert (info.value.injection, info.value.span.line, info.value.message) == (
        "inj", 23, "mount of volume 'v', which neither the pod nor an earlier `volume` op declares")


# ---------------------------------------------------------------------------------------------
# Sidecars and completion containers


def sidecar(name="collector", native=False, image=("img",), command=None, args=None, env_=(),
            mounts=()):
    return op("sidecar", name=name, native=native, image=list(image), command=command, args=args,
              env=list(env_), mounts=list(mounts))


def test_regular_sidecar_is_appended():
    mutation, result = run(build(inj(sidecar())), pod("main"))
    assert mutation.patch[-1] == patch.add("/spec/containers/-", {"name": "collector", "image": "img"})
    assert [c["name"] for c in result["spec"]["containers"]] == ["main", "collector"]


@pytest.mark.parametrize("init", [(), ("setup",)])
def test_native_sidecar_goes_last_in_init_containers(init):
    mutation, result = run(build(inj(sidecar(native=True))), pod("main", init=init))
    entry = {"name": "collector", "image": "img", "restartPolicy": "Always"}
    assert mutation.patch[-1] == (patch.add("/spec/initContainers/-", entry) if init
                                  else patch.add("/spec/initContainers", [entry]))
    assert result["spec"]["initContainers"][-1] == entry


@pytest.mark.parametrize(("containers", "init"), [
    (("main", "collector"), ()),
    (("main",), ("collector",)),
])
def test_sidecar_already_present_is_kept(containers, init):
    mutation, _ = run(build(inj(sidecar(native=True))), pod(*containers, init=init))
    assert mutation.patch == ()


def test_sidecar_fields_are_rendered():
    s = sidecar(command=[["/bin/collect"]], args=[["-t"], [var("job")], [var("container")]],
                env_=[{"name": "POD", "value": [var("pod")]}],
                mounts=[{"volume": "v", "path": "/m", "readOnly": True}],
                image=["reg/", expr("owner.kind"), ":1"])
    plan_ = build(inj(op("volume", name="v", source={"emptyDir": {}}), s))
    _, result = run(plan_, pod("main"))
    assert result["spec"]["containers"][-1] == {
        "name": "collector", "image": "reg/Job:1", "command": ["/bin/collect"],
        "args": ["-t", "owner-1", "collector"], "env": [{"name": "POD", "value": "owner-1-"}],
        "volumeMounts": [{"name": "v", "mountPath": "/m", "readOnly": True}]}


TOKEN_VOLUME = {"name": "kube-api-access-x7k2p", "projected": {"sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}
TOKEN_MOUNT = {"name": "kube-api-access-x7k2p", "readOnly": True,
               "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}


def service_account_plugin(pod_: dict) -> dict:
    """What the API server's ServiceAccount admission plugin does when run again after the
    webhooks: mount the pod's token volume into every container that lacks the mount."""
    pod_ = copy.deepcopy(pod_)
    volume = next((v["name"] for v in pod_["spec"].get("volumes", [])
                   if v["name"].startswith("kube-api-access-")), None)
    if volume is None or pod_["spec"].get("automountServiceAccountToken") is False:
        return pod_
    for field in ("initContainers", "containers"):
        for c in pod_["spec"].get(field, []):
            mounts = c.setdefault("volumeMounts", [])
            if all(m["mountPath"] != TOKEN_MOUNT["mountPath"] for m in mounts):
                mounts.append({**TOKEN_MOUNT, "name": volume})
    return pod_


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("mounts", [[], [{"volume": "v", "path": "/m", "readOnly": True}]])
def test_sidecar_gets_the_token_mount_the_api_server_would_add(native, mounts):
    """Left without it, the ServiceAccount plugin adds it after us, which makes the API server
    call the webhook again (reinvocationPolicy IfNeeded) for nothing."""
    admitted = service_account_plugin(pod("main", volumes=[TOKEN_VOLUME]))
    plan_ = build(inj(op("volume", name="v", source={"emptyDir": {}}),
                      sidecar(native=native, mounts=mounts)))
    _, result = run(plan_, admitted)
    added = result["spec"]["initContainers" if native else "containers"][-1]
    assert added["volumeMounts"][-1] == TOKEN_MOUNT
    assert added["volumeMounts"][:-1] == [{"name": "v", "mountPath": "/m", "readOnly": True}
                                          for _ in mounts]
    assert service_account_plugin(result) == result


@pytest.mark.parametrize("spec, sidecar_mounts", [
    ({}, []),                                                                     # no token volume
    ({"volumes": [TOKEN_VOLUME], "automountServiceAccountToken": False}, []),    # opted out
    ({"volumes": [TOKEN_VOLUME, {"name": "own", "emptyDir": {}}]},                # its own there
     [{"volume": "own", "path": "/var/run/secrets/kubernetes.io/serviceaccount"}]),
])
def test_sidecar_without_a_token_mount(spec, sidecar_mounts):
    admitted = service_account_plugin(pod("main", **spec))
    _, result = run(build(inj(sidecar(mounts=sidecar_mounts))), admitted)
    added = result["spec"]["containers"][-1]
    assert all(m["name"] != TOKEN_VOLUME["name"] for m in added.get("volumeMounts", []))
    assert service_account_plugin(result) == result


def test_sidecar_templates_name_the_sidecar_and_the_pod():
    made = sidecar(image=["img/", var("container")], command=[["run"], [var("container")]],
                   args=[[var("pod")], ["--ns=", expr("namespace")]],
                   env_=[{"name": "WHO", "value": [var("container"), "@", var("pod")]}])
    _, result = run(build(inj(made)), pod("main", name="p-0"), namespace="ns")
    assert result["spec"]["containers"][-1] == {
        "name": "collector", "image": "img/collector", "command": ["run", "collector"],
        "args": ["p-0", "--ns=ns"], "env": [{"name": "WHO", "value": "collector@p-0"}]}


def test_sidecar_with_empty_image_is_an_error():
    with pytest.raises(mutator.MutationError, match="image is empty"):
        mutator.mutate(build(inj(sidecar(image=[expr("pod.nothing")]))), pod())


def test_completion_containers():
    """Argo pods run `wait` + `main`: the collector must wait for `main` only."""
    plan_ = build(inj(sidecar(native=True), sidecar("other", env_=[
        {"name": mutator.COMPLETION_ENV, "value": ["mine"]}]),
        kinds=["workflow"], completion=["main"]))
    _, result = run(plan_, pod("wait", "main", owner="workflow"))
    assert result["metadata"]["annotations"][mutator.COMPLETION_ANNOTATION] == "main"
    assert result["spec"]["initContainers"][0]["env"] == [
        {"name": mutator.COMPLETION_ENV, "value": "main"}]
    assert result["spec"]["containers"][-1]["env"] == [
        {"name": mutator.COMPLETION_ENV, "value": "mine"}]


def test_completion_containers_are_listed_in_order():
    plan_ = build(inj(sidecar(native=True), kinds=["workflow"], completion=["main", "wait"]))
    _, result = run(plan_, pod("wait", "main", owner="workflow"))
    assert result["metadata"]["annotations"][mutator.COMPLETION_ANNOTATION] == "main,wait"
    assert result["spec"]["initContainers"][0]["env"] == [
        {"name": mutator.COMPLETION_ENV, "value": "main,wait"}]


def test_completion_on_a_pod_whose_annotations_cannot_be_written_fails_its_injection():
    """The completion annotation is the injection's last step: it fails there, citing the
    injection, before a later injection runs (whose own failure would be reported instead)."""
    at = {**SPAN, "line": 30, "endLine": 30}
    first = {**inj(sidecar(native=True), name="first", kinds=["workflow"], completion=["main"]),
             "span": at}
    second = inj(wrap(argv=[["/jr/run"]]), name="second", kinds=["workflow"])
    for injections in ([first], [first, second]):
        with pytest.raises(mutator.MutationError) as info:
            mutator.mutate(build(*injections),
                           pod(container("main", command=None), owner="workflow",
                               annotations=["x"]))
        assert (info.value.injection, info.value.span.line, info.value.message) == (
            "first", 30, "pod field metadata.annotations is a list, not an object")


@pytest.mark.parametrize(("written", "received", "message"), [
    (lambda: sidecar(native=True), lambda: pod("main", init=(), initContainers="x"),
     "pod field spec.initContainers is a str, not an array"),
    (lambda: sidecar(), lambda: pod("main", containers={"main": {}}),
     "pod field spec.containers is a dict, not an array"),
    (lambda: sidecar(mounts=[{"volume": "nope", "path": "/p"}]), lambda: pod("main"),
     "mount of volume 'nope', which neither the pod nor an earlier `volume` op declares"),
    (lambda: wrap(argv=[["/jr/run"]]), lambda: pod(container("main", command=None)),
     "container 'main' has no command: its entrypoint is in the image, which the webhook does "
     "not read; spell the command out in the pod template"),
    (lambda: wrap(argv=[["/jr/run"]]), lambda: pod(container("main", args="x")),
     "container 'main': command and args must be string lists"),
    (lambda: annotate(), lambda: pod("main", annotations=["x"]),
     "pod field metadata.annotations is a list, not an object"),
    (lambda: op("volume", name="v", source={"emptyDir": {}}), lambda: {**pod("main"), "spec": ["x"]},
     "pod field spec is a list, not an object"),
], ids=["native", "regular", "sidecar-mount", "no-command", "odd-args", "annotate", "odd-spec"])
def test_an_op_that_cannot_be_applied_fails_citing_it(written, received, message):
    at = {**SPAN, "line": 26, "endLine": 26}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj({**written(), "span": at})), received())
    assert (info.value.injection, info.value.span.line, info.value.message) == ("inj", 26, message)


# ---------------------------------------------------------------------------------------------
# Command wrapping


def wrap(argv=None, shell=None, containers=None):
    return op("wrap", containers=containers or primary(), argv=argv, shell=shell)


def test_wrap_with_argv_prefix():
    c = container("main", command=["python", "train.py"], args=["--lr", "0.1"])
    mutation, result = run(build(inj(wrap(argv=[["/jr/run"], ["--"]]))), pod(c))
    assert list(mutation.patch[1:]) == [
        patch.test("/spec/containers/0/name", "main"),
        patch.replace("/spec/containers/0/command",
                      ["/jr/run", "--", "python", "train.py", "--lr", "0.1"]),
        patch.remove("/spec/containers/0/args"),
    ]
    assert "args" not in result["spec"]["containers"][0]


def test_wrap_without_args():
    mutation, _ = run(build(inj(wrap(argv=[["w"]]))), pod(container("main", command=["x"])))
    assert patch.remove("/spec/containers/0/args") not in mutation.patch


def test_wrap_with_shell():
    c = container("main", command=["python", "-c", "print('hi')"], args=["a b"])
    _, result = run(build(inj(wrap(shell=["exec ", var("argv"), " 2>&1 | tee /log/", var("container")]))),
                    pod(c))
    assert result["spec"]["containers"][0]["command"] == [
        "/bin/sh", "-c", "exec python -c 'print('\"'\"'hi'\"'\"')' 'a b' 2>&1 | tee /log/main"]


@pytest.mark.parametrize("command", [None, []])
def test_wrap_needs_a_command(command):
    c = container("main", command=command, args=["x"])
    with pytest.raises(mutator.MutationError, match="container 'main' has no command") as info:
        mutator.mutate(build(inj(wrap(argv=[["w"]]))), pod(c))
    assert "entrypoint is in the image" in info.value.message


@pytest.mark.parametrize("fields", [{"command": "run me"}, {"command": ["a", 1]},
                                    {"args": "x"}, {"args": [None]}])
def test_wrap_rejects_malformed_command(fields):
    c = {"name": "main", "image": "i", "command": ["app"], **fields}
    with pytest.raises(mutator.MutationError, match="string lists|no command"):
        mutator.mutate(build(inj(wrap(argv=[["w"]]))), pod(c))


def test_wraps_compose_in_order():
    plan_ = build(inj(wrap(argv=[["/jr/run"]]), wrap(shell=["exec ", var("argv")])))
    _, result = run(plan_, pod(container("main", command=["app"], args=["$x"])))
    assert result["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", "exec /jr/run app '$x'"]


def test_wrap_is_not_repeated_on_a_recorded_pod():
    plan_ = build(inj(wrap(argv=[["w"]])))
    p = pod(container("main", command=["w", "app"]), annotations={RECORD: record("inj")})
    assert mutator.mutate(plan_, p).patch == ()


@pytest.mark.parametrize(("argv", "shell"), [(None, None), ([["a"]], ["b"])])
def test_wrap_needs_exactly_one_form(argv, shell):
    at = {**SPAN, "line": 27, "endLine": 27}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj({**wrap(argv=argv, shell=shell), "span": at})), pod())
    assert (info.value.injection, info.value.span.line, info.value.message) == (
        "inj", 27, "wrap needs exactly one of argv or shell")


def test_wrap_argv_names_each_container():
    c = container("main", command=["app"])
    _, result = run(build(inj(wrap(argv=[["/jr/run"], ["--name=", var("container")]],
                                   containers=every()))), pod(c, container("aux", command=["x"])))
    assert [c["command"] for c in result["spec"]["containers"]] == [
        ["/jr/run", "--name=main", "app"], ["/jr/run", "--name=aux", "x"]]


def test_wrap_leaves_other_containers_alone():
    p = pod("wait", container("main", command=["app"]), owner="workflow")
    _, result = run(build(inj(wrap(argv=[["w"]]), kinds=["workflow"])), p)
    assert [c["command"] for c in result["spec"]["containers"]] == [["run"], ["w", "app"]]


WORDS = ["plain", "two words", "it's", 'say "hi"', "$HOME", "${x:-y}", "`id`", "$(id)",
         "back\\slash", "line1\nline2", "", " ", "*", "?", "--flag=a b", "%s", "tab\there",
         "ünïcode", ";", "&&", "|", "#", "~", "!"]


def _run_wrapped(command: list[str], shell: list) -> str:
    c = container("main", command=command[:2], args=command[2:])
    _, result = run(build(inj(wrap(shell=shell))), pod(c))
    wrapped = result["spec"]["containers"][0]["command"]
    done = subprocess.run(wrapped, capture_output=True, check=True, timeout=10,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    return done.stdout.decode()


@pytest.mark.parametrize("shell", [
    ["exec ", var("argv")],
    [var("argv"), " | cat"],
    ["set -e; ", var("argv"), " 2>&1"],
])
def test_shell_wrap_keeps_every_argument(shell):
    assert _run_wrapped(["printf", "%s\\n", *WORDS], shell) == "".join(w + "\n" for w in WORDS)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                        max_size=8), max_size=5))
def test_shell_wrap_keeps_any_arguments(words):
    assert _run_wrapped(["printf", "%s\\n", *words], ["exec ", var("argv")]) == \
        ("".join(w + "\n" for w in words) if words else "\n")


def test_argv_wrap_runs():
    prefix = [["/bin/sh"], ["-c"], ['exec "$@"'], ["wrapper"]]
    c = container("main", command=["printf", "%s\\n"], args=WORDS)
    _, result = run(build(inj(wrap(argv=prefix))), pod(c))
    done = subprocess.run(result["spec"]["containers"][0]["command"], capture_output=True,
                          check=True, timeout=10)
    assert done.stdout.decode() == "".join(w + "\n" for w in WORDS)


def test_shell_rendering_uses_shlex_join():
    c = container("main", command=["a b"], args=["c'd"])
    _, result = run(build(inj(wrap(shell=[var("argv")]))), pod(c))
    assert result["spec"]["containers"][0]["command"][2] == shlex.join(["a b", "c'd"])


# ---------------------------------------------------------------------------------------------
# Templates and errors


@pytest.mark.parametrize(("parts", "meta", "expected"), [
    ([var("job")], {}, "owner-1"),
    ([var("kind")], {}, "TFJob"),
    ([var("task")], {}, "Master"),
    ([var("pod")], {"name": "p-0"}, "p-0"),
    ([var("pod")], {}, "owner-1-"),
    ([var("namespace")], {}, "ns"),
    ([expr("pod.metadata.labels")], {}, json.dumps(MASTER, separators=(",", ":"), sort_keys=True)),
    ([expr("`3`")], {}, "3"),
    ([expr("`true`")], {}, "true"),
    ([expr("pod.nothing")], {}, ""),
    (["{literal}", expr("'x'")], {}, "{literal}x"),
    (["con", "cat"], {}, "concat"),                              # literal parts only
    ([var("pod")], {"name": 5}, ""),                             # a name that is not a string
    ([var("pod")], {"name": None, "generateName": None}, ""),    # neither name nor prefix
    ([expr("age('2020-01-01T00:00:00Z') > `100000000`")], {}, "true"),   # the clock, aware
])
def test_template_rendering(parts, meta, expected):
    p = pod("tensorflow", owner="tfjob", labels=MASTER)
    p["metadata"].update(meta)
    _, result = run(build(inj(annotate("out", parts), kinds=["tfjob"])), p, namespace="ns")
    assert result["metadata"]["annotations"]["out"] == expected


@pytest.mark.parametrize(("ops", "message"), [
    ([annotate("a", [var("exit_code")])], "placeholder {exit_code} has no value here"),
    ([annotate("a", [var("container")])], "placeholder {container} has no value here"),
    ([annotate("a", [var("argv")])], "placeholder {argv} has no value here"),
    ([wrap(argv=[[var("argv")]])], "placeholder {argv} has no value here"),
])
def test_placeholders_without_a_value_are_refused_when_the_plan_loads(ops, message):
    with pytest.raises(plan.PlanError, match=re.escape(message)):
        build(inj(*ops))


def test_rule_errors():
    with pytest.raises(mutator.MutationError, match="JMESPath .* failed"):
        mutator.mutate(build(inj(annotate("a", [expr("length(pod.metadata.generateName.x)")]))),
                       pod())


def test_error_carries_the_rule():
    broken = op("sidecar", name="s", native=False, image=[""], command=None, args=None, env=[],
                mounts=[])
    broken["span"] = {"path": "rules/k.rules", "line": 12, "column": 5, "endLine": 12, "endColumn": 9}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj(broken, name="katib")), pod())
    err = info.value
    assert (err.injection, str(err.span), err.message) == (
        "katib", "rules/k.rules:12:5", "sidecar 's': image is empty")
    assert str(err) == "rules/k.rules:12:5: injection katib: sidecar 's': image is empty"


@pytest.mark.parametrize("where_fails", [False, True], ids=["in-a-step", "in-the-filter"])
def test_an_expression_failing_is_the_failure_of_the_injection_running_it(where_fails):
    """The steps and filters of every injection run under one handler: the failure is the
    one running's, not the first's."""
    failing = expr("length(`1`)")
    second = (inj(annotate(), name="second", match=where(failing["expr"])) if where_fails
              else inj(annotate("b", [failing]), name="second"))
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj(annotate("a"), name="first"), second), pod())
    assert info.value.injection == "second"


@pytest.mark.parametrize(("value", "expected"), [
    ([expr("owner.metadata.name")], "owner-1"),
    ([expr("owner.metadata.name"), "-x"], "owner-1-x"),
    (["x-", expr("owner.metadata.name")], "x-owner-1"),
    ([expr("owner.metadata.name"), expr("owner.metadata.name")], "owner-1owner-1"),
    ([expr("owner.metadata")], json.dumps({"name": "owner-1", "uid": ref_of("job")["uid"]},
                                          separators=(",", ":"), sort_keys=True)),
    ([expr("owner.nothing")], ""),
], ids=["lone", "then-text", "after-text", "two", "an-object", "null"])
def test_a_field_path_renders_alone_or_among_other_parts(value, expected):
    """A template that is one field path is read without the renderer: the same text."""
    _, result = run(build(inj(env(value=value))), pod())
    assert result["spec"]["containers"][0]["env"] == [{"name": "TRIAL", "value": expected}]


def test_filter_error_cites_the_expression():
    match = {"op": "jmespath", "expr": "length(`1`)", "span": {**SPAN, "line": 7}}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build(inj(annotate(), match=match)), pod())
    assert (info.value.injection, info.value.span.line) == ("inj", 7)
    assert re.fullmatch(r"JMESPath 'length\(`1`\)' failed: In function length\(\), invalid type .*",
                        info.value.message)


# ---------------------------------------------------------------------------------------------
# Reinvocation, other webhooks, malformed pods


KATIB = inj(
    annotate("sidecar.istio.io/inject", ["false"]),
    env("TRIAL", [var("job")], primary()),
    op("volume", name="metrics", source={"emptyDir": {}}),
    mount("metrics", "/var/log/katib"),
    sidecar("metrics-collector", native=True, args=[["-t"], [var("job")]],
            mounts=[{"volume": "metrics", "path": "/var/log/katib", "readOnly": False}]),
    wrap(shell=["exec ", var("argv"), " 2>&1 | tee /var/log/katib/metrics.log"]),
    name="katib", kinds=["tfjob", "workflow", "job"], match=label("katib.kubeflow.org/trial"),
    completion=["main"])
EVERYWHERE = inj(env("ALL", ["1"], every()), op("label", key="jobrules.dev/managed", value=["yes"]),
                 sidecar("log-shipper"), name="everywhere", kinds=KIND_NAMES)


def test_reinvocation_after_another_webhook():
    """Another webhook added a container and an annotation after us: only the new container
    gets what `all` containers get; nothing is wrapped twice and the record is kept."""
    plan_ = build(KATIB, EVERYWHERE)
    first, result = run(plan_, pod(container("main", command=["app"]), owner="workflow",
                                   labels=TRIAL))
    assert first.applied == ("katib", "everywhere")
    result["spec"]["containers"].insert(0, container("istio-proxy", command=None))
    result["metadata"]["annotations"]["other"] = "x"
    second, final = run(plan_, result)
    assert second.applied == ("everywhere",)
    assert list(second.patch) == [
        patch.test("/spec/containers/0/name", "istio-proxy"),
        patch.add("/spec/containers/0/env", [{"name": "ALL", "value": "1"}]),
    ]
    assert final["spec"]["containers"][1]["command"][:2] == ["/bin/sh", "-c"]


def test_record_keeps_earlier_entries():
    p = pod(annotations={RECORD: '["older@ffffffffffff"]'})
    _, result = run(build(inj(annotate())), p)
    assert json.loads(result["metadata"]["annotations"][RECORD]) == \
        ["older@ffffffffffff", "inj@0123456789ab"]


@pytest.mark.parametrize("raw", ["not json", '{"a": 1}', "[1, 2]", "3"])
def test_malformed_record_is_replaced(raw):
    _, result = run(build(inj(annotate())), pod(annotations={RECORD: raw}))
    assert result["metadata"]["annotations"][RECORD] == record("inj")


def test_the_record_names_each_injection_by_a_digest_of_what_it_does(monkeypatch):
    """`name@digest`, the digest of the injection alone: the same wherever it is written and
    whatever else the plan holds (its digest, other injections), another when what it does
    changes. Idempotence keys on the name only (a pod recorded under an older digest is not
    wrapped again)."""
    monkeypatch.setattr(inject_module, "digest", DIGEST_OF)
    moved = {**SPAN, "line": 40, "endLine": 40}

    def entries(*injections: dict, digest: str = DIGEST) -> list[str]:
        _, result = run(build(*injections, digest=digest), pod())
        return json.loads(result["metadata"]["annotations"][RECORD])

    one = entries(inj(annotate(), name="one"))
    [injection] = build(inj(annotate(), name="one")).plan.injections
    assert one == [f"one@{DIGEST_OF(injection)}"] and re.fullmatch(r"one@[0-9a-f]{12}", one[0])
    elsewhere = inj(annotate(), name="one")
    elsewhere["span"] = moved
    elsewhere["ops"][0]["span"] = moved
    assert entries(elsewhere, digest="f" * 64)[:1] == one
    assert entries(inj(annotate(), name="one"), inj(annotate("other", ["x"]), name="two"))[:1] == one
    assert entries(inj(annotate("k", ["changed"]), name="one")) != one
    assert entries(inj(annotate(), name="one", kinds=("job", "workflow"))) != one
    assert entries(inj(annotate(), name="renamed"))[0].split("@")[1] != one[0].split("@")[1]


def test_every_webhook_replica_records_the_same_digest(tmp_path):
    """Each replica of the webhook is its own process, with its own hash seed: the digest of an
    injection holding a set (`namespace in [...]`) must not follow the set's iteration order."""
    names = [f"team-{i}" for i in range(40)]
    shape = {"planVersion": 1, "files": [], "kinds": KINDS, "injections": [
        inj(annotate(), name="one", match={"op": "namespace", "values": names, "negate": False})]}
    (tmp_path / "plan.json").write_text(json.dumps(shape))
    code = ("import json, sys; from runtime import plan; from runtime.mutator import inject; "
            "print(inject.digest(plan.load(json.load(open(sys.argv[1]))).injections[0]))")
    seen = {subprocess.run([sys.executable, "-c", code, str(tmp_path / "plan.json")],
                           capture_output=True, text=True, check=True, timeout=60,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout.strip()
            for seed in (1, 2, 3)}
    shape["injections"][0]["match"]["values"] = names[::-1]
    assert seen == {DIGEST_OF(plan.load(shape).injections[0])}


def test_a_value_the_digest_does_not_know_is_refused_by_its_type():
    [injection] = build(inj(annotate(), name="one")).plan.injections
    with pytest.raises(TypeError, match=r"^no canonical form for a complex in an injection$"):
        DIGEST_OF(dataclasses.replace(injection, kinds=(1j,)))


def test_every_shipped_injection_has_a_digest():
    """No plan type the digest does not know (it refuses those) in any injection of the
    examples, whose plans use every kind of op."""
    from tests.unit.runtime import corpus

    injections = [i for p in corpus.plans() for i in p.loaded.injections]
    assert injections
    for injection in injections:
        assert re.fullmatch(r"[0-9a-f]{12}", DIGEST_OF(injection))


def test_conflicting_writes_last_wins_and_no_credit_when_unchanged():
    plan_ = build(inj(annotate("k", ["a"]), name="one"), inj(annotate("k", ["b"]), name="two"))
    mutation, result = run(plan_, pod())
    assert result["metadata"]["annotations"]["k"] == "b" and mutation.applied == ("two",)
    assert mutator.mutate(plan_, pod(annotations={"k": "b"})).patch == ()


MALFORMED = [
    ("metadata", ["x"]),
    ("metadata.annotations", ["x"]),
    ("metadata.labels", "x"),
    ("metadata.ownerReferences", "x"),
    ("spec", []),
    ("spec", None),
    ("spec.containers", {"main": {}}),
    ("spec.containers", ["x", None, {"image": "no-name"}]),
    ("spec.initContainers", "x"),
    ("spec.volumes", {"v": 1}),
    ("spec.containers.0.env", "x"),
    ("spec.containers.0.volumeMounts", {"x": 1}),
    ("spec.containers.0.command", "x"),
    ("spec.containers.0.name", 3),
]


@pytest.mark.parametrize(("field", "value"), MALFORMED)
@pytest.mark.parametrize("injection", [KATIB, EVERYWHERE], ids=["katib", "everywhere"])
def test_malformed_pods_give_a_patch_or_a_mutation_error(field, value, injection):
    p = pod(container("main", command=["app"]), owner="workflow", labels=TRIAL)
    *path, last = field.split(".")
    target = p
    for key in path:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[int(last) if isinstance(target, list) else last] = value
    try:
        run(build(injection), p)
    except mutator.MutationError as err:
        assert err.injection == injection["name"]


def test_a_pod_that_is_not_an_object():
    assert mutator.mutate(build(KATIB), ["x"]) == mutator.Mutation((), (), None)


# ---------------------------------------------------------------------------------------------
# Property: any pod shape, any of these plans: a patch that applies, then nothing more to do


names = st.sampled_from(["main", "wait", "tensorflow", "istio-proxy", "metrics-collector",
                         "log-shipper", "a", "b/c"])
keys = st.sampled_from(["sidecar.istio.io/inject", RECORD, "katib.kubeflow.org/trial",
                        "training.kubeflow.org/job-role", mutator.COMPLETION_ANNOTATION,
                        "jobrules.dev/managed"]) | st.text("ab/~.-", min_size=1, max_size=5)
texts = st.sampled_from(["master", "true", "false", "", "yes"]) | st.text(max_size=4)
maps = st.none() | st.dictionaries(keys, texts, max_size=4)
env_lists = st.none() | st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["TRIAL", "ALL", "X", "JOBRULES_COMPLETION_CONTAINERS"]),
                           "value": texts}), max_size=3)
argvs = st.none() | st.lists(st.text(max_size=5), min_size=1, max_size=3)
mounts = st.none() | st.lists(st.fixed_dictionaries({
    "name": st.sampled_from(["metrics", "other"]),
    "mountPath": st.sampled_from(["/var/log/katib", "/x"])}), max_size=2)


@st.composite
def containers(draw, names_: list[str]) -> list[dict]:
    out = []
    for name in names_:
        c: dict = {"name": name, "image": "img"}
        for key, strategy in (("command", argvs), ("args", argvs), ("env", env_lists),
                              ("volumeMounts", mounts)):
            if draw(st.booleans()):
                c[key] = draw(strategy)
        out.append(c)
    return out


@st.composite
def pods(draw) -> dict:
    all_names = draw(st.lists(names, unique=True, max_size=5))
    split = draw(st.integers(0, len(all_names)))
    meta: dict = {"generateName": "p-"}
    for key in ("labels", "annotations"):
        if draw(st.booleans()):
            meta[key] = draw(maps)
    if draw(st.booleans()):
        meta["labels"] = {**TRIAL, **MASTER, **(meta.get("labels") or {})}
    owner = draw(st.sampled_from(["tfjob", "workflow", "job", *KIND_NAMES, None]))
    if owner:
        meta["ownerReferences"] = [ref_of(owner)]
    spec: dict = {"containers": draw(containers(all_names[:split]))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(containers(all_names[split:]))
    if draw(st.booleans()):
        spec["volumes"] = draw(st.lists(st.fixed_dictionaries(
            {"name": st.sampled_from(["metrics", "v"]), "emptyDir": st.just({})}), max_size=2))
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    for key in ("metadata", "spec"):
        if draw(st.integers(0, 20)) == 10:   # rarely: hypothesis draws the bounds often
            del p[key]
    return p


PLANS = [
    build(KATIB, EVERYWHERE),
    build(inj(sidecar(native=True), env("ALL", ["x"], every()), kinds=["workflow"],
              completion=["main"], name="argo"), EVERYWHERE),
    build(inj(op("volume", name="metrics", source={"configMap": {"name": "c"}}),
              mount("metrics", "/var/log/katib", containers=named("main", "wait")),
              wrap(argv=[["/w"], [var("pod")]], containers=named("main")),
              annotate("a/b~c", [var("job")]), kinds=KIND_NAMES),
          inj(annotate("a/b~c", [var("job")]), op("label", key="~/", value=[""]), kinds=KIND_NAMES,
              name="late")),
]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(pods(), st.sampled_from(range(len(PLANS))))
def test_any_pod_patch_applies_and_reinvocation_is_a_no_op(pod_, which):
    try:
        run(PLANS[which], pod_, namespace="ns")
    except mutator.MutationError as err:
        assert err.injection in {i.name for i in PLANS[which].plan.injections}


# ---------------------------------------------------------------------------------------------
# Property: any plan, any pod, however malformed: the patch applies to exactly the pod received.
# The webhook sends the mutator's patch without applying it first, on the strength of this.

odd_values = (st.none() | st.booleans() | st.integers(-1, 1) | st.text("ab/", max_size=2)
              | st.lists(st.none() | st.text("ab", max_size=1) | st.integers(0, 1)
                         | st.dictionaries(st.sampled_from(["name", "mountPath"]),
                                           st.none() | st.integers(0, 1) | names, max_size=2),
                         max_size=2)
              | st.dictionaries(st.sampled_from(["name", "env", "main", "a/b"]),
                                st.none() | st.text("ab", max_size=1), max_size=2))
# Every field the mutator reads or writes into, each of which a pod may have of any type (the
# first are drawn most often: the whole metadata or spec goes last).
ODD_PLACES = [*((field, *tail) for field in ("containers", "initContainers")
                for tail in [(0, "env"), (0, "volumeMounts"), (0, "command"), (0, "args"),
                             (0, "env", 0), (0, "volumeMounts", 0), (0, "name"), (-1, "name"),
                             (0,), ()]),
              ("annotations",), ("labels",), ("annotations", RECORD), ("volumes",),
              ("volumes", 0), ("volumes", 0, "name"), ("automountServiceAccountToken",),
              ("metadata",), ("spec",)]
_UNDER = {"annotations": "metadata", "labels": "metadata", "metadata": None, "spec": None}


@st.composite
def odd_pods(draw) -> dict:
    """A pod of `pods()`, with up to three of its fields given another value of any type."""
    p = draw(pods())
    spec = p.get("spec")
    if isinstance(spec, dict):
        if not spec["containers"]:
            spec["containers"] = draw(containers(draw(st.lists(names, min_size=1, max_size=3,
                                                               unique=True))))
        if draw(st.booleans()):   # the service-account token volume, as the API server adds it
            spec["volumes"] = [*(spec.get("volumes") or []),
                               {"name": "kube-api-access-x1", "projected": {}}]
    for place in draw(st.lists(st.sampled_from(ODD_PLACES), max_size=3)):
        top = _UNDER.get(place[0], "spec")
        *path, last = place if top is None else (top, *place)
        target: Any = p
        for key in path:
            if isinstance(target, dict) and key in target:
                target = target[key]
            elif isinstance(target, list) and target and isinstance(key, int):
                target = target[key]
            else:
                break
        else:
            if isinstance(target, dict) and isinstance(last, str):
                target[last] = draw(odd_values)
            elif isinstance(target, list) and target and isinstance(last, int):
                target[last] = draw(odd_values)
    return p


container_names_ = st.sampled_from(["main", "wait", "tensorflow", "log-shipper", "b/c"])
plan_texts = st.lists(st.sampled_from(["x", "", "a b", "~/"]) | st.sampled_from(
    [var("job"), var("namespace"), var("pod"), var("task"), var("kind"),
     expr("owner.metadata.name"), expr("namespace"), expr("owner.kind")]), max_size=3)
container_texts = st.lists(st.sampled_from(["x", ""]) | st.sampled_from(
    [var("container"), var("job"), expr("namespace")]), max_size=2)
selections = st.sampled_from([primary(), every(), named("main"), named("wait", "b/c")])
volume_names = st.sampled_from(["metrics", "v", "kube-api-access-x1"])
plan_ops = st.one_of(
    st.builds(annotate, st.sampled_from(["a", "a/b~c", "sidecar.istio.io/inject"]), plan_texts),
    st.builds(lambda key, value: op("label", key=key, value=value),
              st.sampled_from(["l", "~/"]), st.lists(st.sampled_from(["yes", "", "not valid"])
                                                    | st.just(var("job")), max_size=2)),
    st.builds(env, st.sampled_from(["ALL", "TRIAL", "JOBRULES_COMPLETION_CONTAINERS"]),
              container_texts, selections),
    st.builds(lambda name, source: op("volume", name=name, source=source), volume_names,
              st.sampled_from([{"emptyDir": {}}, {"configMap": {"name": "c"}}])),
    st.builds(mount, volume_names, st.sampled_from(["/x", "/var/log/katib"]), st.booleans(),
              selections),
    st.builds(lambda name, native, image, args, env_, mounts: sidecar(
        name, native, image, args=args, env_=env_, mounts=mounts),
        st.sampled_from(["agent", "log-shipper", "main"]), st.booleans(),
        st.sampled_from([["img"], [""], ["img:", var("container")]]),
        st.none() | st.lists(container_texts, max_size=2),
        st.lists(st.builds(lambda n, v: {"name": n, "value": v}, st.sampled_from(["A", "B"]),
                           container_texts), max_size=2),
        st.lists(st.builds(lambda v, p, r: {"volume": v, "path": p, "readOnly": r}, volume_names,
                           st.sampled_from(["/x", "/var/run/secrets/kubernetes.io/serviceaccount"]),
                           st.booleans()), max_size=2)),
    st.builds(lambda argv, which: wrap(argv=argv, containers=which),
              st.lists(container_texts, min_size=1, max_size=2), selections),
    st.builds(lambda shell, which: wrap(shell=shell, containers=which),
              st.sampled_from([["exec ", var("argv")], [var("argv"), " ", var("container")]]),
              selections),
)


@st.composite
def random_plans(draw) -> mutator.Injector:
    volumes = [op("volume", name=name, source={"emptyDir": {}}) for name in ("metrics", "v")]
    injections = [inj(*draw(st.lists(plan_ops, min_size=1, max_size=5).map(
                          lambda ops: [*volumes, *ops] if len(ops) % 2 else ops)), name=f"i{n}",
                      kinds=draw(st.just(KIND_NAMES) | st.lists(st.sampled_from(KIND_NAMES),
                                                                min_size=1, unique=True)),
                      match=draw(st.sampled_from([None, None, label("katib.kubeflow.org/trial"),
                                                  negated(label("x"))])),
                      completion=draw(st.sampled_from([None, ["main"]])))
                  for n in range(draw(st.integers(1, 3)))]
    return build(*injections)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_plans(), odd_pods())
def test_any_plan_any_pod_gives_a_patch_that_applies(plan_, pod_):
    """Applied by two independent appliers, it succeeds and they agree; or the mutator refuses
    the pod with a MutationError naming an injection. The pod is left as it was."""
    before = copy.deepcopy(pod_)
    try:
        mutation = mutator.mutate(plan_, pod_, None, "ns")
    except mutator.MutationError as err:
        assert err.injection in {i.name for i in plan_.plan.injections}
        return
    finally:
        assert pod_ == before
    result = jsonpatch.apply_patch(pod_, list(mutation.patch))
    assert patch.apply(pod_, mutation.patch) == result
    assert mutator.mutate(plan_, result, None, "ns").applied == ()


# ---------------------------------------------------------------------------------------------
# reads_pod: whether admission may skip the pod fields outside PodView


@pytest.mark.parametrize("injection, reads", [
    (inj(annotate()), False),
    (inj(env(value=[expr("owner.metadata.name")])), False),
    (inj(env(value=["ns-", expr("namespace")])), False),
    (inj(env(value=[var("pod"), var("job"), var("container")])), False),
    (inj(annotate(), kinds=["tfjob", "bytask"]), False),   # task label, label and task filters
    (inj(annotate(), match=label("team")), False),
    (inj(annotate(value=[expr("pod.metadata.name")])), True),
    (inj(sidecar(args=[["--at"], [expr("@")]])), True),
    (inj(wrap(shell=[expr("pod.spec.nodeName")])), True),
    (inj(annotate(), match={"op": "jmespath", "expr": "owner.metadata.name == 'x'", "span": SPAN}),
     True),   # not a field path: it could read anything
    (inj(annotate(), kinds=["vcjob"]), True),    # a task expression reads the pod
    (inj(annotate(), kinds=["byexpr"]), True),   # so does a `primary pods` expression
], ids=str)
def test_reads_pod(injection: dict, reads: bool) -> None:
    assert build(injection).reads_pod is reads


def test_kinds_without_injections_do_not_count() -> None:
    assert build().reads_pod is False   # vcjob and byexpr read the pod, unused


# ---------------------------------------------------------------------------------------------
# Scopes, odd owners and pods, appended entries (each found by a surviving mutant)


def build_with(extra_kind: dict, *injections: dict) -> mutator.Injector:
    return mutator.prepare(plan.load(
        {"planVersion": 1, "files": [], "kinds": KINDS + [extra_kind], "injections": list(injections)},
        digest=DIGEST))


def test_a_pod_outside_its_kind_s_namespaces_is_left_alone():
    injector = build_with(kind("scoped", "x.dev/v1", "Scoped", namespaces=["team-a"]),
                          inj(annotate(), kinds=["scoped"]))
    p = pod(owner=None)
    p["metadata"]["ownerReferences"] = [ref("x.dev/v1", "Scoped", controller=True)]
    assert mutator.mutate(injector, p, None, "team-b") == mutator.Mutation((), (), None)
    assert mutator.mutate(injector, p, None, "team-a").applied == ("inj",)
    p["metadata"]["namespace"] = "team-a"   # read from the pod when the request has none
    assert mutator.mutate(injector, p).applied == ("inj",)


def test_a_webhook_entry_the_plan_does_not_have_injects_nothing():
    """A call from an entry of another plan (a namespace selector this plan lacks)."""
    assert mutator.mutate(build(inj(annotate())), pod(), None, None, "team in (a)") == \
        mutator.Mutation((), (), "job")


def test_an_owner_that_is_not_an_object_is_read_from_the_reference():
    plan_ = build(inj(annotate("job", [var("job")])))
    mutation, result = run(plan_, pod(), owner=["not", "an", "object"])
    assert mutation.kind == "job"
    assert result["metadata"]["annotations"]["job"] == "owner-1"


def test_primary_containers_by_prefix():
    injector = build_with(kind("prefixed", "x.dev/v1", "Prefixed", primaryContainerPrefix="worker-"),
                          inj(env(), kinds=["prefixed"]))
    p = pod("launcher", "worker-0", "helper", "worker-1", owner=None)
    p["metadata"]["ownerReferences"] = [ref("x.dev/v1", "Prefixed", controller=True)]
    _, result = run(injector, p)
    assert ["env" in c for c in result["spec"]["containers"]] == [False, True, False, True]


def test_a_mount_is_appended_to_the_container_s_own_mounts():
    own = {"name": "own", "mountPath": "/own"}
    p = pod(container("tensorflow", volumeMounts=[own]), owner="tfjob",
            volumes=[{"name": "own", "emptyDir": {}}])
    plan_ = build(inj(op("volume", name="v", source={"emptyDir": {}}), mount(), kinds=["tfjob"]))
    mutation, result = run(plan_, p)
    added = {"name": "v", "mountPath": "/data"}
    assert patch.add("/spec/containers/0/volumeMounts/-", added) in mutation.patch
    assert result["spec"]["containers"][0]["volumeMounts"] == [own, added]


@pytest.mark.parametrize("native", [True, False])
def test_a_sidecar_on_a_pod_without_a_spec(native):
    p = pod()
    del p["spec"]
    field = "initContainers" if native else "containers"
    mutation, result = run(build(inj(sidecar(native=native))), p)
    assert list(mutation.patch[1:]) == [
        patch.add("/spec", {}),
        patch.add(f"/spec/{field}", [result["spec"][field][0]])]
    assert [c["name"] for c in result["spec"][field]] == ["collector"]


def test_an_annotation_on_a_pod_without_a_spec_adds_no_spec():
    p = pod()
    del p["spec"]
    mutation, result = run(build(inj(annotate())), p)
    assert "spec" not in result and len(mutation.patch) == 1


def test_the_token_mount_is_the_token_volume_s_whatever_else_the_volumes_hold():
    volumes = ["odd", {"name": 3}, {"name": "data", "emptyDir": {}}, TOKEN_VOLUME]
    _, result = run(build(inj(sidecar())), pod("main", volumes=volumes))
    assert result["spec"]["containers"][-1]["volumeMounts"] == [TOKEN_MOUNT]


def test_one_sidecar_named_by_two_injections_is_added_once():
    plan_ = build(inj(sidecar(), name="one"), inj(sidecar(image=["other"]), name="two"))
    mutation, result = run(plan_, pod("main"))
    assert [(c["name"], c["image"]) for c in result["spec"]["containers"]] == [
        ("main", "img/main"), ("collector", "img")]
    assert mutation.applied == ("one",)
    assert result["metadata"]["annotations"][RECORD] == record("one")


def test_the_record_on_a_pod_whose_annotations_cannot_be_written_cites_the_injection():
    """An injection that changed only containers still records itself: on a pod whose
    annotations are not an object, that fails citing the injection (no op of it wrote there)."""
    at = {**SPAN, "line": 31, "endLine": 31}
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(build({**inj(env()), "span": at}), pod(annotations=["x"]))
    assert (info.value.injection, info.value.span.line, info.value.message) == (
        "inj", 31, "pod field metadata.annotations is a list, not an object")


def test_record_entries_are_named_by_what_comes_before_their_last_at_sign():
    """A digest holds no `@`: an entry another writer left with more than one keeps its own
    name (everything before the last), and is kept as it is."""
    raw = '["a@b@ffffffffffff","a@eeeeeeeeeeee"]'
    _, result = run(build(inj(annotate())), pod(annotations={RECORD: raw}))
    assert json.loads(result["metadata"]["annotations"][RECORD]) == \
        ["a@b@ffffffffffff", "a@eeeeeeeeeeee", "inj@0123456789ab"]


def test_a_filter_the_mutator_does_not_know_is_refused_by_its_type():
    from runtime.mutator import steps

    with pytest.raises(TypeError, match=r"^not an injection filter: 3$"):
        steps._test(3)
