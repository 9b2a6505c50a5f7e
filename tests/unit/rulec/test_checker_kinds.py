"""The kinds check (rulec/checks/kinds.py): a kind's scope and `extend`, each finding whole."""
from __future__ import annotations

from tests.unit.rulec.said import said

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
