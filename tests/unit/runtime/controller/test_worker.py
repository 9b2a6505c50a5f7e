"""runtime.controller.worker against an API server in memory: what one sync sends, in which
order, guarded by which version, and what the queue does with each outcome. No control plane:
these run in a second (tests/integration covers the same shell against the real one)."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from rulec import api as rulec_api
from rulec import emit
from runtime import intents, objects, plan, vocabulary
from runtime.controller import kube, worker
from tests.unit.runtime.controller import shell
from runtime.workqueue import WorkQueue
from tests.unit.runtime.controller.fakeapi import FakeApi

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
RULES = """
job trainer: example.dev/v1 Trainer {
    pods owned
    failed     when any pod failed
               reason "PodFailed"
    running    when any pod running
    pending    otherwise
    on pod evicted -> restart pod max 2 then fail job
    actions {
        fail job -> condition "FailureTarget"
    }
}
"""
PATH = "/apis/example.dev/v1/namespaces/ns/trainers/t"
KEY = ("trainer", "ns", "t")


def compiled(text: str = RULES) -> plan.Plan:
    built = rulec_api.build_sources([rulec_api.SourceFile.from_text("t.rules", text)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    return plan.loads(emit.dumps(built.plan))


def pod(name: str, phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T11:00:00Z",
                         "ownerReferences": [{"apiVersion": "example.dev/v1", "kind": "Trainer",
                                              "name": "t", "uid": "uid-t", "controller": True}]},
            "status": {"phase": phase, **status}}


def setup(*pods: dict[str, Any], status_subresource: bool = True,
          text: str = RULES) -> tuple[worker.Worker, FakeApi, shell.Events, shell.Clock]:
    api = FakeApi(status_subresource={"trainers.example.dev"} if status_subresource else set())
    api.add({"apiVersion": "example.dev/v1", "kind": "Trainer",
             "metadata": {"name": "t", "namespace": "ns", "uid": "uid-t", "generation": 1}}, "trainers")
    for p in pods:
        api.add(p, "pods")
    w, events, clock = shell.make(compiled(text), api, NOW)
    shell.feed(w, api)
    return w, api, events, clock


def annotation(api: FakeApi, key: str) -> Any:
    text = objects.annotation(api.get(PATH), key)
    return None if text is None else json.loads(text)


def test_a_first_sync_commits_the_verdict_and_writes_the_condition() -> None:
    w, api, events, _ = setup(pod("p-0"))
    assert w.sync(KEY) is None
    [commit, status] = api.sent("PATCH")
    assert commit.path == PATH and status.path == PATH + "/status"
    assert commit.body["metadata"]["resourceVersion"] == "100"   # as read: a guard
    assert annotation(api, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"
    [condition] = api.get(PATH)["status"]["conditions"]
    assert (condition["type"], condition["status"]) == ("JobRulesVerdict", "Unknown")
    assert status.body["metadata"]["resourceVersion"] != "100"   # the commit's answer's version
    assert events.sent == []   # a first verdict that is no outcome is not news


def test_a_sync_of_an_unchanged_job_writes_nothing() -> None:
    w, api, _, _ = setup(pod("p-0"))
    w.sync(KEY)
    before = len(api.log)
    w.sync(KEY)
    assert api.log[before:] == []


def test_without_a_status_subresource_the_condition_goes_with_the_commit() -> None:
    w, api, _, _ = setup(pod("p-0"), status_subresource=False)
    w.sync(KEY)
    [one] = api.sent("PATCH")
    assert one.path == PATH and "conditions" in one.body["status"]


BATCH_RULES = """
job batch: batch/v1 Job {
    pods owned
    failed     when any pod failed
    running    when any pod running
    pending    otherwise
}
"""
BATCH_PATH = "/apis/batch/v1/namespaces/ns/jobs/t"


def batch_pod(name: str, phase: str = "Running") -> dict[str, Any]:
    out = pod(name, phase)
    out["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "t",
                                           "uid": "uid-t", "controller": True}]
    return out


def batch_setup(api: FakeApi, *pods: dict[str, Any]) -> tuple[worker.Worker, shell.Clock]:
    api.add({"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "t", "namespace": "ns", "uid": "uid-t", "generation": 1}}, "jobs")
    for p in pods:
        api.add(p, "pods")
    w, _, clock = shell.make(compiled(BATCH_RULES), api, NOW)
    shell.feed(w, api)
    return w, clock


def test_a_batch_jobs_commit_rides_on_its_status_write(caplog: pytest.LogCaptureFixture) -> None:
    """kube-apiserver's batch Job writes metadata through /status too: one write, guarded by
    the version read, carries our annotations, the phase label and the condition; written, its
    verdict is logged as committed."""
    api = FakeApi(status_subresource={"jobs.batch"})
    w, _ = batch_setup(api, batch_pod("p-0"))
    with caplog.at_level(logging.INFO):
        w.sync(("batch", "ns", "t"))
    assert said(caplog) == ["batch ns/t: verdict Running (reason none, rule t.rules:5:5)"]
    [one] = api.sent("PATCH")
    assert one.path == BATCH_PATH + "/status" and one.body["metadata"]["resourceVersion"] == "100"
    job = api.get(BATCH_PATH)
    assert json.loads(objects.annotation(job, vocabulary.VERDICT_ANNOTATION))["phase"] == "Running"
    assert objects.labels(job)[vocabulary.PHASE_LABEL] == "Running"
    assert [c["type"] for c in job["status"]["conditions"]] == ["JobRulesVerdict"]


def test_a_status_write_that_drops_our_annotations_is_followed_by_the_commit_from_then_on(
        caplog: pytest.LogCaptureFixture) -> None:
    """A server whose batch Job /status keeps only the status: the commit is sent at once to the
    job itself, said once, and the next verdicts are written as for a custom resource."""
    api = FakeApi(status_subresource={"jobs.batch"}, status_keeps_metadata=set())
    w, clock = batch_setup(api, batch_pod("p-0", "Pending"))
    with caplog.at_level(logging.INFO):
        w.sync(("batch", "ns", "t"))
    assert [r.path for r in api.sent("PATCH")] == [BATCH_PATH + "/status", BATCH_PATH]
    assert json.loads(objects.annotation(api.get(BATCH_PATH), vocabulary.VERDICT_ANNOTATION)
                      )["phase"] == "Pending"
    assert [m for m in said(caplog, logging.WARNING) if "/status did not write" in m]
    assert [m for m in said(caplog) if "verdict" in m] == [
        "batch ns/t: verdict Pending (reason none, rule t.rules:6:5)"]   # committed, once
    api.add(batch_pod("p-0"), "pods")
    shell.feed(w, api)
    clock.now += timedelta(seconds=5)
    before = len(api.sent("PATCH"))
    w.sync(("batch", "ns", "t"))
    assert [r.path for r in api.sent("PATCH")[before:]] == [BATCH_PATH, BATCH_PATH + "/status"]
    assert json.loads(objects.annotation(api.get(BATCH_PATH), vocabulary.VERDICT_ANNOTATION)
                      )["phase"] == "Running"


def test_a_verdict_change_is_an_event() -> None:
    w, api, events, _ = setup(pod("p-0"))
    w.sync(KEY)
    api.add(pod("p-0", "Failed"), "pods")
    shell.feed(w, api)
    w.sync(KEY)
    [(_, event)] = events.sent
    assert (event.type, event.reason, event.action) == ("Warning", "PodFailed", "Verdict")


def test_an_eviction_deletes_that_pod_once_and_clears_the_journal() -> None:
    evicted = pod("p-0", "Failed", reason="Evicted")
    w, api, events, _ = setup(evicted, pod("p-1"))
    w.sync(KEY)
    methods = [(r.method, r.path.removeprefix("/api/v1/namespaces/ns/").removeprefix(PATH) or "job")
               for r in api.log if r.method != "GET"]
    assert methods == [("PATCH", "job"), ("PATCH", "/status"), ("DELETE", "pods/p-0"),
                       ("PATCH", "job")]
    commit = api.sent("PATCH")[0].body["metadata"]["annotations"]
    [opened] = intents.decode(commit[vocabulary.INTENTS_ANNOTATION]).intents
    assert opened.targets == (("p-0", "uid-p-0"),)
    assert annotation(api, vocabulary.INTENTS_ANNOTATION) is None
    assert [e.action for _, e in events.sent] == ["RestartPod"]
    assert w.intents_open == 0


def test_a_conflict_reads_the_job_again_and_tries_again_at_once() -> None:
    w, api, _, _ = setup(pod("p-0"))
    api.fail("PATCH", r"/trainers/t$", 409, times=worker.CONFLICT_RETRIES - 1)
    w.process(KEY)
    methods = [r.method for r in api.log if r.path == PATH]
    assert methods[:2 * (worker.CONFLICT_RETRIES - 1)] == ["PATCH", "GET"] * (worker.CONFLICT_RETRIES - 1)
    assert annotation(api, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"
    assert w.queue.num_requeues(KEY) == 0


def test_conflicts_past_the_retries_back_off() -> None:
    w, api, _, _ = setup(pod("p-0"))
    api.fail("PATCH", r"/trainers/t$", 409, times=worker.CONFLICT_RETRIES)
    w.process(KEY)
    assert w.queue.num_requeues(KEY) == 1
    assert [r.method for r in api.log][-1] == "GET"           # the cache is fresh for the next try
    w.process(KEY)
    assert annotation(api, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"
    assert w.queue.num_requeues(KEY) == 0                     # forgotten once it succeeded


@pytest.mark.parametrize("status, error", [(500, kube.ServerError), (0, kube.TransportError)])
def test_a_failed_request_backs_off(status: int, error: type) -> None:
    w, api, _, _ = setup(pod("p-0"))
    api.fail("PATCH", r"/trainers/t$", status)
    with pytest.raises(error):
        w.sync(KEY)
    w.process(KEY)   # the fault was for one request: the next pass writes
    assert annotation(api, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"


def throttled_queue(w: worker.Worker) -> list[float]:
    """Give `w` a queue on a clock the test moves (its first element, in seconds)."""
    now = [0.0]
    w.queue = WorkQueue(clock=lambda: now[0])
    return now


def ready(w: worker.Worker) -> list[Any]:
    keys = []
    while (key := w.queue.get(timeout=0)) is not None:
        keys.append(key)
        w.queue.done(key)
    return keys


def test_a_jobs_own_changes_in_a_burst_are_one_pass_and_a_pods_change_is_queued_at_once() -> None:
    w, _, _, _ = setup(pod("p-0"))
    now = throttled_queue(w)
    w.enqueue(KEY)                    # the job changed (the Job controller's FailureTarget)
    assert ready(w) == []
    now[0] = worker.JOB_BATCH / 2
    w.enqueue(KEY)                    # and again (its Failed)
    assert ready(w) == []
    now[0] = worker.JOB_BATCH
    assert ready(w) == [KEY]          # one pass reads both
    now[0] = 10.0
    assert ready(w) == []
    w.enqueue(KEY, 9.5)               # a pod's change: at once, its time kept for the latency
    assert ready(w) == [KEY] and w._pending[KEY] == 9.5


@pytest.mark.parametrize("method, path", [("PATCH", r"/trainers/t$"),       # the commit
                                          ("DELETE", r"/pods/p-0$")])     # an action
def test_a_write_throttled_with_429_waits_at_least_the_servers_retry_after(method: str,
                                                                           path: str) -> None:
    w, api, _, _ = setup(pod("p-0", "Failed", reason="Evicted"))   # a restart: delete p-0
    now = throttled_queue(w)
    api.fail(method, path, 429, message="too many requests", retry_after="7")
    w.process(KEY)
    assert [r.status for r in api.log if r.method == method][-1] == 429
    now[0] = 7.0 - 1e-6
    assert ready(w) == []          # client-go's backoff alone would have given it back after 5 ms
    now[0] = 7.0
    assert ready(w) == [KEY]
    assert w.queue.num_requeues(KEY) == 1
    w.process(KEY)                 # the fault answered one request: now it goes through
    assert api.sent(method, PATH if method == "PATCH" else "/api/v1/namespaces/ns/pods/p-0")


def test_a_429_without_retry_after_backs_off_as_other_errors() -> None:
    w, api, _, _ = setup(pod("p-0"))
    now = throttled_queue(w)
    api.fail("PATCH", r"/trainers/t$", 429)
    w.process(KEY)
    now[0] = 0.005
    assert ready(w) == [KEY]


def test_a_refused_deletion_is_tried_again_then_given_up_and_said_why() -> None:
    w, api, events, clock = setup(pod("p-0", "Failed", reason="Evicted"))
    api.fail("DELETE", r"/pods/p-0$", 403, times=-1, message="pods is forbidden")
    waits = []
    for _ in range(5):
        waits.append(w.sync(KEY))
        shell.feed(w, api)
        clock.now += timedelta(seconds=1)
    assert waits == [1.0, 1.0, 1.0, 1.0, 0.0]   # given up: looked at again at once
    assert api.sent("DELETE") == []
    [(_, failed)] = [(n, e) for n, e in events.sent if e.reason == "ActionFailed"]
    assert "pods is forbidden" in failed.note
    assert annotation(api, vocabulary.INTENTS_ANNOTATION) is None


def test_a_job_is_queued_once_its_caches_have_synced_not_at_each_change_before() -> None:
    w, _, _, _ = setup(pod("p-0"))
    informers = w.caches.informers()
    for informer in informers:
        informer.synced.clear()
    for _ in range(3):   # pods listed while the caches fill: their job is not queued
        w.enqueue(KEY, 0.0)
        w.enqueue(KEY, None)
    assert len(w.queue) == 0 and w.queue.get(timeout=0.1) is None
    for informer in informers[:-1]:
        informer.synced.set()
        informer.on_synced()
    w.enqueue(KEY, 0.0)
    assert len(w.queue) == 0, "queued while one of its caches was still filling"
    informers[-1].synced.set()
    informers[-1].on_synced()   # the last list's end: every job is queued once
    assert w.queue.get(timeout=1) == KEY
    w.queue.done(KEY)
    w.enqueue(KEY, 0.0)   # from now on, at each change
    assert w.queue.get(timeout=1) == KEY


def test_a_job_whose_caches_have_not_synced_waits() -> None:
    w, api, _, _ = setup(pod("p-0"))
    for informer in w.caches.informers():
        informer.synced.clear()
    with pytest.raises(worker.NotYet):
        w.sync(KEY)
    w.process(KEY)
    assert api.sent("PATCH") == []


@pytest.mark.parametrize("change", ["deleted", "deleting", "out of scope"])
def test_a_job_gone_going_or_out_of_scope_gets_nothing(change: str) -> None:
    text = RULES.replace("job trainer: example.dev/v1 Trainer {",
                         'job trainer: example.dev/v1 Trainer where label "team" = "ml" {') \
        if change == "out of scope" else RULES
    w, api, _, _ = setup(pod("p-0"), text=text)
    if change == "deleted":
        api.remove(PATH)
    elif change == "deleting":
        api.merge_patch(PATH, {"metadata": {"deletionTimestamp": "2026-01-01T11:59:00Z"}})
    shell.feed(w, api)
    before = len(api.log)
    assert w.sync(KEY) is None
    assert api.log[before:] == []


def test_a_time_in_the_rules_is_a_requeue() -> None:
    text = RULES.replace('    running    when any pod running',
                         '    failed     when any pod pending for 10m\n'
                         '    running    when any pod running')
    pending = pod("p-0", "Pending")
    pending["metadata"]["creationTimestamp"] = "2026-01-01T11:58:00Z"
    w, _, _, _ = setup(pending, text=text)
    assert w.sync(KEY) == 8 * 60


def test_a_pod_missing_from_the_cache_is_looked_for_live() -> None:
    """A pod relabelled out of the pod watch looks deleted in the cache: the worker lists the
    namespace's pods before acting, and a pod that still exists gets no `pod deleted` action."""
    text = RULES.replace("    on pod evicted", "    on pod deleted -> fail job reason \"Gone\"\n    on pod evicted")
    w, api, _, _ = setup(pod("p-0"), text=text)
    w.sync(KEY)
    watch = next(iter(w.caches.pod_watches.values()))
    list(watch.store.replace([]))   # the cache lost it, the API server still has it
    w.sync(KEY)
    assert [r for r in api.log if r.method == "GET" and r.path == "/api/v1/namespaces/ns/pods"]
    assert annotation(api, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"


# -- the log: every verdict change and every action, once, at INFO ------------------------------

def said(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "jobrules.controller" and r.levelno >= level]


def test_verdict_changes_and_actions_are_logged_with_their_job_reason_and_rule(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    w, api, _, _ = setup(pod("p-0"))
    w.sync(KEY)
    w.sync(KEY)                          # nothing changed: nothing said
    api.add(pod("p-0", "Failed", reason="Evicted"), "pods")
    shell.feed(w, api)
    w.sync(KEY)
    cause = "policy podEvicted#0, reason none, rule t.rules:8:5, pod p-0"
    assert said(caplog) == [
        "trainer ns/t: verdict Running (reason none, rule t.rules:6:5)",
        "trainer ns/t: verdict Running -> Restarting (reason PodEvicted, rule t.rules:8:5)",
        f"trainer ns/t: restartPod scheduled ({cause})",
        f"trainer ns/t: restartPod done ({cause})",
    ]
    assert {r.levelno for r in caplog.records if r.name == "jobrules.controller"} == {logging.INFO}


def test_a_dropped_action_is_logged_with_why_then_its_fallback(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    w, api, _, clock = setup(pod("p-0", "Failed", reason="Evicted"), pod("p-1"))
    give_up_the_restart(w, api, clock)
    w.sync(KEY)
    cause = "policy podEvicted#0, reason none, rule t.rules:8:5, pod p-0"
    assert said(caplog) == [
        "trainer ns/t: verdict Restarting (reason PodEvicted, rule t.rules:8:5)",
        f"trainer ns/t: restartPod scheduled ({cause})",
        f"trainer ns/t: restartPod dropped: 403 Planted: pods is forbidden ({cause})",
        "trainer ns/t: verdict Restarting -> Failed (reason PodEvicted, rule t.rules:8:5)",
        f"trainer ns/t: failJob scheduled ({cause})",
        f"trainer ns/t: failJob done ({cause})",
    ]
    [dropped] = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped.levelno == logging.WARNING


def test_a_write_refused_logs_no_verdict(caplog: pytest.LogCaptureFixture) -> None:
    """Said once written: a commit that met a 409 decided nothing yet."""
    caplog.set_level(logging.INFO)
    w, api, _, _ = setup(pod("p-0"))
    api.fail("PATCH", r"/trainers/t$", 409)
    with pytest.raises(kube.Conflict):
        w.sync(KEY)
    assert said(caplog) == []


# -- nothing stuck: an action given up lets go of what it held -----------------------------------

def give_up_the_restart(w: worker.Worker, api: FakeApi, clock: shell.Clock,
                        why: str = "pods is forbidden") -> None:
    api.fail("DELETE", r"/pods/p-0$", 403, times=worker.journal.MAX_ATTEMPTS, message=why)
    for _ in range(worker.journal.MAX_ATTEMPTS):
        w.sync(KEY)
        shell.feed(w, api)
        clock.now += timedelta(seconds=1)


def stored_state(api: FakeApi) -> dict[str, Any]:
    return annotation(api, vocabulary.STATE_ANNOTATION)


def test_a_restart_given_up_runs_the_fallback_and_lets_go_of_the_pod() -> None:
    w, api, _, clock = setup(pod("p-0", "Failed", reason="Evicted"), pod("p-1"))
    give_up_the_restart(w, api, clock)
    assert "pods is forbidden" in stored_state(api)["released"][0]["why"]   # with the drop
    w.sync(KEY)   # the next look: the fallback, `fail job`
    verdict = annotation(api, vocabulary.VERDICT_ANNOTATION)
    assert (verdict["phase"], verdict["final"]) == ("Failed", True)
    assert "restart pod given up (403 Planted: pods is forbidden): fail job" in verdict["message"]
    conditions = {c["type"]: c for c in api.get(PATH)["status"]["conditions"]}
    assert conditions["FailureTarget"]["status"] == "True"
    after = stored_state(api)
    assert "released" not in after and "restarting" not in after
    assert not any("x" in code for codes in after.get("pods", {}).values() for code in codes)


def test_a_restart_given_up_without_a_fallback_leaves_restarting_and_sees_the_pod_again() -> None:
    text = RULES.replace("restart pod max 2 then fail job", "restart pod max 2")
    w, api, _, clock = setup(pod("p-0", "Failed", reason="Evicted"), pod("p-1"), text=text)
    give_up_the_restart(w, api, clock)
    w.sync(KEY)
    assert annotation(api, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"   # the rules' own
    assert "restarting" not in stored_state(api)
    # the RBAC is fixed: the next eviction acts
    api.add(pod("p-1", "Failed", reason="Evicted"), "pods")
    shell.feed(w, api)
    w.sync(KEY)
    assert [r.path for r in api.sent("DELETE")] == ["/api/v1/namespaces/ns/pods/p-1"]


def test_an_await_past_its_time_lets_go_too() -> None:
    text = RULES.replace("on pod evicted -> restart pod max 2 then fail job",
                         "on pod evicted -> restart job max 2 then fail job").replace(
        'fail job -> condition "FailureTarget"',
        'fail job -> condition "FailureTarget"\n        restart job -> delete pods,\n'
        '                       await no pod running within 1m')
    w, api, events, clock = setup(pod("p-0", "Failed", reason="Evicted"), pod("p-1"), text=text)
    w.sync(KEY)
    assert len(api.sent("DELETE")) == 2
    api.add(pod("p-2"), "pods")   # a pod that does not go: the await never holds
    for _ in range(4):
        shell.feed(w, api)
        clock.now += timedelta(seconds=30)
        w.sync(KEY)
    shell.feed(w, api)
    w.sync(KEY)   # the fallback
    [(_, failed)] = [(n, e) for n, e in events.sent if e.reason == "ActionFailed"]
    assert "restart job" in failed.note and "waited 60s" in failed.note
    verdict = annotation(api, vocabulary.VERDICT_ANNOTATION)
    assert verdict["phase"] == "Failed" and "restart job given up (waited 60s" in verdict["message"]


def test_a_journal_that_cannot_be_read_lets_go_of_every_action() -> None:
    w, api, events, _ = setup(pod("p-0", "Failed", reason="Evicted"), pod("p-1"))
    w.sync(KEY)
    held = stored_state(api)
    assert "restarting" in held   # a restart of ours under way, its pod ours
    api.merge_patch(PATH, {"metadata": {"annotations": {vocabulary.INTENTS_ANNOTATION: "{not json"}}})
    shell.feed(w, api)
    w.sync(KEY)
    after = stored_state(api)
    assert "restarting" not in after
    assert not any("x" in code for codes in after.get("pods", {}).values() for code in codes)
    assert annotation(api, vocabulary.INTENTS_ANNOTATION) is None
    assert [e.reason for _, e in events.sent if e.reason == "JournalIgnored"] == ["JournalIgnored"]


# -- write only what changed ---------------------------------------------------------------------

def test_pods_starting_write_the_job_only_when_its_verdict_changes() -> None:
    """The shipped Volcano rules listen for no pod event: two pods seen Pending, then Running,
    are two writes of the job (its first verdict, then Running), not one per transition."""
    shipped = corpus_plan()
    api = FakeApi(status_subresource={"jobs.batch.volcano.sh"})
    vc_path = "/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs/v"
    api.add({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
             "metadata": {"name": "v", "namespace": "ns", "uid": "uid-v"},
             "status": {"state": {"phase": "Pending"}}}, "jobs")
    w, _, clock = shell.make(shipped, api, NOW)

    def member(name: str, phase: str) -> dict[str, Any]:
        out = pod(name, phase)
        out["metadata"]["labels"] = {"volcano.sh/job-name": "v", "volcano.sh/task-spec": "worker"}
        out["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1",
                                               "kind": "Job", "name": "v", "uid": "uid-v",
                                               "controller": True}]
        return out
    for name, phase in (("w-0", "Pending"), ("w-1", "Pending"), ("w-0", "Running"),
                        ("w-1", "Running")):
        api.add(member(name, phase), "pods")
        shell.feed(w, api)
        clock.now += timedelta(seconds=5)
        w.sync(("vcjob", "ns", "v"))
    writes = [r for r in api.sent("PATCH") if r.path.startswith(vc_path)]
    assert len(writes) == 2
    assert annotation_of(api, vc_path, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"


ENDS = """
job trainer: example.dev/v1 Trainer {
    pods owned
    failed     when any pod failed
    succeeded  when all pods succeeded
    running    when any pod running
    pending    otherwise
    on pod failed exit 3 -> fail job
    actions {
        fail job -> condition "FailureTarget"
    }
}
"""


def test_pods_cleaned_up_after_they_ended_write_the_job_only_for_its_verdicts() -> None:
    """Rules that take a pod's failure, and nothing of its deletion: two pods that start, run,
    succeed, are then deleted by their operator (a cleanPodPolicy) and go are four writes of
    the job (Running and Succeeded, each the commit and the condition). A pod that ended keeps
    its phase, so remembering its deletion could change no later decision."""
    w, api, _, clock = setup(pod("p-0", "Pending"), pod("p-1", "Pending"), text=ENDS)
    assert w.sync(KEY) is None
    steps = [("Running", False), ("Succeeded", False), ("Succeeded", True), (None, True)]
    for phase, deleting in steps:
        for name in ("p-0", "p-1"):
            if phase is None:
                api.remove(f"/api/v1/namespaces/ns/pods/{name}")
                continue
            moved = pod(name, phase)
            if deleting:
                moved["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:30Z"
            api.add(moved, "pods")
            shell.feed(w, api)
            clock.now += timedelta(seconds=5)
            assert w.sync(KEY) is None
        shell.feed(w, api)
        assert w.sync(KEY) is None
    writes = [r for r in api.sent("PATCH") if r.path.startswith(PATH)]
    assert [(r.path, annotation_in(r.body)) for r in writes] == [
        (PATH, "Pending"), (PATH + "/status", None), (PATH, "Running"), (PATH + "/status", None),
        (PATH, "Succeeded"), (PATH + "/status", None)]


def annotation_in(body: dict[str, Any]) -> str | None:
    """The verdict phase a patch of ours carried, if any."""
    text = ((body.get("metadata") or {}).get("annotations") or {}).get(
        vocabulary.VERDICT_ANNOTATION)
    return None if text is None else json.loads(text)["phase"]


def corpus_plan() -> plan.Plan:
    from tests.unit.runtime import corpus
    return corpus.plans()[0].loaded


def annotation_of(api: FakeApi, path: str, key: str) -> Any:
    text = objects.annotation(api.get(path), key)
    return None if text is None else json.loads(text)


# -- audit -------------------------------------------------------------------------------------

AUDITED = RULES.replace("    on pod evicted ->", "    audit on pod evicted ->")


def audited_count(action: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("jobrules_controller_actions_total", {
        "kind": "trainer", "action": action, "result": "audited"}) or 0.0


def changes(api: FakeApi) -> list[tuple[str, str]]:
    """The requests that change something, by method and path."""
    return [(r.method, r.path) for r in api.log if r.method not in ("GET", "LIST", "WATCH")]


@pytest.mark.parametrize("how", ["rules", "JOBRULES_AUDIT"])
def test_a_policy_in_audit_says_what_it_would_do_and_does_nothing(how: str) -> None:
    """`audit on` in the rules, or the enforced policy named by JOBRULES_AUDIT: the verdict is
    written as always; the action is an Event and a metric, and no pod is touched."""
    evicted = pod("p-0", "Failed", reason="Evicted")
    if how == "rules":
        w, api, events, _ = setup(evicted, pod("p-1"), text=AUDITED)
    else:
        api = FakeApi(status_subresource={"trainers.example.dev"})
        api.add({"apiVersion": "example.dev/v1", "kind": "Trainer",
                 "metadata": {"name": "t", "namespace": "ns", "uid": "uid-t", "generation": 1}},
                "trainers")
        api.add(evicted, "pods")
        api.add(pod("p-1"), "pods")
        w, events, _ = shell.make(plan.audited(compiled(), ["trainer/podEvicted#0"]), api, NOW)
        shell.feed(w, api)
    before = audited_count("restartPod")
    w.sync(KEY)
    assert changes(api) == [("PATCH", PATH), ("PATCH", PATH + "/status")]   # the verdict only
    assert annotation(api, vocabulary.INTENTS_ANNOTATION) is None
    assert annotation(api, vocabulary.VERDICT_ANNOTATION)["phase"] == "Running"
    [(_, event)] = [(n, e) for n, e in events.sent if e.reason == "Audit"]
    assert event.action == "RestartPod" and "would restart pod p-0" in event.note
    assert audited_count("restartPod") == before + 1
    # looked at again: nothing new is decided, said or counted
    w.sync(KEY)
    assert len(changes(api)) == 2 and audited_count("restartPod") == before + 1


def test_the_same_policy_enforced_deletes_the_pod() -> None:
    """The mirror of the audit test: it is the audit that keeps the pod, not the set-up."""
    w, api, _, _ = setup(pod("p-0", "Failed", reason="Evicted"), pod("p-1"))
    w.sync(KEY)
    assert ("DELETE", "/api/v1/namespaces/ns/pods/p-0") in changes(api)


def test_a_kind_in_audit_annotation_only_writes_its_verdict_only_as_our_annotation() -> None:
    text = AUDITED.replace("    pods owned", "    mode audit annotation only\n    pods owned")
    w, api, _, _ = setup(pod("p-0", "Failed", reason="Evicted"), text=text)
    w.sync(KEY)
    assert changes(api) == [("PATCH", PATH)]   # no /status: no condition, no status fields
    assert annotation(api, vocabulary.VERDICT_ANNOTATION) is not None
    assert "conditions" not in (api.get(PATH).get("status") or {})


def test_the_phase_label_follows_the_verdict_and_is_no_news_itself() -> None:
    w, api, _, _ = setup(pod("p-0"))
    w.sync(KEY)
    assert objects.labels(api.get(PATH))["jobrules.dev/phase"] == "Running"
    api.add(pod("p-0", "Failed"), "pods")
    shell.feed(w, api)
    w.sync(KEY)
    assert objects.labels(api.get(PATH))["jobrules.dev/phase"] == "Failed"
    # our own label's change alone is not a change worth a reconcile
    from runtime import watches
    [kind] = compiled().kinds
    cut = watches.significant(kind)
    job = api.get(PATH)
    relabelled = {**job, "metadata": {**job["metadata"], "labels": {"jobrules.dev/phase": "Running"}}}
    assert cut(job) == cut(relabelled)


def test_a_command_is_made_even_when_the_verdict_is_written_into_the_status_first() -> None:
    """A Volcano job whose rules write status.state.* and a condition: the commit and the
    status patch come before the Command, and are not taken for the Command having acted."""
    import yaml

    from rulec import api as rulec_api

    built = rulec_api.build(["examples/volcano-oomkilled/vcjob.rules"])
    rules = plan.loads(emit.dumps(built.plan))
    job = yaml.safe_load(open("examples/volcano-oomkilled/job.yaml"))
    api = FakeApi(status_subresource={"jobs.batch.volcano.sh"})
    api.add(job, "jobs")
    api.add(yaml.safe_load(open("examples/volcano-oomkilled/pods/master-succeeded.yaml")), "pods")
    w, _, _ = shell.make(rules, api, datetime(2020, 3, 12, 11, 15, tzinfo=timezone.utc))
    shell.feed(w, api)
    w.sync(("vcjob", job["metadata"]["namespace"], job["metadata"]["name"]))
    made = [(r.path.rsplit("/", 1)[-1], r.body["action"]) for r in api.log if r.method == "POST"]
    assert made == [("commands", "CompleteJob")], api.log


class Gate:
    """Shards as the worker sees them: the namespaces it holds, and the reconciles let in."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.entered: list[str] = []

    def owns(self, namespace: str) -> bool:
        return namespace in self.held

    def enter(self, namespace: str) -> bool:
        if namespace in self.held:
            self.entered.append(namespace)
            return True
        return False

    def leave(self, namespace: str) -> None:
        pass


def test_with_shards_only_the_held_namespaces_jobs_are_queued_and_reconciled() -> None:
    w, api, _, _ = setup(pod("p-0"))
    gate = Gate(set())
    w.gate = gate
    w.queue = WorkQueue()
    w.enqueue(KEY, 1.0)
    w.resync()
    assert len(w.queue) == 0          # another replica's shard: nothing queued
    gate.held.add("ns")
    w.resync()
    assert len(w.queue) == 1
    gate.held.clear()                 # given back while it waited: skipped, nothing written
    w.queue.shut_down()
    w.work()
    assert gate.entered == [] and api.sent("PATCH") == []
