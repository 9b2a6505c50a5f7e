"""Plans, pods and AdmissionReview requests for the admission and webhook tests."""

from __future__ import annotations

import json
from typing import Any

from runtime import admission
from runtime import plan as planlib

RULES = "rules/webhook-test.rules"


def span(line: int, column: int = 5) -> dict[str, Any]:
    return {"path": RULES, "line": line, "column": column, "endLine": line, "endColumn": column + 1}


def kind(name: str, api_version: str, kind_: str, primary: list[str] | None = None) -> dict[str, Any]:
    group, _, version = api_version.rpartition("/")
    return {"name": name, "span": span(1, 1), "group": group, "version": version, "kind": kind_,
            "plural": kind_.lower() + "s", "apiVersion": api_version, "pods": {"owned": True},
            "primaryContainers": primary, "verdicts": [], "policies": [], "status": {}}


def plan_data(failure_policy: str = "Ignore") -> dict[str, Any]:
    """A Job kind with a sidecar and an annotation; a Workflow kind whose `main` decides completion."""
    return {
        "planVersion": 1,
        "files": [{"path": RULES, "sha256": "0" * 64}],
        "kinds": [kind("batchjob", "batch/v1", "Job"),
                  kind("workflow", "argoproj.io/v1alpha1", "Workflow", ["main"]),
                  kind("wrapped", "example.com/v1", "Wrapped")],
        "injections": [
            {"name": "tracing", "span": span(10), "kinds": ["batchjob", "workflow"], "match": None,
             "completionContainers": None, "ops": [
                 {"op": "annotate", "span": span(11), "key": "example.com/traced", "value": ["yes"]},
                 {"op": "env", "span": span(12), "name": "POD_NAMESPACE",
                  "value": [{"expr": "namespace", "span": span(12, 30)}],
                  "containers": {"select": "primary", "names": []}},
                 {"op": "sidecar", "span": span(13), "name": "agent", "native": True,
                  "image": ["example.com/agent:1"], "command": None, "args": None, "env": [],
                  "mounts": []},
             ]},
            {"name": "argo-completion", "span": span(20), "kinds": ["workflow"], "match": None,
             "completionContainers": ["main"], "ops": [
                 {"op": "env", "span": span(21), "name": "DECIDES", "value": ["1"],
                  "containers": {"select": "primary", "names": []}},
             ]},
            {"name": "team-a-only", "span": span(30), "kinds": ["batchjob"],
             "match": {"op": "namespace", "values": ["team-a"], "negate": False},
             "completionContainers": None, "ops": [
                 {"op": "label", "span": span(31), "key": "example.com/team", "value": ["a"]},
             ]},
            {"name": "wrapper", "span": span(40), "kinds": ["wrapped"], "match": None,
             "completionContainers": None, "ops": [
                 {"op": "wrap", "span": span(41), "containers": {"select": "all", "names": []},
                  "argv": [["/jobrules/run"]], "shell": None},
             ]},
        ],
        "webhook": {"failurePolicy": failure_policy, "timeoutSeconds": 5},
    }


PLAN = admission.prepare(planlib.load(plan_data(), digest="d" * 64))
PLAN_CLOSED = admission.prepare(planlib.load(plan_data("Fail"), digest="c" * 64))


def owner(api_version: str = "batch/v1", kind_: str = "Job", name: str = "train") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind_, "name": name, "uid": "owner-uid",
            "controller": True, "blockOwnerDeletion": True}


def pod(*containers: str, owners: list[dict[str, Any]] | None = None,
        namespace: str | None = None, command: bool = True) -> dict[str, Any]:
    """A pod as a controller creates it: generateName, no name, often no namespace."""
    meta: dict[str, Any] = {"generateName": "train-", "labels": {"app": "train"},
                            "ownerReferences": [owner()] if owners is None else owners}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": name, "image": "busybox",
                        **({"command": ["sh", "-c", "true"]} if command else {})}
                       for name in containers or ("main",)],
    }}


def request(obj: Any = None, **fields: Any) -> dict[str, Any]:
    req = {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
           "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"},
           "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
           "namespace": "team-a", "operation": "CREATE",
           "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
           "object": pod() if obj is None else obj, "oldObject": None, "dryRun": False,
           "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}
    req.update(fields)
    return req


def review(req: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": admission.API_VERSION, "kind": admission.KIND,
                       "request": req}).encode()
