"""`rulec why` on the real control plane, beside the real controller: once the controller has
written its verdict, `rulec why` agrees (exit 0); with the controller stopped and a pod's status
changed, it reports what the controller would write (exit 1); with an intent committed and not
carried out, it lists it. The API server's audit log shows it only read: it runs as the plane's
audited user, every request of which is logged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import apiserver, audit, controllers
from test_controller_actions import EVICTIONS, VOLCANO, needs_plane, volcano_job, worker

from devkit import cluster

pytestmark = pytest.mark.integration


def why(plane: Any, namespace: str, plan: Path, target: str = "vcjob/train",
        *options: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "rulec", "why", target, "-n", namespace, "--rules", str(plan),
         "--kubeconfig", str(plane.audited_kubeconfig), *options],
        capture_output=True, text=True, cwd=controllers.REPO, timeout=120)
    return done.returncode, done.stdout, done.stderr


def agrees(plane: Any, namespace: str, plan: Path) -> bool:
    return why(plane, namespace, plan)[0] == 0


def audited(plane: Any) -> int:
    """How many requests of the audited user the log holds so far."""
    return len(audit.requests_of(plane.audit_log, cluster.AUDITED))


def only_read(plane: Any, since: int) -> list[dict[str, Any]]:
    """The requests of the audited user after the first `since`, checked to be reads."""
    requests = audit.requests_of(plane.audit_log, cluster.AUDITED)[since:]
    writes = [(r["verb"], r["requestURI"], audit.code(r)) for r in requests
              if r["verb"] not in ("get", "list")]
    assert writes == []
    return requests


def test_why_agrees_with_the_controller_then_sees_what_it_has_not(
        control_plane: Any, api: Any, namespace: str, tmp_path: Path) -> None:
    plane = needs_plane(control_plane)
    before = audited(plane)
    plan = controllers.compile_plan(controllers.REPO / "rules" / "volcano-job.rules",
                                    tmp_path / "plan.json")
    path = VOLCANO.path(namespace, "train")
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, plan, namespace, tmp_path):
        controllers.wait_for_verdict(api, path, "Running")
        # the controller may still be writing (its state, then the verdict): it settles
        apiserver.wait_for("rulec why to agree", lambda: agrees(plane, namespace, plan), 30)
        code, out, err = why(plane, namespace, plan)
        assert (code, err) == (0, ""), out
        assert "written on the job:\n  verdict: Running" in out
        assert out.endswith("journal: no open intents\nagrees with what is written\n")
        code, out, _ = why(plane, namespace, plan, "jobs.batch.volcano.sh/train", "--format", "json")
        report = json.loads(out)
        assert (code, report["agrees"], report["pods"]) == (0, True, ["train-worker-0"])
        assert report["written"]["verdict"]["phase"] == report["decided"]["phase"] == "Running"
    # the controller is stopped: a failure it has not seen
    apiserver.report_failed(api, apiserver.get(api, apiserver.PODS.path(namespace, "train-worker-0")),
                            exit_code=3)
    written = apiserver.get(api, path)
    code, out, err = why(plane, namespace, plan)
    assert (code, err) == (1, ""), out
    assert "  verdict annotation phase: \"Running\" -> \"Failed\"" in out
    assert "exit 3" in out
    code, out, _ = why(plane, namespace, plan, "vcjob/train", "--format", "json")
    report = json.loads(out)
    assert (code, report["agrees"], report["decided"]["phase"]) == (1, False, "Failed")
    assert report["job"]["resourceVersion"] == written["metadata"]["resourceVersion"]
    assert apiserver.get(api, path)["metadata"]["resourceVersion"] == \
        written["metadata"]["resourceVersion"]   # nothing written by it
    # the controller again: it sees the failure, writes it, and they agree
    with controllers.running(control_plane, plan, namespace, tmp_path, name="again"):
        controllers.wait_for_verdict(api, path, "Failed")
        apiserver.wait_for("rulec why to agree", lambda: agrees(plane, namespace, plan), 30)
    requests = only_read(plane, before)
    read = {(r["verb"], (r.get("objectRef") or {}).get("resource"),
             (r.get("objectRef") or {}).get("namespace")) for r in requests}
    assert {("get", "jobs", namespace), ("list", "pods", namespace)} <= read
    assert pod["metadata"]["uid"] not in audit.pod_removals(plane.audit_log, namespace)


def test_why_lists_the_intents_the_journal_holds(control_plane: Any, api: Any, namespace: str,
                                                 tmp_path: Path) -> None:
    """The controller killed right after committing `restart pod` for an eviction: the intent is
    in the journal, not carried out; the verdict written (Restarting) is the one decided now."""
    plane = needs_plane(control_plane)
    before = audited(plane)
    plan = controllers.compile_plan(EVICTIONS, tmp_path / "plan.json")
    path = VOLCANO.path(namespace, "train")
    job = volcano_job(api, namespace)
    pod = worker(api, job, 0)
    with controllers.running(control_plane, plan, namespace, tmp_path, name="crashing",
                             JOBRULES_TEST_HOOKS="1",
                             JOBRULES_FAULT="exit-after:commit") as crashing:
        controllers.wait_for_verdict(api, path, "Running")
        apiserver.report_evicted(api, pod)
        apiserver.wait_for("the fault's exit", lambda: crashing.process.poll() is not None, 30)
        assert crashing.process.returncode == 137, crashing.logs()
    code, out, err = why(plane, namespace, plan, "trainer/train")
    assert (code, err) == (0, ""), out
    assert "journal: 1 open intent(s)\n  restartPod pod train-worker-0 task worker  [podEvicted#0 at " in out
    report = json.loads(why(plane, namespace, plan, "trainer/train", "--format", "json")[1])
    [intent] = report["intents"]
    assert (intent["action"], intent["targets"]) == ("restartPod", [["train-worker-0",
                                                                    pod["metadata"]["uid"]]])
    assert (report["decided"]["phase"], report["newIntents"]) == ("Restarting", [])
    assert apiserver.exists(api, apiserver.PODS.path(namespace, "train-worker-0"))   # not done by it
    assert only_read(plane, before)
