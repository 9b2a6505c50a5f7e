"""A value built from files and rebuilt when they change on disk: the plan and TLS certificates
of the webhook, the plan of the controller.

The files are stat'ed at most once per `interval` by whichever thread asks first (the others keep
the current value meanwhile), so a ConfigMap swapping its `..data` symlink is noticed within an
interval without a watch. A failed build keeps the previous value and is not retried until the
files change again: a broken plan never replaces a working one.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
Signature = tuple[tuple[int, int, int, int] | None, ...]


class Reloading(Generic[T]):
    """The latest value that `build` made from `paths`.

    `on_load(previous, value)` runs after each successful build (previous is None the first time);
    `on_error(error, kept)` after a failed one, `kept` saying whether a previous value stays in use.
    """

    def __init__(self, what: str, paths: tuple[str, ...], build: Callable[[], T],
                 interval: float, on_load: Callable[[T | None, T], None] | None = None,
                 on_error: Callable[[Exception, bool], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.paths = paths
        self._build = build
        self._interval = interval
        self._on_load = on_load
        self._on_error = on_error
        self._clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._signature: Signature | None = None
        self._checked = -math.inf

    def get(self) -> T | None:
        # Without a value yet, wait for the thread that is loading one rather than return None.
        if self._due() and self._lock.acquire(blocking=self._value is None):
            try:
                if self._due():
                    self._refresh()
            finally:
                self._lock.release()
        return self._value

    def _due(self) -> bool:
        return self._clock() - self._checked >= self._interval

    def _refresh(self) -> None:
        self._checked = self._clock()
        signature = _signature(self.paths)
        if signature == self._signature:
            return
        self._signature = signature
        try:
            value = self._build()
        except Exception as err:  # keep serving what we have, whatever broke
            if self._on_error is not None:
                self._on_error(err, self._value is not None)
            return
        previous, self._value = self._value, value
        if self._on_load is not None:
            self._on_load(previous, value)


def _signature(paths: tuple[str, ...]) -> Signature:
    """What changes when a file is rewritten or swapped: device, inode, mtime, size."""
    def one(path: str) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(path)  # follows symlinks, so a `..data` swap shows as a new inode
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    return tuple(one(path) for path in paths)
