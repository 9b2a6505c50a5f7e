"""What rulec says about itself: its version (runtime.about's, the package's) and where its
documentation lives (for links in reports)."""
from __future__ import annotations

from runtime.about import version

__all__ = ["DOCS_URL", "version"]

# docs/ of the project's repository as a browser shows it; docs/language.md gives every
# diagnostic code an anchor of its own (`#r101`).
DOCS_URL = "https://github.com/jobrules/jobrules/blob/main/docs/"

