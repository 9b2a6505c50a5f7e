"""`VERB when EXPR -> steps` (a recipe for the jobs EXPR holds for) and `set ... on API KIND
label K = V` (a field of the job's objects of another kind), from the source to the plan: what
the compiler accepts, what it reports, and what it emits."""
from __future__ import annotations

import json

from rulec import api, emit, fmt
from rulec.source import SourceFile
from runtime import plan

HEAD = ("job j: batch/v1 Job {\n    succeeded when all pods succeeded\n"
        "    on pod failed -> restart job with memory * 2 max 1\n")
KUEUE = ('restart job when <<metadata.labels."kueue.x-k8s.io/queue-name">>\n'
         '    -> set spec.active = false on kueue.x-k8s.io/v1beta2 Workload\n'
         '       label "kueue.x-k8s.io/job-uid" = <<metadata.uid>>,\n')
PLAIN = "restart job -> set spec.suspend = true, resize spec.template, set spec.suspend = false\n"


def kind(*recipes: str) -> str:
    return HEAD + "    actions {\n" + "".join(recipes) + "    }\n}\n"


def build(text: str) -> api.Build:
    return api.build_sources([SourceFile.from_text("t.rules", text)])


def codes(text: str) -> list[tuple[str, int]]:
    return [(d.code, d.span.line) for d in build(text).diagnostics]


def test_guarded_recipes_of_one_action_are_many_a_plain_one_is_one() -> None:
    full = KUEUE + "resize spec.template,\n set spec.active = true on kueue.x-k8s.io/v1beta2 " \
        'Workload label "kueue.x-k8s.io/job-uid" = <<metadata.uid>>\n'
    assert codes(kind(full, full.replace("queue-name", "other"), PLAIN)) == []
    assert codes(kind(PLAIN, PLAIN)) == [("R106", 6)]   # duplicate-clause: the second plain one


def test_a_restart_with_more_memory_needs_a_resize_in_every_recipe_of_it() -> None:
    """A guarded recipe without `resize` would drop the new size for the jobs it is for."""
    [d] = build(kind(KUEUE.rstrip(",\n") + "\n", PLAIN)).diagnostics
    assert d.code == "R409"
    assert 'its `restart job` when `<<metadata.labels."kueue.x-k8s.io/queue-name">>` writes no ' \
        "new size anywhere" in d.message
    # only guarded recipes: the jobs none holds for get the default restart, which writes none
    only = KUEUE + "resize spec.template\n"
    assert [d.code for d in build(kind(only)).diagnostics] == ["R409"]
    assert codes(kind(only, PLAIN)) == []


def test_the_plan_carries_guarded_recipes_apart_and_plans_without_them_do_not_change() -> None:
    done = build(kind(KUEUE + "resize spec.template\n", PLAIN))
    assert done.plan is not None
    [k] = done.plan["kinds"]
    assert list(k["actions"]) == ["restartJob"]
    [guarded] = k["guardedActions"]
    assert guarded["action"] == "restartJob"
    assert guarded["when"]["expr"] == 'metadata.labels."kueue.x-k8s.io/queue-name"'
    first = guarded["recipe"]["steps"][0]
    assert (first["op"], first["path"], first["value"]) == ("set", ["spec", "active"], False)
    assert first["on"] == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                           "plural": "workloads",
                           "label": {"key": "kueue.x-k8s.io/job-uid",
                                     "value": [{"expr": "metadata.uid",
                                                "span": first["on"]["label"]["value"][0]["span"]}]}}
    [loaded] = plan.loads(emit.dumps(done.plan)).kinds
    step = loaded.recipe("restartJob", 0)[0]   # type: ignore[index]
    assert isinstance(step, plan.SetObjectField)
    assert (step.on.plural, step.on.key) == ("workloads", "kueue.x-k8s.io/job-uid")
    assert loaded.recipe("restartJob") == loaded.actions["restartJob"]
    bare = build(kind(PLAIN))
    assert bare.plan is not None and "guardedActions" not in json.dumps(bare.plan)


def test_a_guarded_recipe_is_laid_out_with_its_steps_under_the_others() -> None:
    text = fmt.format_text(kind(KUEUE + "resize spec.template\n", PLAIN))
    assert text.splitlines()[4:9] == [
        '        restart job when <<metadata.labels."kueue.x-k8s.io/queue-name">>',
        "                      -> set spec.active = false on kueue.x-k8s.io/v1beta2 Workload",
        '                             label "kueue.x-k8s.io/job-uid" = <<metadata.uid>>, '
        "resize spec.template",
        "        restart job   -> set spec.suspend = true, resize spec.template, "
        "set spec.suspend = false",
        "    }"]
    assert fmt.format_text(text) == text
