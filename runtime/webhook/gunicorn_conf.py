"""gunicorn configuration of the webhook: `gunicorn -c python:runtime.webhook.gunicorn_conf`.

Values come from the `JOBRULES_*` environment (runtime.webhook.settings); gunicorn's own command-line
flags still win. The master prepares the Prometheus multiprocess folder before anything imports
prometheus_client, serves the merged metrics on a plain-HTTP port once ready, and forgets dead
workers. Workers build their TLS context once and rebuild it when the certificate files change.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import gunicorn.sock

from runtime.webhook.settings import Settings

_settings = Settings.from_env(os.environ)
_made_metrics_dir: Path | None = None
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _made_metrics_dir = Path(tempfile.mkdtemp(prefix="jobrules-metrics-"))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(_made_metrics_dir)

from runtime import reloading  # noqa: E402
from runtime.webhook import app, metrics  # noqa: E402  (needs PROMETHEUS_MULTIPROC_DIR set)

wsgi_app = "runtime.webhook.app:create_app()"
proc_name = "jobrules-webhook"
bind = [_settings.bind]
worker_class = "runtime.webhook.worker.Worker"   # gevent: connections cost no thread
workers = _settings.workers
worker_connections = _settings.max_connections
timeout = _settings.timeout
graceful_timeout = _settings.graceful_timeout
keepalive = _settings.keepalive
max_requests = _settings.max_requests
max_requests_jitter = _settings.max_requests_jitter
certfile = _settings.tls_cert
keyfile = _settings.tls_key
loglevel = _settings.log_level
errorlog = "-"
accesslog = None
# gunicorn >= 25.1 opens a control socket (for gunicornc) under $XDG_RUNTIME_DIR or $HOME, and
# logs an error where home is missing or read-only, as in the image; nothing here uses it.
control_socket_disable = True
if os.path.isdir("/dev/shm"):
    worker_tmp_dir = "/dev/shm"   # heartbeat files on tmpfs: no stalls on a slow disk

_tls: reloading.Reloading[ssl.SSLContext] | None = None


def on_starting(server: Any) -> None:
    metrics.reset_multiprocess_dir(Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]))


def when_ready(server: Any) -> None:
    if _settings.metrics is not None:
        metrics.serve(*_settings.metrics)
        server.log.info("metrics on http://%s:%d/metrics", *_settings.metrics)
    if certfile is None:
        server.log.warning("no JOBRULES_TLS_CERT/KEY: serving plain HTTP (the API server will not call it)")


def child_exit(server: Any, worker: Any) -> None:
    metrics.forget_worker(worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    """The worker's last step: leave without the interpreter's teardown, keeping the exit code
    gunicorn is raising. That teardown clears gevent's patched thread functions before logging's
    handlers die, whose weakref callbacks then print a traceback at every worker exit on some
    Python builds (Debian's 3.11, the image's); nothing in a worker needs it (the arbiter drops
    the worker's metrics in `child_exit`)."""
    raised = sys.exc_info()[1]
    code = (raised.code or 0) if isinstance(raised, SystemExit) else 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)


def on_exit(server: Any) -> None:
    if _made_metrics_dir is not None:
        shutil.rmtree(_made_metrics_dir, ignore_errors=True)


def _tls_loaded(previous: ssl.SSLContext | None, context: ssl.SSLContext) -> None:
    app.log.info("tls: certificate and key %s", "reloaded" if previous else "loaded")


def post_worker_init(worker: Any) -> None:
    """Build the TLS context at boot, before any thread serves: certificate files that break
    later then find one to keep, and connections never race to build the first. Then move
    everything loaded so far (modules, app, plan) out of the garbage collector's sight: it lives
    as long as the worker, and full collections no longer walk it."""
    if worker.cfg.is_ssl:
        gunicorn.sock.ssl_context(worker.cfg)
    gc.freeze()


def ssl_context(conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """Called by gunicorn for every new connection: hand out the worker's cached context."""
    global _tls
    if _tls is None:
        _tls = app.holder("tls", (conf.certfile, conf.keyfile), default_ssl_context_factory,
                          _settings.reload_interval, _tls_loaded)
    context = _tls.get()
    if context is None:
        raise ssl.SSLError("no usable TLS certificate and key (see the log)")
    return context
