"""The controller's share of the API server, on the real control plane: the FlowSchema and
PriorityLevelConfiguration `rulec manifests` renders are accepted as they are, and the API server
classifies the requests of the controller's ServiceAccount (a token minted for it, as the pod's
own) under them, and those of another account of the same namespace under the built-in
`service-accounts` schema.

API Priority and Fairness answers every request it classified with the uids of the FlowSchema
and priority level it chose (`X-Kubernetes-PF-FlowSchema-UID`, `X-Kubernetes-PF-PriorityLevel-
UID`), before authorization: a request the account is not allowed is classified too. Its
`/metrics` count the requests dispatched per schema, and how long each level's requests waited
for a seat. The shared control plane runs without APF (it costs CPU and buys nothing there), so
these tests start one of their own with it on: etcd and kube-apiserver alone, which is all
classification needs, with few seats, so that another account's flood makes it busy.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import apiserver
import pytest
import urllib3

from devkit import cluster
from rulec import manifests
from runtime import plan as planlib
from runtime.controller.kube import Client

pytestmark = pytest.mark.integration

FLOWCONTROL = "flowcontrol.apiserver.k8s.io/v1"
SCHEMAS = apiserver.Resource(FLOWCONTROL, "flowschemas")
LEVELS = apiserver.Resource(FLOWCONTROL, "prioritylevelconfigurations")
RESOURCES = {"FlowSchema": SCHEMAS, "PriorityLevelConfiguration": LEVELS}
SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
PLAN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "plans" / "rules.json"
# The server's read seats (and half as many for writes): few, so that one client's flood of
# reads fills its level's share on this small machine, as a busy cluster's would.
SEATS = 10
CONFIG_MAPS = apiserver.Resource("v1", "configmaps")
ROLES = apiserver.Resource("rbac.authorization.k8s.io/v1", "roles")
ROLE_BINDINGS = apiserver.Resource("rbac.authorization.k8s.io/v1", "rolebindings")


def rendered(namespace: str) -> list[dict[str, Any]]:
    """The flow-control objects `rulec manifests --namespace NAMESPACE` renders, renamed for
    the test (the schema still names its level)."""
    plan_text = PLAN.read_text()
    objects = manifests.render(planlib.loads(plan_text), plan_text, manifests.Options(
        image="registry.example.com/jobrules:0.1.0", certificates=manifests.CertManager(),
        namespace=namespace))
    out = [o for o in objects if o["kind"] in RESOURCES]
    assert [o["kind"] for o in out] == ["FlowSchema", "PriorityLevelConfiguration"]
    for obj in out:
        obj["metadata"]["name"] = f"jobrules-{namespace}"
    out[0]["spec"]["priorityLevelConfiguration"]["name"] = f"jobrules-{namespace}"
    return out


@pytest.fixture(scope="module")
def api() -> Iterator[Client]:
    """An API server with API Priority and Fairness on (and its built-in configuration)."""
    binaries = dataclasses.replace(cluster.find_binaries(), kube_controller_manager=None,
                                   kube_scheduler=None, kwok=None, training_operator=None)
    with cluster.running(crds=False, binaries=binaries, nodes=0, scheduler=False,
                         training_operator=False, priority_and_fairness=True,
                         max_requests_inflight=SEATS) as plane:
        with plane.client() as client:
            apiserver.wait_for("the built-in FlowSchemas", lambda: apiserver.exists(
                client, SCHEMAS.path(name="service-accounts")))
            yield client


@pytest.fixture
def namespace(api: Client) -> str:
    """The namespace `rulec manifests --namespace` is given, one per test."""
    name = f"fairshare-{uuid.uuid4().hex[:8]}"
    apiserver.create(api, apiserver.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": name}})
    return name


@pytest.fixture
def flow_control(api: Client, namespace: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """The schema and level created in the order `rulec manifests` applies them (schema
    first), once the API server's flow-control configuration has taken both in: the schema's
    Dangling condition, which it writes when it digests them, is False (its level found)."""
    made: list[dict[str, Any]] = []
    try:
        for obj in rendered(namespace):
            made.append(apiserver.create(api, RESOURCES[obj["kind"]], obj))
        schema, level = made
        apiserver.watch_for(api, SCHEMAS, schema, "the FlowSchema taken in, not dangling",
                            lambda o: _condition(o, "Dangling") == "False")
        yield schema, level
    finally:
        for obj in made:
            apiserver.delete(api, RESOURCES[obj["kind"]].path(name=obj["metadata"]["name"]))


def _condition(obj: dict[str, Any], type_: str) -> str | None:
    found = apiserver.condition(obj, type_)
    return found["status"] if found else None


def account(api: Client, namespace: str, name: str) -> str:
    """A ServiceAccount `name` in `namespace`, and a token minted for it (TokenRequest)."""
    if not apiserver.exists(api, apiserver.SERVICE_ACCOUNTS.path(namespace, name)):
        apiserver.create(api, apiserver.SERVICE_ACCOUNTS, {
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace}})
    return str(api.create(apiserver.SERVICE_ACCOUNTS.path(namespace, name) + "/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}})["status"]["token"])


def classified(api: Client, token: str, path: str) -> tuple[int, str, str]:
    """Send GET `path` with `token` alone (trusting the admin client's CA, without its client
    certificate, which would authenticate first): the status and the uids of the FlowSchema
    and priority level the API server chose."""
    with urllib3.PoolManager(ca_certs=api.configuration.ssl_ca_cert) as pool:
        response = pool.request("GET", api.host + path, timeout=30.0, retries=False,
                                headers={"Authorization": f"Bearer {token}",
                                         "Accept": "application/json"})
    return (response.status, response.headers.get(SCHEMA_HEADER, ""),
            response.headers.get(LEVEL_HEADER, ""))


def server_metrics(api: Client) -> str:
    """The API server's `/metrics`, read with the admin's client certificate."""
    response = api.api.rest_client.pool_manager.request(
        "GET", api.host + "/metrics", timeout=30.0, retries=False)
    assert response.status == 200, response.data[:200]
    return response.data.decode()


def dispatched(api: Client, schema: str) -> float:
    """`apiserver_flowcontrol_dispatched_requests_total` summed over the schema's series."""
    pattern = re.compile(r'^apiserver_flowcontrol_dispatched_requests_total\{[^}]*flow_schema="'
                         + re.escape(schema) + r'"[^}]*\} (\S+)$', re.M)
    return sum(float(v) for v in pattern.findall(server_metrics(api)))


# What the controller sends: discovery (non-resource), a namespaced read in its own namespace
# (its Lease), cluster-wide lists, a read in another namespace; allowed or not.
PATHS = ["/version", "/apis", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
         "/api/v1/pods?limit=1", "/apis/batch/v1/jobs?limit=1", "/api/v1/namespaces/default/pods"]


def test_the_controllers_requests_go_to_its_own_priority_level(
        api: Client, namespace: str, flow_control: tuple[dict[str, Any], dict[str, Any]]) -> None:
    schema, level = flow_control
    ours = (schema["metadata"]["uid"], level["metadata"]["uid"])
    before = dispatched(api, schema["metadata"]["name"])
    token = account(api, namespace, manifests.CONTROLLER)
    for path in PATHS:
        status, *uids = classified(api, token, path.format(ns=namespace))
        assert status in (200, 403), (path, status)
        assert tuple(uids) == ours, f"{path}: classified under {uids}, not {ours}"
    assert dispatched(api, schema["metadata"]["name"]) >= before + len(PATHS)


def test_another_account_of_the_namespace_stays_with_the_built_in_schemas(
        api: Client, namespace: str, flow_control: tuple[dict[str, Any], dict[str, Any]]) -> None:
    schema, level = flow_control
    built_in = apiserver.get(api, SCHEMAS.path(name="service-accounts"))
    token = account(api, namespace, "someone-else")
    for path in PATHS:
        _, schema_uid, level_uid = classified(api, token, path.format(ns=namespace))
        assert schema_uid == built_in["metadata"]["uid"], path
        assert level_uid != level["metadata"]["uid"], path


def test_the_level_is_weighed_against_the_built_in_workload_levels(api: Client) -> None:
    """The numbers docs/deploy.md compares with are this API server's own."""
    [ours] = [o for o in rendered("jobrules-system") if o["kind"] == "PriorityLevelConfiguration"]
    shares = {name: apiserver.get(api, LEVELS.path(name=name))["spec"]["limited"]
              for name in ("workload-high", "workload-low", "global-default")}
    assert ours["spec"]["limited"]["nominalConcurrencyShares"] \
        < shares["workload-high"]["nominalConcurrencyShares"] \
        < shares["workload-low"]["nominalConcurrencyShares"]
    assert ours["spec"]["limited"]["lendablePercent"] == shares["workload-high"]["lendablePercent"]
    precedence = {o["metadata"]["name"]: o["spec"]["matchingPrecedence"]
                  for o in apiserver.get(api, SCHEMAS.path())["items"]
                  if "jobrules" not in o["metadata"]["name"]}
    mine = rendered("jobrules-system")[0]["spec"]
    assert mine["matchingPrecedence"] < precedence["service-accounts"] < precedence["catch-all"]
    assert mine["matchingPrecedence"] > max(p for n, p in precedence.items()
                                            if n not in ("service-accounts", "global-default",
                                                         "catch-all"))
    # kube-controller-manager's flows are namespaces too; our queuing is the `system` level's.
    manager = apiserver.get(api, SCHEMAS.path(name="kube-controller-manager"))["spec"]
    assert manager["priorityLevelConfiguration"] == {"name": "workload-high"}
    assert mine["distinguisherMethod"] == manager["distinguisherMethod"] == {"type": "ByNamespace"}
    # docs/deploy.md: 20 of about 265 shares, some 7% of the server's seats.
    levels = apiserver.get(api, LEVELS.path())["items"]
    total = sum((o["spec"].get("limited") or {}).get("nominalConcurrencyShares", 0) for o in levels
                if "jobrules" not in o["metadata"]["name"])
    share = ours["spec"]["limited"]["nominalConcurrencyShares"]
    assert share <= shares["global-default"]["nominalConcurrencyShares"]
    assert 0.06 < share / (total + share) < 0.09, total
    system = apiserver.get(api, LEVELS.path(name="system"))["spec"]["limited"]
    assert ours["spec"]["limited"]["limitResponse"] == system["limitResponse"]


def waited(api: Client, level: str) -> tuple[float, float]:
    """(seconds, requests) that requests of a priority level waited in its queues for a seat,
    from `apiserver_flowcontrol_request_wait_duration_seconds`, those that ran."""
    text = server_metrics(api)
    out = []
    for part in ("sum", "count"):
        pattern = re.compile(r'^apiserver_flowcontrol_request_wait_duration_seconds_' + part
                             + r'\{([^}]*)\} (\S+)$', re.M)
        out.append(sum(float(v) for labels, v in pattern.findall(text)
                       if f'priority_level="{level}"' in labels and 'execute="true"' in labels))
    return out[0], out[1]


def test_a_flood_of_another_account_leaves_the_controllers_requests_served(
        api: Client, namespace: str, flow_control: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Another service account of the namespace lists 300 ConfigMaps of 10 KB from 32 threads
    at once, which fills its level (`workload-low`, the built-in `service-accounts` schema)
    on this server's few seats: its requests wait in the level's queues. Meanwhile the
    controller's account asks what the controller asks: every request is answered (none
    refused with 429), each under our FlowSchema and level (the answer's headers and the
    server's metrics), and waits for a seat a small part of what the flood's requests wait."""
    schema, level = flow_control
    ours = (schema["metadata"]["uid"], level["metadata"]["uid"])
    for i in range(300):
        apiserver.create(api, CONFIG_MAPS, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"load-{i:03d}", "namespace": namespace},
            "data": {"blob": "x" * 10_000}})
    # Both may read the namespace (a Role of our own: the built-in `view` is aggregated by
    # kube-controller-manager, which this plane does not run).
    apiserver.create(api, ROLES, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "reader", "namespace": namespace},
        "rules": [{"apiGroups": ["", "batch", "coordination.k8s.io"],
                   "resources": ["configmaps", "pods", "jobs", "leases"],
                   "verbs": ["get", "list"]}]})
    tokens = {}
    for who in ("flooder", manifests.CONTROLLER):
        tokens[who] = account(api, namespace, who)
        apiserver.create(api, ROLE_BINDINGS, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{who}-reads", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": namespace}]})
    flood_path = CONFIG_MAPS.path(namespace)
    apiserver.wait_for("the flooder allowed to list", lambda: classified(
        api, tokens["flooder"], flood_path)[0] == 200, 120)
    theirs0, ours0 = waited(api, "workload-low"), waited(api, level["metadata"]["name"])
    dispatched0 = dispatched(api, schema["metadata"]["name"])
    stop = threading.Event()
    flood_answers: list[int] = []

    def flood() -> None:
        while not stop.is_set():
            flood_answers.append(classified(api, tokens["flooder"], flood_path)[0])

    answers: list[tuple[int, str, str, float]] = []
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        floods = [pool.submit(flood) for _ in range(32)]
        try:
            apiserver.wait_for("the flood under way", lambda: len(flood_answers) >= 32, 120)
            for n in range(30):
                path = PATHS[n % len(PATHS)].format(ns=namespace)
                began = time.monotonic()
                status, schema_uid, level_uid = classified(api, tokens[manifests.CONTROLLER], path)
                answers.append((status, schema_uid, level_uid, time.monotonic() - began))
        finally:
            stop.set()
            for f in floods:
                f.result()
    theirs, mine = waited(api, "workload-low"), waited(api, level["metadata"]["name"])
    assert all(status in (200, 403) for status, *_ in answers), answers
    assert all((a[1], a[2]) == ours for a in answers), answers
    assert dispatched(api, schema["metadata"]["name"]) >= dispatched0 + len(answers)
    their_wait = (theirs[0] - theirs0[0]) / max(1.0, theirs[1] - theirs0[1])
    my_wait = (mine[0] - ours0[0]) / max(1.0, mine[1] - ours0[1])
    assert set(flood_answers) <= {200, 429}, set(flood_answers)
    assert their_wait > 0.05, f"the flood's requests waited {their_wait:.3f} s each: not busy"
    assert my_wait < their_wait / 5, (my_wait, their_wait)
