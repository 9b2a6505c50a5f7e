"""The Flask shell around runtime.admission: HTTP in, AdmissionReview out, health, and reloads.

Served by gunicorn (`gunicorn -c python:runtime.gunicorn_conf`). Each worker keeps the plan in a
`Reloading` holder that notices a changed plan file (a ConfigMap swaps a `..data` symlink) at
most once per interval and keeps the old plan when the new one does not load. The same holder
reloads the TLS certificate in gunicorn's `ssl_context` hook.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import flask
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from runtime import admission, metrics, mutator
from runtime import plan as planlib
from runtime.registration import MUTATE_PATH
from runtime.settings import Settings

log = logging.getLogger("jobrules.webhook")

T = TypeVar("T")
Signature = tuple[tuple[int, int, int, int] | None, ...]


class Reloading(Generic[T]):
    """A value built from files, rebuilt when they change on disk.

    The files are stat'ed at most once per `interval` by whichever thread asks first (the others
    keep using the current value meanwhile). A failed build keeps the previous value, logs,
    counts a reload failure, and is not retried until the files change again.
    """

    def __init__(self, what: str, paths: tuple[str, ...], build: Callable[[], T],
                 interval: float, on_load: Callable[[T | None, T], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self._paths = paths
        self._build = build
        self._interval = interval
        self._on_load = on_load
        self._clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._signature: Signature | None = None
        self._checked = -math.inf

    def get(self) -> T | None:
        # Without a value yet, wait for the thread that is loading one rather than return None.
        if self._due() and self._lock.acquire(blocking=self._value is None):
            try:
                if self._due():
                    self._refresh()
            finally:
                self._lock.release()
        return self._value

    def _due(self) -> bool:
        return self._clock() - self._checked >= self._interval

    def _refresh(self) -> None:
        self._checked = self._clock()
        signature = _signature(self._paths)
        if signature == self._signature:
            return
        self._signature = signature
        try:
            value = self._build()
        except Exception as err:  # keep serving what we have, whatever broke
            metrics.RELOAD_FAILURES.labels(self.what).inc()
            kept = "keeping the previous one" if self._value is not None else "none loaded yet"
            log.error("%s: cannot load %s (%s): %s", self.what, ", ".join(self._paths), kept, err)
            return
        previous, self._value = self._value, value
        if previous is not None:
            metrics.RELOADS.labels(self.what).inc()
        if self._on_load is not None:
            self._on_load(previous, value)


def _signature(paths: tuple[str, ...]) -> Signature:
    """What changes when a file is rewritten or swapped: device, inode, mtime, size."""
    def one(path: str) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(path)  # follows symlinks, so a `..data` swap shows as a new inode
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    return tuple(one(path) for path in paths)


def _plan_loaded(previous: planlib.Plan | None, plan: planlib.Plan) -> None:
    if previous is not None:
        metrics.PLAN_INFO.labels(previous.digest, str(previous.version)).set(0)
    metrics.PLAN_INFO.labels(plan.digest, str(plan.version)).set(1)
    log.info("plan loaded: digest %s, %d kinds, %d injections, failure policy %s",
             plan.digest[:12], len(plan.kinds), len(plan.injections), plan.webhook.failure_policy)


def create_app(settings: Settings | None = None) -> flask.Flask:
    """The webhook app; `settings` default to the environment (how gunicorn workers call it)."""
    settings = settings or Settings.from_env(os.environ)
    _log_like_gunicorn()
    app = flask.Flask("jobrules.webhook")
    # One byte over: a chunked body is cut at the limit rather than refused, so reading one byte
    # more is how an oversize chunked body shows.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body + 1
    plans = Reloading("plan", (settings.plan_path,), lambda: planlib.load_file(settings.plan_path),
                      settings.reload_interval, _plan_loaded)
    plans.get()  # load now: ready sooner, and the first request does not pay for it

    @app.post(MUTATE_PATH)
    def mutate_pods() -> flask.Response:
        started = time.perf_counter()
        status, body, result = _review(plans.get(), settings.max_body)
        metrics.requests(result).inc()
        metrics.LATENCY.observe(time.perf_counter() - started)
        return app.response_class(body, status=status, mimetype="application/json")

    @app.get("/healthz")
    def healthz() -> tuple[str, int]:
        return "ok\n", 200

    @app.get("/readyz")
    def readyz() -> tuple[str, int]:
        return ("ok\n", 200) if plans.get() is not None else ("no plan loaded\n", 503)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> tuple[dict[str, str], int]:
        return {"error": err.name}, err.code or 500

    @app.errorhandler(Exception)
    def internal_error(err: Exception) -> tuple[dict[str, str], int]:
        log.exception("unexpected error on %s", flask.request.path)
        return {"error": "internal error"}, 500

    return app


def _review(plan: planlib.Plan | None, max_body: int) -> tuple[int, bytes, str]:
    """(HTTP status, body, result label) for one admission request."""
    if plan is None:
        # Like an unreachable webhook: the API server applies its configured failurePolicy.
        return 503, _error("no plan loaded"), "no-plan"
    body = _body(flask.request, max_body)
    if body is None:
        return 413, _error(f"body larger than {max_body} bytes"), "too-large"
    try:
        request = admission.decode(body, whole=mutator.reads_pod(plan))
    except admission.BadReview as err:
        return 400, _error(str(err)), "bad-request"
    decision = admission.answer(plan, request)
    if decision.failure is not None:
        failure = decision.failure
        log.warning("uid %s namespace %s: %s (%s)%s", request["uid"], request.get("namespace"),
                    failure.message, decision.result, " [dry run]" if decision.dry_run else "",
                    exc_info=None if isinstance(failure.exception, mutator.MutationError)
                    else failure.exception)
    if not decision.dry_run:
        for name in decision.applied:
            metrics.injections(name).inc()
        if decision.failure is not None:
            metrics.RULE_ERRORS.labels(decision.failure.injection).inc()
    return 200, admission.encode(decision.review), decision.result


def _body(request: flask.Request, max_body: int) -> bytes | None:
    """The request body, or None when it is longer than `max_body` bytes.

    With a Content-Length (the API server always sends one) the body is read in one call from
    the server's stream, which gunicorn ends at that length; werkzeug's limited stream, which
    reads in small steps, only guards chunked bodies."""
    length = request.content_length
    if length is not None:
        return request.input_stream.read(length) if length <= max_body else None
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:
        return None
    return body if len(body) <= max_body else None


def _error(message: str) -> bytes:
    return flask.json.dumps({"error": message}).encode() + b"\n"


def _log_like_gunicorn() -> None:
    """Under gunicorn, our log lines go where gunicorn's error log goes, at its level."""
    ours, theirs = logging.getLogger("jobrules"), logging.getLogger("gunicorn.error")
    if theirs.handlers and not ours.handlers:
        ours.handlers = list(theirs.handlers)
        ours.setLevel(theirs.level)
        ours.propagate = False
