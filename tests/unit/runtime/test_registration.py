"""runtime.registration and `rulec webhook-config`: the MutatingWebhookConfiguration of a plan."""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulec.commands import webhook_config
from runtime import plan as planlib
from runtime import registration
from tests.unit.runtime.reviews import kind, plan_data

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
    assert config["metadata"]["name"] == "0-jobrules"   # sorts before Istio's injector
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
    webhook_config.register(parser.add_subparsers())
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
    from rulec.commands import cli

    assert cli.main(["webhook-config", "--plan", str(plan_file), "--service", "jobrules/webhook"]) == 0
    assert only_webhook(yaml.safe_load(capsys.readouterr().out))["clientConfig"]["service"]["name"] == "webhook"
    assert cli.main(["webhook-config", "--plan", str(plan_file)]) == 2   # no target: usage error


# ---------------------------------------------------------------------------------------------
# Namespace opt-in and served versions

KATIB = """
job tfjob: kubeflow.org/v1 TFJob { succeeded when all pods succeeded }
job pipelinerun: tekton.dev/v1, v1beta1 PipelineRun { succeeded when all pods succeeded }

inject "everywhere" into pods of pipelinerun { annotate "example.com/a" = "1" }
inject "collector" into pods of tfjob
        where namespace label "katib.kubeflow.org/metrics-collector-injection" = "enabled"
              and label "katib.kubeflow.org/trial" exists {
    annotate "sidecar.istio.io/inject" = "false"
}
inject "collector-too" into pods of pipelinerun, tfjob
        where label "x" exists and namespace label "katib.kubeflow.org/metrics-collector-injection" = "enabled" {
    annotate "example.com/b" = "2"
}
inject "teams" into pods of tfjob where namespace label "team" in ["a", "b"] and not namespace label "legacy" {
    annotate "example.com/c" = "3"
}
"""


def compiled(text: str) -> planlib.Plan:
    from rulec import api
    from rulec.source import SourceFile

    build = api.build_sources([SourceFile.from_text("katib.rules", text)])
    assert build.plan is not None, build.diagnostics
    return planlib.load(build.plan)


def test_one_webhook_entry_per_namespace_selector() -> None:
    config = registration.render(compiled(KATIB), registration.Url("https://h:8443/mutate-pods"))
    hooks = {h["name"]: h for h in config["webhooks"]}
    katib = registration.entry_id("katib.kubeflow.org/metrics-collector-injection=enabled")
    teams = registration.entry_id("team in (a,b),!legacy")
    assert list(hooks) == ["pods.jobrules.dev", f"{katib}.pods.jobrules.dev", f"{teams}.pods.jobrules.dev"]
    base, opt_in = hooks["pods.jobrules.dev"], hooks[f"{katib}.pods.jobrules.dev"]
    assert base["clientConfig"]["url"] == "https://h:8443/mutate-pods"
    assert opt_in["clientConfig"]["url"] == f"https://h:8443/mutate-pods/{katib}"
    assert opt_in["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
        {"key": "katib.kubeflow.org/metrics-collector-injection", "operator": "In",
         "values": ["enabled"]}]
    assert hooks[f"{teams}.pods.jobrules.dev"]["namespaceSelector"]["matchExpressions"][1:] == [
        {"key": "team", "operator": "In", "values": ["a", "b"]},
        {"key": "legacy", "operator": "DoesNotExist"}]
    # each entry is called only for the owners its own injections name, every served version
    assert "tekton.dev/v1beta1" in base["matchConditions"][0]["expression"]
    assert "kubeflow.org/v1" not in base["matchConditions"][0]["expression"]
    assert "tekton.dev/v1beta1" in opt_in["matchConditions"][0]["expression"]
    assert "kubeflow.org/v1" in opt_in["matchConditions"][0]["expression"]


def test_a_service_entry_path_is_under_the_service_path() -> None:
    config = registration.render(compiled(KATIB), registration.parse_service("ns/hook:8443/hooks"))
    paths = [h["clientConfig"]["service"]["path"] for h in config["webhooks"]]
    assert paths[0] == "/hooks" and all(p.startswith("/hooks/ns-") for p in paths[1:])
