"""The KWOK nodes and the stages in devkit/stages: each outcome a pod's annotations choose is the
status a kubelet would report, written by KWOK and accepted by the API server, for pods placed by
the real kube-scheduler. No test here writes pod status."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from support import apiserver
import pytest

from devkit import cluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("kwok_nodes")]

QUICK = "300ms"


def wait_for_pod(api, namespace: str, name: str, what: str,
                 check: Callable[[apiserver.Obj], bool], timeout: float = 30.0) -> apiserver.Obj:
    path = apiserver.PODS.path(namespace, name)
    return apiserver.wait_for(f"pod {name} {what}",
                         lambda: pod if check(pod := apiserver.get(api, path)) else None, timeout)


def statuses(pod: apiserver.Obj, key: str = "containerStatuses") -> dict[str, apiserver.Obj]:
    return {c["name"]: c for c in pod["status"].get(key) or []}


def ended(status: apiserver.Obj) -> tuple[int, str]:
    terminated = status["state"]["terminated"]
    return terminated["exitCode"], terminated["reason"]


def run_pod(api, namespace: str, name: str, *, restart_policy: str = "Never",
            **stages: object) -> apiserver.Obj:
    """A pod with init container ``setup`` and containers ``main`` and ``other``, on KWOK."""
    pod = apiserver.pod_manifest(namespace, name, containers=("main", "other"),
                            init_containers=("setup",), restart_policy=restart_policy)
    return apiserver.create(api, apiserver.PODS, apiserver.on_kwok(pod, **stages))


@dataclass(frozen=True)
class Ending:
    """A stage's outcome: the pod's phase, and how each container ended (exit code, reason)."""

    stages: dict[str, object]
    restart_policy: str
    phase: str
    containers: dict[str, tuple[int, str]]
    reason: str | None = None
    conditions: dict[str, str] = field(default_factory=dict)  # type: reason


ENDINGS = {
    "default-succeeds": Ending({}, "Never", "Succeeded", {"main": (0, "Completed"),
                                                          "other": (0, "Completed")}),
    "succeed-under-on-failure": Ending({"outcome": "succeed"}, "OnFailure", "Succeeded",
                                       {"main": (0, "Completed"), "other": (0, "Completed")}),
    "oom-killed-container": Ending({"outcome": "oom-killed", "container": "other"}, "Never",
                                   "Failed", {"main": (0, "Completed"), "other": (137, "OOMKilled")},
                                   conditions={"Ready": "PodFailed"}),
    "exit-code": Ending({"outcome": "exit-code", "exit_code": 3}, "Never", "Failed",
                        {"main": (3, "Error"), "other": (0, "Completed")}),
    "evicted": Ending({"outcome": "evicted"}, "Always", "Failed",
                      {"main": (137, "Error"), "other": (137, "Error")}, reason="Evicted",
                      conditions={"DisruptionTarget": "TerminationByKubelet"}),
}


@pytest.mark.parametrize("case", ENDINGS.values(), ids=ENDINGS.keys())
def test_a_pod_ends_as_its_outcome_says(api, namespace, kwok_nodes, case: Ending):
    run_pod(api, namespace, "p", restart_policy=case.restart_policy, after=QUICK, **case.stages)

    pod = wait_for_pod(api, namespace, "p", f"to be {case.phase}",
                       lambda p: p["status"].get("phase") == case.phase)

    assert pod["spec"]["nodeName"] in kwok_nodes
    assert {name: ended(s) for name, s in statuses(pod).items()} == case.containers
    assert ended(statuses(pod, "initContainerStatuses")["setup"]) == (0, "Completed")
    assert pod["status"].get("reason") == case.reason
    for type_, reason in case.conditions.items():
        assert apiserver.condition(pod, type_)["reason"] == reason
    assert apiserver.condition(pod, "PodScheduled")["status"] == "True"
    assert pod["status"]["podIP"].startswith("127.244.")


def test_a_running_pod_runs_until_its_time_is_up(api, namespace):
    run_pod(api, namespace, "p", after="3s")
    running = wait_for_pod(api, namespace, "p", "to run",
                           lambda p: p["status"].get("phase") == "Running")

    assert apiserver.condition(running, "Ready")["status"] == "True"
    assert all(s["ready"] and "running" in s["state"] for s in statuses(running).values())
    assert ended(statuses(running, "initContainerStatuses")["setup"]) == (0, "Completed")
    done = wait_for_pod(api, namespace, "p", "to succeed",
                        lambda p: p["status"].get("phase") == "Succeeded")
    assert apiserver.condition(done, "Ready")["reason"] == "PodCompleted"


@pytest.mark.parametrize("stages, restart_policy", [({"outcome": "run"}, "Never"),
                                                    ({}, "Always")], ids=["run", "always"])
def test_a_pod_that_never_ends(api, namespace, stages, restart_policy):
    run_pod(api, namespace, "p", restart_policy=restart_policy, after=QUICK, **stages)
    wait_for_pod(api, namespace, "p", "to run", lambda p: p["status"].get("phase") == "Running")
    time.sleep(1.5)
    assert apiserver.get(api, apiserver.PODS.path(namespace, "p"))["status"]["phase"] == "Running"


def test_a_running_pod_ends_as_its_outcome_is_changed(api, namespace):
    running = run_pod(api, namespace, "p", outcome="run")
    wait_for_pod(api, namespace, "p", "to run", lambda p: p["status"].get("phase") == "Running")

    apiserver.change_outcome(api, running, outcome="exit-code", exit_code=4, after="0s")

    pod = wait_for_pod(api, namespace, "p", "to fail",
                       lambda p: p["status"].get("phase") == "Failed")
    assert ended(statuses(pod)["main"]) == (4, "Error")


def test_a_failing_container_under_on_failure_crash_loops(api, namespace):
    run_pod(api, namespace, "p", restart_policy="OnFailure", outcome="oom-killed", after=QUICK)

    pod = wait_for_pod(api, namespace, "p", "to restart main twice",
                       lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 2)

    main, other = statuses(pod)["main"], statuses(pod)["other"]
    assert pod["status"]["phase"] == "Running"
    assert main["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert main["lastState"]["terminated"]["exitCode"] == 137
    assert main["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert "running" in other["state"] and other["restartCount"] == 0
    assert apiserver.condition(pod, "Ready")["status"] == "False"


def test_a_failing_init_container_fails_a_pod_that_never_restarts(api, namespace):
    run_pod(api, namespace, "p", outcome="init-failed", exit_code=2, after=QUICK)

    pod = wait_for_pod(api, namespace, "p", "to fail",
                       lambda p: p["status"].get("phase") == "Failed")

    assert ended(statuses(pod, "initContainerStatuses")["setup"]) == (2, "Error")
    assert all(s["state"]["waiting"]["reason"] == "PodInitializing"
               for s in statuses(pod).values())
    assert apiserver.condition(pod, "Initialized")["status"] == "False"


def test_a_failing_init_container_crash_loops_in_a_pod_that_restarts(api, namespace):
    run_pod(api, namespace, "p", restart_policy="Always", outcome="init-failed", after=QUICK)

    pod = wait_for_pod(api, namespace, "p", "to restart setup twice", lambda p: statuses(
        p, "initContainerStatuses").get("setup", {}).get("restartCount", 0) >= 2)

    setup = statuses(pod, "initContainerStatuses")["setup"]
    assert pod["status"]["phase"] == "Pending"
    assert setup["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert setup["lastState"]["terminated"]["exitCode"] == 1


def test_a_native_sidecar_runs_with_the_pod_and_stops_with_it(api, namespace):
    pod = apiserver.pod_manifest(namespace, "p", init_containers=("setup", "proxy"))
    pod["spec"]["initContainers"][1]["restartPolicy"] = "Always"
    apiserver.create(api, apiserver.PODS, apiserver.on_kwok(pod, after="1s"))

    running = wait_for_pod(api, namespace, "p", "to run",
                           lambda p: p["status"].get("phase") == "Running")
    assert "running" in statuses(running, "initContainerStatuses")["proxy"]["state"]
    done = wait_for_pod(api, namespace, "p", "to succeed",
                        lambda p: p["status"].get("phase") == "Succeeded")
    assert ended(statuses(done, "initContainerStatuses")["proxy"]) == (0, "Completed")
    assert ended(statuses(done, "initContainerStatuses")["setup"]) == (0, "Completed")


def test_a_deleted_pod_is_stopped_then_removed_once_its_finalizers_are_gone(api, namespace):
    pod = apiserver.pod_manifest(namespace, "p")
    pod["metadata"]["finalizers"] = ["jobrules.dev/test-hold"]
    apiserver.create(api, apiserver.PODS, apiserver.on_kwok(pod, outcome="run"))
    wait_for_pod(api, namespace, "p", "to run", lambda p: p["status"].get("phase") == "Running")

    apiserver.delete(api, apiserver.PODS.path(namespace, "p"))

    stopped = wait_for_pod(api, namespace, "p", "to be stopped",
                           lambda p: p["status"].get("phase") == "Failed")
    assert ended(statuses(stopped)["main"]) == (137, "Error")
    api.merge_patch(apiserver.PODS.path(namespace, "p"), {"metadata": {"finalizers": None}})
    apiserver.wait_for("KWOK to remove the pod",
                  lambda: not apiserver.exists(api, apiserver.PODS.path(namespace, "p")))


def test_a_pod_that_does_not_tolerate_the_nodes_stays_unscheduled(api, namespace):
    apiserver.create(api, apiserver.PODS, apiserver.pod_manifest(namespace, "p"))

    pod = wait_for_pod(api, namespace, "p", "to be found unschedulable",
                       lambda p: apiserver.condition(p, "PodScheduled") is not None)

    assert apiserver.condition(pod, "PodScheduled")["reason"] == "Unschedulable"
    assert "nodeName" not in pod["spec"]
    assert pod["status"]["phase"] == "Pending"


def test_the_nodes_are_ready_and_schedulable(api, kwok_nodes):
    for name in kwok_nodes:
        node = apiserver.get(api, apiserver.NODES.path(name=name))
        assert apiserver.condition(node, "Ready")["status"] == "True"
        assert node["spec"]["taints"] == [cluster.KWOK_TAINT]

