"""One decision wherever it is made: every `rulec test` suite under examples/, replayed step by
step through the controller's own path, decides what `rulec test` decides.

The controller's path is the worker's (runtime.controller.worker): the job and its pods in an
API server in memory, the caches filled through their projections, the candidates from the
caches' indexes, `reconcile`, the commit guarded by the resourceVersion, the intent journal and
each request it sends. Each step starts from what the previous one wrote on the job (the stored
state, the verdict, the journal), unless the suite gives a state of its own. The same step's
`rulec test` evaluation (the whole objects, the previous step's state) is the oracle: verdict,
events, actions with their budgets, the new state and the time to look again must be equal, and
the state the controller wrote on the job must be the one `rulec test` computed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rulec.commands import suite
from runtime import evaluator, objects, reconcile, state, vocabulary
from tests.unit.runtime import corpus
from tests.unit.runtime.controller import shell
from tests.unit.runtime.controller.fakeapi import FakeApi

CASES = corpus.cases()
COMPARED = ("phase", "reason", "message", "rule", "final", "events", "actions", "state", "wakeAt")


def other_version(case: corpus.Case, step: corpus.Step) -> bool:
    """An object in a served version other than the kind's first: the controller watches that
    one only, and the API server converts every object to it, so it never sees this one."""
    kind = case.plan.kind_for(step.job.get("apiVersion", ""), step.job.get("kind", ""))
    return kind is not None and step.job.get("apiVersion") != kind.api_version


def replay(case: corpus.Case, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """(steps replayed, the differences found)."""
    seen: list[reconcile.Writes] = []
    original = reconcile.reconcile

    def spy(*args: Any, **kw: Any) -> reconcile.Writes:
        writes = original(*args, **kw)
        seen.append(writes)
        return writes
    monkeypatch.setattr(reconcile, "reconcile", spy)
    api = FakeApi(status_subresource={f"{k.plural}.{k.group}" if k.group else k.plural
                                      for k in case.plan.kinds})
    w, _, clock = shell.make(case.plan, api, case.steps[0].now)
    differences: list[str] = []
    previous: dict[str, Any] | None = None
    steps = 0
    for step in case.steps:
        kind = case.plan.kind_for(step.job.get("apiVersion", ""), step.job.get("kind", ""))
        if kind is None or not kind.covers(step.job) or other_version(case, step):
            continue
        path = objects.path(kind.api_version, kind.plural, objects.namespace(step.job),
                            objects.name(step.job))
        job = copy.deepcopy(step.job)
        annotations = job.setdefault("metadata", {}).setdefault("annotations", {})
        if step.explicit_state:
            prior = step.state
            annotations[state.ANNOTATION] = prior if isinstance(prior, str) else json.dumps(prior)
        elif previous is not None:
            prior = previous["state"]
            annotations.update({k: v for k, v in objects.annotations(api.get(path)).items()
                                if k in vocabulary.JOB_ANNOTATIONS})
        else:
            prior = None
        expected = suite.eval_result(case.plan, step.job, step.pods, prior, step.now)
        for stored in [p for p in api.objects if "/pods/" in p]:
            api.remove(stored)
        api.add(job, kind.plural)
        for pod in step.pods:
            api.add(pod, "pods")
        shell.feed(w, api)
        clock.now = step.now
        seen.clear()
        w.sync((kind.name, objects.namespace(step.job) or "", objects.name(step.job) or ""))
        steps += 1
        where = f"{case.suite}: {case.name}: step {step.number}"
        if reconcile.left_alone(kind, step.job, step.now) is not None:
            # another controller's job (`foreign when`): the controller writes nothing, and
            # rulec test runs none of the actions its policies decide
            if seen or objects.annotations(api.get(path)) != objects.annotations(job):
                differences.append(f"{where}: the controller wrote to a job it leaves alone")
            if any(a["status"] == "run" for a in expected["actions"]):
                differences.append(f"{where}: rulec test runs an action on a job the "
                                   "controller leaves alone")
            previous = None
            continue
        if not seen:
            differences.append(f"{where}: the controller did not reconcile the job")
            continue
        actual = evaluator.to_json(seen[-1].evaluation)
        for key in COMPARED:
            if actual.get(key) != expected.get(key):
                differences.append(f"{where}: {key}: rulec test {expected.get(key)!r}, "
                                   f"the controller {actual.get(key)!r}")
        written = objects.annotation(api.get(path), state.ANNOTATION)
        if json.loads(written or "{}") != expected["state"]:
            differences.append(f"{where}: the state written is {written}, "
                               f"rulec test's {json.dumps(expected['state'])}")
        verdict = objects.annotation(api.get(path), vocabulary.VERDICT_ANNOTATION)
        if kind.status.annotations:
            got = json.loads(verdict or "{}")
            for key in ("phase", "reason", "message", "rule", "final"):
                if got.get(key) != expected.get(key) and not (key == "final" and not got.get(key)
                                                               and not expected.get(key)):
                    differences.append(f"{where}: verdict {key}: {got.get(key)!r}, "
                                       f"rulec test's {expected.get(key)!r}")
        previous = expected
    return steps, differences


@pytest.mark.parametrize("case", CASES, ids=[f"{c.suite}: {c.name}" for c in CASES])
def test_the_controller_decides_as_rulec_test(case: corpus.Case,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    steps, differences = replay(case, monkeypatch)
    assert steps == len([s for s in case.steps if not other_version(case, s)])
    assert differences == []


def test_the_replay_covers_every_suite_that_evaluates() -> None:
    """Every suite under examples/ is replayed but those that only mutate pods (the webhook's
    part, held to `rulec test` by the mutation tests)."""
    replayed = {c.suite for c in CASES}
    for path in suite.find([str(corpus.EXAMPLES)]):
        name = str(Path(path).relative_to(corpus.ROOT))
        if name not in replayed:
            loaded = suite.load(path)
            assert all(suite._is_mutation(s.expect, {**loaded.defaults, **s.inputs})
                       for c in loaded.cases for s in c.steps), name
    assert len(replayed) >= 20 and sum(len(c.steps) for c in CASES) >= 80
