"""What `rulec check` answered, kept on disk, so that checking rules that did not change costs
neither the parser's import nor a parse (two thirds of a check's time).

An answer (what the check printed, and its exit code) is stored in the cache folder
`check` (rulec.cache) under a name hashed from everything the answer is made from: the bytes of
each rules file and CRD file with its path, the options that change what is printed, the
working directory (relative paths are read from it, and SARIF names it as `%SRCROOT%`), and a stamp
of the code that checks them (the size and modification time of every file of the `rulec`
package and of the libraries it parses with, and the Python version). Anything changed asks for
another name, so an entry is never stale; `RULEC_NO_CACHE=1` turns it off. Only answers about
inputs that could all be read are kept: an input error is found again on every run.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rulec import cache

FOLDER = "check"
_PACKAGE = Path(__file__).parent
# The libraries whose behaviour shows in a check's answer: the parser, the expression
# language, and the CRD reader.
_LIBRARIES = ("lark", "jmespath", "yaml")


@dataclass(frozen=True, slots=True)
class Answer:
    out: str
    err: str
    code: int

    def give(self) -> int:
        sys.stdout.write(self.out)
        sys.stderr.write(self.err)
        return self.code


def key(files: Iterable[tuple[str, bytes]], crds: Iterable[str], options: Iterable[str]) -> str | None:
    """The cache name of the answer about these rules files (path, bytes), CRD files and
    options; None when an input cannot be read (the check itself reports it)."""
    digest = hashlib.sha256()
    for part in (_code_stamp(), os.getcwd(), *options):
        digest.update(part.encode() + b"\0")
    try:
        for label, items in (("rules", list(files)),
                             ("crds", [(p, Path(p).read_bytes()) for p in crds])):
            digest.update(f"{label}:{len(items)}\0".encode())
            for path, data in items:
                digest.update(f"{path}\0{len(data)}\0".encode())
                digest.update(data)
    except OSError:
        return None
    return digest.hexdigest()


def load(name: str) -> Answer | None:
    """The answer stored under `name`, or None (none stored, or an entry that cannot be read)."""
    folder = cache.folder(FOLDER)
    if folder is None:
        return None
    try:
        stored = json.loads((folder / name).read_bytes())
        return Answer(str(stored["out"]), str(stored["err"]), int(stored["code"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(name: str, answer: Answer) -> None:
    folder = cache.folder(FOLDER)
    if folder is not None:
        data = {"out": answer.out, "err": answer.err, "code": answer.code}
        cache.write(folder, name, json.dumps(data).encode())


def _code_stamp() -> str:
    """Size and modification time of the files that decide a check's answer."""
    parts = [sys.version]
    for root, dirs, files in os.walk(_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        parts.extend(_stat(os.path.join(root, f)) for f in sorted(files)
                     if f.endswith((".py", ".lark")))
    for library in _LIBRARIES:
        spec = importlib.util.find_spec(library)
        parts.append(_stat(spec.origin) if spec and spec.origin else f"{library}: none")
    return "\n".join(parts)


def _stat(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}: gone"
    return f"{path} {st.st_size} {st.st_mtime_ns}"
