"""The editor grammar (editors/vscode/) against the compiler: the same keywords as
grammar/rules.lark, and every token of every shipped and example file highlighted as what the
compiler's lexer reads there.

Tokenizing runs `vscode-textmate` on `vscode-oniguruma`, as VS Code does; `npm ci` installs them
into editors/vscode/node_modules from the committed lock file when that is missing or stale.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import lark
import pytest

from rulec import api, syntax, template
from rulec.nodes import Expr, Placeholder

ROOT = Path(__file__).resolve().parents[2]
EDITOR = ROOT / "editors" / "vscode"
TM = json.loads((EDITOR / "syntaxes" / "rules.tmLanguage.json").read_text(encoding="utf-8"))
CONFIG = json.loads((EDITOR / "language-configuration.json").read_text(encoding="utf-8"))
FILES = sorted(p.relative_to(ROOT).as_posix()
               for folder in ("rules", "examples") for p in (ROOT / folder).rglob("*.rules"))


def editor_keywords(grammar: dict) -> dict[str, str]:
    """Each keyword of the editor grammar and its scope (from `repository.keywords`)."""
    found: dict[str, str] = {}
    for pattern in grammar["repository"]["keywords"]["patterns"]:
        [words] = re.findall(r"\(\?:([a-z|-]+)\)", pattern["match"])
        for word in words.split("|"):
            assert word not in found, f"`{word}` is listed twice"
            found[word] = pattern["name"]
    return found


def drift(compiler: frozenset[str], grammar: dict) -> tuple[set[str], set[str]]:
    """Keywords the editor grammar lacks, and keywords it has that the language does not."""
    editor = set(editor_keywords(grammar))
    return set(compiler) - editor, editor - set(compiler)


KEYWORDS = editor_keywords(TM)


def test_the_editor_grammar_has_exactly_the_languages_keywords() -> None:
    missing, extra = drift(syntax.all_keywords(), TM)
    assert not missing, f"add to editors/vscode/syntaxes/rules.tmLanguage.json: {sorted(missing)}"
    assert not extra, f"not keywords of grammar/rules.lark: {sorted(extra)}"


def test_a_keyword_added_only_to_the_lark_grammar_is_caught() -> None:
    text = syntax.GRAMMAR.read_text(encoding="utf-8")
    changed = text.replace('| "abort" "job"', '| "abort" "job" | "pause" "job"')
    assert changed != text
    parser = lark.Lark(changed, parser="lalr", lexer="contextual")
    assert drift(syntax.all_keywords(parser), TM) == ({"pause"}, set())


def test_the_language_configuration_fits_the_grammar() -> None:
    assert re.fullmatch(syntax.parser().get_terminal("COMMENT").pattern.value,
                        CONFIG["comments"]["lineComment"] + " text")
    pairs = {tuple(p) for p in CONFIG["brackets"]}
    assert pairs == {("{", "}"), ("[", "]"), ("(", ")"), ("<<", ">>")}
    assert {(p["open"], p["close"]) for p in CONFIG["autoClosingPairs"]} >= pairs
    assert all(re.fullmatch(CONFIG["wordPattern"], k) for k in KEYWORDS)


# ---------------------------------------------------------------- tokenizing with vscode-textmate

@pytest.fixture(scope="module")
def tokens() -> dict[str, list[tuple[int, int, int, str]]]:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed to tokenize with vscode-textmate"
    installed = EDITOR / "node_modules" / ".package-lock.json"
    lock = EDITOR / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"],
                              cwd=EDITOR, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([node, "tokenize.js", *(str(ROOT / f) for f in FILES)], cwd=EDITOR,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {Path(f).relative_to(ROOT).as_posix(): [tuple(t) for t in ts]
            for f, ts in json.loads(proc.stdout).items()}


# What the compiler's tokens must look like: a scope that every character of the token has,
# or `exact` (one editor token spans exactly the compiler's, its innermost scope starting so).
WHOLE = {"STRING": "string.quoted.double.rules", "EXPR": "meta.embedded.expression.jmespath.rules"}
EXACT = {"INT": ("constant.numeric.integer.rules",), "DURATION": ("constant.numeric.duration.rules",),
         "GROUP_VERSION": ("constant.other.api-version.rules",),
         "FAILED_OR_EVICTED": ("keyword.other.state.rules",),
         "FACTOR": ("constant.numeric.decimal.rules", "constant.numeric.integer.rules"),
         "QUANTITY": ("constant.numeric.quantity.rules", "constant.numeric.integer.rules")}
NAMES = ("NAME", "KIND", "PATH", "TASK_PATH", "WORD")  # innermost scope: a name of some sort
NAME_SCOPES = ("variable.", "entity.name.", "support.type.")


def _positions(line: int, column: int, text: str) -> Iterator[tuple[int, int]]:
    for ch in text:
        if ch == "\n":
            line, column = line + 1, 1
            continue
        yield line, column
        column += 1


def test_every_shipped_and_example_file_is_tokenized(tokens) -> None:
    assert FILES and sorted(tokens) == FILES
    assert any(f.startswith("rules/") for f in FILES) and any(f.startswith("examples/") for f in FILES)


@pytest.mark.parametrize("path", FILES)
def test_every_token_is_highlighted_as_the_compiler_reads_it(tokens, path: str) -> None:
    at: dict[tuple[int, int], list[str]] = {}
    spans: dict[tuple[int, int], tuple[int, list[str]]] = {}
    for line, start, end, scopes in tokens[path]:
        for column in range(start, end):
            at[line, column] = scopes.split()
        spans[line, start] = end, scopes.split()
    source = api.read(str(ROOT / path))
    parsed = syntax.parse(source, keep_all_tokens=True)
    assert parsed.tree is not None, path
    grammar = syntax.parser(True)
    problems: list[str] = []
    checked: set[tuple[int, int]] = set()

    def whole(line: int, column: int, text: str, scope: str, what: str) -> None:
        for pos in _positions(line, column, text):
            checked.add(pos)
            if scope not in at.get(pos, []):
                problems.append(f"{path}:{pos[0]}:{pos[1]}: {what} {text!r}: no {scope} "
                                f"in {at.get(pos)}")
                return

    def exact(tok: lark.Token, prefixes: tuple[str, ...], what: str) -> None:
        checked.update(_positions(tok.line, tok.column, str(tok)))
        end, scopes = spans.get((tok.line, tok.column), (None, []))
        if end != tok.end_column or not scopes[-1].startswith(prefixes):
            problems.append(f"{path}:{tok.line}:{tok.column}: {what} {str(tok)!r} is not one "
                            f"editor token scoped {' or '.join(prefixes)}: "
                            f"{at.get((tok.line, tok.column))} up to column {end}")

    for tok in parsed.tree.scan_values(lambda v: isinstance(v, lark.Token)):
        text = str(tok)
        term = grammar.get_terminal(tok.type)
        if term.pattern.type == "str" and text in KEYWORDS:
            exact(tok, (KEYWORDS[text],), "keyword")
        elif term.pattern.type == "str":
            exact(tok, ("punctuation.", "keyword.operator."), "symbol")
        elif tok.type in WHOLE:
            whole(tok.line, tok.column, text, WHOLE[tok.type], tok.type.lower())
        elif tok.type in EXACT:
            exact(tok, EXACT[tok.type], tok.type.lower())
        elif tok.type in NAMES:  # a name spelled like a keyword may be shown as one
            exact(tok, NAME_SCOPES + ((KEYWORDS[text],) if text in KEYWORDS else ()), "name")
        else:
            problems.append(f"{path}:{tok.line}:{tok.column}: no check for a {tok.type} token")
        if tok.type == "STRING":
            found: list = []
            for part in template.from_string(text, syntax.token_span(path, tok), found).parts:
                if isinstance(part, Placeholder):
                    whole(part.span.line, part.span.column, "{" + part.name + "}",
                          "meta.template.placeholder.rules", "placeholder")
                elif isinstance(part, Expr):
                    whole(part.span.line, part.span.column, "{<<" + part.text + ">>}",
                          "meta.embedded.expression.jmespath.rules", "template expression")
    for comment in parsed.comments:
        whole(comment.span.line, comment.span.column, comment.text,
              "comment.line.number-sign.rules", "comment")
    assert not problems, "\n".join(problems[:20])
    # Every character that is not blank belongs to a token checked above.
    unchecked = [pos for pos in _positions(1, 1, source.text)
                 if pos not in checked and not source.line_text(pos[0])[pos[1] - 1].isspace()]
    assert not unchecked, unchecked[:10]
