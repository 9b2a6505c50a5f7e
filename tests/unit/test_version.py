"""One version: the one the code reports (runtime.about) is the one the package is built with."""
from __future__ import annotations

import tomllib
from pathlib import Path

from runtime import about

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_reported_version_is_the_packages() -> None:
    built = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    assert about.version() == about.VERSION == built
