"""The real API server calls the jobrules webhook (gunicorn, TLS, runtime.webhook.gunicorn_conf) with the
configuration runtime.registration renders, and stores what it answers."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from support import apiserver
import pytest
from support.annotating_webhook import ANNOTATION
from test_webhook_gunicorn import Served, metric, serve, write_plan

from runtime import mutator, registration
from runtime import plan as planlib
from runtime.controller.kube import ApiError, Client

pytestmark = pytest.mark.integration

Register = Callable[..., str]


@pytest.fixture
def register(api: Client, namespace: str) -> Iterator[Register]:
    """Register a webhook for pods of this test's namespace only; removed after the test."""
    names: list[str] = []

    def register_(served: Served, plan: Path, name: str = "a-jobrules") -> str:
        config = registration.render(planlib.load_file(plan), registration.Url(served.url),
                                     served.ca.cert_pem, name=f"{name}-{namespace}")
        # Other tests share the control plane: add our namespace to the selector we render.
        selector = config["webhooks"][0]["namespaceSelector"]
        selector["matchLabels"] = {"kubernetes.io/metadata.name": namespace}
        apiserver.create(api, apiserver.MUTATING_WEBHOOKS, config)
        names.append(config["metadata"]["name"])
        return names[-1]

    yield register_
    for name in names:
        apiserver.delete(api, apiserver.MUTATING_WEBHOOKS.path(name=name))


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Served]:
    with serve(write_plan(tmp_path / "plan.json"), tmp_path) as served:
        yield served


def owner(api_version: str, kind: str, name: str = "owner") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "uid": str(uuid.uuid4())}}


JOB = owner("batch/v1", "Job")
WORKFLOW = owner("argoproj.io/v1alpha1", "Workflow")
WRAPPED = owner("batch.volcano.sh/v1alpha1", "Job")


def wait_until_called(api: Client, namespace: str) -> None:
    """The API server picks up configurations asynchronously: probe with dry-run creations."""
    probe = apiserver.pod_manifest(namespace, "probe", owner=JOB)

    def injected() -> bool:
        created = apiserver.create(api, apiserver.PODS, probe, dryRun="All")
        return mutator.RECORD_ANNOTATION in created["metadata"].get("annotations", {})

    apiserver.wait_for("the API server to call the jobrules webhook", injected)


def requests(served: Served, result: str) -> float:
    return metric(served.metrics(), "jobrules_webhook_requests_total", result=result)


def calls_to(served: Served) -> float:
    return metric(served.metrics(), "jobrules_webhook_request_duration_seconds_count")


def test_job_pod_is_stored_with_the_native_sidecar(api: Client, namespace: str, controller_manager: None,
                                                   webhook: Served, register: Register) -> None:
    register(webhook, webhook.workdir / "plan.json")
    wait_until_called(api, namespace)
    job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "train"))
    [pod] = apiserver.job_pods(api, job)

    setup, agent = pod["spec"]["initContainers"]
    assert setup["name"] == "setup"
    assert agent["name"] == "log-agent" and agent["restartPolicy"] == "Always"
    assert {"name": "logs", "mountPath": "/var/log/job", "readOnly": True} in agent["volumeMounts"]
    [main] = pod["spec"]["containers"]
    assert {"name": "logs", "mountPath": "/var/log/job"} in main["volumeMounts"]
    assert {"name": "logs", "emptyDir": {}} in pod["spec"]["volumes"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["example.com/logs"] == "shipped"
    assert [e.split("@")[0] for e in json.loads(annotations[mutator.RECORD_ANNOTATION])] == ["log-agent"]
    assert metric(webhook.metrics(), "jobrules_webhook_injections_applied_total",
                  injection="log-agent") == 1   # dry-run probes are not counted


def test_argo_pod_gets_completion_wiring_on_main_only(api: Client, namespace: str,
                                                      webhook: Served, register: Register) -> None:
    register(webhook, webhook.workdir / "plan.json")
    wait_until_called(api, namespace)
    workflow = apiserver.create(api, apiserver.WORKFLOWS, {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "wf", "namespace": namespace},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "busybox"}}]},
    })
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "wf-main-1", containers=["wait", "main"],
                                                        owner=workflow))
    wait, main = pod["spec"]["containers"]
    assert "env" not in wait
    assert main["env"] == [{"name": "JOBRULES_DECIDES", "value": "true"}]
    assert pod["metadata"]["annotations"][mutator.COMPLETION_ANNOTATION] == "main"


def test_pods_of_undeclared_kinds_are_not_even_sent(api: Client, namespace: str, webhook: Served,
                                                    register: Register) -> None:
    """The CEL match condition keeps them away from the webhook, and so does the skip label."""
    register(webhook, webhook.workdir / "plan.json")
    wait_until_called(api, namespace)
    calls, patched = calls_to(webhook), requests(webhook, "patched")
    for name, owned_by, labels in (("lonely", None, {}), ("replica", owner("apps/v1", "ReplicaSet"), {}),
                                   ("cron", owner("batch/v1", "CronJob"), {}),
                                   ("skipped", JOB, {registration.SKIP_LABEL: ""})):
        pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, name, owner=owned_by,
                                                            labels=labels))
        assert mutator.RECORD_ANNOTATION not in pod["metadata"].get("annotations", {})
    assert calls_to(webhook) == calls
    apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "owned", owner=JOB))
    assert requests(webhook, "patched") == patched + 1


def test_a_pod_costs_one_call(api: Client, namespace: str, webhook: Served,
                              register: Register) -> None:
    """Our sidecar comes with the service-account token mount the API server's plugin would add
    after us: the plugin changes nothing, so the API server does not call us a second time."""
    register(webhook, webhook.workdir / "plan.json")
    wait_until_called(api, namespace)
    calls = calls_to(webhook)
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "once", owner=JOB))
    assert calls_to(webhook) == calls + 1
    [token] = [v["name"] for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        assert {"name": token, "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"} in container["volumeMounts"]


def test_reinvocation_leaves_our_injection_as_it_was(api: Client, namespace: str, webhook: Served,
                                                     register: Register, tmp_path: Path) -> None:
    """A webhook after ours changes the pod, so the API server calls ours again (IfNeeded): the
    stored pod is the once-injected one plus the other webhook's annotation."""
    register(webhook, webhook.workdir / "plan.json", name="a-jobrules")
    wait_until_called(api, namespace)
    once = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "once", owner=JOB))
    other = tmp_path / "other"
    other.mkdir()
    with apiserver.gunicorn_tls("annotating_webhook:app", chdir=Path(__file__).parent / "support",
                           workdir=other) as (base, ca):
        config = apiserver.create(api, apiserver.MUTATING_WEBHOOKS, {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": f"b-annotate-{namespace}"},
            "webhooks": [{
                "name": "annotate.jobrules.test",
                "clientConfig": {"url": f"{base}/mutate", "caBundle": base64.b64encode(ca).decode()},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            }],
        })
        try:
            probe = apiserver.pod_manifest(namespace, "probe", owner=JOB)
            apiserver.wait_for("the second webhook", lambda: ANNOTATION in apiserver.create(
                api, apiserver.PODS, probe, dryRun="All")["metadata"].get("annotations", {}))
            patched, unchanged = requests(webhook, "patched"), requests(webhook, "unchanged")
            twice = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "twice", owner=JOB))
        finally:
            apiserver.delete(api, apiserver.MUTATING_WEBHOOKS.path(name=config["metadata"]["name"]))

    assert requests(webhook, "patched") == patched + 1      # first call: the injection
    assert requests(webhook, "unchanged") == unchanged + 1  # called again: nothing more to do
    assert same_but_token_volume(twice["spec"]) == same_but_token_volume(once["spec"])
    annotations = dict(twice["metadata"]["annotations"])
    assert annotations.pop(ANNOTATION)
    assert annotations == once["metadata"]["annotations"]


def same_but_token_volume(spec: dict[str, Any]) -> str:
    """The spec with the service account token volume's random name suffix removed."""
    return re.sub(r"kube-api-access-\w+", "kube-api-access", json.dumps(spec, sort_keys=True))


def _create_refused(api: Client, pod: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as refused:
        apiserver.create(api, apiserver.PODS, pod)
    return refused.value


def test_a_failing_rule_with_fail_closed_denies_with_its_location(api: Client, namespace: str,
                                                                  tmp_path: Path, register: Register) -> None:
    plan = write_plan(tmp_path / "plan.json", "Fail")
    with serve(plan, tmp_path) as served:
        register(served, plan)
        wait_until_called(api, namespace)
        refused = _create_refused(api, apiserver.pod_manifest(namespace, "wrapped", owner=WRAPPED))
    assert refused.status == 500
    message = refused.message
    assert 'admission webhook "pods.jobrules.dev" denied the request' in message
    assert "rules/webhook-it.rules:31:1: injection wrapper: container 'main' has no command" in message


def test_a_failing_rule_with_fail_open_admits_unpatched(api: Client, namespace: str, webhook: Served,
                                                        register: Register) -> None:
    register(webhook, webhook.workdir / "plan.json")
    wait_until_called(api, namespace)
    pod = apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "wrapped", owner=WRAPPED))
    assert "command" not in pod["spec"]["containers"][0]
    assert mutator.RECORD_ANNOTATION not in pod["metadata"].get("annotations", {})
    assert requests(webhook, "failed-open") == 1


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_dead_webhook(api: Client, namespace: str, tmp_path: Path, register: Register,
                        policy: str) -> None:
    """Fail-closed blocks pods of declared kinds with a clear message; fail-open admits them."""
    plan = write_plan(tmp_path / "plan.json", policy)
    with serve(plan, tmp_path) as served:
        register(served, plan)
        wait_until_called(api, namespace)
    pod = apiserver.pod_manifest(namespace, "orphan", owner=JOB)
    if policy == "Fail":
        refused = _create_refused(api, pod)
        message = refused.message
        assert refused.status == 500
        assert 'failed calling webhook "pods.jobrules.dev"' in message
        assert "connection refused" in message
    else:
        created = apiserver.create(api, apiserver.PODS, pod)
        assert mutator.RECORD_ANNOTATION not in created["metadata"].get("annotations", {})
    apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "not-ours"))   # never affected

