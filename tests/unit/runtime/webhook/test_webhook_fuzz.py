"""Fuzzing the webhook's request path: whatever arrives, the answer is a valid AdmissionReview
(or a short 4xx when the body is not one), never a 5xx and never a traceback."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import flask.testing
import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import admission, mutator
from runtime import plan as planlib
from runtime.webhook import app as webhook
from runtime.webhook.settings import Settings
from tests.unit.runtime.reviews import PLAN, owner, plan_data, pod, request, review

MUTATE = "/mutate-pods"
FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = (st.none() | st.booleans() | st.integers() | st.text(max_size=20)
           | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@pytest.fixture(scope="module", params=["Ignore", "Fail"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> flask.testing.FlaskClient:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(plan_data(request.param)), encoding="utf-8")
    return webhook.create_app(Settings(str(path), max_body=64 * 1024)).test_client()


VALID = [
    request(),
    request(pod("wait", "main", owners=[owner("argoproj.io/v1alpha1", "Workflow", "wf")])),
    request(pod(owners=[owner("example.com/v1", "Wrapped")], command=False)),
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, the root excluded."""
    found: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append(prefix + (key,))
        found.extend(_paths(child, prefix + (key,)))
    return found


@st.composite
def mutated_reviews(draw: st.DrawFn) -> bytes:
    """A valid review with one place replaced by an arbitrary value, or removed."""
    doc = json.loads(review(draw(st.sampled_from(VALID))))
    path = draw(st.sampled_from(_paths(doc)))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()):
        parent[path[-1]] = draw(json_values)
    else:
        del parent[path[-1]]
    return json.dumps(doc).encode()


containers = st.lists(st.fixed_dictionaries(
    {"name": st.sampled_from(["main", "wait", "agent"]) | json_values},
    optional={"command": st.lists(st.text(max_size=5), max_size=2) | json_values,
              "args": json_values, "env": st.lists(json_values, max_size=2) | json_values,
              "volumeMounts": json_values, "image": json_values, "resources": json_values},
), max_size=3) | json_values

owner_refs = st.lists(st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["batch/v1", "argoproj.io/v1alpha1", "example.com/v1"]) | json_values,
    "kind": st.sampled_from(["Job", "Workflow", "Wrapped"]) | json_values,
    "name": st.text(max_size=8) | json_values,
    "uid": st.text(max_size=8),
}, optional={"controller": json_values}), max_size=2) | json_values

pods = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"ownerReferences": owner_refs}, optional={
        "labels": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3) | json_values,
        "annotations": st.dictionaries(st.text(max_size=12), st.text(max_size=8), max_size=3) | json_values,
        "namespace": json_values, "generateName": json_values,
    }) | json_values,
}, optional={
    "spec": st.fixed_dictionaries({}, optional={
        "containers": containers, "initContainers": containers, "volumes": json_values,
        "nodeSelector": json_values,
    }) | json_values,
    "status": json_values,
})


@st.composite
def random_pod_reviews(draw: st.DrawFn) -> bytes:
    return review(request(draw(pods), namespace=draw(st.text(max_size=8) | json_values),
                          dryRun=draw(json_values)))


@st.composite
def truncated_reviews(draw: st.DrawFn) -> bytes:
    body = review(draw(st.sampled_from(VALID)))
    return body[: draw(st.integers(0, len(body) - 1))]


def check(app: flask.testing.FlaskClient, body: bytes) -> None:
    response = app.post(MUTATE, data=body, content_type="application/json")
    check_answer(body, response.status_code, response.data)


# A refusal is a rule that cannot apply to this pod (fail-closed), citing it: never a bug. The
# catch-all's answer to a bug says "internal error" (in a refusal, a warning or the audit
# annotation): the fuzz fails on it, whatever the failure policy made of it.
RULE_REFUSAL = re.compile(r"jobrules: \S+:\d+:\d+: injection \S+: ")


def check_answer(body: bytes, status: int, data: bytes) -> None:
    """The answer to `body` is a review for it, or a short 4xx; never a 5xx, a traceback, or
    the catch-all's answer to a bug (allowed or not)."""
    assert b"Traceback" not in data
    assert b"internal error" not in data, data
    if status != 200:
        assert status in (400, 413), data
        assert set(json.loads(data)) == {"error"}
        return
    sent = json.loads(body)
    answer = json.loads(data)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    result = answer["response"]
    assert result["uid"] == sent["request"]["uid"]
    assert isinstance(result["allowed"], bool)
    if not result["allowed"]:
        assert result["status"]["code"] == 500, result   # a rule refusing, as documented
        assert RULE_REFUSAL.match(result["status"]["message"]), result
    if "patch" in result:
        assert result["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(result["patch"], validate=True))
        jsonpatch.apply_patch(sent["request"]["object"], ops)
    for warning in result.get("warnings", []):
        assert isinstance(warning, str) and len(warning) <= 120


@FUZZ
@given(body=st.binary(max_size=512) | json_values.map(lambda v: json.dumps(v).encode())
       | truncated_reviews())
def test_arbitrary_bodies(app: flask.testing.FlaskClient, body: bytes) -> None:
    check(app, body)


@FUZZ
@given(body=mutated_reviews() | random_pod_reviews())
def test_reviews_with_wrong_types_anywhere(app: flask.testing.FlaskClient, body: bytes) -> None:
    check(app, body)


@st.composite
def unicode_reviews(draw: st.DrawFn) -> bytes:
    """A review as UTF-8 rather than ASCII with escapes (the API server sends either)."""
    return json.dumps(json.loads(draw(random_pod_reviews())), ensure_ascii=False).encode()


def _with_storage() -> admission.Injector:
    """PLAN and an injection that reads volume names and mount paths too."""
    data = plan_data()
    at = data["injections"][0]["ops"][0]["span"]
    data["injections"].append({
        "name": "scratch", "span": at, "kinds": ["batchjob", "workflow"], "match": None,
        "completionContainers": None, "ops": [
            {"op": "volume", "span": at, "name": "scratch", "source": {"emptyDir": {}}},
            {"op": "mount", "span": at, "volume": "scratch", "path": "/scratch",
             "containers": {"select": "all", "names": []}},
            {"op": "sidecar", "span": at, "name": "stager", "native": False, "image": ["s:1"],
             "command": None, "args": [["--to"], ["/scratch"]], "env": [],
             "mounts": [{"volume": "scratch", "path": "/scratch"}]}]})
    return admission.prepare(planlib.load(data, digest="e" * 64))


PLANS = [PLAN, _with_storage()]


def _outcome(plan: admission.Injector, body: bytes, whole: bool) -> Any:
    try:
        decision = admission.answer(plan, admission.decode(body, None if whole else plan))
    except admission.BadReview as err:
        return str(err)
    failures = [(f.injection, f.message) for f in decision.failures]
    return decision.review, decision.result, decision.applied, decision.dry_run, failures


@FUZZ
@given(body=mutated_reviews() | random_pod_reviews() | truncated_reviews() | unicode_reviews())
def test_the_pod_view_answers_as_the_whole_pod(body: bytes) -> None:
    for plan in PLANS:
        assert not plan.reads_pod
        assert _outcome(plan, body, whole=False) == _outcome(plan, body, whole=True)


@pytest.mark.parametrize("broken", [
    RuntimeError("a bug"), KeyError("spec"),
], ids=["runtime-error", "key-error"])
def test_the_fuzz_fails_on_the_answer_to_a_bug(app: flask.testing.FlaskClient,
                                              monkeypatch: pytest.MonkeyPatch,
                                              broken: Exception) -> None:
    """The check is not blind to the catch-all: with a mutator that always raises, every valid
    review's answer fails it, whatever the failure policy made of the bug."""
    def mutate(*args: Any, **options: Any) -> mutator.Mutation:
        raise broken
    monkeypatch.setattr(mutator, "mutate", mutate)
    for sent in VALID[:2]:
        with pytest.raises(AssertionError):
            check(app, review(sent))
