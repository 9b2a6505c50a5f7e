"""Builders for hand-written plans and Kubernetes objects used by the evaluator tests.

Plans are built as the JSON of docs/plan.md and loaded with `runtime.plan.load`, so these tests
exercise the same loader as production and do not depend on the compiler.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from runtime import functions, plan

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
JOB_UID = "0b7c2a9e-0000-4000-8000-000000000001"
_lines = iter(range(1, 10**6))


def at(seconds: float = 0) -> str:
    return functions.rfc3339(T0 + timedelta(seconds=seconds))


def span(line: int | None = None, column: int = 5) -> dict[str, Any]:
    line = next(_lines) if line is None else line
    return {"path": "t.rules", "line": line, "column": column, "endLine": line, "endColumn": column + 1}


def tmpl(text: str | None) -> list[Any] | None:
    """`"task {task}: <<status.x>>"` -> template parts."""
    if text is None:
        return None
    parts: list[Any] = []
    for literal, var, expr in re.findall(r"([^{<]+|<(?!<))|\{(\w+)\}|<<(.+?)>>", text):
        if var:
            parts.append({"var": var})
        elif expr:
            parts.append({"expr": expr, "span": span(1, 1)})
        else:
            if parts and isinstance(parts[-1], str):
                parts[-1] += literal
            else:
                parts.append(literal)
    return parts


def verdict(phase: str, when: dict | None = None, reason: str | None = None,
            message: str | None = None) -> dict[str, Any]:
    return {"span": span(), "phase": phase, "when": when, "reason": tmpl(reason),
            "message": tmpl(message)}


def action(name: str, reason: str | None = None, message: str | None = None,
           max: int | None = None, per: str = "job", key: str | None = None,
           then: dict | None = None, delay: int | None = None) -> dict[str, Any]:
    return {"action": name, "reason": tmpl(reason), "message": tmpl(message),
            "budget": None if max is None else {"max": max, "per": per, "key": key or "?"},
            "fallback": then, "delay": delay}


def policy(event: str, act: dict[str, Any], id: str | None = None, task: str | None = None,
           filter: dict | None = None, for_: int | None = None, to: str | None = None,
           evicted: bool = False) -> dict[str, Any]:
    pid = id or f"{event}@{next(_lines)}"
    if act.get("budget") and act["budget"]["key"] == "?":
        act = dict(act, budget=dict(act["budget"], key=pid))
    return {"id": pid, "span": span(), "event": event, "task": task, "filter": filter,
            "for": for_, "to": to, "action": act, "evicted": evicted}


def kind(verdicts: list | None = None, policies: list | None = None, *, name: str = "vcjob",
         api_version: str = "batch.volcano.sh/v1alpha1", job_kind: str = "Job",
         owned: bool = True, labels: dict[str, str] | None = None,
         task_label: str | None = "volcano.sh/task-spec",
         primary_containers: list[str] | None = None, primary_pods: dict | None = None,
         **extra: Any) -> dict[str, Any]:
    """A kind's JSON; `extra` adds or replaces keys (`final`, `versions`, `selector`, ...)."""
    group, _, version = api_version.rpartition("/")
    return {
        "name": name, "span": span(), "group": group, "version": version, "kind": job_kind,
        "plural": job_kind.lower() + "s", "apiVersion": api_version,
        "pods": {"owned": owned, "labels": {k: tmpl(v) for k, v in (labels or {}).items()}},
        "task": {"label": task_label} if task_label else None,
        "primaryPods": primary_pods, "primaryContainers": primary_containers,
        "verdicts": verdicts or [], "policies": policies or [],
        "status": {"phase": None, "reason": None, "message": None, "condition": "JobRulesVerdict",
                   "annotations": True, "events": True},
        **extra,
    }


def load(*kinds: dict[str, Any], injections: list | None = None) -> plan.Plan:
    return plan.load({"planVersion": 1, "files": [], "kinds": list(kinds),
                      "injections": injections or [],
                      "webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 5}})


def load_kind(verdicts: list | None = None, policies: list | None = None,
              injections: list | None = None, **kw: Any) -> plan.Kind:
    return load(kind(verdicts, policies, **kw), injections=injections).kinds[0]


def sidecar_injection(*names: str, kind_name: str = "vcjob") -> dict[str, Any]:
    """An injection adding sidecars of these names to the kind's pods."""
    return {"name": "sidecars", "span": span(), "kinds": [kind_name], "match": None,
            "completionContainers": None,
            "ops": [{"op": "sidecar", "span": span(), "name": n, "native": False,
                     "image": ["example.org/sidecar:1"], "command": None, "args": None,
                     "env": [], "mounts": []} for n in names]}


# -- conditions and filters (plan JSON) ----------------------------------------------------------

def pods_cond(quant: str = "any", state: str | None = None, filter: dict | None = None,
              task: str | None = None, for_: int | None = None) -> dict[str, Any]:
    return {"op": "pods", "quant": quant, "task": task, "state": state, "filter": filter, "for": for_}


def count(cmp: str, value: str, state: str | None = None, filter: dict | None = None,
          task: str | None = None) -> dict[str, Any]:
    return {"op": "count", "task": task, "state": state, "filter": filter, "cmp": cmp,
            "value": tmpl(value)}


def jp(expr: str) -> dict[str, Any]:
    return {"op": "jmespath", "expr": expr, "span": span(1, 1)}


def exit_in(*codes: int, ranges: list | None = None, negate: bool = False,
            container: str | None = None) -> dict[str, Any]:
    return {"op": "exitCode", "codes": list(codes), "ranges": ranges or [], "negate": negate,
            "container": container}


def reason_in(*values: str, negate: bool = False, container: str | None = None) -> dict[str, Any]:
    return {"op": "containerReason", "values": list(values), "negate": negate, "container": container}


def both(*args: dict) -> dict[str, Any]:
    return {"op": "and", "args": list(args)}


def either(*args: dict) -> dict[str, Any]:
    return {"op": "or", "args": list(args)}


def negate(arg: dict) -> dict[str, Any]:
    return {"op": "not", "arg": arg}


# -- Kubernetes objects -------------------------------------------------------------------------

def job(name: str = "train", *, uid: str = JOB_UID, namespace: str = "ml",
        api_version: str = "batch.volcano.sh/v1alpha1", kind: str = "Job",
        created: float = 0, spec: dict | None = None, status: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": uid,
                         "creationTimestamp": at(created)},
            "spec": spec or {}, "status": status or {}}


def terminated(name: str, exit_code: int, reason: str | None = None, finished: float = 60,
               restarts: int = 0) -> dict[str, Any]:
    reason = reason or ("Completed" if exit_code == 0 else "Error")
    return {"name": name, "restartCount": restarts, "ready": False,
            "state": {"terminated": {"exitCode": exit_code, "reason": reason,
                                     "startedAt": at(1), "finishedAt": at(finished)}}}


def running(name: str, restarts: int = 0, last_exit: int | None = None,
            last_reason: str | None = None) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": name, "restartCount": restarts, "ready": True,
                          "state": {"running": {"startedAt": at(1)}}}
    if last_exit is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_exit, "reason": last_reason or "Error",
                                          "finishedAt": at(30)}}
    return cs


def waiting(name: str, reason: str = "CrashLoopBackOff", restarts: int = 0,
            last_exit: int | None = None, last_reason: str = "Error") -> dict[str, Any]:
    cs: dict[str, Any] = {"name": name, "restartCount": restarts, "ready": False,
                          "state": {"waiting": {"reason": reason}}}
    if last_exit is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_exit, "reason": last_reason,
                                          "finishedAt": at(30)}}
    return cs


def pod(name: str, phase: str = "Running", *, task: str | None = "worker",
        containers: list | None = None, init: list | None = None, uid: str | None = None,
        reason: str | None = None, conditions: list | None = None, created: float = 0,
        deleting: float | None = None, labels: dict | None = None,
        owner_uid: str = JOB_UID, job_name: str = "train") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": "ml", "uid": uid or f"uid-{name}",
        "creationTimestamp": at(created),
        "labels": dict(labels or {}, **({"volcano.sh/task-spec": task} if task else {})),
        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                             "name": job_name, "uid": owner_uid, "controller": True}],
    }
    if deleting is not None:
        meta["deletionTimestamp"] = at(deleting)
        meta["deletionGracePeriodSeconds"] = 0
    status: dict[str, Any] = {"phase": phase}
    if phase != "Pending":
        status["startTime"] = at(created + 1)
    if containers is None:
        containers = {"Running": [running("main")], "Succeeded": [terminated("main", 0)],
                      "Failed": [terminated("main", 1)], "Pending": []}[phase]
    if containers:
        status["containerStatuses"] = containers
    if init:
        status["initContainerStatuses"] = init
    if reason:
        status["reason"] = reason
    if conditions:
        status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}, "status": status}


def condition(type: str, reason: str | None = None, status: str = "True",
              at_seconds: float = 50) -> dict[str, Any]:
    out = {"type": type, "status": status, "lastTransitionTime": at(at_seconds)}
    if reason:
        out["reason"] = reason
    return out


def evicted(name: str, task: str | None = "worker", uid: str | None = None) -> dict[str, Any]:
    """A kubelet eviction: phase Failed, reason Evicted, DisruptionTarget TerminationByKubelet."""
    return pod(name, "Failed", task=task, uid=uid, reason="Evicted",
               containers=[terminated("main", 137, "Error")],
               conditions=[condition("DisruptionTarget", "TerminationByKubelet")])
