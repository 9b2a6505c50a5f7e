"""Reading what `rulec eval`, `mutate` and `test` are given: rules or plans, objects, pod lists.

Every problem is an `api.InputError` with a message naming the file, which the commands report as a
usage/IO error (exit 2) without a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import yaml

from rulec import api, diagnostics, emit
from rulec.source import SourceFile
from runtime import plan as planlib


class _Loader(yaml.SafeLoader):
    """YAML 1.2-ish: timestamps stay strings, as Kubernetes objects carry them."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_yaml(text: str, where: str) -> list[Any]:
    """Every document of a YAML (or JSON) text."""
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as err:
        raise api.InputError(f"{where}: not YAML or JSON: {err}") from None


def read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise api.InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None


def read_object(path: str | Path) -> dict[str, Any]:
    """One Kubernetes object from a YAML or JSON file."""
    docs = parse_yaml(read_text(path), str(path))
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise api.InputError(f"{path}: expected one object")
    return docs[0]


def objects(docs: Iterable[Any], where: str) -> list[dict[str, Any]]:
    """Objects from documents: JSON arrays, `kind: List` (or any `items`) and single objects."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if isinstance(doc, list):
            out.extend(objects(doc, where))
        elif isinstance(doc, dict) and isinstance(doc.get("items"), list) and \
                str(doc.get("kind", "List")).endswith("List"):
            out.extend(objects(doc["items"], where))
        elif isinstance(doc, dict):
            out.append(doc)
        else:
            raise api.InputError(f"{where}: expected objects, found {type(doc).__name__}")
    return out


def read_objects(path: str | Path) -> list[dict[str, Any]]:
    """A pod list: a JSON array, a `kind: List`, or multi-document YAML."""
    return objects(parse_yaml(read_text(path), str(path)), str(path))


def load_plan(paths: Iterable[str], relative_to: str | None = None) -> planlib.Plan:
    """A compiled plan (`.json`), or `.rules` files and folders compiled on the fly.

    With `relative_to`, rules are compiled under their paths relative to that folder, so rule
    positions (and the plan digest) do not depend on where the command was run from.
    """
    return load_plan_text(paths, relative_to)[0]


def load_plan_text(paths: Iterable[str], relative_to: str | None = None) -> tuple[planlib.Plan, str]:
    """`load_plan`, and the plan's JSON text (the file's, or what `rulec compile` would write)."""
    given = list(paths)
    if not given:
        raise api.InputError("no rules given")
    plans = [p for p in given if p.endswith(".json")]
    if plans:
        if len(given) != 1:
            raise api.InputError("give either one compiled plan (.json) or .rules files and folders")
        text = read_text(plans[0])
        try:
            return planlib.loads(text), text
        except planlib.PlanError as err:
            raise api.InputError(f"{plans[0]}: {err}") from None
    files = api.rule_files(given)
    sources = [api.read(f) for f in files]
    if not sources:
        raise api.InputError(f"no .rules files in {' '.join(given)}")
    if relative_to is not None:
        sources = [SourceFile.from_text(os.path.relpath(s.path, relative_to), s.text) for s in sources]
    built = api.build_sources(sources)
    if built.plan is None:
        text = diagnostics.render(built.errors or built.diagnostics, "concise", dict(built.sources))
        raise api.InputError(f"the rules have errors:\n{text.rstrip()}")
    text = emit.dumps(built.plan)
    try:
        return planlib.loads(text), text   # digest as for a plan from `rulec compile`
    except planlib.PlanError as err:
        raise api.InputError(f"the compiled plan does not load: {err}") from None
