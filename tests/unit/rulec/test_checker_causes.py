"""`cause "name" when FILTER hint "..."` in the compiler: what the checker refuses (each with
its code and position), the syntax recovery around a broken one, its layout, and how `rulec
eval` prints the cause a verdict carries."""
from __future__ import annotations

import pytest

from rulec import api, fmt
from rulec.source import SourceFile

KIND = """
job trainer: example.dev/v1 Trainer {
    on pod failed cause "oom" -> restart pod max 2
    succeeded when all pods succeeded
}
"""


def found(text: str) -> list[tuple[str, int, int]]:
    build = api.build_sources([SourceFile.from_text("c.rules", text)], emit_plan=False)
    return [(d.code, d.span.line, d.span.column) for d in build.diagnostics]


def test_a_declared_cause_is_clean() -> None:
    assert found('cause "oom" when reason "OOMKilled" hint "raise its limit"\n' + KIND) == []


@pytest.mark.parametrize("hint", [
    '""', '"   "', '" leading space"', '"two\\nlines"', '"a\\ttab"', '"' + "x" * 201 + '"',
])
def test_a_bad_hint_is_r310_at_the_hint(hint: str) -> None:
    assert found(f'cause "oom" when reason "OOMKilled" hint {hint}\n' + KIND) == [
        ("R310", 1, 42)]


def test_a_hint_of_200_characters_is_fine() -> None:
    assert found('cause "oom" when reason "OOMKilled" hint "' + "x" * 200 + '"\n' + KIND) == []


@pytest.mark.parametrize("name", ["OOM", "image-pull", "9lives", "", "x" * 64, "none"])
def test_a_bad_name_is_r311_at_the_name(name: str) -> None:
    text = f'cause "{name}" when exit 1 hint "h"\ncause "oom" when exit 137 hint "h"\n'
    assert found(text + KIND) == [("R311", 1, 7)]


def test_an_unknown_cause_is_r109_wherever_a_filter_names_it() -> None:
    text = ('cause "oom" when reason "OOMKilled" hint "h"\n'
            "job t: example.dev/v1 T {\n"
            '    failed when any pod with cause "omm"\n'
            '    on pod failed exit 1 and not cause "sigkill" -> fail job reason "X"\n'
            "    succeeded when all pods succeeded\n"
            "    actions {\n        fail job      -> record\n    }\n}\n")
    assert found(text) == [("R109", 3, 36), ("R109", 4, 40)]


def test_a_cause_declared_twice_is_r105_at_the_second() -> None:
    text = 'cause "oom" when exit 137 hint "h"\n\ncause "oom" when exit 1 hint "h"\n'
    assert found(text + KIND) == [("R105", 3, 7)]


def test_a_broken_cause_does_not_hide_the_declarations_after_it() -> None:
    text = 'cause "oom" when hint "h"\n' + KIND.replace('cause "oom"', 'cause "sigkill"')
    assert found(text) == [("R001", 1, 18), ("R109", 4, 25)]


def test_a_cause_a_broken_declaration_may_declare_is_not_unknown() -> None:
    """As for kinds and defines: the syntax error is the news, not its name's uses."""
    assert found('cause "oom" when hint "h"\n' + KIND) == [("R001", 1, 18)]
    assert found('caus "oom" when reason "OOMKilled" hint "h"\n' + KIND) == [("R002", 1, 1)]


def test_a_long_cause_breaks_before_its_hint_and_its_or() -> None:
    text = ('cause "node_lost" when pod reason "NodeLost" or condition "DisruptionTarget" reason '
            '"DeletionByPodGC" hint "the pod\'s node was lost or shut down: run it again"\n')
    out = fmt.format_source(SourceFile.from_text("c.rules", text)).text
    assert out == ('cause "node_lost" when pod reason "NodeLost"\n'
                   '    or condition "DisruptionTarget" reason "DeletionByPodGC"\n'
                   '    hint "the pod\'s node was lost or shut down: run it again"\n')
    assert fmt.format_source(SourceFile.from_text("c.rules", out)).text == out


def test_rulec_eval_text_names_the_cause() -> None:
    from rulec.commands import run

    result = {"phase": "Failed", "reason": "Cause_oom", "rule": "t.rules:3:5", "final": True,
              "cause": "oom", "message": None, "events": [], "actions": [], "state": {"v": 1}}
    assert run.eval_text(result).splitlines()[0] == (
        "Failed (Cause_oom)  [t.rules:3:5]  final  cause oom")
    assert "cause" not in run.eval_text({**result, "cause": None}).splitlines()[0]


def test_a_cause_counts_as_deep_as_its_when_where_it_is_used() -> None:
    """The runtime evaluates the inlined filter by recursion: 60 levels in the cause and 60
    around its use are too deep together, and said once, at the use."""
    deep, use = "exit 1", 'cause "deep"'
    for _ in range(60):
        deep, use = f"not ({deep})", f"not ({use})"
    text = (f'cause "deep" when {deep} hint "h"\n'
            f"job t: example.dev/v1 T {{\n    on pod failed {use} -> restart pod max 1\n"
            "    succeeded when all pods succeeded\n}\n")
    build = api.build_sources([SourceFile.from_text("c.rules", text)], emit_plan=False)
    [(code, line, message)] = [(d.code, d.span.line, d.message) for d in build.diagnostics]
    assert (code, line) == ("R005", 3) and "with the causes and defines it uses" in message
