"""runtime.controller.kube against the real API server: CRUD of a built-in and of a custom
resource, the guarded writes the controller relies on (resourceVersion and uid preconditions),
each error class as the API server really answers it, paged lists, watches with bookmarks, a
watch from an expired resourceVersion, and a watch whose connection goes silent."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import select
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import apiserver
import pytest
from conftest import Session
from kubernetes import client as k8s

from devkit import cluster
from runtime.controller.kube import (Client, Conflict, Denied, Gone, Invalid, NotFound,
                                     Resource, ServerError, Timeout)

pytestmark = pytest.mark.integration

CONFIG_MAPS = Resource("v1", "configmaps")
EVENTS = Resource("v1", "events")
Calls = list[tuple[str, str, int]]


@pytest.fixture
def calls() -> Calls:
    return []


@pytest.fixture
def client(api: Client, calls: Calls) -> Iterator[Client]:
    """A client like the session's that records what its response hook is told."""
    with Client(api.configuration,
                on_response=lambda verb, resource, code, _: calls.append((verb, resource, code))) as made:
        yield made


def config_map(namespace: str, name: str, **labels: str) -> apiserver.Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"a": "1"}}


def volcano_job(namespace: str, name: str) -> apiserver.Obj:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{
                "name": "worker", "replicas": 1, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}]}}}]}}


def test_config_map_crud(client: Client, namespace: str, calls: Calls) -> None:
    path = CONFIG_MAPS.path(namespace, "settings")
    created = client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "settings"))
    assert client.get(path)["metadata"]["uid"] == created["metadata"]["uid"]
    assert client.merge_patch(path, {"data": {"b": "2"}})["data"] == {"a": "1", "b": "2"}
    patched = client.json_patch(path, [{"op": "test", "path": "/data/a", "value": "1"},
                                       {"op": "remove", "path": "/data/a"}])
    assert patched["data"] == {"b": "2"}
    applied = client.apply(path, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "settings", "namespace": namespace},
                                  "data": {"c": "3"}}, field_manager="jobrules-test")
    assert applied["data"] == {"b": "2", "c": "3"}
    assert [m["metadata"]["name"] for m in client.list(CONFIG_MAPS.path(namespace))["items"]
            if m["metadata"]["name"] == "settings"] == ["settings"]
    client.delete(path)
    with pytest.raises(NotFound) as gone:
        client.get(path)
    assert gone.value.reason == "NotFound" and gone.value.body["details"]["name"] == "settings"
    assert calls == [("create", "configmaps", 201), ("get", "configmaps", 200),
                     ("patch", "configmaps", 200), ("patch", "configmaps", 200),
                     ("patch", "configmaps", 200), ("list", "configmaps", 200),
                     ("delete", "configmaps", 200), ("get", "configmaps", 404)]


def test_volcano_job_crud_and_its_status_subresource(client: Client, namespace: str,
                                                      calls: Calls) -> None:
    jobs = apiserver.VOLCANO_JOBS
    path = jobs.path(namespace, "train")
    created = client.create(jobs.path(namespace), volcano_job(namespace, "train"))
    assert created["spec"]["tasks"][0]["name"] == "worker"
    labelled = client.merge_patch(path, {"metadata": {"labels": {"team": "ml"}}},
                                  resource_version=created["metadata"]["resourceVersion"])
    assert labelled["metadata"]["labels"] == {"team": "ml"}
    status = {"status": {"state": {"phase": "Failed", "reason": "PodFailed",
                                   "message": "task worker pod train-worker-0: OOMKilled (137)"}}}
    client.merge_patch(f"{path}/status", status)
    assert client.get(path)["status"]["state"] == status["status"]["state"]
    # The main resource ignores status, the status subresource everything else.
    client.merge_patch(path, {"status": {"state": {"phase": "Completed"}}})
    assert client.get(path)["status"]["state"]["phase"] == "Failed"
    client.delete(path, uid=created["metadata"]["uid"], propagation_policy="Background")
    with pytest.raises(NotFound):
        client.get(path)
    resource = "jobs.batch.volcano.sh"
    assert calls == [("create", resource, 201), ("patch", resource, 200),
                     ("patch", f"{resource}/status", 200), ("get", resource, 200),
                     ("patch", resource, 200), ("get", resource, 200),
                     ("delete", resource, 200), ("get", resource, 404)]


def test_creating_an_existing_object_is_a_conflict(client: Client, namespace: str) -> None:
    client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "once"))
    with pytest.raises(Conflict) as twice:
        client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "once"))
    assert (twice.value.status, twice.value.reason) == (409, "AlreadyExists")


@pytest.mark.parametrize("resource, manifest", [
    (CONFIG_MAPS, config_map), (apiserver.VOLCANO_JOBS, volcano_job),
], ids=["configmap", "volcano-job"])
def test_a_merge_patch_guarded_by_a_stale_resource_version_conflicts(
        client: Client, namespace: str, resource: Resource, manifest: Any) -> None:
    created = client.create(resource.path(namespace), manifest(namespace, "guarded"))
    path = resource.path(namespace, "guarded")
    read = created["metadata"]["resourceVersion"]
    first = client.merge_patch(path, {"metadata": {"annotations": {"jobrules.dev/state": "1"}}},
                               resource_version=read)
    with pytest.raises(Conflict) as stale:
        client.merge_patch(path, {"metadata": {"annotations": {"jobrules.dev/state": "2"}}},
                           resource_version=read)
    assert (stale.value.status, stale.value.reason) == (409, "Conflict")
    assert "the object has been modified" in stale.value.message
    stored = client.get(path)
    assert stored["metadata"]["annotations"]["jobrules.dev/state"] == "1"
    assert stored["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_delete_preconditions(client: Client, namespace: str, calls: Calls) -> None:
    created = client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "doomed"))
    path = CONFIG_MAPS.path(namespace, "doomed")
    meta = created["metadata"]
    with pytest.raises(Conflict, match="the UID in the precondition"):
        client.delete(path, uid="00000000-0000-0000-0000-000000000000")
    client.merge_patch(path, {"data": {"b": "2"}})
    with pytest.raises(Conflict, match="(?i)resourceVersion in the precondition|ResourceVersion in precondition"):
        client.delete(path, uid=meta["uid"], resource_version=meta["resourceVersion"])
    answer = client.delete(path, uid=meta["uid"])   # gone at once: a Status says which
    assert (answer["kind"], answer["status"], answer["details"]["uid"]) == ("Status", "Success",
                                                                          meta["uid"])
    with pytest.raises(NotFound):
        client.delete(path, uid=meta["uid"])
    assert [code for _, _, code in calls] == [201, 409, 200, 409, 200, 404]


def test_every_write_the_controller_sends_names_it(client: Client, namespace: str) -> None:
    """The fieldManager the client adds (`jobrules-controller`) is accepted on each kind of
    write the controller sends (create, merge patch, an eviction, an Event) and is the
    manager the API server records, beside the User-Agent's."""
    # A ConfigMap for the guarded patch: nobody else writes it (the scheduler writes a new
    # pod's status at once, which a guarded patch of the pod would race).
    made = client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "named"))
    patched = client.merge_patch(CONFIG_MAPS.path(namespace, "named"),
                                 {"metadata": {"annotations": {"a": "1"}}},
                                 resource_version=made["metadata"]["resourceVersion"])
    assert {m["manager"] for m in patched["metadata"]["managedFields"]} == {"jobrules-controller"}
    pods = Resource("v1", "pods")
    created = client.create(pods.path(namespace), apiserver.pod_manifest(namespace, "evicted"))
    assert "jobrules-controller" in {m["manager"] for m in created["metadata"]["managedFields"]}
    path = pods.path(namespace, "evicted")
    event = client.create(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "evicted.1", "namespace": namespace},
        "eventTime": "2026-01-01T12:00:00.000000Z", "reportingController": "jobrules.dev/controller",
        "reportingInstance": "test", "action": "Verdict", "reason": "Test", "type": "Normal",
        "regarding": {"kind": "Pod", "namespace": namespace, "name": "evicted"}})
    assert [m["manager"] for m in event["metadata"]["managedFields"]] == ["jobrules-controller"]
    client.create(f"{path}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "evicted", "namespace": namespace},
        "deleteOptions": {"preconditions": {"uid": created["metadata"]["uid"]}}})


def test_invalid_objects_are_422_with_their_causes(client: Client, namespace: str) -> None:
    with pytest.raises(Invalid) as bad_name:
        client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "Not_Valid"))
    assert [c["field"] for c in bad_name.value.body["details"]["causes"]] == ["metadata.name"]
    job = volcano_job(namespace, "typed")
    job["spec"]["minAvailable"] = "one"
    with pytest.raises(Invalid) as bad_type:
        client.create(apiserver.VOLCANO_JOBS.path(namespace), job)
    assert bad_type.value.status == 422
    assert "spec.minAvailable" in [c["field"] for c in bad_type.value.body["details"]["causes"]]
    client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "tested"))
    with pytest.raises(Invalid):   # a JSON patch whose test fails changes nothing
        client.json_patch(CONFIG_MAPS.path(namespace, "tested"),
                          [{"op": "test", "path": "/data/a", "value": "2"},
                           {"op": "remove", "path": "/data/a"}])
    assert client.get(CONFIG_MAPS.path(namespace, "tested"))["data"] == {"a": "1"}


def test_a_list_comes_in_pages(client: Client, namespace: str, calls: Calls) -> None:
    for n in range(7):
        client.create(CONFIG_MAPS.path(namespace), config_map(namespace, f"item-{n}", set="paged"))
    query = [("labelSelector", "set=paged")]
    pages = list(client.pages(CONFIG_MAPS.path(namespace), query=query, limit=3))
    assert [len(p["items"]) for p in pages] == [3, 3, 1]
    assert len({p["metadata"]["resourceVersion"] for p in pages}) == 1
    whole = client.list(CONFIG_MAPS.path(namespace), query=query, limit=3)
    assert sorted(m["metadata"]["name"] for m in whole["items"]) == [f"item-{n}" for n in range(7)]
    assert "continue" not in whole["metadata"] and whole["metadata"]["resourceVersion"]
    assert calls.count(("list", "configmaps", 200)) == 6


def test_a_watch_sees_every_change_and_bookmarks(client: Client, namespace: str) -> None:
    """The watch cache sends a BOOKMARK 2 s before a watch's deadline; the watch then ends."""
    since = client.list(CONFIG_MAPS.path(namespace))["metadata"]["resourceVersion"]
    path = CONFIG_MAPS.path(namespace, "watched")

    def change() -> None:
        time.sleep(0.3)
        client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "watched"))
        for n in range(4):
            time.sleep(0.3)
            client.merge_patch(path, {"data": {"n": str(n)}})
        client.delete(path)

    changer = threading.Thread(target=change)
    changer.start()
    began = time.monotonic()
    events = list(client.watch(CONFIG_MAPS.path(namespace), [
        ("resourceVersion", since), ("allowWatchBookmarks", "true"), ("timeoutSeconds", "5")],
        read_timeout=30))
    ended = time.monotonic() - began
    changer.join()
    changes = [(e["type"], e["object"].get("data", {}).get("n")) for e in events
               if e["type"] != "BOOKMARK"]
    assert changes == [("ADDED", None), ("MODIFIED", "0"), ("MODIFIED", "1"), ("MODIFIED", "2"),
                       ("MODIFIED", "3"), ("DELETED", "3")]
    bookmarks = [e["object"] for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks and all(int(b["metadata"]["resourceVersion"]) > int(since) for b in bookmarks)
    assert 4.5 < ended < 15   # the server ended it at timeoutSeconds


def _etcd_url(session: Session) -> str:
    """etcd's client URL, from the command line of the control plane's API server."""
    root = session.plane.root if session.plane else Path(os.environ["KUBECONFIG"]).parent
    for pid in cluster.processes_using(root, ["kube-apiserver"]):
        for arg in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0"):
            if arg.startswith("--etcd-servers="):
                return arg.split("=", 1)[1].split(",")[0]
    pytest.fail(f"no kube-apiserver of the dev kit under {root}")


def _compact_etcd(url: str) -> None:
    """Compact etcd's history up to now (what the API server does every 5 minutes)."""
    def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    revision = call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
    call("/v3/kv/compaction", {"revision": int(revision), "physical": True})


def test_a_compacted_resource_version_is_gone(client: Client, namespace: str, calls: Calls,
                                               control_plane: Session) -> None:
    """Events are served from etcd, not the watch cache (which answers old versions from its own
    history), so compaction expires their versions: a watch gets an ERROR event with code 410,
    an exact list an HTTP 410."""
    event = {"metadata": {"name": "probe", "namespace": namespace}, "reason": "Probe",
             "message": "0", "type": "Normal",
             "involvedObject": {"kind": "ConfigMap", "name": "any", "namespace": namespace}}
    client.create(EVENTS.path(namespace), event)
    since = client.list(EVENTS.path(namespace))["metadata"]["resourceVersion"]
    for n in range(2):
        client.merge_patch(EVENTS.path(namespace, "probe"), {"message": str(n + 1)})
    _compact_etcd(_etcd_url(control_plane))
    calls.clear()
    with pytest.raises(Gone) as watched:
        next(client.watch(EVENTS.path(namespace), [("resourceVersion", since)], read_timeout=30))
    assert (watched.value.status, watched.value.reason) == (410, "Expired")
    assert watched.value.body["code"] == 410
    with pytest.raises(Gone) as listed:
        client.get(EVENTS.path(namespace), query=[("resourceVersion", since),
                                                  ("resourceVersionMatch", "Exact")])
    assert listed.value.reason == "Expired"
    # The watch itself was answered 200; its first event said 410. The list was answered 410.
    assert calls == [("watch", "events", 200), ("list", "events", 410)]


def test_a_resource_version_from_the_future_is_a_504_with_retry_after(client: Client,
                                                                     namespace: str) -> None:
    """The API server waits 3 s for a version it has not seen, then answers 504 with
    details.retryAfterSeconds (a real 5xx, though not one to get on demand otherwise)."""
    with pytest.raises(ServerError) as raised:
        client.get(CONFIG_MAPS.path(namespace), query=[
            ("resourceVersion", "999999999"), ("resourceVersionMatch", "NotOlderThan")])
    error = raised.value
    assert (error.status, error.reason, error.retry_after) == (504, "Timeout", 1.0)
    assert "Too large resource version" in error.message


def test_credentials_the_api_server_refuses_are_denied(api: Client) -> None:
    anonymous = copy.copy(api.configuration)
    anonymous.cert_file = anonymous.key_file = None
    with Client(anonymous) as client, pytest.raises(Denied) as forbidden:
        client.get("/api/v1/namespaces")
    assert (forbidden.value.status, forbidden.value.reason) == (403, "Forbidden")
    anonymous.api_key = {"authorization": "Bearer not-a-token"}
    with Client(anonymous) as client, pytest.raises(Denied) as unauthorized:
        client.get("/api/v1/namespaces")
    assert unauthorized.value.status == 401


def test_clients_from_a_kubeconfig_and_from_an_api_client(api: Client,
                                                          control_plane: Session) -> None:
    version = api.get("/version")["gitVersion"]
    kubeconfig = (control_plane.plane.kubeconfig if control_plane.plane
                  else Path(os.environ["KUBECONFIG"]))
    with Client.from_kubeconfig(kubeconfig) as client:
        assert client.get("/version")["gitVersion"] == version
    with k8s.ApiClient(api.configuration) as official, Client.from_api_client(official) as client:
        assert client.get("/version")["gitVersion"] == version


class Proxy:
    """A loopback TCP proxy to the API server that can stop forwarding without closing
    anything: the connection stays open and silent, as when a peer vanishes."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.forwarding = threading.Event()
        self.forwarding.set()
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                inbound, _ = self.listener.accept()
                outbound = socket.create_connection(self.target)
                self.sockets += [inbound, outbound]
                for a, b in ((inbound, outbound), (outbound, inbound)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not self.closed.is_set():
                if not self.forwarding.is_set():
                    self.closed.wait(0.05)
                    continue
                if select.select([source], [], [], 0.05)[0] and self.forwarding.is_set():
                    data = source.recv(65536)
                    if not data:
                        return
                    sink.sendall(data)

    def close(self) -> None:
        self.closed.set()
        for sock in [self.listener, *self.sockets]:
            sock.close()


def test_a_watch_whose_connection_goes_silent_ends_with_a_timeout(api: Client,
                                                                  namespace: str) -> None:
    host, port = api.host.removeprefix("https://").rsplit(":", 1)
    proxy = Proxy((host, int(port)))
    through = copy.copy(api.configuration)
    through.host = f"https://127.0.0.1:{proxy.port}"   # the serving cert names 127.0.0.1
    try:
        with Client(through) as client:
            since = client.list(CONFIG_MAPS.path(namespace))["metadata"]["resourceVersion"]
            events = client.watch(CONFIG_MAPS.path(namespace), [
                ("resourceVersion", since), ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", "300")], read_timeout=2.0)
            api.create(CONFIG_MAPS.path(namespace), config_map(namespace, "before"))
            assert next(events)["object"]["metadata"]["name"] == "before"
            proxy.forwarding.clear()
            silent = time.monotonic()   # no byte comes through from here on
            time.sleep(0.2)   # past any pump that was already forwarding
            api.create(CONFIG_MAPS.path(namespace), config_map(namespace, "unseen"))
            with pytest.raises(Timeout, match="timed out"):
                next(events)
            waited = time.monotonic() - silent
    finally:
        proxy.close()
    assert 1.9 < waited < 5.0


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "paged"])
def test_an_informer_fills_its_store_then_follows(client: Client, namespace: str, calls: Calls,
                                                  stream: bool) -> None:
    """The informer's first fill, streamed (watch-list: one watch, its initial events ended by
    a bookmark) or paged, holds what the server holds, reports what its store held that is
    gone, and then follows changes from the version it was given."""
    from runtime import store as storelib
    from runtime.controller import informer

    for n in range(5):
        client.create(CONFIG_MAPS.path(namespace), config_map(namespace, f"held-{n}", set="fill"))
    changes: list[storelib.Change] = []
    store = storelib.Store(lambda o: {"metadata": o["metadata"], "data": o.get("data")})
    store.put({"metadata": {"name": "gone", "namespace": namespace, "resourceVersion": "1"}})
    made = informer.Informer(client, "cms", CONFIG_MAPS.path(namespace), store, changes.append,
                             selector="set=fill", namespace=namespace, stream_lists=stream)
    made.start()
    try:
        assert made.synced.wait(60)
        assert sorted(k[1] for k in store.keys()) == [f"held-{n}" for n in range(5)]
        assert any(c.key[1] == "gone" and c.obj is None for c in changes)
        client.create(CONFIG_MAPS.path(namespace), config_map(namespace, "later", set="fill"))
        apiserver.wait_for("the later ConfigMap in the store",
                           lambda: (namespace, "later") in store.keys(), 60)
    finally:
        made.stop()
    lists = [c for c in calls if c[0] == "list" and c[1] == "configmaps"]
    assert (lists == []) is stream and made._stream is stream
