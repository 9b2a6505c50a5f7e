"""runtime.controller.shards against an API server in memory: replicas take the shards, give
the excess back when another joins (after draining what runs), take a dead one's shards once its
Leases went unchanged for their duration by their own clock, and let a reconcile start only in a
shard they hold."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from runtime import shards as shardlib
from runtime.controller import shards
from tests.unit.runtime.controller.fakeapi import FakeApi

NS = "jobrules-system"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replica(api: FakeApi, identity: str, clock: Clock, count: int = 8,
            gained: list[frozenset[int]] | None = None) -> shards.Shards:
    return shards.Shards(api, count=count, namespace=NS, base="jobrules-controller",  # type: ignore[arg-type]
                         identity=identity, lease_duration=15, renew_deadline=10,
                         retry_period=2, on_gained=(gained if gained is not None else []).append,
                         on_given=lambda given: None, on_lost=lambda: None, clock=clock)


def holders(api: FakeApi, count: int = 8) -> dict[int, Any]:
    return {k: (api.objects.get(f"{LEASES}/{shardlib.shard_lease('jobrules-controller', k)}")
                or {}).get("spec", {}).get("holderIdentity") for k in range(count)}


def a_namespace_in(shard: int, count: int = 8) -> str:
    return next(f"ns-{n}x" for n in range(10_000) if shardlib.shard_of(f"ns-{n}x", count) == shard)


def test_alone_it_takes_every_shard_and_gives_half_back_when_another_joins() -> None:
    api, clock, gained = FakeApi(), Clock(), []
    a = replica(api, "a", clock, gained=gained)
    a.round()
    assert a.owned == frozenset(range(8)) and gained == [frozenset(range(8))]
    assert set(holders(api).values()) == {"a"}
    b = replica(api, "b", clock)
    b.round()                      # b is a member now, holding nothing: nothing is free
    assert b.owned == frozenset()
    a.round()                      # a sees two replicas: share 4, gives 4 back
    assert len(a.owned) == 4
    b.round()
    assert len(b.owned) == 4 and a.owned | b.owned == frozenset(range(8))
    assert Counter(holders(api).values()) == {"a": 4, "b": 4}
    for _ in range(3):             # settled: nothing moves
        clock.now += 2
        a.round()
        b.round()
    assert Counter(holders(api).values()) == {"a": 4, "b": 4}


def test_a_dead_replicas_shards_are_taken_once_unchanged_for_the_lease_duration() -> None:
    api, clock = FakeApi(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    for r in (a, b, a, b):
        r.round()
    assert len(b.owned) == 4
    # a stops renewing. b, by its own clock, waits out the lease duration from when it last saw
    # a's records change, then takes them (its share is 8 again: a's member Lease expired too).
    clock.now += 14
    b.round()
    assert len(b.owned) == 4
    clock.now += 2
    b.round()
    assert b.owned == frozenset(range(8)) and set(holders(api).values()) == {"b"}


def test_a_reconcile_starts_only_in_a_held_shard() -> None:
    api, clock = FakeApi(), Clock()
    a = replica(api, "a", clock, count=2)
    ns0, ns1 = a_namespace_in(0, 2), a_namespace_in(1, 2)
    assert not a.enter(ns0) and not a.owns(ns0)
    a.round()
    assert a.enter(ns0) and a.enter(ns1)
    a.leave(ns0)
    a.leave(ns1)


def test_a_shard_given_back_is_drained_before_its_lease_is_released() -> None:
    api, clock = FakeApi(), Clock()
    a, b = replica(api, "a", clock, count=2), replica(api, "b", clock, count=2)
    a.round()
    b.round()
    assert a.owned == frozenset({0, 1})
    busy = {k: a_namespace_in(k, 2) for k in (0, 1)}
    assert a.enter(busy[0]) and a.enter(busy[1])   # reconciles running in both shards
    giving = threading.Thread(target=a.round)
    giving.start()
    deadline = time.monotonic() + 10
    while len(a.owned) == 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    [given] = {0, 1} - a.owned
    assert not a.enter(busy[given])                # no new reconcile of the shard given back
    assert holders(api, 2)[given] == "a"           # not released while one still runs
    a.leave(busy[given])
    giving.join(10)
    assert not giving.is_alive()
    assert holders(api, 2)[given] is None
    b.round()
    assert b.owned == frozenset({given})
    a.leave(busy[1 - given])


def test_release_gives_every_shard_back_and_leaves() -> None:
    api, clock = FakeApi(), Clock()
    a = replica(api, "a", clock, count=2)
    a.round()
    a.release()
    assert holders(api, 2) == {0: None, 1: None}
    assert f"{LEASES}/{shardlib.member_lease('jobrules-controller', 'a')}" not in api.objects


def test_a_member_lease_left_by_a_dead_replica_is_deleted_in_time() -> None:
    api, clock = FakeApi(), Clock()
    a, b = replica(api, "a", clock), replica(api, "b", clock)
    a.round()
    b.round()
    gone = f"{LEASES}/{shardlib.member_lease('jobrules-controller', 'a')}"
    for _ in range(30):   # a is dead; b goes on, 2 s a round, up to 60 s
        clock.now += 2
        b.round()
        if gone not in api.objects:
            break
    assert gone not in api.objects and clock.now - 1000 >= 3 * 15
    assert f"{LEASES}/{shardlib.member_lease('jobrules-controller', 'b')}" in api.objects


def test_a_renewal_refused_because_another_took_the_shard_is_a_loss() -> None:
    api, clock = FakeApi(), Clock()
    lost: list[bool] = []
    a = shards.Shards(api, count=2, namespace=NS, base="jobrules-controller",  # type: ignore[arg-type]
                      identity="a", lease_duration=15, renew_deadline=10, retry_period=2,
                      on_gained=lambda gained: None, on_given=lambda given: None,
                      on_lost=lambda: lost.append(True), clock=clock)
    a.round()
    api.fail("PATCH", "leases/jobrules-controller-shard-", 409)
    a.round()
    assert lost == [True]
