"""A batch/v1 Job run by kube-controller-manager's Job controller, with the controller beside it:
our verdict and the Job controller's conditions agree, and our writes never fight its (a few
writes per verdict transition, no 409 loop on either side)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support import controllers
from support import apiserver
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("controller_manager")]

FAIL_ON_137 = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}}]


def test_our_verdict_agrees_with_the_job_controller(control_plane: Any, api: Any, namespace: str,
                                                    tmp_path: Path) -> None:
    plan = controllers.compile_plan(controllers.REPO / "rules", tmp_path / "plan.json")
    path = apiserver.JOBS.path(namespace, "train")
    with controllers.running(control_plane, plan, namespace, tmp_path) as controller:
        job = apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(namespace, "train",
                                                            pod_failure_rules=FAIL_ON_137))
        [pod] = apiserver.job_pods(api, job)
        pod = apiserver.report_running(api, pod)
        controllers.wait_for_verdict(api, path, "Running")
        apiserver.report_oom_killed(api, pod)
        failed = apiserver.wait_for_condition(api, path, "Failed")
        done = controllers.wait_for_verdict(api, path, "Failed")
        verdict = controllers.verdict(done)
        assert (failed["reason"], verdict["reason"]) == ("PodFailurePolicy", "PodFailurePolicy")
        assert verdict["message"] in (failed["message"], apiserver.condition(done, "FailureTarget")["message"])
        ours = apiserver.wait_for("our condition", lambda: (
            c if (c := apiserver.condition(apiserver.get(api, path), "JobRulesVerdict")) and c["status"] == "True"
            else None))
        assert ours["reason"] == "PodFailurePolicy"
        # the Job controller's conditions survive beside ours
        final = apiserver.get(api, path)
        assert {c["type"] for c in final["status"]["conditions"]} >= {
            "FailureTarget", "Failed", "JobRulesVerdict"}
        # One write per verdict transition (the annotations, the label and the condition
        # together, through /status: a batch Job's keeps metadata there, and none needed
        # sending again to the Job itself), one more for each of the pod's changes that moves no
        # verdict (its record in the state: created, finished, released by the Job controller),
        # and a conflict or two at most, never a loop.
        transitions = controller.metric("jobrules_controller_verdicts_total")
        patches = {r: controller.metric("jobrules_controller_api_requests_total", verb="patch",
                                        resource=r) for r in ("jobs.batch", "jobs.batch/status")}
        conflicts = controller.metric("jobrules_controller_api_requests_total", code="409")
        assert 3 <= transitions <= 4 and patches["jobs.batch/status"] <= transitions + 3, (
            transitions, patches)
        assert patches["jobs.batch"] == 0, patches
        assert conflicts <= 2, conflicts
    if control_plane.plane is not None:
        log = (control_plane.plane.root / "kube-controller-manager.log").read_text(errors="replace")
        fights = [line for line in log.splitlines()
                  if f'"{namespace}/train"' in line and "the object has been modified" in line]
        assert len(fights) <= 2, fights
