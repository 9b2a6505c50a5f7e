"""runtime.webhook.worker.Connections: which connection a full worker drops for a new one."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from runtime.webhook.worker import Connections


@dataclass(eq=False)
class Fake:
    """What Connections reads of a connection, and what it does to one."""

    name: str
    writing: bool = False
    closed: bool = False
    until: float | None = None
    dropped: list[str] = field(default_factory=list)

    def drop(self, reason: str | None) -> None:
        self.dropped.append(reason or "")


def worker(limit: int, fresh: list[Fake], kept: list[Fake]) -> Connections:
    """A worker whose `kept` connections were each answered once, in that order."""
    connections = Connections(limit)
    for conn in [*kept, *fresh]:
        assert connections.open(conn)
    for conn in kept:
        connections.waiting(conn)
    return connections


@pytest.mark.parametrize("fresh, kept, victim", [
    (["f1", "f2"], ["k1"], "f1"),            # the oldest never answered goes first
    ([], ["k1", "k2"], "k1"),                # else the one idle longest
    ([], ["k1*", "k2"], "k2"),               # never one whose answer is being written
])
def test_a_full_worker_drops_the_longest_waiting(fresh: list[str], kept: list[str],
                                                 victim: str) -> None:
    made = {n: Fake(n.rstrip("*"), writing=n.endswith("*")) for n in [*fresh, *kept]}
    connections = worker(len(made), [made[n] for n in fresh], [made[n] for n in kept])
    new = Fake("new")
    assert connections.open(new)
    assert [c.name for c in made.values() if c.dropped] == [victim]
    assert len(connections) == len(made)
    assert next(c for c in made.values() if c.name == victim).dropped == ["evicted"]


def test_a_worker_whose_connections_all_write_refuses_the_new_one() -> None:
    busy = Fake("busy", writing=True)
    connections = worker(1, [], [busy])
    new = Fake("new")
    assert not connections.open(new)
    assert new.dropped == ["evicted"] and busy.dropped == []


def test_an_answered_connection_queues_as_the_newest() -> None:
    a, b = Fake("a"), Fake("b")
    connections = worker(2, [], [a, b])
    connections.waiting(a)               # answered again: b has now waited longest
    assert connections.open(Fake("c"))
    assert b.dropped == ["evicted"] and a.dropped == []


def test_idle_means_no_byte_of_a_request_read() -> None:
    idle, reading, writing = Fake("idle"), Fake("reading", until=1.0), Fake("writing", writing=True)
    connections = worker(3, [idle, reading], [writing])
    assert connections.idle() == [idle]
