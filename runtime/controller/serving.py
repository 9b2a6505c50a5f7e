"""The webhook's serving certificate, kept by the leader: the I/O around runtime.certificates.

One look reads the TLS Secret and the webhook configuration, issues a new certificate when
`certificates.problem` says so, makes every webhook of the configuration trust it (its caBundle,
the previous CAs kept for the overlap), then writes the Secret, each write guarded by the
resourceVersion read. The caBundle goes first: a webhook replica that reloads the new files
before the API server trusts them would be refused. A crash in between is repaired by the next
look (the extra CA is dropped, or the certificate issued again). The webhook's pods reload the
files the kubelet updates; nothing restarts.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from runtime import certificates, registration
from runtime.controller import kube, metrics

log = logging.getLogger("jobrules.controller")

LOOK_EVERY = timedelta(hours=1)     # at most this long between looks when all is well
RETRY = timedelta(seconds=10)       # after a failure, or while the configuration is missing


class Keeper:
    def __init__(self, client: kube.Client, *, secret: tuple[str, str],
                 service: tuple[str, str], configuration: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.client = client
        self.secret_path = kube.Resource("v1", "secrets").path(*secret)
        self.configuration_path = (f"/apis/admissionregistration.k8s.io/v1/"
                                   f"mutatingwebhookconfigurations/{configuration}")
        self.names = registration.dns_names(registration.Service(*service))
        self.clock = clock

    def run(self, stopping: threading.Event) -> None:
        """Look now, then whenever the last look says, until `stopping` is set."""
        wait = timedelta(0)
        while not stopping.wait(wait.total_seconds()):
            try:
                wait = self.look()
            except (kube.ApiError, kube.TransportError) as err:
                log.warning("serving certificate: %s; looking again in %ds", err,
                            RETRY.total_seconds())
                wait = RETRY

    def look(self) -> timedelta:
        """One look; how long until the next one."""
        now = self.clock()
        secret = self.client.get(self.secret_path)
        current = certificates.Serving.of(_decoded(secret.get("data")))
        why = certificates.problem(current, self.names, now)
        if why is not None or current is None:
            log.info("serving certificate: issuing a new one (%s)", why)
            current = certificates.issue(self.names, now)
            written = self._trust(current, now)
            self.client.merge_patch(self.secret_path, {"data": _encoded(current.data())},
                                    resource_version=secret["metadata"]["resourceVersion"])
            log.info("serving certificate: written to %s, valid until %s", self.secret_path,
                     certificates.expiry(current).isoformat())
        else:
            written = self._trust(current, now)
        metrics.CERTIFICATE_EXPIRY.set(certificates.expiry(current).timestamp())
        if not written:
            return RETRY
        return min(LOOK_EVERY, max(certificates.next_look(current, now), timedelta(seconds=1)))

    def _trust(self, current: certificates.Serving, now: datetime) -> bool:
        """Make every webhook of the configuration trust `current`; False while the
        configuration does not exist yet (it is applied last)."""
        try:
            configuration = self.client.get(self.configuration_path)
        except kube.NotFound:
            log.info("serving certificate: %s not there yet", self.configuration_path)
            return False
        operations: list[dict[str, Any]] = []
        for n, hook in enumerate(configuration.get("webhooks") or []):
            present = base64.b64decode((hook.get("clientConfig") or {}).get("caBundle") or "")
            wanted = certificates.ca_bundle(current, present, now)
            if wanted != present:
                operations.append({"op": "add", "path": f"/webhooks/{n}/clientConfig/caBundle",
                                   "value": base64.b64encode(wanted).decode()})
        if operations:
            # Applied only to the version read (the webhooks' order with it).
            version = configuration["metadata"]["resourceVersion"]
            self.client.json_patch(self.configuration_path, [
                {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                *operations])
            log.info("serving certificate: caBundle of %d webhook(s) updated", len(operations))
        return True


def _decoded(data: Any) -> dict[str, bytes]:
    if not isinstance(data, dict):
        return {}
    out = {}
    for key, value in data.items():
        try:
            out[key] = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
        except ValueError:
            out[key] = b""
    return out


def _encoded(data: dict[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in data.items()}
