"""The project's own rules and suites as test data: every plan in the repository (the shipped
rules, each example's rules) and every evaluation step of every `rulec test` suite, resolved to
the objects `rulec test` evaluates. Tests that hold two paths equal replay these."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rulec import api, emit
from rulec.commands import inputs, suite
from runtime import functions, plan

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class Plan:
    name: str
    raw: dict[str, Any]       # the plan's JSON as `rulec compile` writes it
    loaded: plan.Plan


@dataclass(frozen=True)
class Step:
    """One evaluation step of a suite case, with what `rulec test` gives the evaluator."""

    suite: str
    case: str
    number: int
    now: datetime
    job: dict[str, Any]
    pods: list[dict[str, Any]]
    state: Any                # the state given, or None: the previous step's (or the job's own)
    explicit_state: bool      # the step names its own state


@dataclass(frozen=True)
class Case:
    suite: str
    name: str
    plan: plan.Plan
    steps: tuple[Step, ...]


def _compiled(paths: list[str], name: str, relative_to: str | None = None) -> Plan:
    loaded, text = inputs.load_plan_text(paths, relative_to)
    return Plan(name, json.loads(text), loaded)


@functools.lru_cache(maxsize=None)
def plans() -> tuple[Plan, ...]:
    """The shipped rules, and the rules of every suite under examples/."""
    out = [Plan("rules", json.loads(emit.dumps(api.build([str(ROOT / "rules")]).plan)),  # type: ignore[arg-type]
                plan.loads(emit.dumps(api.build([str(ROOT / "rules")]).plan)))]  # type: ignore[arg-type]
    for path in suite.find([str(EXAMPLES)]):
        loaded = suite.load(path)
        out.append(_compiled(list(loaded.rules), str(Path(path).relative_to(ROOT)), loaded.folder))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def cases() -> tuple[Case, ...]:
    """Every evaluation case of every suite under examples/, its steps resolved as `rulec test`
    resolves them (mutation steps left out)."""
    out = []
    for path in suite.find([str(EXAMPLES)]):
        loaded = suite.load(path)
        compiled = inputs.load_plan(list(loaded.rules), loaded.folder)
        for case in loaded.cases:
            steps = _steps(loaded, case)
            if steps:
                out.append(Case(str(Path(path).relative_to(ROOT)), case.name, compiled, steps))
    return tuple(out)


def _steps(loaded: suite.Suite, case: suite.Case) -> tuple[Step, ...]:
    current: dict[str, Any] = dict(loaded.defaults)
    now: datetime | None = None
    out = []
    for number, step in enumerate(case.steps, 1):
        given = step.inputs
        current.update({k: v for k, v in given.items() if k not in ("after", "state")})
        if "now" in given or now is None and "now" in current:
            now = functions.timestamp(current["now"])
        if "after" in given and now is not None:
            now += timedelta(seconds=functions.seconds(str(given["after"])))
        if suite._is_mutation(step.expect, current) or "job" not in current or now is None:
            continue
        if "state" in given:
            state, explicit = suite._resolve(given["state"], loaded.folder, "state"), True
        elif number == 1 and "state" in current:
            state, explicit = suite._resolve(current["state"], loaded.folder, "state"), True
        else:
            state, explicit = None, False
        out.append(Step(loaded.path, case.name, number, now,
                        suite._resolve(current["job"], loaded.folder, "job"),
                        suite._resolve(current.get("pods", []), loaded.folder, "pods"),
                        state, explicit))
    return tuple(out)
