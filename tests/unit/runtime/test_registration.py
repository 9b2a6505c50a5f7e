"""runtime.registration and `rulec webhook-config`: the MutatingWebhookConfiguration of a plan."""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulec import webhookcmd
from runtime import plan as planlib
from runtime import registration
from reviews import kind, plan_data

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def load(data: dict[str, Any]) -> planlib.Plan:
    return planlib.load(data, digest="a" * 64)


PLAN = load(plan_data("Fail"))


def only_webhook(config: dict[str, Any]) -> dict[str, Any]:
    [hook] = config["webhooks"]
    return hook


def test_url_registration() -> None:
    config = registration.render(PLAN, registration.Url("https://127.0.0.1:8443/mutate-pods"), CA)
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert config["metadata"]["name"] == "jobrules"
    assert config["metadata"]["annotations"] == {"jobrules.dev/plan-digest": "a" * 64}
    hook = only_webhook(config)
    assert hook["name"] == "pods.jobrules.dev"
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:8443/mutate-pods",
                                    "caBundle": base64.b64encode(CA).decode()}
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["namespaceSelector"] == {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 5)


def test_a_label_on_the_pod_opts_it_out() -> None:
    hook = only_webhook(registration.render(PLAN, registration.Url("https://h/")))
    assert hook["objectSelector"] == {"matchExpressions": [
        {"key": "jobrules.dev/skip", "operator": "DoesNotExist"}]}


def test_annotations_join_the_plan_digest() -> None:
    config = registration.render(PLAN, registration.Url("https://h/"),
                                 annotations={"cert-manager.io/inject-ca-from": "ns/cert"})
    assert config["metadata"]["annotations"] == {"jobrules.dev/plan-digest": "a" * 64,
                                                 "cert-manager.io/inject-ca-from": "ns/cert"}


def test_service_registration_excludes_its_own_namespace() -> None:
    target = registration.parse_service("jobrules-system/webhook")
    hook = only_webhook(registration.render(PLAN, target, None, exclude_namespaces=["infra", "kube-system"]))
    assert hook["clientConfig"] == {"service": {"namespace": "jobrules-system", "name": "webhook",
                                                "port": 443, "path": "/mutate-pods"}}
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "infra", "jobrules-system", "kube-system"]


@pytest.mark.parametrize("text, expected", [
    ("ns/svc", registration.Service("ns", "svc", 443, "/mutate-pods")),
    ("ns/svc:8443", registration.Service("ns", "svc", 8443, "/mutate-pods")),
    ("ns/svc/hooks/pods", registration.Service("ns", "svc", 443, "/hooks/pods")),
    ("ns/svc:9443/x", registration.Service("ns", "svc", 9443, "/x")),
])
def test_parse_service(text: str, expected: registration.Service) -> None:
    assert registration.parse_service(text) == expected


@pytest.mark.parametrize("text", ["svc", "ns/", "/svc", "NS/svc", "ns/svc:", "ns/svc:99999",
                                  "ns/svc:0", "ns/svc:abc", "ns/svc path"])
def test_parse_service_rejects(text: str) -> None:
    with pytest.raises(registration.RegistrationError, match="namespace/name|out of range"):
        registration.parse_service(text)


def test_match_condition_names_only_kinds_with_injections() -> None:
    data = plan_data()
    data["kinds"].append(kind("tfjob", "kubeflow.org/v1", "TFJob"))
    expression = only_webhook(registration.render(load(data), registration.Url("https://h/")))[
        "matchConditions"][0]["expression"]
    assert expression == (
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
        "(r.apiVersion == 'batch/v1' && r.kind == 'Job') || "
        "(r.apiVersion == 'argoproj.io/v1alpha1' && r.kind == 'Workflow') || "
        "(r.apiVersion == 'example.com/v1' && r.kind == 'Wrapped'))")


def test_cel_strings_are_escaped() -> None:
    assert "r.kind == 'It\\'s\\\\'" in registration.match_condition([("x/v1", "It's\\")])


def test_a_plan_without_injections_registers_no_webhook() -> None:
    data = plan_data()
    data["injections"] = []
    assert registration.render(load(data), registration.Url("https://h/"))["webhooks"] == []


@pytest.mark.parametrize("timeout", [0, 31])
def test_timeouts_the_api_server_refuses(timeout: int) -> None:
    data = plan_data()
    data["webhook"]["timeoutSeconds"] = timeout
    with pytest.raises(registration.RegistrationError, match="1 to 30 seconds"):
        registration.render(load(data), registration.Url("https://h/"))


def test_plain_http_urls_are_refused() -> None:
    with pytest.raises(registration.RegistrationError, match="https only"):
        registration.render(PLAN, registration.Url("http://h/"))


# ---------------------------------------------------------------------------------------------
# The CLI subcommand


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="rulec")
    webhookcmd.register(parser.add_subparsers())
    args = parser.parse_args(["webhook-config", *argv])
    return args.func(args)


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_data()), encoding="utf-8")
    return path


def test_cli_prints_yaml(plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(CA)
    assert run("--plan", str(plan_file), "--service", "jobrules/webhook:8443", "--ca-bundle", str(ca),
               "--namespace-exclude", "monitoring") == 0
    config = yaml.safe_load(capsys.readouterr().out)
    hook = only_webhook(config)
    assert hook["clientConfig"]["service"]["port"] == 8443
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == CA
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "jobrules", "kube-system", "monitoring"]
    assert hook["failurePolicy"] == "Ignore"


RULES = """
job batchjob: batch/v1 Job {
    pods owned
    failed    when <<status.failed > `0`>>
    succeeded when <<status.succeeded > `0`>>
    pending   otherwise
}

inject "trace" into pods of batchjob {
    annotate "example.com/traced" = "yes"
}

webhook failure closed timeout 7s
"""


def test_cli_compiles_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "jobs.rules").write_text(RULES, encoding="utf-8")
    assert run("--rules", str(tmp_path), "--url", "https://127.0.0.1:8443/mutate-pods") == 0
    hook = only_webhook(yaml.safe_load(capsys.readouterr().out))
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 7)
    assert "r.apiVersion == 'batch/v1' && r.kind == 'Job'" in hook["matchConditions"][0]["expression"]


@pytest.mark.parametrize("argv, message", [
    (["--plan", "missing.json", "--url", "https://h/"], "cannot read plan"),
    (["--plan", "PLAN", "--service", "nonsense"], "expected namespace/name"),
    (["--plan", "PLAN", "--url", "http://h/"], "https only"),
    (["--plan", "PLAN", "--url", "https://h/", "--ca-bundle", "missing.pem"], "missing.pem: No such file"),
    (["--rules", "missing.rules", "--url", "https://h/"], "missing.rules"),
])
def test_cli_errors_exit_2_without_traceback(plan_file: Path, capsys: pytest.CaptureFixture[str],
                                             argv: list[str], message: str) -> None:
    argv = [str(plan_file) if a == "PLAN" else a for a in argv]
    assert run(*argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and "Traceback" not in err


def test_rulec_cli_knows_the_subcommand(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rulec import cli

    assert cli.main(["webhook-config", "--plan", str(plan_file), "--service", "jobrules/webhook"]) == 0
    assert only_webhook(yaml.safe_load(capsys.readouterr().out))["clientConfig"]["service"]["name"] == "webhook"
    assert cli.main(["webhook-config", "--plan", str(plan_file)]) == 2   # no target: usage error
