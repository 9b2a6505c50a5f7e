"""Benchmark of reading pod lists: `rulec`'s input reader against a bare `json.loads` of the file.

Generates the pods of a 2,000-pod Volcano Job as `kubectl get pods -o json` prints them (a
`v1 List`, 4-space indents, each pod with its managed fields, about 10 KB), writes them as
JSON and as YAML, and times in one run, interleaved, the best of `--repeat` rounds (in CPU time
of this process, which other work on the machine disturbs least) of:

- the baseline: `json.loads` of the JSON file's text, nothing else;
- the same with the cyclic garbage collector paused, as the reader pauses it (for reference);
- `rulec.commands.inputs.read_objects` of the JSON file: reading, decoding, the depth and shape
  checks;
- `rulec.commands.inputs.read_objects` of the YAML file (libyaml's parser when PyYAML has it).

Then `rulec eval` of the job and the JSON file as a whole process (the plan compiled, every pod
evaluated, the output written), once. With `--old`, also the reader this one replaced (PyYAML's
pure-Python loader on the JSON text), once: it takes a minute.

Target: the JSON read within 2x the bare load. Exits 1 when missed, unless --no-fail.

    .venv/bin/python bench/inputs.py [--pods 2000] [--repeat 5] [--old] [--no-fail]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from check import best  # noqa: E402
from rulec import api  # noqa: E402
from rulec.commands import inputs  # noqa: E402

RATIO = 2.0
EXAMPLE = ROOT / "examples" / "volcano-oomkilled"
JOB = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
META = JOB["metadata"]
STAMP = "2020-03-12T11:12:53Z"


def pod(i: int) -> dict[str, Any]:
    """One pod of the job, as the API server returns it (managed fields included)."""
    task = "master" if i == 0 else "worker"
    name = f"{META['name']}-{task}-{i}"
    running = {"running": {"startedAt": STAMP}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": META["namespace"], "uid": f"3c1f3b7e-5a0d-4b8e-9f51-{i:012d}",
            "resourceVersion": str(4_000_000 + i), "creationTimestamp": STAMP,
            "labels": {"volcano.sh/job-name": META["name"], "volcano.sh/task-spec": task,
                       "volcano.sh/job-namespace": META["namespace"]},
            "annotations": {"scheduling.k8s.io/group-name": META["name"], "volcano.sh/task-spec": task},
            "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                 "name": META["name"], "uid": META["uid"], "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "vc-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": STAMP, "fieldsType": "FieldsV1", "fieldsV1": {
                     "f:metadata": {"f:labels": {".": {}, "f:volcano.sh/job-name": {},
                                                 "f:volcano.sh/task-spec": {}},
                                    "f:ownerReferences": {".": {}, f"k:{{\"uid\":\"{META['uid']}\"}}": {}}},
                     "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {
                         ".": {}, "f:command": {}, "f:image": {}, "f:name": {}, "f:resources": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": STAMP,
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {"f:status": {
                     "f:conditions": {f"k:{{\"type\":\"{t}\"}}": {".": {}, "f:lastTransitionTime": {},
                                                                  "f:status": {}, "f:type": {}}
                                      for t in ("Ready", "ContainersReady", "Initialized", "PodScheduled")},
                     "f:containerStatuses": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}}]},
        "spec": {
            "restartPolicy": "Never", "schedulerName": "volcano", "serviceAccountName": "default",
            "nodeName": f"node-{i % 50}", "priority": 0, "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "main", "image": "conda-tensorflow-1.7-py36:v1.2",
                "command": ["/bin/bash", "/opt/ml/bin/start.sh"],
                "env": [{"name": "VC_TASK_INDEX", "value": str(i)},
                        {"name": "VK_TASK_INDEX", "value": str(i)}],
                "resources": {"limits": {"memory": "200Mi"}, "requests": {"memory": "200Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": f"node.kubernetes.io/{k}", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}
                            for k in ("not-ready", "unreachable")]},
        "status": {
            "phase": "Running", "hostIP": f"10.0.{i % 50}.1", "podIP": f"10.244.{i // 250}.{i % 250}",
            "qosClass": "Burstable", "startTime": STAMP,
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": STAMP}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "name": "main", "ready": True, "started": True, "restartCount": 0,
                "image": "docker.io/library/conda-tensorflow-1.7-py36:v1.2",
                "imageID": "docker.io/library/conda-tensorflow@sha256:" + "0" * 64,
                "containerID": f"containerd://{i:064x}", "state": running, "lastState": {}}]},
    }


def pod_list(n: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": [pod(i) for i in range(n)],
            "metadata": {"resourceVersion": ""}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--old", action="store_true",
                    help="also time the pure-Python YAML reader this one replaced (slow)")
    ap.add_argument("--no-fail", action="store_true", help="report only; always exit 0")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        json_path, yaml_path = Path(tmp, "pods.json"), Path(tmp, "pods.yaml")
        pods = pod_list(args.pods)
        json_path.write_text(json.dumps(pods, indent=4), encoding="utf-8")
        yaml_path.write_text(yaml.safe_dump(pods, sort_keys=False), encoding="utf-8")
        assert inputs.read_objects(json_path) == inputs.read_objects(yaml_path) == pods["items"]
        del pods  # nothing big stays alive for the collector to walk while timing
        gc.collect()

        def paused() -> None:
            with api.without_cyclic_gc():
                json.loads(json_path.read_text(encoding="utf-8"))

        bare_s, paused_s, json_s, yaml_s = best(
            lambda: json.loads(json_path.read_text(encoding="utf-8")), paused,
            lambda: inputs.read_objects(json_path), lambda: inputs.read_objects(yaml_path),
            repeat=args.repeat, clock=time.process_time)
        command = [sys.executable, "-m", "rulec.commands.cli", "eval",
                   "--rules", str(EXAMPLE / "vcjob.rules"), "--object", str(EXAMPLE / "job.yaml"),
                   "--pods", str(json_path), "--now", "2020-03-12T11:15:00Z"]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        eval_s = time.perf_counter() - start
        if done.returncode != 0 or json.loads(done.stdout)["phase"] != "Running":
            print(f"rulec eval failed: {done.stderr}", file=sys.stderr)
            return 2
        old_s = None
        if args.old:
            start = time.process_time()
            list(yaml.load_all(json_path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader))
            old_s = time.process_time() - start
        sizes = json_path.stat().st_size, yaml_path.stat().st_size

    ratio = json_s / bare_s
    mib = 1024 * 1024
    rows = [
        ("json.loads (baseline)", f"{sizes[0] / mib:.1f} MiB", f"{bare_s * 1000:.0f} ms", ""),
        ("json.loads, GC paused", f"{sizes[0] / mib:.1f} MiB", f"{paused_s * 1000:.0f} ms",
         f"{paused_s / bare_s:.2f}x the baseline: what the collector costs"),
        ("read_objects, JSON", f"{sizes[0] / mib:.1f} MiB", f"{json_s * 1000:.0f} ms",
         f"{ratio:.2f}x the baseline (target <= {RATIO:.0f}x)"),
        ("read_objects, YAML", f"{sizes[1] / mib:.1f} MiB", f"{yaml_s * 1000:.0f} ms",
         f"{yaml_s / bare_s:.1f}x the baseline, libyaml {'on' if yaml.__with_libyaml__ else 'absent'}"),
        ("rulec eval, process", f"{args.pods:,} pods", f"{eval_s * 1000:.0f} ms",
         "one run, wall clock"),
    ]
    if old_s is not None:
        rows.append(("before: pure-Python YAML", f"{sizes[0] / mib:.1f} MiB",
                     f"{old_s * 1000:.0f} ms", f"{old_s / bare_s:.0f}x the baseline, one run"))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{args.pods:,} pods, best of {args.repeat}, CPU time (load average {load})")
    for row in rows:
        print(f"  {row[0]:<26} {row[1]:>12} {row[2]:>9}   {row[3]}")
    missed = ratio > RATIO
    if missed:
        print("target missed", file=sys.stderr)
    return 1 if missed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
