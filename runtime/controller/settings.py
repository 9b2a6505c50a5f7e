"""The controller's settings: one frozen value read from the environment, like the webhook's.

Every variable is optional but `JOBRULES_PLAN`; a bad value is a SettingsError naming the
variable, and the process does not start (docs/controller.md lists them all).
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.environment import (SettingsError, boolean, choice, host_port, integer, kubeconfig,
                                 seconds)

__all__ = ["VARIABLES", "ControllerSettings", "SettingsError", "Variable"]

_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAMESPACED = re.compile(rf"{_NAME}/{_NAME}\Z")


@dataclass(frozen=True, slots=True)
class Variable:
    """One row of the settings' table: `jobrules-controller --help` prints them, and
    docs/controller.md's Settings table names the same variables in the same order (a test
    holds it), so that the help never lists a setting the process does not read."""

    names: str
    default: str
    meaning: str


VARIABLES = (
    Variable("JOBRULES_PLAN", "required", "the compiled plan (rulec compile); re-read when it changes"),
    Variable("JOBRULES_KUBECONFIG, else KUBECONFIG", "in-cluster", "the API server and credentials"),
    Variable("JOBRULES_NAMESPACES", "all", "comma-separated namespaces to watch"),
    Variable("JOBRULES_WORKERS", "4", "reconciles at once"),
    Variable("JOBRULES_RESYNC", "600", "seconds between re-enqueues of every cached job"),
    Variable("JOBRULES_RELOAD_INTERVAL", "5", "seconds between looks at the plan file"),
    Variable("JOBRULES_LEADER_ELECT", "true", "elect one active replica on a Lease"),
    Variable("JOBRULES_LEASE_NAMESPACE", "POD_NAMESPACE, else default", "where the Lease lives"),
    Variable("JOBRULES_LEASE_NAME", "jobrules-controller", "its name"),
    Variable("JOBRULES_LEASE_DURATION, _RENEW_DEADLINE, _RETRY_PERIOD", "15, 10, 2",
             "seconds; duration > deadline > 1.2 x period"),
    Variable("JOBRULES_SHARDS", "1",
             "shards of the jobs by namespace, each held by one replica on a Lease of its own "
             "(LEASE_NAME-shard-K); 1: one leader reconciles every job"),
    Variable("JOBRULES_IDENTITY", "POD_NAME, else host_pid",
             "this replica's name in the Lease and in Events"),
    Variable("JOBRULES_HEALTH_BIND", "0.0.0.0:8080", "/healthz, /readyz, /metrics; empty: none"),
    Variable("JOBRULES_READ_TIMEOUT", "70", "seconds without a byte after which a watch is reopened"),
    Variable("JOBRULES_LOG_LEVEL", "info", "debug, info, warning, error"),
    Variable("JOBRULES_AUDIT", "unset",
             "policies to run in audit (decide, record, act on nothing): `*`, a kind's name, "
             "or KIND/POLICY-ID, comma-separated"),
    Variable("JOBRULES_WEBHOOK_SECRET", "unset",
             "NAMESPACE/NAME of the webhook's TLS Secret: the leader issues and renews its "
             "certificate (needs the certs extra)"),
    Variable("JOBRULES_WEBHOOK_SERVICE", "unset",
             "NAMESPACE/NAME of the webhook's Service: the names the certificate is for"),
    Variable("JOBRULES_WEBHOOK_CONFIGURATION", "0-jobrules",
             "the MutatingWebhookConfiguration whose caBundle the leader keeps"),
)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    plan_path: str
    kubeconfig: str | None = None        # None: in-cluster configuration
    namespaces: tuple[str, ...] = ()     # () : every namespace
    workers: int = 4
    resync: float = 600.0                # seconds between re-enqueues of every job from the cache
    reload_interval: float = 5.0         # seconds between looks at the plan file
    leader_elect: bool = True
    lease_namespace: str = "default"
    lease_name: str = "jobrules-controller"
    lease_duration: int = 15
    renew_deadline: int = 10
    retry_period: int = 2
    shards: int = 1                      # > 1: jobs sharded by namespace over the replicas
    identity: str = ""
    health: tuple[str, int] | None = ("0.0.0.0", 8080)   # /healthz, /readyz, /metrics
    read_timeout: float = 70.0           # a watch with no byte for this long is reopened
    log_level: str = "info"
    # The webhook's serving certificate, issued and renewed by the leader (None: not managed):
    # its Secret and the Service it is for, as (namespace, name), and the webhook configuration
    # whose caBundle trusts it.
    webhook_secret: tuple[str, str] | None = None
    webhook_service: tuple[str, str] | None = None
    webhook_configuration: str = "0-jobrules"
    # Policies in audit beside those the rules put there: `*`, a kind's name, or KIND/POLICY-ID.
    audit: tuple[str, ...] = ()
    test_hooks: bool = False             # honour JOBRULES_FAULT (tests only)
    fault: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ControllerSettings:
        plan = env.get("JOBRULES_PLAN")
        if not plan:
            raise SettingsError("JOBRULES_PLAN: required (the path of the compiled plan JSON)")
        d = cls(plan)
        namespaces = tuple(n.strip() for n in env.get("JOBRULES_NAMESPACES", "").split(",")
                           if n.strip())
        lease, renew, retry = (integer(env, "JOBRULES_LEASE_DURATION", d.lease_duration, 2),
                               integer(env, "JOBRULES_RENEW_DEADLINE", d.renew_deadline, 1),
                               integer(env, "JOBRULES_RETRY_PERIOD", d.retry_period, 1))
        if not lease > renew > retry * 1.2:
            raise SettingsError("JOBRULES_LEASE_DURATION > JOBRULES_RENEW_DEADLINE > 1.2 x "
                                f"JOBRULES_RETRY_PERIOD is required, got {lease}, {renew}, {retry}")
        shards = integer(env, "JOBRULES_SHARDS", d.shards, minimum=1)
        if shards > 1 and not boolean(env, "JOBRULES_LEADER_ELECT", d.leader_elect):
            raise SettingsError("JOBRULES_SHARDS > 1 needs JOBRULES_LEADER_ELECT=true (the "
                                "shards are held on Leases)")
        secret = _namespaced(env, "JOBRULES_WEBHOOK_SECRET")
        service = _namespaced(env, "JOBRULES_WEBHOOK_SERVICE")
        if (secret is None) != (service is None):
            raise SettingsError("JOBRULES_WEBHOOK_SECRET and JOBRULES_WEBHOOK_SERVICE: both or "
                                "neither (the certificate's Secret and the Service it is for)")
        if secret is not None and importlib.util.find_spec("cryptography") is None:
            raise SettingsError("JOBRULES_WEBHOOK_SECRET: self-managed serving certificates need "
                                "the cryptography package: pip install 'jobrules[certs]' "
                                "(the image has it)")
        hooks = boolean(env, "JOBRULES_TEST_HOOKS", False)
        fault = env.get("JOBRULES_FAULT", "")
        if fault and not hooks:
            raise SettingsError("JOBRULES_FAULT: only with JOBRULES_TEST_HOOKS=1 (tests only)")
        return cls(
            plan_path=plan,
            kubeconfig=kubeconfig(env),
            namespaces=namespaces,
            workers=integer(env, "JOBRULES_WORKERS", d.workers, minimum=1),
            resync=seconds(env, "JOBRULES_RESYNC", d.resync),
            reload_interval=seconds(env, "JOBRULES_RELOAD_INTERVAL", d.reload_interval),
            leader_elect=boolean(env, "JOBRULES_LEADER_ELECT", d.leader_elect),
            lease_namespace=(env.get("JOBRULES_LEASE_NAMESPACE") or env.get("POD_NAMESPACE")
                             or d.lease_namespace),
            lease_name=env.get("JOBRULES_LEASE_NAME") or d.lease_name,
            lease_duration=lease, renew_deadline=renew, retry_period=retry, shards=shards,
            identity=(env.get("JOBRULES_IDENTITY") or env.get("POD_NAME")
                      or f"{socket.gethostname()}_{os.getpid()}"),
            health=host_port(env, "JOBRULES_HEALTH_BIND", d.health),
            read_timeout=seconds(env, "JOBRULES_READ_TIMEOUT", d.read_timeout),
            log_level=choice(env, "JOBRULES_LOG_LEVEL", d.log_level,
                             ("debug", "info", "warning", "error")),
            webhook_secret=secret, webhook_service=service,
            webhook_configuration=env.get("JOBRULES_WEBHOOK_CONFIGURATION") or d.webhook_configuration,
            audit=tuple(a.strip() for a in env.get("JOBRULES_AUDIT", "").split(",")
                        if a.strip()),
            test_hooks=hooks,
            fault=fault,
        )


def _namespaced(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    text = env.get(name, "")
    if not text:
        return None
    if not _NAMESPACED.match(text):
        raise SettingsError(f"{name}={text!r}: expected NAMESPACE/NAME")
    namespace, _, rest = text.partition("/")
    return namespace, rest

