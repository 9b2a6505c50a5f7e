"""bench/hearing.py, the floor under bench/controller.py's CPU figure, hears what the controller's
watches hear: every change of the namespace's batch Jobs and of its pods with the label key, and
nothing of its other pods. Never timed here: the bench measures; this keeps the
floor honest (a listener that missed events would make it low)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import apiserver
from support.controllers import kubeconfig

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LABEL = "batch.kubernetes.io/controller-uid"


class Hearing:
    def __init__(self, session: Any, namespace: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "hearing.py"), namespace, LABEL],
            env={**os.environ, "KUBECONFIG": kubeconfig(session)}, stdout=subprocess.PIPE,
            text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"

    def heard(self) -> dict[str, int]:
        assert self.process.stdout is not None
        self.process.send_signal(signal.SIGUSR1)
        return json.loads(self.process.stdout.readline())

    def stop(self) -> None:
        self.process.terminate()
        assert self.process.wait(30) == 0


def test_hearing_counts_the_jobs_and_the_labelled_pods_of_its_namespace(
        control_plane: Any, api: Any, namespace: str) -> None:
    hearing = Hearing(control_plane, namespace)
    try:
        for name, labels in (("labelled", {LABEL: "u"}), ("other", {})):
            pod = apiserver.pod_manifest(namespace, name, labels=labels)
            pod["spec"]["schedulerName"] = "nobody"   # left alone: no scheduler's events
            apiserver.create(api, apiserver.PODS, pod)
        job = apiserver.job_manifest(namespace, "job")
        job["spec"]["suspend"] = True   # no pod of its own: the pods counted are ours alone
        apiserver.create(api, apiserver.JOBS, job)
        for n in range(3):   # three changes of the labelled pod
            api.merge_patch(apiserver.PODS.path(namespace, "labelled"),
                            {"metadata": {"annotations": {"n": str(n)}}})
        # Every event above reaches the watches in order; the last pod change, when heard,
        # follows all of them but the Job's own (its controller may still write it).
        heard = apiserver.wait_for("the last pod change heard", lambda: h if (
            h := hearing.heard()).get("pods", 0) >= 4 else None, 120)
        assert heard["pods"] == 4, heard   # added, and three changes: no other pod
        apiserver.wait_for("the Job heard", lambda: hearing.heard().get("jobs", 0) >= 1, 120)
        apiserver.delete(api, apiserver.PODS.path(namespace, "labelled"))
        apiserver.wait_for("the deletion heard", lambda: hearing.heard()["pods"] > 4, 120)
    finally:
        hearing.stop()
