"""The CLI contract: exit codes, `path:line:col` on every finding, never a traceback for a
user error, and a one-line message for an internal one."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rulec import api
from rulec.commands import cli

ROOT = Path(__file__).resolve().parents[3]
GOOD = "job j: batch/v1 Job {\n    failed when any pod failed\n    succeeded when all pods succeeded\n}\n"
WARN = GOOD.replace("}\n", "    on pod evicted -> restart pod\n}\n")
BAD = "job j: batch/v1 Job {\n    on pod faild -> ignore\n}\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, text in {"good": GOOD, "warn": WARN, "bad": BAD}.items():
        paths[name] = tmp_path / f"{name}.rules"
        paths[name].write_text(text)
    return paths


def test_check_clean(capsys, files) -> None:
    assert run(capsys, "check", str(files["good"])) == (0, "", "")


def test_check_warnings_pass_unless_strict(capsys, files) -> None:
    code, out, _ = run(capsys, "check", str(files["warn"]))
    assert code == 0 and f"{files['warn']}:4:23: warning[R402]" in out
    assert run(capsys, "check", "--strict", str(files["warn"]))[0] == 1


def test_check_error(capsys, files) -> None:
    code, out, err = run(capsys, "check", str(files["bad"]))
    assert code == 1
    assert out.startswith(f"{files['bad']}:2:12: error[R002] unknown pod event `faild`")
    assert "1 error" in err and "Traceback" not in out + err


def test_check_folder_recurses(capsys, files, tmp_path: Path) -> None:
    nested = tmp_path / "sub" / "deeper"
    nested.mkdir(parents=True)
    (nested / "x.rules").write_text("job k: v1 Pod { on pod failed exit 3000000000 -> ignore }")
    code, out, _ = run(capsys, "check", str(tmp_path))
    assert code == 1 and "x.rules:1:36: error[R301]" in out and "bad.rules:2:12" in out


@pytest.mark.parametrize("fmt", ["json", "github", "full"])
def test_formats(capsys, files, fmt: str) -> None:
    code, out, _ = run(capsys, "check", "--format", fmt, str(files["bad"]))
    assert code == 1
    if fmt == "json":
        [item] = json.loads(out)
        assert (item["code"], item["line"], item["column"]) == ("R002", 2, 12)
    elif fmt == "github":
        assert out.startswith(f"::error file={files['bad']},line=2,col=12,")
    else:
        assert f"--> {files['bad']}:2:12" in out and "^^^^^" in out and "help:" in out


def test_json_format_prints_empty_list_when_clean(capsys, files) -> None:
    assert run(capsys, "check", "--format", "json", str(files["good"]))[:2] == (0, "[]\n")


def test_missing_path_is_exit_2(capsys, tmp_path: Path) -> None:
    code, out, err = run(capsys, "check", str(tmp_path / "nope.rules"))
    assert code == 2 and "nope.rules: no such file or directory" in err and "Traceback" not in err


def test_empty_folder_is_exit_2(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "check", str(tmp_path))
    assert code == 2 and "no .rules files" in err


def test_long_chains_compile_and_absurd_nesting_is_a_finding_with_its_position(
        capsys, tmp_path: Path) -> None:
    wide = tmp_path / "wide.rules"
    wide.write_text("job j: v1 Pod { failed when " + " or ".join(["any pod failed"] * 3000) + " }")
    assert run(capsys, "check", str(wide))[0] == 0
    deep = tmp_path / "deep.rules"
    deep.write_text("job j: v1 Pod { failed when " + "not " * 3000 + "any pod failed }")
    code, out, err = run(capsys, "check", str(deep))
    # The first `not` past the limit: the kind and the verdict are the first two levels.
    assert code == 1 and f"{deep}:1:{29 + 4 * 98}: error[R005]" in out
    assert "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize("text, where", [
    # 3,000 defines, each using the one before: reported at the first one past the limit.
    ("\n".join(["define d0 = exit 1"] + [f"define d{i} = is d{i - 1}" for i in range(1, 3000)])
     + "\njob j: v1 Pod { failed when any pod failed is d2999 }", ":101:15: error[R005]"),
    # 20,000 steps of a pipe: the expression is too deep for the runtime.
    ("job j: v1 Pod { failed when <<status" + " | status" * 20000 + ">> }", ":1:29: error[R005]"),
    # 3,000 parentheses: too deep for JMESPath's parser.
    ("job j: v1 Pod { failed when <<" + "(" * 3000 + "a" + ")" * 3000 + ">> }",
     ":1:29: error[R005]"),
    ("job j: v1 Pod { failed when any pod failed\n on pod failed -> restart job max 1"
     + " then restart job max 1" * 3000 + " }", ":2:"),
])
def test_deep_nesting_is_reported_where_it_is(capsys, tmp_path: Path, text: str,
                                              where: str) -> None:
    deep = tmp_path / "deep.rules"
    deep.write_text(text)
    code, out, err = run(capsys, "check", str(deep))
    assert code == 1 and f"{deep}{where}" in out and "R005" in out, out + err
    assert "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize("nesting", ["not " * 3000 + "any pod failed",
                                     "(" * 3000 + "any pod failed" + ")" * 3000])
def test_fmt_reports_absurd_nesting_as_check_does(capsys, tmp_path: Path, nesting: str) -> None:
    deep = tmp_path / "deep.rules"
    deep.write_text(f"job j: v1 Pod {{ failed when {nesting} }}")
    other = tmp_path / "other.rules"
    other.write_text(GOOD.replace("    ", "  "))
    for argv in (["fmt", "--check"], ["fmt"]):
        code, _, err = run(capsys, *argv, str(deep), str(other))
        assert code == 2 and "Traceback" not in err and "internal error" not in err
        assert f"rulec: {deep}: the rules nest too deeply to format" in err
    assert run(capsys, "fmt", "--check", str(other))[0] == 0  # the other file was formatted


def test_not_utf8_is_exit_2(capsys, tmp_path: Path) -> None:
    path = tmp_path / "latin.rules"
    path.write_bytes(b"# caf\xe9\n")
    code, _, err = run(capsys, "check", str(path))
    assert code == 2 and "not UTF-8" in err


def test_usage_errors_are_exit_2(capsys) -> None:
    assert run(capsys, "check")[0] == 2
    assert run(capsys, "check", "--format", "xml", "x")[0] == 2
    assert run(capsys)[0] == 2


def test_compile_to_file_and_stdout(capsys, files, tmp_path: Path) -> None:
    out_path = tmp_path / "plan.json"
    assert run(capsys, "compile", str(files["good"]), "-o", str(out_path))[0] == 0
    code, out, _ = run(capsys, "compile", str(files["good"]))
    assert code == 0 and out == out_path.read_text()
    assert json.loads(out)["kinds"][0]["name"] == "j"


def test_compile_with_errors_writes_nothing(capsys, files, tmp_path: Path) -> None:
    out_path = tmp_path / "plan.json"
    code, out, err = run(capsys, "compile", str(files["bad"]), "-o", str(out_path))
    assert code == 1 and not out_path.exists() and out == ""
    assert "bad.rules:2:12: error[R002]" in err and "no plan written" in err


def test_fmt_check_and_rewrite(capsys, tmp_path: Path) -> None:
    path = tmp_path / "x.rules"
    path.write_text("job j: v1 Pod {succeeded when all pods succeeded}")
    assert run(capsys, "fmt", "--check", str(path))[0] == 1
    assert run(capsys, "fmt", str(path))[0] == 0
    assert path.read_text() == "job j: v1 Pod {\n    succeeded  when all pods succeeded\n}\n"
    assert run(capsys, "fmt", "--check", str(path))[0] == 0


def test_fmt_reports_syntax_errors(capsys, files) -> None:
    code, _, err = run(capsys, "fmt", str(files["bad"]))
    assert code == 1 and "bad.rules:2:12: error[R002]" in err
    assert files["bad"].read_text() == BAD


@pytest.mark.parametrize("word", ["R401", "r401", "shadowed-policy"])
def test_explain(capsys, word: str) -> None:
    code, out, _ = run(capsys, "explain", word)
    assert code == 0 and out.startswith("R401 shadowed-policy (warning)")


def test_explain_unknown(capsys) -> None:
    code, _, err = run(capsys, "explain", "shadowed-polcy")
    assert code == 2 and "did you mean `shadowed-policy`" in err


def test_internal_error_is_one_line(capsys, files, monkeypatch) -> None:
    def boom(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr(api, "build_sources", boom)
    monkeypatch.setenv("RULEC_NO_CACHE", "1")   # no answer kept from an earlier check
    code, out, err = run(capsys, "check", str(files["good"]))
    assert code == 2 and err.count("\n") == 1 and "internal error: RuntimeError: boom" in err
    monkeypatch.setenv("RULEC_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["check", str(files["good"])])


def test_installed_command_prints_no_traceback(files) -> None:
    proc = subprocess.run([sys.executable, "-m", "rulec.commands.cli", "check",
                           str(files["bad"])], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{files['bad']}:2:12:" in proc.stdout


def test_version(capsys) -> None:
    from rulec import about

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"rulec {about.version()}\n"
    assert about.version()[0].isdigit()


def test_python_dash_m_rulec(files) -> None:
    proc = subprocess.run([sys.executable, "-m", "rulec", "check", str(files["bad"])],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 1 and f"{files['bad']}:2:12: error[R002]" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "rulec", "--version"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("rulec ")


def _commands() -> dict[str, list[str]]:
    """Every subcommand of the full parser (all modules registered) and its option strings."""
    import argparse

    parser = cli._parser(every=True)
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: [o for a in p._actions for o in a.option_strings]
            for name, p in sub.choices.items()}


def test_the_full_parser_has_every_command() -> None:
    assert set(_commands()) == {"check", "compile", "fmt", "explain", "completion", *cli.COMMANDS}


@pytest.mark.parametrize("command", sorted(_commands()))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_its_help(capsys, command: str, flag: str) -> None:
    """Its own (not the stand-in a command whose module failed to import would get), on
    stdout, exit 0, however the command line is loaded (only its module is imported)."""
    code, out, err = run(capsys, command, flag)
    assert (code, err) == (0, "")
    assert out.startswith(f"usage: rulec {command} ") and "-h, --help" in out


def test_rulec_help(capsys) -> None:
    code, out, err = run(capsys, "--help")
    assert (code, err) == (0, "") and out.startswith("usage: rulec ")
    assert all(f"    {name}" in out for name in _commands())


def _bash_complete(script: Path, lines: list[str], cwd: Path) -> list[list[str]]:
    """What bash offers for each command line, completing its last word (after the last space)."""
    program = [f"source {script}", 'func=$(complete -p rulec | sed -E "s/.* -F ([^ ]+) .*/\\1/")']
    for line in lines:
        words = " ".join(f"'{w}'" for w in line.split(" "))
        program += [f"COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))",
                    f"COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=()",
                    '"$func" rulec; printf "%s\\n" "${COMPREPLY[@]}"; echo "<end>"']
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", "\n".join(program)],
                          capture_output=True, text=True, cwd=cwd, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [[w for w in chunk.split("\n") if w] for chunk in proc.stdout.split("<end>\n")[:-1]]


def test_bash_completion_of_commands_flags_choices_and_files(capsys, tmp_path: Path) -> None:
    code, script, _ = run(capsys, "completion", "bash")
    assert code == 0
    path = tmp_path / "rulec.bash"
    path.write_text(script)
    (tmp_path / "jobs.rules").write_text(GOOD)
    commands = _commands()
    cases = {
        "rulec ": sorted(commands),
        "rulec ch": ["check"],
        "rulec check --f": ["--format"],
        "rulec check --format s": ["sarif"],
        "rulec check jo": ["jobs.rules"],
        "rulec test --format ": ["junit", "text"],
        "rulec completion ": ["bash", "fish", "zsh"],
        "rulec --v": ["--version"],
        **{f"rulec {name} -": sorted(options) for name, options in commands.items()},
    }
    offered = _bash_complete(path, list(cases), tmp_path)
    assert {line: sorted(got) for line, got in zip(cases, offered)} == cases


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_know_every_command_and_option(capsys, shell: str) -> None:
    code, script, _ = run(capsys, "completion", shell)
    assert code == 0
    spell = (lambda o: o) if shell == "zsh" else (lambda o: f"-l {o[2:]}")
    for name, options in _commands().items():
        assert name in script
        assert all(spell(o) in script for o in options if o.startswith("--")), name
    assert "sarif" in script and "junit" in script


def test_a_leading_byte_order_mark_is_accepted(capsys, tmp_path: Path) -> None:
    from rulec import fmt

    path = tmp_path / "bom.rules"
    path.write_bytes(b"\xef\xbb\xbf" + fmt.format_text(GOOD).encode())
    assert run(capsys, "check", str(path)) == (0, "", "")
    assert run(capsys, "fmt", "--check", str(path))[0] == 0
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")  # formatted already: left alone


def test_a_fifo_in_a_folder_is_skipped(capsys, tmp_path: Path) -> None:
    import os

    (tmp_path / "good.rules").write_text(GOOD)
    os.mkfifo(tmp_path / "pipe.rules")
    code, out, err = run(capsys, "check", str(tmp_path))  # would block reading the FIFO
    assert code == 0 and out == "" and err == ""


def test_crd_files_do_not_swallow_the_rules_paths(capsys, files, tmp_path: Path) -> None:
    from devkit import crds

    crd = str(next(p for p in crds.files() if "volcano" in p.name))
    folder = files["good"].parent
    for argv in (["check", "--crd", crd, str(files["bad"])],
                 ["check", "--crd", crd, crd, str(folder)],
                 ["check", str(files["bad"]), "--crd", crd]):
        code, out, err = run(capsys, *argv)
        assert code == 1 and "bad.rules:2:12: error[R002]" in out, (argv, out, err)
    code, _, err = run(capsys, "check", "--crd", crd)
    assert code == 2 and "required: PATH" in err


def test_compile_output_dash_is_standard_output(capsys, files, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "compile", str(files["good"]), "-o", "-")
    assert code == 0 and json.loads(out)["kinds"][0]["name"] == "j"
    assert not (tmp_path / "-").exists()
