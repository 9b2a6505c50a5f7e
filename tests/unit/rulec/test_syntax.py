"""Parsing and syntax errors: messages in words, one position format, the open block named."""
from __future__ import annotations

import pytest

from rulec import api, lower, syntax
from rulec.source import SourceFile


def error(text: str):
    parsed = syntax.parse(SourceFile.from_text("t.rules", text))
    assert parsed.tree is None
    [d] = parsed.diagnostics
    return d


@pytest.mark.parametrize("text,code,message,position", [
    ("job j: v1 Pod { on pod faild -> ignore }", "R002", "unknown pod event `faild`", (1, 24)),
    ("job j: v1 Pod { on pod failed -> restrat pod }", "R002", "unknown action `restrat`", (1, 34)),
    ("job j: v1 Pod { faild when any pod failed }", "R002", "unknown kind statement `faild`",
     (1, 17)),
    ("job j: v1 Pod { primry container \"x\" }", "R002", "unknown kind statement `primry`",
     (1, 17)),
    ("jbo j: v1 Pod {}", "R002", "unknown declaration `jbo`", (1, 1)),
    ("job j: v1 Pod { on pod failed exit 1 restart pod }", "R001",
     "unexpected `restart`; expected `and`, `or`, `->` or `..`", (1, 38)),
    ("job j: v1 Pod { failed when }", "R001", "unexpected `}`; expected a condition", (1, 29)),
    ("job j: v1 Pod { failed when any pod failed @ }", "R001", "unexpected character `@`",
     (1, 44)),
    ("job j: v1 Pod {\n  failed when <<a\n}\n", "R001", "this `<<` is never closed by `>>`",
     (2, 15)),
    ('job j: v1 Pod {\n  failed when any pod failed reason "x\n}\n', "R001",
     "this string is never closed", (2, 37)),
    ("job j: v1 Pod {\n  pods owned\n\n", "R001", "unexpected end of file", (2, 13)),
    ("job j: v1 Pod { failed when any pod failed with exit 1 and exit 2 }", "R001",
     "unexpected `exit`; expected a condition", (1, 60)),
    # A closed expression where a filter term belongs is no unclosed `<<`.
    ("job j: v1 Pod { on pod failed exit 1 and <<x>> -> ignore }", "R001",
     "a JMESPath test of the pod needs `where` before it", (1, 42)),
    ("job j: v1 Pod { failed when any pod failed <<x>> }", "R001",
     "a JMESPath test of the pod needs `with where` before it", (1, 44)),
    ("job j: v1 Pod { pods <<x>> }", "R001", "unexpected JMESPath expression; expected `label` "
     "or `owned`", (1, 22)),
    # Invisible and control characters are named, not printed raw.
    ("job j: v1 Pod {\u00a0}", "R001", "unexpected character U+00A0 (no-break space)", (1, 16)),
    ("job j: v1 Pod {\u200b}", "R001", "unexpected character U+200B (zero width space)", (1, 16)),
    ("job j: v1 Pod {\ufeff}", "R001", "unexpected character U+FEFF (byte order mark)", (1, 16)),
    ("job j: v1 Pod {\x00}", "R001", "unexpected character U+0000 (null)", (1, 16)),
    ("job j: v1 Pod {\x1b}", "R001", "unexpected character U+001B (escape)", (1, 16)),
])
def test_syntax_errors(text: str, code: str, message: str, position: tuple[int, int]) -> None:
    d = error(text)
    assert d.code == code and d.message.startswith(message), d.message
    assert (d.span.line, d.span.column) == position


def test_expected_words_not_token_names() -> None:
    d = error("job j: v1 Pod { on pod failed -> }")
    assert "an action (`fail job|task`" in d.message
    assert "__ANON" not in d.message and "RBRACE" not in d.message and "NAME" not in d.message


def test_filter_after_with_hints_at_parentheses() -> None:
    d = error("job j: v1 Pod { failed when any pod failed with exit 1 and exit 2 }")
    assert d.help is not None and "with (exit 1 and" in d.help


def test_misspelling_suggests_the_keyword() -> None:
    d = error("job j: v1 Pod { on pod evcted -> ignore }")
    assert d.help == "did you mean `evicted`?"


def test_keyword_in_the_wrong_place_is_not_unknown() -> None:
    d = error("job j: v1 Pod { on pod failed -> fail pod }")
    assert d.code == "R001" and d.message.startswith("unexpected `pod`; expected `job`")


def test_unclosed_block_at_end_of_file_names_its_opener() -> None:
    d = error('job j: v1 Pod {\n  status {\n    no events\n  }\n')
    [note] = d.notes
    assert note.message == "the block opened by this `{` is not closed"
    assert note.span is not None and (note.span.line, note.span.column) == (1, 15)


def test_error_inside_a_block_names_it() -> None:
    d = error('inject into pods of j {\n  sidecar "s" {\n    imag "x"\n  }\n}\n')
    assert d.message == "unknown word `imag`" or d.message.startswith("unknown")
    assert any(n.span is not None and n.span.line == 2 for n in d.notes)


def test_comments_are_collected_with_positions() -> None:
    parsed = syntax.parse(SourceFile.from_text(
        "t.rules", '# head\njob j: v1 Pod { # a\n  pods owned  # b\n}\n'))
    assert [(c.text, c.span.line, c.span.column) for c in parsed.comments] == [
        ("# head", 1, 1), ("# a", 2, 17), ("# b", 3, 15)]


def test_hash_inside_strings_and_expressions_is_not_a_comment() -> None:
    parsed = syntax.parse(SourceFile.from_text(
        "t.rules", 'job j: v1 Pod { failed when any pod failed reason "#1" message <<\'#\'>> }'))
    assert parsed.tree is not None and parsed.comments == ()


def test_expression_may_hold_closing_marks_in_literals() -> None:
    text = "job j: v1 Pod { failed when <<a == '>>' || b == `\">>\"` || \"x>>\" == c>> }"
    parsed = syntax.parse(SourceFile.from_text("t.rules", text))
    assert parsed.tree is not None
    out: list = []
    file = lower.lower(parsed, out)
    verdict = file.decls[0].verdicts[0]
    assert verdict.when.expr.text == "a == '>>' || b == `\">>\"` || \"x>>\" == c"
    assert (verdict.when.expr.line, verdict.when.expr.column) == (1, 31)


def test_string_may_embed_an_expression_with_double_quotes() -> None:
    text = 'job j: v1 Pod { failed when any pod failed message "x {<<labels."a/b">>} y" }'
    parsed = syntax.parse(SourceFile.from_text("t.rules", text))
    out: list = []
    message = lower.lower(parsed, out).decls[0].verdicts[0].message
    assert message.parts[0] == "x " and message.parts[2] == " y"
    assert message.parts[1].text == 'labels."a/b"' and message.parts[1].column == 58


@pytest.mark.parametrize("text,seconds", [("30s", 30), ("10m", 600), ("1h30m", 5400),
                                          ("1d", 86400)])
def test_durations(text: str, seconds: int) -> None:
    assert lower.duration_seconds(text) == seconds


@pytest.mark.parametrize("text,hint", [
    ("job j: v1 Pod { failed when pod failed }", "starts with a quantifier"),
    ("job j: v1 Pod { on pod failed restart pod }", "the action comes after `->`"),
    ("job j: v1 Pod { primary container main }", 'write "main"'),
    ("job j: v1 Pod { failed when any pod failed reason PodFailed }", 'write "PodFailed"'),
    ("job j: v1 Pod { on pod failed exit 1 or <<a == 'b'>> -> ignore }", "write `where <<a == 'b'>>`"),
    ("job j: v1 Pod { failed when any pod failed <<a>> }", "or `and <<a>>` for a test of the job"),
])
def test_hints(text: str, hint: str) -> None:
    d = error(text)
    assert d.help is not None and hint in d.help, d.help


def test_no_parenthesis_hint_without_with() -> None:
    d = error("job j: v1 Pod { failed when any pod failed and exit 1 }")
    assert d.help is None or "parenthesize" not in d.help


# ---------------------------------------------------------------- recovery after a syntax error

def check(text: str) -> list[tuple[str, int, int, str]]:
    """`rulec check` of one file: (code, line, column, message) of every finding, in order."""
    result = api.build_sources([SourceFile.from_text("t.rules", text)], emit_plan=False)
    return [(d.code, d.span.line, d.span.column, d.message) for d in result.diagnostics]


TWO_BROKEN = '''\
job a: v1 Pod {
    pods owned
    failed when any pod faild
}

define ok = exit 1

job b: v1 Pod {
    pods owned
    on pod failed restart pod
}
'''


def test_syntax_errors_in_two_declarations_are_both_reported() -> None:
    found = check(TWO_BROKEN)
    assert [f[:3] for f in found] == [("R002", 3, 25), ("R001", 10, 19)]
    assert found[0][3] == "unknown pod state `faild`"
    assert found[1][3].startswith("unexpected `restart`; expected ")


def test_the_first_error_is_the_whole_file_parse_error() -> None:
    whole = syntax.parse(SourceFile.from_text("t.rules", TWO_BROKEN))
    recovered = syntax.parse(SourceFile.from_text("t.rules", TWO_BROKEN), recover=True)
    assert recovered.tree is None and recovered.diagnostics[0] == whole.diagnostics[0]
    assert recovered.partial is not None and len(recovered.partial.children) == 1


def test_syntax_error_and_semantic_error_elsewhere() -> None:
    found = check('''\
job a: v1 Pod {
    pods owned
    failed when any pod failed
    on pod failed -> restart pod max 0
}

inject into pods of a {
    label "x" = "y" oops
}
''')
    assert [f[:3] for f in found] == [("R306", 4, 38), ("R001", 8, 21)]


def test_unclosed_block_is_reported_at_the_next_declaration() -> None:
    found = check('''\
job a: v1 Pod {
    pods owned
    failed when any pod failed

job b: v1 Pod {
    pods owned
    failed when any pod failed
    on pod failed -> restart pod max 0
}

webhook timeout
''')
    assert [f[:3] for f in found] == [("R001", 5, 1), ("R306", 8, 38), ("R001", 11, 16)]
    assert found[0][3].startswith("unexpected `job`; expected ")
    assert found[2][3].startswith("unexpected end of file; expected ")


def test_a_broken_kind_or_define_causes_no_unknown_name_errors() -> None:
    found = check('''\
job vcjob: batch.volcano.sh/v1alpha1 Job {
    pods owned
    failed when any pod failed with
}

define crashed = exit in [1, 2

jbo other: v1 Pod {}

job b: v1 Pod {
    pods owned
    failed when any pod failed is crashed
    succeeded when any pod failed is missing
}

inject into pods of vcjob, other, b, nosuch {
    label "x" = "y"
}
''')
    # `jbo other` is not a declaration start: it belongs to the broken define before it.
    assert [f[:3] for f in found if f[0] == "R001"] == [("R001", 4, 1), ("R001", 8, 1)]
    assert [f[3] for f in found if f[0] in ("R101", "R102")] == [
        "no define is called `missing`", "no kind is called `nosuch`"]


def test_job_conditions_at_the_start_of_a_line_do_not_split_a_kind() -> None:
    found = check('''\
job a: v1 Pod {
    pods owned
    failed when
job running longer than 1h
    on pod failed -> restart pod
}

job b: v1 Pod { pods owned failed when any pod failed and }
''')
    assert [f[:2] for f in found] == [("R402", 5), ("R001", 8)]


def test_valid_file_is_not_split() -> None:
    parsed = syntax.parse(SourceFile.from_text("t.rules", TWO_BROKEN.replace("faild", "failed")
                                               .replace("failed restart", "failed -> restart")),
                          recover=True)
    assert parsed.tree is not None and parsed.diagnostics == () and parsed.partial is None


def test_syntax_errors_are_capped_per_file() -> None:
    text = "".join(f"job k{i}: v1 Pod {{ pods owned failed when }}\n" for i in range(30))
    parsed = syntax.parse(SourceFile.from_text("t.rules", text), recover=True)
    assert len(parsed.diagnostics) == syntax.MAX_SYNTAX_ERRORS
    assert [d.span.line for d in parsed.diagnostics] == list(range(1, 21))
    assert "10 more declaration(s)" in parsed.diagnostics[-1].notes[-1].message


def test_declaration_cut_short_by_the_next_one_keeps_the_next_one() -> None:
    # `failed when` reads the next line's `job` as `job running longer than`: the error is where
    # the whole file fails, and kind `b` (sound on its own) is still declared.
    found = check('''\
job a: v1 Pod {
    pods owned
    failed when
job b: v1 Pod { pods owned failed when any pod failed }
inject into pods of b, a { label "x" = "y" }
''')
    assert found == [("R001", 4, 5, "unexpected `b`; expected `running`")]


# ---------------------------------------------------------------- where lowering puts each node
# Found by mutants of rulec/lower.py: the spans below reach a diagnostic only in these cases.

def spans(text: str) -> list[tuple[str, tuple[int, int, int, int], str]]:
    """`rulec check` of one file: (code, (line, column, end line, end column), message)."""
    result = api.build_sources([SourceFile.from_text("t.rules", text)], emit_plan=False)
    return [(d.code, (d.span.line, d.span.column, d.span.end_line, d.span.end_column), d.message)
            for d in result.diagnostics]


TASKED = 'job j: batch/v1 Job {\n    task label "r"\n    succeeded when all pods succeeded\n'
FILTER_TERMS = ['exit 1', 'reason "x"', 'pod reason "x"', 'condition "C"',
                'condition "C" = "False" reason "R"', 'restarts > 1', 'task "w"']


@pytest.mark.parametrize("term", [*FILTER_TERMS, "where <<x>>", 'label "a" exists and exit 1',
                                  "exit 1 or exit 2", "not exit 1"])
def test_a_filter_of_a_job_event_is_reported_over_the_whole_term(term: str) -> None:
    line = f"    on job verdict changed {term} -> ignore"
    start = line.index(term) + 1
    assert spans(TASKED + line + "\n}\n") == [
        ("R407", (4, start, 4, start + len(term)),
         "`job verdict changed` concerns the job: there is no pod to filter")]


@pytest.mark.parametrize("condition, term, depth", [
    *[(f"any pod failed with {t}", None, 102) for t in ("exit 1", 'reason "x"')],
    ("count pods failed with exit 1 >= 2", None, 102),
    ("count pods failed >= <<spec.n>>", None, 101),
    ("any pod failed for 5m with exit 1", None, 102),
    ('task "w" failed', None, 101),
    ("count tasks failed >= 1", None, 101),
    *[(f"any pod failed with ({t})", t, 101) for t in FILTER_TERMS],
])
def test_a_term_past_the_nesting_limit_is_reported_over_the_term(
        condition: str, term: str | None, depth: int) -> None:
    """The kind and the verdict are the first two levels, each `not` one more: the first node
    past the limit is the condition after 98 `not`, or the term of its filter after 97."""
    line = "    failed when " + "not " * (98 if term is None else 97) + condition
    where = term or condition
    start = line.rindex(where) + 1
    assert spans(TASKED + line + "\n}\n") == [
        ("R005", (4, start, 4, start + len(where)),
         f"this nests {depth} levels deep; at most 100 levels can be evaluated")]


def test_a_task_condition_in_a_kind_without_tasks_is_reported_over_the_condition() -> None:
    assert spans('job j: batch/v1 Job {\n    succeeded when all pods succeeded\n'
                 '    failed when any task failed or count tasks >= 1\n}\n') == [
        ("R408", (3, 17, 3, 32), "a task condition needs a task, but kind `j` declares no `task`"),
        ("R408", (3, 36, 3, 52), "`count tasks` needs a task, but kind `j` declares no `task`")]


KIND = 'job j: batch/v1 Job {\n    succeeded when all pods succeeded\n'
ACTION = ('    on pod failed -> restart pod max 1 reason "a" reason "b" message "m" message "n"'
          ' budget "x" budget "y" after 1s after 2s')


def _at(line: str, clause: str) -> tuple[int, int, int, int]:
    """The span of `clause` in `line`, the third of the file."""
    start = line.index(clause) + 1
    return (3, start, 3, start + len(clause))


@pytest.mark.parametrize("body, expected", [
    ("    actions {\n        fail job -> record\n        fail job -> set spec.suspend = true\n"
     "    }\n", [("R106", (5, 9, 5, 44), "`fail job` in `actions` is given twice", (4, 9))]),
    # with `when`, any number; the plain one once
    ("    actions {\n        restart task -> record\n        restart task when <<a>> -> record\n"
     "        restart task when <<b>> -> record\n        restart task -> unsupported\n    }\n",
     [("R106", (7, 9, 7, 36), "`restart task` in `actions` is given twice", (4, 9))]),
    ("    status {\n        phase at status.p\n        reason at status.r\n"
     "        message at status.m\n        phase at status.q only [Failed]\n"
     "        reason at status.s\n        message at status.t\n        no annotations\n"
     "        no annotations\n        no condition\n        condition \"A\"\n    }\n", [
         ("R106", (7, 9, 7, 40), "`phase at` is given twice", (4, 9)),
         ("R106", (8, 9, 8, 27), "`reason at` is given twice", (5, 9)),
         ("R106", (9, 9, 9, 28), "`message at` is given twice", (6, 9)),
         ("R106", (11, 9, 11, 23), "`annotations` is given twice", (10, 9)),
         ("R106", (13, 9, 13, 22), "`condition` is given twice", (12, 9))]),
    (ACTION + "\n", [("R106", _at(ACTION, second), f"`{second.split()[0]}` is given twice",
                         (3, ACTION.index(first) + 1))
                        for first, second in (('reason "a"', 'reason "b"'),
                                              ('message "m"', 'message "n"'),
                                              ('budget "x"', 'budget "y"'),
                                              ("after 1s", "after 2s"))]),
], ids=["recipe", "guarded recipes", "status", "action clauses"])
def test_each_clause_given_twice_is_reported_at_the_second_with_the_first(
        body: str, expected: list) -> None:
    result = api.build_sources([SourceFile.from_text("t.rules", KIND + body + "}\n")],
                               emit_plan=False)
    got = [(d.code, (d.span.line, d.span.column, d.span.end_line, d.span.end_column), d.message,
            (d.notes[0].span.line, d.notes[0].span.column) if d.notes else None)
           for d in result.diagnostics if d.code == "R106"]
    assert got == expected


@pytest.mark.parametrize("lines, allowed", [
    # after the statement, on its line: that statement (the line before is blank, or short)
    (["", "    on pod failed -> fail job # rulec: allow action-only-records"], True),
    (["    on pod failed ((exit 1", ")# rulec: allow action-only-records", "    )",
      "    -> fail job"], True),
    # on a line of its own: the statement on the next line
    (["    # rulec: allow action-only-records", "    on pod failed -> fail job"], True),
    (["# rulec: allow action-only-records", "", "    on pod failed -> fail job"], False),
    (["", "    on pod failed -> fail job"], False),
], ids=["after, blank line before", "after a lone `)`", "own line", "own line, gap", "none"])
def test_an_allow_comment_covers_its_own_statement_or_the_next(lines: list[str],
                                                               allowed: bool) -> None:
    text = KIND + "\n".join(lines) + "\n}\n"
    found = [code for code, *_ in spans(text)]
    assert found == ([] if allowed else ["R410"])


@pytest.mark.parametrize("line", [
    '    task label "a\\qb"',
    '    on pod failed reason "x\\q" -> ignore',
    '    on pod failed container "m\\q" and exit 1 -> ignore',
])
def test_an_unknown_escape_in_a_plain_string_is_reported_at_the_escape(line: str) -> None:
    text = 'job j: batch/v1 Job {\n    succeeded when all pods succeeded\n' + line + "\n}\n"
    start = line.index("\\q") + 1
    found = [f for f in spans(text) if f[0] == "R003"]
    assert found == [("R003", (3, start, 3, start + 2), "unknown escape `\\q` in a string")]


@pytest.mark.parametrize("shell", ['<<metadata.name>>', '"sleep 1"'])
def test_a_wrap_shell_without_argv_is_reported_over_its_value(shell: str) -> None:
    """An expression as the whole value is a template too, spanning the expression."""
    line = f"    wrap primary with shell {shell}"
    text = ('job j: batch/v1 Job { succeeded when all pods succeeded }\n'
            f'inject "i" into pods of j {{\n{line}\n}}\n')
    start = line.index(shell) + 1
    assert spans(text) == [("R503", (3, start, 3, start + len(shell)),
                            "this shell never runs the container's own command")]


@pytest.mark.parametrize("first, second, what", [
    ('plural "things"', 'plural "thingz"', "`plural`"),
    ("pods owned", "pods owned", "`pods owned`"),
    ('pods label "a" = "x"', 'pods label "a" = "y"', '`pods label "a"`'),
    ('task label "r"', "task <<metadata.name>>", "`task`"),
    ("primary pods exit 1", "primary pods exit 2", "`primary pods`"),
    ('primary container "m"', 'primary containers ["a"]', "`primary container`"),
    ('primary containers prefix "p"', 'primary container "m"', "`primary container`"),
    ("final never", "final until <<a>> changes", "`final`"),
    ("foreign when <<a>>", "foreign when <<b>>", "`foreign`"),
    ("mode audit", "mode audit", "`mode`"),
    ("status {\n    }", "status {\n    }", "`status`"),
    ("actions {\n    }", "actions {\n    }", "`actions`"),
])
def test_a_kind_clause_given_twice_is_reported_at_the_second_with_the_first(
        first: str, second: str, what: str) -> None:
    text = KIND + f"    {first}\n" + f"    {second}\n" + 'pods label "b" = "z"\n}\n'
    line = 3 + first.count("\n") + 1
    last = second.split("\n")[-1]
    end = (line + second.count("\n"), (5 if "\n" not in second else 1) + len(last))
    result = api.build_sources([SourceFile.from_text("t.rules", text)], emit_plan=False)
    assert [(d.code, (d.span.line, d.span.column, d.span.end_line, d.span.end_column), d.message,
             [(n.message, n.span.line, n.span.column) for n in d.notes])
            for d in result.diagnostics] == [
        ("R106", (line, 5, *end), f"{what} is given twice", [("first given here", 3, 5)])]


@pytest.mark.parametrize("text", [
    "webhook timeout 5s timeout 99s\n",
    KIND + "    on pod failed -> restart pod max 1 max -1\n}\n",
    KIND + '    status {\n        no events\n        no events\n    }\n'
           '    status {\n        condition ""\n    }\n}\n',
], ids=["webhook", "action", "kind"])
def test_a_clause_given_twice_is_not_read_again(text: str) -> None:
    """Only the first is read: the second's value (out of range, empty) raises nothing more."""
    assert [code for code, *_ in spans(text)] == ["R106"] * (2 if "no events" in text else 1)
