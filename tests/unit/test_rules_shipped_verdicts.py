"""The shipped rules give the right verdict for each kind's real status conventions.

Objects are shaped as each operator writes them (conditions, phases, pod labels and owners);
the plan is the golden one (`test_rules_shipped.py` keeps it equal to what `rules/` compiles to),
so these tests exercise exactly what is shipped, through the runtime's own evaluator.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from runtime import evaluator, functions, plan, pods, templates

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "plans" / "rules.json"
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
T = "2025-03-01T11:00:00Z"
UID = "6c1f3a52-0000-4000-8000-00000000000a"

JOB = ("batch/v1", "Job")
VCJOB = ("batch.volcano.sh/v1alpha1", "Job")
TFJOB = ("kubeflow.org/v1", "TFJob")
PYTORCHJOB = ("kubeflow.org/v1", "PyTorchJob")
MPIJOB = ("kubeflow.org/v1", "MPIJob")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
WORKFLOW = ("argoproj.io/v1alpha1", "Workflow")
PIPELINERUN = ("tekton.dev/v1", "PipelineRun")


@pytest.fixture(scope="module")
def shipped() -> plan.Plan:
    return plan.load_file(GOLDEN)


# -- objects as the operators write them ---------------------------------------------------------

def job(gvk: tuple[str, str], *, spec: dict | None = None, status: dict | None = None,
        name: str = "train") -> dict[str, Any]:
    return {"apiVersion": gvk[0], "kind": gvk[1],
            "metadata": {"name": name, "namespace": "ml", "uid": UID, "creationTimestamp": T},
            "spec": spec or {}, "status": status or {}}


def cond(type: str, status: str = "True", reason: str | None = None,
         message: str | None = None) -> dict[str, Any]:
    out = {"type": type, "status": status, "lastTransitionTime": T}
    out.update({k: v for k, v in (("reason", reason), ("message", message)) if v is not None})
    return out


def conditions(*items: dict[str, Any]) -> dict[str, Any]:
    return {"conditions": list(items)}


def terminated(name: str, code: int, reason: str) -> dict[str, Any]:
    return {"name": name, "restartCount": 0, "ready": False,
            "state": {"terminated": {"exitCode": code, "reason": reason,
                                     "startedAt": T, "finishedAt": T}}}


def running(name: str) -> dict[str, Any]:
    return {"name": name, "restartCount": 0, "ready": True, "state": {"running": {"startedAt": T}}}


def labels_of(owner: dict[str, Any], task: str | None) -> tuple[dict[str, str], dict[str, Any]]:
    """The labels and controlling owner reference each operator gives its pods."""
    name, kind = owner["metadata"]["name"], owner["kind"]
    own = {"apiVersion": owner["apiVersion"], "kind": kind, "name": name, "uid": UID,
           "controller": True}
    child = {"controller": True, "name": f"{name}-{task}", "uid": "child-uid"}
    if owner["apiVersion"] == "batch/v1":
        return ({"batch.kubernetes.io/controller-uid": UID,
                 "batch.kubernetes.io/job-name": name}, own)
    if kind == "Job":
        return {"volcano.sh/job-name": name, "volcano.sh/task-spec": task or "main"}, own
    if owner["apiVersion"] == "kubeflow.org/v1":
        return {"training.kubeflow.org/job-name": name,
                "training.kubeflow.org/replica-type": task or "worker"}, own
    if kind == "JobSet":
        return ({"jobset.sigs.k8s.io/jobset-name": name,
                 "jobset.sigs.k8s.io/replicatedjob-name": task or "workers"},
                dict(child, apiVersion="batch/v1", kind="Job"))
    if kind == "Workflow":
        return {"workflows.argoproj.io/workflow": name}, own
    return ({"tekton.dev/pipelineRun": name, "tekton.dev/pipelineTask": task or "build"},
            dict(child, apiVersion="tekton.dev/v1", kind="TaskRun"))


# A pod's `main` container by pod phase; a Failed one was SIGTERMed unless a test says otherwise.
MAIN = {"Pending": [], "Running": [running("main")],
        "Succeeded": [terminated("main", 0, "Completed")],
        "Failed": [terminated("main", 143, "Error")]}


def pod(owner: dict[str, Any], name: str, phase: str, *containers: dict[str, Any],
        task: str | None = None, init: tuple[dict[str, Any], ...] = (),
        reason: str | None = None, deleting: bool = False) -> dict[str, Any]:
    labels, ref = labels_of(owner, task)
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                            "creationTimestamp": T, "labels": labels, "ownerReferences": [ref]}
    if deleting:
        meta["deletionTimestamp"] = T
    status: dict[str, Any] = {"phase": phase, "startTime": T,
                              "containerStatuses": list(containers) or MAIN[phase]}
    if init:
        status["initContainerStatuses"] = list(init)
    if reason:
        status["reason"] = reason
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}, "status": status}


def verdict_of(shipped: plan.Plan, obj: dict[str, Any],
               pods: list[dict[str, Any]]) -> tuple[str, str | None, str | None]:
    mine = evaluator.pods_of(shipped, obj, pods, NOW)
    assert len(mine) == len(pods), "every pod of the scenario belongs to its job"
    v = evaluator.evaluate(shipped, obj, mine, None, NOW).verdict
    return v.phase, v.reason, v.message


# -- batch/v1 Job --------------------------------------------------------------------------------

def test_job_suspended_is_not_running(shipped: plan.Plan) -> None:
    obj = job(JOB, spec={"suspend": True},
              status=dict(conditions(cond("Suspended", reason="JobSuspended",
                                          message="Job suspended")), active=1))
    still_running = pod(obj, "train-abc12", "Running")
    assert verdict_of(shipped, obj, [still_running]) == (
        "Suspended", "JobSuspended", "Job suspended")


@pytest.mark.parametrize(
    ("types", "reason", "message", "phase"),
    [
        pytest.param(("FailureTarget", "Failed"), "BackoffLimitExceeded",
                     "Job has reached the specified backoff limit", "Failed", id="backoff-limit"),
        pytest.param(("Failed",), "DeadlineExceeded",
                     "Job was active longer than specified deadline", "Failed",
                     id="deadline-before-1.31"),
        pytest.param(("FailureTarget",), "PodFailurePolicy",
                     "Container main for pod ml/train-x failed with exit code 42 matching FailJob "
                     "rule at index 0", "Failed", id="pod-failure-policy-pods-still-terminating"),
        pytest.param(("SuccessCriteriaMet", "Complete"), "CompletionsReached",
                     "Reached expected number of succeeded pods", "Succeeded", id="complete"),
    ],
)
def test_job_outcome_comes_from_its_conditions(shipped: plan.Plan, types: tuple[str, ...],
                                               reason: str, message: str, phase: str) -> None:
    status = conditions(*(cond(t, reason=reason, message=message) for t in types))
    assert verdict_of(shipped, job(JOB, status=status), []) == (phase, reason, message)


def test_job_resumed_without_pods_yet_is_pending(shipped: plan.Plan) -> None:
    obj = job(JOB, status=conditions(cond("Suspended", "False", reason="JobResumed")))
    assert verdict_of(shipped, obj, []) == ("Pending", None, None)


@pytest.mark.parametrize(("status", "expected"), [
    pytest.param({"active": 1, "ready": 1}, "Running", id="katib-fixture-active-ready"),
    pytest.param({"active": 1, "ready": 0}, "Pending", id="active-but-not-ready"),
    pytest.param({"active": 1}, "Running", id="no-ready-count-before-1.29"),
    pytest.param({}, "Pending", id="nothing-yet"),
])
def test_job_running_from_its_counts_when_pods_are_not_listed(shipped: plan.Plan, status: dict,
                                                              expected: str) -> None:
    """Katib's status fixtures give the Job alone, without its pods."""
    assert verdict_of(shipped, job(JOB, status=status), [])[0] == expected


def test_job_with_a_failed_pod_being_retried_is_running(shipped: plan.Plan) -> None:
    obj = job(JOB, status={"active": 1, "failed": 1})
    pods = [pod(obj, "train-a", "Failed", terminated("main", 1, "Error")),
            pod(obj, "train-b", "Running")]
    assert verdict_of(shipped, obj, pods)[0] == "Running"


# -- Volcano Job ---------------------------------------------------------------------------------

def test_volcano_oomkilled_pod_fails_the_job_volcano_called_completed(shipped: plan.Plan) -> None:
    obj = job(VCJOB, status={"state": {"phase": "Completed"}, "failed": 1})
    oom = pod(obj, "train-master-0", "Failed", terminated("jarvis-single-job", 137, "OOMKilled"),
              task="master", init=(terminated("runtime", 0, "Completed"),))
    assert verdict_of(shipped, obj, [oom]) == (
        "Failed", "PodFailed",
        "task master pod train-master-0: container jarvis-single-job OOMKilled (exit 137)")


@pytest.mark.parametrize(
    ("phase", "pods", "expected"),
    [
        pytest.param("Completed", [("master", "Succeeded", False)], "Succeeded",
                     id="all-succeeded"),
        pytest.param("Completed", [], "Succeeded", id="completed-pods-gone"),
        pytest.param("Running", [("master", "Running", False), ("worker", "Pending", False)],
                     "Running", id="running"),
        pytest.param("Pending", [("master", "Pending", False)], "Pending", id="pending"),
        pytest.param("Aborted", [], "Suspended", id="aborted"),
        pytest.param("Aborting", [("master", "Running", True)], "Suspended", id="aborting"),
        pytest.param("Restarting", [("master", "Failed", True)], "Restarting", id="restarting"),
        pytest.param("Completing", [("master", "Succeeded", False), ("worker", "Failed", True)],
                     "Running", id="completing-workers-killed-are-not-failures"),
        pytest.param("Failed", [], "Failed", id="volcano-failed"),
    ],
)
def test_volcano_phases(shipped: plan.Plan, phase: str, pods: list, expected: str) -> None:
    obj = job(VCJOB, status={"state": {"phase": phase}})
    objs = [pod(obj, f"train-{task}-{i}", p, task=task, deleting=deleting)
            for i, (task, p, deleting) in enumerate(pods)]
    assert verdict_of(shipped, obj, objs)[0] == expected


def test_volcano_terminated_reason_falls_back_to_the_phase(shipped: plan.Plan) -> None:
    obj = job(VCJOB, status={"state": {"phase": "Terminated", "reason": "", "message": "killed"}})
    assert verdict_of(shipped, obj, []) == ("Failed", "Terminated", "killed")


RESTART_ON_EVICTION = {"policies": [{"event": "PodEvicted", "action": "RestartJob"}]}


@pytest.mark.parametrize(("spec", "status", "expected"), [
    pytest.param(RESTART_ON_EVICTION, {}, "Restarting", id="the-job-policy-restarts-it"),
    pytest.param({"tasks": [{"name": "worker", "policies": [
        {"events": ["PodFailed", "PodEvicted"], "action": "RestartTask"}]}]}, {}, "Restarting",
        id="a-task-policy-restarts-it"),
    pytest.param({"policies": [{"event": "*", "action": "RestartJob"}], "maxRetry": 2},
                 {"retryCount": 2}, "Failed", id="retries-spent"),
    pytest.param({}, {}, "Failed", id="no-policy-an-eviction-is-a-failure"),
    pytest.param({"policies": [{"event": "PodEvicted", "action": "AbortJob"}]}, {}, "Failed",
                 id="not-a-restart"),
])
def test_volcano_evicted_pod(shipped: plan.Plan, spec: dict, status: dict, expected: str) -> None:
    """Volcano's own policies restart on an eviction (ours add none): the job is Restarting only
    when one of them will; otherwise the evicted pod failed its task."""
    obj = job(VCJOB, spec=spec, status={"state": {"phase": "Running"}, **status})
    gone = pod(obj, "train-worker-1", "Failed", terminated("main", 137, "Error"), task="worker",
               reason="Evicted")
    assert verdict_of(shipped, obj, [gone])[:2] == (expected, "PodEvicted")


def test_volcano_pod_failure_its_policy_restarts_is_restarting(shipped: plan.Plan) -> None:
    obj = job(VCJOB, spec={"policies": [{"event": "PodFailed", "action": "RestartJob"}]},
              status={"state": {"phase": "Running"}})
    crashed = pod(obj, "train-master-0", "Failed", terminated("main", 1, "Error"), task="master")
    assert verdict_of(shipped, obj, [crashed])[:2] == ("Restarting", "PodFailed")


def test_volcano_shipped_rules_add_no_policy(shipped: plan.Plan) -> None:
    assert shipped.kind_named("vcjob").policies == ()


def test_volcano_failed_holds_until_volcano_runs_the_job_again(shipped: plan.Plan) -> None:
    obj = job(VCJOB, status={"state": {"phase": "Running"}, "retryCount": 0})
    oom = pod(obj, "train-master-0", "Failed", terminated("main", 137, "OOMKilled"), task="master")
    failed = evaluator.evaluate(shipped, obj, [oom], None, NOW)
    assert (failed.verdict.phase, failed.verdict.final) == ("Failed", True)
    completed = job(VCJOB, status={"state": {"phase": "Completed"}, "retryCount": 0})
    assert evaluator.evaluate(shipped, completed, [], failed.state, NOW).verdict == failed.verdict
    again = job(VCJOB, status={"state": {"phase": "Running"}, "retryCount": 1})
    rerun = pod(again, "train-master-0", "Running", task="master")
    assert evaluator.evaluate(shipped, again, [rerun], failed.state, NOW).verdict.phase == "Running"


# -- Kubeflow ------------------------------------------------------------------------------------

@pytest.mark.parametrize("gvk", [TFJOB, PYTORCHJOB, MPIJOB], ids=lambda g: g[1])
@pytest.mark.parametrize(
    ("conds", "spec", "expected"),
    [
        pytest.param([("Created", "True", "Created")], {}, ("Pending", None, None), id="created"),
        pytest.param([("Created", "True", "Created"), ("Running", "True", "Running")], {},
                     ("Running", None, None), id="running"),
        pytest.param([("Created", "True", "Created"), ("Restarting", "True", "Restarting")], {},
                     ("Restarting", "Restarting", "m"), id="restarting"),
        pytest.param([("Created", "True", "Created"), ("Running", "False", "Running"),
                      ("Failed", "True", "Failed")], {}, ("Failed", "Failed", "m"), id="failed"),
        pytest.param([("Created", "True", "Created"), ("Running", "False", "Running"),
                      ("Succeeded", "True", "Succeeded")], {}, ("Succeeded", "Succeeded", "m"),
                     id="succeeded"),
        pytest.param([("Created", "True", "Created"), ("Running", "False", "Suspended"),
                      ("Suspended", "True", "Suspended")], {"runPolicy": {"suspend": True}},
                     ("Suspended", "Suspended", "m"), id="suspended"),
        pytest.param([("Created", "True", "Created")], {"runPolicy": {"suspend": True}},
                     ("Suspended", None, None), id="suspend-requested"),
        pytest.param([("Created", "True", "Created"), ("Suspended", "False", "Resumed"),
                      ("Running", "True", "Running")], {}, ("Running", None, None), id="resumed"),
    ],
)
def test_kubeflow_conditions(shipped: plan.Plan, gvk: tuple[str, str], conds: list, spec: dict,
                             expected: tuple) -> None:
    kind = gvk[1]
    obj = job(gvk, spec=spec, status=conditions(
        *(cond(t, s, reason=kind + r, message="m") for t, s, r in conds)))
    phase, reason, message = expected
    assert verdict_of(shipped, obj, []) == (phase, reason and kind + reason, message)


def test_kubeflow_pods_are_found_by_owner_and_job_name(shipped: plan.Plan) -> None:
    obj = job(PYTORCHJOB)
    mine = pod(obj, "train-master-0", "Running", running("pytorch"), task="master")
    other = pod(job(PYTORCHJOB, name="other"), "other-master-0", "Running", task="master")
    assert evaluator.pods_of(shipped, obj, [mine, other], NOW) == [mine]


# -- JobSet --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("spec", "types", "reason", "message", "phase"),
    [
        pytest.param({}, ("Completed",), "AllJobsCompleted", "jobset completed successfully",
                     "Succeeded", id="completed"),
        pytest.param({}, ("Failed",), "ReachedMaxRestarts",
                     "jobset failed due to reaching max number of restarts", "Failed", id="failed"),
        pytest.param({"suspend": True}, ("Suspended",), "SuspendedJobs", "jobset is suspended",
                     "Suspended", id="suspended"),
        pytest.param({}, ("RestartingJobSet",), "DefaultFailurePolicy", "restarting",
                     "Restarting", id="restarting"),
    ],
)
def test_jobset_conditions(shipped: plan.Plan, spec: dict, types: tuple[str, ...], reason: str,
                           message: str, phase: str) -> None:
    status = conditions(*(cond(t, reason=reason, message=message) for t in types))
    obj = job(JOBSET, spec=spec, status=status)
    assert verdict_of(shipped, obj, []) == (phase, reason, message)


def test_jobset_without_pods_is_pending(shipped: plan.Plan) -> None:
    assert verdict_of(shipped, job(JOBSET), []) == ("Pending", None, None)


def test_jobset_pods_of_child_jobs_are_found_by_label(shipped: plan.Plan) -> None:
    obj = job(JOBSET)
    worker = pod(obj, "train-workers-0-0-x", "Running", task="workers")
    assert verdict_of(shipped, obj, [worker])[0] == "Running"


# -- Argo Workflow -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        pytest.param({}, {"phase": "Error", "message": "error in entry template execution"},
                     ("Failed", "Error", "error in entry template execution"), id="error"),
        pytest.param({}, {"phase": "Failed", "message": "child 'main' failed"},
                     ("Failed", "Failed", "child 'main' failed"), id="failed"),
        pytest.param({}, {"phase": "Succeeded"}, ("Succeeded", None, None), id="succeeded"),
        pytest.param({"suspend": True}, {"phase": "Running"}, ("Suspended", None, None),
                     id="suspended"),
        pytest.param({}, {"phase": "Running"}, ("Running", None, None), id="running"),
        pytest.param({}, {}, ("Pending", None, None), id="not-yet-reconciled"),
    ],
)
def test_argo_workflow(shipped: plan.Plan, spec: dict, status: dict, expected: tuple) -> None:
    assert verdict_of(shipped, job(WORKFLOW, spec=spec, status=status), []) == expected


# -- Tekton PipelineRun --------------------------------------------------------------------------

def test_tekton_v1beta1_is_read_by_the_same_kind(shipped: plan.Plan) -> None:
    obj = job(("tekton.dev/v1beta1", "PipelineRun"),
              status=conditions(cond("Succeeded", "False", "Failed", "Tasks Completed: 1 (Failed: 1)")))
    assert shipped.kind_for("tekton.dev/v1beta1", "PipelineRun") is shipped.kind_named("pipelinerun")
    assert verdict_of(shipped, obj, []) == ("Failed", "Failed", "Tasks Completed: 1 (Failed: 1)")


def test_tekton_steps_decide_not_its_own_containers(shipped: plan.Plan) -> None:
    obj = job(PIPELINERUN)
    step = pod(obj, "build-pod", "Failed", terminated("step-compile", 2, "Error"),
               terminated("sidecar-tekton-log-results", 137, "Error"),
               init=(terminated("prepare", 0, "Completed"), terminated("place-scripts", 0, "Completed")))
    kind = shipped.kind_named("pipelinerun")
    fact = pods.facts(kind, step, templates.searcher(functions.options(NOW)), pods.counted(kind))
    deciding = fact.deciding(True)
    assert deciding is not None and deciding.name == "step-compile"


@pytest.mark.parametrize(
    ("spec", "status", "reason", "message", "phase"),
    [
        pytest.param({}, "True", "Succeeded", "Tasks Completed: 2 (Failed: 0, Cancelled 0)",
                     "Succeeded", id="succeeded"),
        pytest.param({}, "False", "Failed", "Tasks Completed: 1 (Failed: 1, Cancelled 0)",
                     "Failed", id="failed"),
        pytest.param({"status": "Cancelled"}, "False", "Cancelled",
                     'PipelineRun "train" was cancelled', "Failed", id="cancelled"),
        pytest.param({}, "False", "PipelineRunTimeout",
                     'PipelineRun "train" failed to finish within "1h0m0s"', "Failed",
                     id="timeout"),
        pytest.param({}, "Unknown", "Running", "Tasks Completed: 0 (Failed: 0, Cancelled 0)",
                     "Running", id="running"),
    ],
)
def test_tekton_succeeded_condition(shipped: plan.Plan, spec: dict, status: str, reason: str,
                                    message: str, phase: str) -> None:
    obj = job(PIPELINERUN, spec=spec, status=conditions(cond("Succeeded", status, reason, message)))
    assert verdict_of(shipped, obj, []) == (phase, reason, message)


@pytest.mark.parametrize(
    ("spec", "status", "reason"),
    [
        pytest.param({"status": "PipelineRunPending"},
                     conditions(cond("Succeeded", "Unknown", "PipelineRunPending", "pending")),
                     "PipelineRunPending", id="pending"),
        pytest.param({"status": "PipelineRunPending"}, {}, "PipelineRunPending",
                     id="pending-not-yet-reconciled"),
        pytest.param({}, {}, None, id="not-yet-reconciled"),
    ],
)
def test_tekton_pending(shipped: plan.Plan, spec: dict, status: dict, reason: str | None) -> None:
    assert verdict_of(shipped, job(PIPELINERUN, spec=spec, status=status), []) == (
        "Pending", reason, None)
