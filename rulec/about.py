"""What rulec says about itself: its version (from the installed package metadata, which
pyproject.toml writes) and where its documentation lives (for links in reports)."""
from __future__ import annotations

from functools import cache

# docs/ of the project's repository as a browser shows it; docs/language.md gives every
# diagnostic code an anchor of its own (`#r101`).
DOCS_URL = "https://github.com/jobrules/jobrules/blob/main/docs/"


@cache
def version() -> str:
    """The installed version; read only when asked (the metadata costs ~25 ms to read)."""
    from importlib import metadata

    try:
        return metadata.version("jobrules")
    except metadata.PackageNotFoundError:  # a source tree used without installing it
        return "0+unknown"
