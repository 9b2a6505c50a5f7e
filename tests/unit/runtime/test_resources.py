"""runtime.resources: which containers ran out of memory, the size each restarts with, and the
pod template with it written in. Sizes are checked against Kubernetes' own quantity arithmetic
done by hand (bytes), not against the module's own formatting."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import functions
from runtime.resources import Resize, grown, memory, out_of_memory, quantity, resized, said

MI = 2 ** 20


def terminated(reason: str, code: int = 137) -> dict[str, Any]:
    return {"terminated": {"reason": reason, "exitCode": code}}


def pod(statuses: list[dict[str, Any]], containers: list[dict[str, Any]],
        init: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])) -> dict[str, Any]:
    return {"spec": {"containers": containers, "initContainers": init[0]},
            "status": {"phase": "Failed", "containerStatuses": statuses,
                       "initContainerStatuses": init[1]}}


def sized(name: str, limit: str | None = None, request: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limit is not None:
        resources["limits"] = {"memory": limit, "cpu": "1"}
    if request is not None:
        resources["requests"] = {"memory": request, "cpu": "500m"}
    return {"name": name, "image": "busybox", "resources": resources}


@pytest.mark.parametrize(("status", "oom"), [
    ({"name": "main", "state": terminated("OOMKilled")}, True),
    ({"name": "main", "state": terminated("OOMKilled", 0)}, True),     # killed, yet exit 0
    ({"name": "main", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
      "lastState": terminated("OOMKilled")}, True),                   # crash-looping on memory
    ({"name": "main", "state": terminated("Error")}, False),          # 137 alone is no OOM
    ({"name": "main", "state": {"running": {}}}, False),
    ({"name": "main"}, False),
    ({"name": "main", "state": "odd"}, False),
    ({"name": "main", "state": {"terminated": "odd"}}, False),
])
def test_out_of_memory_reads_the_reason_not_the_exit_code(status: dict[str, Any], oom: bool) -> None:
    assert out_of_memory(pod([status], [sized("main", "1Gi")])) == (("main",) if oom else ())


def test_out_of_memory_reads_init_containers_first_and_skips_odd_entries() -> None:
    found = pod([{"name": "main", "state": terminated("OOMKilled")}, "odd"],   # type: ignore[list-item]
                [sized("main", "1Gi")],
                ([sized("setup", "64Mi")], [{"name": "setup", "state": terminated("OOMKilled")}]))
    assert out_of_memory(found) == ("setup", "main")
    assert out_of_memory({"status": "odd"}) == ()
    assert out_of_memory({}) == ()


@pytest.mark.parametrize(("limit", "asked", "factor", "cap", "after_bytes"), [
    ("256Mi", "256Mi", 1.5, None, 384 * MI),
    ("384Mi", None, 1.5, None, 576 * MI),
    (None, "100Mi", 1.5, None, 150 * MI),                  # only a request: it grows
    ("1Gi", "512Mi", 2.0, None, 2048 * MI),                # the limit, the larger, is the base
    ("100M", None, 1.5, None, 144 * MI),                    # 1.5e8 bytes, rounded up to 144Mi
    ("800Mi", None, 1.5, 1024 * MI, 1024 * MI),             # capped
    ("1Gi", None, 1.5, 1024 * MI, 1024 * MI),               # at the cap already: stays
    ("1Gi", None, 1.5, 1.2e9, 1.2e9 // MI * MI),           # a cap in decimal units: not above it
])
def test_grown_sizes(limit: str | None, asked: str | None, factor: float, cap: float | None,
                     after_bytes: float) -> None:
    failed = pod([{"name": "main", "state": terminated("OOMKilled")}],
                 [sized("main", limit, asked), sized("logs", "64Mi")])
    [size] = grown(failed, factor, cap)
    assert (size.container, size.before) == ("main", limit or asked)
    assert functions.quantity(size.after) == after_bytes
    assert functions.quantity(size.after) <= (cap or float("inf"))


def test_grown_leaves_out_what_did_not_run_out_or_declares_no_memory() -> None:
    failed = pod([{"name": "main", "state": terminated("OOMKilled")},
                  {"name": "bare", "state": terminated("OOMKilled")},
                  {"name": "logs", "state": terminated("Error", 1)}],
                 [sized("main", "1Gi"), {"name": "bare", "image": "busybox"}, sized("logs", "64Mi"),
                  {"name": "odd", "resources": {"limits": {"memory": "lots"}}}])
    assert grown(failed, 1.5, None) == (Resize("main", "1Gi", "1536Mi"),)
    assert grown({"status": {}}, 1.5, None) == ()


def test_memory_prefers_the_limit_and_skips_what_is_no_quantity() -> None:
    assert memory(sized("a", "2Gi", "1Gi")) == "2Gi"
    assert memory(sized("a", None, "1Gi")) == "1Gi"
    assert memory({"resources": {"limits": {"memory": "lots"}, "requests": {"memory": "1Gi"}}}) == "1Gi"
    assert memory({"resources": {"limits": {"memory": 5}}}) is None
    assert memory({"resources": "odd"}) is None
    assert memory({}) is None


@pytest.mark.parametrize(("size", "text"), [
    (2 * 2 ** 30, "2Gi"), (1536 * MI, "1536Mi"), (MI, "1Mi"), (1000, "1000")])
def test_quantity(size: int, text: str) -> None:
    assert quantity(size) == text
    assert functions.quantity(text) == size


def test_resized_writes_limit_and_request_of_the_named_containers_only() -> None:
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {
        "initContainers": [sized("setup", "64Mi")],
        "containers": [sized("main", "256Mi", "200Mi"), sized("logs", "64Mi")]}}
    lists = resized(template, [Resize("main", "256Mi", "384Mi")])
    assert lists == {"containers": [
        {"name": "main", "image": "busybox", "resources": {
            "limits": {"memory": "384Mi", "cpu": "1"}, "requests": {"memory": "384Mi", "cpu": "500m"}}},
        sized("logs", "64Mi")]}
    assert template["spec"]["containers"][0] == sized("main", "256Mi", "200Mi")   # not changed in place
    init = resized(template, [Resize("setup", "64Mi", "96Mi")])
    assert init == {"initContainers": [sized("setup", "96Mi")]}


def test_resized_is_none_once_written_or_when_nothing_matches() -> None:
    template = {"spec": {"containers": [sized("main", "384Mi", "384Mi")]}}
    assert resized(template, [Resize("main", "256Mi", "384Mi")]) is None
    assert resized(template, [Resize("other", "1Gi", "2Gi")]) is None
    assert resized({"spec": {"containers": [{"name": "main"}]}}, [Resize("main", "1Gi", "2Gi")]) is None
    assert resized({}, [Resize("main", "1Gi", "2Gi")]) is None
    assert resized({"spec": "odd"}, [Resize("main", "1Gi", "2Gi")]) is None


def test_said() -> None:
    assert said([Resize("main", "4Gi", "6Gi")]) == "main: memory 4Gi -> 6Gi after OOMKilled"
    assert said([Resize("a", "1Gi", "2Gi"), Resize("b", "1Mi", "2Mi")]) == (
        "a: memory 1Gi -> 2Gi after OOMKilled; b: memory 1Mi -> 2Mi after OOMKilled")


def test_grown_reads_init_containers_and_goes_past_what_it_leaves_out() -> None:
    failed = pod([{"name": "bare", "state": terminated("OOMKilled")},
                  {"name": "main", "state": terminated("OOMKilled")}],
                 [{"name": "bare", "image": "busybox"}, sized("main", "1Gi")],
                 ([sized("setup", "64Mi")], [{"name": "setup", "state": terminated("OOMKilled")}]))
    assert grown(failed, 1.5, None) == (Resize("setup", "64Mi", "96Mi"),
                                        Resize("main", "1Gi", "1536Mi"))


def test_out_of_memory_goes_past_an_odd_entry() -> None:
    found = pod(["odd", {"name": "main", "state": terminated("OOMKilled")}],   # type: ignore[list-item]
                [sized("main", "1Gi")])
    assert out_of_memory(found) == ("main",)


def test_resized_keeps_odd_entries_and_goes_past_an_odd_list() -> None:
    template = {"spec": {"initContainers": "odd",
                         "containers": ["odd", sized("main", "1Gi")]}}
    assert resized(template, [Resize("main", "1Gi", "2Gi")]) == {
        "containers": ["odd", sized("main", "2Gi")]}
