"""runtime.shards: the namespace hash and ranges the API server's sharded watch uses, and which
shards a replica holds given the Leases it sees."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone

import pytest

from runtime import shards
from runtime.shards import Held

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)

# Go's k8s.io/apimachinery/pkg/sharding.HashField (v0.36.3, the dev kit's API server), run on
# these namespaces: the values the server compares against a shardRange.
GO_HASHES = {
    "": "cbf29ce484222325",
    "default": "ebada5168620c5fe",
    "kube-system": "df65c7bc1d82b35e",
    "a": "af63dc4c8601ec8c",
    "team-ml-07": "b8139557465b40a0",
    "jobs-0": "4e1539b52b17d8a0",
    "jobs-1": "4e153ab52b17da53",
    "jobs-2": "4e153bb52b17dc06",
    "ünï": "8406649dfd5e4e56",
}


@pytest.mark.parametrize("namespace", sorted(GO_HASHES))
def test_the_hash_is_the_api_servers(namespace: str) -> None:
    assert f"{shards.fnv1a64(namespace):016x}" == GO_HASHES[namespace]


def _hex_less(a: str, b: str) -> bool:
    """The API server's comparison of two 0x-prefixed bounds (sharding.HexLess)."""
    return len(a) < len(b) if len(a) != len(b) else a < b


def _server_matches(value: int, start: str, end: str) -> bool:
    """Whether the server's shardRange(.., start, end) selects an object hashing to `value`."""
    hashed = f"0x{value:016x}"
    return not _hex_less(hashed, start) and _hex_less(hashed, end)


@pytest.mark.parametrize("count", [1, 2, 3, 5, 7, 8, 13, 64, 1000])
def test_the_ranges_cover_the_space_once_and_match_the_servers_comparison(count: int) -> None:
    edges = shards.bounds(count)
    assert edges[0] == 0 and edges[-1] == shards.SPACE
    assert all(a < b for a, b in itertools.pairwise(edges))
    for k in range(count):
        start, end = shards.hex_bound(edges[k]), shards.hex_bound(edges[k + 1])
        assert len(start) == 18 and (len(end) == 18 or end == "0x10000000000000000")
        # Values at and around every edge, and some at random: in shard k by our reckoning
        # exactly when the server's string comparison says so.
        probes = {edges[k], edges[k] + 1, edges[k + 1] - 1, max(0, edges[k] - 1),
                  min(shards.SPACE - 1, edges[k + 1])}
        probes |= {random.Random(count * 1000 + k).randrange(shards.SPACE) for _ in range(20)}
        for value in probes:
            ours = shards.shard_of_hash(value, count) == k
            assert ours == _server_matches(value, start, end), (count, k, hex(value))


@pytest.mark.parametrize("count", [1, 2, 3, 8, 10])
def test_every_namespace_falls_in_the_shard_whose_range_the_server_matches(count: int) -> None:
    edges = shards.bounds(count)
    for n in range(300):
        namespace = f"team-{n}"
        k = shards.shard_of(namespace, count)
        matched = [j for j in range(count)
                   if _server_matches(shards.fnv1a64(namespace), shards.hex_bound(edges[j]),
                                      shards.hex_bound(edges[j + 1]))]
        assert matched == [k], namespace


def test_four_shards_are_the_keps_split() -> None:
    assert [shards.hex_bound(e) for e in shards.bounds(4)] == [
        "0x0000000000000000", "0x4000000000000000", "0x8000000000000000", "0xc000000000000000",
        "0x10000000000000000"]


def test_varied_names_spread_and_names_differing_in_their_last_characters_cluster() -> None:
    """FNV-1a's high bits move little with a string's last bytes: ns-0 .. ns-799 fall in a few
    of 8 ranges (docs/controller.md warns of it); names that differ early spread evenly."""
    rng = random.Random(5)
    varied = [0] * 8
    for _ in range(800):
        varied[shards.shard_of("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=8)), 8)] += 1
    assert min(varied) > 60, varied
    sequential = [0] * 8
    for n in range(800):
        sequential[shards.shard_of(f"ns-{n}", 8)] += 1
    assert sequential.count(0) >= 2, sequential


def test_selector_merges_adjacent_ranges_and_asks_nothing_for_all() -> None:
    assert shards.selector(range(4), 4) == ""
    assert shards.selector([], 4) == ""
    assert shards.selector([2, 1], 4) == (
        "shardRange(object.metadata.namespace, '0x4000000000000000', '0xc000000000000000')")
    assert shards.selector([0, 3], 4) == (
        "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000') || "
        "shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')")
    with pytest.raises(ValueError):
        shards.selector([4], 4)
    with pytest.raises(ValueError):
        shards.bounds(0)


def test_lease_names_are_object_names() -> None:
    assert shards.shard_lease("jobrules-controller", 7) == "jobrules-controller-shard-7"
    name = shards.member_lease("jobrules-controller", "host_123")
    assert name.startswith("jobrules-controller-member-") and name == name.lower()
    assert "_" not in name and name != shards.member_lease("jobrules-controller", "host_124")


# -- who holds what ---------------------------------------------------------------------------


def held(holder: str | None, age: float = 0.0, duration: float = 15.0) -> Held:
    return Held(holder, NOW - timedelta(seconds=age), duration)


def test_a_lease_is_live_until_its_duration_passes() -> None:
    assert held("a", 14.9).live(NOW)
    assert not held("a", 15.0).live(NOW)
    assert not held(None).live(NOW) and not held("").live(NOW)
    assert not Held("a", None, 15).live(NOW)


def test_members_count_live_member_leases_holders_and_oneself() -> None:
    found = shards.members("me", [held("a"), held("b", age=20)], [held("c"), held("d", 30), None],
                           NOW)
    assert found == {"me", "a", "c"}


@pytest.mark.parametrize("count,replicas,expected", [(8, 1, 8), (8, 3, 3), (8, 4, 2), (8, 5, 2),
                                                     (8, 8, 1), (8, 9, 1), (1, 3, 1)])
def test_share_is_the_ceiling(count: int, replicas: int, expected: int) -> None:
    assert shards.share(count, replicas) == expected


def test_alone_a_replica_takes_every_shard() -> None:
    m = shards.moves(8, "a", {}, frozenset({"a"}), NOW)
    assert m == shards.Moves(8, (), tuple(range(8)), ())


def test_takes_only_free_or_expired_shards_up_to_its_share() -> None:
    leases = {0: held("b"), 1: held("b"), 2: held("b", age=16), 3: held(None), 4: held("c"),
              5: held("c"), 6: held("c"), 7: None}
    m = shards.moves(8, "a", leases, frozenset({"a", "b", "c"}), NOW)
    assert m.share == 3 and m.keep == () and m.give == ()
    assert set(m.take) <= {2, 3, 7} and len(m.take) == 3


def test_gives_back_the_excess_when_others_join_and_keeps_the_rest() -> None:
    leases = {k: held("a") for k in range(8)}
    m = shards.moves(8, "a", leases, frozenset({"a", "b"}), NOW)
    assert (m.share, len(m.keep), len(m.give), m.take) == (4, 4, 4, ())
    assert set(m.keep) | set(m.give) == set(range(8))


def test_an_expired_lease_of_ones_own_is_taken_again_not_kept() -> None:
    m = shards.moves(2, "a", {0: held("a", age=20), 1: held("b")}, frozenset({"a", "b"}), NOW)
    assert m == shards.Moves(1, (), (0,), ())


def _simulate(count: int, replicas: list[str], leases: dict[int, str | None], rounds: int,
              rng: random.Random) -> dict[int, str | None]:
    """Rounds of every live replica's moves in a random order, each acting on what it sees at
    its turn (as the shell does with resourceVersion-guarded writes); the holders after."""
    for _ in range(rounds):
        for me in rng.sample(replicas, len(replicas)):
            view = {k: held(h) if h else None for k, h in leases.items()}
            m = shards.moves(count, me, view, frozenset(replicas), NOW)
            for k in m.give:
                leases[k] = None
            for k in m.take:
                leases[k] = me
    return leases


@pytest.mark.parametrize("count", [1, 2, 3, 8, 13])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 7, 9])
def test_replicas_settle_on_every_shard_held_within_shares_and_then_stay(
        count: int, replicas: int) -> None:
    rng = random.Random(count * 100 + replicas)
    names = [f"r{i}" for i in range(replicas)]
    settled = _simulate(count, names, {}, 3, rng)
    fair = shards.share(count, replicas)
    assert all(settled[k] in names for k in range(count)), settled
    per = {n: sum(1 for h in settled.values() if h == n) for n in names}
    assert max(per.values()) <= fair, per
    again = _simulate(count, names, dict(settled), 5, rng)
    assert again == settled   # no flapping: nothing moves once settled


@pytest.mark.parametrize("seed", range(20))
def test_a_replica_joining_or_dying_moves_only_what_it_must(seed: int) -> None:
    rng = random.Random(seed)
    names = ["r0", "r1", "r2"]
    before = _simulate(8, names, {}, 3, rng)
    joined = _simulate(8, [*names, "r3"], dict(before), 3, rng)
    per = {n: sum(1 for h in joined.values() if h == n) for n in [*names, "r3"]}
    assert per == {n: 2 for n in per}, per
    # Only shards given up by a replica above its new share moved, each to the newcomer.
    moved = {k for k in range(8) if joined[k] != before[k]}
    assert all(joined[k] == "r3" for k in moved) and len(moved) == 2
    # r1 dies: its leases expire and are free; the others take them up to ceil(8 / 3) = 3.
    dead = {k: (None if h == "r1" else h) for k, h in joined.items()}
    after = _simulate(8, ["r0", "r2", "r3"], dead, 3, rng)
    assert all(after[k] in ("r0", "r2", "r3") for k in range(8))
    assert all(after[k] == joined[k] for k in range(8) if joined[k] != "r1")
