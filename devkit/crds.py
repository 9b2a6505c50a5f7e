"""The CRDs the project tests against (devkit/crds/): where they are and how they are read.

Apart from the control-plane launcher (devkit.cluster), so that the unit tests and the compiler's
checks against real schemas read them without importing the launcher and what it needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

FOLDER = Path(__file__).resolve().parent / "crds"


def folder() -> Path:
    """``JOBRULES_CRDS`` (must be a folder), else the repository's ``devkit/crds``."""
    if explicit := os.environ.get("JOBRULES_CRDS"):
        if not Path(explicit).is_dir():
            raise NotADirectoryError(f"JOBRULES_CRDS={explicit} is not a directory")
        return Path(explicit)
    return FOLDER


def files() -> list[Path]:
    """The CRD manifests, sorted."""
    return sorted(folder().glob("*.y*ml"))


def manifests(where: Path) -> list[dict[str, Any]]:
    """The CRDs in ``where``, as the dev kit installs them.

    CRDs whose conversion webhook would point at a Service that does not exist here (Tekton) get
    ``strategy: None``: objects are then read and written in the version they are sent with.
    """
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 20x faster on 3 MB of CRDs
    out = []
    for path in sorted(where.glob("*.y*ml")):
        for crd in yaml.load_all(path.read_text(), Loader=loader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            if crd["spec"].get("conversion", {}).get("strategy") == "Webhook":
                crd["spec"]["conversion"] = {"strategy": "None"}
            out.append(crd)
    return out
