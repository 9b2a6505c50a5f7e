"""Leader election on a coordination.k8s.io Lease, with the official client's election.

One replica reconciles; the others keep their caches warm and take over when the Lease expires.
Correctness never depends on it (every write is guarded by the resourceVersion read): it only
saves two replicas doing the same work. Two gaps of the official election are closed here: a
leader that stops (SIGTERM) releases the Lease, as client-go's `ReleaseOnCancel` does, and a leader
that loses it exits (its threads cannot be trusted to stop on their own). And its log is kept
quiet: the official election says at INFO every renewal (every `retry_period`, 2 s) and every
look of a follower, which would bury the verdicts and actions; those are DEBUG here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubernetes import client as k8s
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock import leaselock

from runtime.controller import kube

log = logging.getLogger("jobrules.controller")
# The official election's logger, and what it says at INFO on every round (every
# `retry_period`): the leader's renewal ("leader X has successfully acquired lease"), a
# follower's look at a Lease still held. What is said once (the first acquisition, becoming a
# follower) and transitions (a new leader seen, failures) keep their level.
ELECTION_LOG = "leaderelection"
ROUTINE = ("has successfully acquired lease", "yet to finish lease_duration")


class Routine(logging.Filter):
    """Lowers the official election's routine messages to DEBUG (dropped unless its logger
    is enabled for DEBUG: a filter runs after the level check of the original call)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not any(s in record.getMessage() for s in ROUTINE):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_routine() -> None:
    """Install `Routine` on the official election's logger, once."""
    election = logging.getLogger(ELECTION_LOG)
    if not any(isinstance(f, Routine) for f in election.filters):
        election.addFilter(Routine())


class _Lock(leaselock.LeaseLock):
    """The official Lease lock, on our API server connection rather than the global one."""

    def __init__(self, api: k8s.ApiClient, name: str, namespace: str, identity: str) -> None:
        super().__init__(name, namespace, identity)
        self.api_instance = k8s.CoordinationV1Api(api)


class Elector:
    """Campaigns in a thread; `on_started` runs once leading, `on_lost` if the Lease is lost."""

    def __init__(self, client: kube.Client, api: k8s.ApiClient, *, namespace: str, name: str,
                 identity: str, lease_duration: int, renew_deadline: int, retry_period: int,
                 on_started: Callable[[], None], on_lost: Callable[[], None]) -> None:
        self.client = client
        self.namespace, self.name, self.identity = namespace, name, identity
        self.leading = threading.Event()
        self._released = False
        quiet_routine()

        def started() -> None:
            self.leading.set()
            log.info("leading (lease %s/%s as %s)", namespace, name, identity)
            on_started()
            threading.Event().wait()   # lead until the process ends: the callback's thread stays

        def stopped() -> None:
            self.leading.clear()
            if not self._released:
                log.error("lost the lease %s/%s", namespace, name)
                on_lost()

        config = electionconfig.Config(_Lock(api, name, namespace, identity), lease_duration,
                                       renew_deadline, retry_period, started, stopped)
        self._election = leaderelection.LeaderElection(config)
        self._thread = threading.Thread(target=self._election.run, name="leader-election",
                                        daemon=True)

    def start(self) -> Elector:
        self._thread.start()
        return self

    def release(self) -> None:
        """Give the Lease up (holder cleared, duration 1 s) if we hold it."""
        if not self.leading.is_set():
            return
        self._released = True
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"
        try:
            lease = self.client.get(path)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            self.client.merge_patch(path, {"spec": {"holderIdentity": None,
                                                    "leaseDurationSeconds": 1}},
                                    resource_version=lease["metadata"]["resourceVersion"])
            log.info("released the lease %s/%s", self.namespace, self.name)
        except (kube.ApiError, kube.TransportError) as err:
            log.warning("could not release the lease %s/%s: %s", self.namespace, self.name, err)
