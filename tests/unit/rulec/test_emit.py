"""Compilation: determinism, the plan shapes of docs/plan.md, and loading by the runtime."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rulec import api, emit
from rulec.source import SourceFile
from runtime import plan as runtime_plan

ROOT = Path(__file__).resolve().parents[3]


def _plan(text: str) -> dict:
    build = api.build_sources([SourceFile.from_text("t.rules", text)])
    assert build.plan is not None, [d.message for d in build.diagnostics]
    return build.plan


def _kind(text: str) -> dict:
    return _plan(text)["kinds"][0]


def test_same_files_any_order_give_identical_bytes(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for f in (ROOT / "rules").glob("*.rules"):
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.chdir(tmp_path)
    names = sorted(p.name for p in tmp_path.glob("*.rules"))
    forward = emit.dumps(api.build(names).plan)  # type: ignore[arg-type]
    backward = emit.dumps(api.build(list(reversed(names))).plan)  # type: ignore[arg-type]
    folder = emit.dumps(api.build(["."]).plan)  # type: ignore[arg-type]
    assert forward == backward == folder
    assert forward.endswith("}\n") and json.loads(forward)["planVersion"] == 1


def test_shipped_rules_compile_and_load_in_the_runtime() -> None:
    build = api.build([str(ROOT / "rules")])
    assert build.plan is not None and not build.errors
    loaded = runtime_plan.loads(emit.dumps(build.plan))
    assert {k.name for k in loaded.kinds} >= {"batchjob", "vcjob", "tfjob"}


def test_kind_defaults() -> None:
    kind = _kind("job p: kubeflow.org/v1 PyTorchJob { succeeded when all pods succeeded }")
    assert (kind["group"], kind["version"], kind["apiVersion"]) == (
        "kubeflow.org", "v1", "kubeflow.org/v1")
    assert kind["plural"] == "pytorchjobs"
    assert kind["pods"] == {"owned": True, "labels": {}}
    assert kind["task"] is None and kind["primaryPods"] is None
    assert kind["status"] == {"phase": None, "reason": None, "message": None,
                              "condition": "JobRulesVerdict", "annotations": True, "events": True}


@pytest.mark.parametrize("kind,plural", [("Job", "jobs"), ("Policy", "policies"),
                                         ("Gateway", "gateways"), ("Ingress", "ingresses"),
                                         ("Box", "boxes"), ("Quiz", "quizes"), ("Batch", "batches"),
                                         ("Mesh", "meshes"), ("Key", "keys"), ("Y", "ys"),
                                         ("Toy", "toys"), ("Guy", "guys"), ("Ray", "rays"),
                                         ("Bey", "beys"), ("Boy", "boys"), ("Buy", "buys"),
                                         ("Xy", "xies"), ("Proxy", "proxies")])
def test_plural(kind: str, plural: str) -> None:
    assert emit.plural(kind) == plural


def test_core_group() -> None:
    kind = _kind("job pod: v1 Pod { succeeded when all pods succeeded }")
    assert (kind["group"], kind["version"]) == ("", "v1")


def test_verdicts_and_templates() -> None:
    kind = _kind('''job j: batch/v1 Job {
        task label "role"
        failed when count pods of task "w" failed with exit in [1, 128..255] >= 2
               reason "Failed{{x}}"
               message "pod {pod}: {<<status.x>>}"
        succeeded when all pods succeeded
        pending otherwise
    }''')
    failed, succeeded, pending = kind["verdicts"]
    assert failed["when"]["op"] == "count" and failed["when"]["task"] == "w"
    assert failed["when"]["filter"] == {"op": "exitCode", "codes": [1], "ranges": [[128, 255]],
                                        "negate": False, "container": None}
    assert failed["when"]["value"][0]["expr"] == "`2`"
    assert failed["reason"] == ["Failed{x}"]
    assert failed["message"][0:2] == ["pod ", {"var": "pod"}]
    assert failed["message"][3]["expr"] == "status.x"
    assert succeeded["when"] == {"op": "pods", "quant": "all", "task": None,
                                 "state": "succeeded", "filter": None, "for": None}
    assert pending["when"] is None and pending["phase"] == "Pending"


def test_container_scope_and_defines_are_inlined() -> None:
    kind = _kind('''define oom = reason "OOMKilled"
    job j: batch/v1 Job {
        failed when any pod failed with (container "main" and exit 137)
        succeeded when any pod failed is oom
    }''')
    assert kind["verdicts"][0]["when"]["filter"]["container"] == "main"
    assert kind["verdicts"][1]["when"]["filter"] == {
        "op": "containerReason", "values": ["OOMKilled"], "negate": False, "container": None}


def test_policy_ids_budgets_and_fallbacks() -> None:
    kind = _kind('''job j: batch/v1 Job {
        task label "role"
        succeeded when all pods succeeded
        on pod failed exit 1 -> restart pod max 2 per task then restart job max 1 then fail job
        on pod failed -> restart job max 3 budget "shared" after 30s
        on pod evicted -> ignore as "evictions"
        on job verdict changed to failed -> ignore
    }''')
    first, second, third, fourth = kind["policies"]
    assert [p["id"] for p in kind["policies"]] == [
        "podFailed#0", "podFailed#1", "evictions", "jobVerdictChanged#0"]
    assert first["action"]["budget"] == {"max": 2, "per": "task", "key": "podFailed#0"}
    assert first["action"]["fallback"]["budget"]["key"] == "podFailed#0/then"
    assert first["action"]["fallback"]["fallback"]["action"] == "failJob"
    assert second["action"]["budget"]["key"] == "shared" and second["action"]["delay"] == 30
    assert third["action"]["budget"] is None
    assert fourth["to"] == "Failed"


def test_injection_shape() -> None:
    plan = _plan('''job j: batch/v1 Job { succeeded when all pods succeeded }
    inject into pods of j where annotation "a" != "b" or namespace not in ["x"] {
        env "A" = "{pod}" in ["main"]
        volume "v" config map "cm"
        mount volume "v" at "/v" read only
        wrap all with ["/bin/run", "--"]
    }''')
    [inj] = plan["injections"]
    assert inj["name"] == "t#0" and inj["kinds"] == ["j"]
    assert inj["match"]["args"][0] == {"op": "annotation", "key": "a", "values": ["b"],
                                       "negate": True}
    env, volume, mount, wrap = inj["ops"]
    assert env["containers"] == {"select": "named", "names": ["main"]}
    assert volume["source"] == {"configMap": {"name": "cm"}}
    assert mount["readOnly"] is True and mount["containers"]["select"] == "primary"
    assert wrap["argv"] == [["/bin/run"], ["--"]] and wrap["shell"] is None
    assert plan["webhook"] == {"failurePolicy": "Ignore", "timeoutSeconds": 5}


def test_emitter_defaults_docs_plan_records() -> None:
    plan = _plan('''job j: batch/v1 Job {
        pods label "app" = <<metadata.name>>
        failed when count pods failed >= 2
        succeeded when all pods succeeded
        on pod failed -> restart pod max 2 budget "shared" then restart job max 1
    }
    inject "named" into pods of j { annotate "a" = "1" }
    inject into pods of j { annotate "b" = "1" }''')
    [kind] = plan["kinds"]
    assert kind["pods"]["owned"] is False  # a `pods label` alone: `pods owned` is not assumed
    [value] = kind["verdicts"][0]["when"]["value"]
    assert value["expr"] == "`2`" and value["span"]["column"] == 42
    action = kind["policies"][0]["action"]
    assert action["budget"]["key"] == "shared"
    assert action["fallback"]["budget"]["key"] == "podFailed#0/then"  # the id, not the budget
    assert [i["name"] for i in plan["injections"]] == ["named", "t#1"]


def test_the_runtime_rejects_duplicate_injection_names() -> None:
    data = _plan('''job j: batch/v1 Job { succeeded when all pods succeeded }
    inject into pods of j { annotate "a" = "1" }''')
    data["injections"] *= 2
    with pytest.raises(runtime_plan.PlanError, match="t#0: the name is used twice"):
        runtime_plan.load(data)


def test_status_phase_only() -> None:
    kind = _kind('''job v: batch.volcano.sh/v1alpha1 Job {
        succeeded when all pods succeeded
        status { phase at status.state.phase only [failed, SUCCEEDED] map { Failed: "Failed" } }
    }''')
    assert kind["status"]["phase"] == {"path": ["status", "state", "phase"],
                                       "map": {"Failed": "Failed"},
                                       "only": ["Failed", "Succeeded"], "over": None}
    loaded = runtime_plan.load(_plan('''job v: batch.volcano.sh/v1alpha1 Job {
        succeeded when all pods succeeded
        status { phase at status.state.phase only [failed] }
    }'''))
    assert loaded.kinds[0].status.phase.only == frozenset({"Failed"})
    every = _kind('''job v: batch.volcano.sh/v1alpha1 Job {
        succeeded when all pods succeeded
        status { phase at status.state.phase reason at status.state.reason }
    }''')
    assert every["status"]["phase"]["only"] is None


def test_status_phase_over() -> None:
    kind = _kind('''job v: batch.volcano.sh/v1alpha1 Job {
        succeeded when all pods succeeded
        status { phase at status.state.phase only [failed] over ["Completed", "Running"] }
    }''')
    assert kind["status"]["phase"]["over"] == ["Completed", "Running"]
    loaded = runtime_plan.load(_plan('''job v: batch.volcano.sh/v1alpha1 Job {
        succeeded when all pods succeeded
        status { phase at status.state.phase over ["Completed"] }
    }'''))
    assert loaded.kinds[0].status.phase.over == frozenset({"Completed"})


@pytest.mark.parametrize("only,error", [
    (None, None), (["Failed"], None), (["Completed"], "phase.only: 'Completed' is not one of"),
    ("Failed", "phase.only: expected a list"),
])
def test_the_runtime_validates_status_phase_only(only: Any, error: str | None) -> None:
    data = _plan('''job v: batch.volcano.sh/v1alpha1 Job {
        succeeded when all pods succeeded
        status { phase at status.state.phase }
    }''')
    data["kinds"][0]["status"]["phase"]["only"] = only
    if error is None:
        phase = runtime_plan.load(data).kinds[0].status.phase
        assert phase.only == (None if only is None else frozenset(only))
    else:
        with pytest.raises(runtime_plan.PlanError, match=error):
            runtime_plan.load(data)


def test_errors_give_no_plan() -> None:
    build = api.build_sources([SourceFile.from_text("t.rules", "job j: v1 Pod { on pod faild -> ignore }")])
    assert build.plan is None and build.errors


# -- kinds that fit real clusters ---------------------------------------------------------------

SCOPED = """
job mljob: batch/v1, v2 Job where label "team" = "ml" and label "tier" in ["b", "a"]
        and label "gpu" and not label "legacy" and label "env" != "dev"
        and namespace in ["ml", "research"] and namespace in ["ml", "other"] {
    primary containers prefix "step-"
    final until <<status.retryCount>> changes
    succeeded when all pods succeeded
}
"""


def test_versions_scope_final_and_prefix_in_the_plan() -> None:
    k = _kind(SCOPED)
    assert (k["version"], k["versions"], k["apiVersion"]) == ("v1", ["v1", "v2"], "batch/v1")
    assert k["selector"] == [
        {"key": "team", "operator": "In", "values": ["ml"]},
        {"key": "tier", "operator": "In", "values": ["a", "b"]},
        {"key": "gpu", "operator": "Exists", "values": []},
        {"key": "legacy", "operator": "DoesNotExist", "values": []},
        {"key": "env", "operator": "NotIn", "values": ["dev"]}]
    assert k["namespaces"] == ["ml"]    # every namespace term holds
    assert k["final"]["sticky"] and k["final"]["until"]["expr"] == "status.retryCount"
    assert k["primaryContainerPrefix"] == "step-"
    loaded = runtime_plan.load(_plan(SCOPED)).kinds[0]
    assert loaded.selector == "team=ml,tier in (a,b),gpu,!legacy,env!=dev"
    assert loaded.api_versions() == ("batch/v1", "batch/v2")


def test_plan_kind_for_finds_every_served_version() -> None:
    plan = runtime_plan.load(_plan(SCOPED))
    assert plan.kind_for("batch/v2", "Job") is plan.kind_for("batch/v1", "Job") is plan.kinds[0]
    assert plan.kind_for("batch/v3", "Job") is None


@pytest.mark.parametrize("meta, covered", [
    ({"namespace": "ml", "labels": {"team": "ml", "tier": "a", "gpu": ""}}, True),
    ({"namespace": "ml", "labels": {"team": "ml", "tier": "a", "gpu": "", "env": "dev"}}, False),
    ({"namespace": "ml", "labels": {"team": "ml", "tier": "a", "gpu": "", "legacy": "1"}}, False),
    ({"namespace": "ml", "labels": {"team": "ml", "tier": "c", "gpu": ""}}, False),
    ({"namespace": "research", "labels": {"team": "ml", "tier": "a", "gpu": ""}}, False),
])
def test_a_kind_covers_the_jobs_of_its_scope(meta: dict, covered: bool) -> None:
    from runtime import evaluator

    plan = runtime_plan.load(_plan(SCOPED))
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", **meta}}
    assert plan.kinds[0].covers(job) == covered
    if not covered:
        with pytest.raises(evaluator.UnknownKind, match="outside the scope of kind mljob"):
            evaluator.kind_for(plan, job)


def test_extend_adds_policies_after_the_kinds_own_with_ids_counting_on() -> None:
    build = api.build_sources([
        SourceFile.from_text("a.rules", 'job vcjob: batch.volcano.sh/v1alpha1 Job {\n'
                                        '    succeeded when all pods succeeded\n'
                                        '    on pod failed -> ignore\n}\n'),
        SourceFile.from_text("b.rules", 'extend vcjob {\n    on pod failed exit 1 -> ignore\n'
                                        '    on pod evicted -> restart job max 2\n}\n')])
    assert build.plan is not None, build.diagnostics
    [k] = build.plan["kinds"]
    assert [(p["id"], p["span"]["path"]) for p in k["policies"]] == [
        ("podFailed#0", "a.rules"), ("podFailed#1", "b.rules"), ("podEvicted#0", "b.rules")]
    # the kind's own unfiltered policy catches every later `pod failed` first
    assert [d.code for d in build.diagnostics] == ["R401"]


def test_new_policy_and_action_shapes() -> None:
    k = _kind('job k: example.org/v1 K {\n    task label "role"\n    succeeded when all pods succeeded\n'
              '    on pod failed or evicted condition "X" in ["False", "Unknown"]\n'
              '        -> count max <<spec.backoffLimit>> per pod then fail task\n'
              '    on pod failed -> restart pod max 3 after 10s doubling up to 1m\n}\n')
    counted, restarted = k["policies"]
    assert counted["evicted"] and not restarted["evicted"]
    assert counted["filter"] == {"op": "condition", "type": "X", "status": ["False", "Unknown"],
                                 "reasons": [], "negate": False}
    assert counted["action"]["action"] == "count"
    assert counted["action"]["budget"]["max"]["expr"] == "spec.backoffLimit"
    assert counted["action"]["budget"]["per"] == "pod"
    assert counted["action"]["fallback"]["action"] == "failTask"
    assert (restarted["action"]["delay"], restarted["action"]["doubling"],
            restarted["action"]["delayCap"]) == (10, True, 60)
    runtime_plan.load(_plan('job k: example.org/v1 K {\n    task label "role"\n'
                            '    succeeded when count tasks succeeded >= 2\n}\n'))


# -- every clause a kind and an injection can have, in the plan -------------------------------

EVERY_CLAUSE = '''webhook failure closed timeout 9s

job rich: example.org/v1 Box where not label "legacy" in ["x"] and not label "tier" != "b" {
    plural "boxen"
    pods owned
    pods label "app" = "{job}"
    task <<metadata.labels.role>>
    primary pods not task "init" and restarts < 5
    primary containers ["main", "aux"]
    final never
    mode audit annotation only
    failed when (any pod failed for 1m with (container "main" and exit not in [1, 2..3]
                                             and reason not in ["OOMKilled"]))
               or not task "w" failed or any task failed
               or count tasks failed >= <<spec.n>>
               or job running longer than 2h
               or all tasks succeeded
        reason "R{task}" message <<status.m>>
    succeeded when count pods of task "w" succeeded with pod reason "Evicted" > 1
    status {
        phase at status.state.phase map { Failed: "Bad" }
        reason at status.r
        message at status.msg
        no condition
        no annotations
        no events
    }
    on task "w" pod pending for 5m condition "PodScheduled" = "False" reason in ["Unschedulable"]
        -> ignore
    on pod running label "a" and label "b" = "c" and where <<x>> -> ignore
    on task "w" completed -> ignore
    on task failed -> fail job reason "T" message "M"
    on container restarted -> ignore
    on job verdict changed -> ignore
    on job running longer than 3h -> terminate job
    audit on pod failed -> restart pod max 2 per pod
    actions {
        fail job -> record
        abort job -> set spec.suspend = true, set spec.n = 3, set spec.note = "x", set spec.y = null
        restart task -> delete pods of task by eviction
        restart pod -> delete pod
        restart job -> delete pods, await no pod running and no pod pending within 10m
        terminate job -> create example.org/v1 Cmd { target: job, note: "n" }, condition "Term"
    }
}

inject "rich-i" into pods of rich where not namespace label "off" and namespace label "team" in ["a"]
        and not namespace label "z" = "1" and not (namespace "kube-system" or task "x")
        and primary and where <<pod.a>> {
    label "l" = "v"
    env "E" = "e" in all
    volume "s" secret "sec"
    volume "e" empty dir
    mount volume "s" at "/s" in ["aux"]
    sidecar "side" native {
        image "img"
        command ["/bin/c"]
        args ["-a", "{pod}"]
        env "K" = "V"
        mount volume "e" at "/e" read only
    }
    sidecar "plain" { image "i2" }
    wrap primary with shell "exec {argv}"
    wait for containers ["main"]
}
'''


def _without_spans(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _without_spans(v) for k, v in x.items() if k != "span"}
    if isinstance(x, list):
        return [_without_spans(v) for v in x]
    return x


def _every_clause() -> dict:
    build = api.build_sources([SourceFile.from_text("r.rules", EVERY_CLAUSE)])
    assert build.plan is not None and not build.errors, build.diagnostics
    return build.plan


def _policy(event: str, pid: str, action: dict, **fields: Any) -> dict:
    return {"event": event, "id": pid, "action": action, "audit": True, "evicted": False,
            "filter": None, "for": None, "task": None, "to": None, **fields}


def _action(verb: str, **fields: Any) -> dict:
    return {"action": verb, "budget": None, "delay": None, "delayCap": None, "doubling": False,
            "fallback": None, "message": None, "reason": None, **fields}


IGNORE = _action("ignore")


def test_every_kind_clause_in_the_plan() -> None:
    plan = _every_clause()
    k = _without_spans(plan["kinds"][0])
    assert {key: k[key] for key in ("name", "group", "version", "kind", "plural", "apiVersion",
                                    "versions", "namespaces", "primaryContainers",
                                    "primaryContainerPrefix")} == {
        "name": "rich", "group": "example.org", "version": "v1", "kind": "Box",
        "plural": "boxen", "apiVersion": "example.org/v1", "versions": ["v1"],
        "namespaces": None, "primaryContainers": ["main", "aux"], "primaryContainerPrefix": None}
    assert k["selector"] == [{"key": "legacy", "operator": "NotIn", "values": ["x"]},
                             {"key": "tier", "operator": "In", "values": ["b"]}]
    assert k["final"] == {"sticky": False, "until": None}
    assert k["audit"] == {"annotationOnly": True}
    assert k["pods"] == {"owned": True, "labels": {"app": [{"var": "job"}]}}
    assert k["task"] == {"expr": "metadata.labels.role"}
    assert k["primaryPods"] == {"op": "and", "args": [
        {"op": "not", "arg": {"op": "task", "values": ["init"], "negate": False}},
        {"op": "restarts", "cmp": "<", "value": 5, "container": None}]}
    assert k["status"] == {"phase": {"path": ["status", "state", "phase"], "map": {"Failed": "Bad"},
                                     "only": None, "over": None},
                           "reason": {"path": ["status", "r"]}, "message": {"path": ["status", "msg"]},
                           "condition": None, "annotations": False, "events": False}
    assert plan["webhook"] == {"failurePolicy": "Fail", "timeoutSeconds": 9}


def test_every_condition_in_the_plan() -> None:
    failed, succeeded = _without_spans(_every_clause()["kinds"][0]["verdicts"])
    assert failed == {"phase": "Failed", "reason": ["R", {"var": "task"}],
                      "message": [{"expr": "status.m"}], "when": {"op": "or", "args": [
        {"op": "pods", "quant": "any", "task": None, "state": "failed", "for": 60,
         "filter": {"op": "and", "args": [
             {"op": "exitCode", "codes": [1], "ranges": [[2, 3]], "negate": True, "container": "main"},
             {"op": "containerReason", "values": ["OOMKilled"], "negate": True, "container": "main"}]}},
        {"op": "not", "arg": {"op": "task", "quant": "any", "task": "w", "state": "failed"}},
        {"op": "task", "quant": "any", "task": None, "state": "failed"},
        {"op": "taskCount", "state": "failed", "cmp": ">=", "value": [{"expr": "spec.n"}]},
        {"op": "jobAge", "longerThan": 7200},
        {"op": "task", "quant": "all", "task": None, "state": "succeeded"}]}}
    assert succeeded == {"phase": "Succeeded", "reason": None, "message": None, "when": {
        "op": "count", "task": "w", "state": "succeeded", "cmp": ">", "value": [{"expr": "`1`"}],
        "filter": {"op": "podReason", "values": ["Evicted"], "negate": False}}}


def test_every_policy_event_in_the_plan() -> None:
    policies = _without_spans(_every_clause()["kinds"][0]["policies"])
    assert policies == [
        _policy("podPending", "podPending#0", IGNORE, task="w", **{"for": 300}, filter={
            "op": "condition", "type": "PodScheduled", "status": ["False"],
            "reasons": ["Unschedulable"], "negate": False}),
        _policy("podRunning", "podRunning#0", IGNORE, filter={"op": "and", "args": [
            {"op": "label", "key": "a", "values": None, "negate": False},
            {"op": "label", "key": "b", "values": ["c"], "negate": False},
            {"op": "jmespath", "expr": "x"}]}),
        _policy("taskCompleted", "taskCompleted#0", IGNORE, task="w"),
        _policy("taskFailed", "taskFailed#0", _action("failJob", reason=["T"], message=["M"])),
        _policy("containerRestarted", "containerRestarted#0", IGNORE),
        _policy("jobVerdictChanged", "jobVerdictChanged#0", IGNORE),
        _policy("jobRunningLongerThan", "jobRunningLongerThan#0", _action("terminateJob"),
                **{"for": 10800}),
        _policy("podFailed", "podFailed#0", _action(
            "restartPod", budget={"max": 2, "per": "pod", "key": "podFailed#0"})),
    ]


def test_every_recipe_step_in_the_plan() -> None:
    actions = _without_spans(_every_clause()["kinds"][0]["actions"])
    assert actions == {
        "failJob": "record",
        "abortJob": {"steps": [
            {"op": "set", "path": ["spec", "suspend"], "value": True},
            {"op": "set", "path": ["spec", "n"], "value": 3},
            {"op": "set", "path": ["spec", "note"], "value": "x"},
            {"op": "set", "path": ["spec", "y"], "value": None}]},
        "restartTask": {"steps": [{"op": "deletePods", "scope": "task", "evict": True}]},
        "restartPod": {"steps": [{"op": "deletePods", "scope": "pod", "evict": False}]},
        "restartJob": {"steps": [
            {"op": "deletePods", "scope": "job", "evict": False},
            {"op": "await", "timeout": 600, "when": {"op": "and", "args": [
                {"op": "pods", "quant": "none", "task": None, "state": "running", "filter": None,
                 "for": None},
                {"op": "pods", "quant": "none", "task": None, "state": "pending", "filter": None,
                 "for": None}]}}]},
        "terminateJob": {"steps": [
            {"op": "create", "apiVersion": "example.org/v1", "kind": "Cmd", "plural": "cmds",
             "body": {"target": {"job": True}, "note": ["n"]}},
            {"op": "condition", "type": "Term"}]},
    }


def test_every_injection_clause_in_the_plan() -> None:
    [i] = _without_spans(_every_clause()["injections"])
    assert i["name"] == "rich-i" and i["kinds"] == ["rich"]
    assert i["completionContainers"] == ["main"]
    assert i["match"] == {"op": "and", "args": [
        {"op": "namespaceLabel", "key": "off", "values": None, "negate": True},
        {"op": "namespaceLabel", "key": "team", "values": ["a"], "negate": False},
        {"op": "namespaceLabel", "key": "z", "values": ["1"], "negate": True},
        {"op": "not", "arg": {"op": "or", "args": [
            {"op": "namespace", "values": ["kube-system"], "negate": False},
            {"op": "task", "values": ["x"], "negate": False}]}},
        {"op": "primary"},
        {"op": "jmespath", "expr": "pod.a"}]}
    assert i["ops"] == [
        {"op": "label", "key": "l", "value": ["v"]},
        {"op": "env", "name": "E", "value": ["e"], "containers": {"select": "all", "names": []}},
        {"op": "volume", "name": "s", "source": {"secret": {"secretName": "sec"}}},
        {"op": "volume", "name": "e", "source": {"emptyDir": {}}},
        {"op": "mount", "volume": "s", "path": "/s", "readOnly": False,
         "containers": {"select": "named", "names": ["aux"]}},
        {"op": "sidecar", "name": "side", "native": True, "image": ["img"],
         "command": [["/bin/c"]], "args": [["-a"], [{"var": "pod"}]],
         "env": [{"name": "K", "value": ["V"]}],
         "mounts": [{"volume": "e", "path": "/e", "readOnly": True}]},
        {"op": "sidecar", "name": "plain", "native": False, "image": ["i2"], "command": None,
         "args": None, "env": [], "mounts": []},
        {"op": "wrap", "containers": {"select": "primary", "names": []}, "argv": None,
         "shell": ["exec ", {"var": "argv"}]},
    ]


def test_every_clause_has_its_span() -> None:
    plan = _every_clause()
    k = plan["kinds"][0]
    lines = {"kind": k["span"]["line"], "task": k["task"]["span"]["line"],
             "verdict": k["verdicts"][1]["span"]["line"], "status": k["status"]["span"]["line"],
             "policy": k["policies"][1]["span"]["line"], "audit": k["audit"]["span"]["line"],
             "recipe": k["actions"]["restartPod"]["span"]["line"],
             "step": k["actions"]["restartPod"]["steps"][0]["span"]["line"],
             "expr": k["verdicts"][0]["message"][0]["span"]["line"],
             "injection": plan["injections"][0]["span"]["line"],
             "op": plan["injections"][0]["ops"][2]["span"]["line"],
             "where": plan["injections"][0]["match"]["args"][5]["span"]["line"]}
    assert lines == {"kind": 3, "task": 7, "verdict": 19, "status": 20, "policy": 30, "audit": 11,
                     "recipe": 41, "step": 41, "expr": 18, "injection": 47, "op": 52, "where": 49}


@pytest.mark.parametrize("hooks, webhook", [
    ("", {"failurePolicy": "Ignore", "timeoutSeconds": 5}),
    ("webhook failure closed\n", {"failurePolicy": "Fail", "timeoutSeconds": 5}),
    ("webhook failure open\n", {"failurePolicy": "Ignore", "timeoutSeconds": 5}),
    ("webhook timeout 3s\n", {"failurePolicy": "Ignore", "timeoutSeconds": 3}),
    ("webhook timeout 3s\nwebhook failure closed\n", {"failurePolicy": "Fail", "timeoutSeconds": 3}),
])
def test_webhook_settings(hooks: str, webhook: dict) -> None:
    plan = _plan(hooks + "job j: batch/v1 Job { succeeded when all pods succeeded }\n")
    assert plan["webhook"] == webhook


def test_audit_mode_verdict_event_and_more_versions() -> None:
    k = _kind('job t: tekton.dev/v1, v1beta1 PipelineRun {\n    primary containers prefix "step-"\n'
              '    mode audit\n    succeeded when all pods succeeded\n'
              '    on job verdict changed to succeeded -> ignore\n'
              '    on pod failed or evicted -> ignore\n}\n')
    assert k["versions"] == ["v1", "v1beta1"] and k["primaryContainerPrefix"] == "step-"
    assert k["audit"]["annotationOnly"] is False
    verdict, evicted = k["policies"]
    assert (verdict["event"], verdict["to"], verdict["audit"]) == ("jobVerdictChanged", "Succeeded", True)
    assert (evicted["event"], evicted["evicted"]) == ("podFailed", True)
    assert k["final"] == {"sticky": True, "until": None} and k["primaryContainers"] is None


def test_plan_files_text_and_remaining_defaults() -> None:
    import hashlib

    text = ('job j: batch/v1 Job where namespace in ["b", "a"] {\n'
            '    succeeded when all pods succeeded\n'
            '    status { condition "Judged" }\n'
            '    on pod failed -> restart pod max 3 reason "Échec"\n}\n'
            'inject into pods of j { annotate "k" = "v" }\n')
    plan = _plan(text)
    assert plan["files"] == [{"path": "t.rules",
                              "sha256": hashlib.sha256(text.encode()).hexdigest()}]
    [k] = plan["kinds"]
    assert k["selector"] is None and k["namespaces"] == ["a", "b"]
    assert k["status"]["condition"] == "Judged" and k["status"]["annotations"] is True
    assert k["policies"][0]["action"]["budget"] == {"max": 3, "per": "job", "key": "podFailed#0"}
    [op] = _without_spans(plan["injections"][0]["ops"])
    assert op == {"op": "annotate", "key": "k", "value": ["v"]}
    dumped = emit.dumps(plan)
    assert '            "reason": [\n              "Échec"\n' in dumped  # as is, indented by 2
    assert dumped.index('"files"') < dumped.index('"injections"') < dumped.index('"kinds"')
    assert json.loads(dumped) == plan


def test_audit_per_policy_conditions_without_status_and_scoped_restarts() -> None:
    k = _kind('job j: batch/v1 Job where label "team" {\n    succeeded when all pods succeeded\n'
              '    audit on pod failed condition "DisruptionTarget" -> ignore\n'
              '    on pod failed (container "main" and restarts >= 2) -> ignore\n}\n')
    watched, acted = k["policies"]
    assert (watched["audit"], acted["audit"]) == (True, False)
    assert _without_spans(watched["filter"]) == {"op": "condition", "type": "DisruptionTarget",
                                                 "status": ["True"], "reasons": [], "negate": False}
    assert acted["filter"] == {"op": "restarts", "cmp": ">=", "value": 2, "container": "main"}
    assert k["selector"] == [{"key": "team", "operator": "Exists", "values": []}]
    assert k["audit"] is None


def test_container_scope_reaches_into_or_and_not() -> None:
    k = _kind('job j: batch/v1 Job {\n'
              '    failed when any pod failed with (container "main" and (exit 1 or exit 2)\n'
              '                                     and not reason "OOMKilled")\n'
              '    succeeded when all pods succeeded\n'
              '    on pod failed -> restart pod max <<spec.backoffLimit>>\n}\n')
    assert k["verdicts"][0]["when"]["filter"] == {"op": "and", "args": [
        {"op": "or", "args": [
            {"op": "exitCode", "codes": [1], "ranges": [], "negate": False, "container": "main"},
            {"op": "exitCode", "codes": [2], "ranges": [], "negate": False, "container": "main"}]},
        {"op": "not", "arg": {"op": "containerReason", "values": ["OOMKilled"], "negate": False,
                              "container": "main"}}]}
    budget = k["policies"][0]["action"]["budget"]
    assert budget["max"] == {"expr": "spec.backoffLimit",
                             "span": {**budget["max"]["span"], "line": 5, "column": 38}}


def test_ops_without_containers_go_to_the_primary_ones() -> None:
    plan = _plan('job j: batch/v1 Job { succeeded when all pods succeeded }\n'
                 'inject into pods of j {\n    env "A" = "1"\n    volume "v" empty dir\n'
                 '    mount volume "v" at "/v"\n}\n')
    env, _, mount = plan["injections"][0]["ops"]
    assert env["containers"] == mount["containers"] == {"select": "primary", "names": []}


def test_task_label_and_wrap_of_all_containers() -> None:
    plan = _plan('job j: batch/v1 Job {\n    task label "role"\n    succeeded when all pods succeeded\n}\n'
                 'inject into pods of j {\n    wrap all with ["/run"]\n}\n')
    assert plan["kinds"][0]["task"] == {"label": "role"}
    [wrap] = plan["injections"][0]["ops"]
    assert wrap["containers"] == {"select": "all", "names": []} and wrap["argv"] == [["/run"]]


def test_a_pod_quantifier_of_one_task() -> None:
    k = _kind('job j: batch/v1 Job {\n    task label "role"\n'
              '    failed when any pod of task "w" failed\n    succeeded when all pods succeeded\n}\n')
    assert _without_spans(k["verdicts"][0]["when"]) == {
        "op": "pods", "quant": "any", "task": "w", "state": "failed", "filter": None, "for": None}


def test_a_label_after_a_namespace_in_the_scope_is_in_the_selector() -> None:
    k = _kind('job j: batch/v1 Job where namespace "ml" and label "team" = "a" {\n'
              '    succeeded when all pods succeeded\n}\n')
    assert k["selector"] == [{"key": "team", "operator": "In", "values": ["a"]}]
    assert k["namespaces"] == ["ml"]


def test_event_tasks_counts_and_memory_growth() -> None:
    """What lowering reads of each: the task of an eviction and of a container restart, a count
    of pods against an expression, a count of tasks in any state, and `with memory` with and
    without its cap (found untested by mutants of rulec/lower.py)."""
    kind = _kind('''job j: batch/v1 Job {
    task label "role"
    succeeded when all pods succeeded
    failed when count pods failed >= <<spec.backoffLimit>> or count tasks >= 2
    on task "w" pod failed or evicted -> ignore
    on task "w" container restarted -> ignore
    on pod failed -> restart job max 1 with memory * 1.5 up to 4Gi
    on pod evicted -> restart job max 1 with memory * 2
    actions {
        restart job -> set spec.suspend = true, resize spec.template, set spec.suspend = false
    }
}''')
    pods, tasks = kind["verdicts"][1]["when"]["args"]
    assert (pods["op"], pods["state"], pods["cmp"], [p["expr"] for p in pods["value"]]) == (
        "count", "failed", ">=", ["spec.backoffLimit"])
    assert (tasks["op"], tasks["state"], tasks["cmp"]) == ("taskCount", None, ">=")
    evicted, restarted, grown, capless = kind["policies"]
    assert (evicted["event"], evicted["task"], evicted["evicted"]) == ("podFailed", "w", True)
    assert (restarted["event"], restarted["task"]) == ("containerRestarted", "w")
    assert grown["action"]["grow"] == {"resource": "memory", "factor": 1.5, "max": "4Gi"}
    assert capless["action"]["grow"] == {"resource": "memory", "factor": 2.0, "max": None}


def test_status_switches_and_injection_ops() -> None:
    plan = _plan('''job j: batch/v1 Job {
    succeeded when all pods succeeded
    status {
        no annotations
    }
}
job k: batch/v2 Job {
    succeeded when all pods succeeded
    status {
        no events
    }
}
inject "i" into pods of j {
    volume "v" empty dir
    wrap primary with shell "exec {argv}"
    wrap ["main"] with ["/w"]
    wait for container "main"
}''')
    statuses = [(k["status"]["events"], k["status"]["annotations"]) for k in plan["kinds"]]
    assert statuses == [(True, False), (False, True)]
    [injection] = plan["injections"]
    volume, shell, argv = injection["ops"]
    assert volume["source"] == {"emptyDir": {}}
    assert (shell["containers"], shell["shell"]) == ({"select": "primary", "names": []},
                                                     ["exec ", {"var": "argv"}])
    assert (argv["containers"], argv["argv"]) == ({"select": "named", "names": ["main"]}, [["/w"]])
    assert injection["completionContainers"] == ["main"]


def test_recipe_steps_values_task_paths_quoted_keys_and_guarded_recipes() -> None:
    """Each literal of `set` as its JSON value, `resize MAP[task].WITHIN` split at `[task]`, a
    quoted key of `create` without its quotes, and recipes with `when`, each with its own
    expression (found untested by mutants of rulec/lower.py)."""
    kind = _kind('''job j: example.org/v1 Thing {
    task label "r"
    succeeded when all pods succeeded
    actions {
        restart task -> set spec.a = false, set spec.b = true, set spec.c = null, set spec.d = 7, set spec.e = "t", resize spec.replicaSpecs[task].template.spec
        restart job when <<spec.x>> -> record
        restart job when <<spec.y>> -> set spec.suspend = false
        restart job -> unsupported
        abort job -> create v1 ConfigMap { plain: "a", "app.kubernetes.io/x": "b", owner: job }
    }
}''')
    actions = _without_spans(kind["actions"])
    assert actions["restartTask"]["steps"] == [
        {"op": "set", "path": ["spec", "a"], "value": False},
        {"op": "set", "path": ["spec", "b"], "value": True},
        {"op": "set", "path": ["spec", "c"], "value": None},
        {"op": "set", "path": ["spec", "d"], "value": 7},
        {"op": "set", "path": ["spec", "e"], "value": "t"},
        {"op": "resize", "path": ["spec", "replicaSpecs"], "within": ["template", "spec"]}]
    assert actions["restartJob"] == "unsupported"
    assert actions["abortJob"]["steps"][0]["body"] == {
        "plain": ["a"], "app.kubernetes.io/x": ["b"], "owner": {"job": True}}
    guarded = kind["guardedActions"]
    assert [(g["action"], g["when"]["expr"], g["when"]["span"]["line"],
             g["when"]["span"]["column"]) for g in guarded] == [
        ("restartJob", "spec.x", 6, 26), ("restartJob", "spec.y", 7, 26)]
    assert guarded[0]["recipe"] == "record"
    assert _without_spans(guarded[1]["recipe"]) == {
        "steps": [{"op": "set", "path": ["spec", "suspend"], "value": False}]}


def test_an_injection_without_wait_for_waits_for_no_container() -> None:
    plan = _plan('job j: batch/v1 Job { succeeded when all pods succeeded }\n'
                 'inject "i" into pods of j {\n    label "a" = "b"\n}\n'
                 'inject "k" into pods of j {\n    label "c" = "d"\n'
                 '    wait for containers ["m", "n"]\n}\n')
    assert [i["completionContainers"] for i in plan["injections"]] == [None, ["m", "n"]]


def test_a_wrap_shell_goes_to_the_containers_it_names() -> None:
    """Without containers a wrap goes to the primary ones: a shell wrap of all containers, or of
    named ones, must keep them (found untested by mutants of rulec/lower.py)."""
    plan = _plan('job j: batch/v1 Job { succeeded when all pods succeeded }\n'
                 'inject "i" into pods of j {\n    wrap all with shell "exec {argv}"\n}\n'
                 'inject "k" into pods of j {\n    wrap ["a", "b"] with shell "exec {argv}"\n}\n')
    assert [i["ops"][0]["containers"] for i in plan["injections"]] == [
        {"select": "all", "names": []}, {"select": "named", "names": ["a", "b"]}]


@pytest.mark.parametrize("clause, foreign", [
    ("", None),
    ("    foreign when <<spec.managedBy>>\n", {"when": "spec.managedBy", "verdicts": False}),
    ("    foreign when <<spec.managedBy>> write verdicts\n",
     {"when": "spec.managedBy", "verdicts": True}),
])
def test_foreign_with_and_without_verdict_writes(clause: str, foreign: dict | None) -> None:
    got = _kind("job j: batch/v1 Job {\n    succeeded when all pods succeeded\n" + clause + "}\n")
    f = got["foreign"]
    assert (f if f is None else {"when": f["when"]["expr"], "verdicts": f["verdicts"]}) == foreign


def test_a_policy_s_cause_is_its_filter_s_first_cause_term_not_under_not() -> None:
    text = ('cause "oom" when reason "OOMKilled" hint "more memory"\n'
            'cause "term" when exit 143 hint "asked to stop"\n'
            'job j: batch/v1 Job {\n    failed when any pod failed\n'
            '    on pod failed cause "oom" -> fail job\n'
            '    on pod failed exit 1 or (exit 137 and cause "oom") -> fail job\n'
            '    on pod failed not cause "term" and cause "oom" -> fail job\n'
            '    on pod failed not cause "term" -> fail job\n'
            '    actions { fail job -> record }\n}\n')
    assert [p.get("cause") for p in _kind(text)["policies"]] == ["oom", "oom", "oom", None]
