"""Injections as MutatingAdmissionPolicies (rulec/native_admission.py): which go native, each
webhook-only code on a case that trips it, and what every policy is guarded by. That the
policies make the webhook's pod is proven on the API server (tests/integration/
test_native_admission.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rulec import api, diagnostics, native_admission
from rulec.commands import cli
from rulec.source import SourceFile
from runtime import mutator, registration
from runtime import plan as planlib

ROOT = Path(__file__).resolve().parents[3]
KIND = """job w: argoproj.io/v1alpha1 Workflow {
    pods owned
    primary container "main"
    task label "role"
    succeeded when all pods succeeded
}
"""


def plan_of(text: str) -> planlib.Plan:
    built = api.build_sources([SourceFile.from_text("w.rules", text)])
    assert built.plan is not None, [str(d) for d in built.errors]
    return planlib.load(json.loads(json.dumps(built.plan)))


def decide(injection: str, kind: str = KIND) -> native_admission.InjectionDecision:
    [found] = native_admission.decide(plan_of(kind + injection))
    return found


WEBHOOK_ONLY = [
    ("N117", 'inject "i" into pods of w where where <<pod.spec.nodeName>> { annotate "a" = "b" }', KIND),
    ("N117", 'inject "i" into pods of w { annotate "a" = <<owner.spec.x>> }', KIND),
    ("N117", 'inject "i" into pods of w where task "t" { annotate "a" = "b" }',
     KIND.replace('task label "role"', "task <<metadata.labels.role>>")),
    ("N117", 'inject "i" into pods of w where primary { annotate "a" = "b" }',
     KIND.replace("pods owned", "pods owned\n    primary pods not exit 1")),
    ("N118", 'inject "i" into pods of w { wrap ["main"] with ["tini", "--"] }', KIND),
]


@pytest.mark.parametrize("code,injection,kind", WEBHOOK_ONLY,
                         ids=[f"{c}-{n}" for n, (c, _, _) in enumerate(WEBHOOK_ONLY)])
def test_webhook_only(code: str, injection: str, kind: str) -> None:
    found = decide(injection, kind)
    assert (found.native, found.code) == (False, code), found.to_json()
    assert found.reason and not found.objects


def test_every_webhook_only_code_has_a_case_and_explain_knows_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    codes = {c.code for c in diagnostics.NATIVE_CODES if "N117" <= c.code <= "N119"}
    assert {c for c, _, _ in WEBHOOK_ONLY} | {"N119"} == codes
    for code in codes:
        assert cli.main(["explain", code]) == 0
        assert capsys.readouterr().out.startswith(f"{code} ")


def test_what_cel_is_given_goes_native() -> None:
    found = decide('inject "i" into pods of w where label "trial" exists and task "t" '
                   'and namespace in ["ml"] and not annotation "skip" = "yes" {\n'
                   '    annotate "a" = "{job}/{namespace}/{kind}/{task}/{pod}"\n'
                   '    label "l" = <<owner.metadata.name>>\n'
                   '    env "E" = "{container}" in primary\n'
                   '    volume "v" empty dir\n'
                   '    mount volume "v" at "/v" in ["main"]\n'
                   '    sidecar "s" native { image "i" args [<<owner.metadata.uid>>] }\n'
                   '}\n')
    assert found.native and found.policies == ("jobrules-i",), found.to_json()
    policy, binding = found.objects
    assert binding["spec"] == {"policyName": "jobrules-i"}
    assert found.expressions == (len(policy["spec"]["matchConditions"]) + 1
                                 + len(policy["spec"]["mutations"]))


def test_the_record_is_the_webhooks_and_is_written_once() -> None:
    plan = plan_of(KIND + 'inject "i" into pods of w { annotate "a" = "b" }')
    [found] = native_admission.decide(plan)
    spec = found.objects[0]["spec"]
    [mutation] = spec["mutations"]   # one JSON patch: the cheapest for the API server
    entry = f"i@{mutator.inject.digest(plan.injections[0])}"
    patch = mutation["jsonPatch"]["expression"]
    assert json.dumps(json.dumps([entry])) in patch     # the webhook's own entry, compact JSON
    # not when the record names the injection already (by name, whatever the digest)
    assert '.contains("\\"i@")' in patch
    # once a pod: kube-apiserver 1.36.3 evaluates an `IfNeeded` policy that changed the pod twice
    assert spec["reinvocationPolicy"] == "Never"


def test_an_injection_into_several_kinds_is_one_policy_testing_the_owners_kind() -> None:
    # one policy: the API server converts the whole pod for every policy it offers a pod to
    found = decide('inject "i" into pods of w, v { annotate "a" = "b" }',
                   KIND + KIND.replace("job w: argoproj.io/v1alpha1 Workflow",
                                       "job v: example.dev/v1 Thing"))
    assert found.policies == ("jobrules-i",)
    [policy] = [p for p in found.objects if p["kind"] == native_admission.POLICY_KIND]
    [owned] = policy["spec"]["matchConditions"]
    assert owned["name"] == "owned-by-a-declared-kind"
    assert '"Workflow"' in owned["expression"] and '"Thing"' in owned["expression"]
    # the same patch for both kinds: one, not a patch per kind
    [mutation] = policy["spec"]["mutations"]
    assert '"Workflow"' not in mutation["jsonPatch"]["expression"]


def test_kinds_that_read_differently_get_a_patch_each() -> None:
    # `{kind}` differs by kind: the patch is chosen by the owner's kind
    found = decide('inject "i" into pods of w, v { annotate "a" = "{kind}" }',
                   KIND + KIND.replace("job w: argoproj.io/v1alpha1 Workflow",
                                       "job v: example.dev/v1 Thing"))
    [policy] = [p for p in found.objects if p["kind"] == native_admission.POLICY_KIND]
    [mutation] = policy["spec"]["mutations"]
    patch = mutation["jsonPatch"]["expression"]
    assert patch.index('r.kind == "Workflow"') < patch.index('value: "Workflow"') \
        < patch.index('r.kind == "Thing"') < patch.index('value: "Thing"')


def test_the_example_injections_all_go_native() -> None:
    for example in ("argo-wait-main", "injected-sidecar", "katib-metrics-collector"):
        built = api.build([str(ROOT / "examples" / example)])
        assert built.plan is not None
        for found in native_admission.decide(planlib.load(json.loads(json.dumps(built.plan)))):
            assert found.native, found.to_json()


def test_a_job_kind_with_a_native_fragment_gets_a_policy_adding_it() -> None:
    built = api.build([str(ROOT / "examples/pod-failure-policy/exit-codes")])
    assert built.plan is not None
    plan = planlib.load(json.loads(json.dumps(built.plan)))
    policy, binding = native_admission.job_policies(plan)
    spec = policy["spec"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["jobs"]
    assert [c["name"] for c in spec["matchConditions"]] == ["no-pod-failure-policy",
                                                            "restart-policy-never"]
    patch = spec["mutations"][0]["jsonPatch"]["expression"]
    assert '"/spec/podFailurePolicy"' in patch and "values: [5, 6, 7]" in patch
    assert '"/spec/backoffLimit"' not in patch   # `max <<spec.backoffLimit>>`: the Job's own


def test_per_index_handling_needs_an_indexed_job() -> None:
    built = api.build([str(ROOT / "examples/pod-failure-policy/fail-index")])
    assert built.plan is not None
    plan = planlib.load(json.loads(json.dumps(built.plan)))
    policy, _ = native_admission.job_policies(plan)
    assert "indexed" in [c["name"] for c in policy["spec"]["matchConditions"]]


def test_no_native_policy_no_job_policy() -> None:
    assert native_admission.job_policies(plan_of(KIND)) == ()


def test_the_plan_says_which_injections_went_native_and_the_registration_leaves_them_out() -> None:
    both = KIND + KIND.replace("job w: argoproj.io/v1alpha1 Workflow", "job v: example.dev/v1 Thing") + (
        'inject "native" into pods of w { annotate "a" = "b" }\n'
        'inject "wrapped" into pods of v { wrap ["main"] with ["tini", "--"] }\n')
    built = api.build_sources([SourceFile.from_text("w.rules", both)])
    assert built.plan is not None
    assert built.plan["nativeInjections"] == {"native": ["jobrules-native"]}
    plan = planlib.load(json.loads(json.dumps(built.plan)))
    assert plan.native_injections == {"native": ("jobrules-native",)}
    target = registration.Url("https://hook.example/mutate-pods")

    def owners(config: dict) -> str:
        return " ".join(c["expression"] for w in config["webhooks"] for c in w["matchConditions"])

    everything = owners(registration.render(plan, target))
    assert '"Workflow"' in everything.replace("'", '"') and "Thing" in everything
    left = owners(registration.render(plan, target, native=True))
    assert "Workflow" not in left and "Thing" in left


def test_with_every_injection_native_the_webhook_is_not_called_at_all() -> None:
    built = api.build([str(ROOT / "examples/katib-metrics-collector")])
    assert built.plan is not None
    plan = planlib.load(json.loads(json.dumps(built.plan)))
    target = registration.Url("https://hook.example/mutate-pods")
    assert registration.render(plan, target)["webhooks"]
    assert registration.render(plan, target, native=True)["webhooks"] == []


def test_rulec_native_reports_each_injection(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    examples = ["examples/katib-metrics-collector", "examples/argo-wait-main",
                "examples/injected-sidecar"]
    assert cli.main(["native", *examples]) == 0
    out = capsys.readouterr().out
    assert "```\n" + out + "```" in (ROOT / "docs" / "native.md").read_text(encoding="utf-8")
    assert cli.main(["native", str(ROOT / "examples/katib-metrics-collector")]) == 0
    out = capsys.readouterr().out
    # one policy for its two kinds (TFJob, PyTorchJob)
    assert "native: MutatingAdmissionPolicy jobrules-katib-metrics (3 CEL expressions)" in out
    assert "native: 1 of 1 injections (100%)" in out
    assert cli.main(["native", "--format", "json", str(ROOT / "examples/katib-metrics-collector")]) == 0
    [found] = json.loads(capsys.readouterr().out)["injections"]
    assert found["native"] and found["code"] is None and found["expressions"] > 0


def test_policy_names_are_dns_subdomains() -> None:
    assert native_admission.policy_name("w#0") == "jobrules-w-0"
    assert native_admission.policy_name("Katib_Metrics", "tfjob") == "jobrules-katib-metrics-tfjob"
