"""What jobrules says about itself: its version, from the installed package metadata (which
pyproject.toml writes). One reading for `rulec --version`, SARIF reports and the controller's
User-Agent, so that the three never disagree."""
from __future__ import annotations

from functools import cache


@cache
def version() -> str:
    """The installed version; read only when asked (the metadata costs ~25 ms to read)."""
    from importlib import metadata

    try:
        return metadata.version("jobrules")
    except metadata.PackageNotFoundError:  # a source tree used without installing it
        return "0+unknown"
