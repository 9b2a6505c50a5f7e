"""`rulec eval`, `mutate` and `test` through the real CLI entry point: outputs, inputs, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rulec import cli

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
    out, _ = evaluate(capsys, pods=path)
    pods = sorted(e["pod"] for e in json.loads(out)["events"] if e["event"].startswith("pod"))
    assert pods == (["other", "tensorflow-models200312190939-master-0"] if shape != "single"
                    else ["tensorflow-models200312190939-master-0"])


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
    assert "  podFailed  pod tensorflow-models200312190939-master-0 task master container jarvis-single-job  (no policy)" in lines
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
      - expect: {phase: Failed, events: [{event: podFailed}, {event: taskFailed}, {event: jobVerdictChanged}]}
      - after: 1h
        expect: {events: [], actions: []}
""")
    assert rulec(capsys, "test", tmp_path)[0] == 0
