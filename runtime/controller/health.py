"""The controller's HTTP endpoints: `/healthz`, `/readyz` and `/metrics`, on one plain-HTTP port.

`/healthz` answers while the process serves at all. `/readyz` answers 200 once the plan is
loaded and every watch has listed its resource (or found it not served: a kind whose CRD is
missing is reported there and retried, and holds nobody up), with one line per check as the API
server's own `/readyz?verbose` does. `/metrics` is Prometheus' text format.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest


class Checked(Protocol):
    @property
    def ready(self) -> bool: ...

    def checks(self) -> list[tuple[str, bool, str]]: ...


def serve(bind: tuple[str, int], subject: Checked) -> ThreadingHTTPServer:
    """Serve in a daemon thread; `shutdown()` the server to stop."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:   # noqa: N802 (the stdlib's name)
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                lines = [f"[{'+' if ok else '-'}]{name} {detail}"
                         for name, ok, detail in subject.checks()]
                ready = subject.ready
                lines.append("readyz check passed" if ready else "readyz check failed")
                self._send(200 if ready else 503, ("\n".join(lines) + "\n").encode())
            elif path == "/metrics":
                self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:   # probes are not news
            pass

    server = ThreadingHTTPServer(bind, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
