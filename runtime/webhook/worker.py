"""The gunicorn worker of the webhook: gevent's, with deadlines and a connection cap.

Any pod can reach the webhook's port, so no client may hold what the API server's requests need.
A connection that has sent nothing yet is only a descriptor watched by the event loop (no
greenlet, no socket object, no TLS state); once it sends its first byte it gets a greenlet,
not a thread. On top of gunicorn's gevent worker:

- at most `JOBRULES_MAX_SILENT` such silent connections per worker, each waiting at most as long
  as an idle kept-alive one; one more closes the silent one accepted first. A flood of
  connections that send nothing thus costs memory up to that cap and, past it, one accept and
  one close per connect, and never displaces a connection that has spoken;
- a TLS handshake must finish within `JOBRULES_CLIENT_TIMEOUT` of the client's first byte, using
  the worker's current context (the `ssl_context` hook, so a renewed certificate is served to
  new connections);
- a request must arrive whole, from its first byte to the end of its body, within
  `JOBRULES_CLIENT_TIMEOUT`; between requests a connection waits at most `keepalive` seconds;
  an answer must be taken by the client within the same timeout;
- at most `worker_connections` connections that have spoken per worker
  (`JOBRULES_MAX_CONNECTIONS`): one more closes the connection that has waited longest among
  those that have not been answered yet (slow clients), else the one idle longest among those
  kept alive; never one whose request is being read, answered or written.

The worker raises its soft limit of open files to fit both caps (and lowers the caps to fit a
hard limit below them, with a warning).

On SIGTERM the worker stops accepting, closes the silent connections, answers what it is
reading, and closes connections that wait for a request after `STOP_LINGER` seconds (a request
sent meanwhile is answered, with `Connection: close`).
"""

from __future__ import annotations

import errno
import os
import resource
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gevent
import gevent.pool
import gevent.socket
import gunicorn.sock
from gevent.server import StreamServer
from gunicorn.workers.ggevent import GeventWorker

from runtime.webhook import metrics
from runtime.webhook.settings import Settings

STOP_LINGER = 2.0   # seconds a stopping worker keeps idle connections open
SPARE_FILES = 64    # descriptors besides connections: listeners, logs, metrics files, plan, TLS


class Connection:
    """A client socket whose reads and writes have deadlines, as gunicorn's parser sees it."""

    __slots__ = ("sock", "fd", "idle", "client_timeout", "until", "writing", "closed")

    def __init__(self, raw: socket.socket, idle: float, client_timeout: float) -> None:
        self.sock: Any = raw      # the TLS socket once the handshake is done
        self.fd = raw.fileno()    # the same file descriptor under TLS
        self.idle, self.client_timeout = idle, client_timeout
        self.until: float | None = None   # deadline of the request being read, None between
        self.writing = False
        self.closed = False

    def handshake(self, context: Callable[[], Any]) -> bool:
        """TLS within the read timeout of the first byte (the connection is served from then);
        False (connection dropped) when it does not finish."""
        deadline = time.monotonic() + self.client_timeout
        self.sock.settimeout(self.client_timeout)
        try:
            if not self.sock.recv(1, socket.MSG_PEEK):
                return False   # closed before a byte
        except OSError as err:
            if _timed_out(err):
                self.drop("read-timeout")
            return False
        tls = context().wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
        timeout = gevent.Timeout(max(0.0, deadline - time.monotonic()))
        timeout.start()
        try:
            tls.do_handshake()
        except gevent.Timeout as err:
            if err is not timeout:
                raise
            self.drop("read-timeout")
            return False
        except OSError:   # the client went away or spoke something else: nothing to count
            return False
        finally:
            timeout.close()
        self.sock = tls
        return True

    def recv(self, size: int) -> bytes:
        if self.until is None:   # waiting for the first byte of a request
            data = self._recv(size, self.idle, None)
            if data:
                self.until = time.monotonic() + self.client_timeout
            return data
        return self._recv(size, self.until - time.monotonic(), "read-timeout")

    def _recv(self, size: int, seconds: float, late: str | None) -> bytes:
        """Up to `size` bytes within `seconds`; b"" (the end, for gunicorn) if none come."""
        if seconds > 0:
            self.sock.settimeout(seconds)
            try:
                return self.sock.recv(size)
            except OSError as err:
                if not _timed_out(err):
                    return b""
        self.drop(late)
        return b""

    def sendall(self, data: bytes) -> None:
        self.writing = True
        self.sock.settimeout(self.client_timeout)
        try:
            self.sock.sendall(data)
        except OSError as err:
            if _timed_out(err):
                self.drop("write-timeout")
            raise BrokenPipeError(errno.EPIPE, "client gone") from err   # quiet in gunicorn
        finally:
            self.writing = False

    def next_request(self) -> None:
        """The answer is out: the next request gets a fresh deadline."""
        self.until = None

    def drop(self, reason: str | None) -> None:
        """End the connection now: the greenlet serving it sees the end of its input. Shut
        down below TLS (through a duplicate of the descriptor), so that no TLS state changes
        under a greenlet that is reading."""
        if reason is not None:
            metrics.connections_dropped(reason).inc()
        if self.closed:
            return
        try:
            with socket.socket(fileno=os.dup(self.fd)) as same:
                same.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def __getattr__(self, name: str) -> Any:   # everything else gunicorn asks of a socket
        return getattr(self.sock, name)


def _timed_out(err: OSError) -> bool:
    """A deadline passed (plain sockets raise TimeoutError, gevent's TLS sockets SSLError)."""
    return isinstance(err, TimeoutError) or "timed out" in str(err)


class Connections:
    """The worker's open connections in the order they started waiting for their request:
    those never answered yet, then the kept-alive ones. Full: the first of them is dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fresh: dict[Connection, None] = {}   # dicts keep insertion order: oldest first
        self.kept: dict[Connection, None] = {}

    def __len__(self) -> int:
        return len(self.fresh) + len(self.kept)

    def open(self, conn: Connection) -> bool:
        """Admit `conn`, dropping another if the worker is full; False when none can go."""
        if len(self) >= self.limit:
            victim = next((c for c in self.fresh if not c.writing), None) or next(
                (c for c in self.kept if c.until is None and not c.writing), None)
            if victim is None:
                conn.drop("evicted")
                return False
            self.forget(victim)
            victim.drop("evicted")
        self.fresh[conn] = None
        return True

    def waiting(self, conn: Connection) -> None:
        """`conn` was answered and waits for its next request: it queues as the newest."""
        self.forget(conn)
        if not conn.closed:
            self.kept[conn] = None

    def forget(self, conn: Connection) -> None:
        self.fresh.pop(conn, None)
        self.kept.pop(conn, None)

    def idle(self) -> list[Connection]:
        """Connections waiting for a request with no byte of it read."""
        return [c for c in (*self.fresh, *self.kept) if c.until is None and not c.writing]


class Silent:
    """Accepted connections that have sent nothing yet, oldest first: a descriptor and an
    event-loop watcher each. The first byte (or the end) hands the descriptor to `speak`,
    which serves it; one more than `limit`, or one silent for `wait` seconds, is closed."""

    __slots__ = ("loop", "limit", "wait", "speak", "waiting")

    def __init__(self, loop: Any, limit: int, wait: float,
                 speak: Callable[[int, Any, Any], None]) -> None:
        self.loop, self.limit, self.wait, self.speak = loop, limit, wait, speak
        # fd -> (since, address, listener, watcher), in the order accepted
        self.waiting: dict[int, tuple[float, Any, Any, Any]] = {}

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, listener: Any, fd: int, addr: Any) -> None:
        """Watch `fd` for its first byte, closing the oldest silent one if full."""
        if len(self.waiting) >= self.limit:
            self._close(next(iter(self.waiting)), "evicted")
        watcher = self.loop.io(fd, 1)
        self.waiting[fd] = (time.monotonic(), addr, listener, watcher)
        watcher.start(self._spoke, fd)

    def expire(self, now: float) -> None:
        """Close those silent since before `now - wait`: the first ones, as they are in order."""
        while self.waiting:
            fd, (since, *_) = next(iter(self.waiting.items()))
            if since > now - self.wait:
                return
            self._close(fd, "read-timeout")

    def close_all(self) -> None:
        for fd in list(self.waiting):
            self._close(fd, None)

    def _spoke(self, fd: int) -> None:
        _, addr, listener, watcher = self.waiting.pop(fd)
        watcher.close()
        self.speak(fd, addr, listener)

    def _close(self, fd: int, reason: str | None) -> None:
        self.waiting.pop(fd)[3].close()
        os.close(fd)
        if reason is not None:
            metrics.connections_dropped(reason).inc()


class _Acceptor(StreamServer):
    """gevent's server handing each accepted descriptor, as it is, to `handle` in the event
    loop (spawn=None): no socket object and no greenlet until the client speaks."""

    def do_read(self) -> Any:
        """(descriptor, address) of the next connection, None when none waits."""
        listener: Any = self.socket
        try:
            return listener._accept()
        except BlockingIOError:
            return None

    def do_close(self, *args: Any) -> None:
        pass   # the descriptor now belongs to `Silent`


def file_limits(silent: int, connections: int, soft: int, hard: int) -> tuple[int, int, int]:
    """(the soft limit of open files to set, the caps of silent and of spoken connections) so
    that both caps fit, with SPARE_FILES besides; under a hard limit too low, silent ones give
    way first (past their cap they cost churn, not service), down to an even split."""
    need = silent + connections + SPARE_FILES
    if hard == resource.RLIM_INFINITY or hard >= need:
        enough = soft == resource.RLIM_INFINITY or soft >= need
        return (soft if enough else need), silent, connections
    room = max(2, hard - SPARE_FILES)
    connections = min(connections, max(room // 2, room - silent))
    return hard, max(1, min(silent, room - connections)), max(1, connections)


class Worker(GeventWorker):
    """gunicorn's gevent worker serving through `Connection`s (see the module docstring)."""

    def init_process(self) -> None:
        settings = Settings.from_env(os.environ)
        self.client_timeout = settings.client_timeout
        self.idle_timeout = self.cfg.keepalive or settings.client_timeout
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        files, self.max_silent, spoken = file_limits(settings.max_silent,
                                                     self.cfg.worker_connections, soft, hard)
        if files != soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, hard))
        if (self.max_silent, spoken) != (settings.max_silent, self.cfg.worker_connections):
            self.log.warning("open files limited to %d: at most %d silent and %d other "
                             "connections per worker", hard, self.max_silent, spoken)
        self.connections = Connections(spoken)
        self.group = gevent.pool.Pool()   # unbounded: Connections keeps the limit
        super().init_process()

    def run(self) -> None:
        self.silent = Silent(gevent.get_hub().loop, self.max_silent, self.idle_timeout,
                             self.speak)
        servers = []
        for listener in self.sockets:
            listener.setblocking(1)
            server = _Acceptor(listener, handle=partial(self.silent.add, listener), spawn=None)
            if self.cfg.workers > 1:
                server.max_accept = 1   # spread connections over the workers
            server.start()
            servers.append(server)
        while self.alive:
            self.notify()
            self.silent.expire(time.monotonic())
            gevent.sleep(1.0)
        for server in servers:
            server.close()   # stop accepting; the master's socket stays open for the others
        self.silent.close_all()
        self.stop_gracefully()

    def speak(self, fd: int, addr: Any, listener: Any) -> None:
        """A silent connection sent its first byte (or its end): serve it in a greenlet."""
        self.group.spawn(self.serve, listener, gevent.socket.socket(fileno=fd), addr)

    def stop_gracefully(self) -> None:
        deadline = time.monotonic() + self.cfg.graceful_timeout
        self.group.join(timeout=min(STOP_LINGER, self.cfg.graceful_timeout))
        for conn in self.connections.idle():
            conn.drop(None)
        while self.group and time.monotonic() < deadline:
            self.notify()
            self.group.join(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        if self.group:
            self.log.warning("Worker graceful timeout (pid:%s)", self.pid)
            self.group.kill(timeout=1)

    def serve(self, listener: socket.socket, client: socket.socket, addr: Any) -> None:
        conn = Connection(client, self.idle_timeout, self.client_timeout)
        try:
            if not self.connections.open(conn):
                return
            if self.cfg.is_ssl and not conn.handshake(partial(gunicorn.sock.ssl_context, self.cfg)):
                return
            self.handle(listener, conn, addr)   # gunicorn's HTTP/1.1 loop; closes conn
        finally:
            self.connections.forget(conn)
            if not conn.closed:
                conn.close()

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> None:
        try:
            super().handle_request(listener_name, req, sock, addr)
        finally:
            sock.next_request()
            self.connections.waiting(sock)
