"""`rulec eval`, `mutate` and `test` through the real CLI entry point: outputs, inputs, exit codes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml

from rulec.commands import cli, inputs

ROOT = Path(__file__).resolve().parents[3]
VOLCANO = ROOT / "examples" / "volcano-oomkilled"
ARGO = ROOT / "examples" / "argo-wait-main"
NOW = "2020-03-12T11:15:00Z"


def rulec(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def evaluate(capsys, *extra: str, pods: Path | str = VOLCANO / "pods" / "master-oomkilled.yaml"):
    code, out, err = rulec(capsys, "eval", "--rules", VOLCANO / "vcjob.rules", "--object",
                           VOLCANO / "job.yaml", "--pods", pods, "--now", NOW, *extra)
    assert code == 0, err
    return out, err


def test_eval_json_has_the_contract_keys(capsys) -> None:
    out, _ = evaluate(capsys)
    result = json.loads(out)
    assert {"phase", "reason", "message", "events", "actions", "state", "rule"} <= result.keys()
    assert (result["phase"], result["reason"]) == ("Failed", "PodFailed")
    assert "container jarvis-single-job OOMKilled (exit 137)" in result["message"]
    assert result["rule"].endswith("vcjob.rules:12:5")
    assert result["state"]["v"] == 1


def test_eval_from_a_compiled_plan(capsys, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    assert rulec(capsys, "compile", VOLCANO / "vcjob.rules", "-o", plan)[0] == 0
    code, out, err = rulec(capsys, "eval", "--rules", plan, "--object", VOLCANO / "job.yaml",
                           "--pods", VOLCANO / "pods" / "master-oomkilled.yaml", "--now", NOW)
    assert code == 0, err
    assert json.loads(out)["phase"] == "Failed"


def test_eval_accepts_a_folder_of_rules(capsys) -> None:
    code, out, _ = rulec(capsys, "eval", "--rules", VOLCANO, "--object", VOLCANO / "job.yaml",
                         "--now", NOW)
    assert code == 0 and json.loads(out)["phase"] == "Pending"


@pytest.mark.parametrize("shape", ["json-array", "list", "multi-doc", "single"])
def test_pod_list_shapes(capsys, tmp_path: Path, shape: str) -> None:
    pod = yaml.safe_load((VOLCANO / "pods" / "master-oomkilled.yaml").read_text())
    running = yaml.safe_load((VOLCANO / "pods" / "master-running.yaml").read_text())
    running["metadata"].update(name="other", uid="other-uid")
    path = tmp_path / "pods"
    if shape == "json-array":
        path.write_text(json.dumps([pod, running]))
    elif shape == "list":
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [pod, running]}))
    elif shape == "multi-doc":
        path.write_text(yaml.safe_dump_all([pod, running]))
    else:
        path.write_text(yaml.safe_dump(pod))
    out, _ = evaluate(capsys, "--explain", pods=path)
    first = json.loads(out)["explain"][0]   # `failed when any pod evicted`, over every pod read
    assert first["why"] == f"any pod evicted: 0 of {1 if shape == 'single' else 2} pods match"


def stdin(monkeypatch: pytest.MonkeyPatch, text: str | bytes) -> None:
    """Standard input holding `text`, as a pipe would give it."""
    data = text.encode() if isinstance(text, str) else text
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def other_pod(name: str = "other") -> dict:
    running = yaml.safe_load((VOLCANO / "pods" / "master-running.yaml").read_text())
    running["metadata"].update(name=name, uid=f"{name}-uid")
    return running


def test_repeated_pods_are_all_read_in_order(capsys, tmp_path: Path) -> None:
    """Every --pods file, concatenated in the order given (the last does not replace the
    others): the evaluation sees 3 pods, the OOMKilled one among them decides."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.json"
    first.write_text(yaml.safe_dump(other_pod("a")))
    second.write_text(json.dumps([other_pod("b")]))
    code, out, err = rulec(capsys, "eval", "--rules", VOLCANO / "vcjob.rules", "--object",
                           VOLCANO / "job.yaml", "--pods", first, "--pods",
                           VOLCANO / "pods" / "master-oomkilled.yaml", "--pods", second,
                           "--now", NOW, "--explain")
    assert code == 0, err
    result = json.loads(out)
    assert result["phase"] == "Failed"
    assert result["explain"][0]["why"] == "any pod evicted: 0 of 3 pods match"
    order = [p["metadata"]["name"] for p in inputs.read_pod_files(
        [second, VOLCANO / "pods" / "master-oomkilled.yaml", first])]
    assert order == ["b", "tensorflow-models200312190939-master-0", "a"]


def test_one_pod_in_two_files_is_refused(capsys, tmp_path: Path) -> None:
    pods = VOLCANO / "pods" / "master-oomkilled.yaml"
    code, out, err = rulec(capsys, "eval", "--rules", VOLCANO / "vcjob.rules", "--object",
                           VOLCANO / "job.yaml", "--pods", pods, "--pods",
                           VOLCANO / "pods" / "master-running.yaml", "--now", NOW)
    assert (code, out) == (2, "")
    assert err.startswith(f"rulec eval: {pods} + {VOLCANO / 'pods' / 'master-running.yaml'}: pods ")
    assert "have the uid" in err and err.count("\n") == 1


@pytest.mark.parametrize("option", ["--object", "--pods", "--state"])
def test_eval_reads_a_dash_from_standard_input(capsys, monkeypatch, tmp_path: Path,
                                               option: str) -> None:
    first, _ = evaluate(capsys, pods=VOLCANO / "pods" / "master-evicted.yaml")
    files = {"--object": VOLCANO / "job.yaml", "--pods": VOLCANO / "pods" / "master-evicted.yaml",
             "--state": tmp_path / "out.json"}
    files["--state"].write_text(first)
    stdin(monkeypatch, Path(files[option]).read_text())
    args = [a for o, f in files.items() for a in (o, "-" if o == option else f)]
    code, out, err = rulec(capsys, "eval", "--rules", VOLCANO / "vcjob.rules", *args, "--now", NOW)
    assert code == 0, err
    with_files = rulec(capsys, "eval", "--rules", VOLCANO / "vcjob.rules",
                       *[a for o, f in files.items() for a in (o, f)], "--now", NOW)
    assert json.loads(out) == json.loads(with_files[1])
    assert json.loads(out)["actions"] == []   # the state was read: nothing new to do


@pytest.mark.parametrize("option", ["--pod", "--owner"])
def test_mutate_reads_a_dash_from_standard_input(capsys, monkeypatch, option: str) -> None:
    pod = ARGO / "pod.yaml"
    owner = yaml.safe_load(pod.read_text())["metadata"]["ownerReferences"][0]
    workflow = yaml.safe_dump({"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                               "metadata": {"name": owner["name"], "uid": owner["uid"]}})
    stdin(monkeypatch, pod.read_text() if option == "--pod" else workflow)
    args = ["--pod", "-"] if option == "--pod" else ["--pod", pod, "--owner", "-"]
    code, out, err = rulec(capsys, "mutate", "--rules", ARGO / "workflow.rules", *args)
    assert code == 0, err
    assert json.loads(out)["applied"] == ["katib-argo"]


@pytest.mark.parametrize("command, args, said", [
    ("eval", ["--object", "-", "--pods", "-"], "--object and --pods"),
    ("eval", ["--object", VOLCANO / "job.yaml", "--pods", "-", "--pods", "-"], "--pods and --pods"),
    ("eval", ["--object", VOLCANO / "job.yaml", "--pods", "-", "--state", "-"], "--pods and --state"),
    ("mutate", ["--pod", "-", "--owner", "-"], "--pod and --owner"),
])
def test_standard_input_is_read_by_one_option_only(capsys, monkeypatch, command: str,
                                                    args: list, said: str) -> None:
    stdin(monkeypatch, "")
    rules = VOLCANO / "vcjob.rules" if command == "eval" else ARGO / "workflow.rules"
    code, out, err = rulec(capsys, command, "--rules", rules, *args)
    assert (code, out) == (2, "")
    assert err == (f"rulec {command}: only one file option may be - (standard input), "
                   f"not {said}\n")


@pytest.mark.parametrize("text, message", [
    (b"{bad", "rulec eval: <stdin>:1:2: not JSON: "),
    (b"\xff", "rulec eval: <stdin>: not UTF-8 text (byte 0xff at offset 0)"),
    (b"", "rulec eval: <stdin>: expected one object, found 0 documents"),
])
def test_standard_input_problems_name_it(capsys, monkeypatch, text: bytes, message: str) -> None:
    stdin(monkeypatch, text)
    code, out, err = rulec(capsys, "eval", "--rules", VOLCANO / "vcjob.rules", "--object", "-")
    assert (code, out) == (2, "") and err.startswith(message) and err.count("\n") == 1


def test_state_from_an_earlier_output_means_no_new_actions(capsys, tmp_path: Path) -> None:
    first, _ = evaluate(capsys, pods=VOLCANO / "pods" / "master-evicted.yaml")
    assert json.loads(first)["actions"][0]["action"] == "restartJob"
    saved = tmp_path / "out.json"
    saved.write_text(first)
    again, _ = evaluate(capsys, "--state", saved, pods=VOLCANO / "pods" / "master-evicted.yaml")
    assert json.loads(again)["actions"] == [] and json.loads(again)["events"] == []


def test_state_from_the_jobs_annotation(capsys, tmp_path: Path) -> None:
    first = json.loads(evaluate(capsys)[0])
    job = yaml.safe_load((VOLCANO / "job.yaml").read_text())
    job["metadata"]["annotations"] = {"jobrules.dev/state": json.dumps(first["state"])}
    annotated = tmp_path / "job.json"
    annotated.write_text(json.dumps(job))
    code, out, _ = rulec(capsys, "eval", "--rules", VOLCANO, "--object", annotated,
                         "--pods", VOLCANO / "pods" / "master-oomkilled.yaml", "--now", NOW)
    assert code == 0 and json.loads(out)["events"] == []


def test_malformed_state_is_a_warning_not_a_failure(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "state.json"
    bad.write_text('{"v": 7}')
    out, err = evaluate(capsys, "--state", bad)
    assert json.loads(out)["problems"][0].startswith("stored state ignored: version 7")
    assert "warning: stored state ignored" in err


def test_pods_of_other_jobs_are_left_out_and_reported(capsys, tmp_path: Path) -> None:
    pod = yaml.safe_load((VOLCANO / "pods" / "master-oomkilled.yaml").read_text())
    pod["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump(pod))
    out, _ = evaluate(capsys, pods=path)
    result = json.loads(out)
    assert result["phase"] == "Pending"
    assert "1 pod(s) do not belong to the job" in result["problems"][-1]


def test_eval_text_and_explain(capsys) -> None:
    out, _ = evaluate(capsys, "--format", "text", "--explain")
    lines = out.splitlines()
    assert lines[0].startswith("Failed (PodFailed)  [")
    assert any("container jarvis-single-job OOMKilled (exit 137)" in l for l in lines[:3])
    assert any("verdict Succeeded: no: all pods succeeded: 0 of 1 pods match" in l for l in lines)
    assert any("policy taskCompleted#0: no:" in l and "no task completed event for task master" in l
               for l in lines)


def test_eval_explain_json(capsys) -> None:
    result = json.loads(evaluate(capsys, "--explain")[0])
    first = result["explain"][0]
    assert first["what"] == "verdict" and first["rule"].endswith("vcjob.rules:9:5")
    assert first["why"] == "any pod evicted: 0 of 1 pods match"


def test_mutate_json(capsys) -> None:
    code, out, err = rulec(capsys, "mutate", "--rules", ARGO, "--pod", ARGO / "pod.yaml")
    assert code == 0, err
    result = json.loads(out)
    assert result["applied"] == ["katib-argo"] and result["kind"] == "workflow"
    assert result["pod"]["metadata"]["annotations"]["jobrules.dev/completion-containers"] == "main"
    assert any(op["path"] == "/spec/initContainers/-" for op in result["patch"])


def test_mutate_text_with_explain(capsys) -> None:
    code, out, _ = rulec(capsys, "mutate", "--rules", ARGO, "--pod", ARGO / "pod.yaml",
                         "--format", "text", "--explain", "--namespace", "kubeflow-user")
    assert code == 0
    assert out.splitlines()[:2] == ["kind: workflow", "applied: katib-argo"]
    assert "injection katib-argo: matched: applied" in out


def test_mutate_error_is_exit_2(capsys, tmp_path: Path) -> None:
    rules = tmp_path / "wrap.rules"
    head, tail = (ARGO / "workflow.rules").read_text().rsplit('    wait for containers ["main"]', 1)
    rules.write_text(head + '    wrap ["wait"] with ["/x"]\n    wait for containers ["main"]' + tail)
    pod = yaml.safe_load((ARGO / "pod.yaml").read_text())
    del pod["spec"]["containers"][0]["command"]
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod))
    code, out, err = rulec(capsys, "mutate", "--rules", rules, "--pod", path)
    assert code == 2 and "has no command" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["eval", "--rules", "missing.rules", "--object", "x.yaml"], "missing.rules: no such file"),
    (["eval", "--rules", VOLCANO, "--object", "nope.yaml"], "nope.yaml: cannot read"),
    (["eval", "--rules", VOLCANO, "--object", VOLCANO / "job.yaml", "--now", "soon"], "--now 'soon'"),
    (["eval", "--rules", VOLCANO, "--object", ARGO / "pod.yaml", "--now", NOW], "no rules for v1 Pod"),
    (["eval", "--rules", VOLCANO / "vcjob.rules", VOLCANO / "job.yaml", "--object", "x"],
     "job.yaml:2:1: error"),  # not rules: the compiler says so
    (["mutate", "--rules", ARGO, "--pod", ROOT / "examples" / "evictions" / "trainer.rules"], "not YAML"),
    (["test", "no/such/dir"], "no/such/dir: no such file"),
])
def test_usage_errors_exit_2_without_traceback(capsys, argv: list, message: str) -> None:
    code, _, err = rulec(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_rules_with_errors_are_reported_with_their_position(capsys, tmp_path: Path) -> None:
    broken = tmp_path / "broken.rules"
    broken.write_text("job x: v1 Thing {\n    failed when any pod exploded\n}\n")
    code, _, err = rulec(capsys, "eval", "--rules", broken, "--object", VOLCANO / "job.yaml")
    assert code == 2 and "the rules have errors" in err and "broken.rules:2:" in err


def test_test_command_passes_on_the_examples(capsys) -> None:
    code, out, _ = rulec(capsys, "test", ROOT / "examples", "-q")
    assert code == 0 and out.rstrip().endswith(" passed, 0 failed")


def write_suite(folder: Path, cases: str) -> Path:
    (folder / "vcjob.rules").write_text((VOLCANO / "vcjob.rules").read_text())
    for name in ("job.yaml",):
        (folder / name).write_text((VOLCANO / name).read_text())
    (folder / "pods.yaml").write_text((VOLCANO / "pods" / "master-oomkilled.yaml").read_text())
    path = folder / "suite.yaml"
    path.write_text("defaults: {job: job.yaml, pods: pods.yaml, now: '2020-03-12T11:15:00Z'}\n" + cases)
    return path


def test_a_failing_case_prints_a_diff_and_exits_1(capsys, tmp_path: Path) -> None:
    write_suite(tmp_path, "cases:\n  - {name: right, expect: {phase: Failed}}\n"
                          "  - {name: wrong, expect: {phase: Succeeded, reason: {regex: '^Pod'}}}\n")
    code, out, _ = rulec(capsys, "test", tmp_path)
    assert code == 1
    assert "PASS" in out and "FAIL" in out and "-phase: Succeeded\n" in out.replace("    ", "")
    assert "+phase: Failed" in out and "-reason" not in out and "+reason" not in out  # regex matched
    assert out.rstrip().endswith("1 passed, 1 failed")


def test_k_selects_cases(capsys, tmp_path: Path) -> None:
    write_suite(tmp_path, "cases:\n  - {name: right, expect: {phase: Failed}}\n"
                          "  - {name: wrong, expect: {phase: Succeeded}}\n")
    code, out, _ = rulec(capsys, "test", tmp_path, "-k", "right")
    assert code == 0 and out.rstrip().endswith("1 passed, 0 failed")


@pytest.mark.parametrize("cases, message", [
    ("cases: []\n", "`cases` is a non-empty list"),
    ("cases:\n  - {name: x, expect: {phse: Failed}}\n", "unknown key `phse` (did you mean `phase`?)"),
    ("cases:\n  - {name: x}\n", "`expect` is a non-empty mapping"),
    ("cases:\n  - {name: x, expect: {phase: A}}\n  - {name: x, expect: {phase: B}}\n", "must be unique"),
    ("cases:\n  - {name: x, expect: {phase: A, patch: []}}\n", "mixes evaluation and mutation"),
    ("cases: [\n", "not YAML"),
])
def test_malformed_suites_exit_2(capsys, tmp_path: Path, cases: str, message: str) -> None:
    write_suite(tmp_path, cases)
    code, _, err = rulec(capsys, "test", tmp_path)
    assert code == 2 and message in err and "Traceback" not in err


def test_update_writes_golden_files(capsys, tmp_path: Path) -> None:
    (tmp_path / "workflow.rules").write_text((ARGO / "workflow.rules").read_text())
    (tmp_path / "pod.yaml").write_text((ARGO / "pod.yaml").read_text())
    (tmp_path / "suite.yaml").write_text(
        "cases:\n  - {name: g, pod: pod.yaml, expect: {pod: {golden: out.yaml}}}\n")
    code, out, _ = rulec(capsys, "test", tmp_path)
    assert code == 1 and "golden file" in out and "is missing" in out
    assert rulec(capsys, "test", tmp_path, "--update")[0] == 0
    assert rulec(capsys, "test", tmp_path)[0] == 0
    (tmp_path / "out.yaml").write_text((tmp_path / "out.yaml").read_text().replace("main", "mian", 1))
    code, out, _ = rulec(capsys, "test", tmp_path)
    assert code == 1 and "+++ actual" in out


def test_steps_carry_state_and_time(capsys, tmp_path: Path) -> None:
    write_suite(tmp_path, """cases:
  - name: twice
    steps:
      - expect: {phase: Failed, events: [{event: jobVerdictChanged}]}
      - after: 1h
        expect: {events: [], actions: []}
""")
    assert rulec(capsys, "test", tmp_path)[0] == 0


# ---------------------------------------------------------------------------------------------
# Unusable input: one line naming the file (and the position, where the text is wrong), exit 2


def _job() -> dict:
    return yaml.safe_load((VOLCANO / "job.yaml").read_text())


def _pod() -> dict:
    return yaml.safe_load((VOLCANO / "pods" / "master-oomkilled.yaml").read_text())


# Nesting too deep even for json.dumps: written into the text where this marker stands.
DEEP = "<1,200 levels>"


def _text(doc: object) -> str:
    return json.dumps(doc).replace(json.dumps(DEEP), '{"a": ' * 1200 + "{}" + "}" * 1200)


def _with(doc: dict, path: str, value: object) -> dict:
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return doc


@pytest.mark.parametrize("object_, pods, message", [
    (_with(_job(), "metadata", "oops"), None, "job.json: `metadata` is a string, not a mapping"),
    ({k: v for k, v in _job().items() if k != "apiVersion"}, None,
     "job.json: not a Kubernetes object: no `apiVersion`"),
    ({"a": 1}, None, "job.json: not a Kubernetes object: no `apiVersion`"),
    (_with(_job(), "spec", DEEP), None, "job.json:1:{col}: not JSON: depth limit exceeded"),
    (_job(), [_with(_pod(), "status", "x")], "pods.json: item 1: `status` is a string, not a mapping"),
    (_job(), [_with(_pod(), "metadata.labels", ["a"])],
     "pods.json: item 1: `metadata.labels` is a list, not a mapping"),
    (_job(), [{"a": 1}], "pods.json: item 1: not a pod: no metadata.name"),
    (_job(), {"kind": "List", "items": 5}, "pods.json: the `items` of a List are a number, not a list"),
    (_job(), [_pod(), _pod()], "pods.json: pods 'tensorflow-models200312190939-master-0' and "
     "'tensorflow-models200312190939-master-0' have the uid"),
    (_job(), [_with(_pod(), "spec", DEEP)], "pods.json:1:{col}: not JSON: depth limit exceeded"),
    (_job(), [_with(_pod(), "spec", json.loads("[" * 101 + "]" * 101))],
     "pods.json: nested more than 100 levels deep"),
    (_with(_job(), "kind", "Deployment"), None,
     "job.json: no rules for batch.volcano.sh/v1alpha1 Deployment (the rules declare: "
     "batch.volcano.sh/v1alpha1 Job)"),
])
def test_eval_refuses_unusable_objects_in_one_line(capsys, tmp_path: Path, object_, pods,
                                                    message: str) -> None:
    (tmp_path / "job.json").write_text(_text(object_))
    argv = ["eval", "--rules", VOLCANO / "vcjob.rules", "--object", tmp_path / "job.json",
            "--now", NOW]
    if pods is not None:
        (tmp_path / "pods.json").write_text(_text(pods))
        argv += ["--pods", tmp_path / "pods.json"]
    code, out, err = rulec(capsys, *argv)
    assert code == 2 and out == "", err
    pattern = re.escape(f"rulec eval: {tmp_path}/{message}").replace(re.escape("{col}"), r"\d+")
    assert re.match(pattern, err), err  # {col}: where the 1,025th level opens
    assert err.count("\n") == 1 and "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("status, field", [
    ({"phase": "Failed", "containerStatuses": [1]}, "status.containerStatuses[0]"),
    ({"phase": "Failed", "containerStatuses": "x"}, "status.containerStatuses"),
    ({"phase": "Failed", "conditions": "x", "reason": 5}, "status.reason"),
])
def test_eval_refuses_a_pod_field_of_the_wrong_type(capsys, tmp_path: Path, status,
                                                    field: str) -> None:
    """Exit 2 with one line naming the file and the field, never a silent verdict."""
    (tmp_path / "pods.json").write_text(json.dumps([_with(_pod(), "status", status)]))
    code, out, err = rulec(capsys, "eval", "--rules", VOLCANO / "vcjob.rules", "--object",
                           VOLCANO / "job.yaml", "--pods", tmp_path / "pods.json", "--now", NOW)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"rulec eval: {tmp_path}/pods.json: item 1: `{field}` is "), err


@pytest.mark.parametrize("text", [_text(_with(_pod(), "spec", DEEP)),
                                  "".join("  " * i + "a:\n" for i in range(1200)),
                                  "spec: " + "[" * 1200 + "]" * 1200])
def test_mutate_refuses_absurd_nesting_in_one_line(capsys, tmp_path: Path, text: str) -> None:
    (tmp_path / "pod.yaml").write_text(text)
    code, _, err = rulec(capsys, "mutate", "--rules", ARGO, "--pod", tmp_path / "pod.yaml")
    assert code == 2 and err.startswith(f"rulec mutate: {tmp_path}/pod.yaml")
    assert any(m in err for m in ("nested more than 100 levels", "exceeded maximum nesting depth",
                                  "depth limit exceeded"))
    assert err.count("\n") == 1 and "internal error" not in err


def test_yaml_errors_are_one_line_with_their_position(capsys, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("apiVersion: v1\nkind: [Job\n")
    code, _, err = rulec(capsys, "eval", "--rules", VOLCANO, "--object", tmp_path / "job.yaml")
    assert code == 2 and err == (f"rulec eval: {tmp_path}/job.yaml:3:1: not YAML or JSON: did not "
                                 "find expected ',' or ']' (while parsing a flow sequence at 2:7)\n")


@pytest.mark.parametrize("cases, message", [
    ("cases:\n  - {name: x, expect: {phase: {regex: '(('}}}\n",
     "case 'x': expect: phase: `regex` '((' is not a regular expression: missing ), unterminated "
     "subpattern at position 1"),
    ("cases:\n  - {name: x, now: soon, expect: {phase: Failed}}\n",
     "case 'x': `now` is an RFC 3339 time such as 2024-05-01T12:00:00Z, not 'soon'"),
    ("cases:\n  - {name: x, after: 5 minutes, expect: {phase: Failed}}\n",
     "case 'x': `after` is a duration such as 30s or 1h30m, not '5 minutes'"),
    ("cases:\n  - {name: x, pods: 7, expect: {phase: Failed}}\n",
     "case 'x': `pods` is a file name or a list (of objects or file names), not 7"),
    ("cases:\n  - {name: x, steps: [{expect: {phase: Failed}}, {after: [1], expect: {}}]}\n",
     "case 'x': steps[1]: `after` is a duration"),
    ("cases:\n  - {name: x, explain: yes please, expect: {phase: Failed}}\n",
     "case 'x': `explain` is true or false"),
    ("cases:\n  - {name: x, expect: {pod: {golden: 3}}}\n", "case 'x': expect: pod: `golden` is a file name"),
    ('cases:\n  - {name: x, expect: {phase: {golden: "a\\0b"}}}\n',
     "case 'x': expect: phase: `golden` is a file name"),
    ("cases:\n  - {name: x, expect: {phase: {golden: ''}}}\n",
     "case 'x': expect: phase: `golden` is a file name"),
])
def test_malformed_suite_values_exit_2(capsys, tmp_path: Path, cases: str, message: str) -> None:
    suite = write_suite(tmp_path, cases)
    code, out, err = rulec(capsys, "test", tmp_path)
    assert code == 2 and f"rulec test: {suite}: {message}" in err and "Traceback" not in err


@pytest.mark.parametrize("defaults, case, message", [
    ("{pods: pods.yaml, now: '2020-03-12T11:15:00Z'}", "{name: x, expect: {phase: Failed}}",
     "an evaluation case needs a `job` (here or in defaults)"),
    ("{job: job.yaml, now: '2020-03-12T11:15:00Z'}", "{name: x, pods: [missing.yaml], expect: {phase: Failed}}",
     "missing.yaml: cannot read: No such file or directory"),
    ("{job: job.yaml, now: '2020-03-12T11:15:00Z'}", "{name: x, pods: [{a: 1}], expect: {phase: Failed}}",
     "`pods` item 1: not a pod: no metadata.name"),
    ("{job: {kind: Job}, now: '2020-03-12T11:15:00Z'}", "{name: x, expect: {phase: Failed}}",
     "`job`: not a Kubernetes object: no `apiVersion`"),
    ("{job: job.yaml}", "{name: x, expect: {phase: Failed}}",
     "an evaluation case needs `now` (here or in defaults)"),
])
def test_a_case_whose_inputs_cannot_be_used_is_an_error(capsys, tmp_path: Path, defaults: str,
                                                         case: str, message: str) -> None:
    suite = write_suite(tmp_path, "")
    suite.write_text(f"defaults: {defaults}\ncases:\n  - {case}\n  - {{name: y, job: job.yaml, "
                     "pods: pods.yaml, now: '2020-03-12T11:15:00Z', expect: {phase: Failed}}\n")
    code, out, err = rulec(capsys, "test", tmp_path)
    assert code == 2 and "Traceback" not in err and "internal error" not in err
    assert f"ERROR {suite}: x\n" in out and out.rstrip().endswith("1 passed, 0 failed, 1 errors")
    [line] = err.splitlines()
    assert line.startswith(f"rulec test: {suite}: case 'x': ") and line.endswith(message), line
