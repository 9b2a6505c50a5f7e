"""runtime.webhook.app through Flask's test client: endpoints, HTTP errors, plan reloads, metrics."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import flask.testing
import pytest
from prometheus_client import REGISTRY

from runtime import plan as planlib
from runtime.webhook import app as webhook
from runtime.webhook.settings import Settings
from tests.unit.runtime.reviews import owner, plan_data, pod, request, review

MUTATE = "/mutate-pods"


def write_plan(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, sort_keys=True, indent=2) + "\n", encoding="utf-8")
    return path


def client(plan_path: Path, **settings: Any) -> flask.testing.FlaskClient:
    settings.setdefault("reload_interval", 0.0)
    return webhook.create_app(Settings(str(plan_path), **settings)).test_client()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    return write_plan(tmp_path / "plan.json", plan_data())


@pytest.fixture
def app(plan_file: Path) -> flask.testing.FlaskClient:
    return client(plan_file)


def test_healthz(app: flask.testing.FlaskClient) -> None:
    assert app.get("/healthz").status_code == 200


def test_readyz_waits_for_a_plan(tmp_path: Path) -> None:
    missing = tmp_path / "plan.json"
    c = client(missing)
    assert c.get("/readyz").status_code == 503
    write_plan(missing, plan_data())
    assert c.get("/readyz").status_code == 200


def test_a_pod_create_is_answered_with_a_review(app: flask.testing.FlaskClient) -> None:
    req = request()
    response = app.post(MUTATE, data=review(req), content_type="application/json")
    assert response.status_code == 200 and response.mimetype == "application/json"
    body = response.get_json()
    assert body["kind"] == "AdmissionReview" and body["response"]["uid"] == req["uid"]
    assert body["response"]["patchType"] == "JSONPatch"


@pytest.mark.parametrize("method, path, data, status", [
    ("POST", MUTATE, b"not json", 400),
    ("POST", MUTATE, b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', 400),
    ("POST", MUTATE, b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', 400),
    ("POST", MUTATE, b"x" * 5000, 413),
    ("GET", MUTATE, None, 405),
    ("POST", "/mutate", b"{}", 404),
    ("POST", "/healthz", b"{}", 405),
], ids=["not-json", "v1beta1", "no-request", "too-large", "get", "unknown-path", "post-healthz"])
def test_http_errors_are_short_json(plan_file: Path, method: str, path: str, data: bytes | None,
                                    status: int) -> None:
    response = client(plan_file, max_body=4096).open(path, method=method, data=data)
    assert response.status_code == status
    assert set(response.get_json()) == {"error"}
    assert len(response.data) < 200 and b"Traceback" not in response.data


def test_without_a_plan_requests_get_503(tmp_path: Path) -> None:
    """Like an unreachable webhook: the API server applies the registered failurePolicy."""
    response = client(tmp_path / "missing.json").post(MUTATE, data=review(request()))
    assert response.status_code == 503 and response.get_json() == {"error": "no plan loaded"}


def test_unexpected_errors_are_500_json_without_traceback(app: flask.testing.FlaskClient,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise RuntimeError("secret internals")
    monkeypatch.setattr(webhook.admission, "decode", broken)
    response = app.post(MUTATE, data=review(request()))
    assert response.status_code == 500 and response.get_json() == {"error": "internal error"}


# ---------------------------------------------------------------------------------------------
# Reloading the plan


def _policy(c: flask.testing.FlaskClient) -> bool:
    """Whether a pod the `wrapper` injection cannot wrap is admitted (fail-open)."""
    req = request(pod(owners=[owner("example.com/v1", "Wrapped")], command=False))
    return c.post(MUTATE, data=review(req)).get_json()["response"]["allowed"]


def test_a_changed_plan_is_used(plan_file: Path) -> None:
    c = client(plan_file)
    assert _policy(c) is True
    write_plan(plan_file, plan_data("Fail"))
    assert _policy(c) is False


def test_an_invalid_plan_is_rejected_and_the_old_one_kept(plan_file: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    c = client(plan_file)
    failures = sample("jobrules_reload_failures_total", file="plan")
    broken = plan_data("Fail")
    broken["planVersion"] = 99
    write_plan(plan_file, broken)
    with caplog.at_level(logging.ERROR, logger="jobrules"):
        assert _policy(c) is True
    assert "unsupported planVersion 99" in caplog.text and "keeping the previous one" in caplog.text
    assert sample("jobrules_reload_failures_total", file="plan") == failures + 1
    assert c.get("/readyz").status_code == 200


def test_a_configmap_symlink_swap_is_noticed(tmp_path: Path) -> None:
    """Kubelet updates a mounted ConfigMap by repointing `..data` at a new folder."""
    for version, policy in (("..v1", "Ignore"), ("..v2", "Fail")):
        (tmp_path / version).mkdir()
        write_plan(tmp_path / version / "plan.json", plan_data(policy))
    (tmp_path / "..data").symlink_to("..v1")
    (tmp_path / "plan.json").symlink_to("..data/plan.json")
    c = client(tmp_path / "plan.json")
    assert _policy(c) is True
    (tmp_path / "..data_tmp").symlink_to("..v2")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert _policy(c) is False


# ---------------------------------------------------------------------------------------------
# Metrics (single process here; test_webhook_metrics.py covers several workers)


def test_requests_are_counted_by_result(app: flask.testing.FlaskClient) -> None:
    results = ("patched", "unchanged", "skipped", "bad-request")
    before = {r: sample("jobrules_webhook_requests_total", result=r) for r in results}
    count = sample("jobrules_webhook_request_duration_seconds_count")
    app.post(MUTATE, data=review(request()))
    app.post(MUTATE, data=review(request(pod(owners=[]))))
    app.post(MUTATE, data=review(request(operation="UPDATE")))
    app.post(MUTATE, data=b"[]")
    for r in results:
        assert sample("jobrules_webhook_requests_total", result=r) == before[r] + 1, r
    assert sample("jobrules_webhook_request_duration_seconds_count") == count + 4


def test_injections_are_counted_except_dry_runs(app: flask.testing.FlaskClient) -> None:
    before = sample("jobrules_webhook_injections_applied_total", injection="tracing")
    app.post(MUTATE, data=review(request(dryRun=True)))
    assert sample("jobrules_webhook_injections_applied_total", injection="tracing") == before
    app.post(MUTATE, data=review(request()))
    assert sample("jobrules_webhook_injections_applied_total", injection="tracing") == before + 1


def test_rule_errors_are_counted_by_injection(app: flask.testing.FlaskClient) -> None:
    before = sample("jobrules_webhook_rule_errors_total", injection="wrapper")
    _policy(app)
    assert sample("jobrules_webhook_rule_errors_total", injection="wrapper") == before + 1


def test_the_served_plan_is_published(plan_file: Path) -> None:
    c = client(plan_file)
    first = planlib.load_file(plan_file).digest
    assert sample("jobrules_plan_info", digest=first, plan_version="1") == 1
    write_plan(plan_file, plan_data("Fail"))
    _policy(c)
    second = planlib.load_file(plan_file).digest
    assert sample("jobrules_plan_info", digest=second, plan_version="1") == 1
    assert sample("jobrules_plan_info", digest=first, plan_version="1") == 0


def test_a_namespace_selector_entry_applies_only_its_injections(tmp_path: Path) -> None:
    """The entry for a namespace selector serves the injections opted into by it; the plain path
    serves the others; an entry the plan does not have is a 404."""
    from runtime import registration

    data = plan_data()
    data["injections"].append(
        {"name": "opted-in", "span": data["injections"][0]["span"], "kinds": ["batchjob"],
         "match": {"op": "namespaceLabel", "key": "inject", "values": ["yes"], "negate": False},
         "completionContainers": None, "ops": [
             {"op": "annotate", "span": data["injections"][0]["span"], "key": "example.com/in",
              "value": ["1"]}]})
    c = client(write_plan(tmp_path / "plan.json", data))
    entry = registration.entry_id("inject=yes")

    def applied(path: str) -> list[str]:
        response = c.post(path, data=review(request()), content_type="application/json")
        assert response.status_code == 200
        return [w.split("injected ")[1].split(" ")[0] for w in response.get_json()["response"]["warnings"]]

    assert "opted-in" not in applied(MUTATE)
    assert applied(f"{MUTATE}/{entry}") == ["opted-in"]
    unknown = c.post(f"{MUTATE}/ns-0000000000", data=review(request()))
    assert unknown.status_code == 404 and set(unknown.get_json()) == {"error"}
