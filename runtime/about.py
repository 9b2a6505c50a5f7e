"""What jobrules says about itself: its version. One value for `rulec --version`, SARIF reports
and the controller's User-Agent, so that the three never disagree.

The version is written here rather than read from the installed package's metadata: importing
importlib.metadata alone costs some 25 ms, a third of `rulec --version`. pyproject.toml builds
the package with the same version (tests/unit/test_version.py keeps the two equal)."""
from __future__ import annotations

VERSION = "0.1.0"


def version() -> str:
    return VERSION
