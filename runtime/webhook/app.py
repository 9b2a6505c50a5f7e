"""The Flask shell around runtime.admission: HTTP in, AdmissionReview out, health, and reloads.

Served by gunicorn (`gunicorn -c python:runtime.webhook.gunicorn_conf`). Each worker keeps the
plan in a `runtime.reloading.Reloading` holder that notices a changed plan file (a ConfigMap swaps
a `..data` symlink) at most once per interval and keeps the old plan when the new one does not
load. The same holder reloads the TLS certificate in gunicorn's `ssl_context` hook.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

import flask
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from runtime import admission, reloading
from runtime.registration import MUTATE_PATH, entry_id
from runtime.webhook import metrics
from runtime.webhook.settings import Settings

log = logging.getLogger("jobrules.webhook")

T = TypeVar("T")


def holder(what: str, paths: tuple[str, ...], build: Callable[[], T], interval: float,
           on_load: Callable[[T | None, T], None] | None = None) -> reloading.Reloading[T]:
    """A Reloading that logs failed builds and counts reloads in the webhook's metrics."""
    def loaded(previous: T | None, value: T) -> None:
        if previous is not None:
            metrics.RELOADS.labels(what).inc()
        if on_load is not None:
            on_load(previous, value)

    def failed(err: Exception, kept: bool) -> None:
        metrics.RELOAD_FAILURES.labels(what).inc()
        log.error("%s: cannot load %s (%s): %s", what, ", ".join(paths),
                  "keeping the previous one" if kept else "none loaded yet", err)

    return reloading.Reloading(what, paths, build, interval, loaded, failed)


def _plan_loaded(previous: admission.Injector | None, injector: admission.Injector) -> None:
    plan = injector.plan
    if previous is not None:
        metrics.PLAN_INFO.labels(previous.plan.digest, str(previous.plan.version)).set(0)
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
    plans = holder("plan", (settings.plan_path,), lambda: admission.load_file(settings.plan_path),
                   settings.reload_interval, _plan_loaded)
    plans.get()  # load now: ready sooner, and the first request does not pay for it

    @app.post(MUTATE_PATH)
    @app.post(f"{MUTATE_PATH}/<entry>")
    def mutate_pods(entry: str | None = None) -> flask.Response:
        """The webhook entry for every namespace, or (`/ENTRY`) the one of a namespace selector."""
        started = time.perf_counter()
        status, body, result = _review(plans.get(), settings.max_body, entry)
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


def _review(injector: admission.Injector | None, max_body: int,
            entry: str | None = None) -> tuple[int, bytes, str]:
    """(HTTP status, body, result label) for one admission request."""
    if injector is None:
        # Like an unreachable webhook: the API server applies its configured failurePolicy.
        return 503, _error("no plan loaded"), "no-plan"
    selector = None
    if entry is not None:
        selector = next((s for s in injector.plan.namespace_selectors()
                         if s is not None and entry_id(s) == entry), None)
        if selector is None:  # an entry of another plan: registration and plan disagree
            return 404, _error(f"no webhook entry {entry} in this plan"), "unknown-entry"
    body = _body(flask.request, max_body)
    if body is None:
        return 413, _error(f"body larger than {max_body} bytes"), "too-large"
    try:
        request = admission.decode(body, injector)
    except admission.BadReview as err:
        return 400, _error(str(err)), "bad-request"
    decision = admission.answer(injector, request, selector)
    for failure in decision.failures:
        log.warning("uid %s namespace %s: %s (%s)%s", request["uid"], request.get("namespace"),
                    failure.message, decision.result, " [dry run]" if decision.dry_run else "",
                    exc_info=None if failure.expected else failure.exception)
    if not decision.dry_run:
        for name in decision.applied:
            metrics.injections(name).inc()
        for failure in decision.failures:
            metrics.RULE_ERRORS.labels(failure.injection).inc()
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
