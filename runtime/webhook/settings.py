"""The webhook's settings: one frozen value read from the environment.

The gunicorn config module (master) and the app factory (workers) both read the same
environment, so they agree without passing objects across the fork. Every variable is optional
except where noted; a bad value is a SettingsError that names the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The API server stores objects of at most ~1.5 MiB in etcd and accepts request bodies of 3 MiB;
# an AdmissionReview carries one pod, so anything larger is not from the API server.
DEFAULT_MAX_BODY = 3 * 1024 * 1024


class SettingsError(ValueError):
    """An environment variable with a value the webhook cannot use."""


@dataclass(frozen=True, slots=True)
class Settings:
    plan_path: str
    tls_cert: str | None = None          # both or neither; neither: plain HTTP (development only)
    tls_key: str | None = None
    bind: str = "0.0.0.0:8443"
    metrics: tuple[str, int] | None = ("0.0.0.0", 9090)   # plain HTTP; None: no metrics endpoint
    workers: int = 2
    threads: int = 4
    timeout: int = 30                    # seconds a worker may be silent before it is replaced
    graceful_timeout: int = 20           # seconds to finish in-flight requests on SIGTERM
    keepalive: int = 60                  # the API server reuses connections; keep them open
    max_requests: int = 0                # recycle a worker after this many requests (0: never)
    max_requests_jitter: int = 0
    reload_interval: float = 1.0         # at most one stat of the plan / TLS files per interval
    max_body: int = DEFAULT_MAX_BODY
    log_level: str = "info"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Settings from `JOBRULES_*` variables; `JOBRULES_PLAN` is required."""
        plan = env.get("JOBRULES_PLAN")
        if not plan:
            raise SettingsError("JOBRULES_PLAN: required (the path of the compiled plan JSON)")
        cert, key = env.get("JOBRULES_TLS_CERT") or None, env.get("JOBRULES_TLS_KEY") or None
        if (cert is None) != (key is None):
            raise SettingsError("JOBRULES_TLS_CERT and JOBRULES_TLS_KEY: give both or neither")
        defaults = cls(plan)
        metrics = env.get("JOBRULES_METRICS_BIND")
        return cls(
            plan_path=plan,
            tls_cert=cert,
            tls_key=key,
            bind=env.get("JOBRULES_BIND", defaults.bind),
            metrics=defaults.metrics if metrics is None else _host_port(metrics),
            workers=_int(env, "JOBRULES_WORKERS", defaults.workers, minimum=1),
            threads=_int(env, "JOBRULES_THREADS", defaults.threads, minimum=1),
            timeout=_int(env, "JOBRULES_TIMEOUT", defaults.timeout, minimum=1),
            graceful_timeout=_int(env, "JOBRULES_GRACEFUL_TIMEOUT", defaults.graceful_timeout),
            keepalive=_int(env, "JOBRULES_KEEPALIVE", defaults.keepalive),
            max_requests=_int(env, "JOBRULES_MAX_REQUESTS", defaults.max_requests),
            max_requests_jitter=_int(env, "JOBRULES_MAX_REQUESTS_JITTER",
                                     defaults.max_requests_jitter),
            reload_interval=_float(env, "JOBRULES_RELOAD_INTERVAL", defaults.reload_interval),
            max_body=_int(env, "JOBRULES_MAX_BODY", defaults.max_body, minimum=1),
            log_level=_choice(env, "JOBRULES_LOG_LEVEL", defaults.log_level,
                              ("debug", "info", "warning", "error")),
        )


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name}: must be at least {minimum}, got {value}")
    return value


def _host_port(raw: str) -> tuple[str, int] | None:
    """`host:port` (IPv6 hosts in brackets); empty: disabled."""
    if raw == "":
        return None
    host, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"JOBRULES_METRICS_BIND: expected host:port or empty, got {raw!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not 0 <= value < float("inf"):
        raise SettingsError(f"{name}: must be a finite number of seconds >= 0, got {raw!r}")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = (env.get(name) or default).lower()
    if value not in allowed:
        raise SettingsError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value
