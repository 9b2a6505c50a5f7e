"""runtime.controller.main: the plan the process runs, as read from its file and its settings
(no control plane: the process is built, never run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulec import api as rulec_api
from rulec import emit
from runtime import plan
from runtime.controller import main, settings
from tests.unit.runtime.controller.fakeapi import FakeApi

RULES = """
job trainer: example.dev/v1 Trainer {
    pods owned
    failed  when any pod failed
    pending otherwise
    on pod evicted -> restart pod max 2 as "evictions"
}
"""


def controller(tmp_path: Path, audit: tuple[str, ...]) -> main.Controller:
    built = rulec_api.build_sources([rulec_api.SourceFile.from_text("t.rules", RULES)])
    path = tmp_path / "plan.json"
    path.write_text(emit.dumps(built.plan))
    return main.Controller(settings.ControllerSettings(str(path), audit=audit),
                           FakeApi())  # type: ignore[arg-type]


def test_the_plan_read_has_the_policies_jobrules_audit_names_in_audit(tmp_path: Path) -> None:
    [kind] = controller(tmp_path, ("trainer/evictions",))._load_plan().kinds
    assert [p.audit for p in kind.policies] == [True]
    [kind] = controller(tmp_path, ())._load_plan().kinds
    assert [p.audit for p in kind.policies] == [False]


def test_a_jobrules_audit_entry_that_names_nothing_refuses_the_plan(tmp_path: Path) -> None:
    """A typo would leave acting the policy its operator meant only to watch."""
    with pytest.raises(plan.PlanError, match="JOBRULES_AUDIT names no kind or policy of the "
                                             "plan: trainer/eviction"):
        controller(tmp_path, ("trainer/eviction",))._load_plan()
