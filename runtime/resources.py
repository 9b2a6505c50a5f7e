"""Restart with more memory (`restart ... with memory * F up to MAX`), as pure functions: which
containers of a failed pod ran out of memory, the size each gets next, and the job's pod template
with those sizes in it.

The new size is worked out once, when the policy decides, from the pod that failed, and is
recorded as an absolute value on the action's intent (runtime.intents); the `resize` step then
writes that value. So a crash between the decision and the write neither loses the new size nor
multiplies it twice, and the next failure grows from the size the new pod ran with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime import functions

OUT_OF_MEMORY = "OOMKilled"
MIB = 2 ** 20
GIB = 2 ** 30


@dataclass(frozen=True, slots=True)
class Resize:
    """One container's memory, before and after (Kubernetes quantities)."""

    container: str
    before: str
    after: str


def out_of_memory(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The containers (init containers too) whose current or last termination was OOMKilled,
    whatever their exit code and the pod's phase: a container killed for memory may exit 0."""
    status = pod.get("status")
    status = status if isinstance(status, dict) else {}
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for c in status.get(key) or ():
            if not isinstance(c, dict):
                continue
            if any(_terminated_reason(c.get(which)) == OUT_OF_MEMORY
                   for which in ("state", "lastState")):
                out.append(str(c.get("name")))
    return tuple(out)


def _terminated_reason(state: Any) -> Any:
    if not isinstance(state, dict):
        return None
    terminated = state.get("terminated")
    return terminated.get("reason") if isinstance(terminated, dict) else None


def grown(pod: Mapping[str, Any], factor: float, max_bytes: float | None) -> tuple[Resize, ...]:
    """The new memory of each container of `pod` that ran out of it and declares a memory
    limit or request: `factor` times the limit (else the request), rounded up to a mebibyte, at
    most `max_bytes` (rounded down to one). A container that declares neither is left out (there is nothing to raise)."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    declared = {str(c.get("name")): c for key in ("initContainers", "containers")
                for c in spec.get(key) or () if isinstance(c, dict)}
    out = []
    for name in out_of_memory(pod):
        before = memory(declared.get(name) or {})
        if before is None:
            continue
        size = math.ceil(functions.quantity(before) * factor / MIB) * MIB
        if max_bytes is not None:   # not above the cap, in whole mebibytes too
            size = min(size, int(max_bytes) // MIB * MIB)
        out.append(Resize(name, before, quantity(size)))
    return tuple(out)


def memory(container: Mapping[str, Any]) -> str | None:
    """The container's memory limit, else its request (a quantity), else None."""
    resources = container.get("resources")
    resources = resources if isinstance(resources, dict) else {}
    for part in ("limits", "requests"):
        values = resources.get(part)
        if isinstance(values, dict) and isinstance(values.get("memory"), str):
            try:
                functions.quantity(values["memory"])
            except ValueError:
                continue
            return str(values["memory"])
    return None


def quantity(size: int) -> str:
    """Bytes as a Kubernetes quantity: in Gi when whole, else in Mi (a whole number of Mi)."""
    if size % GIB == 0:
        return f"{size // GIB}Gi"
    if size % MIB == 0:
        return f"{size // MIB}Mi"
    return str(size)


def resized(template: Mapping[str, Any], sizes: Sequence[Resize]) -> dict[str, list[Any]] | None:
    """The containers and init containers of a pod template with `sizes` written in: the
    memory limit and request each declares set to the new size. None when the template has
    them already (or has none of the containers)."""
    spec = template.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    wanted = {s.container: s.after for s in sizes}
    out: dict[str, list[Any]] = {}
    for key in ("initContainers", "containers"):
        listed = spec.get(key)
        if not isinstance(listed, list):
            continue
        changed = False
        containers = []
        for c in listed:
            size = wanted.get(str(c.get("name"))) if isinstance(c, dict) else None
            if size is None:
                containers.append(c)
                continue
            resources = dict(c.get("resources") or {})
            for part in ("limits", "requests"):
                values = resources.get(part)
                if isinstance(values, dict) and "memory" in values and values["memory"] != size:
                    resources[part] = {**values, "memory": size}
                    changed = True
            containers.append({**c, "resources": resources})
        if changed:
            out[key] = containers
    return out or None


def said(sizes: Sequence[Resize]) -> str:
    """`main: memory 4Gi -> 6Gi after OOMKilled`, for each container, joined by `; `."""
    return "; ".join(f"{s.container}: memory {s.before} -> {s.after} after {OUT_OF_MEMORY}"
                     for s in sizes)
