"""The conflicts check (rulec/checks/conflicts.py): which writes of one field, by one or two
injections, clash (by containers, values and filters), each finding said whole."""
from __future__ import annotations

from tests.unit.rulec.said import job, said

PRIMARY_MAIN = 'job j: batch/v1 Job {\n    primary container "main"\n' \
               '    succeeded when all pods succeeded\n}\n'


def injection(*ops: str, where: str = "") -> str:
    return f"inject into pods of j{where} {{\n" + "".join(f"    {op}\n" for op in ops) + "}\n"


def test_env_writes_clash_only_in_containers_both_reach() -> None:
    # default `primary` is the kind's primary container: "side" is another one, "main" is it
    assert said(PRIMARY_MAIN + injection('env "E" = "1"', 'env "E" = "2" in ["side"]',
                                         'env "F" = "1"', 'env "F" = "2" in ["main"]')) == [
        "t.rules:9:5 R501 environment variable `F` is already set differently",
        "  note t.rules:8:5: set here"]
    # named containers: only a name in both lists clashes
    assert said(job("") + injection('env "E" = "1" in ["a"]', 'env "E" = "2" in ["b"]',
                                    'env "F" = "1" in ["a"]', 'env "F" = "2" in ["a", "c"]')) == [
        "t.rules:9:5 R501 environment variable `F` is already set differently",
        "  note t.rules:8:5: set here"]


def test_a_field_named_with_a_colon_is_described_whole() -> None:
    key = ('invalid annotation key "x:y": the name part must be alphanumerics, `-`, `_` and `.`, '
           "starting and ending alphanumeric")
    assert said(job("") + injection('annotate "x:y" = "1"', 'annotate "x:y" = "2"')) == [
        f"t.rules:6:14 R303 {key}",
        't.rules:7:5 R501 annotation "x:y" is already set differently',
        "  note t.rules:6:5: set here",
        f"t.rules:7:14 R303 {key}"]


def test_filters_excluding_every_value_the_other_allows_are_disjoint() -> None:
    assert said(job("") + injection('annotate "n" = "1"', where=' where label "x" in ["a", "b"]')
                + injection('annotate "n" = "2"', where=' where label "x" not in ["a"] and '
                                                      'label "x" not in ["b"]')) == []
    # one value left over: a pod with x=b matches both
    assert said(job("") + injection('annotate "n" = "1"', where=' where label "x" in ["a", "b"]')
                + injection('annotate "n" = "2"', where=' where label "x" not in ["a"]')) == [
        't.rules:9:5 R501 annotation "n" is already set differently',
        "  note t.rules:6:5: set here"]


def test_values_are_compared_by_what_they_say_volumes_by_their_source() -> None:
    assert said(job("") + injection('annotate "n" = "{pod}"', 'volume "v" config map "a"')
                + injection('annotate "n" = "{pod}"', 'volume "v" config map "b"')) == [
        "t.rules:11:5 R501 volume `v` is already set differently",
        "  note t.rules:7:5: set here"]


def test_pod_level_writes_clash_whatever_the_kind_s_primary_containers() -> None:
    kind = 'job j: batch/v1 Job {\n    primary containers []\n    succeeded when all pods succeeded\n}\n'
    assert said(kind + injection('annotate "n" = "1"') + injection('annotate "n" = "2"')) == [
        't.rules:9:5 R501 annotation "n" is already set differently',
        "  note t.rules:6:5: set here"]


def test_each_later_write_is_said_once_against_the_first() -> None:
    text = job("") + "".join(f'inject into pods of j {{ annotate "n" = "{n}" }}\n' for n in (1, 2, 3))
    assert said(text) == [
        't.rules:6:25 R501 annotation "n" is already set differently', "  note t.rules:5:25: set here",
        't.rules:7:25 R501 annotation "n" is already set differently', "  note t.rules:5:25: set here"]


def test_an_annotation_an_injection_writes_proves_no_filters_disjoint() -> None:
    """The webhook may be called again on a pod another injection annotated: `annotation "x"`
    tests on x then prove nothing (as label tests on a label written)."""
    two = (job("") + injection('annotate "n" = "1"', where=' where annotation "x" = "a"')
           + injection('annotate "n" = "2"', where=' where annotation "x" = "b"'))
    assert said(two) == []
    assert said(two + injection('annotate "x" = "b"')) == [
        't.rules:9:5 R501 annotation "n" is already set differently',
        "  note t.rules:6:5: set here"]
