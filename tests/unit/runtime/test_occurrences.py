"""The events one pod's change amounts to (runtime.evaluation.occurrences.changes), for every
kind of step a pod takes between two evaluations, and how `--explain` names what an
occurrence is about."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from runtime.evaluation.occurrences import Occurrence, changes, label
from runtime.state import PodRecord as R


@pytest.mark.parametrize("old, new, names, disrupted", [
    pytest.param(R(None, "R"), R(None, "R"), (), False, id="unchanged"),
    pytest.param(R(None, "R"), R(None, "R", ours=True), (), False, id="only-ours-changed"),
    pytest.param(None, R(None, "P"), ("podPending",), False, id="new-pending"),
    pytest.param(R(None, "P"), R(None, "R"), ("podRunning",), False, id="started"),
    pytest.param(R(None, "R"), R(None, "S"), ("podSucceeded",), False, id="succeeded"),
    pytest.param(R(None, "R"), R(None, "F"), ("podFailed",), False, id="failed"),
    pytest.param(R(None, "R"), R(None, "R", evicted=True, deleting=True),
                 ("podEvicted", "podDeleted"), False, id="evicted-and-deleted-at-once"),
    pytest.param(R(None, "R"), R(None, "R", deleting=True), ("podDeleted", "podEvicted"), False,
                 id="deleted-by-someone-counts-as-evicted"),
    pytest.param(R(None, "R"), R(None, "S", deleting=True), ("podSucceeded",), False,
                 id="deleted-once-finished-is-no-deletion"),
    pytest.param(R(None, "R", evicted=True), R(None, "F", evicted=True), ("podFailed",), True,
                 id="an-evicted-pod-fails-disrupted"),
    pytest.param(R(None, "R"), R(None, "F", evicted=True), ("podEvicted", "podFailed"), True,
                 id="evicted-and-failed-at-once"),
    pytest.param(R(None, "R", deleting=True), R(None, "S", deleting=True), (), False,
                 id="a-handled-pod-that-ends-says-nothing"),
    pytest.param(R(None, "R", restarts=1), R(None, "F", restarts=1), ("podFailed",), False,
                 id="restarted-before-is-no-restart-now"),
    pytest.param(R(None, "R", restarts=1), R(None, "R", restarts=2), ("containerRestarted",),
                 False, id="restarted-again"),
    pytest.param(None, R(None, "R", restarts=2), ("podRunning", "containerRestarted"), False,
                 id="first-seen-after-restarts"),
])
def test_the_events_of_a_change(old: R | None, new: R, names: tuple[str, ...],
                                disrupted: bool) -> None:
    assert changes(old, new) == (names, disrupted)


@pytest.mark.parametrize("pod, digest, task, said", [
    (SimpleNamespace(name="p-1"), "d1", "w", "pod p-1"),
    (None, "d1", "w", "pod d1 (gone)"),
    (None, None, "w", "task w"),
    (None, None, None, "job"),
])
def test_what_an_occurrence_is_about(pod: Any, digest: str | None, task: str | None,
                                     said: str) -> None:
    assert label(Occurrence(("podFailed",), pod, digest, task)) == said
