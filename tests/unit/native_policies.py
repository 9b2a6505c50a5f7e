"""The batch Job's own policies in the rules language: the translation tables of docs/language.md
("Kubernetes' podFailurePolicy and JobSet's failurePolicy", "Kubernetes' successPolicy") as
functions, for the tests that hold rules to them (test_pod_failure_policy.py: the example
suites; test_oracle.py: Kubernetes' own decision functions).
"""

from __future__ import annotations

import json
from typing import Any

from rulec import fmt

HEADER = """\
# The Job controller's podFailurePolicy, translated by the table of docs/language.md. Generated
# from the suite's Jobs (tests/unit/test_pod_failure_policy.py holds them equal):
"""
KIND = """\
job batchjob: batch/v1 Job {
    pods owned
    task label "batch.kubernetes.io/job-completion-index"

    # What the Job controller has decided already holds, with its reason and message.
    failed     when <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True']>>
               reason <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True'] | [0].reason>>
               message <<status.conditions[?(type=='Failed' || type=='FailureTarget') && status=='True'] | [0].message>>
    succeeded  when <<status.conditions[?(type=='Complete' || type=='SuccessCriteriaMet') && status=='True']>>
               reason <<status.conditions[?(type=='Complete' || type=='SuccessCriteriaMet') && status=='True'] | [0].reason>>
               message <<status.conditions[?(type=='Complete' || type=='SuccessCriteriaMet') && status=='True'] | [0].message>>
"""
VERDICTS = """\
    succeeded  when count pods succeeded >= <<spec.completions || `1`>>
    running    when any pod running
    pending    otherwise

"""
PER_INDEX = """\
    failed     when count tasks failed > <<spec.maxFailedIndexes>>
               reason "MaxFailedIndexesExceeded"
               message "Job has exceeded the specified maximal number of failed indexes"
    failed     when any task failed and count tasks >= <<spec.completions>>
                    and not any task running and not any task pending
               reason "FailedIndexes" message "Job has failed indexes"
"""
COUNT = ('count max <<spec.backoffLimit>> budget "backoff" then fail job reason '
         '"BackoffLimitExceeded" message "Job has reached the specified backoff limit"')
COUNT_PER_INDEX = 'count max <<spec.backoffLimitPerIndex>> per task budget "backoff" then fail task'


ACTIONS = """
    # The Job controller carries its podFailurePolicy out itself: these rules say what it
    # decides, and record it.
    actions {
        fail job -> record
    }
"""


def translate(spec: dict[str, Any]) -> str:
    """The rules of a batch/v1 Job whose pods fail by its `podFailurePolicy` (and, with
    `backoffLimitPerIndex`, whose indexes fail one by one)."""
    rules = spec["podFailurePolicy"]["rules"]
    per_index = "backoffLimitPerIndex" in spec
    lines = [HEADER] + [f"#   {json.dumps(rule, sort_keys=True)}\n" for rule in rules]
    lines.append("\n" + KIND + (PER_INDEX if per_index else "") + VERDICTS)
    count = COUNT_PER_INDEX if per_index else COUNT
    for index, rule in enumerate(rules):
        terms = _terms(rule)
        for n, term in enumerate(terms):
            suffix = f"-{n}" if len(terms) > 1 else ""
            lines.append(f"    on pod failed or evicted {term} -> {_action(rule, index, n, count)} "
                         f"as \"rule-{index}{suffix}\"\n")
    lines.append(f"    on pod failed or evicted -> {count} as \"default\"\n")
    lines.append(ACTIONS + "}\n")
    return fmt.format_text("".join(lines))


def _terms(rule: dict[str, Any]) -> list[str]:
    """The filter of a rule; one per pattern of `onPodConditions` (policies `rule-i-j`, j the
    pattern's position: two patterns may name one condition type)."""
    codes = rule.get("onExitCodes")
    if codes is not None:
        values = ", ".join(str(v) for v in codes["values"])
        test = f"exit {'in' if codes['operator'] == 'In' else 'not in'} [{values}]"
        name = codes.get("containerName")
        return [f'container "{name}" and {test}' if name else test]
    out = []
    for pattern in rule["onPodConditions"]:
        status = pattern.get("status", "True")
        out.append(f'condition "{pattern["type"]}"' + ("" if status == "True" else f' = "{status}"'))
    return out


def _action(rule: dict[str, Any], index: int, pattern: int, count: str) -> str:
    action = rule["action"]
    if action == "Ignore":
        return "ignore"
    if action == "Count":
        return count
    if action == "FailIndex":
        return "fail task"
    if rule.get("onExitCodes") is not None:
        message = ("Container {container} for pod {namespace}/{pod} failed with exit code "
                   f"{{exit_code}} matching FailJob rule at index {index}")
    else:
        kind = rule["onPodConditions"][pattern]["type"]
        message = f"Pod {{namespace}}/{{pod}} has condition {kind} matching FailJob rule at index {index}"
    return f'fail job reason "PodFailurePolicy" message "{message}"'


SUCCESS_HEADER = """\
# The Job controller's successPolicy, translated by the table of docs/language.md:
"""


def translate_success(spec: dict[str, Any]) -> str:
    """The rules of an Indexed batch/v1 Job that succeeds by its `successPolicy`: one verdict per
    rule, in order, before the Job's usual ones."""
    rules = spec["successPolicy"]["rules"]
    lines = [SUCCESS_HEADER] + [f"#   {json.dumps(rule, sort_keys=True)}\n" for rule in rules]
    lines.append("\n" + KIND)
    for index, rule in enumerate(rules):
        condition = _succeeded(rule, int(spec["completions"]))
        if condition is not None:
            lines.append(f"    succeeded  when {condition}\n"
                         f'               reason "SuccessPolicy" message "Matched rules at index {index}"\n')
    lines.append(VERDICTS)
    return fmt.format_text("".join(lines) + "}\n")


def indexes(text: str, completions: int) -> list[int]:
    """The indexes of a `succeededIndexes` ("0,2-4"): those below `completions`."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        out.extend(i for i in range(int(first), int(last or first) + 1) if i < completions)
    return out


def _succeeded(rule: dict[str, Any], completions: int) -> str | None:
    """The condition of a success rule; None for one that never matches (no index). A rule
    holds only once some index has succeeded, whatever its count (`succeededCount: 0`)."""
    count = rule.get("succeededCount")
    wanted = indexes(rule["succeededIndexes"], completions) if "succeededIndexes" in rule else None
    if wanted == []:
        return None
    if count == 0:
        return "any pod succeeded"
    if wanted is None:
        return f"count pods succeeded >= {count}"
    if count is None or count >= len(wanted):
        return " and ".join(f'any pod of task "{i}" succeeded' for i in wanted)
    tasks = ", ".join(f'"{i}"' for i in wanted)
    return f"count pods succeeded with (task in [{tasks}]) >= {count}"


# -- jobrules' decision about one failed pod, in the terms of the Kubernetes oracle ------------

def decision(found: Any, pod: str) -> dict[str, Any]:
    """What an evaluation (`runtime.evaluator.Evaluation`) decided about the failure of the pod
    named `pod`, as tools/oracle/oracle_test.go reports matchPodFailurePolicy's answer: the rule
    (`index`; -1: the default handling), its `action` (None: no rule), the FailJob `message`,
    whether the failure `counts`. Anything else is answered as what was seen instead."""
    taken = [e.policy for e in found.events
             if e.event in ("podFailed", "podEvicted") and e.pod == pod and e.policy]
    if len(taken) != 1:
        return {"taken by": taken}
    policy = taken[0]
    actions = [a for a in found.actions if a.policy == policy and a.target.pod in (pod, None)]
    index = -1 if policy == "default" else int(policy.split("-")[1])
    message = None
    if not actions:
        action = "Ignore"
    elif actions[0].budget is not None and actions[0].budget.key.startswith("backoff"):
        action = "Count"  # counted, or the limit's fallback once spent
    elif actions[0].action == "failJob":
        action, message = "FailJob", actions[0].message
        verdict = found.verdict
        if (verdict.phase, verdict.reason, verdict.message) != ("Failed", "PodFailurePolicy", message):
            return {"verdict": verdict}
    elif actions[0].action == "failTask":
        action = "FailIndex"
    else:
        return {"actions": actions}
    if index < 0:  # the default handling counts the failure: no rule matched
        return {"action": None if action == "Count" else f"default {action}", "index": -1,
                "message": None, "counts": action == "Count"}
    return {"action": action, "index": index, "message": message, "counts": action != "Ignore"}
