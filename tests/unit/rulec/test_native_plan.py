"""`rulec compile` writes `rulec native`'s decisions into the plan (docs/plan.md, `native`), and
runtime.plan loads them strictly: the controller acts on them (docs/controller.md, shadow mode)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from rulec import api, native
from runtime import plan

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "pod-failure-policy"


def compiled(path: Path) -> dict[str, Any]:
    built = api.build([str(path)])
    assert built.plan is not None
    return built.plan


@pytest.mark.parametrize("suite", sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
def test_the_plan_carries_what_rulec_native_decides(suite: str) -> None:
    source = compiled(EXAMPLES / suite)
    [kind] = source["kinds"]
    report = native.decide_kind(kind, source["injections"])
    assert kind["native"]["fragment"] == report.fragment()
    assert kind["native"]["policies"] == {
        d.policy: {"default": True} if d.default else {"rule": d.rule}
        for d in report.decisions if d.native}
    loaded = plan.load(source).kinds[0].native
    assert loaded is not None and loaded.fragment == report.fragment()
    assert loaded.policies == {d.policy: None if d.default else d.rule
                               for d in report.decisions if d.native}


def test_no_native_policy_no_section(tmp_path: Path) -> None:
    rules = tmp_path / "r.rules"
    rules.write_text('job j: batch/v1 Job {\n    failed when any pod failed\n'
                     '    on pod failed -> restart pod\n}\n')
    [kind] = compiled(rules)["kinds"]
    assert "native" not in kind
    shipped = compiled(ROOT / "rules")
    assert all("native" not in k for k in shipped["kinds"])


def _broken(change: Any) -> dict[str, Any]:
    source = copy.deepcopy(compiled(EXAMPLES / "exit-codes"))
    change(source["kinds"][0])
    return source


@pytest.mark.parametrize("change, said", [
    (lambda k: k.update(kind="Pod", apiVersion="v1"), "only a batch/v1 Job"),
    (lambda k: k["native"]["fragment"].update(completions=1), "'completions' is not one of"),
    (lambda k: k["native"]["fragment"].update(backoffLimit=-1), "negative"),
    (lambda k: k["native"]["fragment"]["podFailurePolicy"]["rules"][0].update(action="Restart"),
     "'Restart' is not one of"),
    (lambda k: k["native"]["policies"].update(nope={"rule": 0}), "no such policy"),
    (lambda k: k["native"]["policies"].update({"rule-0": {"rule": 2}}), "neither"),
    (lambda k: k["native"]["policies"].update({"rule-0": {"default": False}}), "neither"),
    (lambda k: k["native"].update(policies=[]), "native.policies"),
])
def test_the_loader_refuses_a_wrong_section(change: Any, said: str) -> None:
    with pytest.raises(plan.PlanError, match=said):
        plan.load(_broken(change))


SIDECAR = """
inject "side" into pods of {kind} {{
    sidecar "agent" {{
        image "example.com/agent:1"
    }}
}}
"""


def with_sidecar(tmp_path: Path) -> dict[str, Any]:
    """The plan of the exit-codes example with an injection that adds a sidecar."""
    injected = tmp_path / "inject.rules"
    injected.write_text(SIDECAR.format(kind=compiled(EXAMPLES / "exit-codes")["kinds"][0]["name"]))
    built = api.build([str(EXAMPLES / "exit-codes"), str(injected)])
    assert built.plan is not None
    return built.plan


def test_a_sidecar_an_injection_adds_keeps_exit_code_policies_with_the_engine(tmp_path: Path) -> None:
    """The Job controller reads every container's exit code, the rules only theirs (N113): with
    the injections' sidecar in the pods, no exit-code policy goes native."""
    assert compiled(EXAMPLES / "exit-codes")["kinds"][0]["native"]["policies"]
    assert "native" not in with_sidecar(tmp_path)["kinds"][0]


def test_the_plan_names_the_injections_the_api_server_can_do(tmp_path: Path) -> None:
    """`nativeInjections`: each injection a MutatingAdmissionPolicy can do, with its policies
    (rulec/native_admission.py decides); none without injections."""
    from rulec import native_admission

    assert "nativeInjections" not in compiled(EXAMPLES / "exit-codes")
    injected = with_sidecar(tmp_path)
    decided = {d.injection: list(d.policies)
               for d in native_admission.decide(plan.load(injected)) if d.native}
    assert injected["nativeInjections"] == decided == {"side": ["jobrules-side"]}
    assert plan.load(injected).native_injections == {"side": ("jobrules-side",)}
