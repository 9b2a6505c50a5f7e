"""rulec.schema against the real CRDs in devkit/crds and the built-in batch/v1 Job."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit import crds
from rulec import schema

CRDS = crds.folder()
VCJOB = ("batch.volcano.sh/v1alpha1", "Job")
TFJOB = ("kubeflow.org/v1", "TFJob")
WORKFLOW = ("argoproj.io/v1alpha1", "Workflow")
JOB = ("batch/v1", "Job")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own CRD index cache: none reads or writes the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RULEC_NO_CACHE", raising=False)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> schema.SchemaIndex:
    """The real CRDs indexed through the cache: read once to fill it, then from it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("RULEC_NO_CACHE", raising=False)
        cold, errors = schema.SchemaIndex.load(sorted(CRDS.glob("*.yaml")))
        assert errors == []
        warm, errors = schema.SchemaIndex.load(sorted(CRDS.glob("*.yaml")))
        assert errors == []
    assert warm.schemas == cold.schemas and list(warm.schemas) == list(cold.schemas)
    return warm


def dotted(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        VCJOB,
        TFJOB,
        ("kubeflow.org/v1", "PyTorchJob"),
        ("kubeflow.org/v1", "MPIJob"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"),
        WORKFLOW,
        ("tekton.dev/v1", "PipelineRun"),
        ("tekton.dev/v1beta1", "PipelineRun"),
        ("kubeflow.org/v1beta1", "Trial"),
        JOB,
    ],
)
def test_known_kinds(index: schema.SchemaIndex, api_version: str, kind: str) -> None:
    assert index.has_kind(api_version, kind)


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [("batch.volcano.sh/v1beta1", "Job"), ("kubeflow.org/v1", "XGBoostJob"), ("v1", "Job")],
)
def test_unknown_kinds(index: schema.SchemaIndex, api_version: str, kind: str) -> None:
    assert not index.has_kind(api_version, kind)
    assert index.check_path(api_version, kind, ("anything",)) is None


def test_builtin_job_needs_no_file() -> None:
    index, errors = schema.SchemaIndex.load([])
    assert errors == [] and index.has_kind(*JOB) and not index.has_kind(*VCJOB)


@pytest.mark.parametrize(
    ("gvk", "path"),
    [
        (VCJOB, "status.state.phase"),
        (VCJOB, "status.state.message"),
        (VCJOB, "status.taskStatusCount.master.phase"),  # a map: any key, then its value schema
        (VCJOB, "spec.tasks.name"),  # arrays are transparent
        (VCJOB, "spec.tasks.0.name"),  # a numeric segment indexes
        (VCJOB, "spec.tasks.-1.name"),
        (VCJOB, "metadata.labels.volcano.sh/job-name"),  # metadata is never checked
        (VCJOB, "metadata.whatever"),
        (TFJOB, "status.conditions.type"),
        (TFJOB, "status.replicaStatuses.Worker.active"),
        (TFJOB, "spec.runPolicy.suspend"),
        (WORKFLOW, "status.phase"),  # x-kubernetes-preserve-unknown-fields: anything below
        (WORKFLOW, "status.nodes.x.y.z"),
        (WORKFLOW, "spec.suspend"),
        (JOB, "spec.suspend"),
        (JOB, "status.conditions.reason"),
        (JOB, "status.uncountedTerminatedPods.failed"),
        (JOB, "spec.template.spec.containers.name"),  # the pod template is not modelled
        (("tekton.dev/v1", "PipelineRun"), "spec.pipelineSpec.tasks.name"),
        (("kubeflow.org/v1beta1", "Trial"), "status.anything"),
    ],
)
def test_valid_paths(index: schema.SchemaIndex, gvk: tuple[str, str], path: str) -> None:
    assert index.check_path(*gvk, dotted(path)) is None


@pytest.mark.parametrize(
    ("gvk", "path", "index_", "segment", "suggestion"),
    [
        (VCJOB, "status.stat.phase", 1, "stat", "state"),
        (VCJOB, "status.state.phsae", 2, "phsae", "phase"),
        (VCJOB, "status.conditions.type", 2, "type", None),  # Volcano conditions have no type
        (TFJOB, "status.conditions.0.resaon", 3, "resaon", "reason"),
        (TFJOB, "spec.suspend", 1, "suspend", None),  # Kubeflow keeps it in runPolicy
        (TFJOB, "status.replicaStatuses.Worker.activ", 3, "activ", "active"),
        (JOB, "status.activ", 1, "activ", "active"),
        (JOB, "status.active.count", 2, "count", None),  # below a scalar
        (JOB, "spec.tasks", 1, "tasks", None),
        (WORKFLOW, "stauts.phase", 0, "stauts", "status"),
    ],
)
def test_invalid_paths(
    index: schema.SchemaIndex,
    gvk: tuple[str, str],
    path: str,
    index_: int,
    segment: str,
    suggestion: str | None,
) -> None:
    problem = index.check_path(*gvk, dotted(path))
    assert problem is not None
    assert (problem.index, problem.segment, problem.suggestion) == (index_, segment, suggestion)


def test_problem_lists_the_known_fields(index: schema.SchemaIndex) -> None:
    problem = index.check_path(*VCJOB, dotted("status.stat"))
    assert problem is not None and "state" in problem.expected and "retryCount" in problem.expected
    scalar = index.check_path(*JOB, dotted("status.active.count"))
    assert scalar is not None and scalar.expected == ()


def test_tfjob_filter_paths_are_valid(index: schema.SchemaIndex) -> None:
    expr = "status.conditions[?type=='Failed' && status=='True'] | [0].message"
    paths = schema.paths_in_jmespath(expr)
    assert paths == [
        ("status", "conditions", "type"),
        ("status", "conditions", "status"),
        ("status", "conditions", "message"),
    ]
    assert [index.check_path(*TFJOB, p) for p in paths] == [None, None, None]


@pytest.mark.parametrize(
    ("expr", "paths"),
    [
        ("status.state.phase", [("status", "state", "phase")]),
        ("status.conditions[0].type", [("status", "conditions", "0", "type")]),
        ("status.conditions[-1:].type", [("status", "conditions", "type")]),
        ("status.conditions[*].type | [0]", [("status", "conditions", "type")]),
        ("status.conditions[].reason", [("status", "conditions", "reason")]),
        ("spec.suspend && status.active > `0`", [("spec", "suspend"), ("status", "active")]),
        ("!(spec.suspend) || @.status.x", [("spec", "suspend"), ("status", "x")]),
        ("!spec.suspend", [("spec",)]),  # `!` binds tighter than `.`: this reads `spec`
        ("length(status.conditions[?type=='X']) > `0`", [("status", "conditions", "type")]),
        ("contains(['a', 'b'], status.phase)", [("status", "phase")]),
        ("{p: status.phase, m: [status.message]}", [("status", "phase"), ("status", "message")]),
        ("sort_by(status.conditions, &lastTransitionTime)", [("status", "conditions")]),
        ("status.replicaStatuses.*.active", [("status", "replicaStatuses")]),
        ("status.conditions[?type=='A'] | [0] | reason", [("status", "conditions", "type"),
                                                         ("status", "conditions", "reason")]),
        ("length(@) | foo", []),
        ("`{\"a\": 1}`.a", []),
        ("@", []),
    ],
)
def test_paths_in_jmespath(expr: str, paths: list[tuple[str, ...]]) -> None:
    assert schema.paths_in_jmespath(expr) == paths


def test_load_reports_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    plain = tmp_path / "ns.yaml"
    plain.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    missing = tmp_path / "missing.yaml"
    _, errors = schema.SchemaIndex.load([bad, plain, missing])
    assert [e.split(":")[0] for e in errors] == [str(bad), str(plain), str(missing)]
    assert "invalid YAML" in errors[0]
    assert "no CustomResourceDefinition" in errors[1]
    assert "cannot read" in errors[2]


def test_load_reads_lists_and_reports_versions_without_schema(tmp_path: Path) -> None:
    crds = tmp_path / "list.yaml"
    crds.write_text(
        """
kind: List
items:
- apiVersion: apiextensions.k8s.io/v1
  kind: CustomResourceDefinition
  metadata: {name: things.example.com}
  spec:
    group: example.com
    names: {kind: Thing, plural: things}
    versions:
    - name: v1
      schema:
        openAPIV3Schema:
          type: object
          properties:
            status: {type: object, properties: {phase: {type: string}}}
    - name: v2
"""
    )
    index, errors = schema.SchemaIndex.load([crds])
    assert index.has_kind("example.com/v1", "Thing")
    assert not index.has_kind("example.com/v2", "Thing")
    assert errors == [f"{crds}: Thing.example.com/v2: no openAPIV3Schema"]
    problem = index.check_path("example.com/v1", "Thing", ("status", "phas"))
    assert problem == schema.PathProblem(1, "phas", ("phase",), "phase")


def test_property_names_yaml_reads_as_other_types_are_strings(tmp_path: Path) -> None:
    """YAML 1.1 reads an unquoted `on` as true and `200` as a number: the schema names them as
    the API server does (a JSON string), and a path that leaves them is a problem, not a crash."""
    crd = tmp_path / "odd-keys.yaml"
    crd.write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: things.example.com}\n"
        "spec:\n  group: example.com\n  names: {kind: Thing, plural: things}\n"
        "  versions:\n  - name: v1\n    schema:\n      openAPIV3Schema:\n        type: object\n"
        "        properties:\n          status:\n            type: object\n            properties:\n"
        "              on: {type: object, properties: {off: {type: string}}}\n"
        "              200: {type: string}\n              ~: {type: string}\n"
    )
    index, errors = schema.SchemaIndex.load([crd])
    assert errors == []
    for path in (("status", "true", "false"), ("status", "200"), ("status", "null")):
        assert index.check_path("example.com/v1", "Thing", path) is None, path
    problem = index.check_path("example.com/v1", "Thing", ("status", "phase"))
    assert problem == schema.PathProblem(1, "phase", ("200", "null", "true"), None)
    deeper = index.check_path("example.com/v1", "Thing", ("status", "true", "fals"))
    assert deeper == schema.PathProblem(2, "fals", ("false",), "false")


def test_load_survives_documents_shaped_unlike_a_crd(tmp_path: Path) -> None:
    odd = tmp_path / "odd.yaml"
    odd.write_text(
        "kind: CustomResourceDefinition\nmetadata: {name: a}\nspec: [1]\n---\n"
        "kind: CustomResourceDefinition\nmetadata: {name: b}\n"
        "spec: {group: g, names: {kind: B}, versions: {v1: {}}}\n---\n"
        "kind: CustomResourceDefinition\nmetadata: {name: c}\n"
        "spec: {group: g, names: {kind: C}, versions: [v1, {name: v2, schema: 3}]}\n---\n"
        "kind: List\nitems: 7\n"
    )
    index, errors = schema.SchemaIndex.load([odd])
    assert errors == [
        f"{odd}: CustomResourceDefinition a: spec.group or spec.names.kind missing",
        f"{odd}: B.g: no spec.versions",
        f"{odd}: C.g/None: no openAPIV3Schema",
        f"{odd}: C.g/v2: no openAPIV3Schema",
    ]
    assert not index.has_kind("g/v1", "B")


def test_pruned_schemas_answer_as_the_full_ones(
    index: schema.SchemaIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeping only `_KEPT` changes no answer, for every path of the real CRDs and typos of it."""
    import difflib

    import yaml

    # A suggestion depends only on the segment and the fields expected, which are compared;
    # computing them all would take most of the test's time.
    monkeypatch.setattr(difflib, "get_close_matches", lambda *args, **kwargs: [])

    from rulec.checks.schema_paths import _schema_types

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    full: dict[schema.GVK, schema.Schema] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in schema._documents(list(yaml.load_all(path.read_text(), Loader=loader))):
            for version in crd["spec"]["versions"]:
                gvk = (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"])
                full[gvk] = version["schema"]["openAPIV3Schema"]
    assert set(full) | {schema._split_api_version(JOB[0]) + (JOB[1],)} == set(index.schemas)
    unpruned = schema.SchemaIndex(full)
    checked = 0
    for (group, version, kind), tree in full.items():
        api_version = f"{group}/{version}"
        for path in _paths(tree, (), depth=10):
            for probe in (path, (*path[:-1], path[-1] + "x"), (*path, "x")):
                assert index.check_path(api_version, kind, probe) == unpruned.check_path(
                    api_version, kind, probe), (api_version, kind, probe)
                assert _schema_types(index.schemas[(group, version, kind)], probe) == \
                    _schema_types(tree, probe), (api_version, kind, probe)
                checked += 1
    assert checked > 10_000


def _paths(node: object, prefix: tuple[str, ...], depth: int) -> list[tuple[str, ...]]:
    """Paths into an OpenAPI schema: its properties, a key of a map, an array's index."""
    if depth == 0 or not isinstance(node, dict):
        return []
    found: list[tuple[str, ...]] = []
    steps = [(name, sub) for name, sub in (node.get("properties") or {}).items()]
    if isinstance(node.get("additionalProperties"), dict):
        steps.append(("key", node["additionalProperties"]))
    if isinstance(node.get("items"), dict):
        steps.append(("0", node["items"]))
    for step, sub in steps:
        found.append((*prefix, step))
        found.extend(_paths(sub, (*prefix, step), depth - 1))
    return found
