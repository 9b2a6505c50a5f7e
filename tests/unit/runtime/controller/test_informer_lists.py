"""runtime.controller.informer's first fill of its store: streamed (watch-list) where the server
offers it, paged where it refuses or where shards are asked for, and nothing lost either way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runtime import store as storelib
from runtime.controller import informer, kube

END = {"type": "BOOKMARK", "object": {"metadata": {
    "resourceVersion": "90", "annotations": {informer.INITIAL_EVENTS_END: "true"}}}}


def cm(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


class Client:
    """Answers one streamed list with `events` (or refuses it with `refuse`) and any paged list
    with `page`; records what was asked."""

    def __init__(self, events: list[dict[str, Any]], refuse: int = 0) -> None:
        self.events, self.refuse = events, refuse
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.page = {"metadata": {"resourceVersion": "70"}, "items": [cm("paged", 60)]}

    def watch(self, path: str, query: list[tuple[str, str]], *,
              read_timeout: float) -> Iterator[dict[str, Any]]:
        self.asked.append(("watch", dict(query)))
        if self.refuse:
            raise kube.api_error(self.refuse, {"reason": "Invalid"}, method="GET", path=path)
        yield from self.events

    def pages(self, path: str, *, query: list[tuple[str, str]] = ()) -> Iterator[dict[str, Any]]:
        self.asked.append(("list", dict(query)))
        yield self.page


def made(client: Client, **options: Any) -> tuple[informer.Informer, list[storelib.Change]]:
    changes: list[storelib.Change] = []
    store = storelib.Store(lambda o: o)
    store.put(cm("gone", 5))   # held from before: not in the new list
    return informer.Informer(client, "cms", "/api/v1/namespaces/ns/configmaps", store,  # type: ignore[arg-type]
                             changes.append, **options), changes


def test_a_streamed_list_fills_the_store_and_reports_what_is_gone() -> None:
    client = Client([{"type": "ADDED", "object": cm("a", 10)},
                     {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
                     {"type": "ADDED", "object": cm("b", 11)}, END,
                     {"type": "ADDED", "object": cm("after-the-end", 95)}])
    filled: list[int] = []
    made_, changes = made(client, selector="app=x", on_synced=lambda: filled.append(len(changes)))
    assert made_._list() == "90"
    assert filled == [3]   # told once, after every change of the list (the deletion included)
    assert sorted(made_.store.keys()) == [("ns", "a"), ("ns", "b")]
    assert [(c.key[1], c.obj is None) for c in changes] == [("a", False), ("b", False),
                                                            ("gone", True)]
    assert made_.synced.is_set()
    [(verb, query)] = client.asked
    assert verb == "watch" and query["sendInitialEvents"] == "true"
    assert query["resourceVersionMatch"] == "NotOlderThan" and query["labelSelector"] == "app=x"
    made_._list()
    assert filled == [3]   # a relist tells its changes only


def test_a_stream_cut_before_its_end_loses_nothing_and_pages_next() -> None:
    client = Client([{"type": "ADDED", "object": cm("a", 10)}])
    filled: list[bool] = []
    made_, changes = made(client, on_synced=lambda: filled.append(True))
    with pytest.raises(kube.TransportError):
        made_._list()
    assert ("ns", "gone") in made_.store.keys() and not made_.synced.is_set() and not filled
    assert made_._list() == "70" and [verb for verb, _ in client.asked] == ["watch", "list"]


@pytest.mark.parametrize("status", [400, 422])
def test_a_server_refusing_the_stream_is_listed_in_pages_from_then_on(status: int) -> None:
    client = Client([], refuse=status)
    made_, _ = made(client)
    assert made_._list() == "70" and made_._list() == "70"
    assert [verb for verb, _ in client.asked] == ["watch", "list", "list"]
    assert sorted(made_.store.keys()) == [("ns", "paged")]


def test_other_errors_are_not_taken_for_a_refusal() -> None:
    client = Client([], refuse=500)
    made_, _ = made(client)
    with pytest.raises(kube.ServerError):
        made_._list()
    assert made_._stream


def test_shards_are_listed_in_pages() -> None:
    """A pod list's shardInfo says whether the server applied the shard selector."""
    client = Client([END])
    made_, _ = made(client, shard_selector="shardRange(object.metadata.namespace, '0x0', '0x8')")
    assert made_._list() == "70" and [verb for verb, _ in client.asked] == ["list"]
