"""The policies check (rulec/checks/policies.py): each finding whole (code, position, message,
help, notes), for rules on either side of each of its limits."""
from __future__ import annotations

import pytest

from tests.unit.rulec.said import TASKED, job, said

RESIZE = "\n    actions { restart job -> resize spec.template }"
NO_RESIZE_HELP = ("  help: add a `resize PATH` step (the job's pod template) to its `restart job` in "
                  "`actions { ... }`, between stopping the pods and starting them again "
                  "(docs/language.md, Actions)")
NO_TASK_HELP = '  help: add `task label "..."` or `task <<expr>>` to the kind'
SHADOWED = ["t.rules:4:5 R401 this policy is never used",
            "  help: policies are tried in order; put the narrower one first"]


@pytest.mark.parametrize("body, expected", [
    pytest.param("    on pod failed -> fail job with memory * 2 up to 1Gi\n"
                 "    actions { fail job -> record }", [
        "t.rules:3:31 R405 `with memory` raises the memory of a failed pod's containers before a "
        "restart; `fail job` on `pod failed` is not one",
        "  help: use it on `restart job|task|pod` after `on pod failed ...` or `on container "
        "restarted ...`"], id="not-a-restart"),
    pytest.param("    on pod succeeded -> restart job max 2 with memory * 2 up to 1Gi" + RESIZE, [
        "t.rules:3:43 R405 `with memory` raises the memory of a failed pod's containers before a "
        "restart; `restart job` on `pod succeeded` is not one",
        "  help: use it on `restart job|task|pod` after `on pod failed ...` or `on container "
        "restarted ...`"], id="not-after-a-failure"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 2 up to 1Gi" + RESIZE, [],
                 id="resize-step-alone"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 1 up to 1Gi" + RESIZE, [
        "t.rules:3:40 R306 the factor must be above 1 and at most 16, not 1"], id="factor-1"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 1.0001 up to 1Gi" + RESIZE, [],
                 id="factor-just-above-1"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 16 up to 1Gi" + RESIZE, [],
                 id="factor-16"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 16.5 up to 1Gi" + RESIZE, [
        "t.rules:3:40 R306 the factor must be above 1 and at most 16, not 16.5"], id="factor-16.5"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 2 up to 1Gi", [
        "t.rules:3:40 R409 kind `j` cannot `restart job` with more memory: its `restart job` "
        "writes no new size anywhere", NO_RESIZE_HELP], id="default-recipe"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 2 up to 1Gi\n"
                 "    actions { restart job -> delete pods }", [
        "t.rules:3:40 R409 kind `j` cannot `restart job` with more memory: its `restart job` "
        "writes no new size anywhere", NO_RESIZE_HELP,
        "  note t.rules:4:15: its steps are here"], id="recipe-without-resize"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 2 up to 1Gi\n"
                 "    actions { restart job -> delete pods, resize spec.template }", [],
                 id="recipe-with-resize"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 2 up to 1Gi\n"
                 "    actions { restart job when <<spec.x>> -> resize spec.template }", [
        "t.rules:3:40 R409 kind `j` cannot `restart job` with more memory: its `restart job` "
        "writes no new size anywhere", NO_RESIZE_HELP], id="only-a-when-recipe-resizes"),
    pytest.param("    on pod failed -> restart job max 2 with memory * 2 up to 1Gi\n    actions {\n"
                 "        restart job when <<spec.x>> -> delete pods\n"
                 "        restart job -> resize spec.template\n    }", [
        "t.rules:3:40 R409 kind `j` cannot `restart job` with more memory: its `restart job` when "
        "`<<spec.x>>` writes no new size anywhere", NO_RESIZE_HELP,
        "  note t.rules:5:9: its steps are here"], id="a-when-recipe-does-not-resize"),
])
def test_with_memory_needs_a_restart_after_a_failure_and_a_recipe_that_resizes(
        body: str, expected: list[str]) -> None:
    assert said(job(body)) == expected


@pytest.mark.parametrize("body, expected", [
    pytest.param('    on pod failed -> ignore budget "b"', [
        "t.rules:3:36 R406 `budget` names a budget, but there is no `max`"], id="budget-no-max"),
    pytest.param("    on pod failed -> ignore max 2", [
        "t.rules:3:33 R406 `ignore` counts nothing: `max` does not apply"], id="ignore-max"),
    pytest.param("    on pod failed -> restart job max 2 after 10s doubling up to 10s", [],
                 id="cap-equal-to-delay"),
    pytest.param("    on pod failed -> restart job max 2 after 10s doubling up to 9s", [
        "t.rules:3:65 R306 the delay's cap is shorter than the first delay"], id="cap-below-delay"),
    pytest.param("    on pod failed -> restart job max 2 per task then fail job\n"
                 "    actions { fail job -> record }", [
        "t.rules:3:40 R406 `per task` needs an event with a task and a kind that declares `task`"],
        id="per-task-without-task"),
    pytest.param('    on pod failed -> fail job reason "{bad}" message "{worse}"\n'
                 "    actions { fail job -> record }", [
        "t.rules:3:39 R104 unknown placeholder `{bad}`",
        "  help: placeholders here: job, namespace, kind, task, pod, container, container_reason, "
        "exit_code, pod_reason, phase, count, total, restarts, event, budget_used, budget_max",
        "t.rules:3:55 R104 unknown placeholder `{worse}`",
        "  help: placeholders here: job, namespace, kind, task, pod, container, container_reason, "
        "exit_code, pod_reason, phase, count, total, restarts, event, budget_used, budget_max"],
        id="unknown-placeholders"),
    pytest.param('    on pod failed -> fail job reason "{argv}" message "x{argv}"\n'
                 "    actions { fail job -> record }", [
        "t.rules:3:39 R104 placeholder `{argv}` has no value in an action",
        "  help: `{argv}` exists only in `wrap ... with shell`",
        "t.rules:3:57 R104 placeholder `{argv}` has no value in an action",
        "  help: `{argv}` exists only in `wrap ... with shell`"], id="argv-placeholders"),
])
def test_action_clauses_are_said_whole(body: str, expected: list[str]) -> None:
    assert said(job(body)) == expected


def test_a_per_task_budget_on_a_job_event_is_said_at_per() -> None:
    assert said(job("    on job running longer than 1h -> restart job max 2 per task", TASKED)) == [
        "t.rules:4:56 R406 `per task` needs an event with a task and a kind that declares `task`"]
    assert said(job("    on pod failed -> restart job max 2 per task", TASKED)) == []


@pytest.mark.parametrize("body, expected", [
    pytest.param('    on task "a" pod failed -> ignore', [
        "t.rules:3:13 R408 a task-scoped event needs a task, but kind `j` declares no `task`",
        NO_TASK_HELP], id="task-scoped-event"),
    pytest.param("    on task failed -> ignore", [
        "t.rules:3:8 R408 `task failed` needs a task, but kind `j` declares no `task`",
        NO_TASK_HELP], id="task-event"),
    pytest.param('    on pod failed task "a" -> ignore', [
        "t.rules:3:19 R408 a task filter needs a task, but kind `j` declares no `task`",
        NO_TASK_HELP], id="task-filter"),
])
def test_a_policy_about_tasks_on_a_kind_without_task_is_said(body: str, expected: list[str]) -> None:
    assert said(job(body)) == expected


@pytest.mark.parametrize("first, second, event", [
    ("on pod pending for 5m -> restart job max 1", "on pod pending for 5m -> restart job max 2",
     "pod pending"),
    ("on job verdict changed to Failed -> ignore", "on job verdict changed to failed -> ignore",
     "job verdict changed"),
    ("on job verdict changed to failed -> ignore", "on job verdict changed to Failed -> ignore",
     "job verdict changed"),
    ("on pod failed or evicted -> restart job max 2", "on pod failed or evicted -> restart job max 3",
     "pod failed"),
    ("on pod failed or evicted -> restart job max 2", "on pod failed -> restart job max 3",
     "pod failed"),
])
def test_an_earlier_policy_that_catches_every_case_shadows_the_later(first: str, second: str,
                                                                   event: str) -> None:
    assert said(job(f"    {first}\n    {second}")) == [
        *SHADOWED, f"  note t.rules:3:5: this earlier policy catches every `{event}` first"]


@pytest.mark.parametrize("first, second", [
    ("on job verdict changed to Failed -> ignore", "on job verdict changed to Succeeded -> ignore"),
    ("on pod failed -> restart job max 2", "on pod failed or evicted -> restart job max 2"),
    ("on pod pending for 6m -> restart job max 1", "on pod pending for 5m -> restart job max 2"),
])
def test_an_earlier_policy_that_misses_some_cases_shadows_nothing(first: str, second: str) -> None:
    assert said(job(f"    {first}\n    {second}")) == []


def test_the_label_value_of_a_set_on_other_objects_takes_the_job_s_placeholders() -> None:
    step = 'abort job -> set spec.x = "1" on v1 ConfigMap label "a" = "{exit_code}-{nope}"'
    assert said(job(f"    actions {{ {step} }}")) == [
        "t.rules:3:74 R104 placeholder `{exit_code}` has no value in a label value",
        "  help: placeholders here: job, namespace, kind",
        "t.rules:3:86 R104 unknown placeholder `{nope}`",
        "  help: placeholders here: job, namespace, kind"]


POLICY_ID_HELP = '  help: policy ids key the stored state; give each policy its own `as "id"`'


def test_policy_ids_given_or_default_are_unique_across_extensions() -> None:
    # the defaults count a kind's policies of each event from 0, named ones too: the third
    # `pod failed` is podFailed#2
    text = ('job j: batch/v1 Job {\n    task label "role"\n    succeeded when all pods succeeded\n'
            '    on pod failed exit 1 -> ignore as "x"\n    on pod failed exit 2 -> ignore as "x"\n'
            "    on pod failed exit 3 -> ignore\n}\n"
            'extend j { on pod failed exit 4 -> ignore as "podFailed#2" }\n')
    assert said(text) == [
        "t.rules:5:39 R105 policy id `x` is used twice", POLICY_ID_HELP,
        "  note t.rules:4:39: first used here",
        "t.rules:8:46 R105 policy id `podFailed#2` is used twice", POLICY_ID_HELP,
        "  note t.rules:6:5: first used here"]


def test_a_task_failure_policy_preempts_only_retries_of_its_own_task() -> None:
    head = 'job j: batch/v1 Job {\n    task label "role"\n    succeeded when all pods succeeded\n'
    tail = "    actions { abort job -> record }\n}\n"
    # another task's retries, a restart without budget, a count: none is preempted
    assert said(head + '    on task "w" failed -> abort job\n'
                       '    on task "v" pod failed -> restart pod max 2\n'
                       "    on pod failed exit 9 -> restart pod\n" + tail) == [
        "t.rules:6:29 R402 `restart pod` has no budget and may repeat forever",
        "  help: add `max N`, e.g. `restart pod max 3 then fail job`"]
    assert said(head + '    on task "w" failed -> abort job\n'
                       '    on task "w" pod failed -> restart pod max 2\n' + tail) == [
        't.rules:4:5 R411 task "w" fails with its first failed pod: this policy takes `abort job` '
        "before any retry of the pod policy could help",
        "  help: to act when the retries are spent, write it as the pod policy's fallback: "
        "`... then abort job`",
        "  note t.rules:5:5: the pod policy that retries"]


def test_each_step_of_a_recipe_is_checked() -> None:
    with_task = ('job j: batch/v1 Job {\n    task label "role"\n    succeeded when all pods succeeded\n'
                 "    actions {\n        ignore -> record\n        abort job -> delete pods of task\n"
                 "        fail job -> delete pod\n"
                 "        restart task -> delete pods of task, resize spec.r[task].template\n"
                 "        complete job -> resize spec.template\n"
                 '        terminate job -> await any pod failed within 10s, condition ""\n    }\n}\n')
    assert said(with_task) == [
        "t.rules:5:9 R405 `ignore` has no effect to describe",
        "t.rules:6:22 R405 `delete pods of task` needs an action about a task, and `abort job` "
        "is not",
        "t.rules:7:21 R405 `delete pod` deletes the pod an action is about, and `fail job` is "
        "about no pod",
        "  help: write `delete pods` (all of the job's) or `delete pods of task`",
        "t.rules:9:25 R405 `resize` writes the new sizes of a restart with more memory, and "
        "`complete job` is no restart",
        "t.rules:10:69 R308 a condition type cannot be empty"]
    without_task = ('job j: batch/v1 Job {\n    succeeded when all pods succeeded\n'
                    "    actions {\n        abort job -> delete pods of task\n"
                    "        restart job -> resize spec.r[task].template\n"
                    '        fail job -> create v1 ConfigMap { a: "x", a: "{nope}", b: job }\n'
                    '        complete job -> set status.x = "1" on v1 ConfigMap label "a" = "b"\n'
                    '        terminate job -> set spec.x = "1" on batch/v1 Job label "a" = "b"\n'
                    "    }\n}\n")
    assert said(without_task) == [
        "t.rules:4:22 R408 `delete pods of task` needs a task, but kind `j` declares no `task`",
        NO_TASK_HELP,
        "t.rules:5:24 R408 `resize PATH[task]` needs a task, but kind `j` declares no `task`",
        NO_TASK_HELP,
        "t.rules:6:51 R106 field `a` is given twice",
        "  note t.rules:6:43: first given here",
        "t.rules:6:55 R104 unknown placeholder `{nope}`",
        "  help: placeholders here: job, namespace, kind, task, pod, container, container_reason, "
        "exit_code, pod_reason, phase, count, total, restarts, event, budget_used, budget_max",
        "t.rules:7:29 R412 `set status.x on ConfigMap` would write the status of another "
        "controller's objects",
        "  help: write a field of their spec or metadata, which their controller reads",
        "t.rules:8:43 R412 `on batch/v1 Job` names the job's own kind: it would write every job "
        "the label finds",
        "  help: write the job's own field with `set spec.x = ...`"]


def test_the_policies_of_an_extension_are_checked_against_the_kind() -> None:
    text = job("") + "extend j { on job running longer than 1h -> restart pod max 1 }\n"
    assert said(text) == [
        "t.rules:5:45 R405 `restart pod` needs a pod event, and `job running longer than` has no pod",
        "  help: restart the job or the task instead"]


def test_a_shadowed_policy_is_said_once_against_the_first_that_catches_it() -> None:
    assert said(job("    on pod failed -> ignore\n" * 2 + "    on pod failed -> ignore")) == [
        *SHADOWED, "  note t.rules:3:5: this earlier policy catches every `pod failed` first",
        "t.rules:5:5 R401 this policy is never used", SHADOWED[1],
        "  note t.rules:3:5: this earlier policy catches every `pod failed` first"]


def test_a_task_failure_policy_on_any_task_preempts_retries() -> None:
    head = 'job j: batch/v1 Job {\n    task label "role"\n    succeeded when all pods succeeded\n'
    assert said(head + "    on task failed -> fail job\n    on pod failed -> restart pod max 2\n"
                       "    actions { fail job -> record }\n}\n") == [
        "t.rules:4:5 R411 a task fails with its first failed pod: this policy takes `fail job` "
        "before any retry of the pod policy could help",
        "  help: to act when the retries are spent, write it as the pod policy's fallback: "
        "`... then fail job`",
        "  note t.rules:5:5: the pod policy that retries"]
    # `ignore` and `count` take nothing; a pod restart deletes its pod and may set a condition
    assert said(head + '    on task "w" failed -> ignore\n'
                       '    on task "v" failed -> count max 1 then abort job\n'
                       "    on pod failed -> restart pod max 2\n"
                       "    actions { abort job -> record\n"
                       '        restart pod -> delete pod, condition "Done" }\n}\n') == []


def preempts(at: str, scope: str) -> list[str]:
    """R411 at `at` for a `fail job` on `scope`'s failure, the retrying pod policy at line 4."""
    return [f"t.rules:{at} R411 {scope} fails with its first failed pod: this policy takes "
            "`fail job` before any retry of the pod policy could help",
            "  help: to act when the retries are spent, write it as the pod policy's fallback: "
            "`... then fail job`",
            "  note t.rules:4:5: the pod policy that retries"]


def test_a_task_failure_policy_after_a_pod_policy_that_retries_is_found() -> None:
    text = job("    on pod failed -> restart job max 2\n    on task failed -> fail job"
               "\n    actions { fail job -> record }", TASKED)
    assert said(text) == preempts("5:5", "a task")


def test_an_awaited_condition_and_a_created_objects_values_are_checked() -> None:
    text = job("    actions {\n        terminate job -> await any task failed within 10s\n"
               '        fail job -> create v1 ConfigMap { data: "{argv}" }\n    }')
    assert said(text) == [
        "t.rules:4:32 R408 a task condition needs a task, but kind `j` declares no `task`",
        NO_TASK_HELP,
        "t.rules:5:50 R104 placeholder `{argv}` has no value in a created object",
        "  help: `{argv}` exists only in `wrap ... with shell`"]


def test_each_task_failure_policy_is_held_to_the_pod_policies_of_its_own_task() -> None:
    """Task "a" has no retrying pod policy (nothing said); task "b" has one."""
    text = job('    on task "b" pod failed -> restart job max 2\n    on task "a" failed -> fail job\n'
               '    on task "b" failed -> fail job\n    actions { fail job -> record }', TASKED)
    assert said(text) == preempts("6:5", 'task "b"')
