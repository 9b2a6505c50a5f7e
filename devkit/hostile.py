"""Clients that misbehave, for tests and benchmarks of a server on loopback.

`Hostile(port, kind, count, ca_pem)` holds `count` connections of one kind open against
127.0.0.1:`port` from one thread, until stopped; each that the server closes is opened again,
as an attacker would. The kinds:

- ``header``: TLS done, then a request line and headers, one header line every `drip` seconds,
  never the blank line that ends them;
- ``body``: TLS done, complete headers announcing a body, then one body byte every `drip`;
- ``tls``: half of a real ClientHello, then one more byte every `drip` and, once the server has
  answered it, nothing (the handshake never finishes);
- ``silent``: connects and sends nothing (many of these are a connection flood).

Every loop is bounded by `stop()` (and `seconds` when given), and only loopback is addressed.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

KINDS = ("header", "body", "tls", "silent")
HOST = "127.0.0.1"


@dataclass
class _Held:
    sock: socket.socket | ssl.SSLSocket
    drip: bytes = b""      # sent one byte at a time, over and over (tls: once, then nothing)
    sent: int = 0


@dataclass
class Hostile:
    port: int
    kind: str
    count: int
    ca_pem: bytes
    drip: float = 1.0
    opened: int = 0                      # connections made, reopened ones included
    closed_by_server: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        self._context = ssl.create_default_context(cadata=self.ca_pem.decode())

    def __enter__(self) -> Hostile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Open the connections (returns once all are open), then keep them open in a thread."""
        self._selector = selectors.DefaultSelector()
        for _ in range(self.count):
            self._open()
        self._thread = threading.Thread(target=self._run, name=f"hostile-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()

    def _open(self) -> None:
        try:
            raw = socket.create_connection((HOST, self.port), timeout=10)
            held = self._begin(raw)
        except OSError:
            return   # refused or reset while opening: tried again at the next drip
        held.sock.setblocking(False)
        self._selector.register(held.sock, selectors.EVENT_READ, held)
        self.opened += 1

    def _begin(self, raw: socket.socket) -> _Held:
        if self.kind == "silent":
            return _Held(raw)
        if self.kind == "tls":
            hello = _client_hello(self._context)
            raw.sendall(hello[: len(hello) // 2])
            return _Held(raw, hello[len(hello) // 2:])
        tls = self._context.wrap_socket(raw, server_hostname=HOST)
        if self.kind == "header":
            tls.sendall(b"POST /mutate-pods HTTP/1.1\r\nHost: " + HOST.encode() + b"\r\n")
            return _Held(tls, b"X-Drip: a\r\n")
        tls.sendall(b"POST /mutate-pods HTTP/1.1\r\nHost: " + HOST.encode() +
                    b"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
        return _Held(tls, b" ")

    def _run(self) -> None:
        next_drip = time.monotonic() + self.drip
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=min(0.2, self.drip)):
                self._readable(key.data)
            if time.monotonic() >= next_drip:   # once a drip: reopen what was closed, drip
                next_drip += self.drip
                for _ in range(self.count - len(self._selector.get_map())):
                    if self._stop.is_set():
                        return
                    self._open()
                for key in list(self._selector.get_map().values()):
                    self._drip(key.data)

    def _readable(self, held: _Held) -> None:
        """The server sent something: an end (the connection goes), or a handshake's answer."""
        try:
            data = held.sock.recv(65536)
        except (BlockingIOError, ssl.SSLWantReadError):
            return
        except OSError:
            data = b""
        if data and self.kind == "tls":
            held.drip = b""   # the ServerHello came: never send the rest of the handshake
            return
        if not data:
            self._forget(held)
            self.closed_by_server += 1

    def _drip(self, held: _Held) -> None:
        if self.kind == "tls" and held.sent >= len(held.drip):
            return
        if not held.drip:
            return
        byte = held.drip[held.sent % len(held.drip)]
        try:
            held.sock.send(bytes([byte]))
        except (BlockingIOError, ssl.SSLWantWriteError):
            return
        except OSError:
            self._forget(held)
            self.closed_by_server += 1
            return
        held.sent += 1

    def _forget(self, held: _Held) -> None:
        self._selector.unregister(held.sock)
        with contextlib.suppress(OSError):
            held.sock.close()


def _client_hello(context: ssl.SSLContext) -> bytes:
    """The first flight of a real TLS handshake from `context`, without a socket."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=HOST)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()
