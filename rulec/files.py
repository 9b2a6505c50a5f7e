"""Which files a command reads, and how a file's bytes become rules text.

Kept apart from `rulec.api` (which imports the parser) so that a command can find and read its
inputs before it knows whether it needs to parse them (`rulec check` answers from its cache).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from rulec.source import SourceFile


class InputError(Exception):
    """An input that cannot be used (a path that cannot be read as rules, a malformed object or
    suite, rules with errors): every command reports it as a usage/IO problem (exit 2), one line
    naming the file, without a traceback."""


def rule_files(paths: Iterable[str]) -> list[str]:
    """The `.rules` files named by `paths` (files, or folders searched recursively), sorted.

    In folders only regular files count: reading a FIFO or a device named `*.rules` would
    block or never end. A path named explicitly is read whatever it is."""
    found: set[str] = set()
    for given in paths:
        path = os.path.normpath(given)
        if os.path.isdir(path):
            before = len(found)
            for root, dirs, files in os.walk(path):
                dirs.sort()
                found.update(os.path.normpath(os.path.join(root, f)) for f in files
                             if f.endswith(".rules") and os.path.isfile(os.path.join(root, f)))
            if len(found) == before:
                raise InputError(f"{given}: no .rules files in this folder")
        elif os.path.exists(path):
            found.add(path)
        else:
            raise InputError(f"{given}: no such file or directory")
    return sorted(found)


def read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from None


def source(path: str, data: bytes) -> SourceFile:
    """The rules text of a file's bytes: UTF-8, without a leading byte order mark (as some
    editors write), with `\\n` line ends (universal newlines, as Python's text files read)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    return SourceFile.from_text(path, text)


def read(path: str) -> SourceFile:
    return source(path, read_bytes(path))
