"""Reading objects, pod lists and state: JSON as JSON, YAML as YAML, every problem one line
naming the file (and the line and column where the text is wrong)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rulec import api
from rulec.commands import inputs

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "labels": {"a": "b"},
                    "creationTimestamp": "2024-05-01T12:00:00Z"},
       "status": {"phase": "Running", "startTime": "2024-05-01T12:00:01Z"}}


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("name, text", [
    ("pods.json", json.dumps([POD, {**POD, "metadata": {**POD["metadata"], "uid": "u2"}}])),
    ("pods", json.dumps({"kind": "PodList", "items": [POD]}, indent=4)),
    ("pods.yaml", yaml.safe_dump_all([POD])),
    ("pods.yaml", "\ufeff" + yaml.safe_dump({"kind": "List", "items": [POD]})),
    ("pods.json", "\ufeff" + json.dumps([POD])),
    ("pods", "{kind: List, items: [{metadata: {name: p, uid: u1}}]}"),  # YAML flow, not JSON
])
def test_json_and_yaml_read_alike(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    pods = inputs.read_objects(path)
    assert pods and all(p["metadata"]["name"] == "p" for p in pods)
    # Timestamps stay strings in YAML, as they are in JSON.
    assert all(isinstance(p["metadata"].get("creationTimestamp", ""), str) for p in pods)


@pytest.mark.parametrize("name, text, message", [
    ("pods.json", '[{"a": 1,\n  "b": 2,,}]', "pods.json:2:10: not JSON: unexpected character, "
     "expected a string key"),
    ("pods", '{"a": [1, 2}', "pods:1:12: not JSON: unexpected character, expected ',' or ']'"),
    ("pods.yaml", "a: [1, 2\n", "pods.yaml:2:1: not YAML or JSON: did not find expected ',' or "
     "']' (while parsing a flow sequence at 1:4)"),
    ("pods.yaml", "a: b: c\n", "pods.yaml:1:5: not YAML or JSON: mapping values are not allowed "
     "in this context"),
    ("pods.yaml", "a: 1\nb: \x00\n", "pods.yaml:2:4: not YAML or JSON: unacceptable character "
     "U+0000 (null): control characters are not allowed"),
    ("pods.json", '{"a": NaN}', "pods.json:1:7: not JSON: unexpected character"),
    ("pods.json", '{"a": "\\ud800"}', "pods.json:1:8: not JSON: no low surrogate in string"),
    ("pods", '{"a": "\\udc00"}', "pods:1:8: not JSON: invalid high surrogate in string"),
    ("pods.yaml", 'a: "\\ud800"\n', "pods.yaml:1:7: not YAML or JSON: found invalid Unicode "
     "character escape code"),
    ("pods.json", json.dumps(nested(101)), "pods.json: nested more than 100 levels deep"),
    ("pods.yaml", yaml.safe_dump(nested(101)), "pods.yaml: nested more than 100 levels deep"),
    ("pods.json", "[" * 1200 + "]" * 1200, "pods.json:1:1026: not JSON: depth limit exceeded"),
    ("pods.yaml", "[" * 1200 + "]" * 1200, "pods.yaml:1:1026: not JSON: depth limit exceeded"),
    ("pods.yaml", "".join("  " * i + "a:\n" for i in range(1200)),
     "pods.yaml:1000:2000: not YAML or JSON: exceeded maximum nesting depth (while increasing "
     "block level)"),
])
def test_unreadable_text_is_one_line_with_its_position(tmp_path: Path, name: str, text: str,
                                                       message: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(api.InputError) as err:
        inputs.read_objects(path)
    shown = str(err.value)
    assert shown.startswith(f"{tmp_path}/{message}"), shown
    assert "\n" not in shown and "<unicode string>" not in shown


def test_nesting_up_to_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "pod.json"
    path.write_text(json.dumps({**POD, "spec": nested(inputs.MAX_DEPTH - 1)}))
    assert inputs.read_object(path, "pod")["metadata"]["name"] == "p"


@pytest.mark.parametrize("doc, message", [
    ({"a": 1}, "not a Kubernetes object: no `apiVersion`"),
    ({"apiVersion": "v1"}, "not a Kubernetes object: no `kind`"),
    ({"apiVersion": "v1", "kind": 3}, "`kind` is a number, not a name"),
    ({"apiVersion": "", "kind": "Job"}, "`apiVersion` is empty, not a name"),
    ({"apiVersion": "v1", "kind": "Job", "metadata": "oops"}, "`metadata` is a string, not a mapping"),
    ({"apiVersion": "v1", "kind": "Job", "spec": [1]}, "`spec` is a list, not a mapping"),
    ({"apiVersion": "v1", "kind": "Job", "status": "x"}, "`status` is a string, not a mapping"),
    ({"apiVersion": "v1", "kind": "Job", "metadata": {"labels": ["a"]}},
     "`metadata.labels` is a list, not a mapping"),
    ({"apiVersion": "v1", "kind": "Job", "metadata": {"annotations": {"x": 1}}},
     "`metadata.annotations` 'x' is a number, not a string (quote it in YAML)"),
    ({"apiVersion": "v1", "kind": "Job", "metadata": {"name": 5}},
     "`metadata.name` is a number, not a string"),
    ([POD], "expected an object (a mapping), found a list"),
])
def test_objects_without_the_parts_commands_read(doc: object, message: str) -> None:
    with pytest.raises(api.InputError) as err:
        inputs.kube_object(doc, "job.yaml")
    assert str(err.value) == f"job.yaml: {message}"


@pytest.mark.parametrize("docs, message", [
    ([{"a": 1}], "pods.json: not a pod: no metadata.name"),
    ([[{"a": 1}]], "pods.json: item 1: not a pod: no metadata.name"),
    ([[POD, {**POD, "kind": "Job"}]], "pods.json: item 2: not a pod: kind 'Job'"),
    ([{"kind": "List", "items": 5}], "pods.json: the `items` of a List are a number, not a list"),
    ([{"items": "x"}], "pods.json: the `items` of a list are a string, not a list"),
    ([[{**POD, "status": "x"}]], "pods.json: item 1: `status` is a string, not a mapping"),
    ([[POD, {**POD, "metadata": {"name": "q", "uid": "u1"}}]],
     "pods.json: pods 'p' and 'q' have the uid 'u1'"),
    ([[{"metadata": {"name": "p"}}, {"metadata": {"name": "p"}}]],
     "pods.json: pods 'p' and 'p' have one namespace and name"),
    ([5], "pods.json: expected an object (a mapping), found a number"),
])
def test_pod_lists(docs: list, message: str) -> None:
    with pytest.raises(api.InputError) as err:
        inputs.pods(docs, "pods.json")
    assert str(err.value) == message


TERMINATED = {"name": "main", "restartCount": 0, "state": {"terminated": {"exitCode": 1}}}


@pytest.mark.parametrize("status, message", [
    ({"containerStatuses": [1, 2]}, "`status.containerStatuses[0]` is a number, not a mapping"),
    ({"containerStatuses": "main"}, "`status.containerStatuses` is a string, not a list"),
    ({"conditions": "Ready"}, "`status.conditions` is a string, not a list"),
    ({"conditions": [{"type": "Ready", "status": True}]},
     "`status.conditions[0].status` is a boolean, not a string"),
    ({"phase": 3}, "`status.phase` is a number, not a string"),
    ({"containerStatuses": [TERMINATED, {**TERMINATED, "state": {"terminated": {"exitCode": "137"}}}]},
     "`status.containerStatuses[1].state.terminated.exitCode` is a string, not an integer"),
    ({"initContainerStatuses": [{**TERMINATED, "restartCount": True}]},
     "`status.initContainerStatuses[0].restartCount` is a boolean, not an integer"),
    ({"containerStatuses": [{**TERMINATED, "lastState": []}]},
     "`status.containerStatuses[0].lastState` is a list, not a mapping"),
])
def test_a_pod_field_of_the_wrong_type_is_named_with_its_path(status: dict, message: str) -> None:
    """Never a silent verdict: the pod reader would take such a field for absent."""
    with pytest.raises(api.InputError) as err:
        inputs.pods([[POD, {**POD, "metadata": {"name": "q"}, "status": status}]], "pods.json")
    assert str(err.value) == f"pods.json: item 2: {message}"


def test_well_typed_fields_and_nulls_pass() -> None:
    status = {"phase": "Failed", "startTime": None, "conditions": None,
              "containerStatuses": [TERMINATED, {**TERMINATED, "name": "b", "state": {
                  "waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {}}]}
    assert inputs.pods([[{**POD, "status": status}]], "pods.json")


def test_state_file_is_json_or_text(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_text('{"v": 1}')
    assert inputs.read_state(str(path)) == {"v": 1}
    path.write_text("not json")
    assert inputs.read_state(str(path)) == "not json"  # the decoder reports it, as a problem
    path.write_text(json.dumps(nested(150)))
    with pytest.raises(api.InputError, match="nested more than 100 levels"):
        inputs.read_state(str(path))


def test_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "latin.yaml").write_bytes(b"a: caf\xe9\n")
    with pytest.raises(api.InputError, match=r"latin.yaml: not UTF-8 text \(byte 0xe9 at offset 6\)"):
        inputs.read_object(tmp_path / "latin.yaml")
    with pytest.raises(api.InputError, match="cannot read: Is a directory"):
        inputs.read_object(tmp_path)
    (tmp_path / "two.yaml").write_text("a: 1\n---\nb: 2\n")
    with pytest.raises(api.InputError, match="expected one object, found 2 documents"):
        inputs.read_object(tmp_path / "two.yaml")


def test_a_pod_to_mutate_may_have_only_a_generate_name(tmp_path: Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump({"kind": "Pod", "metadata": {"generateName": "train-"}}))
    assert inputs.read_object(path, "pod")["metadata"] == {"generateName": "train-"}
    path.write_text(yaml.safe_dump({"kind": "Job", "metadata": {"generateName": "train-"}}))
    with pytest.raises(api.InputError, match="not a pod: kind 'Job'"):
        inputs.read_object(path, "pod")
