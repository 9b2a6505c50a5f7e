"""AdmissionReview v1 in, AdmissionReview v1 out: every decision of the pod webhook, with no I/O.

`decode` accepts a body only if it is an AdmissionReview v1 request we can answer (anything else
is a BadReview, which the web shell turns into HTTP 400); for a plan whose expressions do not
read the pod, it skips the parts of the pod the mutator does not read. Both take the plan as
`mutator.prepare` made it when it was loaded (`prepare` here), so no request compiles anything. `answer` is total:
whatever the pod or the plan's rules do, it returns a review for the API server, so a
well-formed request never gets a 500. Rule failures follow the plan's failure policy
(docs/webhook.md). The mutator's patch applies to the received pod by construction (see
runtime.mutator.draft; property-tested on random plans and malformed pods), so it is sent as it
is, without being applied here first.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import msgspec
import orjson

from runtime import mutator
from runtime import plan as planlib
from runtime.mutator import Injector
from runtime.span import Span

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
POD = {"group": "", "version": "v1", "kind": "Pod"}

WARNING_MAX = 120        # the API server may truncate longer warnings
AUDIT_VALUE_MAX = 1024   # keep audit events small; the full text is in our log
MESSAGE_MAX = 1024       # bound on a denial message, whatever an exception said
WARNING_PREFIX = "jobrules: "

Result = Literal["patched", "unchanged", "skipped", "failed-open", "failed-closed"]


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class Request(TypedDict, total=False):
    uid: str
    kind: GroupVersionKind
    subResource: str
    name: str
    namespace: str
    operation: str
    object: dict[str, Any]
    dryRun: bool


class Status(TypedDict):
    code: int
    reason: str
    message: str


class Response(TypedDict, total=False):
    uid: str
    allowed: bool
    patchType: Literal["JSONPatch"]
    patch: str
    warnings: list[str]
    auditAnnotations: dict[str, str]
    status: Status


class AdmissionReview(TypedDict, total=False):
    apiVersion: str
    kind: str
    request: Request
    response: Response


class _RequestView(TypedDict, total=False):
    uid: str
    kind: Any   # compared whole to POD: an extra member must stay
    subResource: str
    name: str
    namespace: str
    operation: str
    object: mutator.PodView | None
    dryRun: bool


class _ReviewView(TypedDict, total=False):
    apiVersion: str
    kind: str
    request: _RequestView


# Decodes what the webhook reads of a review, skipping the rest (most of a pod: resources,
# env values, probes, ...) without building it. Roughly half the work of decoding it all.
_VIEW = msgspec.json.Decoder(_ReviewView)


class BadReview(ValueError):
    """A body that is not an AdmissionReview v1 request we could answer."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A rule (or the mutator itself) failing on a pod: what to log and count."""

    injection: str   # "" when no single injection is to blame
    message: str
    exception: BaseException
    expected: bool   # a rule that cannot apply to this pod; else a bug, worth a traceback


@dataclass(frozen=True, slots=True)
class Decision:
    review: AdmissionReview
    result: Result
    applied: tuple[str, ...]   # injections that changed the pod
    dry_run: bool              # the API server will not persist: the shell counts no injections
    failures: tuple[Failure, ...] = ()   # fail-open: each injection left out; else the one


def prepare(plan: planlib.Plan) -> Injector:
    """The plan as `decode` and `answer` take it: made once per plan load."""
    return mutator.prepare(plan)


def load_file(path: str) -> Injector:
    """A plan file, read and prepared (a PlanError when it cannot be used)."""
    return prepare(planlib.load_file(path))


def decode(body: bytes, injector: Injector | None = None) -> Request:
    """The request of an AdmissionReview v1 body, checked as far as answering needs.

    For an injector whose plan does not read the pod (`Injector.reads_pod` false), the pod in it
    has only the fields of mutator.PodView, which is all `answer` needs. The skipped parts are
    checked as JSON, but for numbers out of range (which the API server never sends); a body that
    is not ASCII, or whose other parts do not fit the view, is decoded whole, so it passes or
    fails as it would. Without an injector the pod is decoded whole.
    """
    if injector is not None and not injector.reads_pod and body.isascii():   # which is valid UTF-8: nothing skipped needs decoding
        try:
            review = _VIEW.decode(body)
        except (msgspec.DecodeError, RecursionError):
            pass
        else:
            return _request(review)
    try:
        # strict RFC 8259 UTF-8 JSON, as the API server sends: no NaN, no lone surrogates, at
        # most 1,024 levels deep
        review = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadReview("body is not JSON") from None
    return _request(review)


def _request(review: Any) -> Request:
    if not isinstance(review, dict):
        raise BadReview("body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise BadReview(f"expected apiVersion {API_VERSION} and kind {KIND}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("request: expected an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid: expected a non-empty string")
    if _is_pod_create(request) and not isinstance(request.get("object"), dict):
        raise BadReview("request.object: expected the pod being created")
    return request  # type: ignore[return-value]


def answer(injector: Injector, request: Request, namespace_selector: str | None = None) -> Decision:
    """The review to send back for a decoded request; never raises. `namespace_selector` names
    the webhook entry that called (runtime.registration): only its injections apply."""
    plan = injector.plan
    uid = request["uid"]
    dry_run = request.get("dryRun") is True
    if not _is_pod_create(request):
        return Decision(_review({"uid": uid, "allowed": True}), "skipped", (), dry_run)
    pod = request["object"]
    namespace = request.get("namespace")
    fail_open = plan.webhook.failure_policy != "Fail"
    try:
        mutation = mutator.mutate(injector, pod, None,
                                  namespace if isinstance(namespace, str) else None,
                                  namespace_selector, isolate=fail_open)
    except mutator.MutationError as err:
        return _failed(plan, uid, dry_run, Failure(err.injection, str(err), err, True),
                       short=f"injection {err.injection} failed ({err.span})")
    except Exception as err:  # a bug, or a pod shape nobody planned for: still answer
        return _failed(plan, uid, dry_run,
                       Failure("", f"internal error: {type(err).__name__}: {err}", err, False),
                       short="internal error")
    # Fail-open: an injection that failed costs only itself; the others apply.
    failures = tuple(Failure(err.injection, str(err), err, True) for err in mutation.failed)
    if not mutation.patch:
        if failures:
            return _failed(plan, uid, dry_run, *failures, short=_left_out(failures))
        return Decision(_review({"uid": uid, "allowed": True}), "unchanged", (), dry_run)
    try:
        encoded = base64.b64encode(orjson.dumps(mutation.patch)).decode("ascii")
    except Exception as err:  # a value that is not JSON: a bug, never sent
        names = ", ".join(mutation.applied)
        return _failed(plan, uid, dry_run,
                       Failure(names, f"patch of {names} is not JSON: {err}", err, False),
                       short="internal error")
    audit = {"injected": ",".join(mutation.applied), "plan": plan.digest[:12]}
    if failures:
        audit["error"] = "; ".join(f.message for f in failures)
    response: Response = {
        "uid": uid,
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": encoded,
        "warnings": [_injected(injection.name, injection.span) for injection in plan.injections
                     if injection.name in mutation.applied]
                    + ([_warning(f"{_left_out(failures)}; the others injected")] if failures else []),
        "auditAnnotations": _audit(audit),
    }
    return Decision(_review(response), "patched", mutation.applied, dry_run, failures)


def _left_out(failures: tuple[Failure, ...]) -> str:
    """`injection NAME failed (path:line:col)`, for each."""
    return ", ".join(f"injection {f.injection} failed" + (
        f" ({f.exception.span})" if isinstance(f.exception, mutator.MutationError) else "")
        for f in failures)


def encode(review: AdmissionReview) -> bytes:
    return orjson.dumps(review)


def _failed(plan: planlib.Plan, uid: str, dry_run: bool, *failures: Failure,
            short: str) -> Decision:
    message = _bounded("; ".join(f.message for f in failures), MESSAGE_MAX)
    if plan.webhook.failure_policy == "Fail":
        response: Response = {"uid": uid, "allowed": False, "status": {
            "code": 500, "reason": "InternalError", "message": f"{WARNING_PREFIX}{message}"}}
        return Decision(_review(response), "failed-closed", (), dry_run, failures)
    response = {
        "uid": uid,
        "allowed": True,
        "warnings": [_warning(f"{short}; pod admitted without injection")],
        "auditAnnotations": _audit({"error": message, "plan": plan.digest[:12]}),
    }
    return Decision(_review(response), "failed-open", (), dry_run, failures)


def _review(response: Response) -> AdmissionReview:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def _is_pod_create(request: Request | dict[str, Any]) -> bool:
    return (request.get("operation") == "CREATE" and request.get("kind") == POD
            and not request.get("subResource"))


@functools.lru_cache(maxsize=1024)
def _injected(name: str, span: Span) -> str:
    """The warning for an injection that applied: the same few texts, request after request."""
    return _warning(f"injected {name} ({span})")


def _warning(text: str) -> str:
    text = WARNING_PREFIX + text
    if not text.isprintable():
        text = "".join(c if c.isprintable() else " " for c in text)
    return _bounded(text, WARNING_MAX)


def _audit(values: dict[str, str]) -> dict[str, str]:
    """Keys are plain names (the API server prefixes them with the webhook's name)."""
    return {key: _bounded(value, AUDIT_VALUE_MAX) for key, value in values.items() if value}


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"

