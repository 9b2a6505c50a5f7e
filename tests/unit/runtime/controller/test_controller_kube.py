"""runtime.controller.kube without an API server: how requests are named, how answers become
errors, how a watch stream is cut into events; and, against a tiny HTTP server on loopback,
the answers a real API server does not give on demand (429, 5xx) and broken connections, each
request through both ways of sending (libcurl, and the urllib3 pool for settings libcurl is not
given), and watches (always through the urllib3 pool).
Everything an API server does answer is tested against a real one (tests/integration)."""
from __future__ import annotations

import contextlib
import http.server
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client as k8s

from runtime.controller import kube


@pytest.fixture(autouse=True, params=["curl", "urllib3"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test once through libcurl and once through the urllib3 pool (the way settings
    libcurl is not given send)."""
    if request.param == "urllib3":
        monkeypatch.setattr(kube._Curl, "fitting", classmethod(lambda cls, *_: None))
    return str(request.param)


@pytest.mark.parametrize("method, path, query, verb, resource", [
    ("GET", "/api/v1/namespaces/ns/pods/p", (), "get", "pods"),
    ("GET", "/api/v1/namespaces/ns/pods", (), "list", "pods"),
    ("GET", "/api/v1/pods", (), "list", "pods"),
    ("GET", "/api/v1/pods", (("watch", "true"),), "watch", "pods"),
    ("GET", "/api/v1/namespaces", (), "list", "namespaces"),
    ("GET", "/api/v1/namespaces/ns", (), "get", "namespaces"),
    ("DELETE", "/api/v1/namespaces/ns", (), "delete", "namespaces"),
    ("PATCH", "/api/v1/namespaces/ns/pods/p/status", (), "patch", "pods/status"),
    ("POST", "/api/v1/namespaces/ns/pods/p/eviction", (), "create", "pods/eviction"),
    ("POST", "/apis/batch/v1/namespaces/ns/jobs", (), "create", "jobs.batch"),
    ("PUT", "/apis/batch/v1/namespaces/ns/jobs/j", (), "update", "jobs.batch"),
    ("PATCH", "/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs/j/status", (), "patch",
     "jobs.batch.volcano.sh/status"),
    ("DELETE", "/apis/batch/v1/namespaces/ns/jobs", (), "deletecollection", "jobs.batch"),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.y", (), "get",
     "customresourcedefinitions.apiextensions.k8s.io"),
    ("get", "/version", (), "get", "/version"),
    ("GET", "/apis/batch/v1", (), "get", "/apis/batch/v1"),
    ("GET", "/readyz", (), "get", "/readyz"),
])
def test_requests_are_named_as_the_api_server_names_them(
        method: str, path: str, query: kube.Query, verb: str, resource: str) -> None:
    assert kube.describe(method, path, query) == (verb, resource)


@pytest.mark.parametrize("api_version, args, path", [
    ("v1", (), "/api/v1/pods"),
    ("v1", ("ns",), "/api/v1/namespaces/ns/pods"),
    ("v1", ("ns", "p", "status"), "/api/v1/namespaces/ns/pods/p/status"),
    ("batch.volcano.sh/v1alpha1", ("ns", "j"), "/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs/j"),
    ("batch/v1", (None, None), "/apis/batch/v1/jobs"),
])
def test_resource_paths(api_version: str, args: tuple[str | None, ...], path: str) -> None:
    plural = "pods" if api_version == "v1" else "jobs"
    assert kube.Resource(api_version, plural).path(*args) == path


@pytest.mark.parametrize("status, cls", [
    (400, kube.ApiError), (401, kube.Denied), (403, kube.Denied), (404, kube.NotFound),
    (405, kube.ApiError), (409, kube.Conflict), (410, kube.Gone), (415, kube.ApiError),
    (422, kube.Invalid), (429, kube.TooManyRequests), (500, kube.ServerError),
    (503, kube.ServerError), (504, kube.ServerError),
])
def test_each_status_has_its_error_class(status: int, cls: type[kube.ApiError]) -> None:
    error = kube.api_error(status, None, method="GET", path="/x")
    assert type(error) is cls and error.status == status


def test_an_error_carries_the_status_body() -> None:
    body = {"kind": "Status", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": "Operation cannot be fulfilled on jobs.batch \"j\": the object has been modified"}
    error = kube.api_error(409, body, method="PATCH", path="/apis/batch/v1/namespaces/n/jobs/j")
    assert (error.reason, error.message, error.body) == ("Conflict", body["message"], body)
    assert str(error) == f"PATCH /apis/batch/v1/namespaces/n/jobs/j: 409 Conflict: {body['message']}"


def test_an_error_without_a_status_body_says_what_came() -> None:
    error = kube.api_error(502, None, text="<html>Bad Gateway</html>\n")
    assert (error.reason, error.message, error.body) == ("Bad Gateway", "<html>Bad Gateway</html>", None)
    assert kube.api_error(599, None).reason == "HTTP 599"


@pytest.mark.parametrize("header, details, seconds", [
    ("3", None, 3.0), ("0", None, 0.0), ("1.5", None, 1.5),
    (None, {"retryAfterSeconds": 7}, 7.0), ("2", {"retryAfterSeconds": 7}, 2.0),
    ("Wed, 21 Oct 2015 07:28:00 GMT", None, None), ("-1", None, None), ("nan", None, None),
    (None, {"retryAfterSeconds": 0}, None), (None, {"retryAfterSeconds": "5"}, None),
    (None, None, None),
])
def test_retry_after_from_the_header_else_the_status_details(
        header: str | None, details: dict[str, object] | None, seconds: float | None) -> None:
    body = {"kind": "Status", "details": details} if details is not None else None
    assert kube.api_error(429, body, retry_header=header).retry_after == seconds


@pytest.mark.parametrize("chunks, lines", [
    ([b'{"a":1}\n{"b":2}\n'], [b'{"a":1}', b'{"b":2}']),
    ([b'{"a"', b':1}\n{"b', b'":2}\n'], [b'{"a":1}', b'{"b":2}']),
    ([b'{"a":1}', b'\n'], [b'{"a":1}']),
    ([b'\n\n{"a":1}\n\n'], [b'{"a":1}']),
    ([b'{"a":1}'], [b'{"a":1}']),          # a last line without its newline
    ([b'', b'{"a"', b'', b':1}\n'], [b'{"a":1}']),
    ([], []),
])
def test_a_stream_is_cut_into_lines(chunks: list[bytes], lines: list[bytes]) -> None:
    assert list(kube._lines(chunks)) == lines


@given(st.lists(st.binary(min_size=1).map(lambda b: b.replace(b"\n", b"x")), max_size=8),
       st.lists(st.integers(0, 400), max_size=10))
def test_lines_survive_any_cut(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in zip(points, points[1:])]
    assert list(kube._lines(chunks)) == [line for line in lines if line.strip()]


# ---------------------------------------------------------------------------------------------
# A tiny HTTP server


Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


class Server:
    """HTTP/1.1 on loopback; `handle` answers each request; `requests` records them."""

    def __init__(self, handle: Handler) -> None:
        owner = self
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.peers: list[int] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                owner.requests.append((self.command, self.path, dict(self.headers), body))
                owner.peers.append(self.client_address[1])
                handle(self)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = do_any

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def answer(status: int, body: bytes = b"", content_type: str = "application/json",
           **headers: str) -> Handler:
    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        for name, text in headers.items():
            request.send_header(name.replace("_", "-"), text)
        request.end_headers()
        request.wfile.write(body)
    return handle


@contextlib.contextmanager
def serving(handle: Handler) -> Iterator[tuple[Server, kube.Client, list[tuple[str, str, int]]]]:
    server = Server(handle)
    calls: list[tuple[str, str, int]] = []
    configuration = k8s.Configuration()
    configuration.host = server.url
    client = kube.Client(configuration, timeout=5,
                         on_response=lambda verb, resource, code, _: calls.append((verb, resource, code)))
    try:
        yield server, client, calls
    finally:
        client.close()
        server.close()


def status(code: int, reason: str, message: str, **details: object) -> bytes:
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                         "reason": reason, "message": message, "details": details})


def test_429_is_too_many_requests_with_retry_after() -> None:
    body = status(429, "TooManyRequests", "too many requests, please try again later",
                  retryAfterSeconds=1)
    with serving(answer(429, body, Retry_After="4")) as (server, client, calls):
        with pytest.raises(kube.TooManyRequests) as raised:
            client.get("/api/v1/namespaces/n/pods/p")
    error = raised.value
    assert (error.status, error.reason, error.retry_after) == (429, "TooManyRequests", 4.0)
    assert error.body == orjson.loads(body)
    assert calls == [("get", "pods", 429)]
    assert len(server.requests) == 1   # no hidden retry


@pytest.mark.parametrize("code, headers, retry_after", [
    (500, {}, None), (503, {"Retry_After": "2"}, 2.0), (504, {}, None),
])
def test_5xx_is_a_server_error(code: int, headers: dict[str, str], retry_after: float | None) -> None:
    body = status(code, "InternalError", "etcdserver: request timed out")
    with serving(answer(code, body, **headers)) as (server, client, calls):
        with pytest.raises(kube.ServerError) as raised:
            client.merge_patch("/apis/batch/v1/namespaces/n/jobs/j", {"metadata": {}})
    assert (raised.value.status, raised.value.retry_after) == (code, retry_after)
    assert raised.value.message == "etcdserver: request timed out"
    assert calls == [("patch", "jobs.batch", code)] and len(server.requests) == 1


def test_a_5xx_from_a_proxy_without_a_status_body() -> None:
    with serving(answer(502, b"upstream connect error", "text/plain")) as (_, client, _calls):
        with pytest.raises(kube.ServerError, match="502 Bad Gateway: upstream connect error"):
            client.get("/version")


def test_every_request_says_what_it_sends_and_accepts() -> None:
    with serving(answer(200, b'{"kind":"Pod"}')) as (server, client, _):
        client.create("/api/v1/namespaces/n/pods", {"metadata": {"name": "p"}})
        client.merge_patch("/api/v1/namespaces/n/pods/p", {"a": 1}, resource_version="7")
        client.json_patch("/api/v1/namespaces/n/pods/p", [{"op": "remove", "path": "/a"}])
        client.apply("/api/v1/namespaces/n/pods/p", {"kind": "Pod"}, field_manager="me", force=True)
        client.delete("/api/v1/namespaces/n/pods/p", uid="u1", propagation_policy="Background")
    sent = [(method, path, headers["Content-Type"], headers["Accept"], orjson.loads(body))
            for method, path, headers, body in server.requests]
    named = "?fieldManager=jobrules-controller"
    assert sent == [
        ("POST", "/api/v1/namespaces/n/pods" + named, "application/json", "application/json",
         {"metadata": {"name": "p"}}),
        ("PATCH", "/api/v1/namespaces/n/pods/p" + named, "application/merge-patch+json",
         "application/json", {"a": 1, "metadata": {"resourceVersion": "7"}}),
        ("PATCH", "/api/v1/namespaces/n/pods/p" + named, "application/json-patch+json",
         "application/json", [{"op": "remove", "path": "/a"}]),
        ("PATCH", "/api/v1/namespaces/n/pods/p?fieldManager=me&force=true",
         "application/apply-patch+yaml", "application/json", {"kind": "Pod"}),
        ("DELETE", "/api/v1/namespaces/n/pods/p", "application/json", "application/json",
         {"preconditions": {"uid": "u1"}, "propagationPolicy": "Background"}),
    ]


def test_every_request_names_the_controller_and_every_write_its_field_manager() -> None:
    """The User-Agent is `jobrules-controller/VERSION` (the version `rulec --version` prints),
    for the official client's calls too (the Lease of the leader election); every POST, PUT
    and PATCH names `jobrules-controller` as its fieldManager unless it names its own."""
    from rulec import about

    with serving(answer(200, b'{"kind":"Pod"}')) as (server, client, _):
        client.get("/api/v1/namespaces/n/pods/p")
        client.create("/api/v1/namespaces/n/pods/p/eviction", {"kind": "Eviction"})
        client.request("PUT", "/api/v1/namespaces/n/pods/p", {"kind": "Pod"})
        client.merge_patch("/api/v1/namespaces/n/pods/p/status", {"a": 1})
        client.apply("/api/v1/namespaces/n/pods/p", {"kind": "Pod"})
        client.request("PATCH", "/api/v1/namespaces/n/pods/p", {"a": 1},
                       query=[("fieldManager", "other")], content_type=kube.MERGE_PATCH)
        client.delete("/api/v1/namespaces/n/pods/p")
        k8s.CoreV1Api(client.api).read_namespace("n")   # what the Lease lock calls through
    agents = {headers["User-Agent"] for _, _, headers, _ in server.requests}
    assert agents == {f"jobrules-controller/{about.version()}"} and client.name == "jobrules-controller"
    managers = [(method, path.partition("?")[2]) for method, path, _, _ in server.requests]
    assert managers == [
        ("GET", ""), ("POST", "fieldManager=jobrules-controller"),
        ("PUT", "fieldManager=jobrules-controller"), ("PATCH", "fieldManager=jobrules-controller"),
        ("PATCH", "fieldManager=jobrules-controller"), ("PATCH", "fieldManager=other"),
        ("DELETE", ""), ("GET", "")]


def test_a_client_can_go_by_another_name() -> None:
    with serving(answer(200, b"{}")) as (server, _, _calls):
        configuration = k8s.Configuration()
        configuration.host = server.url
        with kube.Client(configuration, name="jobrules-tests") as client:
            client.merge_patch("/api/v1/namespaces/n/pods/p", {"a": 1})
    [(_, path, headers, _)] = server.requests
    assert path.endswith("?fieldManager=jobrules-tests")
    assert headers["User-Agent"].startswith("jobrules-tests/")


def test_a_json_patch_must_be_a_list() -> None:
    with serving(answer(200, b"{}")) as (server, client, _):
        with pytest.raises(TypeError, match="list of operations"):
            client.request("PATCH", "/api/v1/namespaces/n/pods/p", {"op": "add"},
                           content_type=kube.JSON_PATCH)
    assert server.requests == []


def test_answers_other_than_json_come_back_as_bytes() -> None:
    with serving(answer(200, b"ok", "text/plain")) as (_, client, calls):
        assert client.request("GET", "/readyz") == b"ok"
    assert calls == [("get", "/readyz", 200)]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_refused_is_a_transport_error_reported_with_code_0() -> None:
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{_closed_port()}"
    calls: list[int] = []
    with kube.Client(configuration, on_response=lambda *a: calls.append(a[2])) as client:
        with pytest.raises(kube.TransportError, match="cannot connect.*Connection refused") as raised:
            client.get("/api/v1/pods")
    assert not isinstance(raised.value, kube.Timeout) and calls == [0]


def _reset(request: http.server.BaseHTTPRequestHandler) -> None:
    """Close with RST: SO_LINGER on, zero seconds."""
    request.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    request.connection.close()
    request.close_connection = True


def test_a_reset_connection_is_a_transport_error_and_not_retried() -> None:
    with serving(_reset) as (server, client, calls):
        with pytest.raises(kube.TransportError) as raised:
            client.get("/api/v1/pods")
    assert not isinstance(raised.value, kube.Timeout)
    assert len(server.requests) == 1 and calls == [("list", "pods", 0)]


def test_a_server_that_never_answers_is_a_timeout() -> None:
    release = threading.Event()
    with serving(lambda _: release.wait(30) and None) as (server, client, calls):
        with pytest.raises(kube.Timeout, match="timed out"):
            client.request("GET", "/api/v1/pods", timeout=0.2)
        release.set()
    assert len(server.requests) == 1 and calls == [("list", "pods", 0)]


def _keepalive_timer(local_port: int) -> str | None:
    """The timer column of our socket in /proc/net/tcp: "02" is the keepalive timer."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == local_port and fields[3] == "01":  # ESTABLISHED
            return fields[5].split(":")[0]
    return None


def test_pooled_connections_have_tcp_keepalive() -> None:
    with serving(answer(200, b"{}")) as (server, client, _):
        client.get("/api/v1/pods")   # the connection stays open in the pool, idle
        assert _keepalive_timer(server.peers[0]) == "02"


def test_the_bearer_token_and_the_query_are_sent_as_the_official_client_sends_them() -> None:
    """Requests skip the official client's REST layer: its auth headers (a token the kubelet
    rotates is read again through its hook) and its query encoding must still be there."""
    tokens = iter(["first", "second"])
    with serving(answer(200, b"{}")) as (server, client, calls):
        client.configuration.api_key = {"BearerToken": "unused"}
        client.configuration.api_key_prefix = {"BearerToken": "Bearer"}
        client.configuration.refresh_api_key_hook = (
            lambda config: config.api_key.update(BearerToken=next(tokens)))
        client.get("/api/v1/pods", query=[("labelSelector", "a in (x,y),!b"), ("limit", "5")])
        client.merge_patch("/api/v1/namespaces/n/pods/p", {"metadata": {"labels": {"c": "d"}}})
    (_, get_path, get_headers, _), (_, patch_path, patch_headers, body) = server.requests
    assert {k.lower(): v for k, v in get_headers.items()}["authorization"] == "Bearer first"
    assert {k.lower(): v for k, v in patch_headers.items()}["authorization"] == "Bearer second"
    assert urllib.parse.parse_qsl(urllib.parse.urlsplit(get_path).query) == [
        ("labelSelector", "a in (x,y),!b"), ("limit", "5")]
    assert patch_path == "/api/v1/namespaces/n/pods/p?fieldManager=jobrules-controller"
    assert orjson.loads(body) == {"metadata": {"labels": {"c": "d"}}}


def test_a_tls_failure_is_a_transport_error_reported_with_code_0() -> None:
    """An https server that speaks plain HTTP: the handshake fails, no answer came."""
    with serving(answer(200, b"{}")) as (server, client, calls):
        configuration = k8s.Configuration()
        configuration.host = server.url.replace("http://", "https://")
        configuration.verify_ssl = False
        got: list[int] = []
        with kube.Client(configuration, timeout=5, on_response=lambda *a: got.append(a[2])) as tls:
            with pytest.raises(kube.TransportError) as raised:
                tls.get("/api/v1/pods")
    assert not isinstance(raised.value, kube.Timeout) and got == [0]


@pytest.mark.parametrize("transport", ["curl"], indirect=True)
def test_settings_libcurl_is_not_given_send_through_the_urllib3_pool(transport: str) -> None:
    def configuration(**settings: object) -> k8s.Configuration:
        made = k8s.Configuration()
        made.host = "https://127.0.0.1:1"
        for key, value in settings.items():
            setattr(made, key, value)
        return made
    sends = {kind: kube._Curl.fitting(configuration(**settings), "ua") is not None
             for kind, settings in {
                 "plain": {}, "unverified": {"verify_ssl": False},
                 "hostname unchecked": {"assert_hostname": False},
                 "proxy": {"proxy": "http://proxy:3128"},
                 "tls server name": {"tls_server_name": "kubernetes.default"},
                 "another host name": {"assert_hostname": "kubernetes"}}.items()}
    assert sends == {"plain": True, "unverified": True, "hostname unchecked": True,
                     "proxy": False, "tls server name": False, "another host name": False}


def test_a_proxy_is_the_one_the_settings_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The official client takes a proxy from the environment when its settings are made
    (then sent through its pool); one set in the environment later is not used, by either
    way of sending (libcurl would read it at each request, unless told not to)."""
    with serving(answer(200, b'{"kind":"Pod"}')) as (server, client, calls):
        for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{_closed_port()}")
        assert client.get("/api/v1/namespaces/n/pods/p") == {"kind": "Pod"}
    assert calls == [("get", "pods", 200)] and len(server.requests) == 1
    with serving(answer(200, b'{"kind":"Pod"}')) as (proxy, _, _calls):
        monkeypatch.setenv("http_proxy", proxy.url)
        configuration = k8s.Configuration()
        configuration.host = f"http://127.0.0.1:{_closed_port()}"
        with kube.Client(configuration, timeout=5) as proxied:
            assert proxied.get("/api/v1/namespaces/n/pods/p") == {"kind": "Pod"}
    [(_, path, _, _)] = proxy.requests
    assert path == f"{configuration.host}/api/v1/namespaces/n/pods/p"


def test_a_request_after_a_write_sends_no_body_of_the_write() -> None:
    """A handle is reused request after request: a GET or a DELETE without a body after a
    PATCH is sent as itself, with nothing of the PATCH."""
    with serving(answer(200, b"{}")) as (server, client, _):
        client.merge_patch("/api/v1/namespaces/n/pods/p", {"a": 1})
        client.get("/api/v1/namespaces/n/pods/p")
        client.delete("/api/v1/namespaces/n/pods/p")
        client.create("/api/v1/namespaces/n/pods", {"b": 2})
    sent = [(method, path.partition("?")[0], body) for method, path, _, body in server.requests]
    assert sent == [("PATCH", "/api/v1/namespaces/n/pods/p", b'{"a":1}'),
                    ("GET", "/api/v1/namespaces/n/pods/p", b""),
                    ("DELETE", "/api/v1/namespaces/n/pods/p", b""),
                    ("POST", "/api/v1/namespaces/n/pods", b'{"b":2}')]


def test_threads_send_at_once_each_with_its_own_connections() -> None:
    """The workers, the Event sender and the informers' lists share one client."""
    with serving(answer(200, b'{"kind":"Pod"}')) as (server, client, calls):
        def get(i: int) -> object:
            return client.get(f"/api/v1/namespaces/n/pods/p{i}")
        threads = [threading.Thread(target=lambda i=i: results.append(get(i))) for i in range(8)]
        results: list[object] = []
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert results == [{"kind": "Pod"}] * 8 and len(server.requests) == 8 and len(calls) == 8


def streaming(*parts: bytes | float, release: threading.Event | None = None) -> Handler:
    """A watch's answer: 200, chunked; each bytes part one chunk, each number a pause; then the
    end of the stream (or, with `release`, silence until it is set)."""
    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        for part in parts:
            if isinstance(part, float):
                threading.Event().wait(part)
                continue
            request.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            request.wfile.flush()
        if release is not None:
            release.wait(30)
        request.wfile.write(b"0\r\n\r\n")
    return handle


def _event(kind: str, name: str) -> bytes:
    return orjson.dumps({"type": kind, "object": {"metadata": {"name": name}}}) + b"\n"


@pytest.mark.parametrize("transport", ["urllib3"], indirect=True)
def test_a_watch_yields_each_event_as_it_comes_until_the_server_ends_it(transport: str) -> None:
    first, second, third = _event("ADDED", "a"), _event("MODIFIED", "a"), _event("DELETED", "a")
    came: list[tuple[str, float]] = []
    handler = streaming(first + second[:7], 0.3, second[7:], 0.3, third)
    with serving(handler) as (server, client, calls):
        began = time.monotonic()
        for event in client.watch("/api/v1/namespaces/n/pods", [("resourceVersion", "5")],
                                  read_timeout=5):
            came.append((event["type"], time.monotonic() - began))
    assert [kind for kind, _ in came] == ["ADDED", "MODIFIED", "DELETED"]
    assert came[0][1] < 0.25 and came[1][1] >= 0.25   # the first before the rest was sent
    [(_, path, _, _)] = server.requests
    assert urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query) == [
        ("resourceVersion", "5"), ("watch", "true")]
    assert calls == [("watch", "pods", 200)]


@pytest.mark.parametrize("transport", ["urllib3"], indirect=True)
def test_a_watch_refused_raises_its_error_with_the_status(transport: str) -> None:
    body = status(403, "Forbidden", 'pods is forbidden: User "x" cannot watch resource "pods"')
    with serving(answer(403, body)) as (_, client, calls):
        with pytest.raises(kube.Denied) as raised:
            next(client.watch("/api/v1/pods", read_timeout=5))
    assert raised.value.body == orjson.loads(body) and calls == [("watch", "pods", 403)]


@pytest.mark.parametrize("transport", ["urllib3"], indirect=True)
def test_an_error_event_in_a_watch_raises_gone_for_410(transport: str) -> None:
    expired = orjson.dumps({"type": "ERROR", "object": {
        "kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}) + b"\n"
    with serving(streaming(_event("ADDED", "a"), expired)) as (_, client, _calls):
        events = client.watch("/api/v1/pods", read_timeout=5)
        assert next(events)["type"] == "ADDED"
        with pytest.raises(kube.Gone, match="too old"):
            next(events)


@pytest.mark.parametrize("transport", ["urllib3"], indirect=True)
def test_a_watch_gone_silent_ends_with_a_timeout_after_the_read_timeout(transport: str) -> None:
    release = threading.Event()
    with serving(streaming(_event("ADDED", "a"), release=release)) as (_, client, _calls):
        events = client.watch("/api/v1/pods", read_timeout=0.5)
        assert next(events)["type"] == "ADDED"
        silent = time.monotonic()
        with pytest.raises(kube.Timeout, match="timed out"):
            next(events)
        waited = time.monotonic() - silent
        release.set()
    assert 0.4 < waited < 3.0


@pytest.mark.parametrize("transport", ["urllib3"], indirect=True)
def test_a_watch_whose_bytes_keep_coming_does_not_time_out(transport: str) -> None:
    """The read timeout is for silence, not for the whole watch: five events 0.3 s apart, 1.2 s
    in all, under a read timeout of 0.5 s."""
    parts: list[bytes | float] = [_event("ADDED", "a")]
    for name in "bcde":
        parts += [0.3, _event("ADDED", name)]
    with serving(streaming(*parts)) as (_, client, _calls):
        names = [e["object"]["metadata"]["name"]
                 for e in client.watch("/api/v1/pods", read_timeout=0.5)]
    assert names == list("abcde")


@pytest.mark.parametrize("transport", ["urllib3"], indirect=True)
def test_a_watch_that_cannot_connect_is_a_transport_error_reported_with_code_0(transport: str) -> None:
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{_closed_port()}"
    calls: list[int] = []
    with kube.Client(configuration, on_response=lambda *a: calls.append(a[2])) as client:
        with pytest.raises(kube.TransportError, match="cannot connect") as raised:
            next(client.watch("/api/v1/pods", read_timeout=5))
    assert not isinstance(raised.value, kube.Timeout) and calls == [0]
