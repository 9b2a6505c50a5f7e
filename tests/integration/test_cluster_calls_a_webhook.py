"""The API server calls a TLS webhook served by gunicorn and stores its patch on a pod created by
kube-controller-manager: the path the runtime's webhook takes in production."""

from __future__ import annotations

import base64
from pathlib import Path

from support import apiserver
import pytest
from support.annotating_webhook import ANNOTATION

pytestmark = pytest.mark.integration


def webhook_configuration(name: str, namespace: str, url: str, ca_pem: bytes) -> apiserver.Obj:
    """Send pod creations in ``namespace`` (only) to ``url``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "annotate.jobrules.test",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
        }],
    }


def test_job_pod_is_patched_by_the_webhook(api, namespace, controller_manager, tmp_path):
    app_dir = Path(__file__).parent / "support"
    with apiserver.gunicorn_tls("annotating_webhook:app", chdir=app_dir, workdir=tmp_path) as (base, ca):
        config = apiserver.create(api, apiserver.MUTATING_WEBHOOKS,
                             webhook_configuration(namespace, namespace, f"{base}/mutate", ca))
        try:
            # The API server loads webhook configurations asynchronously: probe with dry runs.
            probe = apiserver.pod_manifest(namespace, "probe")
            apiserver.wait_for("the API server to call the webhook", lambda: ANNOTATION in (
                apiserver.create(api, apiserver.PODS, probe, dryRun="All")["metadata"].get("annotations", {})))

            job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "patched"))
            [pod] = apiserver.job_pods(api, job)
        finally:
            apiserver.delete(api, apiserver.MUTATING_WEBHOOKS.path(name=config["metadata"]["name"]))

    created_by = pod["metadata"]["annotations"][ANNOTATION]
    assert created_by == "system:serviceaccount:kube-system:job-controller"
