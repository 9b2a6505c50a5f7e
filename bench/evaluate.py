"""Benchmark of the runtime's pure cores against naive interpreters of the same plan.

    .venv/bin/python bench/evaluate.py [--seconds 2.0] [--no-fail]

1. Evaluation of a 100-pod Volcano Job (verdict rules with pod aggregates, filters, counts and
   JMESPath; six policies with budgets; a few pods changed since the stored state) by
   `runtime.evaluator.evaluate`, state decoded from and encoded to its annotation text.
2. Mutation of a realistic ~8 KB TFJob master pod (Istio sidecar, probes, resources, env,
   mounts) by `runtime.mutator.mutate`, patch included.

Each is timed against a naive interpreter of the same plan written below: it walks the plan's
JSON and answers every question about the job and its pods with `jmespath.search` on expression
strings, every time, the way one would without compiled expressions or pod facts. Both sides must
give the same answers (checked before timing). Each pair is timed in CPU time of this one
process (one core), in alternating rounds; each side's best round counts.

Targets: evaluation at least 10x its naive baseline; mutation at least 10x its naive baseline and
at least 50,000 pods/s. Exits 1 when a target is missed, unless --no-fail.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import jmespath

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulec import api, emit  # noqa: E402
from rulec.source import SourceFile  # noqa: E402
from runtime import evaluator, functions, mutator, patch, plan, state  # noqa: E402

RATIO = 10.0
MUTATIONS_PER_SECOND = 50_000

RULES = """
job vcjob: batch.volcano.sh/v1alpha1 Job {
    pods owned
    task label "volcano.sh/task-spec"
    primary container "main"

    suspended  when <<contains(['Aborting', 'Aborted'], status.state.phase)>>
    restarting when any pod evicted
               reason "PodEvicted"
               message "task {task} pod {pod} was evicted"
    failed     when any pod of task "master" failed
               reason "MasterFailed"
               message "task {task} pod {pod}: container {container} {container_reason} (exit {exit_code})"
    failed     when count pods failed with exit in [137, 139] > 10
               reason "TooManyCrashes"
               message "{count} of {total} pods crashed"
    succeeded  when count pods succeeded >= <<spec.minSuccess>>
    running    when any pod running
    pending    otherwise

    on pod evicted -> restart pod max 10 then fail job
    on pod failed exit 137 -> restart pod max 20 budget "oom"
    on pod failed -> restart pod max 5 per task
    on container restarted restarts >= 3 -> fail job
    on pod pending for 10m -> fail job reason "Unschedulable"
    on task "master" completed -> complete job
}

job tfjob: kubeflow.org/v1 TFJob {
    pods label "training.kubeflow.org/job-name" = <<metadata.name>>
    task label "training.kubeflow.org/replica-type"
    primary pods label "training.kubeflow.org/job-role" = "master"
    primary container "tensorflow"
    running otherwise
}

inject "katib-metrics" into pods of tfjob
        where label "katib.kubeflow.org/trial" exists and primary {
    annotate "sidecar.istio.io/inject" = "false"
    volume "katib-metrics" empty dir
    mount volume "katib-metrics" at "/var/log/katib" in primary
    env "KATIB_TRIAL_NAME" = <<owner.metadata.name>> in primary
    sidecar "metrics-collector" native {
        image "ghcr.io/kubeflow/katib/file-metrics-collector:v0.18.0"
        args ["-t", <<owner.metadata.name>>, "-path", "/var/log/katib/metrics.log"]
        mount volume "katib-metrics" at "/var/log/katib"
    }
}
"""

NOW = datetime(2024, 5, 1, 13, 0, tzinfo=timezone.utc)
JOB_UID = "6f1d2c3b-0000-4000-8000-0000000000j0"


# ---------------------------------------------------------------------------------------------
# Inputs


def ts(minutes: float) -> str:
    return functions.rfc3339(NOW - timedelta(minutes=60 - minutes))


def vc_pod(i: int, phase: str, *, task: str = "worker", exit_code: int = 0, reason: str = "",
           restarts: int = 0, evicted: bool = False) -> dict[str, Any]:
    main: dict[str, Any] = {"name": "main", "restartCount": restarts, "image": "train:1"}
    if phase == "Running":
        main["state"] = {"running": {"startedAt": ts(2)}}
    elif phase in ("Succeeded", "Failed"):
        main["state"] = {"terminated": {"exitCode": exit_code, "reason": reason or (
            "Completed" if exit_code == 0 else "Error"), "startedAt": ts(2), "finishedAt": ts(40 + i % 10)}}
    status: dict[str, Any] = {"phase": phase, "startTime": ts(1), "conditions": [
        {"type": "Ready", "status": "True" if phase == "Running" else "False", "lastTransitionTime": ts(2)}]}
    if phase != "Pending":
        status["containerStatuses"] = [
            {"name": "istio-proxy", "restartCount": 0, "state": {"running": {"startedAt": ts(1)}}}, main]
    if evicted:
        status["reason"] = "Evicted"
        status["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                     "reason": "TerminationByKubelet", "lastTransitionTime": ts(45)})
    name = f"train-{task}-{i}"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "ml", "uid": f"0a1b2c3d-0000-4000-8000-{i:012d}",
        "creationTimestamp": ts(57 if phase == "Pending" else 0),
        "labels": {"volcano.sh/job-name": "train", "volcano.sh/task-spec": task},
        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train",
                             "uid": JOB_UID, "controller": True}]},
        "spec": {"containers": [{"name": "istio-proxy"}, {"name": "main"}]}, "status": status}


def job_and_pods() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The job, its pods as last stored, and its pods now (five changed since)."""
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "uid": JOB_UID, "creationTimestamp": ts(0)},
           "spec": {"minSuccess": 90}, "status": {"state": {"phase": "Running"}}}
    before = [vc_pod(0, "Running", task="master")]
    before += [vc_pod(i, "Running") for i in range(1, 80)]
    before += [vc_pod(i, "Succeeded") for i in range(80, 95)]
    before += [vc_pod(i, "Failed", exit_code=1) for i in range(95, 98)]
    before += [vc_pod(i, "Pending") for i in range(98, 100)]
    now = list(before)
    now[5] = vc_pod(5, "Failed", exit_code=137, reason="OOMKilled")
    now[6] = vc_pod(6, "Failed", exit_code=2)
    now[7] = vc_pod(7, "Failed", exit_code=137, evicted=True)
    now[8] = vc_pod(8, "Running", restarts=2)
    now[9] = vc_pod(9, "Succeeded")
    return job, before, now


def tf_pod() -> dict[str, Any]:
    """A TFJob master pod as the training operator creates it (about 8 KB as JSON)."""
    env = [{"name": f"TF_VAR_{i}", "value": f"value-{i}-" + "x" * 40} for i in range(40)]
    env += [{"name": f"SECRET_{i}", "valueFrom": {"secretKeyRef": {"name": "training-secrets", "key": f"key-{i}"}}}
            for i in range(10)]
    env.append({"name": "TF_CONFIG", "value": json.dumps({"cluster": {
        "master": ["mnist-trial-9xq4-master-0.kubeflow-user.svc:2222"],
        "worker": [f"mnist-trial-9xq4-worker-{i}.kubeflow-user.svc:2222" for i in range(8)]},
        "task": {"type": "master", "index": 0}})})
    probe = {"httpGet": {"path": "/healthz", "port": 15021}, "initialDelaySeconds": 1, "periodSeconds": 2}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "mnist-trial-9xq4-master-0", "namespace": "kubeflow-user",
            "labels": {"katib.kubeflow.org/trial": "mnist-trial-9xq4",
                       "training.kubeflow.org/job-name": "mnist-trial-9xq4",
                       "training.kubeflow.org/replica-type": "master",
                       "training.kubeflow.org/replica-index": "0",
                       "training.kubeflow.org/job-role": "master",
                       "training.kubeflow.org/operator-name": "tfjob-controller"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "15020"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                                 "name": "mnist-trial-9xq4", "uid": "2e3f4a5b-0000-4000-8000-0000000007f0",
                                 "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "restartPolicy": "Never", "serviceAccountName": "default", "schedulerName": "default-scheduler",
            "initContainers": [{"name": "istio-init", "image": "docker.io/istio/proxyv2:1.20.3",
                                "args": ["istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337"],
                                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}}}],
            "containers": [
                {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.20.3",
                 "args": ["proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
                 "readinessProbe": probe, "resources": {"limits": {"cpu": "2", "memory": "1Gi"},
                                                        "requests": {"cpu": "100m", "memory": "128Mi"}},
                 "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]},
                {"name": "tensorflow", "image": "docker.io/kubeflowkatib/tf-mnist-with-summaries:v0.18.0",
                 "command": ["python", "/opt/tf-mnist/mnist.py"],
                 "args": ["--epochs=1", "--batch-size=16", "--learning-rate=0.01"],
                 "env": env, "ports": [{"name": "tfjob-port", "containerPort": 2222}],
                 "resources": {"limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}},
                 "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
                 "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]}}}],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}}}}


# ---------------------------------------------------------------------------------------------
# The naive interpreters: the plan's JSON, answered with jmespath.search on strings every time


CONTAINERS = "[status.initContainerStatuses, status.containerStatuses][]"


def s(expr: str, data: Any) -> Any:
    return jmespath.search(expr, data)


def truthy(v: Any) -> bool:
    return v not in (None, False, "", [], {})


class NaiveEvaluator:
    def __init__(self, plan_json: dict[str, Any]) -> None:
        self.kind = plan_json["kinds"][0]
        self.task_path = f'metadata.labels."{self.kind["task"]["label"]}"'

    def containers(self, pod: dict[str, Any], name: str | None) -> list[dict[str, Any]]:
        primary = self.kind["primaryContainers"]
        if name:
            return s(f"{CONTAINERS} | [?name=='{name}']", pod) or []
        if primary:
            return s(f"{CONTAINERS} | [?contains(`{json.dumps(primary)}`, name)]", pod) or []
        return s(CONTAINERS, pod) or []

    def filter(self, f: dict[str, Any] | None, pod: dict[str, Any]) -> bool:
        if f is None:
            return True
        op = f["op"]
        if op in ("and", "or"):
            results = [self.filter(a, pod) for a in f["args"]]
            return all(results) if op == "and" else any(results)
        if op == "not":
            return not self.filter(f["arg"], pod)
        if op == "exitCode":
            codes = [c for cs in self.containers(pod, f["container"])
                     for c in [s("state.terminated.exitCode || lastState.terminated.exitCode", cs)] if c is not None]
            hits = [c in f["codes"] or any(lo <= c <= hi for lo, hi in f["ranges"]) for c in codes]
            return any(h != f["negate"] for h in hits)
        if op == "containerReason":
            reasons = [s("state.terminated.reason || state.waiting.reason || lastState.terminated.reason", cs)
                       for cs in self.containers(pod, f["container"])]
            return any((r in f["values"]) != f["negate"] for r in reasons if r)
        if op == "restarts":
            counts = [s("restartCount", cs) or 0 for cs in self.containers(pod, f["container"])]
            return any(eval(f"{c} {f['cmp']} {f['value']}") for c in counts)
        if op == "jmespath":
            return truthy(s(f["expr"], pod))
        raise ValueError(op)

    def state_of(self, pod: dict[str, Any], st: str) -> bool:
        phase = s("status.phase", pod)
        evicted = truthy(s("status.reason == 'Evicted' || status.conditions[?type=='DisruptionTarget' && status=='True']", pod))
        return {"pending": phase == "Pending", "running": phase == "Running",
                "succeeded": phase == "Succeeded", "failed": phase == "Failed" and not evicted,
                "failedOrEvicted": phase == "Failed" or evicted,
                "evicted": evicted, "terminating": truthy(s("metadata.deletionTimestamp", pod))}[st]

    def matching(self, c: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[list, int]:
        scope = [p for p in pods if c["task"] is None or s(self.task_path, p) == c["task"]]
        hits = [p for p in scope if (c["state"] is None or self.state_of(p, c["state"]))
                and self.filter(c["filter"], p)]
        return hits, len(scope)

    def condition(self, c: dict[str, Any], job: dict, pods: list) -> tuple[bool, dict]:
        op = c["op"]
        if op == "and":
            results = [self.condition(a, job, pods) for a in c["args"]]
            return all(r[0] for r in results), next((r[1] for r in results if r[1]), {})
        if op == "jmespath":
            return truthy(s(c["expr"], job)), {}
        hits, total = self.matching(c, pods)
        info = {"hits": hits, "count": len(hits), "total": total}
        if op == "pods":
            return {"any": bool(hits), "all": bool(scope_all(hits, total)), "none": not hits}[c["quant"]], info
        if op == "count":
            value = s(c["value"][0]["expr"], job) if isinstance(c["value"][0], dict) else int(c["value"][0])
            return value is not None and eval(f"{len(hits)} {c['cmp']} {value}"), info
        raise ValueError(op)

    def render(self, template: list | None, job: dict, info: dict) -> str | None:
        if template is None:
            return None
        pod = min(info.get("hits") or [{}], key=lambda p: (s(f"{CONTAINERS}.state.terminated.finishedAt | max(@)", p) or "~", s("metadata.name", p) or ""))
        cs = (self.containers(pod, None) or [{}]) if pod else [{}]
        cs = sorted(cs, key=lambda c: (s("state.terminated.exitCode || lastState.terminated.exitCode", c) in (0, None)))
        values = {"job": s("metadata.name", job), "task": s(self.task_path, pod), "pod": s("metadata.name", pod),
                  "container": s("name", cs[0]), "exit_code": s("state.terminated.exitCode", cs[0]),
                  "container_reason": s("state.terminated.reason", cs[0]),
                  "count": info.get("count"), "total": info.get("total")}
        out = []
        for part in template:
            if isinstance(part, str):
                out.append(part)
            elif "var" in part:
                out.append("" if values.get(part["var"]) is None else str(values[part["var"]]))
            else:
                out.append(str(s(part["expr"], job)))
        return "".join(out)

    def verdict(self, job: dict, pods: list) -> dict[str, Any]:
        for rule in self.kind["verdicts"]:
            ok, info = (True, {}) if rule["when"] is None else self.condition(rule["when"], job, pods)
            if ok:
                return {"phase": rule["phase"], "reason": self.render(rule["reason"], job, info),
                        "message": self.render(rule["message"], job, info)}
        return {}

    def evaluate(self, job: dict, pods: list, stored: str, now: datetime) -> dict[str, Any]:
        """Pods a restart of ours stopped count in no verdict; while some are still listed the
        job is Restarting, as the first restart said; the verdict comes last."""
        memory = json.loads(stored) if stored else {"pods": {}, "budgets": {}}
        ours = {uid for uid, record in memory["pods"].items() if record[3]}
        pre = self.verdict(job, [p for p in pods if s("metadata.uid", p) not in ours])
        actions: list[dict[str, Any]] = []
        records = {}
        for pod in pods:
            uid = s("metadata.uid", pod)
            phase = s("status.phase", pod)
            restarts = s(f"sum({CONTAINERS}.restartCount)", pod) or 0
            evicted = self.state_of(pod, "evicted")
            old = memory["pods"].get(uid)
            records[uid] = [phase, restarts, evicted, uid in ours]
            memory["pods"][uid] = records[uid]
            if uid in ours:
                continue
            if old is not None and old[:3] == [phase, restarts, evicted]:
                if phase == "Pending":
                    self.pending_timer(pod, now, memory, actions)
                continue
            names = (["podEvicted"] if evicted and not (old and old[2]) else [])
            if not old or old[0] != phase:
                names.append({"Pending": "podPending", "Running": "podRunning",
                              "Succeeded": "podSucceeded", "Failed": "podFailed"}[phase])
            if restarts > (old[1] if old else 0):
                names.append("containerRestarted")
            self.match(names, pod, memory, actions, evicted, pre)
        memory["pods"] = records   # the pods that are gone are forgotten
        if not any(record[3] for record in records.values()):
            memory.pop("restarting", None)
        if "restarting" in memory:
            verdict = {"phase": "Restarting", **memory["restarting"]}
        else:
            verdict = self.verdict(job, [p for p in pods if not records[s("metadata.uid", p)][3]])
        return {"verdict": verdict, "actions": actions, "state": json.dumps(memory)}

    def pending_timer(self, pod: dict, now: datetime, memory: dict, actions: list) -> None:
        created = functions.timestamp(s("metadata.creationTimestamp", pod))
        for p in self.kind["policies"]:
            key = f"{p['id']} {s('metadata.uid', pod)}"
            if p["event"] == "podPending" and p["for"] and key not in memory.setdefault("fired", []) \
                    and (now - created).total_seconds() >= p["for"]:
                memory["fired"].append(key)
                actions.append({"action": p["action"]["action"], "policy": p["id"]})

    def match(self, names: list[str], pod: dict, memory: dict, actions: list, evicted: bool,
              pre: dict[str, Any]) -> None:
        task = s(self.task_path, pod)
        for name in names:
            for p in sorted(self.kind["policies"], key=lambda p: p["task"] is None):
                if p["event"] != name or p["for"] or (p["task"] and p["task"] != task) \
                        or (name == "podFailed" and evicted and not p["evicted"]) \
                        or not self.filter(p["filter"], pod):
                    continue
                act = p["action"]
                if act["action"] != "ignore":
                    budget = act["budget"]
                    key = budget and (budget["key"] + (f"[{task}]" if budget["per"] == "task" else ""))
                    if budget and memory["budgets"].get(key, 0) >= budget["max"]:
                        act = act["fallback"]
                    elif budget:
                        memory["budgets"][key] = memory["budgets"].get(key, 0) + 1
                    if act:
                        actions.append({"action": act["action"], "policy": p["id"]})
                    if act and act["action"] == "restartPod":
                        memory["pods"][s("metadata.uid", pod)][3] = True
                        memory.setdefault("restarting", self.restarting(p, name, pod, pre))
                return

    def restarting(self, p: dict, name: str, pod: dict, pre: dict[str, Any]) -> dict[str, Any]:
        if pre.get("phase") in ("Restarting", "Failed"):
            return {"reason": pre["reason"], "message": pre["message"]}
        span = p["span"]
        words = {"podFailed": "failed", "podEvicted": "evicted"}[name]
        return {"reason": name[0].upper() + name[1:],
                "message": f"pod {s('metadata.name', pod)} {words}: restart pod "
                           f"({span['path']}:{span['line']}:{span['column']})"}


def scope_all(hits: list, total: int) -> bool:
    return total > 0 and len(hits) == total


class NaiveMutator:
    def __init__(self, plan_json: dict[str, Any], digests: Mapping[str, str]) -> None:
        self.plan = plan_json
        self.digests = digests   # the record's `name@digest` of each injection, as the mutator names it
        self.kinds = {(k["apiVersion"], k["kind"]): k for k in plan_json["kinds"]}

    def mutate(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        """Apply to a copy, checking (by search) what is there already; patch what changed."""
        ref = s("metadata.ownerReferences[?controller] | [0]", pod)
        kind = self.kinds.get((s("apiVersion", ref), s("kind", ref)))
        out = copy.deepcopy(pod)
        context = {"pod": pod, "owner": {"metadata": {"name": s("name", ref)}},
                   "namespace": s("metadata.namespace", pod)}
        recorded = json.loads(s(f'metadata.annotations."{mutator.RECORD_ANNOTATION}"', pod) or "[]")
        for inj in self.plan["injections"]:
            if kind is None or kind["name"] not in inj["kinds"] or not self.match(inj["match"], pod, kind) \
                    or any(r.startswith(inj["name"] + "@") for r in recorded):
                continue
            primary = kind["primaryContainers"] or s("spec.containers[].name", pod)
            for op in inj["ops"]:
                value = lambda t: "".join(p if isinstance(p, str) else str(s(p["expr"], context)) for p in t)
                targets = [c for c in out["spec"]["containers"] if s("name", c) in primary]
                if op["op"] == "annotate" and s(f'metadata.annotations."{op["key"]}"', out) is None:
                    out["metadata"].setdefault("annotations", {})[op["key"]] = value(op["value"])
                elif op["op"] == "volume" and not s(f"spec.volumes[?name=='{op['name']}']", out):
                    out["spec"].setdefault("volumes", []).append({"name": op["name"], **op["source"]})
                elif op["op"] == "mount":
                    for c in targets:
                        if not s(f"volumeMounts[?mountPath=='{op['path']}']", c):
                            c.setdefault("volumeMounts", []).append({"name": op["volume"], "mountPath": op["path"]})
                elif op["op"] == "env":
                    for c in targets:
                        if not s(f"env[?name=='{op['name']}']", c):
                            c.setdefault("env", []).append({"name": op["name"], "value": value(op["value"])})
                elif op["op"] == "sidecar" and not s(
                        f"[spec.initContainers, spec.containers][] | [?name=='{op['name']}']", out):
                    out["spec"].setdefault("initContainers", []).append({
                        "name": op["name"], "image": value(op["image"]),
                        "args": [value(a) for a in op["args"] or []],
                        "volumeMounts": [{"name": m["volume"], "mountPath": m["path"]} for m in op["mounts"]],
                        "restartPolicy": "Always"})
            out["metadata"]["annotations"][mutator.RECORD_ANNOTATION] = json.dumps(
                recorded + [f"{inj['name']}@{self.digests[inj['name']]}"])
        return [{"op": "replace" if key in pod[part] else "add", "path": f"/{part}/{key}", "value": out[part][key]}
                for part in ("metadata", "spec") for key in out[part] if out[part][key] != pod[part].get(key)]

    def match(self, f: dict[str, Any] | None, pod: dict, kind: dict) -> bool:
        if f is None:
            return True
        if f["op"] == "and":
            return all(self.match(a, pod, kind) for a in f["args"])
        if f["op"] == "label":
            return s(f'metadata.labels."{f["key"]}"', pod) is not None
        if f["op"] == "primary":
            primary = kind["primaryPods"]
            return s(f'metadata.labels."{primary["key"]}"', pod) in primary["values"]
        raise ValueError(f["op"])


# ---------------------------------------------------------------------------------------------
# Timing


def _batch(fn: Callable[[], Any], seconds: float) -> int:
    """How many calls take about `seconds`."""
    fn()
    n = 1
    while True:
        start = time.process_time()
        for _ in range(n):
            fn()
        if time.process_time() - start >= seconds:
            return n
        n *= 2


def rates(fast: Callable[[], Any], slow: Callable[[], Any], seconds: float,
          rounds: int = 9) -> tuple[float, float]:
    """Operations per CPU second of both (this process's CPU time, so other processes on a busy
    machine do not count), timed in alternating rounds, each side's best round."""
    sizes = [_batch(fn, seconds / rounds / 2) for fn in (fast, slow)]
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((fast, slow)):
            start = time.process_time()
            for _ in range(sizes[i]):
                fn()
            best[i] = min(best[i], (time.process_time() - start) / sizes[i])
    return 1 / best[0], 1 / best[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per benchmark and side")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    args = parser.parse_args(argv)

    built = api.build_sources([SourceFile.from_text("bench.rules", RULES)])
    assert built.plan is not None, built.diagnostics
    text = emit.dumps(built.plan)
    compiled = plan.loads(text)
    plan_json = json.loads(text)
    vcjob = compiled.kind_named("vcjob")

    job, before, pods = job_and_pods()
    stored = state.encode(evaluator.evaluate(vcjob, job, before, None, NOW).state)
    naive = NaiveEvaluator(plan_json)
    naive_stored = naive.evaluate(job, before, "", NOW)["state"]

    def ours() -> evaluator.Evaluation:
        result = evaluator.evaluate(vcjob, job, pods, state.decode(stored).state, NOW)
        state.encode(result.state)
        return result

    def theirs() -> dict[str, Any]:
        return naive.evaluate(job, pods, naive_stored, NOW)

    mine, base = ours(), theirs()
    assert mine.verdict.phase == base["verdict"]["phase"], (mine.verdict, base["verdict"])
    assert mine.verdict.message == base["verdict"]["message"], (mine.verdict, base["verdict"])
    assert sorted((a.action, a.policy) for a in mine.actions if a.status == "run") == \
        sorted((a["action"], a["policy"]) for a in base["actions"]), (mine.actions, base["actions"])

    pod = tf_pod()
    injector = mutator.prepare(compiled)
    naive_mutator = NaiveMutator(plan_json, injector.digests)
    mutated = patch.apply(pod, mutator.mutate(injector, pod).patch)
    naive_mutated = patch.apply(pod, naive_mutator.mutate(pod))
    assert mutated["spec"] == naive_mutated["spec"], "the naive mutator disagrees"
    assert mutated["metadata"]["annotations"][mutator.RECORD_ANNOTATION] == \
        naive_mutated["metadata"]["annotations"][mutator.RECORD_ANNOTATION]
    assert naive_mutator.mutate(naive_mutated) == [] and not mutator.mutate(injector, mutated).patch

    rows = [
        ("evaluate a 100-pod job", *rates(ours, theirs, args.seconds), "evaluations/s", None),
        (f"mutate a {len(json.dumps(pod)) / 1024:.1f} KB pod",
         *rates(lambda: mutator.mutate(injector, pod), lambda: naive_mutator.mutate(pod), args.seconds),
         "pods/s", MUTATIONS_PER_SECOND),
    ]
    failed = False
    print(f"{'benchmark':<26} {'ops/s':>10} {'naive ops/s':>12} {'ratio':>7}  unit            target")
    for name, fast, slow, unit, floor in rows:
        ratio = fast / slow
        target = f">= {RATIO:g}x naive" + (f", >= {floor:,}/s" if floor else "")
        ok = ratio >= RATIO and (floor is None or fast >= floor)
        failed |= not ok
        print(f"{name:<26} {fast:>10,.0f} {slow:>12,.0f} {ratio:>6.1f}x  {unit:<15} {target}"
              f"  {'ok' if ok else 'MISSED'}")
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
