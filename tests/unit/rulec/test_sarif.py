"""`rulec check --format sarif`: a SARIF 2.1.0 log that the official schema accepts, with the
positions every other output gives."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft4Validator, FormatChecker

from rulec import about, api, diagnostics
from rulec.commands import cli, sarif
from rulec.source import SourceFile

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text())
GOLDENS = sorted((ROOT / "tests" / "golden" / "diagnostics").glob("*.rules"))
# One error (R301) and one warning (R402); the emoji before the error is one code point but
# two UTF-16 units, so its column tells which unit the log counts in.
BOTH = """\
job j: batch/v1 Job {
    failed when any pod failed with (reason "😀" or exit 3000000000)
    succeeded when all pods succeeded
    on pod evicted -> restart pod
}
"""
CONCISE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<level>\w+)\[(?P<code>R\d+)\] ",
                     re.M)


@pytest.fixture(scope="module")
def validator() -> Draft4Validator:
    checker = FormatChecker()
    # Without a URI validator installed, jsonschema skips `format: uri` silently.
    assert {"uri", "uri-reference"} <= set(checker.checkers)
    Draft4Validator.check_schema(SCHEMA)
    return Draft4Validator(SCHEMA, format_checker=checker)


def valid(validator: Draft4Validator, log: dict[str, Any]) -> None:
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(log)]
    assert not problems, problems


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_one_diagnostic_of_each_severity(capsys, validator, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("both.rules").write_text(BOTH, encoding="utf-8")
    code, out = run(capsys, "check", "--format", "sarif", "both.rules")
    log = json.loads(out)
    valid(validator, log)
    assert code == 1
    [run_] = log["runs"]
    assert log["version"] == "2.1.0" and run_["columnKind"] == "unicodeCodePoints"
    results = run_["results"]
    assert sorted(r["level"] for r in results) == ["error", "warning"]

    concise = [m.groupdict() for m in CONCISE.finditer(run(capsys, "check", "both.rules")[1])]
    assert [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
             str(r["locations"][0]["physicalLocation"]["region"]["startLine"]),
             str(r["locations"][0]["physicalLocation"]["region"]["startColumn"]),
             r["level"], r["ruleId"]) for r in results] == \
        [(c["path"], c["line"], c["col"], c["level"], c["code"]) for c in concise]
    ends = [(d["endLine"], d["endColumn"]) for d in json.loads(run(capsys, "check", "--format",
                                                                  "json", "both.rules")[1])]
    assert [(r["locations"][0]["physicalLocation"]["region"]["endLine"],
             r["locations"][0]["physicalLocation"]["region"]["endColumn"]) for r in results] == ends
    error = next(r for r in results if r["level"] == "error")
    region = error["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == 2 and region["startColumn"] == BOTH.splitlines()[1].index("3000000000") + 1


def test_rules_describe_every_code_and_link_to_its_row(validator) -> None:
    log = json.loads(sarif.render([]))
    valid(validator, log)
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "rulec" and driver["version"] == about.version()
    assert [r["id"] for r in driver["rules"]] == [c.code for c in diagnostics.CODES]
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    for rule, code in zip(driver["rules"], diagnostics.CODES):
        assert rule["shortDescription"]["text"] == code.summary
        assert rule["defaultConfiguration"]["level"] == code.severity
        anchor = rule["helpUri"].split("#")[1]
        assert rule["helpUri"].endswith(f"/docs/language.md#{anchor}")
        assert f'<a id="{anchor}"></a>{code.code} ' in doc


@pytest.mark.parametrize("path, value", [
    (("runs", 0, "columnKind"), "bytes"),
    (("runs", 0, "tool", "driver", "rules", 0, "helpUri"), "language.md#r001"),  # not absolute
    (("runs", 0, "results", 0, "locations", 0, "physicalLocation", "region", "startLine"), 0),
    (("runs", 0, "results", 0, "level"), "info"),
])
def test_the_schema_rejects_a_broken_log(validator, path: tuple, value: Any) -> None:
    """The validation is not vacuous: each of these breaks the log."""
    text = "job j: v1 Pod { on pod failed exit 3000000000 -> ignore }"
    build = api.build_sources([SourceFile.from_text("x.rules", text)], emit_plan=False)
    log = json.loads(sarif.render(build.diagnostics))
    valid(validator, log)
    target = log
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert list(validator.iter_errors(log))


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.stem)
def test_every_golden_gives_a_valid_log(validator, path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    crd = path.with_suffix(".crd.yaml")
    relative = path.relative_to(ROOT).as_posix()
    build = api.build([relative], [crd.relative_to(ROOT).as_posix()] if crd.exists() else [],
                      emit_plan=False)
    log = json.loads(cli.render_diagnostics(build.diagnostics, "sarif", build.sources))
    valid(validator, log)
    results = log["runs"][0]["results"]
    assert results and all(r["locations"][0]["physicalLocation"]["artifactLocation"]
                           == {"uri": relative, "uriBaseId": "%SRCROOT%"} for r in results)
    driver_rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert all(driver_rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    noted = [d for d in build.diagnostics if any(n.span for n in d.notes)]
    assert sum(len(r.get("relatedLocations", [])) for r in results) == \
        sum(1 for d in noted for n in d.notes if n.span)


def test_clean_check_prints_an_empty_run(capsys, validator, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("ok.rules").write_text("job j: batch/v1 Job {\n    succeeded when all pods succeeded\n"
                                "    failed when any pod failed\n}\n")
    code, out = run(capsys, "check", "--format", "sarif", "ok.rules")
    log = json.loads(out)
    valid(validator, log)
    assert code == 0 and log["runs"][0]["results"] == []
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"


def test_paths_outside_the_folder_and_odd_names(capsys, validator, tmp_path, monkeypatch) -> None:
    inside, outside = tmp_path / "repo", tmp_path / "elsewhere"
    (inside / "my rules").mkdir(parents=True)
    outside.mkdir()
    bad = "job j: v1 Pod { on pod failed exit 3000000000 -> ignore }\n"
    (inside / "my rules" / "a#1.rules").write_text(bad)
    (outside / "b.rules").write_text(bad.replace("job j", "job k"))
    monkeypatch.chdir(inside)
    log = json.loads(run(capsys, "check", "--format", "sarif", "my rules", str(outside))[1])
    valid(validator, log)
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"]
                 for r in log["runs"][0]["results"]]
    assert {"uri": (outside / "b.rules").resolve().as_uri()} in locations
    assert {"uri": "my%20rules/a%231.rules", "uriBaseId": "%SRCROOT%"} in locations


def test_the_command_picks_sarif_and_the_library_renders_text() -> None:
    """SARIF is the command's format (rulec.commands.sarif): the library's renderer knows only
    its text formats, and says so rather than printing one of them instead."""
    assert cli.FORMATS == (*diagnostics.FORMATS, "sarif")
    with pytest.raises(ValueError, match="no diagnostics format 'sarif'"):
        diagnostics.render([], "sarif", {})
