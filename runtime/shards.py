"""Shards of the controller's work, and who should hold which: pure.

A job and its pods share a namespace, so the namespace decides the shard: its 64-bit FNV-1a
hash falls in one of N contiguous ranges of [0, 2^64). These are the hash and the ranges of the
API server's sharded list and watch (KEP-5866, `shardSelector=shardRange(object.metadata.
namespace, '0x..', '0x..')`), so a replica that filters by `in_shard` here keeps exactly what the
server would send it for the same ranges: the two filters can stand in for each other.

Each shard is held through a Lease of its own; each replica also renews a member Lease, so
that one holding no shard yet is counted. `moves` decides a replica's next step from the Leases
it sees: keep what it holds up to its fair share ceil(N / live replicas), take free or expired
shards up to it, give back the excess when others join. The share changes only when the live
replicas do, so a replica never takes a shard it would give back in the same membership: no
flapping. Replicas racing for one free shard are sorted out by the Lease's resourceVersion.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

SPACE = 1 << 64
_OFFSET = 0xCBF29CE484222325
_PRIME = 0x100000001B3
# The field the shard is keyed by, as the API server's selector names it.
KEY = "object.metadata.namespace"


def fnv1a64(text: str) -> int:
    """The 64-bit FNV-1a hash of `text`'s UTF-8 bytes (Go's hash/fnv New64a)."""
    h = _OFFSET
    for byte in text.encode():
        h = ((h ^ byte) * _PRIME) % SPACE
    return h


def bounds(count: int) -> tuple[int, ...]:
    """The count + 1 edges of `count` contiguous ranges over [0, 2^64): shard k is
    [edges[k], edges[k + 1])."""
    if count < 1:
        raise ValueError(f"shards must be 1 or more, not {count}")
    return tuple(k * SPACE // count for k in range(count + 1))


def shard_of(namespace: str, count: int) -> int:
    """The shard a namespace's jobs and pods belong to."""
    return shard_of_hash(fnv1a64(namespace), count)


def shard_of_hash(value: int, count: int) -> int:
    """The shard of a hash, by the ranges themselves, so that an edge that does not divide
    evenly falls where the server's comparison puts it."""
    return bisect.bisect_right(bounds(count), value) - 1


def hex_bound(value: int) -> str:
    """A range edge as the API server's selector wants it: 0x and 16 lowercase digits, or
    0x10000000000000000 for 2^64."""
    return f"0x{value:016x}"


def ranges(shards: Iterable[int], count: int) -> list[tuple[int, int]]:
    """The hash ranges of `shards`, adjacent ones merged."""
    edges = bounds(count)
    out: list[tuple[int, int]] = []
    for k in sorted(set(shards)):
        if not 0 <= k < count:
            raise ValueError(f"shard {k} is not one of 0..{count - 1}")
        if out and out[-1][1] == edges[k]:
            out[-1] = (out[-1][0], edges[k + 1])
        else:
            out.append((edges[k], edges[k + 1]))
    return out


def selector(shards: Iterable[int], count: int) -> str:
    """The `shardSelector` of a list or watch that asks for `shards` ("" for every shard or
    none: the parameter is then left out, and nothing is asked of the server)."""
    spans = ranges(shards, count)
    if spans == [(0, SPACE)] or not spans:
        return ""
    return " || ".join(f"shardRange({KEY}, '{hex_bound(a)}', '{hex_bound(b)}')" for a, b in spans)


def shard_lease(base: str, shard: int) -> str:
    """The name of shard `shard`'s Lease."""
    return f"{base}-shard-{shard}"


def member_lease(base: str, identity: str) -> str:
    """The name of a replica's member Lease (its identity may not be a valid object name)."""
    return f"{base}-member-{fnv1a64(identity):016x}"


@dataclass(frozen=True, slots=True)
class Held:
    """A Lease as read: who holds it, when they last renewed, for how long."""

    holder: str | None
    renewed: datetime | None
    duration: float

    def live(self, now: datetime) -> bool:
        return (bool(self.holder) and self.renewed is not None
                and self.renewed + timedelta(seconds=self.duration) > now)


@dataclass(frozen=True, slots=True)
class Moves:
    """What a replica does this round: renew `keep`, acquire `take`, release `give`."""

    share: int
    keep: tuple[int, ...]
    take: tuple[int, ...]
    give: tuple[int, ...]


def share(count: int, replicas: int) -> int:
    """A replica's fair share: ceil(shards / live replicas)."""
    return -(-count // max(1, replicas))


def members(me: str, member_leases: Iterable[Held], shard_leases: Iterable[Held | None],
            now: datetime) -> frozenset[str]:
    """The live replicas: those whose member Lease is current, those holding a current shard
    Lease (a member Lease may lag), and this one."""
    seen = {h.holder for h in (*member_leases, *shard_leases) if h is not None and h.live(now)}
    return frozenset({me, *(h for h in seen if h)})


def preference(identity: str, shard: int) -> int:
    """How much `identity` prefers `shard` (highest first): rendezvous hashing, so that
    replicas reaching for free shards at once mostly reach for different ones."""
    return fnv1a64(f"{identity}/{shard}")


def moves(count: int, me: str, shards: Mapping[int, Held | None], live: frozenset[str],
          now: datetime) -> Moves:
    """This replica's moves, given every shard's Lease (None: not created yet) and the live
    replicas. Held beyond the share: give back the least preferred; below it: take the most
    preferred of the free ones (no holder, or expired)."""
    fair = share(count, len(live))
    mine = [k for k in range(count) if (h := shards.get(k)) is not None and h.holder == me
            and h.live(now)]
    ranked = sorted(mine, key=lambda k: (-preference(me, k), k))
    if len(mine) > fair:
        return Moves(fair, tuple(sorted(ranked[:fair])), (), tuple(sorted(ranked[fair:])))
    free = [k for k in range(count) if (h := shards.get(k)) is None or not h.live(now)]
    free.sort(key=lambda k: (-preference(me, k), k))
    return Moves(fair, tuple(sorted(mine)), tuple(sorted(free[:fair - len(mine)])), ())
