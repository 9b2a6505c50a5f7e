"""The controller's Kubernetes transport: raw JSON with the official client's settings and
credentials, requests through libcurl, watches through the official client's urllib3 pool.

Requests and watches carry the official client's own auth headers (`update_params_for_auth`,
which re-reads a rotated token) and follow its settings (CA, client certificate, verification),
never through model classes or its REST layer: bodies are plain dicts encoded and answers
decoded with orjson. Requests are most of what a pod event costs the controller, and Python's
HTTP stack was most of a request (urllib3 over `http.client`, whose header parsing with the
`email` package alone was a sixth of it: bench/RESULTS.md), so a request goes through libcurl
(pycurl: one handle per thread, each keeping its connections alive), where parsing, TLS and
pooling cost no Python: a third of the CPU per request. Watches stay on the urllib3 pool: read
through libcurl's multi interface (over TLS, bench/RESULTS.md), an event that comes alone cost
more (more system calls per wake-up), though one of a burst cost less, and a controller's watch
events mostly come alone; reading the chunked encoding ourselves saved nothing. Settings this
module does not give libcurl (a proxy, `tls_server_name`, an `assert_hostname` naming another
host) send requests through the urllib3 pool too. What this module adds to the client:

- explicit Content-Type and Accept headers (the client would silently send a dict meant as a JSON
  patch as a strategic-merge patch, which custom resources refuse);
- one error class per kind of answer (`NotFound`, `Conflict`, `Gone`, `Invalid`,
  `TooManyRequests`, `ServerError`, `Denied`), each carrying the API server's Status and
  `retry_after`; failures without an answer are `TransportError` (`Timeout` for timeouts);
- no hidden retries: urllib3's are turned off and libcurl makes none (but for sending again, on
  a new connection, a request whose kept-alive connection turned out closed before any byte of
  an answer came, as Go's transport does), so a failure reaches the caller, whose backoff
  decides what happens next (a retried read would also stretch a watch's read timeout);
- TCP keepalive on every socket (client-go's 30 s idle, 15 s probes), so the kernel
  notices a peer that vanished;
- watches that raise `Timeout` when no byte arrived for `read_timeout` seconds, so a connection
  dropped without a FIN never hangs a watch;
- a hook called once per request with (verb, resource, status code or 0, seconds), for metrics;
- a name: the User-Agent `jobrules-controller/VERSION` and the `fieldManager` of every write, so
  that the audit log and managedFields say who wrote (the official client would say
  `OpenAPI-Generator`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote, urlencode

import orjson
import pycurl
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from runtime import about, objects

Obj = dict[str, Any]
Query = Sequence[tuple[str, str]]
ResponseHook = Callable[[str, str, int, float], None]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
# Connections the pool keeps: each watch holds one for minutes, the workers share the others.
POOL_SIZE = 32
REQUEST_TIMEOUT = 60.0
# Who the client says it is, unless told otherwise: the User-Agent's product and the
# fieldManager of every write (the API server would otherwise derive the manager from the
# User-Agent's product, which the official client fills with its generator's name).
NAME = "jobrules-controller"
_WRITES = frozenset({"POST", "PUT", "PATCH"})
_CHUNK = 1 << 16


# ---------------------------------------------------------------------------------------------
# Errors


class KubeError(Exception):
    """A request that did not succeed; the message names the request and what went wrong."""


class ConfigError(KubeError):
    """No usable connection settings (kubeconfig or in-cluster)."""


class TransportError(KubeError):
    """No answer from the API server: connection refused or reset, TLS failure, broken stream."""


class Timeout(TransportError):
    """No answer (or, on a watch, no byte) within the timeout."""


class ApiError(KubeError):
    """The API server answered with an error status.

    `body` is its Status object when it sent one (else None); `reason` is the Status reason
    (`NotFound`, `AlreadyExists`, `Conflict`, `Expired`, ...) or the HTTP reason phrase;
    `retry_after` the seconds from the `Retry-After` header, else from the Status details.
    """

    def __init__(self, status: int, reason: str, message: str, *, body: Obj | None = None,
                 retry_after: float | None = None, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}".lstrip())
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        self.retry_after = retry_after
        self.method = method
        self.path = path


class Denied(ApiError):
    """401 or 403: credentials or RBAC; retrying will not help until someone changes them."""


class NotFound(ApiError):
    """404: the object (or its kind: a CRD not installed) does not exist."""


class Conflict(ApiError):
    """409: a stale resourceVersion or uid precondition, or `AlreadyExists` on create."""


class Gone(ApiError):
    """410, or a watch ERROR event with code 410: the resourceVersion (or continue token) is
    too old; list again."""


class Invalid(ApiError):
    """422: the object failed validation; `body["details"]["causes"]` says where."""


class TooManyRequests(ApiError):
    """429: throttled; wait `retry_after` seconds."""


class ServerError(ApiError):
    """5xx: the API server (or what is behind it) failed; retry with backoff."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Denied, 403: Denied, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid,
    429: TooManyRequests,
}


def api_error(status: int, body: Obj | None, *, text: str = "", retry_header: str | None = None,
              method: str = "", path: str = "") -> ApiError:
    """The error for an answer with `status` and (when it was JSON) Status `body`."""
    body = body or None
    kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    reason = str((body or {}).get("reason") or _phrase(status))
    message = str((body or {}).get("message") or text.strip()[:500] or reason)
    return kind(status, reason, message, body=body, retry_after=_retry_after(retry_header, body),
                method=method, path=path)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _retry_after(header: str | None, body: Obj | None) -> float | None:
    """Seconds to wait: the header's delta-seconds (the only form the API server sends), else
    the Status `details.retryAfterSeconds`."""
    if header:
        try:
            seconds = float(header)
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = ((body or {}).get("details") or {}).get("retryAfterSeconds")
    return float(value) if isinstance(value, int) and value > 0 else None


def _status_body(data: bytes) -> Obj | None:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


def _transport_error(error: BaseException, method: str, url: str) -> TransportError:
    # First: urllib3's NewConnectionError is also a ConnectTimeoutError, for compatibility.
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        return TransportError(f"{method} {url}: cannot connect: {error.__cause__ or error}")
    if isinstance(error, (urllib3.exceptions.TimeoutError, TimeoutError)):
        return Timeout(f"{method} {url}: timed out ({error})")
    return TransportError(f"{method} {url}: {type(error).__name__}: {error}")


# ---------------------------------------------------------------------------------------------
# Paths


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """A REST resource: `api_version` as objects spell it (`v1`, `batch/v1`) and its plural."""

    api_version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """The collection (no name) or object path, across namespaces without a `namespace`."""
        return objects.path(self.api_version, self.plural, namespace, name, subresource)


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def describe(method: str, path: str, query: Query = ()) -> tuple[str, str]:
    """(verb, resource) of a request as the metrics label it: verbs as the API server names
    them (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`);
    the resource as `plural[.group][/subresource]` (`pods`, `jobs.batch`,
    `jobs.batch.volcano.sh/status`); other URLs (`/version`, discovery) by their path."""
    method = method.upper()
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return method.lower(), path
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = f"{rest[0]}.{group}" if group else rest[0]
    if len(rest) >= 3:
        resource += f"/{rest[2]}"
    named = len(rest) >= 2
    if method == "GET":
        watching = any(k == "watch" and v in ("true", "1") for k, v in query)
        verb = "watch" if watching else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return verb, resource


# ---------------------------------------------------------------------------------------------
# The client

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_namespace(kubeconfig: str | os.PathLike[str] | None, *,
                      in_cluster: str = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """The namespace a command means when it names none, as kubectl reads it: the current
    context's of a kubeconfig, else (None) the pod's service account's; None when neither
    says (a kubeconfig that cannot be read says nothing here: connecting reports it)."""
    if not kubeconfig:
        try:
            with open(in_cluster, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            return None
    try:
        _, current = k8s_config.list_kube_config_contexts(config_file=os.fspath(kubeconfig))
    except Exception:  # the loader raises whatever it met: files, YAML, keys
        return None
    context = current.get("context") if isinstance(current, dict) else None
    namespace = context.get("namespace") if isinstance(context, dict) else None
    return namespace if isinstance(namespace, str) and namespace else None


class Client:
    """Requests to one API server. Thread-safe (urllib3's pool); close it when done.

    Built from a `kubernetes.client.Configuration` (copied: the caller's is not changed); the
    class methods build one from a kubeconfig, the pod's service account, or the configuration
    of an existing `ApiClient`. `timeout` bounds a whole request (not a watch) unless the call
    gives its own; `on_response(verb, resource, code, seconds)` runs once per request, with
    code 0 when no answer came. `name` is the User-Agent's product (`NAME/VERSION`) and the
    fieldManager of every POST, PUT and PATCH that does not name its own.
    """

    def __init__(self, configuration: k8s.Configuration, *, on_response: ResponseHook | None = None,
                 timeout: float = REQUEST_TIMEOUT, name: str = NAME) -> None:
        config = copy.copy(configuration)
        config.retries = False
        config.socket_options = tcp_keepalive_socket_options()
        config.connection_pool_maxsize = max(config.connection_pool_maxsize or 0, POOL_SIZE)
        self.configuration = config   # the settings in use: copy them to derive a client
        self.host: str = config.host
        self._api = k8s.ApiClient(config)
        self.name = name
        self.user_agent = f"{name}/{about.version()}"
        self._api.user_agent = self.user_agent   # also what the official election's Lease calls send
        self._on_response = on_response
        self._timeout = timeout
        self._curl = _Curl.fitting(config, self.user_agent)   # None: urllib3 sends everything

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str], *, context: str | None = None,
                        on_response: ResponseHook | None = None,
                        timeout: float = REQUEST_TIMEOUT, name: str = NAME) -> Client:
        configuration = k8s.Configuration()
        try:
            k8s_config.load_kube_config(config_file=os.fspath(path), context=context,
                                        client_configuration=configuration, persist_config=False)
        except Exception as error:  # the loader raises whatever it met: files, YAML, keys
            raise ConfigError(f"cannot use the kubeconfig {os.fspath(path)}: {error}") from error
        return cls(configuration, on_response=on_response, timeout=timeout, name=name)

    @classmethod
    def in_cluster(cls, *, on_response: ResponseHook | None = None,
                   timeout: float = REQUEST_TIMEOUT, name: str = NAME) -> Client:
        """The pod's service account (its token re-read as the kubelet rotates it)."""
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException as error:
            raise ConfigError(f"no in-cluster configuration: {error}") from error
        return cls(configuration, on_response=on_response, timeout=timeout, name=name)

    @classmethod
    def connect(cls, kubeconfig: str | os.PathLike[str] | None, *,
                on_response: ResponseHook | None = None,
                timeout: float = REQUEST_TIMEOUT) -> Client:
        """From a kubeconfig, else (None) the pod's service account: the controller's settings
        name one or neither, and `rulec why` reads with the same."""
        if kubeconfig:
            return cls.from_kubeconfig(kubeconfig, on_response=on_response, timeout=timeout)
        return cls.in_cluster(on_response=on_response, timeout=timeout)

    @classmethod
    def from_api_client(cls, api: Any, *, on_response: ResponseHook | None = None,
                        timeout: float = REQUEST_TIMEOUT, name: str = NAME) -> Client:
        """A client with `api`'s server and credentials and this module's pool settings."""
        return cls(api.configuration, on_response=on_response, timeout=timeout, name=name)

    @property
    def api(self) -> k8s.ApiClient:
        """The official client underneath (for its leader election, which needs one)."""
        return self._api

    def close(self) -> None:
        if self._curl is not None:
            self._curl.close()
        self._api.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- requests

    def request(self, method: str, path: str, body: Any = None, *, query: Query = (),
                content_type: str = JSON, accept: str = JSON,
                timeout: float | None = None) -> Any:
        """One request; the answer decoded when it is JSON, else its bytes. Raises `ApiError`
        (by class) for an error status, `TransportError` when no answer came."""
        if content_type == JSON_PATCH and not isinstance(body, list):
            raise TypeError("a JSON patch body is a list of operations")
        if method.upper() in _WRITES and not any(key == "fieldManager" for key, _ in query):
            query = [*query, ("fieldManager", self.name)]
        verb, resource = describe(method, path, query)
        began = time.monotonic()
        code = 0
        try:
            answer = self._send(method, path, body, query, content_type, accept,
                                self._timeout if timeout is None else timeout)
            code = answer.status
        finally:
            self._report(verb, resource, code, began)
        if not 200 <= code <= 299:
            raise api_error(code, _status_body(answer.data),
                            text=answer.data.decode(errors="replace"),
                            retry_header=answer.retry_after, method=method, path=path)
        if answer.content_type.startswith(JSON):
            return orjson.loads(answer.data)
        return answer.data

    def get(self, path: str, *, query: Query = ()) -> Obj:
        return cast(Obj, self.request("GET", path, query=query))

    def pages(self, path: str, *, query: Query = (), limit: int = 500) -> Iterator[Obj]:
        """A LIST in pages of at most `limit` items, each page as the server sent it. Every page
        has the resourceVersion of the first; a continue token that expired meanwhile raises
        `Gone` (start again)."""
        token = ""
        while True:
            paging = [("limit", str(limit))] + ([("continue", token)] if token else [])
            page = self.get(path, query=[*query, *paging])
            yield page
            token = objects.text(objects.meta(page).get("continue")) or ""
            if not token:
                return

    def list(self, path: str, *, query: Query = (), limit: int = 500) -> Obj:
        """A LIST read page by page, returned as one List object (the last page's metadata)."""
        items: list[Obj] = []
        page: Obj = {}
        for page in self.pages(path, query=query, limit=limit):
            items.extend(page.get("items") or [])
        return {**page, "items": items}

    def create(self, path: str, body: Obj, *, query: Query = ()) -> Obj:
        """POST `body` to the collection at `path`; the stored object."""
        return cast(Obj, self.request("POST", path, body, query=query))

    def merge_patch(self, path: str, patch: Obj, *, resource_version: str | None = None,
                    query: Query = ()) -> Obj:
        """A JSON merge patch; with `resource_version`, only if the object still has it
        (`Conflict` otherwise): the guard every write of the controller uses."""
        if resource_version is not None:
            metadata = {**objects.meta(patch), "resourceVersion": resource_version}
            patch = {**patch, "metadata": metadata}
        return cast(Obj, self.request("PATCH", path, patch, query=query, content_type=MERGE_PATCH))

    def json_patch(self, path: str, operations: Iterable[Mapping[str, Any]], *,
                   query: Query = ()) -> Obj:
        """A JSON patch (RFC 6902); a failed `test` operation answers 422 (`Invalid`)."""
        return cast(Obj, self.request("PATCH", path, [dict(op) for op in operations], query=query,
                                      content_type=JSON_PATCH))

    def apply(self, path: str, body: Obj, *, field_manager: str | None = None, force: bool = False,
              query: Query = ()) -> Obj:
        """Server-side apply of `body` (the whole intent of `field_manager`, the client's name
        unless given) at the object path."""
        query = [*query, ("fieldManager", field_manager or self.name)] + (
            [("force", "true")] if force else [])
        return cast(Obj, self.request("PATCH", path, body, query=query, content_type=APPLY_PATCH))

    def delete(self, path: str, *, uid: str | None = None, resource_version: str | None = None,
               propagation_policy: str | None = None, query: Query = ()) -> Obj:
        """Delete the object at `path`; with `uid` / `resource_version`, only that incarnation
        or version of it (`Conflict` otherwise). Answers the object (still there while
        finalizers run) or a Status."""
        options: Obj = {}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version))
                         if v is not None}
        if preconditions:
            options["preconditions"] = preconditions
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        return cast(Obj, self.request("DELETE", path, options or None, query=query))

    def watch(self, path: str, query: Query = (), *, read_timeout: float) -> Generator[Obj, None, None]:
        """The events of a WATCH on the collection at `path`, decoded (`type`, `object`), from the
        first `next()` on. Pass `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds` in
        `query`. Ends when the server ends the watch; raises `Timeout` when no byte came for
        `read_timeout` seconds (the server sends BOOKMARKs about once a minute when asked),
        `Gone` for an ERROR event with code 410, the matching `ApiError` for other ERRORs."""
        query = [*query, ("watch", "true")]
        url = self.host + path
        began = time.monotonic()
        code = 0
        try:
            response = self._open("GET", path, None, query, JSON, JSON, (read_timeout, read_timeout))
            code = response.status
            if code != 200:
                data = response.data
        except _TRANSPORT_ERRORS as error:
            raise _transport_error(error, "GET", url) from error
        finally:
            self._report("watch", describe("GET", path)[1], code, began)
        if code != 200:
            response.release_conn()
            raise self._error(response, data, "GET", path)
        complete = False
        try:
            for line in _lines(response.stream(_CHUNK)):
                event = orjson.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise api_error(int(status.get("code") or 500), status, method="GET",
                                    path=path)
                yield event
            complete = True
        except _TRANSPORT_ERRORS as error:
            raise _transport_error(error, "GET", url) from error
        except orjson.JSONDecodeError as error:
            raise TransportError(f"GET {url}: a watch line is not JSON: {error}") from error
        finally:
            if not complete:
                response.close()   # bytes left unread: this connection cannot serve another
            response.release_conn()

    # -- inside

    def _send(self, method: str, path: str, body: Any, query: Query, content_type: str,
              accept: str, timeout: float) -> _Answer:
        """One request and its whole answer; `TransportError` when no answer came."""
        if self._curl is not None:
            headers = {"Content-Type": content_type, "Accept": accept}
            queries = list(query)
            self._api.update_params_for_auth(headers, queries, ["BearerToken"], path, method, body)
            return self._curl.send(method, self._url(path, queries), headers,
                                   None if body is None else orjson.dumps(body), timeout)
        try:
            response = self._open(method, path, body, query, content_type, accept, timeout)
            try:
                data = response.data
            finally:
                response.release_conn()
        except _TRANSPORT_ERRORS as error:
            raise _transport_error(error, method, self.host + path) from error
        return _Answer(response.status, response.headers.get("Content-Type", ""), data,
                       response.headers.get("Retry-After"))

    def _url(self, path: str, queries: Query) -> str:
        return self.host + path + (f"?{urlencode(queries, quote_via=quote)}" if queries else "")

    def _open(self, method: str, path: str, body: Any, query: Query, content_type: str,
              accept: str, timeout: float | tuple[float, float]) -> Any:
        """Send through urllib3; the response with its body unread."""
        headers = {"Content-Type": content_type, "Accept": accept, "User-Agent": self.user_agent}
        queries = list(query)
        self._api.update_params_for_auth(headers, queries, ["BearerToken"], path, method, body)
        return self._api.rest_client.pool_manager.request(
            method, self._url(path, queries), body=None if body is None else orjson.dumps(body),
            headers=headers,
            timeout=(urllib3.Timeout(total=timeout) if not isinstance(timeout, tuple)
                     else urllib3.Timeout(connect=timeout[0], read=timeout[1])),
            preload_content=False, retries=False)

    def _error(self, response: Any, data: bytes, method: str, path: str) -> ApiError:
        return api_error(response.status, _status_body(data),
                         text=data.decode(errors="replace"),
                         retry_header=response.headers.get("Retry-After"),
                         method=method, path=path)

    def _report(self, verb: str, resource: str, code: int, began: float) -> None:
        if self._on_response is not None:
            self._on_response(verb, resource, code, time.monotonic() - began)


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The non-empty lines of a byte stream cut anywhere (an object may span many chunks)."""
    pending: list[bytes] = []
    for chunk in chunks:
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            pending.append(chunk)
            continue
        pending.append(lines[0])
        yield from (line for line in (b"".join(pending), *lines[1:-1]) if line.strip())
        pending = [lines[-1]] if lines[-1] else []
    if (rest := b"".join(pending)).strip():
        yield rest


# ---------------------------------------------------------------------------------------------
# libcurl


@dataclasses.dataclass(frozen=True, slots=True)
class _Answer:
    """A whole answer: what `Client.request` reads of it."""

    status: int
    content_type: str
    data: bytes
    retry_after: str | None


class _Curl:
    """Requests through libcurl: one easy handle per thread (a handle is not shared between
    threads), each keeping its own connections alive, set up as the urllib3 pool would be:
    the same CA, client certificate and key, verification, TCP keepalive; no proxy (libcurl
    would read one from the environment at each request: the official client reads it once,
    into its settings, and settings with a proxy send through its pool), no redirects followed,
    no retries of our own, HTTP/1.1 as the watches speak."""

    def __init__(self, options: list[tuple[int, Any]]) -> None:
        self._options = options
        self._local = threading.local()
        # To close them all at once; a thread's handle (and its connections) goes when the
        # thread ends.
        self._handles: weakref.WeakSet[pycurl.Curl] = weakref.WeakSet()
        self._lock = threading.Lock()

    @classmethod
    def fitting(cls, config: k8s.Configuration, user_agent: str) -> _Curl | None:
        """A transport for `config`, or None when it has settings this one does not map
        (a proxy, a TLS server name, a host name to check other than the URL's)."""
        if config.proxy or config.tls_server_name or isinstance(config.assert_hostname, str):
            return None
        options: list[tuple[int, Any]] = [
            (pycurl.NOSIGNAL, 1), (pycurl.PROXY, ""), (pycurl.FOLLOWLOCATION, 0),
            (pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1), (pycurl.USERAGENT, user_agent),
            (pycurl.SOCKOPTFUNCTION, _keepalive),
        ]
        if not config.verify_ssl:
            options += [(pycurl.SSL_VERIFYPEER, 0), (pycurl.SSL_VERIFYHOST, 0)]
        elif config.assert_hostname is False:
            options.append((pycurl.SSL_VERIFYHOST, 0))
        if config.ssl_ca_cert:
            options.append((pycurl.CAINFO, config.ssl_ca_cert))
        if config.ca_cert_data:
            data = config.ca_cert_data
            options.append((pycurl.CAINFO_BLOB, data.encode() if isinstance(data, str) else data))
        if config.cert_file:
            options.append((pycurl.SSLCERT, config.cert_file))
        if config.key_file:
            options.append((pycurl.SSLKEY, config.key_file))
        return cls(options)

    def _handle(self) -> pycurl.Curl:
        curl = getattr(self._local, "curl", None)
        if curl is None:
            curl = pycurl.Curl()
            for option, value in self._options:
                curl.setopt(option, value)
            with self._lock:
                self._handles.add(curl)
            self._local.curl = curl
        return curl

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> _Answer:
        curl = self._handle()
        chunks: list[bytes] = []
        lines: list[bytes] = []
        curl.setopt(pycurl.URL, url)
        if body is None:
            curl.setopt(pycurl.HTTPGET, 1)   # also forgets the last request's body
        else:
            curl.setopt(pycurl.POSTFIELDS, body)
        curl.setopt(pycurl.CUSTOMREQUEST, method)
        # "Expect:" empty: a body is sent at once, not after a 100 Continue.
        curl.setopt(pycurl.HTTPHEADER, [f"{k}: {v}" for k, v in headers.items()] + ["Expect:"])
        curl.setopt(pycurl.TIMEOUT_MS, max(1, int(timeout * 1000)))
        curl.setopt(pycurl.WRITEFUNCTION, chunks.append)
        curl.setopt(pycurl.HEADERFUNCTION, lines.append)
        try:
            curl.perform()
        except pycurl.error as error:
            raise _curl_error(curl, error, method, url) from error
        status = curl.getinfo(pycurl.RESPONSE_CODE)
        retry_after = _header(lines, b"retry-after") if status >= 400 else None
        return _Answer(status, curl.getinfo(pycurl.CONTENT_TYPE) or "", b"".join(chunks),
                       retry_after)

    def close(self) -> None:
        with self._lock:
            handles = list(self._handles)
            self._handles.clear()
        for curl in handles:
            curl.close()


def _keepalive(fd: int, purpose: int) -> int:
    """Each new socket: the same options as the urllib3 pool's (TCP keepalive as client-go asks
    for it, no Nagle)."""
    sock = socket.socket(fileno=fd)
    try:
        for level, option, value in tcp_keepalive_socket_options():
            sock.setsockopt(level, option, value)
    finally:
        sock.detach()   # libcurl owns the descriptor
    return 0


def _header(lines: list[bytes], name: bytes) -> str | None:
    """The value of header `name` (lower case) in the last answer's header lines."""
    for line in reversed(lines):
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip().decode("latin-1")
        if line.startswith(b"HTTP/"):   # the lines of an earlier answer (a 100 Continue)
            return None
    return None


def _curl_error(curl: pycurl.Curl, error: pycurl.error, method: str, url: str) -> TransportError:
    code, message = error.args[0], str(error.args[1]) if len(error.args) > 1 else ""
    if code == pycurl.E_OPERATION_TIMEDOUT:
        return Timeout(f"{method} {url}: timed out ({message})")
    if code in (pycurl.E_COULDNT_CONNECT, pycurl.E_COULDNT_RESOLVE_HOST):
        errno = curl.getinfo(pycurl.OS_ERRNO)
        why = f" ({os.strerror(errno)})" if errno else ""
        return TransportError(f"{method} {url}: cannot connect: {message}{why}")
    return TransportError(f"{method} {url}: curl error {code}: {message}")
