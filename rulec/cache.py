"""rulec's caches on disk: where they live and how an entry is written.

Each cache is a folder under `${XDG_CACHE_HOME:-~/.cache}/jobrules/`, the user's own, whose
entries are named by a hash of everything they are made from: an entry is never stale, since
anything changed asks for another name. An entry is written to a temporary file in its folder
and renamed over its name, so that two processes writing it at once leave one whole entry and a
reader never sees half of one. A cache that cannot be written is skipped; `RULEC_NO_CACHE=1`
turns every cache off. Deleting the folder is always safe.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def folder(name: str) -> Path | None:
    """The folder of the cache `name`, or None when `RULEC_NO_CACHE=1` or no home folder is
    known. It may not exist yet: `write` makes it."""
    if os.environ.get("RULEC_NO_CACHE") == "1":
        return None
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no HOME and no password entry
        return None
    return base / "jobrules" / name


def write(where: Path, name: str, data: bytes) -> None:
    """Store `data` as the entry `name` of the cache folder `where`, atomically; nothing when
    the folder cannot be made or written."""
    tmp = None
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, where / name)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
