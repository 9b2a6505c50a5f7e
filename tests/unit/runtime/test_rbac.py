"""runtime.rbac: the controller's permissions derived from a plan, each rule traced to the rules
that need it. The shipped rules' ClusterRole is held whole; small plans hold each rule of the
derivation (which step, status block or switch adds which verb, and which takes it away)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulec import api, emit
from rulec.source import SourceFile
from runtime import plan as planlib
from runtime import rbac

ROOT = Path(__file__).resolve().parents[3]
RULES_PLAN = ROOT / "tests" / "golden" / "plans" / "rules.json"   # the plan of rules/


def compiled(text: str, path: str = "j.rules") -> planlib.Plan:
    built = api.build_sources([SourceFile.from_text(path, text)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    return planlib.loads(emit.dumps(built.plan))


def titles(plan: planlib.Plan) -> list[str]:
    return [r.title for r in rbac.controller_rules(plan)]


def table(plan: planlib.Plan) -> dict[str, list[str]]:
    """Each rule's title and what needs it."""
    return {r.title: r.reasons() for r in rbac.controller_rules(plan)}


# ---------------------------------------------------------------------------------------------
# The shipped rules

SHIPPED = [
    "pods list,watch",
    "workflows.argoproj.io get,list,watch,patch",
    "jobs.batch get,list,watch,patch",
    "jobs.batch/status patch",
    "jobs.batch.volcano.sh get,list,watch,patch",
    "jobs.batch.volcano.sh/status patch",
    "events.events.k8s.io get,create,patch",
    "jobsets.jobset.x-k8s.io get,list,watch,patch",
    "jobsets.jobset.x-k8s.io/status patch",
    "mpijobs.kubeflow.org get,list,watch,patch",
    "mpijobs.kubeflow.org/status patch",
    "pytorchjobs.kubeflow.org get,list,watch,patch",
    "pytorchjobs.kubeflow.org/status patch",
    "tfjobs.kubeflow.org get,list,watch,patch",
    "tfjobs.kubeflow.org/status patch",
    "pipelineruns.tekton.dev get,list,watch,patch",
]


@pytest.fixture(scope="module")
def shipped() -> planlib.Plan:
    return planlib.load_file(RULES_PLAN)


def test_the_shipped_rules_need_exactly_these(shipped: planlib.Plan) -> None:
    """No policy in rules/ takes an action, so no pod is deleted and no object created: the
    recipes in their `actions` blocks grant nothing until a policy uses them. Argo and Tekton
    write no condition and no status field: no /status."""
    assert titles(shipped) == SHIPPED


def test_every_need_of_the_shipped_rules_points_at_the_line_that_needs_it(shipped: planlib.Plan) -> None:
    for rule in rbac.controller_rules(shipped):
        assert rule.needs
        for need, _ in rule.needs:
            assert need.span is not None
            line = (ROOT / need.span.path).read_text().splitlines()[need.span.line - 1]
            text = line[need.span.column - 1:]
            expected = "status {" if "status fields" in need.what else "job "
            assert text.startswith(expected), (str(need), line)


def test_the_shipped_kinds_each_have_their_watch_and_pods(shipped: planlib.Plan) -> None:
    rules = {(r.group, r.resource): r for r in rbac.controller_rules(shipped)}
    for kind in shipped.kinds:
        assert rules[kind.group, kind.plural].verbs == ("get", "list", "watch", "patch")
        assert any(n.span == kind.span for n, _ in rules["", "pods"].needs)
        assert ((kind.group, f"{kind.plural}/status") in rules) == (
            kind.status.condition is not None or kind.status.phase is not None)


# ---------------------------------------------------------------------------------------------
# Small plans: what each part of a kind adds

HEAD = """job trainer: example.com/v1 Trainer {
    pods label "example.com/job" = <<metadata.name>>
    task label "example.com/task"
    failed     when any pod failed
    running    when any pod running
    pending    otherwise
"""
BASE = {
    "pods list,watch": ["j.rules:1:1: job trainer: its pods watched"],
    "events.events.k8s.io get,create,patch": ["j.rules:1:1: job trainer: Events"],
    "trainers.example.com get,list,watch,patch": [
        "j.rules:1:1: job trainer: its jobs watched, their state annotation written"],
    "trainers.example.com/status patch": ["j.rules:1:1: job trainer: condition JobRulesVerdict"],
}


def kind_table(body: str) -> dict[str, list[str]]:
    return table(compiled(HEAD + body + "}\n"))


def deleting(why: str) -> dict[str, list[str] | None]:
    """The pods rule once a recipe deletes pods: one rule, each need with its verbs."""
    return {"pods list,watch": None, "pods list,watch,delete": [
        "list,watch: j.rules:1:1: job trainer: its pods watched", f"delete: {why}"]}


def changed(changes: dict[str, list[str] | None]) -> dict[str, list[str]]:
    """BASE with `changes` (None: that rule gone)."""
    return {k: v for k, v in {**BASE, **changes}.items() if v is not None}


def test_a_kind_without_policies_or_status_block() -> None:
    assert kind_table("") == BASE


@pytest.mark.parametrize("body, changes", [
    # The default recipes of the restarts delete pods; cited at the policy.
    ("    on pod evicted -> restart pod max 3\n",
     deleting("j.rules:7:5: job trainer: restart pod (delete the pod)")),
    ("    on pod failed -> restart task\n",
     deleting("j.rules:7:5: job trainer: restart task (delete the task's pods)")),
    ("    on pod failed -> restart job\n",
     deleting("j.rules:7:5: job trainer: restart job (delete the job's pods)")),
    # A fallback's recipe counts too.
    ("    on pod evicted -> count max 2 then restart pod\n",
     deleting("j.rules:7:5: job trainer: restart pod (delete the pod)")),
    # Actions with no effect, and recorded ones, send nothing.
    ("    on pod failed -> ignore\n", {}),
    ("    on pod failed -> count max 3 then fail job\n", {}),
    ("    on pod failed -> fail job\n    on task \"a\" completed -> complete job\n", {}),
    # Declared recipes, cited at the step, with the policy that takes them.
    ("    on pod evicted -> restart pod\n    actions {\n        restart pod -> delete pod by eviction\n    }\n",
     {"pods/eviction create": ["j.rules:9:24: job trainer: restart pod (evict the pod), taken at j.rules:7:5"]}),
    ("    on pod failed -> fail job\n    actions {\n        fail job -> condition \"FailureTarget\"\n    }\n",
     {"trainers.example.com/status patch": [
         "j.rules:1:1: job trainer: condition JobRulesVerdict",
         "j.rules:9:21: job trainer: fail job (condition FailureTarget), taken at j.rules:7:5"]}),
    ("    on pod failed -> abort job\n    actions {\n        abort job -> set spec.suspend = true\n    }\n",
     {"trainers.example.com get,list,watch,patch": [
         "j.rules:1:1: job trainer: its jobs watched, their state annotation written",
         "patch: j.rules:9:22: job trainer: abort job (set spec.suspend), taken at j.rules:7:5"]}),
    ("    on pod failed -> fail job\n    actions {\n        fail job -> set status.phase = \"Failed\"\n    }\n",
     {"trainers.example.com get,list,watch,patch": [
         "j.rules:1:1: job trainer: its jobs watched, their state annotation written",
         "patch: j.rules:9:21: job trainer: fail job (set status.phase), taken at j.rules:7:5"],
      "trainers.example.com/status patch": [
         "j.rules:1:1: job trainer: condition JobRulesVerdict",
         "j.rules:9:21: job trainer: fail job (set status.phase), taken at j.rules:7:5"]}),
    ("    on pod failed -> restart job\n    actions {\n"
     "        restart job -> create bus.volcano.sh/v1alpha1 Command { action: \"RestartJob\", target: job },\n"
     "                       await no pod running within 1m\n    }\n",
     {"commands.bus.volcano.sh create": [
         "j.rules:9:24: job trainer: restart job (create bus.volcano.sh/v1alpha1 Command), taken at j.rules:7:5"]}),
    # A recipe no policy takes grants nothing.
    ("    actions {\n        restart job -> create bus.volcano.sh/v1alpha1 Command { action: \"RestartJob\", target: job }\n"
     "        fail job -> set status.phase = \"Failed\"\n    }\n", {}),
    # A policy in audit takes no action: a plan in audit cannot delete, evict or create.
    ("    audit on pod evicted -> restart pod max 3 then restart job\n", {}),
    ("    mode audit\n    on pod evicted -> restart pod max 3\n", {}),
    # ... and in audit with `annotation only`, its status is never written either.
    ("    mode audit annotation only\n    on pod evicted -> restart pod max 3\n",
     {"trainers.example.com/status patch": None}),
    # An `unsupported` recipe is an error when taken (R409), so it is never taken.
    ("    actions {\n        abort job -> unsupported\n    }\n", {}),
])
def test_what_an_action_adds(body: str, changes: dict[str, list[str] | None]) -> None:
    assert kind_table(body) == changed(changes)


@pytest.mark.parametrize("status, changes", [
    ("no condition", {"trainers.example.com/status patch": None}),
    # The condition is the status block's once there is one.
    ("no events", {"events.events.k8s.io get,create,patch": None,
                   "trainers.example.com/status patch": ["j.rules:7:5: job trainer: condition JobRulesVerdict"]}),
    # The state annotation is still written: patch stays.
    ("no annotations",
     {"trainers.example.com/status patch": ["j.rules:7:5: job trainer: condition JobRulesVerdict"]}),
    ("condition \"Verdict\"", {"trainers.example.com/status patch": ["j.rules:7:5: job trainer: condition Verdict"]}),
    ("no condition\n        message at status.note",
     {"trainers.example.com/status patch": ["j.rules:7:5: job trainer: status fields status.note"]}),
    ("phase at status.state.phase only [failed]\n        reason at status.state.reason",
     {"trainers.example.com/status patch": [
         "j.rules:7:5: job trainer: condition JobRulesVerdict",
         "j.rules:7:5: job trainer: status fields status.state.phase, status.state.reason"]}),
    ("no condition\n        no events", {"trainers.example.com/status patch": None,
                                         "events.events.k8s.io get,create,patch": None}),
])
def test_what_a_status_block_adds_or_takes_away(status: str, changes: dict[str, list[str] | None]) -> None:
    assert kind_table(f"    status {{\n        {status}\n    }}\n") == changed(changes)


def test_kinds_sharing_a_resource_share_its_rules() -> None:
    """Two kinds of one resource (two versions of it): one rule, both cited."""
    text = "".join(f"""job {name}: example.com/{name} Trainer {{
    pods owned
    failed     when any pod failed
    pending    otherwise
{policy}}}
""" for name, policy in (("v1", ""), ("v2", "    on pod evicted -> restart pod\n")))
    rules = table(compiled(text))
    assert rules["trainers.example.com get,list,watch,patch"] == [
        "j.rules:1:1: job v1: its jobs watched, their state annotation written",
        "j.rules:6:1: job v2: its jobs watched, their state annotation written"]
    assert rules["pods list,watch,delete"] == [
        "list,watch: j.rules:1:1: job v1: its pods watched",
        "list,watch: j.rules:6:1: job v2: its pods watched",
        "delete: j.rules:10:5: job v2: restart pod (delete the pod)"]


def test_rules_are_sorted_core_group_first_and_verbs_in_order() -> None:
    rules = rbac.controller_rules(compiled(HEAD + "    on pod evicted -> restart pod\n}\n"))
    keys = [(r.group, r.resource) for r in rules]
    assert keys == sorted(keys) and keys[0] == ("", "pods")
    for rule in rules:
        assert list(rule.verbs) == [v for v in rbac.VERBS if v in rule.verbs]


def test_a_plan_without_kinds_needs_nothing() -> None:
    empty = planlib.loads(emit.dumps(api.build_sources([SourceFile.from_text("e.rules", "")]).plan))
    assert rbac.controller_rules(empty) == ()


# ---------------------------------------------------------------------------------------------
# Rules not from the plan, and how rules are written


def test_leader_election_is_by_name_but_for_create() -> None:
    create, named = rbac.leader_election("infra", "jobrules-controller")
    assert create.policy_rule() == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                    "verbs": ["create"]}
    assert named.policy_rule() == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                   "resourceNames": ["jobrules-controller"],
                                   "verbs": ["get", "update", "patch"]}
    assert named.reasons() == ["leader election on the Lease infra/jobrules-controller"]


def test_the_certificate_rules_are_by_name_only() -> None:
    [secret] = rbac.serving_secret("infra", "tls")
    [configuration] = rbac.webhook_configuration("0-jobrules")
    assert secret.policy_rule() == {"apiGroups": [""], "resources": ["secrets"],
                                    "resourceNames": ["tls"], "verbs": ["get", "patch"]}
    assert configuration.policy_rule() == {
        "apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
        "resourceNames": ["0-jobrules"], "verbs": ["get", "patch"]}


def test_explain_lists_every_rule_and_its_needs() -> None:
    plan = compiled(HEAD + "    on pod evicted -> restart pod\n}\n")
    rules = rbac.controller_rules(plan)
    text = rbac.explain(rules)
    assert text.splitlines()[:4] == ["rules[0] pods list,watch,delete",
                                     "  list,watch: j.rules:1:1: job trainer: its pods watched",
                                     "  delete: j.rules:7:5: job trainer: restart pod (delete the pod)",
                                     "rules[1] events.events.k8s.io get,create,patch"]
    assert text.count("\nrules[") + 1 == len(rules)


@pytest.mark.parametrize("api_version, group", [("v1", ""), ("batch/v1", "batch"),
                                                ("bus.volcano.sh/v1alpha1", "bus.volcano.sh")])
def test_group_of(api_version: str, group: str) -> None:
    assert rbac.group_of(api_version) == group
