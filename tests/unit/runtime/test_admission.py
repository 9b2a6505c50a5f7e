"""runtime.admission: every answer the pod webhook gives, as tables over decoded requests."""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any

import jsonpatch
import pytest

from runtime import admission, mutator
from runtime import plan as planlib

from tests.unit.runtime.reviews import PLAN, PLAN_CLOSED, RULES, owner, plan_data, pod, request, review


def decide(req: dict[str, Any], plan: admission.Injector = PLAN) -> admission.Decision:
    decision = admission.answer(plan, admission.decode(review(req)))
    json.loads(admission.encode(decision.review))  # always encodable
    return decision


def patch_of(decision: admission.Decision) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(decision.review["response"]["patch"]))


def patched(req: dict[str, Any], decision: admission.Decision) -> dict[str, Any]:
    """Apply with an independent RFC 6902 implementation, as the API server would."""
    return jsonpatch.apply_patch(req["object"], patch_of(decision))


# ---------------------------------------------------------------------------------------------
# decode: what is not an AdmissionReview v1 request is a BadReview (HTTP 400)


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _without(key: str) -> bytes:
    req = request()
    del req[key]
    return review(req)


@pytest.mark.parametrize("body, message", [
    (b"", "not JSON"),
    (b"{", "not JSON"),
    (b"\xff\xfe\x00garbage", "not JSON"),
    (b'{"apiVersion": NaN}', "not JSON"),
    (b"1" * 5000, "not JSON"),                      # beyond int string conversion limits
    (_nested(100_000), "not JSON"),                 # recursion
    (b"[]", "not a JSON object"),
    (b'"AdmissionReview"', "not a JSON object"),
    (b"null", "not a JSON object"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}',
     "expected apiVersion admission.k8s.io/v1"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "ConversionReview", "request": {"uid": "x"}}',
     "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview"),
    (b'{"kind": "AdmissionReview", "request": {"uid": "x"}}', "expected apiVersion"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request: expected an object"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}',
     "request: expected an object"),
    (_without("uid"), "request.uid"),
    (review(request(uid="")), "request.uid"),
    (review(request(uid=42)), "request.uid"),
    (_without("object"), "request.object"),
    (review(request(obj=[])), "request.object"),
    (review(request(obj="pod")), "request.object"),
], ids=lambda v: v[:40].decode(errors="replace") if isinstance(v, bytes) else None)
def test_decode_rejects_what_is_not_a_v1_review(body: bytes, message: str) -> None:
    with pytest.raises(admission.BadReview, match=re.escape(message)):
        admission.decode(body)


def test_decode_accepts_a_review_with_unknown_fields() -> None:
    body = json.loads(review(request()))
    body["future"] = {"x": 1}
    assert admission.decode(json.dumps(body).encode())["uid"] == request()["uid"]


def test_decode_can_skip_what_the_mutator_does_not_read() -> None:
    req = request(pod("main"))
    req["object"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    whole = admission.decode(review(req))
    view = admission.decode(review(req), PLAN)
    assert whole["object"] == req["object"]
    meta = copy.deepcopy(req["object"]["metadata"])
    del meta["ownerReferences"][0]["blockOwnerDeletion"]
    assert view["object"] == {"metadata": meta,
                              "spec": {"containers": [{"name": "main",
                                                       "command": ["sh", "-c", "true"]}]}}
    assert {k: v for k, v in view.items() if k != "object"} == \
        {k: whole[k] for k in ("uid", "kind", "namespace", "operation", "dryRun")}


@pytest.mark.parametrize("change", [
    lambda req: req["object"]["spec"]["containers"][0].update(env={"A": "1"}),   # not a list
    lambda req: req["object"]["metadata"]["labels"].update(app=7),               # not a string
    lambda req: req["object"]["metadata"].update(name="caf\u00e9"),              # not ASCII
], ids=["env-object", "label-number", "unicode"])
def test_decode_takes_the_whole_pod_when_the_view_does_not_fit(change: Any) -> None:
    req = request(pod("main"))
    req["object"]["spec"]["containers"][0]["image"] = "kept when whole"
    change(req)
    body = json.dumps({"apiVersion": admission.API_VERSION, "kind": admission.KIND,
                       "request": req}, ensure_ascii=False).encode()
    assert admission.decode(body, PLAN)["object"] == req["object"]


@pytest.mark.parametrize("body, message", [
    (b"", "not JSON"),
    (b'{"apiVersion": NaN}', "not JSON"),
    (_nested(100_000), "not JSON"),
    (b"[]", "not a JSON object"),
    (review(request(uid=42)), "request.uid"),
    (review(request(obj="pod")), "request.object"),
], ids=lambda v: v[:40].decode(errors="replace") if isinstance(v, bytes) else None)
def test_decode_rejects_as_well_when_it_may_skip(body: bytes, message: str) -> None:
    with pytest.raises(admission.BadReview, match=re.escape(message)):
        admission.decode(body, PLAN)


# ---------------------------------------------------------------------------------------------
# Requests that are not a pod CREATE: allowed as they are


@pytest.mark.parametrize("fields", [
    {"operation": "UPDATE"},
    {"operation": "DELETE", "object": None},
    {"operation": "CONNECT", "object": None},
    {"operation": 7},
    {"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}, "object": {"data": {}}},
    {"kind": {"group": "apps", "version": "v1", "kind": "Pod"}},
    {"kind": "Pod"},
    {"subResource": "ephemeralcontainers"},
], ids=str)
def test_other_requests_are_allowed_untouched(fields: dict[str, Any]) -> None:
    req = request(**fields)
    decision = decide(req)
    assert decision.result == "skipped"
    assert decision.review == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": {"uid": req["uid"], "allowed": True}}


# ---------------------------------------------------------------------------------------------
# Pod CREATE


def test_a_job_pod_gets_the_mutators_patch_base64_encoded() -> None:
    req = request()
    decision = decide(req)
    response = decision.review["response"]
    assert decision.result == "patched" and decision.applied == ("tracing", "team-a-only")
    assert response["uid"] == req["uid"] and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    expected = mutator.mutate(PLAN, req["object"], None, "team-a")
    assert patch_of(decision) == list(expected.patch)
    result = patched(req, decision)
    assert [c["name"] for c in result["spec"]["initContainers"]] == ["agent"]
    assert result["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    assert result["metadata"]["annotations"]["example.com/traced"] == "yes"


def test_review_envelope_is_echoed() -> None:
    decision = decide(request())
    assert decision.review["apiVersion"] == "admission.k8s.io/v1"
    assert decision.review["kind"] == "AdmissionReview"
    assert "request" not in decision.review


def test_warnings_and_audit_annotations_name_the_rules() -> None:
    response = decide(request()).review["response"]
    assert response["warnings"] == [
        f"jobrules: injected tracing ({RULES}:10:5)",
        f"jobrules: injected team-a-only ({RULES}:30:5)",
    ]
    assert response["auditAnnotations"] == {"injected": "tracing,team-a-only", "plan": "d" * 12}


@pytest.mark.parametrize("namespace, pod_namespace, env, team_label", [
    ("team-a", None, "team-a", True),        # controller-made pods carry no namespace
    ("team-b", None, "team-b", False),
    ("team-b", "team-a", "team-b", False),   # the request's namespace is authoritative
    (3, "team-b", "team-b", False),          # not a string: the pod's own
], ids=["from-request", "other-namespace", "request-wins", "not-a-string"])
def test_namespace_comes_from_the_request(namespace: str, pod_namespace: str | None, env: str,
                                          team_label: bool) -> None:
    req = request(pod(namespace=pod_namespace), namespace=namespace)
    result = patched(req, decide(req))
    main = result["spec"]["containers"][0]
    assert {"name": "POD_NAMESPACE", "value": env} in main["env"]
    assert ("example.com/team" in result["metadata"].get("labels", {})) is team_label


def test_a_pod_without_name_or_namespace_is_patched() -> None:
    req = request(pod(), namespace="team-a", name="")
    assert "name" not in req["object"]["metadata"]
    assert decide(req).result == "patched"


@pytest.mark.parametrize("owners", [
    [],
    [owner("apps/v1", "ReplicaSet")],
    [owner("batch/v1beta1", "Job")],
    [owner("argoproj.io/v1alpha1", "WorkflowTemplate")],
], ids=["no-owner", "replicaset", "other-version", "other-kind"])
def test_pods_of_undeclared_kinds_are_untouched(owners: list[dict[str, Any]]) -> None:
    req = request(pod(owners=owners))
    decision = decide(req)
    assert decision.result == "unchanged"
    assert decision.review["response"] == {"uid": req["uid"], "allowed": True}


def test_argo_pods_get_completion_wiring_on_main_only() -> None:
    req = request(pod("wait", "main", owners=[owner("argoproj.io/v1alpha1", "Workflow", "wf")]))
    decision = decide(req)
    assert decision.applied == ("tracing", "argo-completion")
    result = patched(req, decision)
    wait, main = result["spec"]["containers"]
    assert "env" not in wait
    assert {"name": "DECIDES", "value": "1"} in main["env"]
    assert result["metadata"]["annotations"][mutator.COMPLETION_ANNOTATION] == "main"


def test_an_injected_pod_is_left_as_it_is() -> None:
    """Reinvocation (reinvocationPolicy IfNeeded) sees our own output: nothing more to do."""
    req = request()
    once = patched(req, decide(req))
    again = decide(request(once))
    assert again.result == "unchanged" and again.dry_run is False
    assert "patch" not in again.review["response"]
    assert decide(request(once, dryRun=True)).dry_run is True


def test_dry_run_gets_the_same_answer_and_says_so() -> None:
    wet, dry = decide(request()), decide(request(dryRun=True))
    assert dry.review == wet.review
    assert (wet.dry_run, dry.dry_run) == (False, True)


# ---------------------------------------------------------------------------------------------
# Failures, by failure policy


def _wrapped_pod() -> dict[str, Any]:
    """A pod whose container has no command: the `wrapper` injection cannot wrap it."""
    return pod(owners=[owner("example.com/v1", "Wrapped")], command=False)


def _raise(exc: Exception):
    def mutate(*args: Any, **options: Any) -> mutator.Mutation:
        raise exc
    return mutate


def _not_json(*args: Any, **options: Any) -> mutator.Mutation:
    return mutator.Mutation(({"op": "add", "path": "/spec/x", "value": {1j}},), ("tracing",),
                            "batchjob")


FAILURES = [
    pytest.param(None, f"{RULES}:41:5: injection wrapper: container 'main' has no command",
                 "injection wrapper failed (rules/webhook-test.rules:41:5)", "wrapper", id="rule"),
    pytest.param(_raise(KeyError("spec")), "internal error: KeyError: 'spec'", "internal error", "",
                 id="unexpected-exception"),
    pytest.param(_not_json, "patch of tracing is not JSON: Type is not JSON serializable: set",
                 "internal error", "tracing", id="patch-not-json"),
]


@pytest.mark.parametrize("fake, message, warning, blamed", FAILURES)
def test_fail_open_admits_the_pod_unpatched(monkeypatch: pytest.MonkeyPatch, fake: Any,
                                            message: str, warning: str, blamed: str) -> None:
    if fake is not None:
        monkeypatch.setattr(mutator, "mutate", fake)
    req = request(_wrapped_pod())
    decision = decide(req)
    response = decision.review["response"]
    assert decision.result == "failed-open"
    assert response["allowed"] is True and "patch" not in response and "patchType" not in response
    assert response["warnings"] == [f"jobrules: {warning}; pod admitted without injection"]
    assert response["auditAnnotations"]["error"].startswith(message)
    assert [f.injection for f in decision.failures] == [blamed]


@pytest.mark.parametrize("fake, message, warning, blamed", FAILURES)
def test_fail_closed_denies_with_the_rule_cited(monkeypatch: pytest.MonkeyPatch, fake: Any,
                                                message: str, warning: str, blamed: str) -> None:
    if fake is not None:
        monkeypatch.setattr(mutator, "mutate", fake)
    req = request(_wrapped_pod())
    decision = decide(req, PLAN_CLOSED)
    response = decision.review["response"]
    assert decision.result == "failed-closed"
    assert response["uid"] == req["uid"] and response["allowed"] is False
    assert "patch" not in response and "warnings" not in response
    assert response["status"]["code"] == 500
    assert response["status"]["reason"] == "InternalError"
    assert response["status"]["message"].startswith(f"jobrules: {message}")


def _beside_the_wrapper(failure_policy: str) -> admission.Injector:
    """The wrapper between two injections of its kind; its own annotation comes before the wrap
    that fails, so a failure that left its draft behind would show it."""
    from tests.unit.runtime.reviews import span

    data = plan_data(failure_policy)
    annotate = lambda name, line: {"name": name, "span": span(line), "kinds": ["wrapped"],
                                   "match": None, "completionContainers": None, "ops": [
        {"op": "annotate", "span": span(line + 1), "key": f"example.com/{name}", "value": ["on"]}]}
    wrapper = next(i for i in data["injections"] if i["name"] == "wrapper")
    wrapper["ops"].insert(0, {"op": "annotate", "span": span(42), "key": "example.com/wrapped",
                              "value": ["yes"]})
    data["injections"] = [annotate("metrics", 36), *data["injections"], annotate("logs", 50)]
    return admission.prepare(planlib.load(data, digest="f" * 64))


def test_fail_open_an_injection_that_fails_costs_only_itself() -> None:
    decision = decide(request(_wrapped_pod()), _beside_the_wrapper("Ignore"))
    response = decision.review["response"]
    assert decision.result == "patched" and decision.applied == ("metrics", "logs")
    annotations = patched(request(_wrapped_pod()), decision)["metadata"]["annotations"]
    assert annotations["example.com/metrics"] == annotations["example.com/logs"] == "on"
    assert "example.com/wrapped" not in annotations   # what it drafted before failing goes too
    assert "wrapper" not in annotations[mutator.RECORD_ANNOTATION]
    assert response["warnings"][-1] == ("jobrules: injection wrapper failed "
                                        "(rules/webhook-test.rules:41:5); the others injected")
    assert "injection wrapper: container 'main' has no command" in response["auditAnnotations"]["error"]
    assert [f.injection for f in decision.failures] == ["wrapper"]


def test_fail_closed_an_injection_that_fails_refuses_the_pod_whole() -> None:
    decision = decide(request(_wrapped_pod()), _beside_the_wrapper("Fail"))
    assert decision.result == "failed-closed" and decision.applied == ()
    assert "injection wrapper" in decision.review["response"]["status"]["message"]


def test_the_mutator_leaves_a_failing_injection_out_only_when_asked() -> None:
    injector = _beside_the_wrapper("Ignore")
    with pytest.raises(mutator.MutationError, match="injection wrapper"):
        mutator.mutate(injector, _wrapped_pod(), namespace="ns")
    mutation = mutator.mutate(injector, _wrapped_pod(), namespace="ns", isolate=True)
    assert mutation.applied == ("metrics", "logs")
    assert [err.injection for err in mutation.failed] == ["wrapper"]


def test_messages_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mutator, "mutate", _raise(ValueError("x" * 100_000)))
    closed = decide(request(), PLAN_CLOSED).review["response"]
    opened = decide(request()).review["response"]
    assert len(closed["status"]["message"]) <= admission.MESSAGE_MAX + len("jobrules: ")
    assert all(len(v) <= admission.AUDIT_VALUE_MAX for v in opened["auditAnnotations"].values())
    assert all(len(w) <= admission.WARNING_MAX for w in opened["warnings"])


def test_warnings_are_single_printable_lines() -> None:
    data = plan_data()
    data["injections"][0]["name"] = "trac\ning\x00"
    decision = decide(request(), admission.prepare(planlib.load(data, digest="e" * 64)))
    assert all(w.isprintable() for w in decision.review["response"]["warnings"])


AUDIT_KEY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


@pytest.mark.parametrize("plan, obj", [
    (PLAN, pod()), (PLAN, _wrapped_pod()), (PLAN_CLOSED, pod()),
], ids=["patched", "failed-open", "closed-plan-patched"])
def test_audit_annotation_keys_are_plain_names(plan: admission.Injector, obj: dict[str, Any]) -> None:
    annotations = decide(request(obj), plan).review["response"]["auditAnnotations"]
    assert annotations and all(AUDIT_KEY.fullmatch(key) for key in annotations)


def test_the_received_pod_is_not_modified() -> None:
    req = request()
    before = copy.deepcopy(req)
    decide(req)
    assert req == before


# ---------------------------------------------------------------------------------------------
# The exact words of a refusal, and bounds


@pytest.mark.parametrize("body, message", [
    (b"[]", "body is not a JSON object"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}', "request: expected an object"),
    (review(request(uid="")), "request.uid: expected a non-empty string"),
    (review(request(obj=[])), "request.object: expected the pod being created"),
], ids=["body", "request", "uid", "object"])
def test_a_bad_review_says_exactly_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(admission.BadReview) as err:
        admission.decode(body)
    assert str(err.value) == message


def test_texts_are_bounded_to_their_limit_with_an_ellipsis() -> None:
    assert admission._bounded("abc", 3) == "abc"
    assert admission._bounded("abcd", 3) == "ab…" and len(admission._bounded("x" * 5000, 1024)) == 1024


def test_a_warning_has_no_unprintable_characters() -> None:
    assert admission._warning("a\nb\tc") == admission._warning("a b c")
    assert admission._warning("a\nb").endswith("a b") and admission._warning("a\nb").isprintable()


@pytest.mark.parametrize("fields", [{"operation": "UPDATE"}, {}], ids=["skipped", "answered"])
def test_a_dry_run_is_said_whatever_the_answer(fields: dict[str, Any]) -> None:
    assert decide(request(**fields, dryRun=True)).dry_run is True
    assert decide(request(**fields)).dry_run is False


@pytest.mark.parametrize("fake, message, warning, blamed", FAILURES)
@pytest.mark.parametrize("plan", [PLAN, PLAN_CLOSED], ids=["open", "closed"])
def test_a_failure_is_handed_to_the_shell_whole(monkeypatch: pytest.MonkeyPatch, plan: Any,
                                                fake: Any, message: str, warning: str,
                                                blamed: str) -> None:
    """What the shell logs and counts: the one failure with its exception, whether a rule failed
    (expected) or a bug (a traceback), and whether the API server persists the pod."""
    if fake is not None:
        monkeypatch.setattr(mutator, "mutate", fake)
    for dry_run in (True, False):
        decision = decide(request(_wrapped_pod(), dryRun=dry_run), plan)
        assert decision.dry_run is dry_run and decision.applied == ()
        [failure] = decision.failures
        assert (failure.injection, failure.message.startswith(message), failure.expected) == (
            blamed, True, fake is None)
        assert isinstance(failure.exception, mutator.MutationError if fake is None else Exception)
        assert failure.message == str(failure.exception) if fake is None else True


def test_fail_open_names_every_injection_left_out() -> None:
    from tests.unit.runtime.reviews import span

    data = plan_data("Ignore")
    wrapper = next(i for i in data["injections"] if i["name"] == "wrapper")
    again = copy.deepcopy(wrapper)
    again["name"], again["span"] = "rewrapper", span(60)
    again["ops"][0]["span"] = span(61)
    data["injections"].append(again)
    decision = decide(request(_wrapped_pod()), admission.prepare(planlib.load(data, digest="f" * 64)))
    assert decision.result == "failed-open"
    assert [f.injection for f in decision.failures] == ["wrapper", "rewrapper"]
    response = decision.review["response"]
    assert response["uid"] == request()["uid"]
    assert response["auditAnnotations"] == {
        "error": "; ".join(f.message for f in decision.failures), "plan": "f" * 12}
    said = ("jobrules: injection wrapper failed (rules/webhook-test.rules:41:5), injection "
            "rewrapper failed (rules/webhook-test.rules:61:5); pod admitted without injection")
    assert decision.review["response"]["warnings"] == [said[:admission.WARNING_MAX - 1] + "…"]


def test_fail_open_answers_the_request_it_was_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mutator, "mutate", _raise(KeyError("spec")))
    req = request(_wrapped_pod())
    response = decide(req).review["response"]
    assert response["uid"] == req["uid"]
    assert response["auditAnnotations"]["plan"] == PLAN.plan.digest[:12]


def test_a_patch_that_is_not_json_blames_every_injection_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mutator, "mutate", lambda *a, **k: mutator.Mutation(
        ({"op": "add", "path": "/spec/x", "value": {1j}},), ("tracing", "metrics"), "batchjob"))
    [failure] = decide(request(_wrapped_pod())).failures
    assert failure.injection == "tracing, metrics"


def test_fail_open_with_others_injected_audits_every_failure() -> None:
    from tests.unit.runtime.reviews import span

    data = plan_data("Ignore")
    wrapper = next(i for i in data["injections"] if i["name"] == "wrapper")
    again = copy.deepcopy(wrapper)
    again["name"], again["span"] = "rewrapper", span(60)
    data["injections"].append(again)
    data["injections"].append({"name": "metrics", "span": span(70), "kinds": ["wrapped"],
                               "match": None, "completionContainers": None, "ops": [
        {"op": "annotate", "span": span(71), "key": "example.com/metrics", "value": ["on"]}]})
    decision = decide(request(_wrapped_pod()), admission.prepare(planlib.load(data, digest="f" * 64)))
    assert decision.result == "patched" and decision.applied == ("metrics",)
    assert decision.review["response"]["auditAnnotations"]["error"] == "; ".join(
        f.message for f in decision.failures)
    assert [f.injection for f in decision.failures] == ["wrapper", "rewrapper"]
