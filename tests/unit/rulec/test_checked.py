"""`rulec check`'s kept answers: the same as checking afresh, never taken for the answer about
other bytes, other options or other code, and a hit that neither imports the parser nor parses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rulec import checked
from rulec.commands import cli

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "diagnostics"
CRD = ROOT / "devkit" / "crds" / "kubeflow.org_pytorchjobs.yaml"
# Every rules file with findings the golden diagnostics hold, and every folder of rules that
# has none: the inputs of the differential below.
BAD = sorted(GOLDEN.glob("*.rules"))
GOOD = [ROOT / "rules", *sorted(p for p in (ROOT / "examples").iterdir() if any(p.rglob("*.rules")))]
FORMATS = ("concise", "full", "json", "github", "sarif")
RULES = "job j: batch/v1 Job {\n    failed when any pod failed\n}\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RULEC_NO_CACHE", raising=False)
    yield tmp_path / "xdg" / "jobrules" / checked.FOLDER


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir()) if folder.exists() else []


@pytest.mark.parametrize("path", [*BAD, *GOOD], ids=lambda p: p.name)
def test_a_kept_answer_is_what_a_check_afresh_prints(capsys, folder: Path, path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle is the check without any cache: the first run (stored) and the second (read)
    print the same bytes and exit the same, in every format, and strict."""
    monkeypatch.chdir(ROOT)
    given = str(path.relative_to(ROOT))
    for argv in [(given, "--format", fmt) for fmt in FORMATS] + [(given, "--strict")]:
        with monkeypatch.context() as afresh:
            afresh.setenv("RULEC_NO_CACHE", "1")
            expected = run(capsys, *argv)
        before = entries(folder)
        assert run(capsys, *argv) == expected
        assert len(entries(folder)) == len(before) + 1    # stored
        assert run(capsys, *argv) == expected             # read
        assert len(entries(folder)) == len(before) + 1


def test_a_hit_neither_imports_the_parser_nor_parses(tmp_path: Path) -> None:
    (tmp_path / "j.rules").write_text(RULES.replace("}", "    on pod evicted -> restart pod\n}"))
    script = ("import json, sys\nfrom rulec.commands import cli\n"
              "code = cli.main(['check', 'j.rules'])\n"
              "print(json.dumps([code, sorted(sys.modules)]))\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    env.pop("RULEC_NO_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=120) for _ in range(2)]
    (code1, first), (code2, second) = (json.loads(r.stdout.splitlines()[-1]) for r in runs)
    assert (code1, code2) == (0, 0)
    assert runs[0].stderr == runs[1].stderr and "1 warning" in runs[1].stderr
    assert runs[0].stdout.splitlines()[:-1] == runs[1].stdout.splitlines()[:-1]
    assert {"lark", "rulec.api", "rulec.checker"} <= set(first)
    assert not {"lark", "rulec.api", "rulec.syntax", "jmespath"} & set(second)


def test_changed_bytes_are_checked_again(capsys, folder: Path, tmp_path: Path) -> None:
    rules = tmp_path / "j.rules"
    rules.write_text(RULES)
    assert run(capsys, str(rules)) == (0, "", "")
    rules.write_text(RULES.replace("failed when", "faild when"))
    code, out, _ = run(capsys, str(rules))
    assert code == 1 and "faild" in out
    rules.write_text(RULES.replace("pod failed", "pod faild"))     # other bytes, same length
    code, out, _ = run(capsys, str(rules))
    assert code == 1 and "unknown pod state `faild`" in out
    assert len(entries(folder)) == 3


def test_a_file_added_to_a_folder_is_checked(capsys, folder: Path, tmp_path: Path) -> None:
    (tmp_path / "a.rules").write_text(RULES)
    assert run(capsys, str(tmp_path)) == (0, "", "")
    (tmp_path / "b.rules").write_text(RULES)        # the same kind again: a duplicate
    code, out, _ = run(capsys, str(tmp_path))
    assert code == 1 and "b.rules" in out


def test_the_working_directory_is_part_of_the_question(capsys, folder: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same relative path, the same bytes, from another folder: SARIF names the folder
    (`%SRCROOT%`), so the answer is another."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "j.rules").write_text(RULES)
    roots = []
    for name in ("a", "b", "a"):
        monkeypatch.chdir(tmp_path / name)
        code, out, _ = run(capsys, "j.rules", "--format", "sarif")
        roots.append(json.loads(out)["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"])
    assert roots == [(tmp_path / n).resolve().as_uri() + "/" for n in ("a", "b", "a")]
    assert len(entries(folder)) == 2


def test_the_crds_and_the_options_are_part_of_the_question(capsys, folder: Path,
                                                          tmp_path: Path) -> None:
    rules = tmp_path / "j.rules"
    rules.write_text("job j: kubeflow.org/v1 PyTorchJob {\n    failed when <<spec.runPolicy.backofLimit>>\n}\n")
    crd = tmp_path / "job.yaml"
    crd.write_text(CRD.with_name("kubeflow.org_tfjobs.yaml").read_text())   # another kind's
    code, out, _ = run(capsys, str(rules), "--crd", str(crd))
    assert code == 0 and "R602" in out and "backofLimit" not in out
    crd.write_text(CRD.read_text())
    code, out, _ = run(capsys, str(rules), "--crd", str(crd))
    assert "R602" not in out and "backofLimit" in out, out
    assert run(capsys, str(rules), "--crd", str(crd), "--format", "json")[1].startswith("[")
    assert len(entries(folder)) == 3


def test_other_code_asks_again(folder: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The key names the checking code: a module of the package changed (size or time), or
    another version of a library the check parses with."""
    package = tmp_path / "rulec"
    package.mkdir()
    module = package / "checker.py"
    module.write_text("x = 1\n")
    monkeypatch.setattr(checked, "_PACKAGE", package)
    files = [("j.rules", RULES.encode())]
    first = checked.key(files, [], ("concise", "False"))
    assert checked.key(files, [], ("concise", "False")) == first
    module.write_text("x = 2\n")
    os.utime(module, ns=(1, 1))
    second = checked.key(files, [], ("concise", "False"))
    os.utime(module, ns=(2, 2))
    third = checked.key(files, [], ("concise", "False"))
    monkeypatch.setattr(checked, "_LIBRARIES", ("lark", "jmespath"))
    fourth = checked.key(files, [], ("concise", "False"))
    assert len({first, second, third, fourth}) == 4
    assert checked.key(files, [], ("concise", "True")) != fourth
    assert checked.key([("k.rules", RULES.encode())], [], ("concise", "True")) != fourth


def test_no_cache_keeps_nothing(capsys, folder: Path, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULEC_NO_CACHE", "1")
    (tmp_path / "j.rules").write_text(RULES)
    assert run(capsys, str(tmp_path / "j.rules")) == (0, "", "")
    assert not folder.exists()


def test_an_entry_that_cannot_be_read_is_checked_again(capsys, folder: Path,
                                                       tmp_path: Path) -> None:
    rules = tmp_path / "j.rules"
    rules.write_text(RULES.replace("failed when", "faild when"))
    expected = run(capsys, str(rules))
    [entry] = entries(folder)
    for garbage in (b"", b"{", b'{"out": "x"}', b"[1]"):
        entry.write_bytes(garbage)
        assert run(capsys, str(rules)) == expected
    assert json.loads(entry.read_bytes())["code"] == 1


def test_inputs_that_cannot_be_read_are_never_kept(capsys, folder: Path, tmp_path: Path) -> None:
    rules = tmp_path / "j.rules"
    rules.write_bytes(b"job j: v1 Pod {\xff}\n")
    for _ in range(2):
        code, _, err = run(capsys, str(rules))
        assert code == 2 and "not UTF-8" in err
    code, _, err = run(capsys, str(tmp_path / "none.rules"))
    assert code == 2 and "no such file" in err
    assert entries(folder) == []
