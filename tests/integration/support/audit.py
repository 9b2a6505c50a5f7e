"""The exactly-once oracle: what the API server's audit log says was done (devkit's audit policy:
pod deletions and evictions with their answers, writes to job kinds and Commands with bodies)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any


def entries(log: Path, namespace: str) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue   # a line being written
        if (entry.get("objectRef") or {}).get("namespace") == namespace:
            out.append(entry)
    return out


def _code(entry: dict[str, Any]) -> int:
    return int((entry.get("responseStatus") or {}).get("code") or 0)


def pod_removals(log: Path, namespace: str) -> Counter[str]:
    """Pod uid -> how many deletions or evictions of it succeeded."""
    out: Counter[str] = Counter()
    for e in entries(log, namespace):
        ref = e.get("objectRef") or {}
        if ref.get("resource") != "pods" or not 200 <= _code(e) < 300:
            continue
        if e.get("verb") == "delete" and not ref.get("subresource"):
            uid = ((e.get("responseObject") or {}).get("metadata") or {}).get("uid")
        elif e.get("verb") == "create" and ref.get("subresource") == "eviction":
            uid = (((e.get("requestObject") or {}).get("deleteOptions") or {})
                   .get("preconditions") or {}).get("uid")
        else:
            continue
        if uid:
            out[uid] += 1
    return out


def removers(log: Path, namespace: str) -> set[str]:
    """Who made the successful pod deletions and evictions: each request's User-Agent product
    (`jobrules-controller` of `jobrules-controller/0.1.0`)."""
    return {str(e.get("userAgent") or "").split("/", 1)[0] for e in entries(log, namespace)
            if (e.get("objectRef") or {}).get("resource") == "pods" and 200 <= _code(e) < 300
            and (e.get("verb") == "delete" or (e.get("objectRef") or {}).get("subresource") == "eviction")}


def created(log: Path, namespace: str, resource: str) -> Counter[str]:
    """Object name -> how many creations of it succeeded."""
    return Counter((e.get("objectRef") or {}).get("name") or
                   ((e.get("requestObject") or {}).get("metadata") or {}).get("name", "")
                   for e in entries(log, namespace)
                   if e.get("verb") == "create" and (e.get("objectRef") or {}).get("resource") == resource
                   and 200 <= _code(e) < 300)


def patches(log: Path, namespace: str, resource: str, name: str) -> list[dict[str, Any]]:
    """The bodies of the successful patches of one object (main resource and subresources)."""
    return [e.get("requestObject") or {} for e in entries(log, namespace)
            if e.get("verb") == "patch" and (e.get("objectRef") or {}).get("resource") == resource
            and (e.get("objectRef") or {}).get("name") == name and 200 <= _code(e) < 300]


def requests_of(log: Path, user: str) -> list[dict[str, Any]]:
    """Every request `user` made (the plane's audited user, devkit.cluster.AUDITED, has every
    request logged): reads, writes and discovery alike, each with its verb and answer."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (entry.get("user") or {}).get("username") == user:
            out.append(entry)
    return out


def code(entry: dict[str, Any]) -> int:
    """The status code the request was answered with."""
    return _code(entry)
