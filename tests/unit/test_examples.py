"""Every case of every suite under examples/ as a pytest case (the README runs `rulec test examples/`)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from rulec.commands import inputs, suite
from runtime import plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CASES = [(path, case.name) for path in suite.find([str(EXAMPLES)]) for case in suite.load(path).cases]


@functools.lru_cache(maxsize=None)
def compiled(path: str) -> tuple[suite.Suite, plan.Plan]:
    loaded = suite.load(path)
    return loaded, inputs.load_plan(list(loaded.rules), loaded.folder)


@pytest.mark.parametrize("path, name", CASES,
                         ids=[f"{Path(p).parent.name}: {n}" for p, n in CASES])
def test_example(path: str, name: str) -> None:
    loaded, rules = compiled(path)
    case = next(c for c in loaded.cases if c.name == name)
    outcome = suite.run_case(loaded, case, rules)
    assert outcome.passed, outcome.report or outcome.error


@pytest.mark.parametrize("scenario", [
    "volcano-oomkilled/suite.yaml", "argo-wait-main/suite.yaml",
    "katib-metrics-collector/suite.yaml", "exit-codes/suite.yaml", "evictions/suite.yaml",
    "crashloop/suite.yaml", "pending-too-long/suite.yaml", "partial-success/suite.yaml",
    "worker-completes/suite.yaml",
    # verdicts over time (issue 12)
    "spark-like/driver.suite.yaml", "spark-like/evictions.suite.yaml", "spark-like/count.suite.yaml",
    "injected-sidecar/suite.yaml", "shipped-kinds/suite.yaml", "pod-failure-policy/fail-index/suite.yaml",
    "failure-policies/group.suite.yaml", "failure-policies/backoff.suite.yaml",
])
def test_every_scenario_has_a_suite(scenario: str) -> None:
    assert (EXAMPLES / scenario).is_file()


@pytest.mark.parametrize("path", sorted({p for p, _ in CASES}), ids=lambda p: str(Path(p).relative_to(EXAMPLES)))
def test_example_rules_check_clean_and_are_formatted(path: str) -> None:
    from rulec import api, fmt

    built = api.build(list(suite.load(path).rules), emit_plan=False)
    assert built.diagnostics == ()
    for source in built.sources.values():
        assert fmt.format_source(source).text == source.text, f"{source.path}: run rulec fmt"



GOLDEN_MUTATIONS = ["argo-wait-main", "katib-metrics-collector"]


@pytest.mark.parametrize("folder", GOLDEN_MUTATIONS)
def test_golden_pods_depend_on_their_injections_only(folder: str, tmp_path: Path) -> None:
    """A mutated pod's golden file holds the record annotation (`name@digest`): a comment that
    moves every line of every rules file of the example, and a kind added beside them, change
    the plan and not the goldens (cases that cite rule positions, `explain`, do change)."""
    import shutil

    copy = tmp_path / folder
    shutil.copytree(EXAMPLES / folder, copy)
    for n, rules in enumerate(sorted(copy.glob("*.rules"))):
        extra = "" if n else "\njob extra: example.dev/v1 Extra {\n    pods owned\n    pending otherwise\n}\n"
        rules.write_text("# a comment above everything\n\n" + rules.read_text() + extra)
    [path] = suite.find([str(copy)])
    loaded = suite.load(path)
    rules = inputs.load_plan(list(loaded.rules), loaded.folder)
    assert rules.digest != compiled(str(EXAMPLES / folder / "suite.yaml"))[1].digest
    golden = [c for c in loaded.cases if any("golden" in str(step.expect) for step in c.steps)]
    assert golden
    for case in golden:
        outcome = suite.run_case(loaded, case, rules)
        assert outcome.passed, outcome.report or outcome.error
