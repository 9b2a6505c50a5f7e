"""The draft of edits: what the matched injections want, checked field by field against the
received pod, then emitted as RFC 6902 ops that apply to exactly that pod.

Containers are addressed by their index in the received pod (guarded by a `test` of their name)
and everything new is appended with `/-`, because the received pod is the object the API server
applies the patch to. Every decision (conflicts, idempotence, malformed pods) is written down in
docs/injection.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import orjson

from runtime import patch as jp
from runtime import vocabulary
from runtime.mutator.view import LISTS, MutationError, Received, array
from runtime.plan import Injection
from runtime.span import Span

RECORD_ANNOTATION = vocabulary.INJECTED_ANNOTATION
# What the API server's ServiceAccount admission plugin mounts into every container it finds
# without it: the projected token volume it added to the pod, read-only, at this path.
TOKEN_VOLUME_PREFIX = "kube-api-access-"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


class Edit:
    """Changes to one container of the received pod, addressed by its index there."""

    __slots__ = ("field", "index", "name", "container", "env", "env_names", "mounts",
                 "mount_paths", "command", "args", "wrapped")

    def __init__(self, field: str, index: int, name: str, container: dict) -> None:
        self.field, self.index, self.name, self.container = field, index, name, container
        self.env: list[dict] = []
        self.env_names: set[str] = set()     # added here; the pod's own are scanned (listed)
        self.mounts: list[dict] = []
        self.mount_paths: set[str] = set()
        self.command: Any = container.get("command")
        self.args: Any = container.get("args")
        self.wrapped = False

    def require_list(self, key: str, injection: Injection, span: Span) -> None:
        """Raise unless the container's `key` (env, volumeMounts) is absent, null or a list."""
        value = self.container.get(key)
        if value is not None and not isinstance(value, list):
            raise MutationError(injection.name, span,
                                f"container {self.name!r}: {key} is a {type(value).__name__}, "
                                f"not an array")


class Draft:
    """Gathers the changes of every matched injection, then emits them as patch ops.

    Per request, so it does the least it can: the pod's shape is checked once, and its volume
    and container names are collected once, when first asked about."""

    __slots__ = ("pod", "annotations", "labels", "volumes", "_volume_names", "edits", "sidecars",
                 "_container_names", "recorded", "credit", "odd")

    def __init__(self, pod: Received) -> None:
        self.pod = pod
        self.annotations: dict[str, tuple[str, str]] = {}   # key -> (value, injection)
        self.labels: dict[str, tuple[str, str]] = {}
        self.volumes: list[dict] = []
        self._volume_names: set[Any] | None = None
        self.edits: dict[tuple[str, int], Edit] = {}
        self.sidecars: dict[str, list[dict]] = {"containers": [], "initContainers": []}
        self._container_names: set[Any] | None = None
        self.recorded = recorded(pod.annotations)
        self.credit: set[str] = set()   # injections that changed the pod (metadata: see finish)
        self.odd = _odd(pod.pod)   # fields no op can write into, with why; mostly empty

    def edit(self, field: str, index: int, container: dict, name: str) -> Edit:
        edit = self.edits.get((field, index))
        if edit is None:
            edit = self.edits[(field, index)] = Edit(field, index, name, container)
        return edit

    def container_names(self) -> set[Any]:
        if self._container_names is None:
            spec = self.pod.spec
            self._container_names = _taken(spec.get("containers"), "name")
            self._container_names.update(_taken(spec.get("initContainers"), "name"))
        return self._container_names

    def volume_names(self) -> set[Any]:
        if self._volume_names is None:
            self._volume_names = _taken(self.pod.spec.get("volumes"), "name")
        return self._volume_names

    def token_mount(self) -> dict | None:
        """The service-account token mount the API server would add to a container we add,
        or None when it would add none (the pod opts out, or has no token volume)."""
        spec = self.pod.spec
        if spec.get("automountServiceAccountToken") is False:
            return None
        for volume in array(spec.get("volumes")):
            name = volume.get("name") if isinstance(volume, dict) else None
            if isinstance(name, str) and name.startswith(TOKEN_VOLUME_PREFIX):
                return {"name": name, "readOnly": True, "mountPath": TOKEN_PATH}
        return None

    def require(self, field: str, injection: Injection, span: Span) -> None:
        """Raise if the pod's `field` (see _odd) cannot be written, citing the op at `span`."""
        why = self.odd.get(field)
        if why is not None:
            raise MutationError(injection.name, span, why)

    def known_volume(self, volume: str, injection: Injection, span: Span) -> None:
        if volume not in self.volume_names():
            raise MutationError(injection.name, span,
                                f"mount of volume {volume!r}, which neither the pod nor an "
                                f"earlier `volume` op declares")

    # -- emitting -------------------------------------------------------------------------------

    def finish(self, matched: list[Injection],
               digests: Mapping[str, str]) -> tuple[list[dict], tuple[str, ...]]:
        """The patch ops, and the injections that contributed one, in plan order; each new
        one recorded as `name@digest` (its digest from `digests`)."""
        credit = self.credit
        annotations = _changed(self.annotations, self.pod.annotations, credit)
        labels = _changed(self.labels, self.pod.labels, credit)
        applied: list[str] = []
        entries = list(self.recorded.values())   # the record annotation, if it grows
        for injection in matched:
            if injection.name in credit:
                applied.append(injection.name)
                if injection.name not in self.recorded:
                    self.require("annotations", injection, injection.span)
                    entries.append(f"{injection.name}@{digests.get(injection.name, '')}")
        if len(entries) > len(self.recorded):
            annotations[RECORD_ANNOTATION] = orjson.dumps(entries).decode()
        ops: list[dict] = []
        pod = self.pod.pod
        if annotations or labels:
            meta = pod.get("metadata")   # an object, or absent or null (see _odd)
            if meta is None:
                ops.append({"op": "add", "path": "/metadata", "value": {}})
                meta = {}
            _emit_map(ops, "/metadata/annotations", annotations, meta.get("annotations"))
            _emit_map(ops, "/metadata/labels", labels, meta.get("labels"))
        sidecars = self.sidecars
        spec: Any = pod.get("spec")   # an object, or absent or null (see _odd)
        if spec is None and (self.volumes or sidecars["containers"] or sidecars["initContainers"]):
            ops.append({"op": "add", "path": "/spec", "value": {}})
            spec = {}
        if self.volumes:
            _emit_list(ops, "/spec/volumes", self.volumes, spec.get("volumes"))
        for key in sorted(self.edits):   # (list, index): LISTS are in sorted order
            edit = self.edits[key]
            if edit.env or edit.mounts or edit.wrapped:
                _emit_edit(ops, edit)
        for field in LISTS:
            if sidecars[field]:
                _emit_list(ops, f"/spec/{field}", sidecars[field], spec.get(field))
        return ops, tuple(applied)


# The fields an op writes into, under the pod's top-level objects, and the type each must have.
_WRITES = (("metadata", ("annotations", "labels"), dict),
           ("spec", ("volumes",) + LISTS, list))
_JSON_TYPE = {dict: "an object", list: "an array"}


def _odd(pod: dict) -> dict[str, str]:
    """Field -> why it cannot be written, for each field of _WRITES that is neither absent,
    null, nor of its type (nor under an absent or null parent). Empty for any sound pod."""
    odd: dict[str, str] = {}
    for top, fields, leaf in _WRITES:
        parent = pod.get(top)
        if isinstance(parent, dict):
            for field in fields:
                node = parent.get(field)
                if node is not None and not isinstance(node, leaf):
                    odd[field] = (f"pod field {top}.{field} is a {type(node).__name__}, "
                                  f"not {_JSON_TYPE[leaf]}")
        elif parent is not None:
            why = f"pod field {top} is a {type(parent).__name__}, not {_JSON_TYPE[dict]}"
            odd.update(dict.fromkeys(fields, why))
    return odd


def _changed(wanted: dict[str, tuple[str, str]], current: dict, credit: set[str]) -> dict[str, str]:
    """The wanted metadata entries the pod does not have yet; credit goes to whoever set them.
    (An entry the pod already has gives no op and no credit.)"""
    items = {}
    for key, (value, owner) in wanted.items():
        if current.get(key) != value:
            items[key] = value
            credit.add(owner)
    return items


def _emit_map(ops: list[dict], where: str, items: dict[str, str], current: Any) -> None:
    """Ops setting `items` in the object at `where` (`current`: that object, None if absent)."""
    if not items:
        return
    if current is None:
        ops.append({"op": "add", "path": where, "value": items})
        return
    for key, value in items.items():
        ops.append({"op": "replace" if key in current else "add",
                    "path": f"{where}/{jp.escape(key)}", "value": value})


def _emit_list(ops: list[dict], where: str, items: list, current: Any) -> None:
    """Ops appending `items` to the array at `where` (`current`: that array, None if absent)."""
    if current is None:
        ops.append({"op": "add", "path": where, "value": items})
        return
    end = f"{where}/-"
    for item in items:   # mostly one
        ops.append({"op": "add", "path": end, "value": item})


def _emit_edit(ops: list[dict], edit: Edit) -> None:
    base = f"/spec/{edit.field}/{edit.index}"   # tokens without `~` or `/`: none to escape
    ops.append({"op": "test", "path": f"{base}/name", "value": edit.name})
    container = edit.container
    if edit.env:
        _emit_list(ops, f"{base}/env", edit.env, container.get("env"))
    if edit.mounts:
        _emit_list(ops, f"{base}/volumeMounts", edit.mounts, container.get("volumeMounts"))
    if edit.wrapped:
        ops.append({"op": "replace", "path": f"{base}/command", "value": edit.command})
        if "args" in container:
            ops.append({"op": "remove", "path": f"{base}/args"})


def listed(items: Any, key: str, value: str) -> bool:
    """Whether an object in `items` (a list of the pod) has `value` at `key`. Scanned rather
    than collected into a set: a container's env can be long, and is asked about once or twice."""
    if not isinstance(items, list):
        return False
    try:
        return value in map(dict.get, items, itertools.repeat(key))   # the loop runs in C
    except TypeError:   # an item that is not an object: look at the objects only
        return any(isinstance(i, dict) and i.get(key) == value for i in items)


def _taken(items: Any, key: str) -> set[Any]:
    """The values at `key` of the objects in `items` (a list of the pod), as a set the draft
    adds to. Made in C when every item is an object with a hashable value there."""
    if not isinstance(items, list):
        return set()
    try:
        return set(map(dict.get, items, itertools.repeat(key)))
    except TypeError:   # an item that is not an object, or a value that is not hashable
        return {v for i in items if isinstance(i, dict) and isinstance(v := i.get(key), str)}


def recorded(annotations: dict) -> dict[str, str]:
    """Injection name -> record entry ("name@digest") from the record annotation."""
    raw = annotations.get(RECORD_ANNOTATION)
    if raw is None:
        return {}
    try:
        entries = orjson.loads(raw) if isinstance(raw, str) else []
    except orjson.JSONDecodeError:
        entries = []
    return {e.rsplit("@", 1)[0]: e for e in array(entries) if isinstance(e, str)}


def mount(volume: str, path: str, read_only: bool) -> dict:
    """A volumeMounts entry."""
    made: dict[str, Any] = {"name": volume, "mountPath": path}
    if read_only:
        made["readOnly"] = True
    return made

