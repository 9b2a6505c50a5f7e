"""An API server in memory, for the controller's shell to talk to offline.

It answers what the controller sends (runtime.controller.kube.Client's methods) the way the
real one does for the parts the controller relies on (tests/integration/test_controller_kube_cluster.py
checks those against the real one): objects under their REST paths, one resourceVersion counter,
merge patches (RFC 7386) guarded by `metadata.resourceVersion` (409 when it moved), a `/status`
subresource that writes only `status` while the main resource ignores it, deletions and
evictions with uid and resourceVersion preconditions (409) and 404 for what is gone, creates
answered 409 when the name exists, discovery of which kinds have `/status`. Faults are planted
by rule (`fail(...)`), and every request is logged, as the audit log records them on the real
one.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime import objects
from runtime.controller import kube


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int                  # 0: no answer (a transport error)
    times: int                   # how many requests it answers; -1: every one
    message: str = "planted"
    retry_after: str | None = None   # the answer's Retry-After header


@dataclass
class Logged:
    method: str
    path: str
    body: Any
    status: int                  # 0: no answer
    query: tuple[tuple[str, str], ...] = ()


@dataclass
class FakeApi:
    """Objects by path; `status_subresource` names the resources (`plural.group`) that have one,
    `short_names` the short names discovery gives resources. A /status patch writes the status
    and, as kube-apiserver's batch Job does, metadata too for `status_keeps_metadata`; of the
    others only the status (a custom resource's /status)."""

    status_subresource: set[str] = field(default_factory=set)
    short_names: dict[str, list[str]] = field(default_factory=dict)   # `plural.group` -> names
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: list[Logged] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    _versions: Iterator[int] = field(default_factory=lambda: itertools.count(100))
    _uids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    host: str = "https://fake"
    status_keeps_metadata: set[str] = field(default_factory=lambda: {"jobs.batch"})

    # -- setting up ----------------------------------------------------------------------------

    def add(self, obj: Mapping[str, Any], plural: str) -> dict[str, Any]:
        """Store an object as if created or replaced (a new resourceVersion); the stored copy.
        Its uid is kept as given, even none (suites name their pods' owners by uid or not)."""
        out = copy.deepcopy(dict(obj))
        meta = out.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._versions))
        path = objects.path(out["apiVersion"], plural, meta.get("namespace"), meta["name"])
        self.objects[path] = out
        return copy.deepcopy(out)

    def fail(self, method: str, path: str, status: int, times: int = 1,
             message: str = "planted", retry_after: str | None = None) -> None:
        """The next `times` requests whose path matches the regex `path` get `status` (with a
        `Retry-After` header when given)."""
        self.faults.append(Fault(method, re.compile(path), status, times, message, retry_after))

    def remove(self, path: str) -> None:
        self.objects.pop(path, None)

    def sent(self, method: str | None = None, path: str | None = None) -> list[Logged]:
        """The requests answered with success, filtered by method and a path regex."""
        return [r for r in self.log if 200 <= r.status < 300
                and (method is None or r.method == method)
                and (path is None or re.search(path, r.path))]

    # -- the client's methods --------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *,
                query: Iterable[tuple[str, str]] = (), **_: Any) -> Any:
        """Answered as the API server would; logged with the query sent (which is not
        applied: a list answers every object under the path)."""
        asked = tuple(query)
        try:
            answer = self._answer(method, path, copy.deepcopy(body))
        except kube.ApiError as err:
            self.log.append(Logged(method, path, body, err.status, asked))
            raise
        except kube.TransportError:
            self.log.append(Logged(method, path, body, 0, asked))
            raise
        self.log.append(Logged(method, path, body, 200, asked))
        return copy.deepcopy(answer)

    def get(self, path: str, *, query: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def list(self, path: str, *, query: Iterable[tuple[str, str]] = (), limit: int = 500) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, patch: dict[str, Any], *, resource_version: str | None = None,
                    **_: Any) -> dict[str, Any]:
        if resource_version is not None:
            patch = {**patch, "metadata": {**(patch.get("metadata") or {}),
                                           "resourceVersion": resource_version}}
        return self.request("PATCH", path, patch)

    def delete(self, path: str, *, uid: str | None = None, resource_version: str | None = None,
               **_: Any) -> dict[str, Any]:
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        return self.request("DELETE", path, {"preconditions": preconditions} if preconditions else None)

    # -- inside --------------------------------------------------------------------------------

    def _answer(self, method: str, path: str, body: Any) -> Any:
        for fault in self.faults:
            if fault.times != 0 and fault.method == method and fault.path.search(path):
                fault.times -= 1 if fault.times > 0 else 0
                if fault.status == 0:
                    raise kube.TransportError(f"{method} {path}: {fault.message}")
                raise kube.api_error(fault.status, {"reason": "Planted", "message": fault.message},
                                     retry_header=fault.retry_after, method=method, path=path)
        if method == "GET":
            return self._get(path)
        if method == "PATCH":
            return self._patch(path, body)
        if method == "DELETE":
            return self._delete(path, (body or {}).get("preconditions") or {})
        if method == "POST" and path.endswith("/eviction"):
            options = (body or {}).get("deleteOptions") or {}
            return self._delete(path.removesuffix("/eviction"), options.get("preconditions") or {})
        if method == "POST":
            return self._create(path, body)
        raise kube.api_error(405, None, method=method, path=path)

    def _get(self, path: str) -> Any:
        if path in self.objects:
            return self.objects[path]
        if path.endswith("/status") and path.removesuffix("/status") in self.objects:
            return self.objects[path.removesuffix("/status")]
        discovery = self._discovery(path)
        if discovery is not None:
            return discovery
        items = [o for p, o in sorted(self.objects.items()) if p.rsplit("/", 1)[0] == path
                 or _across_namespaces(path, p)]
        if items or _collection(path):
            return {"kind": "List", "metadata": {"resourceVersion": str(next(self._versions))},
                    "items": items}
        raise kube.api_error(404, {"reason": "NotFound", "message": f"{path} not found"},
                             method="GET", path=path)

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """What `/apis/GROUP/VERSION` (or `/api/v1`) serves: every plural stored under it, and
        `PLURAL/status` for those named in `status_subresource`."""
        if re.fullmatch(r"/apis/[^/]+/[^/]+|/api/v1", path) is None:
            return None
        group = path.split("/")[2] if path.startswith("/apis/") else ""
        plurals = {_resource(p)[1] for p in self.objects if p.startswith(path + "/")}
        resources: list[dict[str, Any]] = [{"name": r} for r in sorted(plurals)]
        for r in resources:
            names = self.short_names.get(f"{r['name']}.{group}" if group else r["name"])
            if names:
                r["shortNames"] = list(names)
        resources += [{"name": f"{r}/status"} for r in sorted(plurals)
                      if (f"{r}.{group}" if group else r) in self.status_subresource]
        return {"kind": "APIResourceList", "resources": resources}

    def _stored(self, path: str) -> dict[str, Any]:
        obj = self.objects.get(path)
        if obj is None:
            raise kube.api_error(404, {"reason": "NotFound", "message": f"{path} not found"},
                                 method="GET", path=path)
        return obj

    def _has_status(self, path: str) -> bool:
        return _qualified(path) in self.status_subresource

    def _patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        status = path.endswith("/status")
        target = path.removesuffix("/status")
        obj = self._stored(target)
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            raise kube.api_error(409, {"reason": "Conflict", "message": "the object has been modified"},
                                 method="PATCH", path=path)
        body = {k: v for k, v in patch.items()}
        if status:
            kept = ("status", "metadata") if _qualified(target) in self.status_keeps_metadata else ("status",)
            body = {k: v for k, v in body.items() if k in kept}
        elif self._has_status(target):
            body.pop("status", None)
        meta = body.get("metadata")
        if isinstance(meta, dict):
            body["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
        merged = _merge(obj, body)
        if merged != obj:
            merged["metadata"]["resourceVersion"] = str(next(self._versions))
            if _spec_changed(obj, merged):
                merged["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
        self.objects[target] = merged
        return merged

    def _delete(self, path: str, preconditions: Mapping[str, Any]) -> dict[str, Any]:
        obj = self._stored(path)
        meta = obj["metadata"]
        for key in ("uid", "resourceVersion"):
            if key in preconditions and preconditions[key] != meta.get(key):
                raise kube.api_error(409, {"reason": "Conflict",
                                           "message": f"precondition failed: {key}"},
                                     method="DELETE", path=path)
        del self.objects[path]
        return {"kind": "Status", "status": "Success", "details": {"uid": meta.get("uid")}}

    def _create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if f"{path}/{name}" in self.objects:
            raise kube.api_error(409, {"reason": "AlreadyExists", "message": f"{name} exists"},
                                 method="POST", path=path)
        out = copy.deepcopy(body)
        out["metadata"]["uid"] = f"uid-{next(self._uids)}"
        out["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[f"{path}/{name}"] = out
        return out


def _resource(path: str) -> tuple[str, str]:
    """(apiVersion, plural) of an object path."""
    parts = path.strip("/").split("/")
    api = "v1" if parts[0] == "api" else f"{parts[1]}/{parts[2]}"
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest and rest[0] == "namespaces":
        rest = rest[2:]
    return api, rest[0]


def _collection(path: str) -> bool:
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    return len(rest) == 1 or (len(rest) == 3 and rest[0] == "namespaces")


def _across_namespaces(collection: str, stored: str) -> bool:
    """`stored` is an object of `collection`, a path across all namespaces."""
    if "/namespaces/" in collection:
        return False
    prefix, _, plural = collection.rpartition("/")
    match = re.fullmatch(re.escape(prefix) + r"/namespaces/[^/]+/" + re.escape(plural) + r"/[^/]+",
                         stored)
    return match is not None


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _spec_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return old.get("spec") != new.get("spec")


def _qualified(path: str) -> str:
    """`plural.group` of an object's path (the plural alone in the core group)."""
    api, plural = _resource(path)
    group = api.split("/")[0] if "/" in api else ""
    return f"{plural}.{group}" if group else plural
