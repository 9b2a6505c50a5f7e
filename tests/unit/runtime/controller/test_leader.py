"""runtime.controller.leader's log: the official election, run over a Lease in memory, says its
every renewal and every follower's look at DEBUG only (at INFO they were most of the log), and
what happens once (the first acquisition) still at INFO."""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

from runtime.controller import kube, leader


@dataclass
class Missing:
    """What the official lock's `get` answers for a Lease that does not exist."""

    body: str = json.dumps({"code": 404})
    reason: str = "Not Found"


@dataclass
class Lease:
    """The official LeaseLock's interface over one record in memory, shared by candidates."""

    identity: str
    held: dict[str, LeaderElectionRecord] = field(default_factory=dict)
    name: str = "jobrules-controller"
    namespace: str = "default"

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        record = self.held.get(name)
        return (True, copy.copy(record)) if record is not None else (False, Missing())

    def create(self, name: str, namespace: str, election_record: LeaderElectionRecord) -> bool:
        self.held[name] = copy.copy(election_record)
        return True

    def update(self, name: str, namespace: str, updated_record: LeaderElectionRecord) -> bool:
        self.held[name] = copy.copy(updated_record)
        return True


def candidate(identity: str, held: dict[str, LeaderElectionRecord]) -> Any:
    """A replica's election as leader.Elector sets it up, on the Lease in memory."""
    with kube.Client(k8s.Configuration()) as client:
        elector = leader.Elector(client, client.api, namespace="default", name="jobrules-controller",
                                 identity=identity, lease_duration=15, renew_deadline=10,
                                 retry_period=2, on_started=lambda: None, on_lost=lambda: None)
    election = elector._election
    election.election_config.lock = Lease(identity, held)
    return election


def rounds(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    held: dict[str, LeaderElectionRecord] = {}
    a, b = candidate("a", held), candidate("b", held)
    assert a.acquire()   # creates the Lease
    for _ in range(5):
        assert a.try_acquire_or_renew()        # the leader renews
        assert not b.try_acquire_or_renew()    # a follower looks: held
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == leader.ELECTION_LOG]


def test_renewals_and_followers_looks_are_not_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    said = rounds(caplog)
    assert said == [("INFO", "a is a follower"), ("INFO", "a is trying to create a lock")]


def test_they_are_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    said = rounds(caplog)
    assert said.count(("DEBUG", "leader a has successfully acquired lease")) == 5
    assert said.count(("DEBUG", "yet to finish lease_duration, lease held by a and has not "
                                "expired")) == 5
    assert {level for level, _ in said} == {"INFO", "DEBUG"}


def test_the_filter_is_installed_once() -> None:
    candidate("a", {})
    candidate("b", {})
    filters = logging.getLogger(leader.ELECTION_LOG).filters
    assert sum(isinstance(f, leader.Routine) for f in filters) == 1
