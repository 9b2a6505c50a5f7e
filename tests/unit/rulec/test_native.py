"""`rulec native`: the translation table rules -> podFailurePolicy row by row, every limit and
every engine code on a case that trips it, the command's outputs, and its answer on the shipped
rules (docs/native.md)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
import yaml

from rulec import api, diagnostics, native
from rulec.commands import cli
from rulec.source import SourceFile

ROOT = Path(__file__).resolve().parents[3]
HEAD = """job j: batch/v1 Job {
    task label "batch.kubernetes.io/job-completion-index"
    succeeded when all pods succeeded
"""
FAILS = "on pod failed or evicted"
DEFAULT = f'{FAILS} -> count max 6 budget "backoff" then fail job'
EXIT_MSG = ('message "Container {container} for pod {namespace}/{pod} failed with exit code '
            '{exit_code} matching FailJob rule at index 0"')


def report(policies: str, head: str = HEAD, more: str = "") -> native.KindReport:
    text = head + "".join(f"    {line}\n" for line in policies.strip().splitlines()) + "}\n" + more
    built = api.build_sources([SourceFile.from_text("j.rules", text)])
    assert built.plan is not None, [str(d) for d in built.errors]
    [found] = native.decide(built.plan)
    return found


# ---------------------------------------------------------------- (a) the table, row by row

TABLE = [
    ("exit-in", f"{FAILS} exit in [7, 5, 6] -> ignore",
     {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [5, 6, 7]}}),
    ("exit-not-in", f"{FAILS} exit not in [0, 5] -> ignore",
     {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [0, 5]}}),
    ("exit-range", f"{FAILS} exit in [1, 128..130] -> ignore",
     {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1, 128, 129, 130]}}),
    ("container", f'{FAILS} container "main" and exit 42 -> ignore',
     {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42],
                                          "containerName": "main"}}),
    ("condition", f'{FAILS} condition "DisruptionTarget" -> ignore',
     {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}),
    ("condition-status", f'{FAILS} condition "ConfigIssue" = "False" -> ignore',
     {"action": "Ignore", "onPodConditions": [{"type": "ConfigIssue", "status": "False"}]}),
    ("condition-statuses", f'{FAILS} condition "T" in ["False", "Unknown"] -> ignore',
     {"action": "Ignore", "onPodConditions": [{"type": "T", "status": "False"},
                                              {"type": "T", "status": "Unknown"}]}),
    ("condition-or", f'{FAILS} condition "A" or condition "B" = "False" -> ignore',
     {"action": "Ignore", "onPodConditions": [{"type": "A", "status": "True"},
                                              {"type": "B", "status": "False"}]}),
    ("fail-job-plain", f"{FAILS} exit 42 -> fail job",
     {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}),
    ("fail-job-reason", f'{FAILS} exit 42 -> fail job reason "PodFailurePolicy"',
     {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}),
    ("fail-job-native-text", f'{FAILS} exit 42 -> fail job reason "PodFailurePolicy" {EXIT_MSG}',
     {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}),
    ("fail-job-condition-text",
     f'{FAILS} condition "DisruptionTarget" -> fail job reason "PodFailurePolicy" message '
     '"Pod {namespace}/{pod} has condition DisruptionTarget matching FailJob rule at index 0"',
     {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}),
    ("fail-task", f"{FAILS} exit 3 -> fail task",
     {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}),
    ("count", f'{FAILS} exit 3 -> count max 6 budget "backoff" then fail job\n{DEFAULT}',
     {"action": "Count", "onExitCodes": {"operator": "In", "values": [3]}}),
]


@pytest.mark.parametrize("policy,rule", [(p, r) for _, p, r in TABLE], ids=[t[0] for t in TABLE])
def test_table_row(policy: str, rule: dict[str, object]) -> None:
    found = report(policy)
    assert found.fragment()["podFailurePolicy"]["rules"][0] == rule
    assert found.decisions[0].text() == "native: podFailurePolicy rule 0"


def test_adjacent_condition_policies_of_one_action_are_one_rule_with_several_patterns() -> None:
    found = report(f'{FAILS} condition "A" -> ignore\n{FAILS} condition "B" -> ignore\n'
                   f'{FAILS} exit 1 -> ignore')
    assert [d.rule for d in found.decisions] == [0, 0, 1]
    assert found.fragment()["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "A", "status": "True"}, {"type": "B", "status": "True"}]


def test_fail_job_patterns_join_only_the_rule_their_message_names() -> None:
    msg = 'message "Pod {namespace}/{pod} has condition %s matching FailJob rule at index %d"'
    found = report(f'{FAILS} condition "A" -> fail job {msg % ("A", 0)}\n'
                   f'{FAILS} condition "B" -> fail job {msg % ("B", 0)}\n'
                   f'{FAILS} condition "C" -> fail job {msg % ("C", 1)}')
    assert [d.rule for d in found.decisions] == [0, 0, 1]


def test_a_join_that_would_renumber_a_later_fail_job_message_is_not_made() -> None:
    """Ignore [A], Ignore [B], then a FailJob whose message says index 2: joining A and B would
    make the FailJob rule 1, and its message wrong."""
    msg = EXIT_MSG.replace("index 0", "index 2")
    found = report(f'{FAILS} condition "A" -> ignore\n{FAILS} condition "B" -> ignore\n'
                   f'{FAILS} exit 42 -> fail job {msg}')
    assert [d.text() for d in found.decisions] == [
        f"native: podFailurePolicy rule {n}" for n in range(3)]


def test_the_unfiltered_count_is_the_jobs_default_handling() -> None:
    found = report(DEFAULT)
    assert found.fragment() == {"backoffLimit": 6}
    assert found.decisions[0].text() == "native: the Job's default handling (backoffLimit: 6)"


def test_a_budget_read_from_the_job_leaves_its_backoff_limit() -> None:
    found = report(f'{FAILS} exit 3 -> count max <<spec.backoffLimit>> budget "backoff" '
                   f'then fail job\n{FAILS} -> count max <<spec.backoffLimit>> budget "backoff" '
                   'then fail job reason "BackoffLimitExceeded" '
                   'message "Job has reached the specified backoff limit"')
    assert set(found.fragment()) == {"podFailurePolicy"}
    assert all(d.native for d in found.decisions)


def test_per_index_budgets_are_backoff_limit_per_index() -> None:
    count = 'count max 2 per task budget "backoff" then fail task'
    found = report(f"{FAILS} exit 3 -> fail task\n{FAILS} exit 4 -> {count}\n{FAILS} -> {count}")
    assert found.per_index and found.fragment()["backoffLimitPerIndex"] == 2
    assert [r["action"] for r in found.fragment()["podFailurePolicy"]["rules"]] == [
        "FailIndex", "Count"]


def test_rules_without_a_default_never_reach_the_jobs_backoff_limit() -> None:
    """The engine counts no failure that no policy takes: the Job must not either."""
    found = report(f"{FAILS} exit 3 -> ignore")
    assert found.fragment()["backoffLimit"] == native.UNLIMITED


def test_no_failure_policy_no_fragment() -> None:
    found = report("on pod pending for 10m -> fail job")
    assert found.fragment() == {} and found.native_count == 0


def test_only_batch_jobs_are_decided() -> None:
    built = api.build_sources([SourceFile.from_text(
        "t.rules", 'job t: kubeflow.org/v1 TFJob {\n    succeeded when all pods succeeded\n'
                   '    on pod failed or evicted exit 1 -> ignore\n}\n')])
    assert built.plan is not None and native.decide(built.plan) == ()


# ---------------------------------------------------------------- (b) limits and engine codes

ENGINE = [
    ("N101", f"{FAILS} exit 1 -> restart pod max 3", 0),
    ("N101", f'{FAILS} exit 1 -> count max 3 budget "b" then restart job', 0),
    ("N102", "on pod evicted -> ignore", 0),
    ("N102", 'on task failed -> fail job', 0),
    ("N103", f'{FAILS} pod reason "Evicted" -> ignore', 0),
    ("N103", f"{FAILS} -> ignore", 0),
    ("N103", f'on task "0" pod failed or evicted exit 1 -> ignore', 0),
    ("N103", f'{FAILS} condition "DisruptionTarget" reason "PreemptionByScheduler" -> ignore', 0),
    ("N103", f'{FAILS} not exit 1 -> ignore', 0),
    ("N103", f'{FAILS} exit 1 or exit 2 -> ignore', 0),
    ("N104", f'{FAILS} exit 1 and condition "DisruptionTarget" -> ignore', 0),
    ("N105", f"{FAILS} exit 1..256 -> ignore", 0),
    ("N106", f"{FAILS} exit in [0, 1] -> ignore", 0),
    ("N107", f"{FAILS} exit 1 -> restart pod max 3\n{FAILS} exit 2 -> ignore", 1),
    ("N108", "\n".join(f"{FAILS} exit {n + 1} -> ignore" for n in range(21)), 20),
    ("N109", f'{FAILS} exit 1 -> fail job reason "Custom"', 0),
    ("N109", f'{FAILS} exit 1 -> fail job message "custom"', 0),
    ("N109", f'{FAILS} exit 1 -> fail job {EXIT_MSG.replace("index 0", "index 3")}', 0),
    ("N109", f'{FAILS} condition "A" or condition "B" -> fail job reason "PodFailurePolicy" '
             'message "Pod {namespace}/{pod} has condition A matching FailJob rule at index 0"', 0),
    ("N109", f'{FAILS} -> count max 6 budget "backoff" then fail job reason "Other"', 0),
    ("N110", "on pod failed exit 1 -> ignore", 0),
    ("N111", f'{FAILS} -> count max 3 per pod then fail job', 0),
    ("N111", f'{FAILS} -> count max <<spec.parallelism>> then fail job', 0),
    ("N111", f'{FAILS} exit 1 -> count max 3 budget "b" then fail job max 2 then fail job', 0),
    ("N112", f"{FAILS} exit 1 -> fail task", "role"),
    ("N113", f"{FAILS} exit 1 -> ignore", "primary"),
    ("N114", f"audit {FAILS} exit 1 -> ignore", 0),
    ("N115", f'{FAILS} exit 1 -> count max 3 budget "b" then fail job', 0),
    ("N115", f'{FAILS} exit 1 -> count max 3 budget "b" then fail job\n'
             f'{FAILS} exit 2 -> restart pod max 3\n{FAILS} -> count max 3 budget "b" then fail job', 0),
    ("N116", f'{FAILS} exit 1 -> fail task\n{DEFAULT}', 1),
]


def _engine_case(policies: str, at: int | str) -> tuple[native.KindReport, int]:
    if at == "role":
        head = HEAD.replace("batch.kubernetes.io/job-completion-index", "role")
        return report(policies, head), 0
    if at == "primary":
        return report(policies, HEAD + '    primary container "main"\n'), 0
    assert isinstance(at, int)
    return report(policies), at


@pytest.mark.parametrize("code,policies,at", ENGINE,
                         ids=[f"{c}-{n}" for n, (c, _, _) in enumerate(ENGINE)])
def test_engine_code(code: str, policies: str, at: int | str) -> None:
    found, index = _engine_case(policies, at)
    decision = found.decisions[index]
    assert decision.code == code, decision.text()
    assert decision.text().startswith(f"engine: {code} ") and decision.reason
    if code != "N107":
        assert all(d.native for d in found.decisions[:index])


def test_a_second_budget_is_named_when_the_counts_go_back_to_the_engine() -> None:
    found = report(f'{FAILS} exit 1 -> count max 3 budget "a" then fail job\n'
                   f'{FAILS} -> count max 4 budget "b" then fail job')
    assert [d.code for d in found.decisions] == ["N115", "N107"]
    assert "podFailed#1: N111 stays with the engine" in found.decisions[0].reason


def test_every_engine_code_has_a_case_and_explain_knows_it(capsys: pytest.CaptureFixture[str]) -> None:
    # N117 and later are the injections' (tests/unit/rulec/test_admission_policies.py)
    policy_codes = [c for c in diagnostics.NATIVE_CODES if c.code < "N117"]   # N120: below
    assert {c for c, _, _ in ENGINE} == {c.code for c in policy_codes}
    for code in policy_codes:
        assert cli.main(["explain", code.code]) == 0
        assert cli.main(["explain", code.name]) == 0
        assert capsys.readouterr().out.startswith(f"{code.code} {code.name} (engine): ")


def test_native_codes_do_not_collide_with_diagnostics() -> None:
    names = [c.name for c in (*diagnostics.CODES, *diagnostics.NATIVE_CODES)]
    codes = [c.code for c in (*diagnostics.CODES, *diagnostics.NATIVE_CODES)]
    assert len(set(names)) == len(names) and len(set(codes)) == len(codes)


def test_255_exit_codes_go_native_and_20_rules_do() -> None:
    found = report(f"{FAILS} exit 1..255 -> ignore\n"
                   + "\n".join(f"{FAILS} exit {n + 300} -> ignore" for n in range(19)))
    rules = found.fragment()["podFailurePolicy"]["rules"]
    assert len(rules) == 20 and len(rules[0]["onExitCodes"]["values"]) == 255
    assert all(d.native for d in found.decisions)


def test_a_policy_on_another_event_ends_nothing() -> None:
    found = report(f"on pod pending for 10m -> fail job\n{FAILS} exit 1 -> ignore")
    assert [d.code for d in found.decisions] == ["N102", None]


def test_an_eviction_policy_anywhere_is_tried_first() -> None:
    """The engine gives an evicted pod to `pod evicted` policies before `pod failed` ones,
    wherever they stand: the failure policies before it in the file stay with it."""
    found = report(f"{FAILS} exit 1 -> ignore\non pod evicted -> ignore")
    assert [d.code for d in found.decisions] == ["N107", "N102"]


def test_a_count_before_an_engine_policy_stays_with_the_engine() -> None:
    found = report(f'{FAILS} exit 3 -> ignore\n'
                   f'{FAILS} exit 1 -> count max 3 budget "backoff" then fail job\n'
                   f'{FAILS} exit 2 -> restart pod max 3\n{DEFAULT}')
    assert [d.code for d in found.decisions] == [None, "N115", "N107", "N107"]
    assert found.fragment()["backoffLimit"] == native.UNLIMITED


def test_an_injected_sidecar_keeps_exit_codes_with_the_engine() -> None:
    inject = ('inject into pods of j {\n    sidecar "log" {\n        image "busybox"\n    }\n}\n')
    found = report(f'{FAILS} exit 1 -> ignore\n{FAILS} condition "T" -> ignore', more=inject)
    assert [d.code for d in found.decisions] == ["N113", "N107"]


def test_policies_of_extend_come_after_the_kinds_own() -> None:
    found = report(f"{FAILS} exit 1 -> ignore",
                   more=f"extend j {{\n    {FAILS} exit 2 -> fail job\n}}\n")
    assert [d.rule for d in found.decisions] == [0, 1]


# ---------------------------------------------------------------- the command

def _rules(tmp_path: Path, policies: str) -> str:
    path = tmp_path / "j.rules"
    path.write_text(HEAD + "".join(f"    {p}\n" for p in policies.splitlines()) + "}\n")
    return str(path)


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _rules(tmp_path, f"{FAILS} exit 1 -> ignore\n{FAILS} exit 2 -> restart pod max 2")
    assert cli.main(["native", path]) == 0
    out = capsys.readouterr().out
    assert "native: podFailurePolicy rule 0" in out
    assert "engine: N101 `restart pod` has no podFailurePolicy action" in out
    assert "native: 1 of 2 policies (50%)" in out
    fragment = yaml.safe_load("\n".join(line[4:] for line in out.splitlines()
                                        if line.startswith("    ")))
    assert fragment == {"backoffLimit": native.UNLIMITED, "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}}]}}


def test_json_and_yaml_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _rules(tmp_path, f"{FAILS} exit 1 -> ignore\n{DEFAULT}")
    assert cli.main(["native", path, "--format", "json"]) == 0
    [kind] = json.loads(capsys.readouterr().out)["kinds"]
    assert (kind["native"], kind["total"]) == (2, 2)
    assert kind["policies"][1]["decision"] == "native: the Job's default handling (backoffLimit: 6)"
    assert cli.main(["native", path, "--format", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == kind["fragment"]


def test_rules_with_errors_are_diagnostics_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _rules(tmp_path, f"{FAILS} exit 1 -> restart nothing")
    assert cli.main(["native", path]) == 1
    err = capsys.readouterr().err
    assert "j.rules:4:" in err and "error[R" in err and "Traceback" not in err
    assert cli.main(["native", str(tmp_path / "missing.rules")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_policy_of_another_kind_stays_with_the_engine_and_every_rule_is_counted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.rules"
    path.write_text('job w: example.dev/v1 Thing {\n    pods owned\n'
                    '    failed when <<status.failed>>\n'
                    '    on pod failed exit 1 -> fail job\n}\n'
                    'inject "i" into pods of w { annotate "a" = "b" }\n'
                    'inject "j" into pods of w { wrap ["main"] with ["tini", "--"] }\n'
                    + HEAD + f"    {FAILS} exit 1 -> ignore\n" + "}\n")
    assert cli.main(["native", str(path)]) == 0
    out = capsys.readouterr().out
    assert "kind w (example.dev/v1 Thing)" in out
    assert "engine: N120 example.dev/v1 Thing has no failure policy rulec compiles to" in out
    assert "engine: N118 " in out
    assert out.endswith("\n2 of 4 rules native (50%): 1 of 2 policies, 1 of 2 injections\n"), out
    assert cli.main(["native", str(path), "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["summary"] == {"native": 2, "rules": 4, "nativePolicies": 1, "policies": 2,
                                "nativeInjections": 1, "injections": 2}
    assert [k["api"] for k in found["kinds"]] == ["example.dev/v1 Thing", "batch/v1 Job"]
    assert cli.main(["explain", "N120"]) == 0
    assert capsys.readouterr().out.startswith("N120 native-kind (engine): ")


def shipped_output() -> str:
    """`rulec native rules/` as the command prints it, from the repository's root."""
    proc = subprocess.run([sys.executable, "-m", "rulec", "native", "rules/"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    return proc.stdout


def test_the_shipped_rules() -> None:
    """docs/native.md: every shipped kind, none with a policy, and no injection: 0 of 0."""
    out = shipped_output()
    kinds = re_findall(r"^kind (\S+) ", out)
    assert len(kinds) == len(list((ROOT / "rules").glob("*.rules"))) - 1   # causes.rules: none
    assert out.endswith("\n0 of 0 rules native: 0 of 0 policies, 0 of 0 injections\n")


def test_docs_name_tests_that_exist_and_show_the_shipped_output() -> None:
    """docs/native.md names, for each row, the test that covers it: each named test exists
    (`...` abbreviates a name), each `test_table_row[id]` is a row of TABLE, and the shipped
    rules' output it shows is the one test_the_shipped_rules holds."""
    doc = (ROOT / "docs" / "native.md").read_text(encoding="utf-8")
    here = Path(__file__).read_text(encoding="utf-8")
    oracle = (ROOT / "tests" / "unit" / "test_native_oracle.py").read_text(encoding="utf-8")
    shadow = (ROOT / "tests" / "integration" / "test_native_shadow.py").read_text(encoding="utf-8")
    admission = "".join((ROOT / "tests" / path).read_text(encoding="utf-8") for path in (
        "unit/rulec/test_admission_policies.py", "unit/rulec/test_native_cel_cost.py",
        "integration/test_native_admission.py",
        "integration/test_manifests_cluster.py"))
    defined = set(re_findall(r"^def (test_\w+)", here + oracle + shadow + admission))
    named = set(re_findall(r"`(test_\w+)(?:\.\.\.)?", doc))
    assert len(named) >= 15
    for name in named:
        assert any(d.startswith(name) for d in defined), name
    rows = set(re_findall(r"\[([a-z-]+)\]`", doc)) | set(re_findall(r"`\[([a-z-]+)\]`", doc))
    assert rows and rows <= {t[0] for t in TABLE}, rows - {t[0] for t in TABLE}
    # the table of the shipped rules is the command's output now, so it cannot go stale
    assert "```\n" + shipped_output() + "```" in doc


def re_findall(pattern: str, text: str) -> list[str]:
    import re

    return re.findall(pattern, text, re.M)


# ---------------------------------------------------------------- invariants on random rules

# Mostly what goes native, so that the prefix runs long (per job or per index); now and then
# what does not.
FILTERS = ["exit 1", "exit in [3, 5]", "exit not in [0, 2]", "exit 100..354",
           'container "main" and exit 42', 'condition "DisruptionTarget"',
           'condition "T" in ["False", "Unknown"]', 'condition "A" or condition "B"',
           'condition "C" = "False"']
PER_JOB = ["ignore", "fail job", 'fail job reason "PodFailurePolicy"',
           'count max 3 budget "backoff" then fail job']
PER_INDEX = ["ignore", "fail job", "fail task", 'count max 2 per task budget "backoff" then fail task']
LAST = {"job": f'{FAILS} -> count max 3 budget "backoff" then fail job',
           "task": f'{FAILS} -> count max 2 per task budget "backoff" then fail task'}
ODD = ["on pod failed exit 1 -> ignore", "on pod evicted -> ignore",
       f'on task "0" {FAILS[3:]} exit 1 -> ignore', "on pod pending for 5m -> fail job",
       f"{FAILS} -> ignore", f"{FAILS} exit in [0, 3] -> ignore", f"{FAILS} exit 1..300 -> ignore",
       f'{FAILS} exit 1 and condition "A" -> ignore', f'{FAILS} pod reason "Evicted" -> ignore',
       f'{FAILS} exit 1 -> fail job reason "X"', f"{FAILS} exit 1 -> restart pod max 2",
       f'{FAILS} exit 1 -> count max 4 budget "other" then fail job', f"{FAILS} exit 9 -> fail task",
       f'{FAILS} exit 9 -> count max 3 budget "backoff" then fail job']


@st.composite
def programs(draw: st.DrawFn) -> list[str]:
    mode = draw(st.sampled_from(["job", "task"]))
    actions = PER_JOB if mode == "job" else PER_INDEX
    lines = [f"{FAILS} {draw(st.sampled_from(FILTERS))} -> {draw(st.sampled_from(actions))}"
             for _ in range(draw(st.integers(1, 23)))]
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(ODD)))
    if draw(st.booleans()):
        lines.append(LAST[mode])
    return [f'{line} as "p{n}"' for n, line in enumerate(lines)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_decisions_keep_order_and_the_apis_limits(lines: list[str]) -> None:
    text = HEAD + "".join(f"    {line}\n" for line in lines) + "}\n"
    built = api.build_sources([SourceFile.from_text("j.rules", text)])
    assert built.plan is not None, [str(d) for d in built.errors]
    [found] = native.decide(built.plan)
    policies = built.plan["kinds"][0]["policies"]
    assert [d.policy for d in found.decisions] == [p["id"] for p in policies]
    assert [d.position for d in found.decisions] == list(range(1, len(policies) + 1))
    rules = found.fragment().get("podFailurePolicy", {"rules": []})["rules"]
    assert len(rules) <= native.MAX_RULES
    for rule in rules:
        assert ("onExitCodes" in rule) != ("onPodConditions" in rule)
        codes = rule.get("onExitCodes")
        if codes:
            assert 1 <= len(codes["values"]) <= native.MAX_CODES
            assert codes["values"] == sorted(set(codes["values"]))
            assert not (codes["operator"] == "In" and 0 in codes["values"])
    # In the order the engine tries them, the native failure policies are a prefix, and their
    # rules come in order, every rule used.
    by_id = {d.policy: d for d in found.decisions}
    tried = [by_id[p["id"]] for p in native._tried(policies) if native._competes(p)]
    natives = [d.native for d in tried]
    assert natives == sorted(natives, reverse=True)
    numbers = [d.rule for d in tried if d.rule is not None]
    assert numbers == sorted(numbers) and set(numbers) == set(range(len(rules)))
    assert all(d.code in diagnostics.NATIVE_BY_CODE for d in found.decisions if not d.native)
    if any(r["action"] == "FailIndex" for r in rules):
        assert found.per_index
    # A Count rule only when every failure policy went native, ending with the default
    # handling, whose budget the fragment then carries.
    if any(r["action"] == "Count" for r in rules):
        assert all(natives) and any(d.default for d in tried)
        assert found.limit in (2, 3) and found.limit != native.UNLIMITED
    if rules and not all(natives):
        assert found.limit == native.UNLIMITED
