"""runtime.webhook.worker: which connection a full worker drops for a new one, silent
connections on a real event loop and socket pairs, and the open-files budget."""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import gevent
import pytest

from runtime.webhook import metrics
from runtime.webhook.worker import SPARE_FILES, Connections, Silent, file_limits


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
    ([], ["k1+", "k2"], "k2"),               # nor one whose next request is being read
    (["f1*", "f2"], ["k1"], "f2"),           # an unanswered one being written stays too
])
def test_a_full_worker_drops_the_longest_waiting(fresh: list[str], kept: list[str],
                                                 victim: str) -> None:
    made = {n: Fake(n.rstrip("*+"), writing=n.endswith("*"), until=1.0 if n.endswith("+") else None)
            for n in [*fresh, *kept]}
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


def test_a_worker_whose_kept_connections_are_all_mid_request_refuses_the_new_one() -> None:
    reading = Fake("reading", until=1.0)
    connections = worker(1, [], [reading])
    new = Fake("new")
    assert not connections.open(new)
    assert new.dropped == ["evicted"] and reading.dropped == []


# ---------------------------------------------------------------------------------------------
# Silent connections: descriptors watched by gevent's loop until their first byte


@dataclass
class Spoken:
    """What `Silent` handed on, in order (kept open, as serving would, until the test ends)."""

    fds: list[int] = field(default_factory=list)

    def __call__(self, fd: int, addr: object, listener: object) -> None:
        assert (addr, listener) == ("addr", "listener")
        self.fds.append(fd)


@dataclass
class Sockets:
    """Socket pairs whose first end a `Silent` watches; the other is the client."""

    spoken: Spoken = field(default_factory=Spoken)
    made: list[tuple[socket.socket, socket.socket]] = field(default_factory=list)

    def silent(self, limit: int, wait: float = 60.0) -> Silent:
        return Silent(gevent.get_hub().loop, limit, wait, self.spoken)

    def connect(self, waiting: Silent, count: int = 1) -> list[socket.socket]:
        clients = []
        for _ in range(count):
            ours, theirs = socket.socketpair()
            self.made.append((ours, theirs))
            waiting.add("listener", ours.fileno(), "addr")
            clients.append(theirs)
        return clients

    def fd(self, client: socket.socket) -> int:
        return next(ours.fileno() for ours, theirs in self.made if theirs is client)


@pytest.fixture
def sockets() -> Iterator[Sockets]:
    made = Sockets()
    yield made
    for fd in made.spoken.fds:
        socket.socket(fileno=fd).close()
    for ours, theirs in made.made:
        ours.detach()   # closed by `Silent` or above: its number may be another's by now
        theirs.close()


def closed(client: socket.socket) -> bool:
    """The server's end was closed (it never sends anything to a silent client)."""
    client.setblocking(False)
    try:
        return client.recv(1) == b""
    except BlockingIOError:
        return False


def dropped(reason: str) -> float:
    return metrics.connections_dropped(reason)._value.get()


def test_silent_connections_past_the_cap_close_the_oldest(sockets: Sockets) -> None:
    before = dropped("evicted")
    waiting = sockets.silent(3)
    clients = sockets.connect(waiting, 5)
    assert [closed(c) for c in clients] == [True, True, False, False, False]
    assert len(waiting) == 3 and sockets.spoken.fds == []
    assert dropped("evicted") == before + 2


def test_the_first_byte_hands_the_connection_on(sockets: Sockets) -> None:
    waiting = sockets.silent(3)
    clients = sockets.connect(waiting, 3)
    clients[1].sendall(b"\x16")
    gevent.sleep(0.05)
    assert sockets.spoken.fds == [sockets.fd(clients[1])] and len(waiting) == 2
    clients[2].shutdown(socket.SHUT_WR)   # the end is handed on too: serving sees it and stops
    gevent.sleep(0.05)
    assert sockets.spoken.fds[1:] == [sockets.fd(clients[2])] and len(waiting) == 1


def test_a_connection_that_spoke_is_never_evicted_for_a_silent_one(sockets: Sockets) -> None:
    waiting = sockets.silent(1)
    [talker] = sockets.connect(waiting)
    talker.sendall(b"\x16")
    gevent.sleep(0.05)
    flood = sockets.connect(waiting, 3)
    assert [closed(c) for c in flood] == [True, True, False]
    assert not closed(talker) and sockets.spoken.fds == [sockets.fd(talker)]


def test_silent_connections_expire_oldest_first(sockets: Sockets) -> None:
    before = dropped("read-timeout")
    waiting = sockets.silent(10, wait=0.2)
    old = sockets.connect(waiting, 2)
    gevent.sleep(0.15)
    [new] = sockets.connect(waiting)
    gevent.sleep(0.1)
    waiting.expire(time.monotonic())
    assert [closed(c) for c in old] == [True, True] and not closed(new)
    assert len(waiting) == 1 and dropped("read-timeout") == before + 2


def test_stopping_closes_every_silent_connection_without_counting_it(sockets: Sockets) -> None:
    before = dropped("evicted") + dropped("read-timeout")
    waiting = sockets.silent(10)
    clients = sockets.connect(waiting, 3)
    waiting.close_all()
    assert all(closed(c) for c in clients) and len(waiting) == 0
    assert dropped("evicted") + dropped("read-timeout") == before


# ---------------------------------------------------------------------------------------------
# The open-files budget: both caps fit, or silent connections give way first

INF = resource.RLIM_INFINITY


@pytest.mark.parametrize("silent_cap, spoken, soft, hard, expected", [
    (10000, 1000, 1024, 1048576, (11000 + SPARE_FILES, 10000, 1000)),   # soft raised to fit
    (10000, 1000, 1024, INF, (11000 + SPARE_FILES, 10000, 1000)),
    (10000, 1000, 65536, 1048576, (65536, 10000, 1000)),                # already enough
    (10000, 1000, INF, INF, (INF, 10000, 1000)),
    (10000, 1000, 1024, 8000 + SPARE_FILES, (8000 + SPARE_FILES, 7000, 1000)),   # silent give way
    (10000, 1000, 1024, 1024, (1024, 480, 480)),                        # down to an even split
    (100, 1000, 1024, 1024, (1024, 100, 860)),                          # spoken take the rest
    (10000, 1000, 10, 10, (10, 1, 1)),                                  # never below one each
])
def test_file_limits(silent_cap: int, spoken: int, soft: int, hard: int,
                     expected: tuple[int, int, int]) -> None:
    assert file_limits(silent_cap, spoken, soft, hard) == expected
