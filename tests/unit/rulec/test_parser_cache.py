"""The parser kept on disk between processes: loaded when its entry is whole, built again when
not, and never taken for a parser made from another grammar, other options or another Lark."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lark
import pytest

from rulec import syntax
from rulec.source import SourceFile

TEXT = "# kinds\njob j: v1 Pod {  # the pod itself\n    failed when any pod failed\n}\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache, and no parser of this process remembered (nor one left for the next
    test: the parser a test makes lives in its temporary folder)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RULEC_NO_CACHE", raising=False)
    syntax.parser.cache_clear()
    yield tmp_path / "xdg" / "jobrules" / "parser"
    syntax.parser.cache_clear()


@pytest.fixture(scope="module")
def entry(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    """The name and content of the entry a first build writes (building takes a while: once)."""
    home = tmp_path_factory.mktemp("xdg")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(home))
        patch.delenv("RULEC_NO_CACHE", raising=False)
        syntax.parser.cache_clear()
        syntax.parser()
        syntax.parser.cache_clear()
    written = list((home / "jobrules" / "parser").iterdir())
    assert [p.name.endswith(".pickle") for p in written] == [True], written   # no temporary left
    return written[0].name, written[0].read_bytes()


def no_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make building a parser from the grammar fail (loading one never calls __init__)."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the parser was built, not loaded")

    monkeypatch.setattr(lark.Lark, "__init__", refuse)


def comments(parsed: syntax.Parsed) -> list[str]:
    return [c.text for c in parsed.comments]


def test_a_parser_built_once_is_loaded_after(folder: Path, entry: tuple[str, bytes],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    name, content = entry
    folder.mkdir(parents=True)
    (folder / name).write_bytes(content)
    no_building(monkeypatch)
    parsed = syntax.parse(SourceFile.from_text("t.rules", TEXT))
    assert parsed.tree is not None and parsed.diagnostics == ()
    # The comment sink is pickled by name: the loaded parser feeds the module's own.
    assert comments(parsed) == ["# kinds", "# the pod itself"]


@pytest.mark.parametrize("damage", ["empty", "half"])
def test_a_damaged_entry_is_built_again_and_replaced(
        folder: Path, entry: tuple[str, bytes], monkeypatch: pytest.MonkeyPatch,
        damage: str) -> None:
    name, content = entry
    folder.mkdir(parents=True)
    (folder / name).write_bytes(b"" if damage == "empty" else content[:len(content) // 2])
    parsed = syntax.parse(SourceFile.from_text("t.rules", TEXT))
    assert parsed.tree is not None and comments(parsed) == ["# kinds", "# the pod itself"]
    syntax.parser.cache_clear()
    no_building(monkeypatch)
    assert syntax.parse(SourceFile.from_text("t.rules", TEXT)).tree is not None
    assert [p.name for p in folder.iterdir()] == [name]


def test_the_entry_is_named_by_all_the_parser_is_made_from() -> None:
    grammar, options = "start: \"a\"\n", {"parser": "lalr", "keep_all_tokens": False}
    name = syntax.cached_parser_name(grammar, options, "1.3.1")
    assert name == syntax.cached_parser_name(grammar, dict(reversed(options.items())), "1.3.1")
    others = {syntax.cached_parser_name(grammar + " ", options, "1.3.1"),
              syntax.cached_parser_name(grammar, {**options, "keep_all_tokens": True}, "1.3.1"),
              syntax.cached_parser_name(grammar, options, "1.3.2")}
    assert name not in others and len(others) == 3

