"""Shards held through Leases (`JOBRULES_SHARDS` > 1): one coordination.k8s.io Lease per shard,
`LEASE_NAME-shard-K`, and one member Lease per replica, `LEASE_NAME-member-HASH`, so that a
replica holding nothing yet is counted.

Every retry period a replica renews its member Lease, lists the Leases (one LIST, by label),
and does what runtime.shards decides: renew what it keeps, release what it gives back, acquire
what it takes; every write guarded by the Lease's resourceVersion, so two replicas reaching for
one shard cannot both get it. A Lease counts as expired when its record has not changed for its
duration by this replica's clock (as client-go's election does: no trust in others' clocks).

A shard given back is first drained: no new reconcile of its jobs starts (`enter` refuses) and
those running finish, then the Lease is released. A replica that cannot renew a shard within the
renew deadline exits, as a leader that loses its Lease does: its threads cannot be trusted to
stop on their own. A new owner resumes each job from its stored state and intent journal, as a
restarted leader does (docs/controller.md, Actions).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from runtime import objects
from runtime import shards as shardlib
from runtime.controller import kube, metrics

log = logging.getLogger("jobrules.controller")
LABEL = "jobrules.dev/shards-of"
MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"


class Shards:
    """Holds this replica's share of the shards; `enter`/`leave` bracket each reconcile."""

    def __init__(self, client: kube.Client, *, count: int, namespace: str, base: str,
                 identity: str, lease_duration: int, renew_deadline: int, retry_period: int,
                 on_gained: Callable[[frozenset[int]], None],
                 on_given: Callable[[frozenset[int]], None],
                 on_lost: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.count, self.namespace, self.base, self.identity = count, namespace, base, identity
        self.lease_duration, self.renew_deadline = lease_duration, renew_deadline
        self.retry_period = retry_period
        self.on_gained, self.on_given, self.on_lost = on_gained, on_given, on_lost
        self.clock = clock                       # for expiry: only differences matter
        self.owned: frozenset[int] = frozenset()
        self._busy = [0] * count                 # reconciles running, per shard
        self._cond = threading.Condition()
        self._renewed: dict[int, float] = {}     # shard -> monotonic time of our last renewal
        self._seen: dict[str, tuple[Any, float]] = {}   # lease -> (record, when it last changed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shards", daemon=True)

    # -- the worker's side -----------------------------------------------------------------

    def shard(self, namespace: str) -> int:
        return shardlib.shard_of(namespace, self.count)

    def owns(self, namespace: str) -> bool:
        return self.shard(namespace) in self.owned

    def enter(self, namespace: str) -> bool:
        """Whether a reconcile of a job in `namespace` may start now (it holds the shard until
        `leave`); False when the shard is not ours."""
        k = self.shard(namespace)
        with self._cond:
            if k not in self.owned:
                return False
            self._busy[k] += 1
            return True

    def leave(self, namespace: str) -> None:
        k = self.shard(namespace)
        with self._cond:
            self._busy[k] -= 1
            self._cond.notify_all()

    def _drain(self, shards: frozenset[int], timeout: float) -> None:
        """Stop starting reconciles of `shards`, and wait for those running to end."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self.owned = self.owned - shards
            while any(self._busy[k] for k in shards):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("shards %s: reconciles still running after %.0fs; releasing",
                                sorted(shards), timeout)
                    return
                self._cond.wait(left)

    # -- the loop ----------------------------------------------------------------------------

    def start(self) -> Shards:
        self._thread.start()
        return self

    def _path(self, name: str | None = None) -> str:
        return objects.path("coordination.k8s.io/v1", "leases", self.namespace, name)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.round()
            except (kube.ApiError, kube.TransportError) as err:
                log.warning("shards: %s; trying again", err)
            except Exception:   # a bug: keep holding what we can, and say so loudly
                log.exception("shards: the round failed")
            self._check_renewals()
            self._stop.wait(self.retry_period)

    def _check_renewals(self) -> None:
        late = [k for k in self.owned
                if self.clock() - self._renewed.get(k, 0.0) > self.renew_deadline]
        if late:
            log.error("shards %s: not renewed within %ds", sorted(late), self.renew_deadline)
            self.on_lost()

    def round(self) -> None:
        """One look at the Leases and the moves it calls for."""
        self._renew_member()
        found = self.client.list(self._path(), query=[("labelSelector", f"{LABEL}={self.base}")])
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        leases: dict[int, dict[str, Any]] = {}
        members: list[shardlib.Held] = []
        names = {shardlib.shard_lease(self.base, k): k for k in range(self.count)}
        for lease in found.get("items") or []:
            name = objects.name(lease)
            if name in names:
                leases[names[name]] = lease
            elif str(name).startswith(f"{self.base}-member-"):
                members.append(self._held(lease, now))
                self._collect(lease, now)
        held = {k: self._held(lease, now) for k, lease in leases.items()}
        live = shardlib.members(self.identity, members, held.values(), now)
        moves = shardlib.moves(self.count, self.identity, held, live, now)
        metrics.SHARDS_SHARE.set(moves.share)
        if moves.give:
            self._give(frozenset(moves.give), leases)
        for k in moves.keep:
            self._write(k, leases.get(k), acquire=False)
        gained = frozenset(k for k in moves.take if self._write(k, leases.get(k), acquire=True))
        if gained:
            with self._cond:
                self.owned = self.owned | gained
            log.info("shards: took %s (holding %s of %d; %d replicas live, share %d)",
                     sorted(gained), sorted(self.owned), self.count, len(live), moves.share)
            self.on_gained(gained)
        metrics.SHARDS_HELD.set(len(self.owned))

    def _collect(self, lease: dict[str, Any], now: datetime) -> None:
        """Delete a member Lease unchanged for three lease durations: its replica is gone (each
        pod of a Deployment has a name, and a Lease, of its own). Guarded by its version; a
        replica that was only slow makes its Lease again on its next round."""
        name = str(objects.name(lease))
        seen = self._seen.get(name)
        if seen is None or now.timestamp() - seen[1] < 3 * self.lease_duration:
            return
        if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
            return
        try:
            self.client.delete(self._path(name), resource_version=objects.resource_version(lease))
            log.info("shards: deleted the member Lease %s of a replica gone", name)
        except (kube.ApiError, kube.TransportError):
            pass   # another replica did, or it came back: next round sees
        self._seen.pop(name, None)

    def _held(self, lease: dict[str, Any], now: datetime) -> shardlib.Held:
        """A Lease as runtime.shards reads it, its renewal time by our clock: when we first saw
        its record as it is now."""
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("acquireTime"))
        name = str(objects.name(lease))
        before = self._seen.get(name)
        seen = before[1] if before is not None and before[0] == record else now.timestamp()
        self._seen[name] = (record, seen)
        if spec.get("holderIdentity") == self.identity:
            seen = now.timestamp()   # ours: we know it is fresh (or see it lost in _write)
        return shardlib.Held(spec.get("holderIdentity") or None,
                             datetime.fromtimestamp(seen, timezone.utc),
                             float(spec.get("leaseDurationSeconds") or self.lease_duration))

    def _spec(self, *, acquire: bool, transitions: int) -> dict[str, Any]:
        stamp = datetime.now(timezone.utc).strftime(MICRO)
        spec: dict[str, Any] = {"holderIdentity": self.identity, "renewTime": stamp,
                                "leaseDurationSeconds": self.lease_duration}
        if acquire:
            spec |= {"acquireTime": stamp, "leaseTransitions": transitions}
        return spec

    def _write(self, k: int, lease: dict[str, Any] | None, *, acquire: bool) -> bool:
        """Acquire or renew shard k's Lease; whether it is ours now."""
        name = shardlib.shard_lease(self.base, k)
        try:
            if lease is None:
                self.client.create(self._path(), {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "labels": {LABEL: self.base}},
                    "spec": self._spec(acquire=True, transitions=0)})
            else:
                spec = lease.get("spec") or {}
                transitions = int(spec.get("leaseTransitions") or 0) + (
                    1 if acquire and spec.get("holderIdentity") else 0)
                self.client.merge_patch(self._path(name),
                                        {"spec": self._spec(acquire=acquire,
                                                            transitions=transitions)},
                                        resource_version=objects.resource_version(lease))
        except kube.ApiError as err:
            if err.status != 409:
                raise
            if not acquire:   # another replica took it: it thought our hold expired
                log.error("shards: shard %d was taken while we held it", k)
                self.on_lost()
            return False      # another replica acquired it first: next round sees
        self._renewed[k] = self.clock()
        return True

    def _give(self, shards: frozenset[int], leases: dict[int, dict[str, Any]]) -> None:
        self._drain(shards, timeout=max(1.0, self.renew_deadline - self.retry_period))
        self.on_given(shards)
        for k in sorted(shards):
            self._release(k, leases.get(k))
        log.info("shards: gave back %s (holding %s)", sorted(shards), sorted(self.owned))

    def _release(self, k: int, lease: dict[str, Any] | None) -> None:
        """Clear our hold of shard k's Lease (holder cleared, duration 1 s), if still ours."""
        self._renewed.pop(k, None)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        try:
            self.client.merge_patch(self._path(shardlib.shard_lease(self.base, k)),
                                    {"spec": {"holderIdentity": None, "leaseDurationSeconds": 1}},
                                    resource_version=objects.resource_version(lease))
        except (kube.ApiError, kube.TransportError) as err:
            log.warning("shards: could not release shard %d: %s (it expires)", k, err)

    def _renew_member(self) -> None:
        name = shardlib.member_lease(self.base, self.identity)
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration,
                "renewTime": datetime.now(timezone.utc).strftime(MICRO)}
        try:
            self.client.merge_patch(self._path(name), {"spec": spec})
        except kube.NotFound:
            self.client.create(self._path(), {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "labels": {LABEL: self.base}}, "spec": spec})

    def release(self) -> None:
        """On stop: drain and give back every shard, and leave the members."""
        self._stop.set()
        held = self.owned
        self._drain(held, timeout=10.0)
        try:
            found = self.client.list(self._path(),
                                     query=[("labelSelector", f"{LABEL}={self.base}")])
            leases = {objects.name(lease): lease for lease in found.get("items") or []}
            for k in sorted(held):
                self._release(k, leases.get(shardlib.shard_lease(self.base, k)))
            self.client.delete(self._path(shardlib.member_lease(self.base, self.identity)))
            log.info("shards: released %s and left", sorted(held))
        except (kube.ApiError, kube.TransportError) as err:
            log.warning("shards: could not release every Lease: %s (they expire)", err)


def exit_lost() -> None:
    """What a replica does when it cannot renew its shards: exit at once."""
    log.error("lost shards: exiting so that no stale worker writes on")
    logging.shutdown()
    os._exit(1)
