"""runtime.reloading: files stat'ed at most once per interval, broken builds never replace a value."""
from __future__ import annotations

from pathlib import Path

from runtime import reloading


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_files_are_checked_at_most_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "value"
    path.write_text("1")
    clock = _Clock()
    builds: list[str] = []

    def build() -> str:
        builds.append(path.read_text())
        return builds[-1]

    holder = reloading.Reloading("test", (str(path),), build, 1.0, clock=clock)
    assert holder.get() == "1"
    path.write_text("22")
    clock.now = 0.5
    assert holder.get() == "1"   # not looked at yet
    clock.now = 1.0
    assert holder.get() == "22"
    clock.now = 5.0
    assert holder.get() == "22" and builds == ["1", "22"]   # unchanged files are not rebuilt


def test_a_failed_build_is_not_retried_until_the_files_change(tmp_path: Path) -> None:
    path = tmp_path / "value"
    path.write_text("ok")
    clock = _Clock()
    calls: list[str] = []

    def build() -> str:
        calls.append(text := path.read_text())
        if text == "bad":
            raise ValueError("bad value")
        return text

    holder = reloading.Reloading("test", (str(path),), build, 1.0, clock=clock)
    holder.get()
    path.write_text("bad")
    for clock.now in (1.0, 2.0, 3.0):
        assert holder.get() == "ok"
    path.write_text("new")
    clock.now = 4.0
    assert holder.get() == "new" and calls == ["ok", "bad", "new"]
