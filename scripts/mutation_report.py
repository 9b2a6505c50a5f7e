"""The results of a mutmut run, for scripts/mutation.sh; run from a module's work folder
(.mutation/MODULE), where mutmut keeps its mutants/ and reads its setup.cfg.

    mutation_report.py report MODULE EQUIVALENT_FILE   counts and survivors, each in one line
    mutation_report.py pending [ID...]                 the mutants not killed (of those named)

Reads mutmut's own results (mutants/**/*.py.meta) through mutmut's library (3.x)."""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files
from mutmut.utils.format_utils import orig_function_and_class_names_from_key

DETECTED = {"killed", "timeout", "caught by type check", "segfault"}


def results() -> dict[str, tuple[Path, str]]:
    """Each mutant's id -> its source file and status."""
    found: dict[str, tuple[Path, str]] = {}
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for key, code in data.exit_code_by_key.items():
            found[key] = (Path(path), status_by_exit_code[code])
    return found


def equivalents(path: str) -> dict[str, str]:
    """scripts/mutation-equivalent.txt: `MUTANT_ID  reason` a line; `#` starts a comment."""
    listed: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, why = line.partition(" ")
            listed[key] = why.strip()
    return listed


def function_lines(path: Path, mutant: str) -> range:
    name, cls = orig_function_and_class_names_from_key(mutant)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = tree.body
    if cls is not None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                body = node.body
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return range(node.lineno, (node.end_lineno or node.lineno) + 1)
    return range(0)


def one_line(mutant: str, path: Path) -> str:
    """`file:line: old -> new`, the lines the mutant changes, each stripped."""
    diff = get_diff_for_mutant(mutant, path=path).splitlines()
    old = [d[1:].strip() for d in diff[2:] if d.startswith("-")]
    new = [d[1:].strip() for d in diff[2:] if d.startswith("+")]
    source = path.read_text(encoding="utf-8").splitlines()
    where = next((n for n in function_lines(path, mutant) if old and source[n - 1].strip() == old[0]), None)
    change = f"{' / '.join(old)}  ->  {' / '.join(new)}"
    return f"{path}:{where or '?'}: {change}"


def report(module: str, equivalent_file: str) -> None:
    found = results()
    listed = equivalents(equivalent_file)
    counts = Counter(status for _, status in found.values())
    survivors = sorted(k for k, (_, s) in found.items() if s == "survived")
    equivalent = [k for k in survivors if k in listed]
    left = [k for k in survivors if k not in listed]
    total = len(found)
    killed = sum(counts[s] for s in DETECTED)
    score = killed / (total - len(equivalent)) if total > len(equivalent) else 1.0
    others = {s: n for s, n in counts.items() if s not in DETECTED | {"survived", "no tests"}}
    print(f"== {module}: {total} mutants: killed {counts['killed']}, survived {counts['survived']}"
          f" ({len(equivalent)} of them listed as equivalent), timed out {counts['timeout']},"
          f" no tests {counts['no tests']}"
          + "".join(f", {s} {n}" for s, n in sorted(others.items()))
          + f"; score {score:.1%} (killed and timed out, of the mutants not listed as equivalent)")
    for key in left:
        print(f"   survived  {key}  {one_line(key, found[key][0])}")
    for key in sorted(k for k, (_, s) in found.items() if s not in DETECTED | {"survived"}):
        print(f"   {found[key][1]:9} {key}  {one_line(key, found[key][0])}")
    stale = [k for k in listed if k in found and found[k][1] != "survived"]
    for key in stale:
        print(f"   note: {key} is listed as equivalent but is {found[key][1]} now")


def pending(named: list[str]) -> None:
    found = results()
    for key in named or sorted(found):
        if key in found and found[key][1] not in DETECTED:
            print(key)


if __name__ == "__main__":
    if sys.argv[1:2] == ["report"]:
        report(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["pending"]:
        pending(sys.argv[2:])
    else:
        sys.exit(__doc__)
