"""The filters check (rulec/checks/filters.py): container scopes, each filter term, exit codes
and the counts of conditions, each finding whole."""
from __future__ import annotations

from tests.unit.rulec.said import TASKED, job, said

KEY_RULE = "the name part must be alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric"
NO_TASK = "  help: add `task label \"...\"` or `task <<expr>>` to the kind"
EXIT_ZERO = ["R302 exit 0 in a filter on a failure never matches",
             "  help: on a failure only containers that exited non-zero are read; match the code "
             "they exit with"]


def test_a_container_term_scopes_one_filter_from_its_top_level_and() -> None:
    text = job('    on pod failed (container "a" or exit 1) and container "b" and container "c" '
               '-> ignore\n    on pod failed container "d" and label "x" exists -> ignore')
    assert said(text) == [
        "t.rules:3:20 R407 `container` must be joined with `and` at the top of the filter",
        "  help: it scopes every exit, reason and restarts term of its filter",
        "t.rules:3:67 R407 a filter scopes to one container",
        "  note t.rules:3:49: the first `container` term",
        "t.rules:4:19 R407 this `container` term scopes nothing",
        "  help: join it with an `exit`, `reason` or `restarts` term using `and`"]


def test_each_filter_term_is_checked() -> None:
    text = job('    on pod failed restarts > -1 and label "-k" in ["a b"] and '
               'condition "Ready" in ["true", "Maybe"] -> ignore\n'
               '    on pod failed is nodef and cause "nocause" -> ignore')
    assert said(text) == [
        "t.rules:3:30 R306 a restart count is never negative",
        f't.rules:3:43 R303 invalid label key "-k": {KEY_RULE}',
        't.rules:3:52 R304 invalid label value "a b": it must be alphanumerics, `-`, `_` and `.`, '
        "starting and ending alphanumeric",
        't.rules:3:85 R309 a condition status is never "true"',
        "  help: did you mean `True`?",
        't.rules:3:93 R309 a condition status is never "Maybe"',
        '  help: condition statuses are "True", "False" and "Unknown"',
        "t.rules:4:22 R102 no define is called `nodef`",
        't.rules:4:38 R109 expected the name of a declared cause, got "nocause"',
        '  help: declare it: `cause "name" when FILTER hint "..."`']


def test_unknown_defines_and_causes_suggest_known_ones() -> None:
    text = 'define ddd = exit 1\ncause "ccc" when exit 1 hint "h"\n' + \
        job('    on pod failed is dddd and cause "cccc" -> ignore')
    assert said(text) == [
        "t.rules:5:22 R102 no define is called `dddd`", "  help: did you mean `ddd`?",
        't.rules:5:37 R109 expected the name of a declared cause, got "cccc"',
        "  help: did you mean `ccc`?"]


def test_exit_codes_out_of_the_32_bit_range_empty_ranges_and_exit_0_on_failures() -> None:
    text = job("    on pod failed exit in [0, 4294967296, -2147483649, 2147483647, -2147483648] "
               "-> ignore\n"
               "    on pod failed exit 300..200 -> ignore\n"
               "    on pod failed not exit 0 -> ignore\n"
               "    on pod failed exit 0 -> ignore\n"
               "    on pod failed exit 3..3 -> ignore\n"
               "    on pod failed exit 1..2147483648 -> ignore")
    assert said(text, ends=True) == [
        f"t.rules:3:28-3:29 {EXIT_ZERO[0]}", EXIT_ZERO[1],
        "t.rules:3:31-3:41 R301 exit code 4294967296 is outside the 32-bit range of exit codes "
        "and never matches",
        "t.rules:3:43-3:54 R301 exit code -2147483649 is outside the 32-bit range of exit codes "
        "and never matches",
        "t.rules:4:24-4:32 R301 the range 300..200 is empty",
        f"t.rules:6:24-6:25 {EXIT_ZERO[0]}", EXIT_ZERO[1],
        "t.rules:8:27-8:37 R301 exit code 2147483648 is outside the 32-bit range of exit codes "
        "and never matches"]


def test_the_counts_and_task_terms_of_a_condition() -> None:
    text = job('    failed when count pods of task "a" failed >= -1 or count tasks failed > -2 or '
               "any task failed or not <<spec.x>>\n"
               "    on pod failed -> restart job max 1\n"
               "    actions { restart job -> await count pods >= -3 within 10s, delete pods }")
    assert said(text) == [
        "t.rules:3:36 R408 `of task` needs a task, but kind `j` declares no `task`", NO_TASK,
        "t.rules:3:50 R306 a count of pods is never negative",
        "t.rules:3:56 R408 `count tasks` needs a task, but kind `j` declares no `task`", NO_TASK,
        "t.rules:3:77 R306 a count of tasks is never negative",
        "t.rules:3:83 R408 a task condition needs a task, but kind `j` declares no `task`", NO_TASK,
        "t.rules:5:50 R306 a count of pods is never negative"]


def test_the_filters_of_defines_and_causes_are_checked_as_no_failure_s() -> None:
    # exit 0 is no mistake there: a define or a cause may be used on any pod
    text = job("") + ('define d = label "-x" exists or exit 0\n'
                      'cause "c" when restarts > -1 or exit 0 hint "h"\n')
    assert said(text) == [
        f't.rules:5:18 R303 invalid label key "-x": {KEY_RULE}',
        "t.rules:6:27 R306 a restart count is never negative"]


def test_terms_under_not_and_or_are_checked_with_their_polarity() -> None:
    text = job('    on pod failed not not exit 0 -> ignore\n'          # two nots: exit 0 again
               '    on pod failed not task "a" -> ignore\n'
               '    on pod failed label "x" exists and (task "b" or exit 0) -> ignore\n'
               '    on pod failed container "Bad_C" and restarts >= 0 -> ignore')
    assert said(text) == [
        f"t.rules:3:32 {EXIT_ZERO[0]}", EXIT_ZERO[1],
        "t.rules:4:23 R408 a task filter needs a task, but kind `j` declares no `task`", NO_TASK,
        "t.rules:5:41 R408 a task filter needs a task, but kind `j` declares no `task`", NO_TASK,
        f"t.rules:5:58 {EXIT_ZERO[0]}", EXIT_ZERO[1],
        't.rules:6:29 R305 invalid container name "Bad_C": it must be lower-case alphanumerics and '
        "`-`, starting and ending alphanumeric"]


def test_a_task_condition_under_not_and_a_where_term_are_checked() -> None:
    text = job("    failed when not any task failed\n"
               "    on pod failed where <<status.phase>> -> ignore")
    assert said(text) == [
        "t.rules:3:21 R408 a task condition needs a task, but kind `j` declares no `task`", NO_TASK,
        "t.rules:4:25 R203 this condition can only be a string, which is true whenever it is "
        "non-empty",
        "  help: compare it, e.g. `status.phase == 'Failed'`, or test it with a function such as "
        "`contains(...)`"]


def test_a_task_filter_of_a_verdict_condition_needs_a_task() -> None:
    assert said(job('    failed when any pod failed with task "a"')) == [
        "t.rules:3:37 R408 a task filter needs a task, but kind `j` declares no `task`", NO_TASK]


def test_a_count_of_tasks_may_be_zero_but_not_negative() -> None:
    text = job("    failed when count tasks failed == 0\n"
               "    running when count tasks running > -1", TASKED)
    assert said(text) == ["t.rules:5:40 R306 a count of tasks is never negative"]
