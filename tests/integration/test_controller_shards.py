"""Shards on the real control plane (`JOBRULES_SHARDS`): three replicas over eight shards, each
job decided by exactly one replica, the one holding its namespace's shard; a fourth replica
joining takes its share without a pause in verdicts longer than the lease duration; a replica
killed with SIGKILL in the middle of an action has its shards taken over within the lease
duration plus 5 s, with no action done twice and no verdict lost (the audit log). Run twice: on
the session's plane, whose API server ignores `shardSelector` (the ShardedListAndWatch gate off:
every replica caches every job and filters by the hash), and on a plane of its own with the gate
on (each replica's cache holds only its shards' jobs)."""

from __future__ import annotations

import contextlib
import json
import re
import time
import types
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devkit import cluster
from runtime import shards
from support import apiserver, audit, controllers

pytestmark = pytest.mark.integration

VOLCANO = apiserver.Resource("batch.volcano.sh/v1alpha1", "jobs")
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"
RULES = """
job trainer: batch.volcano.sh/v1alpha1 Job {
    pods owned
    pods label "volcano.sh/job-name" = <<metadata.name>>
    task label "volcano.sh/task-spec"
    failed     when any pod failed
               reason "PodFailed"
    running    when any pod running
    pending    otherwise
    on pod evicted -> restart pod max 3 then fail job reason "TooManyEvictions"
    status {
        no condition
    }
}
"""
COUNT = 8
LEASE_DURATION = 6
VERDICT = re.compile(r"trainer (\S+)/(\S+): verdict (?:\S+ -> )?(\S+) ")


def namespaces_over_every_shard(per_shard: int) -> list[str]:
    """Namespace names, `per_shard` in each of the eight shards (random names spread; names
    that differ only at their end would cluster, see runtime.shards)."""
    found: dict[int, list[str]] = {k: [] for k in range(COUNT)}
    while any(len(v) < per_shard for v in found.values()):
        name = f"s{uuid.uuid4().hex[:10]}"
        k = shards.shard_of(name, COUNT)
        if len(found[k]) < per_shard:
            found[k].append(name)
    return [n for k in range(COUNT) for n in found[k]]


def make_namespace(api: Any, name: str) -> None:
    apiserver.create(api, apiserver.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": name}})
    apiserver.wait_for(f"ServiceAccount {name}/default", lambda: apiserver.exists(
        api, apiserver.SERVICE_ACCOUNTS.path(name, "default")), 60)


def job_with_pod(api: Any, namespace: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    job = apiserver.create(api, VOLCANO, {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "tasks": [{"name": "worker", "replicas": 1, "template": {
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox"}]}}}]}})
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(
        namespace, f"{name}-worker-0", owner=job,
        labels={"volcano.sh/job-name": name, "volcano.sh/task-spec": "worker"}))
    return job, pod


def holders(api: Any, lease_namespace: str) -> dict[int, str | None]:
    """Shard -> the holder its Lease names (None: none, or no Lease yet)."""
    items = apiserver.get(api, LEASES.format(lease_namespace))["items"]
    by_name = {i["metadata"]["name"]: (i.get("spec") or {}).get("holderIdentity") for i in items}
    return {k: by_name.get(shards.shard_lease("jobrules-controller", k)) for k in range(COUNT)}


def deciders(replicas: dict[str, controllers.Running],
             phase: str | None = None) -> dict[tuple[str, str], set[str]]:
    """(namespace, job) -> the replicas whose log says they wrote a verdict of it (of that
    phase, when given)."""
    out: dict[tuple[str, str], set[str]] = {}
    for name, replica in replicas.items():
        for found in VERDICT.finditer(replica.logs()):
            if phase is None or found.group(3) == phase:
                out.setdefault((found.group(1), found.group(2)), set()).add(name)
    return out


def budget(api: Any, namespace: str) -> int:
    """The evictions budget spent on the job `train` (its stored state)."""
    text = controllers.annotation(apiserver.get(api, VOLCANO.path(namespace, "train")),
                                  "jobrules.dev/state")
    return int((json.loads(text).get("budgets") or {}).get("podEvicted#0", 0)) if text else 0


def phase(api: Any, namespace: str, name: str) -> str | None:
    return controllers.verdict(apiserver.get(api, VOLCANO.path(namespace, name))).get("phase")


def test_three_replicas_over_eight_shards_filtered_here(control_plane: Any, api: Any,
                                                        namespace: str, tmp_path: Path) -> None:
    """The session's plane: the gate off, so the API server ignores shardSelector."""
    if control_plane.plane is None:
        pytest.skip("the audit log is read from a control plane this session started")
    scenario(control_plane, api, control_plane.plane, namespace, tmp_path, server_sharded=False)


def test_three_replicas_over_eight_shards_on_the_servers_sharded_watch(tmp_path: Path) -> None:
    """A plane of its own, kube-apiserver started with ShardedListAndWatch=true."""
    with cluster.running(nodes=0, scheduler=False, training_operator=False,
                         feature_gates=("ShardedListAndWatch=true",)) as plane, \
            plane.client() as api:
        scenario(types.SimpleNamespace(plane=plane), api, plane, "default", tmp_path,
                 server_sharded=True)


def cached_jobs(replica: controllers.Running) -> float:
    return replica.metric("jobrules_controller_store_objects", resource="trainer")


def cached_pods(replica: controllers.Running) -> float:
    return replica.metric("jobrules_controller_store_objects", resource="pods/volcano.sh/job-name")


def scenario(session: Any, api: Any, plane: cluster.ControlPlane, namespace: str, tmp_path: Path,
             *, server_sharded: bool) -> None:
    """The story, on `plane`; the Leases live in `namespace`."""
    plan = controllers.compile_plan(RULES, tmp_path / "plan.json")
    spaces = namespaces_over_every_shard(2)
    for name in spaces:
        make_namespace(api, name)
    settings = {"JOBRULES_SHARDS": str(COUNT), "JOBRULES_LEADER_ELECT": "true",
                "JOBRULES_NAMESPACES": "", "JOBRULES_LEASE_NAMESPACE": namespace,
                "JOBRULES_LEASE_DURATION": str(LEASE_DURATION), "JOBRULES_RENEW_DEADLINE": "4",
                "JOBRULES_RETRY_PERIOD": "1", "JOBRULES_WORKERS": "2"}
    replicas: dict[str, controllers.Running] = {}
    with contextlib.ExitStack() as stack:
        def start(name: str, **extra: str) -> controllers.Running:
            replicas[name] = stack.enter_context(controllers.running(
                session, plan, namespace, tmp_path, name=name, **settings, **extra))
            return replicas[name]

        start("a")
        start("b")
        doomed = start("c", JOBRULES_TEST_HOOKS="1", JOBRULES_FAULT="exit-after:act:1")
        apiserver.wait_for("8 shards held, at most 3 each", lambda: (
            None not in (held := holders(api, namespace)).values()
            and max(Counter(held.values()).values()) <= 3), 60)

        # Every job decided, each by exactly one replica: the one holding its shard.
        made = {ns: job_with_pod(api, ns, "train") for ns in spaces}
        pods = {ns: apiserver.report_running(api, pod) for ns, (_, pod) in made.items()}
        apiserver.wait_for("16 jobs Running", lambda: all(
            phase(api, ns, "train") == "Running" for ns in spaces), 90)
        held = holders(api, namespace)
        decided = deciders(replicas)
        for ns in spaces:
            assert decided.get((ns, "train")) == {held[shards.shard_of(ns, COUNT)]}, (ns, decided)
        # What each replica caches: its own shards' jobs where the server shards the watch,
        # every job where it does not.
        said = ("the API server shards our lists and watches" if server_sharded
                else "the API server ignored shardSelector")
        for name, replica in replicas.items():
            own = sum(1 for ns in spaces if held[shards.shard_of(ns, COUNT)] == name)
            expected = own if server_sharded else len(spaces)
            apiserver.wait_for(f"{name} caching {expected} jobs and their pods",
                               lambda r=replica, e=expected: cached_jobs(r) == e
                               and cached_pods(r) == e, 30)
            assert said in replica.logs(), name

        # A fourth replica joins while verdicts keep coming: it takes its share (two, as every
        # replica then holds), and no verdict waits longer than the lease duration.
        later = {ns: job_with_pod(api, ns, "late")[1] for ns in spaces}
        start("d", wait_ready=False)
        latencies = []
        for ns in spaces:
            began = time.monotonic()
            apiserver.report_running(api, later[ns])
            apiserver.wait_for(f"{ns}/late Running", lambda: phase(api, ns, "late") == "Running",
                               30)
            latencies.append(time.monotonic() - began)
        apiserver.wait_for("two shards each", lambda: Counter(
            holders(api, namespace).values()) == {"a": 2, "b": 2, "c": 2, "d": 2}, 30)
        assert max(latencies) < LEASE_DURATION, latencies
        # A late job's Pending verdict was written before the join and its shard may have moved
        # since: its Running verdict is then the new holder's. Each written once, by one replica.
        decided = deciders(replicas, "Running")
        assert all(len(decided[(ns, "late")]) == 1 for ns in spaces), decided

        # Evictions everywhere: c dies right after its first pod deletion, mid-action; a, b
        # and d take its shards (ceil(8 / 3) = 3 each at most) within the lease duration + 5 s.
        for ns in spaces:
            apiserver.report_evicted(api, pods[ns])
        apiserver.wait_for("c's exit", lambda: doomed.process.poll() is not None, 60)
        died = time.monotonic()
        assert doomed.process.returncode == 137, doomed.logs()
        apiserver.wait_for("c's shards taken over", lambda: not ({"c", None} & set(
            holders(api, namespace).values())), LEASE_DURATION + 5)
        took = time.monotonic() - died
        assert took <= LEASE_DURATION + 5, took
        print(f"server_sharded={server_sharded}: takeover {took:.1f}s after the kill; verdict "
              f"latencies while d joined: max {max(latencies):.2f}s, "
              f"median {sorted(latencies)[len(latencies) // 2]:.2f}s")
        assert max(Counter(holders(api, namespace).values()).values()) <= 3

        # No verdict lost, no action twice: each evicted pod deleted once, each journal cleared.
        def settled() -> bool:
            return all(not apiserver.exists(api, apiserver.PODS.path(ns, "train-worker-0"))
                       and controllers.annotation(apiserver.get(api, VOLCANO.path(ns, "train")),
                                                  "jobrules.dev/intents") is None
                       for ns in spaces)
        apiserver.wait_for("every evicted pod deleted and every journal cleared", settled, 90)
        for ns in spaces:
            # At most one deletion answered 2xx per pod (a DELETE cut off by the SIGKILL is done
            # by the server but may be logged without its answer), and the budget spent once.
            removals = audit.pod_removals(plane.audit_log, ns)
            assert set(removals) <= {pods[ns]["metadata"]["uid"]} and \
                set(removals.values()) <= {1}, (ns, removals)
            assert budget(api, ns) == 1, ns
        for name, replica in replicas.items():
            assert "Traceback" not in replica.logs(), name
