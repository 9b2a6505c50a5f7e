"""The schema paths check (rulec/checks/schema_paths.py) against CRDs given with `--crd`: what
it reports of the fields a kind reads and writes (the whole finding, its span's both ends
where the span is computed), and the JSON types it takes from a schema for the
non-boolean-condition check (R203)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.rulec.said import said

# Run: the job kind. Its status has 9 fields (a hint lists 8, then "..."); Other's spec has
# exactly 8 (listed whole); Bare has no status at all.
CRDS = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: runs.example.com}
spec:
  group: example.com
  names: {kind: Run, plural: runs}
  versions:
    - name: v1
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                enabled: {type: boolean}
                size: {x-kubernetes-int-or-string: true}
                count: {type: integer}
                name: {type: string}
                labels: {type: object, additionalProperties: {type: string}}
                anything: {type: object, additionalProperties: true}
                open: {type: object, x-kubernetes-preserve-unknown-fields: true}
                text: {type: string, x-kubernetes-preserve-unknown-fields: true}
                loose:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                  properties:
                    known: {type: string}
                deep:
                  type: object
                  properties:
                    inner:
                      type: object
                      properties:
                        leaf: {type: boolean}
            status:
              type: object
              properties:
                a: {type: string}
                b: {type: string}
                c: {type: string}
                d: {type: string}
                e: {type: string}
                f: {type: string}
                g: {type: string}
                h: {type: string}
                i: {type: string}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: others.example.com}
spec:
  group: example.com
  names: {kind: Other, plural: others}
  versions:
    - name: v1
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                one: {type: string}
                two: {type: string}
                three: {type: string}
                four: {type: string}
                five: {type: string}
                six: {type: string}
                seven: {type: string}
                nested:
                  type: object
                  properties:
                    inner: {type: string}
            status:
              type: object
              properties:
                conditions: {type: array, items: {type: object}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: bares.example.com}
spec:
  group: example.com
  names: {kind: Bare, plural: bares}
  versions:
    - name: v1
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, properties: {flag: {type: boolean}}}
"""

RUN = "job run: example.com/v1 Run {\n"
STATUS_HELP = "  help: fields of status: a, b, c, d, e, f, g, h, ..."
SPEC_HELP = "  help: fields of spec: anything, count, deep, enabled, labels, loose, name, open, ..."


@pytest.fixture
def crd(tmp_path: Path) -> tuple[str, ...]:
    path = tmp_path / "crds.yaml"
    path.write_text(CRDS, encoding="utf-8")
    return (str(path),)


def test_every_job_side_expression_of_a_kind_is_looked_up(crd: tuple[str, ...]) -> None:
    text = RUN + """\
    pods label "x" = <<status.p1>>
    final until <<status.p2>> changes
    succeeded when not <<status.p3>> and (<<spec.enabled>> or count pods >= <<status.p4>>)
        reason <<status.p5>> message <<status.p6>>
    failed when all pods failed
    on pod failed -> restart job max <<status.p7>> reason <<status.p8>> message <<status.p9>>
        then abort job reason <<status.p10>>
    actions { restart job -> delete pods
              abort job -> set spec.enabled = true }
}
"""
    where = ["2:31", "3:26", "4:33", "4:86", "5:25", "5:47", "7:47", "7:68", "7:90", "8:40"]
    expected = []
    for n, at in enumerate(where, 1):
        expected += [f"t.rules:{at} R601 `status.p{n}` is not in the schema of `example.com/v1 Run`",
                     STATUS_HELP]
    assert said(text, crds=crd) == expected


@pytest.mark.parametrize("condition, expected", [
    pytest.param("<<spec.enabled && spec.zzz>>", [
        "t.rules:2:43-2:46 R601 `spec.zzz` is not in the schema of `example.com/v1 Run`",
        SPEC_HELP], id="after-a-known-field"),
    pytest.param("<<spec.enabled && status.zzz.a || status.zzz.b || status.yyy>>", [
        "t.rules:2:45-2:48 R601 `status.zzz` is not in the schema of `example.com/v1 Run`",
        STATUS_HELP,
        "t.rules:2:77-2:80 R601 `status.yyy` is not in the schema of `example.com/v1 Run`",
        STATUS_HELP], id="each-unknown-field-once"),
    pytest.param('<<spec."zzz" == \'on\'>>', [
        "t.rules:2:27-2:32 R601 `spec.zzz` is not in the schema of `example.com/v1 Run`",
        SPEC_HELP], id="quoted-identifier-with-its-quotes"),
    pytest.param("<<spec.deep.inner.zzz>>", [
        "t.rules:2:38-2:41 R601 `spec.deep.inner.zzz` is not in the schema of `example.com/v1 Run`",
        "  help: fields of spec.deep.inner: leaf"], id="parent-of-three"),
    pytest.param("<<zzz>>", [
        "t.rules:2:22-2:25 R601 `zzz` is not in the schema of `example.com/v1 Run`",
        "  help: fields of the object: spec, status"], id="top-level"),
])
def test_an_unknown_field_read_is_said_where_it_is_read(crd: tuple[str, ...], condition: str,
                                                        expected: list[str]) -> None:
    assert said(f"{RUN}    succeeded when {condition}\n}}\n", crds=crd, ends=True) == expected


def test_status_paths_are_said_at_the_unknown_segment(crd: tuple[str, ...]) -> None:
    text = RUN + "    succeeded when all pods succeeded\n" \
                 "    status { phase at status.zzz.more reason at spec.deep.zzz }\n}\n"
    assert said(text, crds=crd, ends=True) == [
        "t.rules:3:30-3:33 R601 `status.zzz` is not in the schema of `example.com/v1 Run`",
        STATUS_HELP,
        "t.rules:3:59-3:62 R601 `spec.deep.zzz` is not in the schema of `example.com/v1 Run`",
        "  help: fields of spec.deep: inner"]


def test_fields_set_on_other_objects_are_looked_up_in_their_own_schema(crd: tuple[str, ...]) -> None:
    text = RUN + """\
    succeeded when all pods succeeded
    actions {
        abort job -> set spec.one = "x" on example.com/v1 Other label "a" = "b"
        fail job -> set spec.nested.zzz.more = "x" on example.com/v1 Other label "a" = "b"
        complete job -> set spec.zzz = "x" on example.com/v1 Bare label "a" = "b"
        terminate job -> set spec.zzz = "x" on v1 ConfigMap label "a" = "b"
        restart job -> resize spec.template
    }
}
"""
    # ConfigMap: no schema given, nothing said; `resize` writes the pod template, not a field
    # of the job's own schema
    assert said(text, crds=crd) == [
        "t.rules:5:25 R601 `spec.nested.zzz` is not in the schema of `example.com/v1 Other`",
        "  help: fields of spec.nested: inner",
        "t.rules:6:29 R601 `spec.zzz` is not in the schema of `example.com/v1 Bare`",
        "  help: fields of spec: flag"]


def test_a_condition_step_needs_status_conditions_in_the_schema(crd: tuple[str, ...]) -> None:
    other = 'job o: example.com/v1 Other {\n    succeeded when all pods succeeded\n' \
            '    actions { fail job -> condition "Failed"\n' \
            '              abort job -> set spec.zzz = "x" }\n}\n'
    assert said(other, crds=crd) == [   # Other has status.conditions; 8 fields listed whole
        "t.rules:4:37 R601 `spec.zzz` is not in the schema of `example.com/v1 Other`",
        "  help: fields of spec: five, four, nested, one, seven, six, three, two"]
    bare = 'job b: example.com/v1 Bare {\n    succeeded when all pods succeeded\n' \
           '    actions { fail job -> condition "Failed"\n' \
           '              abort job -> create example.com/v1 Other { spek: "x", spec: "y" } }\n}\n'
    assert said(bare, crds=crd) == [    # Bare has no status at all
        "t.rules:3:27 R601 `status` is not in the schema of `example.com/v1 Bare`",
        "  help: fields of the object: spec",
        "t.rules:4:58 R601 `spek` is not in the schema of `example.com/v1 Other`",
        "  help: did you mean `spec`?"]


NON_BOOLEAN = "  help: compare it, e.g. `status.phase == 'Failed'`, or test it with a function such as " \
              "`contains(...)`"


@pytest.mark.parametrize("condition, types", [
    ("<<spec.size>>", "a number or string"),          # x-kubernetes-int-or-string
    ("<<spec.count>>", "a number"),                   # integer
    ("<<spec.labels.x>>", "a string"),                # additionalProperties' own schema
    ("<<spec.anything.x>>", None),                    # additionalProperties: true
    ("<<spec.open.x>>", None),                        # below preserve-unknown-fields
    ("<<spec.loose.known>>", None),                   # ... even where it lists properties
    ("<<spec.text>>", None),                          # a leaf that preserves unknown fields
    ("<<spec.deep>>", None),                          # an object is a fine condition
])
def test_the_types_a_crd_schema_gives_a_condition(crd: tuple[str, ...], condition: str,
                                                  types: str | None) -> None:
    found = said(f"{RUN}    succeeded when {condition}\n}}\n", crds=crd)
    assert found == ([] if types is None else [
        f"t.rules:2:20 R203 this condition can only be {types}, which is true whenever it is "
        "non-empty", NON_BOOLEAN])


def test_a_served_version_no_crd_defines_is_said_where_it_is_written(crd: tuple[str, ...]) -> None:
    text = RUN.replace("v1 Run", "v1, v2 Run") + \
        "    succeeded when <<status.zz>>\n    status { phase at status.yy }\n}\n" \
        "job nope: example.com/v1 Nope {\n    succeeded when all pods succeeded\n}\n"
    assert said(text, crds=crd) == [
        # v2: at the version; the first version: at the kind, which names the type
        "t.rules:1:26 R602 no CRD given defines `example.com/v2 Run`; its paths are not checked",
        "t.rules:2:29 R601 `status.zz` is not in the schema of `example.com/v1 Run`", STATUS_HELP,
        "t.rules:3:30 R601 `status.yy` is not in the schema of `example.com/v1 Run`", STATUS_HELP,
        "t.rules:5:26 R602 no CRD given defines `example.com/v1 Nope`; its paths are not checked"]


def test_the_built_in_job_schema_types_conditions_once_crds_are_given(crd: tuple[str, ...]) -> None:
    text = "job j: batch/v1 Job {\n    succeeded when <<status.active>>\n}\n"
    assert said(text) == []
    assert said(text, crds=crd) == [
        "t.rules:2:20 R203 this condition can only be a number, which is true whenever it is "
        "non-empty", NON_BOOLEAN]


def test_the_versions_after_one_no_crd_defines_are_still_checked(crd: tuple[str, ...]) -> None:
    text = "job run: example.com/v2, v1 Run {\n    succeeded when <<status.zz>>\n}\n"
    assert said(text, crds=crd) == [
        "t.rules:1:29 R602 no CRD given defines `example.com/v2 Run`; its paths are not checked",
        "t.rules:2:29 R601 `status.zz` is not in the schema of `example.com/v1 Run`", STATUS_HELP]


def test_the_policies_of_an_extend_are_looked_up_too(crd: tuple[str, ...]) -> None:
    text = RUN + "    succeeded when all pods succeeded\n}\n" \
                 "extend run {\n    on pod failed -> restart job max <<status.zzz>>\n}\n"
    assert said(text, crds=crd, ends=True) == [
        "t.rules:5:47-5:50 R601 `status.zzz` is not in the schema of `example.com/v1 Run`",
        STATUS_HELP]


def test_an_expression_that_does_not_parse_is_said_once_and_the_others_looked_up(
        crd: tuple[str, ...]) -> None:
    text = RUN + "    succeeded when <<status.(>>\n    failed when <<status.zzz>>\n}\n"
    assert said(text, crds=crd, ends=True) == [
        "t.rules:2:29-2:30 R201 invalid JMESPath: unexpected `(`",
        "t.rules:3:26-3:29 R601 `status.zzz` is not in the schema of `example.com/v1 Run`",
        STATUS_HELP]


def test_a_version_without_a_schema_leaves_the_next_version_looked_up(crd: tuple[str, ...]) -> None:
    text = "job run: example.com/v9, v1 Run {\n    succeeded when <<status.zzz>>\n}\n"
    assert said(text, crds=crd, ends=True) == [
        "t.rules:1:29-1:32 R602 no CRD given defines `example.com/v9 Run`; its paths are not checked",
        "t.rules:2:29-2:32 R601 `status.zzz` is not in the schema of `example.com/v1 Run`",
        STATUS_HELP]
