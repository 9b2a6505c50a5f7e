"""The names check (rulec/checks/names.py): declarations declared twice, causes' names and
hints, cause terms where none may be, define cycles and nesting, each finding whole. Nesting
depths are counted by hand: each AST node with children is a level (`is NAME` and `cause`
count as deep as what they stand for), a node without children none."""
from __future__ import annotations

from tests.unit.rulec.said import job, said

FIRST = "  note {}: first declared here"
HINT_HELP = '  help: say what the job\'s owner can do: "the container ran out of memory: raise its limit"'
ONE_LINE = "R310 expected a hint of one line of 1 to 200 characters; this one"
NO_CAUSE_HELP = "  help: put the filter both need in a `define` and use `is NAME` in each"
SIDE_BY_SIDE = "  help: use defines side by side rather than each inside the next"


def test_each_kind_of_declaration_declared_twice_is_said_at_the_second() -> None:
    text = ("job j: batch/v1 Job {\n    succeeded when all pods succeeded\n}\n"
            "job j: example.com/v1, v1, v2 Run {\n    succeeded when all pods succeeded\n}\n"
            "job k: batch/v1 Job {\n    succeeded when all pods succeeded\n}\n"
            "define d = exit 1\ndefine d = exit 2\n"
            'cause "c" when exit 1 hint "h"\ncause "c" when exit 2 hint "h"\n'
            'inject "x#0" into pods of j {}\ninject "x#0" into pods of j {}\n'
            'inject "y" into pods of j {}\ninject "y" into pods of j {}\n'
            'inject "t#17" into pods of j {}\ninject into pods of j {}\ninject into pods of j {}\n')
    defaults = "  help: unnamed injections are called FILESTEM#N, N counting the file's injections from 0"
    assert said(text, ends=True) == [
        "t.rules:4:5-4:6 R105 kind `j` is declared twice", FIRST.format("t.rules:1:5"),
        "t.rules:4:24-4:26 R106 version `example.com/v1` is listed twice",
        "  note t.rules:4:8: first listed here",
        "t.rules:7:8-7:16 R105 `batch/v1 Job` is declared twice", FIRST.format("t.rules:1:8"),
        "t.rules:11:8-11:9 R105 define `d` is declared twice", FIRST.format("t.rules:10:8"),
        't.rules:13:7-13:10 R105 cause "c" is declared twice', FIRST.format("t.rules:12:7"),
        't.rules:15:8-15:13 R105 injection "x#0" is declared twice',
        f"{defaults}; choose another name", FIRST.format("t.rules:14:8"),
        't.rules:17:8-17:11 R105 injection "y" is declared twice', FIRST.format("t.rules:16:8"),
    ]   # the unnamed ones are t#5 and t#6 (N counts the file's injections, named ones too)
    # an unnamed injection whose default name is taken is said at its `inject` keyword: the
    # file's second injection is t#1
    text = ('job j: batch/v1 Job {\n    succeeded when all pods succeeded\n}\n'
            'inject "t#1" into pods of j {}\ninject into pods of j {}\ninject into pods of j {}\n')
    assert said(text, ends=True) == [
        't.rules:5:1-5:7 R105 unnamed injection "t#1" is declared twice',
        f'{defaults}; name this one: `inject "name" into ...`', FIRST.format("t.rules:4:8")]


def test_a_name_declared_twice_means_its_first_declaration() -> None:
    """Uses of the name read the first: the second `d` would close a cycle through `e`, the
    first does not, so only the duplicate is said."""
    text = ("job j: batch/v1 Job {\n    succeeded when all pods succeeded\n}\n"
            "define d = exit 1\ndefine d = is e\ndefine e = is d\n")
    assert said(text, ends=True) == [
        "t.rules:5:8-5:9 R105 define `d` is declared twice", FIRST.format("t.rules:4:8")]


def test_a_cause_s_name_and_hint_are_said_whole() -> None:
    text = job("") + ('cause "none" when exit 1 hint ""\n'
                      'cause "Bad" when exit 1 hint " x"\n'
                      'cause "ok" when cause "none" hint "a\\tb"\n'
                      'cause "ok2" when exit 1 hint "' + "x" * 201 + '"\n'
                      'cause "ok3" when exit 1 hint "a\\nb"\n'
                      'cause "ok4" when exit 1 hint "' + "x" * 200 + '"\n'
                      'cause "ok5" when exit 1 hint "X marks the spot"\n'
                      'define e = cause "ok"\n')
    assert said(text) == [
        't.rules:5:7 R311 expected a cause name other than "none", the metric\'s label for '
        "failures that no cause matched",
        f"t.rules:5:31 {ONE_LINE} is empty", HINT_HELP,
        't.rules:6:7 R311 expected a cause name such as "oom" or "image_pull", got "Bad"',
        "  help: a lower-case letter, then lower-case letters, digits and `_`, at most 63 characters",
        f"t.rules:6:30 {ONE_LINE} has a space at one end", HINT_HELP,
        't.rules:7:17 R407 expected no `cause` term in the `when` of cause "ok"', NO_CAUSE_HELP,
        f"t.rules:7:35 {ONE_LINE} holds a control character", HINT_HELP,
        f"t.rules:8:30 {ONE_LINE} is 201 characters long", HINT_HELP,
        f"t.rules:9:30 {ONE_LINE} is not one line", HINT_HELP,
        "t.rules:12:12 R407 expected no `cause` term in define `e`", NO_CAUSE_HELP]


def test_a_define_cycle_is_said_once_with_its_path() -> None:
    assert said(job("") + "define a = is b\ndefine b = is c\ndefine c = is a\n") == [
        "t.rules:5:8 R107 define `a` uses itself: a -> b -> c -> a"]


def test_nesting_is_said_with_what_it_counts() -> None:
    # kind 1, verdict 2, the nots 3..101 (a quantifier without filter is no level); the 101st
    # level is the 99th `not`, at column 17 + 4 * 98
    assert said(job("    failed when " + "not " * 99 + "any pod failed")) == [
        "t.rules:3:409 R005 this nests 101 levels deep; at most 100 levels can be evaluated"]
    # d0: 60 nots and the exit term, 61 levels; the kind: quantifier 3, nots 4..43, then `is d0`
    # at 44 counts 61 more: 105, said at the define's use (column 38 + 4 * 40)
    d0 = "define d0 = " + "not " * 60 + "exit 1\n"
    uses = "    failed when any pod failed with (" + "not " * 40 + "{})"
    assert said(d0 + job(uses.format("is d0"))) == [
        "t.rules:4:198 R005 this nests 105 levels deep with the defines it uses; at most 100 "
        "levels can be evaluated", SIDE_BY_SIDE]
    # a cause whose `when` is `is d0` (1 + 61 levels) used at 44: 106
    cause = 'cause "c" when is d0 hint "h"\n'
    assert said(d0 + cause + job(uses.format('cause "c"'))) == [
        "t.rules:5:198 R005 this nests 106 levels deep with the causes and defines it uses; at "
        "most 100 levels can be evaluated", SIDE_BY_SIDE]
    # a cause too deep itself is said at itself only, not again where it is used
    deep = 'cause "c" when ' + "not " * 120 + 'exit 1 hint "h"\n'
    assert said(deep + job('    failed when any pod failed with cause "c"')) == [
        "t.rules:1:416 R005 this nests 121 levels deep; at most 100 levels can be evaluated"]


def test_a_name_not_declared_adds_no_level() -> None:
    """At 100 levels an unknown define or cause is said as unknown, not as one level too deep:
    kind 1, verdict 2, the nots 3..98, the quantifier 99, the term 100 and nothing for it."""
    uses = "    failed when " + "not " * 96 + "any pod failed with {}"
    assert said(job(uses.format("(is nope)"))) == ["t.rules:3:425 R102 no define is called `nope`"]
    assert said(job(uses.format('cause "nope"'))) == [
        't.rules:3:427 R109 expected the name of a declared cause, got "nope"',
        '  help: declare it: `cause "name" when FILTER hint "..."`']


def test_a_core_kind_s_versions_are_told_apart_without_a_group() -> None:
    assert said("job p: v1, v1 Pod {\n    succeeded when all pods succeeded\n}\n") == [
        "t.rules:1:12 R106 version `v1` is listed twice", "  note t.rules:1:8: first listed here"]


def test_a_declaration_too_deep_is_not_checked_further() -> None:
    # the invalid label key below the limit is not read: only the depth is said
    assert said(job("    failed when " + "not " * 99 + 'any pod failed with label "-x" exists')) == [
        "t.rules:3:409 R005 this nests 103 levels deep; at most 100 levels can be evaluated"]


def test_a_define_cycle_is_said_once_whoever_else_uses_it() -> None:
    assert said(job("") + "define a = is b\ndefine b = is a\ndefine c = is a\n") == [
        "t.rules:5:8 R107 define `a` uses itself: a -> b -> a"]


def test_a_define_counts_as_deep_as_a_define_declared_after_it() -> None:
    # b: 99 nots and the exit term, 100 levels; a = `is b`: 101
    text = "define a = is b\ndefine b = " + "not " * 99 + "exit 1\n" + job("")
    assert said(text) == [
        "t.rules:1:12 R005 this nests 101 levels deep with the defines it uses; at most 100 levels "
        "can be evaluated", SIDE_BY_SIDE]
