"""`rulec test --format junit`: a report that a JUnit XML reader (junitparser) takes as CI
systems do, one test case per suite case, failures carrying the diff."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from junitparser import Error, Failure, JUnitXml

from rulec.commands import cli, junit
from rulec.commands.suite import Outcome

ROOT = Path(__file__).resolve().parents[3]
VOLCANO = ROOT / "examples" / "volcano-oomkilled"
CASES = ("cases:\n  - {name: right, expect: {phase: Failed}}\n"
         "  - {name: wrong, expect: {phase: Succeeded}}\n")


def suite(folder: Path, cases: str = CASES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("vcjob.rules", "job.yaml"):
        (folder / name).write_text((VOLCANO / name).read_text())
    (folder / "pods.yaml").write_text((VOLCANO / "pods" / "master-oomkilled.yaml").read_text())
    (folder / "suite.yaml").write_text(
        "defaults: {job: job.yaml, pods: pods.yaml, now: '2020-03-12T11:15:00Z'}\n" + cases)
    return folder / "suite.yaml"


def junit_test(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, JUnitXml, str]:
    code = cli.main(["test", "--format", "junit", *map(str, paths)])
    out, err = capsys.readouterr()
    return code, JUnitXml.fromstring(out), err


def outcomes(report: JUnitXml) -> list[tuple[str, str, str]]:
    """(suite, case, result) for every test case of the report."""
    found = []
    for s in report:
        for case in s:
            kinds = {type(r) for r in case.result}
            found.append((s.name, case.name, "error" if Error in kinds
                          else "failure" if Failure in kinds else "pass"))
    return found


def test_one_passing_and_one_failing_case(capsys, tmp_path: Path) -> None:
    path = suite(tmp_path)
    code, report, _ = junit_test(capsys, path)
    assert code == 1
    assert (report.tests, report.failures, report.errors) == (2, 1, 0)
    assert outcomes(report) == [(str(path), "right", "pass"), (str(path), "wrong", "failure")]
    [[_, wrong]] = list(report)
    [failure] = wrong.result
    assert failure.message == "--- expected"
    assert "-phase: Succeeded\n+phase: Failed\n" in failure.text  # the diff, as text shows it
    assert wrong.classname == str(path) and wrong.time >= 0


def test_every_example_passes(capsys) -> None:
    code, report, _ = junit_test(capsys, ROOT / "examples")
    assert code == 0 and report.failures == 0 and report.errors == 0
    assert report.tests == sum(len(list(s)) for s in report) > 20


def test_a_suite_that_does_not_load_is_an_error_case(capsys, tmp_path: Path) -> None:
    good = suite(tmp_path / "good")
    broken = suite(tmp_path / "broken", "cases: []\n")
    code, report, err = junit_test(capsys, tmp_path)
    assert code == 2 and "`cases` is a non-empty list" in err
    assert (report.tests, report.failures, report.errors) == (3, 1, 1)
    assert outcomes(report) == [(str(broken), "(loading the suite)", "error"),
                                (str(good), "right", "pass"), (str(good), "wrong", "failure")]


def test_golden_updates_go_to_stderr(capsys, tmp_path: Path) -> None:
    argo = ROOT / "examples" / "argo-wait-main"
    for name in ("workflow.rules", "pod.yaml"):
        (tmp_path / name).write_text((argo / name).read_text())
    (tmp_path / "suite.yaml").write_text(
        "cases:\n  - {name: g, pod: pod.yaml, expect: {pod: {golden: out.yaml}}}\n")
    code = cli.main(["test", "--format", "junit", "--update", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0 and "wrote" in err and JUnitXml.fromstring(out).tests == 1


def test_a_case_whose_inputs_cannot_be_used_is_an_error_case(capsys, tmp_path: Path) -> None:
    path = suite(tmp_path, CASES + "  - {name: lost, pods: [missing.yaml], expect: {phase: Failed}}\n")
    code, report, err = junit_test(capsys, path)
    assert code == 2 and "case 'lost': " in err and "missing.yaml: cannot read" in err
    assert (report.tests, report.failures, report.errors) == (3, 1, 1)
    assert outcomes(report)[2] == (str(path), "lost", "error")
    [[_, _, lost]] = list(report)
    [error] = lost.result
    assert "missing.yaml: cannot read" in error.message


# Case names and reports are the user's text: anything, even characters XML cannot carry.
_outcome = st.builds(
    lambda name, passed, report, error: Outcome("s", name, passed and not error, report,
                                                error=error),
    st.text(), st.booleans(), st.text(), st.just("") | st.text(min_size=1))
_runs = st.lists(st.builds(
    lambda path, cases, error: junit.SuiteRun(path, tuple(cases), error),
    st.text(min_size=1), st.lists(st.tuples(_outcome, st.floats(0, 1e4)), max_size=4),
    st.none() | st.text()), max_size=4)


@settings(deadline=None)  # XML parsing of large drawn texts is slow on a busy machine
@given(_runs)
def test_any_results_give_a_report_with_their_counts(runs: list[junit.SuiteRun]) -> None:
    report = JUnitXml.fromstring(junit.render(runs))
    cases = [o for r in runs for o, _ in r.cases]
    assert report.tests == len(cases) + sum(r.error is not None for r in runs)
    assert report.failures == sum(not o.passed and not o.error for o in cases)
    assert report.errors == sum(r.error is not None for r in runs) + sum(bool(o.error) for o in cases)
    expected = []
    for r in runs:
        if r.error is not None:
            expected.append((junit._text(r.path), "(loading the suite)", "error"))
        expected += [(junit._text(r.path), junit._text(o.case),
                      "error" if o.error else "pass" if o.passed else "failure") for o, _ in r.cases]
    assert outcomes(report) == expected
