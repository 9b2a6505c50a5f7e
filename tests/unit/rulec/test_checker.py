"""Checker behaviour beyond the one-golden-per-code files: the edges of each rule."""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings, strategies as st

from rulec import api, expr
from rulec.nodes import Expr
from rulec.source import SourceFile, Span

HEAD = "job j: batch/v1 Job {\n    task label \"role\"\n    succeeded when all pods succeeded\n"


def found(text: str, *more: str) -> list[tuple[str, int, int]]:
    sources = [SourceFile.from_text("t.rules", text)]
    sources += [SourceFile.from_text(f"m{i}.rules", m) for i, m in enumerate(more)]
    build = api.build_sources(sources, emit_plan=False)
    return [(d.code, d.span.line, d.span.column) for d in build.diagnostics]


def codes(text: str, *more: str) -> list[str]:
    return [c for c, _, _ in found(text, *more)]


def kind(body: str) -> str:
    return HEAD + body + "\n}\n"


# ---------------------------------------------------------------- allow comments

def test_trailing_allow_silences_that_warning_only() -> None:
    assert codes(kind("    on pod evicted -> restart pod  # rulec: allow restart-without-budget")) == []
    assert codes(kind("    on pod evicted -> restart pod  # rulec: allow shadowed-policy")) == ["R402"]


def test_own_line_allow_covers_the_next_line() -> None:
    text = kind("    # rulec: allow restart-without-budget\n    on pod evicted -> restart pod")
    assert codes(text) == []
    text = kind("    # rulec: allow restart-without-budget\n\n    on pod evicted -> restart pod")
    assert codes(text) == ["R402"]


def test_allow_covers_a_multiline_statement() -> None:
    text = kind("    on pod evicted  # rulec: allow restart-without-budget\n        -> restart pod")
    assert codes(text) == []


def test_errors_cannot_be_allowed() -> None:
    text = kind("    on pod failed exit 3000000000 -> ignore  # rulec: allow exit-code-range")
    assert codes(text) == ["R301", "R901"]


def test_several_names() -> None:
    text = kind("    on pod failed exit 0 -> restart pod  # rulec: allow exit-zero-on-failure, "
                "restart-without-budget")
    assert codes(text) == []


# ---------------------------------------------------------------- references

def test_kinds_and_defines_are_shared_across_files() -> None:
    assert codes("inject into pods of j { annotate \"a\" = \"b\" }",
                 "define d = exit 1\njob j: v1 Pod { succeeded when any pod failed is d }") == []


def test_unknown_names_are_held_back_when_a_file_does_not_parse() -> None:
    assert codes("inject into pods of k { annotate \"a\" = \"b\" }", "job k: v1 Pod {") == ["R001"]


def test_default_injection_names_are_unique() -> None:
    inject = 'inject into pods of j { annotate "a" = "b" }\n'
    sources = [SourceFile.from_text(path, text) for path, text in [
        ("a/x.rules", kind("") + inject), ("b/x.rules", inject),
        ("c.rules", 'inject "x#1" into pods of j { annotate "a" = "b" }\n' + inject)]]
    build = api.build_sources(sources, emit_plan=False)
    assert [(d.code, d.span.path, d.span.line, d.span.column) for d in build.diagnostics] == [
        ("R105", "b/x.rules", 1, 1)]
    sources[2] = SourceFile.from_text("c.rules", 'inject "x#0" into pods of j {}\n')
    build = api.build_sources(sources, emit_plan=False)
    assert [(d.code, d.span.path, d.message) for d in build.diagnostics] == [
        ("R105", "b/x.rules", 'unnamed injection "x#0" is declared twice'),
        ("R105", "c.rules", 'injection "x#0" is declared twice')]


def test_define_cycle_reported_once() -> None:
    assert codes("define a = is b\ndefine b = is a\n" + kind("")).count("R107") == 1


def test_self_referencing_define() -> None:
    assert "R107" in codes("define a = exit 1 or is a\n" + kind(""))


def test_status_phase_lists() -> None:
    status = "    status {{ phase at status.x only [{}] map {{ {} }} }}"
    assert found(kind(status.format("failed, Succeeded", 'Failed: "F"'))) == []
    assert found(kind(status.format("failed, done", 'Failed: "F"'))) == [("R103", 4, 46)]
    assert found(kind(status.format("failed, FAILED", 'Failed: "F"'))) == [("R106", 4, 46)]
    assert found(kind(status.format("failed", 'Failed: "F", failed: "G"'))) == [("R106", 4, 65)]


# ---------------------------------------------------------------- JMESPath

@pytest.mark.parametrize("condition,bad", [
    ("<<status.phase>>", True),
    ("<<'Failed'>>", True),
    ("<<`3`>>", True),
    ("<<length(status.active)>>", True),
    ("<<to_string(spec.suspend)>>", True),
    ("<<status.conditions[?type=='Ready'] | [0].status>>", True),
    ("<<status.conditions[0].reason>>", True),
    ("<<status.phase || status.reason>>", True),
    ("<<spec.suspend>>", False),
    ("<<status>>", False),
    ("<<status.phase == 'Failed'>>", False),
    ("<<status.conditions[?type=='Ready' && status=='True']>>", False),
    ("<<contains(['a'], status.phase)>>", False),
    ("<<!(status.phase)>>", False),
    ("<<status.active > `0`>>", False),
    ("<<`true`>>", False),
    ("<<metadata.deletionTimestamp>>", False),
    ("<<status.phase && spec.suspend>>", False),
    # A string behind `| [0]`, and lists of strings out of projections (truthy when non-empty).
    ("<<status.conditions[?type=='Failed'].reason | [0]>>", True),
    ("<<status.conditions[?type=='Ready'].status>>", True),
    ("<<status.conditions[*].status>>", True),
    ("<<status.conditions[].type>>", True),
    ("<<[status.phase, status.reason]>>", True),
    ("<<[status.phase][0]>>", True),
    ("<<status.conditions[?type=='Failed']>>", False),
    ("<<status.conditions[*]>>", False),
    ("<<status.replicaStatuses[*].active>>", False),
    ("<<status.conditions[?type=='Ready'].status | [0] == 'True'>>", False),
    ("<<length(status.conditions[?type=='Ready'].status) > `0`>>", False),
])
def test_non_boolean_conditions(condition: str, bad: bool) -> None:
    assert ("R203" in codes(kind(f"    failed when {condition}"))) == bad


@pytest.mark.parametrize("condition,bad", [
    ('<<status.phase == "Failed">>', True),
    ('<<status.conditions[?"Failed" == type]>>', True),
    ('<<metadata.labels."app.kubernetes.io/name" == \'x\'>>', False),
    ('<<metadata.labels."app.kubernetes.io/name">>', False),
])
def test_double_quoted_strings(condition: str, bad: bool) -> None:
    assert ("R202" in codes(kind(f"    failed when {condition}"))) == bad


@pytest.mark.parametrize("condition,column", [
    ("<<!metadata.deletionTimestamp>>", 19),
    ("<<spec.suspend && !status.conditions[?type=='Ready']>>", 35),
    ("<<!a[?b]>>", 19),
    ("<<!a[]>>", 19),
    ("<<!a.*>>", 19),
    ("<<!a.b[0]>>", 19),
    ("<<x[?!a.b] | [0]>>", 22),
    ("<<(!a).b>>", 20),
    ("<<!(metadata.deletionTimestamp)>>", None),
    ("<<!a[0]>>", None),          # `[0]` binds tighter than `!`
    ("<<!a[*].b>>", None),
    ("<<!a && b.c>>", None),
    ("<<status.phase != 'Failed'>>", None),
    ("<<x[?!(a.b)].c>>", None),
])
def test_not_precedence(condition: str, column: int | None) -> None:
    hits = [(line, col) for code, line, col in found(kind(f"    failed when {condition}"))
            if code == "R204"]
    assert hits == ([] if column is None else [(4, column)])


def test_not_precedence_message_and_help() -> None:
    text = kind("    failed when <<!!status\n        .x == `1`>>")
    build = api.build_sources([SourceFile.from_text("t.rules", text)], emit_plan=False)
    [d] = build.diagnostics
    assert (d.code, d.severity, d.span.line, d.span.column) == ("R204", "warning", 4, 19)
    assert d.message.startswith("`!!status .x` means `(!!status) .x`")
    assert d.help == "write !!(status .x)"
    text = kind("    failed when <<(!status).x>>")
    [d] = api.build_sources([SourceFile.from_text("t.rules", text)], emit_plan=False).diagnostics
    assert d.help == "put the path that `!` should negate in parentheses, e.g. `!(a.b)`"


def test_not_precedence_can_be_allowed() -> None:
    assert codes(kind("    failed when <<!a.b>>  # rulec: allow not-precedence")) == []


def test_not_precedence_in_filters_templates_and_injections() -> None:
    text = kind('    failed when any pod failed with where <<!metadata.labels>>\n'
                '        message "{<<!status.x>>}"') + (
        'inject into pods of j where where <<!pod.spec>> { annotate "a" = "b" }\n')
    assert [c for c in codes(text) if c == "R204"] == ["R204"] * 3


def test_jmespath_error_points_into_a_multiline_expression() -> None:
    text = kind("    failed when <<status.conditions[?type=='Failed'\n"
                "                  && status=='True' && $]>>")
    assert found(text) == [("R201", 5, 40)]


def test_jmespath_error_inside_a_template_string() -> None:
    text = kind('    failed when any pod failed message "x {<<status.$>>}"')
    assert found(text) == [("R201", 4, 53)]


def test_expression_position_mapping() -> None:
    e = Expr(Span("f", 3, 10, 4, 5), "a.b\n  c.$", 3, 12)
    assert expr.position(e, 2).line == 3 and expr.position(e, 2).column == 14
    assert (expr.position(e, 8).line, expr.position(e, 8).column) == (4, 5)


# ---------------------------------------------------------------- policies

def test_task_scoped_policy_is_not_shadowed_by_a_job_wide_one() -> None:
    assert codes(kind("    on pod failed -> fail job\n    on task \"w\" pod failed -> fail job")) == [
        "R410", "R410"]   # the job's failure only recorded, by each; neither is shadowed


def test_same_task_scope_is_shadowed() -> None:
    text = kind("    on task \"w\" pod failed -> fail job\n    on task \"w\" pod failed exit 1 -> ignore")
    assert codes(text) == ["R410", "R401"]


@pytest.mark.parametrize("first,second,shadowed", [
    ("for 10m", "for 20m", True),
    ("for 20m", "for 10m", False),
    ("", "for 10m", True),
    ("for 10m", "", False),
])
def test_pending_durations(first: str, second: str, shadowed: bool) -> None:
    text = kind(f"    on pod pending {first} -> fail job\n    on pod pending {second} -> ignore")
    assert ("R401" in codes(text)) == shadowed


def test_verdict_change_targets() -> None:
    assert "R401" not in codes(kind("    on job verdict changed to failed -> ignore\n"
                                    "    on job verdict changed -> ignore"))
    assert "R401" in codes(kind("    on job verdict changed -> ignore\n"
                                "    on job verdict changed to Failed -> ignore"))


def test_restart_task_on_job_event() -> None:
    assert "R405" in codes(kind("    on job verdict changed -> restart task max 1"))


def test_per_task_budget_needs_a_task() -> None:
    assert "R406" in codes("job j: v1 Pod { succeeded when all pods succeeded\n"
                           "  on pod failed -> restart job max 1 per task }")


def test_ignore_counts_nothing() -> None:
    assert "R406" in codes(kind("    on pod failed -> ignore max 3"))


def test_fallbacks_are_checked_too() -> None:
    assert codes(kind("    on job running longer than 1h -> fail job max 1 then restart pod")) == [
        "R410", "R402", "R405"]


def test_exit_zero_only_warns_on_failures() -> None:
    assert "R302" not in codes(kind("    on pod succeeded exit 0 -> ignore"))
    assert "R302" not in codes(kind("    on pod failed not exit 0 -> ignore"))
    assert "R302" in codes(kind("    failed when any pod failed with exit in [0, 2]"))
    assert "R302" in codes(kind("    failed when any pod failed or evicted with exit 0"))
    # a range that holds 0 still matches its other codes
    assert "R302" not in codes(kind("    failed when any pod failed with exit in [0..2]"))


def test_empty_range() -> None:
    assert "R301" in codes(kind("    on pod failed exit 200..100 -> ignore"))


def test_container_scope_rules() -> None:
    assert "R407" in codes(kind('    on pod failed exit 1 or container "c" -> ignore'))
    assert "R407" in codes(kind('    on pod failed container "a" and container "b" and exit 1 -> ignore'))
    assert "R407" not in codes(kind('    on pod failed container "a" and exit 1 -> ignore'))


def test_task_references_need_a_selector() -> None:
    assert codes("job j: v1 Pod {\n succeeded when task \"m\" succeeded\n"
                 " on task completed -> complete job\n}") == ["R408", "R408", "R410"]


# ---------------------------------------------------------------- names and values

@pytest.mark.parametrize("key,ok", [
    ("app", True), ("example.com/app", True), ("a.b-c_d", True), ("x" * 63, True),
    ("x" * 64, False), ("Example.com/app", False), ("/app", False), ("example.com/", False),
    ("a b", False), ("-app", False),
])
def test_label_keys(key: str, ok: bool) -> None:
    assert ("R303" not in codes(kind(f'    failed when any pod failed with label "{key}" exists'))) == ok


@pytest.mark.parametrize("name,ok", [("main", True), ("a-1", True), ("Main", False),
                                     ("a_b", False), ("-a", False), ("x" * 64, False)])
def test_container_names(name: str, ok: bool) -> None:
    assert ("R305" not in codes(kind(f'    primary container "{name}"'))) == ok


def test_duplicate_kind_and_resource() -> None:
    assert codes("job a: v1 Pod { succeeded when all pods succeeded }\n"
                 "job a: v1 Pod { succeeded when all pods succeeded }") == ["R105", "R105"]


def test_duplicate_default_policy_id() -> None:
    text = kind('    on pod failed exit 1 -> ignore\n    on pod failed exit 2 -> ignore as "podFailed#0"')
    assert codes(text) == ["R105"]


def test_placeholders_in_context() -> None:
    base = "job j: v1 Pod { succeeded when all pods succeeded }\n"
    assert codes(base + 'inject into pods of j { wrap all with ["{container}"] }') == []
    assert codes(base + 'inject into pods of j { annotate "a" = "{argv}" }') == ["R104"]
    assert codes(base + 'inject into pods of j { wrap all with shell "exec {argv}" }') == []


# ---------------------------------------------------------------- injection conflicts

INJ = """job a: v1 Pod {{ primary container "main" succeeded when all pods succeeded }}
job b: batch/v1 Job {{ succeeded when all pods succeeded }}
inject "one" into pods of {k1} {{ {op1} }}
inject "two" into pods of {k2} {{ {op2} }}
"""


@pytest.mark.parametrize("k1,op1,k2,op2,conflict", [
    ("a", 'annotate "x" = "1"', "a", 'annotate "x" = "2"', True),
    ("a", 'annotate "x" = "1"', "a", 'annotate "x" = "1"', False),
    ("a", 'annotate "x" = "1"', "b", 'annotate "x" = "2"', False),
    ("a", 'env "E" = "1" in ["side"]', "a", 'env "E" = "2"', False),
    ("a", 'env "E" = "1" in ["main"]', "a", 'env "E" = "2"', True),
    ("b", 'env "E" = "1" in ["side"]', "b", 'env "E" = "2"', True),
    ("a", 'env "E" = "1" in all', "a", 'env "E" = "2" in ["x"]', True),
    ("a", 'sidecar "s" { image "i" }', "a", 'sidecar "s" { image "i" }', True),
    ("a", 'volume "v" empty dir', "a", 'volume "v" secret "s"', True),
    ("a", 'volume "v" empty dir', "a", 'volume "v" empty dir', False),
])
def test_injection_conflicts(k1: str, op1: str, k2: str, op2: str, conflict: bool) -> None:
    text = INJ.format(k1=k1, op1=op1, k2=k2, op2=op2)
    assert ("R501" in codes(text)) == conflict


def test_conflict_inside_one_injection() -> None:
    text = ('job a: v1 Pod { succeeded when all pods succeeded }\n'
            'inject into pods of a { label "x" = "1" label "x" = "2" }')
    assert codes(text) == ["R501"]


CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: runs.example.com}
spec:
  group: example.com
  names: {kind: Run, plural: runs}
  versions:
    - name: v1
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                enabled: {type: boolean}
                extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status:
              type: object
              properties:
                summary: {type: string}
                count: {type: integer}
                phase: {type: boolean}
"""


@pytest.mark.parametrize("condition,bad", [
    ("<<status.summary>>", True),
    ("<<status.count>>", True),
    ("<<spec.enabled>>", False),
    ("<<status.phase>>", False),      # the schema knows better than the convention
    ("<<spec.extra.anything>>", False),
    ("<<status.summary == 'ok'>>", False),
    ("<<spec.enabled || status.summary>>", False),
])
def test_non_boolean_conditions_use_the_crd_schema(tmp_path, condition: str, bad: bool) -> None:
    crd = tmp_path / "crd.yaml"
    crd.write_text(CRD)
    rules = tmp_path / "run.rules"
    rules.write_text(f"job run: example.com/v1 Run {{\n    succeeded when {condition}\n}}\n")
    build = api.build([str(rules)], [str(crd)], emit_plan=False)
    assert ("R203" in [d.code for d in build.diagnostics]) == bad



@pytest.mark.parametrize("recipe, bad", [
    ("abort job -> set spec.enabled = false", None),
    ("abort job -> set spec.enable = false", "`spec.enable` is not in the schema of `example.com/v1 Run`"),
    ("abort job -> set spec.extra.anything = 1", None),      # preserve-unknown-fields
    ("fail job -> set status.summary = \"x\"", None),
    ("fail job -> condition \"Failed\"", "`status.conditions` is not in the schema of `example.com/v1 Run`"),
    ("fail job -> create example.com/v1 Run { spec: \"x\", status: \"y\" }", None),
    ("fail job -> create example.com/v1 Run { spek: \"x\" }", "`spek` is not in the schema of `example.com/v1 Run`"),
    ("fail job -> create example.com/v1 Other { anything: \"x\" }", None),   # no CRD given for it
])
def test_what_recipes_write_is_checked_against_the_crd_schema(tmp_path, recipe: str,
                                                               bad: str | None) -> None:
    crd = tmp_path / "crd.yaml"
    crd.write_text(CRD)
    rules = tmp_path / "run.rules"
    rules.write_text("job run: example.com/v1 Run {\n    succeeded when <<spec.enabled>>\n"
                     f"    actions {{\n        {recipe}\n    }}\n}}\n")
    build = api.build([str(rules)], [str(crd)], emit_plan=False)
    found = [d.message for d in build.diagnostics if d.code == "R601"]
    assert found == ([] if bad is None else [bad]), [str(d) for d in build.diagnostics]


# ---------------------------------------------------------------- disjoint injection filters

DISJOINT = """job a: v1 Pod {{ task label "role" succeeded when all pods succeeded }}
job e: batch/v1 Job {{ task <<metadata.labels.role>> succeeded when all pods succeeded }}
inject "one" into pods of {kind} where {w1} {{ annotate "x" = "1" sidecar "s" {{ image "i" }} }}
inject "two" into pods of {kind} where {w2} {{ annotate "x" = "2" sidecar "s" {{ image "j" }} }}
"""


@pytest.mark.parametrize("w1,w2,conflict", [
    # provably disjoint: one key, no value passes both
    ('label "team" = "a"', 'label "team" = "b"', False),
    ('label "team" in ["a", "b"]', 'label "team" in ["c"]', False),
    ('label "team" = "a"', 'label "team" not in ["a", "b"]', False),
    ('label "team" exists', 'not label "team"', False),
    ('label "team" = "a"', 'not label "team" exists', False),
    ('annotation "t" = "a"', 'annotation "t" != "a" and annotation "t" exists and primary', False),
    ('annotation "t" = "a" and primary', 'annotation "t" = "b"', False),
    ('namespace in ["x"]', 'namespace in ["y"]', False),
    ('namespace "x"', 'namespace not in ["x", "y"]', False),
    ('task "a"', 'task "b"', False),
    ('task "a"', 'label "role" = "b"', False),             # the task is the label "role"
    ('(task "a" or task "b") and namespace "x"', 'namespace "y"', False),
    # overlapping, or not provable
    ('label "team" = "a"', 'label "team" = "a"', True),
    ('label "team" = "a"', 'label "team" != "b"', True),
    ('label "team" != "a"', 'label "team" != "b"', True),
    ('label "team" = "a"', 'annotation "team" = "b"', True),
    ('label "team" = "a"', 'label "group" = "b"', True),
    ('label "team" = "a" or label "x" exists', 'label "team" = "b"', True),
    ('not (label "team" = "a" and primary)', 'label "team" = "a"', True),
    ('where <<pod.metadata.labels.team == \'a\'>>', 'label "team" = "b"', True),
    ('namespace "x"', 'namespace not in ["y"]', True),
    ('annotation "jobrules.dev/injected" exists', 'not annotation "jobrules.dev/injected"', True),
])
def test_disjoint_filters_do_not_conflict(w1: str, w2: str, conflict: bool) -> None:
    text = DISJOINT.format(kind="a", w1=w1, w2=w2)
    assert codes(text) == (["R501", "R501"] if conflict else [])


def test_a_task_read_by_an_expression_proves_nothing() -> None:
    text = DISJOINT.format(kind="e", w1='task "a"', w2='task "b"')
    assert codes(text) == ["R501", "R501"]


def test_keys_that_injections_write_prove_nothing() -> None:
    text = DISJOINT.format(kind="a", w1='label "team" = "a"', w2='label "team" = "b"') + (
        'inject "three" into pods of a { label "team" = "b" }\n')
    assert codes(text) == ["R501", "R501"]
    text = DISJOINT.format(kind="a", w1='task "a"', w2='task "b"') + (
        'inject "three" into pods of a { label "role" = "b" }\n')
    assert codes(text) == ["R501", "R501"]


def test_disjointness_is_judged_per_shared_kind() -> None:
    text = DISJOINT.format(kind="a, e", w1='task "a"', w2='task "b"')
    assert codes(text) == ["R501", "R501"]  # disjoint for pods of `a`, not of `e`


_TERMS = st.sampled_from([
    'label "team" = "a"', 'label "team" != "a"', 'label "team" in ["a", "b"]',
    'label "team" not in ["b"]', 'label "team" exists', 'label "role" = "b"',
    'namespace "x"', 'namespace in ["x", "y"]', 'namespace not in ["y"]',
    'task "a"', 'task in ["a", "b"]', 'task not in ["a"]'])
_FILTERS = st.lists(st.tuples(st.booleans(), _TERMS), min_size=1, max_size=3).map(
    lambda terms: " and ".join(f"not {t}" if negate else t for negate, t in terms))
_PODS = [{"metadata": {"name": "p", "namespace": ns, "labels": {
            k: v for k, v in (("team", team), ("role", role)) if v is not None},
          "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u",
                               "controller": True}]},
          "spec": {"containers": [{"name": "main", "image": "i"}]}}
         for ns, team, role in itertools.product("xyz", (None, "a", "b", "c"), (None, "a", "b"))]
_BOTH = """job j: batch/v1 Job {{ task label "role" succeeded when all pods succeeded }}
inject "one" into pods of j where {w1} {{ annotate "{k1}" = "1" }}
inject "two" into pods of j where {w2} {{ annotate "{k2}" = "2" }}
"""


@settings(max_examples=150, deadline=None)
@given(w1=_FILTERS, w2=_FILTERS)
def test_filters_judged_disjoint_never_match_one_pod(w1: str, w2: str) -> None:
    from runtime import mutator, plan as runtime_plan

    plan = api.build_sources([SourceFile.from_text(
        "t.rules", _BOTH.format(w1=w1, w2=w2, k1="x", k2="y"))]).plan
    loaded = runtime_plan.loads(json.dumps(plan))
    overlap = any(len(mutator.mutate(mutator.prepare(loaded), pod).applied) == 2 for pod in _PODS)
    conflict = "R501" in codes(_BOTH.format(w1=w1, w2=w2, k1="x", k2="x"))
    assert conflict or not overlap


@pytest.mark.parametrize("condition, found_codes", [
    ("<<foo(status)>>", ["R205"]),
    ("<<lenght(status.conditions) > `0`>>", ["R205"]),
    ("<<regex_match('x')>>", ["R206"]),
    ("<<regex_match('x', status.reason, 'y')>>", ["R206"]),
    ("<<now(`1`) == ''>>", ["R206"]),
    ("<<merge() == `{}`>>", ["R206"]),
    ("<<not_null(status.a, status.b, status.c)>>", []),
    ("<<merge(status, spec) == `{}`>>", []),
    ("<<regex_match('Err', status.reason) && age(status.startTime) > duration('1h')>>", []),
    ("<<quantity(spec.memory) > `1024` && contains(keys(status), 'x')>>", []),
    ("<<length(map(&name, status.x)) > `0` && sort_by(status.x, &name)[0].ok>>", []),
    # Calls inside filters and functions nested in arguments are found, each at its name.
    ("<<status.conditions[?starts_with(typ, 'x', 'y')]>>", ["R206"]),
    ("<<contains(keys(status), to_string(nope(status)))>>", ["R205"]),
])
def test_functions_and_their_argument_counts(condition: str, found_codes: list[str]) -> None:
    assert [c for c in codes(kind(f"    failed when {condition}")) if c != "R203"] == found_codes


def test_function_findings_point_at_the_name() -> None:
    text = kind("    failed when <<status.x == `1` && lenght(status.y) > `0`>>")
    assert found(text) == [("R205", 4, 38)]
    assert expr.SIGNATURES["regex_match"] and "now" in expr.SIGNATURES and "foo" not in expr.SIGNATURES


def test_function_names_come_from_the_runtime() -> None:
    from runtime import functions

    assert set(functions.NAMES) <= set(expr.SIGNATURES)
    assert {"length", "contains", "starts_with", "merge", "not_null"} <= set(expr.SIGNATURES)


# ---------------------------------------------------------------- injected values

INJECT_KIND = 'job w: argoproj.io/v1alpha1 Workflow {\n    primary container "main"\n' \
              '    succeeded when all pods succeeded\n}\n'


@pytest.mark.parametrize("op, found_codes", [
    ('env "" = "v"', ["R307"]),
    ('env "A=B" = "v"', ["R307"]),
    ('env "A\\tB" = "v"', ["R307"]),
    ('env "café" = "v"', ["R307"]),
    ('env "LOG LEVEL" = "v"', []),  # printable ASCII: accepted since Kubernetes 1.32
    ('env "_A.b-1" = "v"', []),
    ('volume "v" empty dir\n    mount volume "v" at ""', ["R308"]),
    ('volume "v" empty dir\n    mount volume "v" at "/x"', []),
    ('sidecar "s" { image "" }', ["R308"]),
    ('sidecar "s" { image <<owner.spec.image>> }', []),
    ('sidecar "s" { image "x" env "" = "v" env "B=C" = "v" }', ["R307", "R307"]),
    ('volume "v" empty dir\n    sidecar "s" { image "x" mount volume "v" at "" }', ["R308"]),
    ('sidecar "main" { image "x" }', ["R504"]),
    ('sidecar "wait" { image "x" }', []),
])
def test_injected_values_the_api_server_refuses(op: str, found_codes: list[str]) -> None:
    assert codes(INJECT_KIND + f'inject "i" into pods of w {{\n    {op}\n}}\n') == found_codes


def test_sidecar_named_like_a_primary_container_of_one_of_its_kinds() -> None:
    other = 'job b: batch/v1 Job {\n    succeeded when all pods succeeded\n}\n'
    text = INJECT_KIND + other + 'inject "i" into pods of b, w {\n    sidecar "main" { image "x" }\n}\n'
    build = api.build_sources([SourceFile.from_text("t.rules", text)], emit_plan=False)
    [d] = build.diagnostics
    assert (d.code, d.span.line, d.span.column) == ("R504", 9, 13)
    assert "kind `w`" in d.message and d.notes[0].span.line == 2
    assert codes(other + 'inject "i" into pods of b {\n    sidecar "main" { image "x" }\n}\n') == []


# ---------------------------------------------------------------- nesting

@pytest.mark.parametrize("depth, bad", [(90, False), (98, False), (99, True), (150, True)])
def test_nesting_limit_counts_levels(depth: int, bad: bool) -> None:
    # The kind and the verdict are the first two levels, then the nots, then the quantifier.
    text = kind("    failed when " + "not " * depth + "any pod failed")
    assert ("R005" in codes(text)) == bad


def test_a_declaration_too_deep_leaves_the_next_ones_checked() -> None:
    text = kind("    failed when " + "not " * 150 + "any pod failed") + "define x = is nope\n"
    assert codes(text) == ["R005", "R102"]


def test_define_chains_count_as_the_filters_they_stand_for() -> None:
    chain = ["define d0 = exit 1"] + [f"define d{i} = is d{i - 1}" for i in range(1, 120)]
    text = "\n".join(chain) + "\n" + kind("    failed when any pod failed is d119")
    assert found(text) == [("R005", 101, 15)]  # only the first define past the limit
    side_by_side = ["define d0 = exit 1"] + [f"define d{i} = is d0" for i in range(1, 120)]
    text = "\n".join(side_by_side) + "\n" + kind("    failed when any pod failed is d119")
    assert found(text) == []


def test_a_declaration_too_deep_to_lower_is_reported_at_its_first_level_past_the_limit() -> None:
    """Thousands of nested `not`: lowering runs out of stack; R005 spans the first `not` past the
    limit (the kind and the verdict are the first two levels) to the end of what it negates."""
    line = "job j: v1 Pod { failed when " + "not " * 3000 + "any pod failed }"
    build = api.build_sources([SourceFile.from_text("t.rules", line + "\n")], emit_plan=False)
    [d] = build.diagnostics
    assert (d.code, d.span) == ("R005", Span("t.rules", 1, 29 + 4 * 98, 1, len(line) - 1))
    assert d.message == (f"this nests more than {expr.MAX_NESTING} levels deep (hundreds of "
                         "nested `not`, parentheses or `then`); it cannot be read")


RESIZE = ("    actions {\n        restart job -> set spec.suspend = true, resize spec.template, "
          "set spec.suspend = false\n    }\n")


@pytest.mark.parametrize("text, expected", [
    (kind("    on pod failed -> restart job max 1 max 2 with memory * 20\n" + RESIZE), [
        ("R106", (4, 40, 4, 45), "`max` is given twice", [("first given here", 4, 34)]),
        ("R306", (4, 46, 4, 62), "the factor must be above 1 and at most 16, not 20", [])]),
    ("webhook failure open failure closed timeout 5s timeout 6s\n", [
        ("R106", (1, 22, 1, 36), "`webhook failure` is given twice", [("first given here", 1, 9)]),
        ("R106", (1, 48, 1, 58), "`webhook timeout` is given twice", [("first given here", 1, 37)])]),
    (kind("") + 'inject "i" into pods of j {\n    sidecar "s" { image "a" image "b" }\n}\n', [
        ("R106", (7, 29, 7, 38), "`image` is given twice", [("first given here", 7, 19)])]),
    (kind('    status {\n        no events\n        condition "A"\n        no condition\n'
          '        no events\n    }'), [
        ("R106", (7, 9, 7, 21), "`condition` is given twice", [("first given here", 6, 9)]),
        ("R106", (8, 9, 8, 18), "`events` is given twice", [("first given here", 5, 9)])]),
    (kind("") + 'inject "i" into pods of j {\n    wait for container "main"\n'
     '    wait for containers ["a"]\n}\n', [
        ("R106", (8, 5, 8, 30), "`wait for` is given twice", [("first given here", 7, 5)])]),
], ids=["action", "webhook", "sidecar", "status", "wait"])
def test_a_clause_given_twice_is_reported_at_the_second_and_the_clauses_after_it_are_read(
        text: str, expected: list) -> None:
    build = api.build_sources([SourceFile.from_text("t.rules", text)], emit_plan=False)
    assert [(d.code, (d.span.line, d.span.column, d.span.end_line, d.span.end_column), d.message,
             [(n.message, n.span.line, n.span.column) for n in d.notes])
            for d in build.diagnostics] == expected


def test_deep_jmespath_is_reported_at_the_expression() -> None:
    assert found(kind("    failed when <<status" + " | status" * 120 + ">>")) == [("R005", 4, 17)]
    assert found(kind("    failed when <<" + "(" * 3000 + "a" + ")" * 3000 + ">>")) == [
        ("R005", 4, 17)]
    assert "R005" not in codes(kind("    failed when <<status" + " | status" * 60 + " == 'x'>>"))


# ---------------------------------------------------------------- actions that only record, task failures

RECORD = "\n    actions {\n        fail job -> record\n    }"


@pytest.mark.parametrize("body, expected", [
    ("    on pod failed -> fail job", ["R410"]),
    ("    on pod failed -> complete job", ["R410"]),
    ("    on pod failed -> terminate job", ["R410"]),
    ("    on pod failed -> restart pod max 2 then fail job", ["R410"]),   # a fallback too
    ("    on pod failed -> fail job" + RECORD, []),                       # said: meant
    ("    on pod failed -> fail job\n    actions {\n        fail job -> set spec.suspend = true\n"
     "    }", []),
    ("    on pod failed -> restart pod max 2", []),                       # not job-wide
], ids=["fail", "complete", "terminate", "fallback", "record said", "recipe", "restart"])
def test_a_job_wide_action_that_only_records_is_said(body: str, expected: list[str]) -> None:
    assert codes(kind(body)) == expected


@pytest.mark.parametrize("body, expected", [
    ('    on pod failed -> restart pod max 3 then fail job\n    on task "w" failed -> fail job',
     ["R411"]),
    ('    on task "w" pod failed -> restart task max 3\n    on task failed -> restart job max 1',
     ["R411"]),
    ('    on task "v" pod failed -> restart pod max 3\n    on task "w" failed -> fail job', []),
    ('    on pod failed -> restart pod\n    on task "w" failed -> fail job', ["R402"]),  # no budget
    ('    on pod failed -> restart pod max 3\n    on task "w" failed -> ignore', []),
    ('    on pod evicted -> restart pod max 3\n    on task "w" failed -> fail job', []),
], ids=["job-wide retry", "task retry, any task", "other task", "no budget", "ignore", "evicted"])
def test_a_task_failure_policy_that_preempts_retries_is_said(body: str,
                                                            expected: list[str]) -> None:
    assert [c for c in codes(kind(body + RECORD)) if c != "R410"] == expected


# ---------------------------------------------------------------- JMESPath: types, findings' text

def _types(text: str, item: bool = False, field_types: expr.FieldTypes | None = None) -> set[str]:
    from jmespath import parser

    return set(expr.types(parser.Parser().parse(text).parsed, item, field_types))


def _items(text: str, item: bool = False, field_types: expr.FieldTypes | None = None) -> set[str]:
    from jmespath import parser

    return set(expr.shape(parser.Parser().parse(text).parsed, item, field_types).items)


# A schema's answer for two paths from the root (what `--crd` gives the checker).
def _schema(path: tuple[str, ...]) -> frozenset[str] | None:
    return {("summary",): frozenset({"string"}), ("spec", "count"): frozenset({"number"}),
            ("spec", "on"): frozenset({"boolean"})}.get(path)


@pytest.mark.parametrize("text, item, types", [
    # comparisons and `!` are truth values (an ordering of non-numbers is null)
    ("a == b", False, {"boolean", "null"}),
    ("a < `1`", False, {"boolean", "null"}),
    ("!a", False, {"boolean"}),
    ("!(status.phase)", False, {"boolean"}),
    # literals: their JSON type
    ("`true`", False, {"boolean"}),
    ("`null`", False, {"null"}),
    ("`{}`", False, {"object"}),
    ("`[]`", False, {"array"}),
    ("`2`", False, {"number"}),
    ("'x'", False, {"string"}),
    # string fields by convention; `status` only on list items (conditions)
    ("status", True, {"string", "null"}),
    ("status", False, {"any"}),
    ("status.phase", False, {"string", "null"}),
    ("spec.status", False, {"any"}),
    ("status.conditions[0].status", False, {"string", "null"}),
    ("status.conditions[0] | status", False, {"string", "null"}),
    ("status.conditions[0]", False, {"any", "null"}),
    # an item picked out of a list, by index or by a function after a pipe
    ("status.conditions[?type=='Ready'] | max_by(@, &lastTransitionTime).status", False,
     {"string", "null"}),
    ("status.conditions[*] | max_by(@, &lastTransitionTime).status", False, {"string", "null"}),
    ("status.conditions[] | max_by(@, &lastTransitionTime).status", False, {"string", "null"}),
    ("status.conditions | max_by(@, &lastTransitionTime).status", False, {"any"}),
    ("status | @", True, {"string", "null"}),
    ("[status][0]", True, {"string", "null"}),
    ("reason || status", True, {"string", "null"}),
    ("status || reason", True, {"string", "null"}),
    ("status && reason", True, {"string", "null"}),
    ("status.phase || `1`", False, {"string", "null", "number"}),
    ("a && `1`", False, {"any", "number"}),
    # `@` is what the pipe feeds in
    ("@", False, {"any"}),
    ("status.phase | @", False, {"string", "null"}),
    ("status.phase | @ || 'x'", False, {"string", "null"}),
    ("status.phase | [@][0]", False, {"string", "null"}),
    ("status.phase | (@ | @)", False, {"string", "null"}),
    ("status.phase | `1` || @", False, {"string", "null", "number"}),
    ("`[1]` | [0]", False, {"number", "null"}),
    # indexing gives an item or null, lists (projections, slices, flattening) a list or null
    ("`[1]`[0]", False, {"number", "null"}),
    ("`[1]`[:1]", False, {"array", "null"}),
    ("a[*].b", False, {"array", "null"}),
    ("a.*", False, {"array", "null"}),
    ("a[]", False, {"array", "null"}),
    ("[status.phase, `1`]", False, {"array", "null"}),
    ("{a: b}", False, {"object", "null"}),
    # functions: what the JMESPath specification says each returns
    ("length(a)", False, {"number"}),
    ("contains(a, 'x')", False, {"boolean"}),
    ("to_string(a)", False, {"string"}),
    ("keys(a)", False, {"array"}),
    ("merge(a, b)", False, {"object"}),
    ("reverse(a)", False, {"array", "string"}),
    ("max(a)", False, {"number", "string", "null"}),
    ("not_null(a, b)", False, {"any"}),
    ("foo(a)", False, {"any"}),
])
def test_what_an_expression_can_evaluate_to(text: str, item: bool, types: set[str]) -> None:
    assert _types(text, item) == types


@pytest.mark.parametrize("text, items", [
    ("`[1, \"a\", true, null, {}, []]`", {"number", "string", "boolean", "null", "object", "array"}),
    ("`[]`", {"any"}),
    ("`{}`", {"any"}),
    ("`[1]`[:1]", {"number"}),
    ("`[1]` | [:1]", {"number"}),
    ("status.conditions[*].status", {"string"}),
    ("status.conditions[?status == 'True'].type", {"string"}),
    ("status.conditions[*].reason || `[1]`", {"string", "number"}),
    ("`[1]` || `[\"a\"]`", {"number", "string"}),
    ("`[1]` && `[\"a\"]`", {"number", "string"}),
    ("[status.phase, `1`]", {"string", "null", "number"}),
    ("[]", {"any"}),
    ("a[*].b", {"any"}),
    ("a[*].length(@)", {"number"}),
    ("`[1]`[*]", {"number"}),
    ("`[[1]]`[0]", {"any"}),
    ("`[1]` | @[*]", {"number"}),
    ("spec | [status, x[0]]", {"any", "null"}),    # `status` of the object, not of an item
    ("'ab'", {"any"}),                            # not a list: no items
    ("`{\"a\": 1}`", {"any"}),
])
def test_what_the_items_of_a_list_can_be(text: str, items: set[str]) -> None:
    assert _items(text) == items


@pytest.mark.parametrize("text, items", [
    ("[status]", {"string", "null"}),
    ("[status][*]", {"string"}),
    ("[reason, status] | [0:1]", {"string"}),
])
def test_what_the_items_of_a_list_of_list_items_fields_can_be(text: str, items: set[str]) -> None:
    assert _items(text, item=True) == items


def test_a_schema_types_the_items_of_a_list_built_from_the_root() -> None:
    assert _items("[summary][*]", field_types=_schema) == {"string"}
    assert _items("[summary, spec.count]", field_types=_schema) == {"string", "number", "null"}


@pytest.mark.parametrize("text, item, types", [
    ("summary", False, {"string", "null"}),        # the schema's type, or absent
    ("summary", True, {"any"}),                    # a list item's field: not the root's
    ("spec.count", False, {"number", "null"}),
    ("spec.count || summary", False, {"number", "string", "null"}),
    ("spec.on && summary", False, {"boolean", "string", "null"}),
    ("!summary", False, {"boolean"}),
    ("summary == `1`", False, {"boolean", "null"}),
    ("[summary][0]", False, {"string", "null"}),
    ("summary | @", False, {"string", "null"}),
    ("summary.x", False, {"any"}),                 # the schema does not say
    ("phase", False, {"string", "null"}),          # not in it: the convention
    ("spec.count[0]", False, {"any", "null"}),
])
def test_a_schema_types_the_fields_read_from_the_root(text: str, item: bool,
                                                      types: set[str]) -> None:
    assert _types(text, item, _schema) == types


def _diagnostics(text: str) -> list:
    return list(api.build_sources([SourceFile.from_text("t.rules", text)],
                                  emit_plan=False).diagnostics)


def _spans(text: str) -> list[tuple[str, int, int, int, int]]:
    return [(d.code, d.span.line, d.span.column, d.span.end_line, d.span.end_column)
            for d in _diagnostics(text)]


@pytest.mark.parametrize("condition, raw, help", [
    ('<<status.phase == "Failed">>', '"Failed"', "use 'Failed' for the string"),
    ('<<"Failed" == status.phase>>', '"Failed"', "use 'Failed' for the string"),
    # escaped quotes belong to the name, whatever their number and place
    ('<<status.phase == "a\\"\\"b" && x>>', '"a\\"\\"b"', "use 'a\"\"b' for the string"),
    ('<<status.phase == "ab\\"c" && x>>', '"ab\\"c"', "use 'ab\"c' for the string"),
    ('<<status.phase == "\\"x" && x>>', '"\\"x"', "use '\"x' for the string"),
    ("<<status.phase == \"it's\">>", '"it\'s"', "use 'it\\'s' for the string"),
])
def test_a_double_quoted_string_is_quoted_whole(condition: str, raw: str, help: str) -> None:
    [d] = _diagnostics(kind(f"    failed when {condition}"))
    start = 17 + condition.index(raw)
    assert d.code == "R202"
    assert d.message == f"`{raw}` is a field name in JMESPath, not a string"
    assert d.help == help
    assert (d.span.line, d.span.column, d.span.end_line, d.span.end_column) == (
        4, start, 4, start + len(raw))


def test_an_expression_too_deep_to_evaluate_says_so() -> None:
    [d] = _diagnostics(kind("    failed when <<status" + " | status" * 120 + ">>"))
    assert d.code == "R005" and d.severity == "error"
    assert d.message == ("this expression nests 121 levels deep; at most 100 levels can be "
                         "evaluated")
    assert d.help == "split it: `define` filters, or several conditions"
    [d] = _diagnostics(kind("    failed when <<" + "(" * 3000 + "a" + ")" * 3000 + ">>"))
    assert d.message == ("this expression nests too deeply for JMESPath to parse it; at most 100 "
                         "levels can be evaluated")
    # 100 levels (99 pipes after the first field) are evaluated, 101 are not
    assert _diagnostics(kind("    failed when <<status" + " | status" * 99 + ">>")) == []
    [d] = _diagnostics(kind("    failed when <<status" + " | status" * 100 + ">>"))
    assert d.message.startswith("this expression nests 101 levels deep")


def test_a_jmespath_error_at_the_end_points_at_the_closing_marks() -> None:
    # the expression ends too early: the span is the `>>` after it
    assert _spans(kind("    failed when <<status.>>")) == [("R201", 4, 26, 4, 28)]
    [d] = _diagnostics(kind("    failed when <<status.>>"))
    assert d.message == "invalid JMESPath: unexpected end of expression"
    # inside it: the offending token
    assert _spans(kind("    failed when <<status.$x>>")) == [("R201", 4, 26, 4, 27)]


@pytest.mark.parametrize("condition, message", [
    ("<<max(status.x)>>", "this condition can only be a number or string, which is true "
                          "whenever it is non-empty"),
    ("<<status.phase || status.reason>>", "this condition can only be a string, which is true "
                                             "whenever it is non-empty"),
    ("<<`[1, 2]`>>", "this condition can only be a list of numbers, which is true whenever it "
                     "has an item, whatever the items are"),
    ("<<[status.phase, `1`]>>", "this condition can only be a list of numbers or strings, which "
                                "is true whenever it has an item, whatever the items are"),
    ("<<`null`>>", None),        # always false, but not a string or a number
    ("<<[`null`]>>", None),
    ("<<`[true]`>>", None),
])
def test_non_boolean_condition_messages(condition: str, message: str | None) -> None:
    found = [d for d in _diagnostics(kind(f"    failed when {condition}")) if d.code == "R203"]
    assert [d.message for d in found] == ([] if message is None else [message])
    if found:
        assert (found[0].span.line, found[0].span.column) == (4, 17)
        assert found[0].help.startswith("compare")


def test_each_unknown_function_is_named_at_its_own_call() -> None:
    # a filter's condition comes before the projection after it, in the tree's last place
    text = kind("    failed when <<status.x[?lenght(a)].nope(b) | [0] == `1`>>")
    found = [(d.code, d.span.column, d.message) for d in _diagnostics(text)]
    assert found == [("R205", 29, "no JMESPath function is called `lenght`"),
                     ("R205", 40, "no JMESPath function is called `nope`")]


@pytest.mark.parametrize("condition, finding", [
    ("<<regex_match('x')>>", ("R206", 19, 30, "`regex_match()` takes 2 arguments, and is given 1",
                              "regex_match(string, string|null)")),
    ("<<now(`1`) == ''>>", ("R206", 19, 22, "`now()` takes no arguments, and is given 1", "now()")),
    ("<<merge() == `{}`>>", ("R206", 19, 24, "`merge()` takes at least 1 argument, and is given 0",
                             "merge(object, ...)")),
    ("<<not_null()>>", ("R206", 19, 27, "`not_null()` takes at least 1 argument, and is given 0",
                        "not_null(any, ...)")),
    ("<<length(a, b) > `1`>>", ("R206", 19, 25, "`length()` takes 1 argument, and is given 2",
                                "length(string|array|object)")),
    ("<<sort_by(a) == `[]`>>", ("R206", 19, 26, "`sort_by()` takes 2 arguments, and is given 1",
                                "sort_by(array, expref)")),
    ("<<lenght(a)>>", ("R205", 19, 25, "no JMESPath function is called `lenght`",
                       "did you mean `length`?")),
    ("<<zzzzzz(a)>>", ("R205", 19, 25, "no JMESPath function is called `zzzzzz`",
                       "see the functions in docs/evaluation.md and the JMESPath specification")),
])
def test_function_findings_say_what_is_wrong(condition: str, finding: tuple) -> None:
    found = [(d.code, d.span.column, d.span.end_column, d.message, d.help)
             for d in _diagnostics(kind(f"    failed when {condition}")) if d.code != "R203"]
    assert found == [finding]


@pytest.mark.parametrize("condition, finding", [
    ("<<>>", ("R201", 17, 21, "empty JMESPath expression")),
    ("<<status.$x>>", ("R201", 26, 27, "invalid JMESPath: unknown token $")),
    ("<<a = b>>", ("R201", 21, 22, "invalid JMESPath: unknown token '='")),
    ('<<a."b\\q" == a>>', ("R201", 21, 26, "invalid JMESPath: invalid \\escape")),
    ("<<a[?b>>", ("R201", 23, 25, "invalid JMESPath: the expression ends too early")),
    ("<< >>", ("R201", 20, 22, "invalid JMESPath: the expression ends too early")),
    ("<<a || || b>>", ("R201", 24, 26, "invalid JMESPath: unexpected `||`")),
    ("<<a[1.5]>>", ("R201", 22, 23, "invalid JMESPath: unexpected `.`")),
    ("<<a == `\"x`>>", ("R201", 24, 28, "invalid JMESPath: bad token \"x")),
    # a bad literal ending in "." keeps it: the message shows the user's text as written
    ("<<a == `\"a.`>>", ("R201", 24, 29, "invalid JMESPath: bad token \"a.")),
    ("<<$ == a>>", ("R201", 19, 20, "invalid JMESPath: unknown token $")),
    ("<<|| a>>", ("R201", 19, 21, "invalid JMESPath: unexpected `||`")),
    ("<<!a.b[?c>>", ("R201", 26, 28, "invalid JMESPath: the expression ends too early")),
    ("<<!lenght(a.$)>>", ("R201", 29, 30, "invalid JMESPath: unknown token $")),
])
def test_jmespath_syntax_errors_say_where_and_what(condition: str, finding: tuple) -> None:
    found = [(d.code, d.span.column, d.span.end_column, d.message)
             for d in _diagnostics(kind(f"    failed when {condition}"))]
    assert found == [finding]


@pytest.mark.parametrize("condition, message, help", [
    ("<<!a.b.c>>", "`!a.b.c` means `(!a).b.c`", "write !(a.b.c)"),
    ("<<!!a[?b]>>", "`!!a[?b]` means `(!!a)[?b]`", "write !!(a[?b])"),
    ("<<x && !a\n   .b>>", "`!a .b` means `(!a) .b`", "write !(a .b)"),
    ("<<!a[].b == `1`>>", "`!a[].b` means `(!a)[].b`", "write !(a[].b)"),
])
def test_not_precedence_quotes_the_source(condition: str, message: str, help: str) -> None:
    [d] = _diagnostics(kind(f"    failed when {condition}"))
    assert d.code == "R204"
    assert d.message == message + ": `!` binds tighter, and reading from a boolean finds only null"
    assert d.help == help


def test_not_precedence_through_parentheses_says_what_it_reads() -> None:
    [d] = _diagnostics(kind("    failed when <<(!status).x>>"))
    assert d.code == "R204" and (d.span.line, d.span.column) == (4, 20)
    assert d.message == "reading from the boolean result of `!` finds only null"
