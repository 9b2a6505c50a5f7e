"""The webhook's settings: one frozen value read from the environment.

The gunicorn config module (master) and the app factory (workers) both read the same
environment, so they agree without passing objects across the fork. Every variable is optional
except where noted; a bad value is a SettingsError that names the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.environment import SettingsError, choice, host_port, integer, seconds

__all__ = ["DEFAULT_MAX_BODY", "Settings", "SettingsError"]

# The API server stores objects of at most ~1.5 MiB in etcd and accepts request bodies of 3 MiB;
# an AdmissionReview carries one pod, so anything larger is not from the API server.
DEFAULT_MAX_BODY = 3 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Settings:
    plan_path: str
    tls_cert: str | None = None          # both or neither; neither: plain HTTP (development only)
    tls_key: str | None = None
    bind: str = "0.0.0.0:8443"
    metrics: tuple[str, int] | None = ("0.0.0.0", 9090)   # plain HTTP; None: no metrics endpoint
    workers: int = 2
    max_connections: int = 1000          # per worker, once spoken; one more drops the longest waiting
    max_silent: int = 10000              # per worker, that have sent nothing; one more drops the oldest
    client_timeout: float = 5.0          # TLS handshake, or a request from its first byte, whole
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
        return cls(
            plan_path=plan,
            tls_cert=cert,
            tls_key=key,
            bind=env.get("JOBRULES_BIND", defaults.bind),
            metrics=host_port(env, "JOBRULES_METRICS_BIND", defaults.metrics),
            workers=integer(env, "JOBRULES_WORKERS", defaults.workers, minimum=1),
            max_connections=integer(env, "JOBRULES_MAX_CONNECTIONS", defaults.max_connections,
                                    minimum=1),
            max_silent=integer(env, "JOBRULES_MAX_SILENT", defaults.max_silent, minimum=1),
            client_timeout=_positive(
                seconds(env, "JOBRULES_CLIENT_TIMEOUT", defaults.client_timeout),
                "JOBRULES_CLIENT_TIMEOUT"),
            timeout=integer(env, "JOBRULES_TIMEOUT", defaults.timeout, minimum=1),
            graceful_timeout=integer(env, "JOBRULES_GRACEFUL_TIMEOUT", defaults.graceful_timeout),
            keepalive=integer(env, "JOBRULES_KEEPALIVE", defaults.keepalive),
            max_requests=integer(env, "JOBRULES_MAX_REQUESTS", defaults.max_requests),
            max_requests_jitter=integer(env, "JOBRULES_MAX_REQUESTS_JITTER",
                                     defaults.max_requests_jitter),
            reload_interval=seconds(env, "JOBRULES_RELOAD_INTERVAL", defaults.reload_interval),
            max_body=integer(env, "JOBRULES_MAX_BODY", defaults.max_body, minimum=1),
            log_level=choice(env, "JOBRULES_LOG_LEVEL", defaults.log_level,
                              ("debug", "info", "warning", "error")),
        )


def _positive(value: float, name: str) -> float:
    if value == 0:
        raise SettingsError(f"{name}: must be a finite number of seconds > 0, got 0")
    return value
