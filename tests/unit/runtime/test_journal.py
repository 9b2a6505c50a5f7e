"""runtime.journal: the machine that carries out a job's intents, table by table: what it asks
for at each step of each recipe, what it does with each answer (200, 404, 409, 403/422, 5xx, no
answer), and, crashing after every request in turn and starting again from what the job carries,
that no effect is done twice and every action ends.

The tests drive the machine as the controller's shell does (send what it asks for, feed the
answer back) against an API server in memory (tests/unit/runtime/controller/fakeapi.py)."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from runtime import intents, journal, objects, plan, pods, reconcile, state, vocabulary
from runtime.controller import kube
from tests.unit.runtime import corpus
from tests.unit.runtime.controller.fakeapi import FakeApi

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
SHIPPED = corpus.plans()[0].loaded
BATCH = SHIPPED.kind_named("batchjob")
VOLCANO = SHIPPED.kind_named("vcjob")
SPAN = {"path": "r.rules", "line": 1, "column": 1, "endLine": 1, "endColumn": 2}


def intent(action: str, **fields: Any) -> intents.Intent:
    base: dict[str, Any] = {"id": "i1", "action": action, "policy": "p#0", "rule": "r.rules:1:1",
                            "reason": "Why", "message": "what happened", "since": "2026-01-01T12:00:00Z"}
    base.update(fields)
    return intents.Intent(**base)


def world(kind: plan.Kind, *, pods: int = 2, journal_: tuple[intents.Intent, ...] = (),
          spec: dict[str, Any] | None = None) -> tuple[FakeApi, str, list[dict[str, Any]]]:
    """A job of `kind` carrying `journal_`, and its pods, in a fake API server."""
    api = FakeApi(status_subresource={"jobs.batch", "jobs.batch.volcano.sh"})
    name = "j" if kind is BATCH else "v"
    job = api.add({"apiVersion": kind.api_version, "kind": kind.kind,
                   "metadata": {"name": name, "namespace": "ns", "uid": "job-uid",
                                "annotations": {vocabulary.INTENTS_ANNOTATION: intents.encode(journal_)}
                                if journal_ else {}},
                   "spec": spec or {}, "status": {"state": {"phase": "Running"}}}, kind.plural)
    made = [api.add({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"p-{n}", "namespace": "ns", "uid": f"pod-{n}"},
                     "status": {"phase": "Running"}}, "pods") for n in range(pods)]
    return api, objects.path(kind.api_version, kind.plural, "ns", name), [job, *made]


def pods_of(api: FakeApi) -> tuple[dict[str, Any], ...]:
    return tuple(o for p, o in sorted(api.objects.items()) if "/pods/" in p)


class Crash(Exception):
    """The process died right after a request reached the API server."""


def one_pass(kind: plan.Kind, api: FakeApi, path: str, now: datetime = NOW, *,
             crash_after: int | None = None, sent: list[int] | None = None) -> journal.Stop:
    """One reconcile's journal pass, as the shell runs it: the job and its journal read afresh."""
    job = api.get(path)
    opened = intents.decode(objects.annotation(job, intents.ANNOTATION)).intents
    run = journal.Pass(kind, pods_of(api), now, path, status_subresource=True)
    progress, answer = journal.start(opened), None
    count = sent if sent is not None else [0]
    while True:
        progress, todo, _ = journal.advance(run, progress, job, answer)
        if isinstance(todo, journal.Stop):
            return todo
        try:
            if todo.resource_version is not None:
                job = api.merge_patch(todo.path, todo.body, resource_version=todo.resource_version)
            else:
                api.request(todo.method, todo.path, todo.body)
            answer = journal.Answer(200)
        except kube.ApiError as err:
            answer = journal.Answer(err.status, str(err))
        except kube.TransportError as err:
            answer = journal.Answer(0, str(err))
        count[0] += 1
        if crash_after is not None and count[0] == crash_after:
            raise Crash()


def journal_on(api: FakeApi, path: str) -> tuple[intents.Intent, ...]:
    return intents.decode(objects.annotation(api.get(path), intents.ANNOTATION)).intents


# ---------------------------------------------------------------------------------------------
# What each step asks for


def test_a_pod_restart_deletes_the_recorded_incarnation_then_clears_the_journal() -> None:
    i = intent("restartPod", pod="p-0", uid="pod-0", targets=(("p-0", "pod-0"),))
    api, path, _ = world(BATCH, journal_=(i,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, todo, reports = journal.advance(run, journal.start((i,)), job)
    assert isinstance(todo, journal.Send) and reports == ()
    assert (todo.method, todo.path, todo.part) == ("DELETE", "/api/v1/namespaces/ns/pods/p-0", "effect")
    assert todo.body == {"preconditions": {"uid": "pod-0", "resourceVersion": api.get(
        "/api/v1/namespaces/ns/pods/p-0")["metadata"]["resourceVersion"]}}
    assert todo.done_on == frozenset({404}) and todo.resource_version is None
    progress, todo, reports = journal.advance(run, progress, job, journal.Answer(200))
    assert isinstance(todo, journal.Send) and todo.clear and todo.part == "journal"
    assert todo.body == {"metadata": {"annotations": {vocabulary.INTENTS_ANNOTATION: None}}}
    assert todo.resource_version == job["metadata"]["resourceVersion"]
    assert reports == ()       # done, but the job still carries it: not yet reported
    progress, todo, reports = journal.advance(run, progress, job, journal.Answer(200))
    assert todo == journal.Stop(wait=None, open=0)
    assert [type(r) for r in reports] == [journal.Done]


def test_an_action_whose_clearing_conflicts_is_reported_done_once() -> None:
    """The last step done, the journal's clearing patch answered 409: the action is not
    reported; the next pass replays the step (nothing left to delete) and reports it then."""
    i = intent("restartPod", pod="p-0", uid="pod-0", targets=(("p-0", "pod-0"),))
    api, path, _ = world(BATCH, journal_=(i,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, todo, first = journal.advance(run, journal.start((i,)), job)
    progress, todo, second = journal.advance(run, progress, job, journal.Answer(200))
    assert isinstance(todo, journal.Send) and todo.clear
    _, todo, third = journal.advance(run, progress, job, journal.Answer(409))
    assert todo == journal.Stop(retry=True) and first + second + third == ()
    api.request("DELETE", "/api/v1/namespaces/ns/pods/p-0")
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, todo, again = journal.advance(run, journal.start((i,)), job)
    assert isinstance(todo, journal.Send) and todo.clear and again == ()
    _, todo, last = journal.advance(run, progress, job, journal.Answer(200))
    assert todo == journal.Stop(wait=None, open=0) and [type(r) for r in last] == [journal.Done]


def test_a_step_that_patches_the_job_carries_the_cursor_in_the_same_patch() -> None:
    i = intent("restartJob")
    api, path, _ = world(BATCH, journal_=(i,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    _, todo, _ = journal.advance(run, journal.start((i,)), job)
    assert isinstance(todo, journal.Send)
    assert (todo.method, todo.path) == ("PATCH", path)
    assert todo.body["spec"] == {"suspend": True}
    carried = intents.decode(todo.body["metadata"]["annotations"][vocabulary.INTENTS_ANNOTATION])
    assert [(c.id, c.step) for c in carried.intents] == [("i1", 1)]
    assert todo.resource_version == job["metadata"]["resourceVersion"]


def test_a_step_with_effects_elsewhere_is_followed_by_a_patch_of_the_cursor() -> None:
    """A Volcano Command (not the job) then more steps: the cursor gets a patch of its own."""
    kind = plan.load({**corpus.plans()[0].raw, "kinds": [dict(
        next(k for k in corpus.plans()[0].raw["kinds"] if k["name"] == "vcjob"),
        actions={"restartJob": {"steps": [
            {"op": "create", "span": SPAN, "apiVersion": "bus.volcano.sh/v1alpha1",
             "kind": "Command", "plural": "commands", "body": {"action": ["RestartJob"]}},
            {"op": "set", "span": SPAN, "path": ["spec", "x"], "value": True}]}})]}).kinds[0]
    i = intent("restartJob", observed={"status": intents.status_digest(
        kind, {"status": {"state": {"phase": "Running"}}})})
    api, path, _ = world(kind, journal_=(i,))
    job = api.get(path)
    run = journal.Pass(kind, pods_of(api), NOW, path, True)
    progress, todo, _ = journal.advance(run, journal.start((i,)), job)
    assert isinstance(todo, journal.Send) and todo.method == "POST" and todo.path.endswith("/commands")
    progress, todo, _ = journal.advance(run, progress, job, journal.Answer(200))
    assert isinstance(todo, journal.Send) and todo.part == "journal" and not todo.clear
    assert (todo.method, todo.path, todo.resource_version) == ("PATCH", path, job["metadata"]["resourceVersion"])
    [moved] = intents.decode(todo.body["metadata"]["annotations"][vocabulary.INTENTS_ANNOTATION]).intents
    assert moved.step == 1


def test_an_await_waits_then_gives_up_past_its_time() -> None:
    i = intent("restartJob", step=1, since="2026-01-01T12:00:00Z")
    api, path, _ = world(BATCH, journal_=(i,))
    stop = one_pass(BATCH, api, path, NOW + timedelta(minutes=1))
    assert stop == journal.Stop(wait=2.0, open=1)
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW + timedelta(minutes=11), path, True)
    _, todo, reports = journal.advance(run, journal.start((i,)), job)
    assert [type(r) for r in reports] == [journal.Dropped]
    assert "waited 600s" in reports[0].why  # type: ignore[union-attr]
    assert isinstance(todo, journal.Send) and todo.clear


def test_a_recorded_action_is_done_without_a_request() -> None:
    i = intent("failJob", step=1)   # past its one step (the condition), as after a crash
    api, path, _ = world(BATCH, journal_=(i,))
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, todo, reports = journal.advance(run, journal.start((i,)), api.get(path))
    assert isinstance(todo, journal.Send) and todo.clear and reports == ()
    _, todo, reports = journal.advance(run, progress, api.get(path), journal.Answer(200))
    assert reports == (journal.Done(i),)     # the intent as the journal holds it


def test_an_intent_whose_action_the_plan_no_longer_carries_out_is_done_without_a_request() -> None:
    """Opened under an older plan; the plan now loaded says `unsupported` for its action."""
    assert BATCH.recipe("completeJob") == "unsupported"
    i = intent("completeJob")
    api, path, _ = world(BATCH, journal_=(i,))
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, todo, reports = journal.advance(run, journal.start((i,)), api.get(path))
    assert isinstance(todo, journal.Send) and todo.clear and reports == ()
    _, todo, reports = journal.advance(run, progress, api.get(path), journal.Answer(200))
    assert reports == (journal.Done(i),)


def test_an_answer_is_due_before_the_machine_moves_on() -> None:
    i = intent("restartPod", pod="p-0", uid="pod-0", targets=(("p-0", "pod-0"),))
    api, path, _ = world(BATCH, journal_=(i,))
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, _, _ = journal.advance(run, journal.start((i,)), api.get(path))
    with pytest.raises(ValueError, match="answer to DELETE"):
        journal.advance(run, progress, api.get(path))


# ---------------------------------------------------------------------------------------------
# Each answer


POD_RESTART = intent("restartPod", pod="p-0", uid="pod-0", targets=(("p-0", "pod-0"),))


@pytest.mark.parametrize("status, stop, reports, left", [
    (200, journal.Stop(open=0), [journal.Done], 0),
    (404, journal.Stop(open=0), [journal.Done], 0),        # that incarnation is gone already
    (409, journal.Stop(retry=True), [], 1),                 # changed since: look again, later
    (403, journal.Stop(wait=1.0, open=1), [], 1),           # refused: tried again in a second
    (422, journal.Stop(wait=1.0, open=1), [], 1),
    (500, journal.Stop(retry=True), [], 1),
    (503, journal.Stop(retry=True), [], 1),
    (0, journal.Stop(retry=True), [], 1),                   # no answer
], ids=["200", "404", "409", "403", "422", "500", "503", "timeout"])
def test_each_answer_to_a_deletion(status: int, stop: journal.Stop, reports: list[type],
                                   left: int) -> None:
    api, path, _ = world(BATCH, journal_=(POD_RESTART,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, todo, _ = journal.advance(run, journal.start((POD_RESTART,)), job)
    assert isinstance(todo, journal.Send) and todo.method == "DELETE"
    progress, todo, seen = journal.advance(run, progress, job, journal.Answer(status, "said"))
    if isinstance(todo, journal.Send):     # the journal's last patch: it succeeds
        assert todo.clear
        progress, todo, more = journal.advance(run, progress, job, journal.Answer(200))
        seen += more
    assert todo == stop
    assert [type(r) for r in seen] == reports
    assert len([i for i in progress.written if i is not None]) == left   # what the job carries


def test_a_step_refused_five_times_is_given_up_and_said_why() -> None:
    api, path, _ = world(BATCH, journal_=(POD_RESTART,))
    api.fail("DELETE", r"/pods/p-0$", 403, times=-1, message="pods is forbidden")
    stops = [one_pass(BATCH, api, path) for _ in range(journal.MAX_ATTEMPTS)]
    assert [s.open for s in stops] == [1, 1, 1, 1, 0]
    assert [i.attempts for i in journal_on(api, path)] == []
    assert api.sent("DELETE") == []
    # each refusal was recorded on the job, so a restarted controller keeps counting
    attempts = [json.loads(r.body["metadata"]["annotations"][vocabulary.INTENTS_ANNOTATION] or "{}")
                for r in api.sent("PATCH")]
    assert [a["open"][0]["attempts"] if a else None for a in attempts] == [1, 2, 3, 4, None]


def test_the_reason_a_step_was_given_up_is_the_api_servers() -> None:
    api, path, _ = world(BATCH, journal_=(POD_RESTART,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    refused = journal.start((intent(**{**_fields(POD_RESTART), "attempts": 4}),))
    progress, _, _ = journal.advance(run, refused, job)
    _, _, reports = journal.advance(run, progress, job, journal.Answer(403, "pods is forbidden"))
    assert reports == (journal.Dropped(intent(**{**_fields(POD_RESTART), "attempts": 5}),
                                       "pods is forbidden"),)


def _fields(i: intents.Intent) -> dict[str, Any]:
    return {f: getattr(i, f) for f in i.__slots__}  # type: ignore[attr-defined]


@pytest.mark.parametrize("status", [409, 500, 0])
def test_a_journal_patch_that_fails_retries_the_reconcile(status: int) -> None:
    api, path, _ = world(BATCH, journal_=(POD_RESTART,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, _, _ = journal.advance(run, journal.start((POD_RESTART,)), job)
    progress, todo, _ = journal.advance(run, progress, job, journal.Answer(200))
    assert isinstance(todo, journal.Send) and todo.clear
    _, todo, _ = journal.advance(run, progress, job, journal.Answer(status))
    assert todo == journal.Stop(retry=True)


# ---------------------------------------------------------------------------------------------
# Crashing after every request: no effect twice, every action ends


def suspend_patches(api: FakeApi) -> list[bool]:
    return [r.body["spec"]["suspend"] for r in api.sent("PATCH") if "suspend" in (r.body.get("spec") or {})]


def the_job_controller(api: FakeApi, path: str) -> None:
    """What the Job controller does meanwhile: a suspended Job's pods are deleted."""
    if (api.get(path).get("spec") or {}).get("suspend"):
        for p in [p for p in api.objects if "/pods/" in p]:
            del api.objects[p]


SCENARIOS = {
    "restart job (suspend, await, resume)": (BATCH, intent("restartJob")),
    "restart pod (delete)": (BATCH, POD_RESTART),
    "fail job (condition)": (BATCH, intent("failJob")),
    "restart job by a Volcano Command": (VOLCANO, intent("restartJob", observed={
        "status": intents.status_digest(VOLCANO, {"status": {"state": {"phase": "Running"}}})})),
    "two intents at once": (BATCH, None),
}


def run_to_the_end(kind: plan.Kind, api: FakeApi, path: str, crash_after: int | None) -> int:
    """Passes until the journal is empty, the first one crashing after request `crash_after`;
    how many requests were sent."""
    sent = [0]
    now = NOW
    for _ in range(20):
        try:
            stop = one_pass(kind, api, path, now, crash_after=crash_after, sent=sent)
        except Crash:
            crash_after = None
            continue
        the_job_controller(api, path)
        now += timedelta(seconds=5)
        if not journal_on(api, path):
            return sent[0]
        assert not stop.retry
    raise AssertionError(f"the journal never emptied: {journal_on(api, path)}")


@pytest.mark.parametrize("name", SCENARIOS)
def test_crashing_after_any_request_repeats_no_effect(name: str) -> None:
    kind, opened = SCENARIOS[name]
    journal_ = (opened,) if opened is not None else (
        intent("restartPod", id="a", pod="p-0", uid="pod-0", targets=(("p-0", "pod-0"),)),
        intent("restartPod", id="b", pod="p-1", uid="pod-1", targets=(("p-1", "pod-1"),)))
    api, path, _ = world(kind, journal_=journal_)
    baseline = copy.deepcopy(api)
    total = run_to_the_end(kind, baseline, path, None)
    assert total >= 2
    for crash in range(1, total + 1):
        trial = copy.deepcopy(api)
        run_to_the_end(kind, trial, path, crash)
        deleted = [r.path for r in trial.sent("DELETE")]
        assert len(deleted) == len(set(deleted)), (crash, deleted)      # one deletion per pod
        assert deleted == [r.path for r in baseline.sent("DELETE")]
        assert len(trial.sent("POST", r"/commands$")) == len(baseline.sent("POST", r"/commands$"))
        assert suspend_patches(trial) == suspend_patches(baseline), crash   # true once, false once
        assert objects.at(trial.get(path), ("spec", "suspend")) == \
            objects.at(baseline.get(path), ("spec", "suspend"))
        assert journal_on(trial, path) == ()


def test_the_scenarios_do_what_they_say() -> None:
    api, path, _ = world(BATCH, journal_=(intent("restartJob"),))
    run_to_the_end(BATCH, api, path, None)
    assert suspend_patches(api) == [True, False]
    api, path, _ = world(VOLCANO, journal_=SCENARIOS["restart job by a Volcano Command"][1:])
    run_to_the_end(VOLCANO, api, path, None)
    [command] = api.sent("POST", r"/commands$")
    assert command.body["action"] == "RestartJob"


def test_reconcile_opens_what_the_machine_carries_out() -> None:
    """The intent `reconcile.decide` opens for a pod eviction under the shipped Volcano rules,
    taken as the machine's journal, deletes that pod's incarnation and nothing else."""
    kind = plan.load({**corpus.plans()[0].raw, "kinds": [dict(
        next(k for k in corpus.plans()[0].raw["kinds"] if k["name"] == "vcjob"),
        policies=[{"id": "e#0", "span": SPAN,
                   "event": "podEvicted", "task": None, "filter": None, "for": None, "to": None,
                   "action": {"action": "restartPod", "reason": None, "message": None,
                              "budget": None, "fallback": None, "delay": None}}])]}).kinds[0]
    api, path, made = world(kind)
    pod = made[1]
    pod["status"] = {"phase": "Failed", "reason": "Evicted"}
    pod["metadata"]["ownerReferences"] = [{"apiVersion": kind.api_version, "kind": "Job",
                                           "name": "v", "uid": "job-uid", "controller": True}]
    pod["metadata"]["labels"] = {"volcano.sh/job-name": "v"}
    api.objects["/api/v1/namespaces/ns/pods/p-0"] = pod
    writes = reconcile.reconcile(kind, api.get(path), pods_of(api), NOW)
    [opened] = writes.new
    api.merge_patch(path, writes.commit or {})
    one_pass(kind, api, path)
    assert [r.path for r in api.sent("DELETE")] == ["/api/v1/namespaces/ns/pods/p-0"]
    assert opened.targets == (("p-0", "pod-0"),)


# ---------------------------------------------------------------------------------------------
# Several intents in one pass, and what a dropped one leaves for the next evaluation


@pytest.mark.parametrize("order", ["await first", "refused first"])
def test_the_pass_stops_with_the_soonest_wait_of_its_intents(order: str) -> None:
    awaiting = intent("restartJob", id="i-await", step=1, since="2026-01-01T12:00:00Z")   # polled every 2 s
    refused = intent("restartPod", id="i-refused", pod="p-0", uid="pod-0", targets=(("p-0", "pod-0"),))
    both = (awaiting, refused) if order == "await first" else (refused, awaiting)
    api, path, _ = world(BATCH, journal_=both)
    api.fail("DELETE", r"/pods/p-0$", 403, times=-1, message="pods is forbidden")
    assert one_pass(BATCH, api, path, NOW + timedelta(minutes=1)) == journal.Stop(wait=1.0, open=2)


def test_a_dropped_action_leaves_what_it_held_in_the_stored_state() -> None:
    dropped = intent("restartPod", pod="p-0", uid="pod-0", task="worker", attempts=journal.MAX_ATTEMPTS - 1,
                     targets=(("p-0", "pod-0"), ("p-1", "pod-1")))
    api, path, _ = world(BATCH, journal_=(dropped,))
    api.fail("DELETE", r"/pods/p-0$", 403, times=-1, message="pods is forbidden")
    assert one_pass(BATCH, api, path) == journal.Stop(wait=0.0, open=0)   # the fallback's turn at once
    stored = state.decode(objects.annotation(api.get(path), vocabulary.STATE_ANNOTATION)).state
    assert stored.released == (state.Released(
        "p#0", "restartPod", "worker", "p-0", pods.digest("pod-0"),
        tuple(sorted({pods.digest("pod-0"), pods.digest("pod-1")})),
        "DELETE /api/v1/namespaces/ns/pods/p-0: 403 Planted: pods is forbidden"),)


def test_a_step_that_patches_the_job_needs_no_patch_of_the_cursor_after_it() -> None:
    """docs/controller.md: the advanced cursor rides in the step's own patch of the job, so the
    pass sends that one patch and then waits on the next step (an await): no second write."""
    i = intent("restartJob")
    api, path, _ = world(BATCH, journal_=(i,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, answer, sent = journal.start((i,)), None, []
    while True:
        progress, todo, _ = journal.advance(run, progress, job, answer)
        if isinstance(todo, journal.Stop):
            break
        sent.append((todo.method, todo.path, todo.part))
        job = api.merge_patch(todo.path, todo.body, resource_version=todo.resource_version)
        answer = journal.Answer(200)
    assert sent == [("PATCH", path, "effect")]
    assert todo == journal.Stop(wait=2.0, open=1)
    assert [(c.id, c.step) for c in journal_on(api, path)] == [("i1", 1)]


def test_an_intent_that_waits_after_a_step_does_not_hold_up_the_next_one() -> None:
    """The job's restart patches the job, then waits on its await; the pod restart after it in
    the journal is carried out in the same pass."""
    first = intent("restartJob", id="i-job")
    second = intent("restartPod", id="i-pod", pod="p-0", uid="pod-0", targets=(("p-0", "pod-0"),))
    api, path, _ = world(BATCH, journal_=(first, second))
    stop = one_pass(BATCH, api, path)
    assert [r.path for r in api.sent("DELETE")] == ["/api/v1/namespaces/ns/pods/p-0"]
    assert stop == journal.Stop(wait=2.0, open=1)
    assert [(i.id, i.step) for i in journal_on(api, path)] == [("i-job", 1)]


# ---------------------------------------------------------------------------------------------
# Details the mutants showed untested (scripts/mutation.sh journal)


def test_a_refused_request_holds_back_the_rest_of_its_step() -> None:
    """A step of two deletions whose first is refused (403) is tried again later as a whole:
    the second pod is not deleted in that pass, whether the action is retried or given up."""
    for attempts in (0, journal.MAX_ATTEMPTS - 1):
        two = intent("restartPod", pod="p-0", uid="pod-0", attempts=attempts,
                     targets=(("p-0", "pod-0"), ("p-1", "pod-1")))
        api, path, _ = world(BATCH, journal_=(two,))
        api.fail("DELETE", r"/pods/p-0$", 403, times=-1, message="pods is forbidden")
        stop = one_pass(BATCH, api, path)
        assert api.sent("DELETE") == [], attempts
        assert stop.open == (1 if attempts == 0 else 0)


def test_a_step_patching_the_status_subresource_is_followed_by_a_patch_of_the_cursor() -> None:
    """The journal rides only in a patch of the job itself: a guarded patch of /status (where
    annotations are not written) gets a journal patch of its own when more steps follow."""
    kind = plan.load({**corpus.plans()[0].raw, "kinds": [dict(
        next(k for k in corpus.plans()[0].raw["kinds"] if k["name"] == "batchjob"),
        actions={"restartJob": {"steps": [
            {"op": "set", "span": SPAN, "path": ["status", "x"], "value": True},
            {"op": "set", "span": SPAN, "path": ["spec", "x"], "value": True}]}})]}).kinds[0]
    i = intent("restartJob")
    api, path, _ = world(kind, journal_=(i,))
    job = api.get(path)
    run = journal.Pass(kind, pods_of(api), NOW, path, True)
    progress, todo, _ = journal.advance(run, journal.start((i,)), job)
    assert isinstance(todo, journal.Send) and todo.path == f"{path}/status"
    assert "metadata" not in todo.body and todo.resource_version is not None
    progress, todo, _ = journal.advance(run, progress, job, journal.Answer(200))
    assert isinstance(todo, journal.Send) and todo.part == "journal" and todo.path == path
    [moved] = intents.decode(todo.body["metadata"]["annotations"][vocabulary.INTENTS_ANNOTATION]).intents
    assert moved.step == 1


def test_a_step_patching_the_job_keeps_the_stored_state_when_it_releases_a_dropped_action() -> None:
    """An action given up, then another intent's step that patches the job in the same pass:
    that patch carries the stored state with the release added, the rest of it kept."""
    earlier = state.Released("p#9", "restartPod", None, "old", None, (), "given up before")
    stored = state.with_released(None, (earlier,))
    dropped = intent("restartPod", id="i-drop", pod="p-0", uid="pod-0",
                     attempts=journal.MAX_ATTEMPTS - 1, targets=(("p-0", "pod-0"),))
    api, path, _ = world(BATCH, journal_=(dropped, intent("restartJob", id="i-job")))
    api.merge_patch(path, {"metadata": {"annotations": {vocabulary.STATE_ANNOTATION: stored}}})
    api.fail("DELETE", r"/pods/p-0$", 403, times=-1, message="pods is forbidden")
    one_pass(BATCH, api, path)
    [suspend] = [r for r in api.sent("PATCH") if "spec" in r.body]
    written = suspend.body["metadata"]["annotations"][vocabulary.STATE_ANNOTATION]
    assert [r.why for r in state.decode(written).state.released] == [
        "given up before", "DELETE /api/v1/namespaces/ns/pods/p-0: 403 Planted: pods is forbidden"]


def test_a_stop_leaves_no_answer_due() -> None:
    """After the answer that ends a pass, the machine owes nothing: asked again, it stops again."""
    api, path, _ = world(BATCH, journal_=(POD_RESTART,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, _, _ = journal.advance(run, journal.start((POD_RESTART,)), job)
    progress, todo, _ = journal.advance(run, progress, job, journal.Answer(200))
    assert isinstance(todo, journal.Send) and todo.clear
    progress, stop, _ = journal.advance(run, progress, job, journal.Answer(200))
    assert stop == journal.Stop(open=0) and progress.asked is None
    assert journal.advance(run, progress, job) == (progress, stop, ())


@pytest.mark.parametrize("status, stop", [
    (409, journal.Stop(retry=True)),                  # the job moved on: look again, later
    (403, journal.Stop(wait=1.0, open=1)),            # refused: tried again in a second
])
def test_each_refusal_of_a_step_that_patches_the_job(status: int, stop: journal.Stop) -> None:
    i = intent("restartJob")
    api, path, _ = world(BATCH, journal_=(i,))
    job = api.get(path)
    run = journal.Pass(BATCH, pods_of(api), NOW, path, True)
    progress, todo, _ = journal.advance(run, journal.start((i,)), job)
    assert isinstance(todo, journal.Send) and todo.resource_version is not None
    assert todo.done_on == frozenset()
    progress, todo, reports = journal.advance(run, progress, job, journal.Answer(status, "said"))
    if isinstance(todo, journal.Send):     # the refusal counted on the journal
        assert todo.part == "journal"
        progress, todo, _ = journal.advance(run, progress, job, journal.Answer(200))
    assert (todo, reports) == (stop, ())
