"""The injections check (rulec/checks/injections.py and the values it reads): each finding
whole (code, position, message, help, notes) for the ops of an injection, and the shell of a
`wrap ... with shell`, read around the placeholders that stand between its words."""
from __future__ import annotations

import pytest

from tests.unit.rulec.said import job, said

KEY_RULE = ("the name part must be alphanumerics, `-`, `_` and `.`, starting and ending "
            "alphanumeric")
NAME_RULE = "it must be lower-case alphanumerics and `-`, starting and ending alphanumeric"


def inject(*ops: str) -> str:
    """Kind `j` (lines 1-4), then an injection into its pods: its ops from line 6."""
    return job("") + "inject into pods of j {\n" + "".join(f"    {op}\n" for op in ops) + "}\n"


def test_each_op_of_an_injection_is_checked_and_said_whole() -> None:
    assert said(inject('annotate "a b" = "{exit_code}"',
                       'label "-b" = "{argv}"',
                       'env "E~x" = "v" in ["Bad_Name"]',
                       'env "E\u00e9" = "v"',
                       'volume "v" empty dir',
                       'volume "v" empty dir',
                       'mount volume "v" at "/x" in ["Also_Bad"]',
                       'wrap ["Wrap_Bad"] with ["a"]')) == [
        f't.rules:6:14 R303 invalid annotation key "a b": {KEY_RULE}',
        "t.rules:6:23 R104 placeholder `{exit_code}` has no value in an injection",
        "  help: placeholders here: job, namespace, kind, task, pod",
        f't.rules:7:11 R303 invalid label key "-b": {KEY_RULE}',
        "t.rules:7:19 R104 placeholder `{argv}` has no value in an injection",
        "  help: `{argv}` exists only in `wrap ... with shell`",
        # `~` is printable ASCII: "E~x" is a fine name
        f't.rules:8:25 R305 invalid container name "Bad_Name": {NAME_RULE}',
        # a name with a character that is not printable ASCII is not quoted whole
        "t.rules:9:9 R307 invalid environment variable name: it holds `é`, which is not "
        "printable ASCII",
        "  help: the API server refuses the pod, so every pod the injection matches would be "
        "refused",
        "t.rules:11:12 R105 volume `v` is declared twice in this injection",
        "  note t.rules:10:12: first declared here",
        f't.rules:12:34 R305 invalid container name "Also_Bad": {NAME_RULE}',
        f't.rules:13:11 R305 invalid container name "Wrap_Bad": {NAME_RULE}']


def test_a_sidecar_declared_twice_is_said_at_the_second() -> None:
    assert said(inject('sidecar "s" { image "i" }', 'sidecar "s" { image "i" }')) == [
        "t.rules:7:13 R105 sidecar `s` is declared twice in this injection",
        "  note t.rules:6:13: first declared here"]


NO_EXEC = ["t.rules:6:37 R502 `{argv}` runs as a child of the shell, so it gets no signals",
           "  help: write `exec {argv}` so the program replaces the shell"]
PIPED = ["t.rules:6:31 R505 the output of `{argv}` is piped: the container exits with the status "
         "of the pipeline's last command, not the program's",
         "  help: redirect to the file instead (`exec {argv} >>FILE 2>&1`), or through a FIFO to "
         "keep stdout too: `mkfifo /tmp/out; tee -a FILE </tmp/out & exec {argv} >/tmp/out 2>&1`"]


@pytest.mark.parametrize("shell, expected", [
    # placeholders before and after `{argv}` read as words
    ("exec {argv} >{pod}.log", []),
    ("echo {pod}; exec {argv}", []),
    # `exec` must be a word of its own: not glued to what a placeholder stands for
    ("x{pod}exec {argv}", NO_EXEC),
    # only what follows `{argv}` can pipe its output
    ("echo a | cat; exec {argv}", []),
    ("exec {argv} | cat", PIPED),
    # a quoted word gone, `>|` is a clobbering redirect, not a pipe
    ("exec {argv} >'log'| cat", []),
    # only the line of `{argv}`
    ("exec {argv}\\necho a | cat", []),
])
def test_a_wrap_shell_is_read_word_by_word_around_its_placeholders(shell: str,
                                                                    expected: list[str]) -> None:
    assert said(inject(f'wrap all with shell "{shell}"')) == expected


def test_every_name_template_and_path_of_every_op_is_checked() -> None:
    text = job("") + 'inject into pods of j, jj where label "-x" exists and task "a" {\n' + """\
    env "E" = "{exit_code}" in ["Env_C"]
    volume "Vol_A" empty dir
    mount volume "Vol_B" at "" in ["Mount_C"]
    sidecar "Side_A" {
        image "{exit_code}"
        command ["{argv}"]
        args ["{count}"]
        env "S=x" = "{phase}"
        mount volume "Vol_C" at ""
    }
    sidecar "Side_A" { image "" }
    wrap ["Wrap_C"] with ["{argv}", "{exit_code}"]
    wrap all with shell "exec {argv} {exit_code}"
    wait for containers ["Wait_C"]
}
"""
    injected = "  help: placeholders here: job, namespace, kind, task, pod"
    path = '  help: mount the volume at an absolute path such as "/var/run/x"'
    argv = "  help: `{argv}` exists only in `wrap ... with shell`"
    assert said(text) == [
        "t.rules:5:24 R101 no kind is called `jj`",
        "  help: did you mean `j`?",
        f't.rules:5:39 R303 invalid label key "-x": {KEY_RULE}',
        "t.rules:6:16 R104 placeholder `{exit_code}` has no value in an `env` value",
        f"{injected}, container",
        f't.rules:6:33 R305 invalid container name "Env_C": {NAME_RULE}',
        f't.rules:7:12 R305 invalid volume name "Vol_A": {NAME_RULE}',
        f't.rules:8:18 R305 invalid volume name "Vol_B": {NAME_RULE}',
        "t.rules:8:29 R308 the mount path is empty", path,
        f't.rules:8:36 R305 invalid container name "Mount_C": {NAME_RULE}',
        f't.rules:9:13 R305 invalid sidecar name "Side_A": {NAME_RULE}',
        "t.rules:10:16 R104 placeholder `{exit_code}` has no value in a sidecar", injected,
        "t.rules:11:19 R104 placeholder `{argv}` has no value in a sidecar", argv,
        "t.rules:12:16 R104 placeholder `{count}` has no value in a sidecar", injected,
        't.rules:13:13 R307 invalid environment variable name "S=x": it holds `=`, which ends a '
        "name in the environment",
        "  help: the API server refuses the pod, so every pod the injection matches would be "
        "refused",
        "t.rules:13:22 R104 placeholder `{phase}` has no value in a sidecar", injected,
        f't.rules:14:22 R305 invalid volume name "Vol_C": {NAME_RULE}',
        "t.rules:14:33 R308 the mount path is empty", path,
        "t.rules:16:13 R105 sidecar `Side_A` is declared twice in this injection",
        "  note t.rules:9:13: first declared here",
        f't.rules:16:13 R305 invalid sidecar name "Side_A": {NAME_RULE}',
        "t.rules:16:30 R308 sidecar `Side_A` has an empty image",
        "  help: the API server refuses a container without an image",
        f't.rules:17:11 R305 invalid container name "Wrap_C": {NAME_RULE}',
        "t.rules:17:28 R104 placeholder `{argv}` has no value in a `wrap`", argv,
        "t.rules:17:38 R104 placeholder `{exit_code}` has no value in a `wrap`",
        f"{injected}, container",
        "t.rules:18:38 R104 placeholder `{exit_code}` has no value in a `wrap ... shell`",
        f"{injected}, container, argv",
        f't.rules:19:26 R305 invalid container name "Wait_C": {NAME_RULE}']


def test_a_volume_and_a_sidecar_may_share_a_name() -> None:
    assert said(inject('volume "s" empty dir', 'sidecar "s" { image "i" }')) == []


def test_each_sidecar_named_like_a_primary_container_is_said() -> None:
    kind = 'job j: batch/v1 Job {\n    primary containers ["main", "aux"]\n' \
           '    succeeded when all pods succeeded\n}\n'
    shadows = "  help: give the sidecar a name of its own"
    assert said(kind + 'inject into pods of j {\n    sidecar "main" { image "i" }\n'
                       '    sidecar "aux" { image "i" }\n}\n') == [
        "t.rules:6:13 R504 sidecar `main` has the name of a primary container of kind `j`", shadows,
        "  note t.rules:2:25: the primary container",
        "t.rules:7:13 R504 sidecar `aux` has the name of a primary container of kind `j`", shadows,
        "  note t.rules:2:33: the primary container"]


def test_webhook_settings_given_twice_or_out_of_range() -> None:
    assert said("webhook failure open timeout 0s\nwebhook failure closed timeout 31s\n") == [
        "t.rules:1:30 R306 the webhook timeout must be between 1s and 30s",
        "t.rules:2:17 R106 `webhook failure` is set twice",
        "  note t.rules:1:17: first set here",
        "t.rules:2:32 R106 `webhook timeout` is set twice",
        "  note t.rules:1:30: first set here",
        "t.rules:2:32 R306 the webhook timeout must be between 1s and 30s"]
    assert said("webhook timeout 1s\n") == said("webhook timeout 30s\n") == []


def test_a_webhook_setting_given_three_times_points_each_later_one_at_the_first() -> None:
    assert said("webhook failure open timeout 2s\nwebhook failure closed timeout 3s\n"
                "webhook failure open timeout 4s\n") == [
        "t.rules:2:17 R106 `webhook failure` is set twice", "  note t.rules:1:17: first set here",
        "t.rules:2:32 R106 `webhook timeout` is set twice", "  note t.rules:1:30: first set here",
        "t.rules:3:17 R106 `webhook failure` is set twice", "  note t.rules:1:17: first set here",
        "t.rules:3:30 R106 `webhook timeout` is set twice", "  note t.rules:1:30: first set here"]


def test_a_namespace_label_test_must_be_at_the_top_of_the_where() -> None:
    text = job("") + ('inject into pods of j where label "a" exists or namespace label "x" exists {}\n'
                      'inject into pods of j where not namespace label "y" exists and '
                      '(namespace label "z" exists) {}\n')
    assert said(text) == [
        "t.rules:5:49 R407 a `namespace label` test must be joined with `and` at the top of the "
        "injection's `where`",
        "  help: the API server tests it, as the webhook's namespaceSelector, before the webhook "
        "sees the pod"]


def test_annotation_values_in_a_where_are_not_label_values() -> None:
    text = job("") + 'inject into pods of j where annotation "k" in ["a b"] and label "k" in ["a b"] {}\n'
    assert said(text) == [
        't.rules:5:73 R304 invalid label value "a b": it must be alphanumerics, `-`, `_` and `.`, '
        "starting and ending alphanumeric"]


def test_literal_label_values_sidecars_without_image_and_empty_env_names() -> None:
    assert said(inject('label "c" = "a b"', 'label "d" = "ok"', 'sidecar "t" { command ["x"] }',
                       'env "" = "v"', 'mount volume "v" at "/x"')) == [
        't.rules:6:17 R304 invalid label value "a b": it must be alphanumerics, `-`, `_` and `.`, '
        "starting and ending alphanumeric",
        "t.rules:8:13 R108 sidecar `t` has no `image`",
        't.rules:9:9 R307 invalid environment variable name "": it is empty',
        "  help: the API server refuses the pod, so every pod the injection matches would be "
        "refused"]
