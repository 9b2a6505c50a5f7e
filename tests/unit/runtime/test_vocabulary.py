"""runtime.vocabulary: one spelling of every closed word, the same as docs/plan.md's."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import vocabulary

PLAN_MD = (Path(__file__).resolve().parents[3] / "docs" / "plan.md").read_text()


def documented(name: str) -> list[str]:
    """The quoted alternatives of `Name = "a" | "b" ...` in plan.md, continuation lines included."""
    found = re.search(rf"^{name}\s*=((?:.|\n\s+\|)*)", PLAN_MD, re.M)
    assert found, name
    return re.findall(r'"(\w+)"', found.group(1))


@pytest.mark.parametrize("name, words", [
    ("Phase", vocabulary.PHASES),
    ("PodState", vocabulary.POD_STATES),
    ("TaskState", vocabulary.TASK_STATES),
    ("Event", tuple(vocabulary.EVENTS)),
    ("ActionName", tuple(vocabulary.ACTIONS)),
])
def test_plan_md_lists_the_same_words(name: str, words: tuple[str, ...]) -> None:
    assert documented(name) == list(words)


def test_event_groups_partition_the_events() -> None:
    groups = (vocabulary.POD_EVENTS, vocabulary.TASK_EVENTS, vocabulary.JOB_EVENTS)
    assert sum(len(g) for g in groups) == len(vocabulary.EVENTS)
    assert set().union(*groups) == set(vocabulary.EVENTS)


def test_the_subsets_are_of_their_words() -> None:
    assert vocabulary.TERMINAL_PHASES < set(vocabulary.PHASES)
    assert vocabulary.FAILURE_STATES < set(vocabulary.POD_STATES)
    assert vocabulary.FAILURE_EVENTS < vocabulary.POD_EVENTS | vocabulary.TASK_EVENTS


def test_it_imports_nothing() -> None:
    script = ("import sys; before = set(sys.modules); import runtime.vocabulary; "
              "print(sorted(set(sys.modules) - before - {'runtime', 'runtime.vocabulary'}))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
