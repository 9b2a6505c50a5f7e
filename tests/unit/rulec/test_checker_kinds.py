"""The kinds check (rulec/checks/kinds.py): a kind's scope and `extend`, each finding whole."""
from __future__ import annotations

from tests.unit.rulec.said import job, said

SCOPE = ("R407 a kind's scope is an `and` of `label` tests and `namespace` lists",
         '  help: it must be a Kubernetes label selector and the namespaces to watch: `where label '
         '"team" = "ml" and namespace in ["a"]`')


def test_a_scope_takes_label_tests_and_namespace_lists_only() -> None:
    text = ('job j: batch/v1 Job where label "-t" = "ml" and not namespace in ["a"] and '
            'namespace not in ["b"] and namespace in ["c"] {\n'
            "    succeeded when all pods succeeded\n}\n")
    assert said(text) == [
        't.rules:1:33 R303 invalid label key "-t": the name part must be alphanumerics, `-`, `_` '
        "and `.`, starting and ending alphanumeric",
        f"t.rules:1:49 {SCOPE[0]}", SCOPE[1],      # a negated namespace list is no list to watch
        f"t.rules:1:76 {SCOPE[0]}", SCOPE[1]]


def test_extending_an_unknown_kind_suggests_a_known_one() -> None:
    text = "job j: batch/v1 Job {\n    succeeded when all pods succeeded\n}\n" \
           "extend jj { on pod failed -> ignore }\n"
    assert said(text) == ["t.rules:4:8 R101 no kind is called `jj`", "  help: did you mean `j`?"]


KEY_RULE = "the name part must be alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric"
VERDICT_PLACEHOLDERS = ("job, namespace, kind, task, pod, container, container_reason, exit_code, "
                        "pod_reason, phase, count, total, restarts, event, budget_used, budget_max")


def test_each_statement_of_a_kind_is_checked() -> None:
    text = ('job j: batch/v1 Job {\n    primary containers prefix "Bad_"\n'
            '    pods label "-l" = "a b"\n    pods label "m" = "{exit_code}{nope}"\n'
            '    task label "-t"\n    primary pods label "-p" exists\n'
            '    succeeded when all pods succeeded reason "{argv}" message "{nope}"\n'
            "    running otherwise\n    failed when any pod failed\n"
            '    status { phase at status.phase over ["A", "B", "A"] }\n}\n')
    assert said(text) == [
        't.rules:2:31 R305 invalid container name prefix "Bad_": no container name starts with it',
        "  help: container names are lower-case letters, digits and `-`, starting with a letter "
        "or digit, at most 63 characters",
        f't.rules:3:16 R303 invalid label key "-l": {KEY_RULE}',
        't.rules:3:23 R304 invalid label value "a b": it must be alphanumerics, `-`, `_` and `.`, '
        "starting and ending alphanumeric",
        "t.rules:4:23 R104 placeholder `{exit_code}` has no value in a pod selector",
        "  help: placeholders here: job, namespace, kind",
        "t.rules:4:34 R104 unknown placeholder `{nope}`",
        "  help: placeholders here: job, namespace, kind",
        f't.rules:5:16 R303 invalid label key "-t": {KEY_RULE}',
        f't.rules:6:24 R303 invalid label key "-p": {KEY_RULE}',
        "t.rules:7:47 R104 placeholder `{argv}` has no value in a verdict",
        "  help: `{argv}` exists only in `wrap ... with shell`",
        "t.rules:7:64 R104 unknown placeholder `{nope}`",
        f"  help: placeholders here: {VERDICT_PLACEHOLDERS}",
        "t.rules:9:5 R404 this `failed` verdict is never used",
        "  note t.rules:8:5: `otherwise` before it always holds",
        "t.rules:10:52 R106 value 'A' is listed twice in `over`",
        "  note t.rules:10:42: first listed here"]


def test_primary_containers_and_the_status_phases_are_checked() -> None:
    text = ('job j: batch/v1 Job {\n    primary containers ["Main_C"]\n'
            "    succeeded when all pods succeeded\n"
            "    status { phase at status.phase only [Failed, failed, Nope] "
            'map { Succeeded: "S", succeeded: "T" } }\n}\n')
    assert said(text) == [
        't.rules:2:25 R305 invalid container name "Main_C": it must be lower-case alphanumerics '
        "and `-`, starting and ending alphanumeric",
        "t.rules:4:50 R106 phase `failed` is listed twice",
        "  note t.rules:4:42: first listed here",
        "t.rules:4:58 R103 unknown phase `Nope`",
        "  help: phases are Pending, Running, Suspended, Restarting, Succeeded, Failed",
        "t.rules:4:86 R106 phase `succeeded` is mapped twice",
        "  note t.rules:4:70: first mapped here"]


def test_a_kind_without_a_terminal_verdict_is_said_at_its_name() -> None:
    assert said("job j: batch/v1 Job {\n    running when any pod running\n}\n") == [
        "t.rules:1:5 R403 kind `j` never becomes Succeeded or Failed",
        "  help: add verdicts such as `succeeded when all pods succeeded` and `failed when any "
        "pod failed`"]


def test_an_unknown_phase_suggests_a_close_one_or_lists_them() -> None:
    text = ("job j: batch/v1 Job {\n    succeeded when all pods succeeded\n"
            "    status { phase at status.p only [Faild] }\n"
            "    on job verdict changed to Sucess -> ignore\n}\n")
    assert said(text) == [
        "t.rules:3:38 R103 unknown phase `Faild`", "  help: did you mean `Failed`?",
        "t.rules:4:31 R103 unknown phase `Sucess`",
        "  help: phases are Pending, Running, Suspended, Restarting, Succeeded, Failed"]


def test_a_container_name_prefix_of_a_valid_name_is_fine() -> None:
    for prefix in ("w-", "a" * 62, "0"):
        text = f'job j: batch/v1 Job {{\n    primary containers prefix "{prefix}"\n' \
               "    succeeded when all pods succeeded\n}\n"
        assert said(text) == [], prefix


def test_a_verdicts_message_is_checked_for_placeholders_as_its_reason_is() -> None:
    assert said(job('    failed when any pod failed message "{argv}"')) == [
        "t.rules:3:41 R104 placeholder `{argv}` has no value in a verdict",
        "  help: `{argv}` exists only in `wrap ... with shell`"]


def test_the_primary_pods_filter_is_checked_against_the_kind_and_not_as_a_failure() -> None:
    """A task term needs the kind's task; `exit 0` is no failure's exit here, so not R302."""
    assert said(job('    primary pods task "m" and exit 0')) == [
        "t.rules:3:18 R408 a task filter needs a task, but kind `j` declares no `task`",
        '  help: add `task label "..."` or `task <<expr>>` to the kind']


def test_every_verdict_after_otherwise_is_said_to_be_unused() -> None:
    text = ("job j: batch/v1 Job {\n    succeeded when all pods succeeded\n    pending otherwise\n"
            "    failed when any pod failed\n    running when any pod running\n}\n")
    assert said(text) == [
        "t.rules:4:5 R404 this `failed` verdict is never used",
        "  note t.rules:3:5: `otherwise` before it always holds",
        "t.rules:5:5 R404 this `running` verdict is never used",
        "  note t.rules:3:5: `otherwise` before it always holds"]
