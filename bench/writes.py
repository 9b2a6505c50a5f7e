"""Writes to jobs per pod transition and per job lifetime: ours, before and after, beside the Job
controller's and the training operator's, in the same run.

    .venv/bin/python bench/writes.py [--baseline-ref 23a55ef] [--sizes 1,5,20]
                                     [--pytorch-sizes 2,5] [--nodes 2] [--quiet 3] [--json FILE]

One control plane with KWOK nodes, kube-controller-manager and the training operator
(docs/cluster.md). Three namespaces get the same jobs at the same moment:

- `after`: the controller of this checkout;
- `before`: the controller of `--baseline-ref`, run from a temporary `git worktree` of that
  commit (removed at the end), on a plan compiled there from that commit's own `rules/`;
- `none`: no controller of ours, what the operators write on their own.

Both controllers run the shipped rules (`rules/`, with `--policy` added), each scoped to its
namespace, as the user `jobrules:controller` (devkit: ControlPlane.controller_kubeconfig), so
the API server's audit log tells our writes from the Job controller's
(`system:serviceaccount:kube-system:job-controller`), the training operator's
(`training-operator`) and the bench's own creates (`admin`).

The jobs, in each namespace: batch/v1 Jobs of N pods (`--sizes`; parallelism = completions = N,
backoffLimit 0), one that succeeds and one whose first pod fails (exit 1: the Job controller
fails it and stops the others); a Volcano Job of 2 pods (task `worker`), its pods made as Volcano
would (no Volcano here: its status is never written); PyTorchJobs of N pods (`--pytorch-sizes`:
one Master and N-1 Workers, `cleanPodPolicy: All`) run by the real training operator, one that
succeeds and one whose master fails. Every pod runs on KWOK.

1. **Start**: every pod is made to run (KWOK outcome `run`): Pending, scheduled, Running. Once
   every pod runs, the operators report them (a Job's `ready`, a PyTorchJob's Running), both
   controllers' verdicts read Running and no job was written for `--quiet` seconds, the writes
   so far are counted.
2. **End**: each pod is told its end (KWOK outcome `succeed`, or `exit-code` for the first pod
   of a failing job; a succeeding PyTorchJob's master once its workers have ended, so that the
   operator's clean-up meets only pods that ended), and once every job has its operator's
   end, our verdicts agree and no job was written for `--quiet` seconds, the writes of the
   whole lifetime are counted.

Pod transitions are counted on a watch of the pods: each phase a pod enters (made Pending,
Running, Succeeded or Failed) is one; the watch's events (every change of a pod, scheduling and
conditions included) beside them. Writes are the audit log's create/update/patch/delete of the
job and its subresources by each user, answered 2xx; 409s are the same requests answered 409
(ours also from our own metric, `jobrules_controller_api_requests_total{code="409"}`, and the
operators' also from their logs' "the object has been modified"). A write of ours is
**state-only** when it patches nothing but the `jobrules.dev/state` annotation: the shipped rules
take no pod event, so every one of those is a write no verdict, budget, handled event or intent
needed.

Prints a markdown table (one row per job) and exits 1 when the controller of this checkout made a
state-only write, unless --no-fail (with a `--policy` that listens for pods some are needed:
docs/controller.md, "What is written where").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from support import apiserver  # noqa: E402
from devkit import cluster  # noqa: E402
from runtime.controller import kube as transport  # noqa: E402

BASELINE = "23a55ef"   # the commit before "controller writes only what changed" (b4915fb)
SETUPS = ("before", "after", "none")
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
TRAINING_OPERATOR = "training-operator"
OURS = cluster.CONTROLLER
STATE = "jobrules.dev/state"
MODIFIED = "the object has been modified"
JOB_LABELS = ("batch.kubernetes.io/job-name", "volcano.sh/job-name",
              "training.kubeflow.org/job-name")
JOB_RESOURCES = {("batch", "jobs"), ("batch.volcano.sh", "jobs"), ("kubeflow.org", "pytorchjobs")}
WRITE_VERBS = {"create", "update", "patch", "delete"}
PHASES = ("Pending", "Running", "Succeeded", "Failed")


@dataclass(frozen=True)
class Spec:
    """One job of the run, made alike in every namespace."""

    kind: str        # batch | volcano | pytorch
    name: str
    pods: int
    fails: bool

    @property
    def operator(self) -> str | None:
        return {"batch": JOB_CONTROLLER, "pytorch": TRAINING_OPERATOR}.get(self.kind)

    @property
    def label(self) -> str:
        what = {"batch": "batch/v1 Job", "volcano": "Volcano Job", "pytorch": "PyTorchJob"}
        end = "fails" if self.fails else "succeeds"
        return f"{what[self.kind]}, {self.pods} pod{'s' * (self.pods != 1)}, {end}"


def specs(sizes: list[int], pytorch_sizes: list[int]) -> list[Spec]:
    out = [Spec("batch", f"b{n}-{end}", n, end == "fail") for n in sizes for end in ("ok", "fail")]
    out.append(Spec("volcano", "vc2-ok", 2, False))
    out += [Spec("pytorch", f"pt{n}-{end}", n, end == "fail") for n in pytorch_sizes
            for end in ("ok", "fail")]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-ref", default=BASELINE,
                        help="the commit whose controller is `before` (default %(default)s)")
    parser.add_argument("--sizes", default="1,5,20", help="pods of each batch/v1 Job")
    parser.add_argument("--pytorch-sizes", default="2,5", help="pods of each PyTorchJob")
    parser.add_argument("--nodes", type=int, default=2, help="KWOK nodes")
    parser.add_argument("--quiet", type=float, default=3.0,
                        help="seconds without a write to any job that count as settled")
    parser.add_argument("--policy", action="append", default=[], metavar="KIND=POLICY",
                        help="a policy added to a shipped kind for both controllers, as "
                             "`extend KIND { POLICY }` (repeatable): "
                             "'batchjob=on pod evicted -> restart pod max 3'")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-fail", action="store_true")
    args = parser.parse_args()
    with cluster.running(nodes=args.nodes) as plane:
        figures = run(plane, baseline=args.baseline_ref, sizes=_ints(args.sizes),
                      pytorch_sizes=_ints(args.pytorch_sizes), quiet=args.quiet,
                      policies=[tuple(p.split("=", 1)) for p in args.policy])
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True))
    state_only = figures["totals"]["after"]["state_only"]
    if state_only:
        print(f"MISSED: the controller of this checkout made {state_only} state-only writes")
        return 0 if args.no_fail else 1
    print("no state-only write by the controller of this checkout")
    return 0


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


# -- the run -------------------------------------------------------------------------------------

def run(plane: cluster.ControlPlane, *, baseline: str = BASELINE, sizes: Sequence[int] = (1, 5, 20),
        pytorch_sizes: Sequence[int] = (2, 5), quiet: float = 3.0, prefix: str = "writes",
        policies: Sequence[Sequence[str]] = (), log: Any = sys.stderr) -> dict[str, Any]:
    """Run every job in the three namespaces of this run (`PREFIX-before`, ...) on `plane` and
    return the figures; the namespaces are deleted afterwards."""
    if not (plane.kwok and plane.training_operator and plane.controller_manager):
        raise SystemExit("the bench needs KWOK nodes, the training operator and "
                         "kube-controller-manager (docs/cluster.md)")
    jobs = specs(list(sizes), list(pytorch_sizes))
    tag = uuid.uuid4().hex[:5]
    namespaces = {setup: f"{prefix}-{tag}-{setup}" for setup in SETUPS}
    work = Path(tempfile.mkdtemp(prefix="jobrules-bench-writes-"))
    extra = work / "extra.rules"
    extra.write_text("".join(f"extend {kind} {{\n    {policy}\n}}\n" for kind, policy in policies))
    audit = AuditLog(plane.audit_log, set(namespaces.values()))
    operator_logs = {name: plane.root / f"{name}.log"
                     for name in ("training-operator", "kube-controller-manager")}
    marks = {name: _size(path) for name, path in operator_logs.items()}
    with (plane.client() as api, baseline_tree(baseline, work) as old,
          PodWatch(api, set(namespaces.values())) as pods):
        for namespace in namespaces.values():
            apiserver.create(api, apiserver.NAMESPACES, {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for namespace in namespaces.values():
            apiserver.wait_for(f"the default ServiceAccount of {namespace}", lambda n=namespace:
                               apiserver.exists(api, apiserver.SERVICE_ACCOUNTS.path(
                                   n, "default")), 60)
        trees = {"before": old, "after": ROOT}
        with contextlib.ExitStack() as stack:
            controllers = {setup: stack.enter_context(Controller.start(
                setup, trees[setup], plane, namespaces[setup], work, extra if policies else None))
                for setup in trees}
            print(f"controllers: before {controllers['before'].runtime}, "
                  f"after {controllers['after'].runtime}", file=log)
            began = time.monotonic()
            for namespace in namespaces.values():
                for spec in jobs:
                    make(api, namespace, spec)
            started(api, namespaces, jobs, pods, audit, quiet, controllers)
            at_start = audit.counts()
            transitions_start = pods.transitions()
            print(f"started in {time.monotonic() - began:.1f}s", file=log)
            told, masters = [], []
            for setup, namespace in namespaces.items():
                for spec in jobs:
                    now, later = end(api, namespace, spec)
                    told += now
                    masters += later
            # A PyTorchJob succeeds with its master: its workers end first, so that the
            # operator's clean-up meets only pods that ended, as when a job's work is done.
            apiserver.wait_for("every pod told to end to have ended", lambda: all(
                pods.phase(p["metadata"]["uid"]) in ("Succeeded", "Failed", "") for p in told),
                300)
            for pod in masters:
                apiserver.change_outcome(api, pod, outcome="succeed", after="0s")
            ended(api, namespaces, jobs, pods, audit, quiet, controllers)
            print(f"ended in {time.monotonic() - began:.1f}s", file=log)
            at_end = audit.counts()
            ours_409 = {setup: c.metric("jobrules_controller_api_requests_total", code="409")
                        for setup, c in controllers.items()}
        for namespace in namespaces.values():
            with contextlib.suppress(transport.KubeError):
                api.delete(apiserver.NAMESPACES.path(name=namespace))
    shutil.rmtree(work, ignore_errors=True)
    modified = {name: _modified_lines(path, marks[name], namespaces)
                for name, path in operator_logs.items()}
    out = figures(jobs, namespaces, at_start, at_end, transitions_start, pods.transitions(),
                  ours_409, modified, baseline)
    out["policies"] = [list(p) for p in policies]
    out["runtimes"] = {setup: c.runtime for setup, c in controllers.items()}
    return out


@contextlib.contextmanager
def baseline_tree(ref: str, work: Path) -> Iterator[Path]:
    """A temporary git worktree of `ref` (detached), removed afterwards."""
    tree = work / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree),
                    ref], check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       check=False)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)


@dataclass
class Controller:
    """`python -m runtime.controller` of one source tree, on that tree's own shipped rules."""

    process: subprocess.Popen[bytes]
    port: int
    runtime: str

    @classmethod
    @contextlib.contextmanager
    def start(cls, name: str, tree: Path, plane: cluster.ControlPlane, namespace: str,
              work: Path, extra: Path | None = None) -> Iterator[Controller]:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        plan = work / f"{name}.plan.json"
        subprocess.run([sys.executable, "-m", "rulec", "compile", "rules",
                        *([str(extra)] if extra else []), "-o", str(plan)],
                       cwd=tree, env=env, check=True)
        where = subprocess.run([sys.executable, "-c", "import runtime; print(runtime.__file__)"],
                               cwd=tree, env=env, check=True, capture_output=True, text=True)
        runtime = where.stdout.strip()
        if not runtime.startswith(str(tree)):
            raise SystemExit(f"{name}: runtime imported from {runtime}, not {tree}")
        [port] = cluster.free_ports(1)
        env |= {"KUBECONFIG": str(plane.controller_kubeconfig), "JOBRULES_PLAN": str(plan),
                "JOBRULES_NAMESPACES": namespace, "JOBRULES_LEADER_ELECT": "false",
                "JOBRULES_HEALTH_BIND": f"127.0.0.1:{port}", "JOBRULES_IDENTITY": name,
                "JOBRULES_LOG_LEVEL": "info"}
        with open(work / f"{name}.log", "ab") as out:
            process = subprocess.Popen([sys.executable, "-m", "runtime.controller"], cwd=tree,
                                       env=env, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT)
        handle = cls(process, port, runtime)
        try:
            def ready() -> bool:
                if process.poll() is not None:
                    raise SystemExit(f"the {name} controller exited:\n"
                                     + (work / f"{name}.log").read_text()[-3000:])
                return "readyz check passed" in handle.get("/readyz")
            apiserver.wait_for(f"the {name} controller", ready, 120)
            yield handle
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def get(self, path: str) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    def metric(self, name: str, **labels: str) -> float:
        total = 0.0
        for line in self.get("/metrics").splitlines():
            found = re.match(rf"{re.escape(name)}(?:{{(.*)}})? (\S+)$", line)
            if found and all(f'{k}="{v}"' in (found.group(1) or "") for k, v in labels.items()):
                total += float(found.group(2))
        return total


# -- the jobs ------------------------------------------------------------------------------------

PYTORCH = apiserver.PYTORCH_JOBS
VOLCANO = apiserver.VOLCANO_JOBS


def make(api: transport.Client, namespace: str, spec: Spec) -> dict[str, Any]:
    """Create the job (and for Volcano its pods, as Volcano would), its pods made to run."""
    container = {"name": "pytorch" if spec.kind == "pytorch" else "main", "image": "busybox:1.36"}
    template = apiserver.on_kwok({"spec": {"restartPolicy": "Never", "containers": [container]}},
                                 outcome="run")
    if spec.kind == "batch":
        return apiserver.create(api, apiserver.JOBS, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": spec.name, "namespace": namespace},
            "spec": {"parallelism": spec.pods, "completions": spec.pods, "backoffLimit": 0,
                     "template": template}})
    if spec.kind == "pytorch":
        replicas = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
        if spec.pods > 1:
            replicas["Worker"] = {"replicas": spec.pods - 1, "restartPolicy": "Never",
                                  "template": template}
        return apiserver.create(api, PYTORCH, {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": spec.name, "namespace": namespace},
            "spec": {"runPolicy": {"cleanPodPolicy": "All"}, "pytorchReplicaSpecs": replicas}})
    job = apiserver.create(api, VOLCANO, {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": spec.name, "namespace": namespace},
        "spec": {"minAvailable": spec.pods, "tasks": [
            {"name": "worker", "replicas": spec.pods, "template": template}]}})
    for i in range(spec.pods):
        pod = apiserver.pod_manifest(namespace, f"{spec.name}-worker-{i}", owner=job, labels={
            "volcano.sh/job-name": spec.name, "volcano.sh/task-spec": "worker"})
        apiserver.create(api, apiserver.PODS, apiserver.on_kwok(pod, outcome="run"))
    return job


def end(api: transport.Client, namespace: str,
        spec: Spec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Tell the job's pods how they end: all succeed, or the first (the master) fails. Returns
    the pods told, and those left to tell once the others ended (the master of a PyTorchJob
    that succeeds)."""
    label = {"batch": "batch.kubernetes.io/job-name", "volcano": "volcano.sh/job-name",
             "pytorch": "training.kubeflow.org/job-name"}[spec.kind]
    pods = sorted(apiserver.list_pods(api, namespace, f"{label}={spec.name}"),
                  key=lambda p: (p["metadata"]["labels"].get("training.kubeflow.org/job-role")
                                 != "master", p["metadata"]["name"]))
    if spec.fails:
        apiserver.change_outcome(api, pods[0], outcome="exit-code", exit_code=1, after="0s")
        return [pods[0]], []
    later = pods[:1] if spec.kind == "pytorch" else []
    now = pods[len(later):]
    for pod in now:
        apiserver.change_outcome(api, pod, outcome="succeed", after="0s")
    return now, later


def _get_all(api: transport.Client, namespace: str) -> dict[str, dict[str, Any]]:
    out = {}
    for resource in (apiserver.JOBS, VOLCANO, PYTORCH):
        for item in api.list(resource.path(namespace))["items"]:
            out[item["metadata"]["name"]] = item
    return out


def _true(obj: dict[str, Any], *types: str) -> bool:
    return any(c.get("type") in types and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _verdict(obj: dict[str, Any]) -> str | None:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get("jobrules.dev/verdict")
    return json.loads(text).get("phase") if text else None


def started(api: transport.Client, namespaces: dict[str, str], jobs: list[Spec], pods: PodWatch,
            audit: AuditLog, quiet: float, controllers: dict[str, Controller]) -> None:
    def ready() -> bool:
        for setup, namespace in namespaces.items():
            found = _get_all(api, namespace)
            for spec in jobs:
                job = found.get(spec.name)
                if job is None or pods.running(namespace, spec.name) < spec.pods:
                    return False
                if spec.kind == "batch" and (job.get("status") or {}).get("ready") != spec.pods:
                    return False
                if spec.kind == "pytorch" and not _true(job, "Running"):
                    return False
                if setup in controllers and _verdict(job) != "Running":
                    return False
        return True
    apiserver.wait_for("every pod running, every job reported and our verdicts Running", ready,
                       600)
    audit.settle(quiet)


def ended(api: transport.Client, namespaces: dict[str, str], jobs: list[Spec], pods: PodWatch,
          audit: AuditLog, quiet: float, controllers: dict[str, Controller]) -> None:
    def done() -> bool:
        for setup, namespace in namespaces.items():
            found = _get_all(api, namespace)
            for spec in jobs:
                job = found[spec.name]
                want = "Failed" if spec.fails else "Succeeded"
                if spec.kind == "batch" and not _true(job, "Complete" if want == "Succeeded"
                                                      else "Failed"):
                    return False
                if spec.kind == "pytorch" and not _true(job, want):
                    return False
                if spec.kind == "volcano" and pods.ended(namespace, spec.name) < spec.pods:
                    return False
                if setup in controllers and _verdict(job) != want:
                    return False
        return True
    apiserver.wait_for("every job ended and our verdicts agreeing", done, 600)
    audit.settle(quiet)


# -- what is seen --------------------------------------------------------------------------------

class PodWatch:
    """Every pod of the run's namespaces, by job: the phases it entered and its changes."""

    def __init__(self, api: transport.Client, namespaces: set[str]) -> None:
        self.api = api
        self.namespaces = namespaces
        self.lock = threading.Lock()
        self.phases: dict[str, list[str]] = {}        # pod uid -> phases entered, in order
        self.changes: Counter[str] = Counter()        # pod uid -> watch events
        self.owner: dict[str, tuple[str, str]] = {}   # pod uid -> (namespace, job name)
        self.current: dict[str, str] = {}             # pod uid -> phase now ("" once deleted)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> PodWatch:
        self.version = self.api.get(apiserver.PODS.path(), query=[("limit", "1")])[
            "metadata"]["resourceVersion"]
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        self.thread.join(10)

    def _watch(self) -> None:
        rv = self.version
        while not self.stop.is_set():
            try:
                for event in self.api.watch(apiserver.PODS.path(), [
                        ("resourceVersion", rv), ("allowWatchBookmarks", "true")], read_timeout=5):
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._see(event["type"], obj)
                    if self.stop.is_set():
                        return
            except transport.Timeout:
                continue
            except transport.Gone:
                return   # never expected within a run: the counts would be short

    def _see(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if meta.get("namespace") not in self.namespaces:
            return
        labels = meta.get("labels") or {}
        job = next((labels[key] for key in JOB_LABELS if key in labels), None)
        if job is None:
            return
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        with self.lock:
            self.owner[uid] = (meta["namespace"], job)
            self.changes[uid] += 1
            entered = self.phases.setdefault(uid, [])
            if kind == "DELETED":
                self.current[uid] = ""
            else:
                self.current[uid] = phase
            if phase not in entered:
                entered.append(phase)

    def running(self, namespace: str, job: str) -> int:
        with self.lock:
            return sum(1 for uid, owner in self.owner.items()
                       if owner == (namespace, job) and self.current.get(uid) == "Running")

    def phase(self, uid: str) -> str | None:
        """The pod's phase now ("" once deleted, None before it was seen)."""
        with self.lock:
            return self.current.get(uid)

    def ended(self, namespace: str, job: str) -> int:
        with self.lock:
            return sum(1 for uid, owner in self.owner.items() if owner == (namespace, job)
                       and self.current.get(uid) in ("Succeeded", "Failed"))

    def transitions(self) -> dict[str, dict[str, dict[str, int]]]:
        """namespace -> job -> {"pods", "transitions" (phases entered), "changes"}."""
        out: dict[str, dict[str, dict[str, int]]] = defaultdict(
            lambda: defaultdict(lambda: {"pods": 0, "transitions": 0, "changes": 0}))
        with self.lock:
            for uid, (namespace, job) in self.owner.items():
                row = out[namespace][job]
                row["pods"] += 1
                row["transitions"] += len(self.phases[uid])
                row["changes"] += self.changes[uid]
        return {ns: dict(jobs) for ns, jobs in out.items()}


class AuditLog:
    """The API server's audit log, read as it grows: the writes to the run's jobs."""

    def __init__(self, path: Path, namespaces: set[str]) -> None:
        self.path = path
        self.namespaces = namespaces
        self.offset = _size(path)
        self.entries: list[dict[str, Any]] = []
        self.last_write = time.monotonic()

    def read(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        new = []
        for line in complete.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            ref = entry.get("objectRef") or {}
            if (ref.get("namespace") in self.namespaces and entry.get("verb") in WRITE_VERBS
                    and (ref.get("apiGroup"), ref.get("resource")) in JOB_RESOURCES):
                new.append(entry)
        if new:
            self.last_write = time.monotonic()
        self.entries += new
        return new

    def settle(self, quiet: float) -> None:
        """Wait until no job of the run was written for `quiet` seconds."""
        self.read()
        self.last_write = max(self.last_write, time.monotonic())
        apiserver.wait_for(f"{quiet:g}s without a write to any job", lambda: (
            self.read(), time.monotonic() - self.last_write >= quiet)[1], 600)

    def counts(self) -> dict[str, dict[str, Counter[str]]]:
        """namespace -> job -> counts by "USER ok", "USER 409", "ours state-only", ..."""
        self.read()
        out: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
        phases: dict[tuple[str, str], str | None] = {}
        for entry in self.entries:
            ref = entry["objectRef"]
            user = (entry.get("user") or {}).get("username", "")
            code = int((entry.get("responseStatus") or {}).get("code") or 0)
            key = (ref["namespace"], ref.get("name") or "")
            row = out[key[0]][key[1]]
            if 200 <= code < 300:
                row[f"{user} ok"] += 1
                if user == OURS:
                    row[f"ours {_our_part(entry)}"] += 1
                    phase = _written_phase(entry)
                    if phase is not None and phase != phases.get(key):
                        row["ours verdicts"] += 1   # the job's first verdict, then each change
                        phases[key] = phase
            elif code == 409:
                row[f"{user} 409"] += 1
        return {ns: dict(jobs) for ns, jobs in out.items()}


def _our_part(entry: dict[str, Any]) -> str:
    """What a write of ours carried: `state-only` when nothing but the state annotation."""
    if (entry["objectRef"].get("subresource") or "") == "status":
        return "status"
    body = entry.get("requestObject") or {}
    meta = body.get("metadata") or {}
    rest = set(body) - {"metadata"} or set(meta) - {"resourceVersion", "annotations"}
    if not rest and set(meta.get("annotations") or {}) == {STATE}:
        return "state-only"
    return "commit"


def _written_phase(entry: dict[str, Any]) -> str | None:
    """The verdict phase a write of ours carried in `jobrules.dev/verdict`, if it did."""
    meta = (entry.get("requestObject") or {}).get("metadata") or {}
    text = (meta.get("annotations") or {}).get("jobrules.dev/verdict")
    try:
        return json.loads(text).get("phase") if text else None
    except ValueError:
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _modified_lines(path: Path, offset: int, namespaces: dict[str, str]) -> dict[str, int]:
    """Lines of an operator's log since `offset` saying "the object has been modified", by
    the run's namespace they name (`?` for none)."""
    out: Counter[str] = Counter()
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return {}
    for line in text.splitlines():
        if MODIFIED not in line:
            continue
        if not out:
            print(f"{path.name}: {line[:400]}", file=sys.stderr)
        named = [setup for setup, ns in namespaces.items() if ns in line]
        out[named[0] if named else "?"] += 1
    return dict(out)


# -- the figures ---------------------------------------------------------------------------------

def figures(jobs: list[Spec], namespaces: dict[str, str], at_start: dict[str, Any],
            at_end: dict[str, Any], pods_start: dict[str, Any], pods_end: dict[str, Any],
            ours_409: dict[str, float], modified: dict[str, dict[str, int]],
            baseline: str) -> dict[str, Any]:
    rows = []
    totals: dict[str, Counter[str]] = {setup: Counter() for setup in SETUPS}
    for spec in jobs:
        row: dict[str, Any] = {"job": spec.label, "name": spec.name, "pods": spec.pods}
        for setup, namespace in namespaces.items():
            start = at_start.get(namespace, {}).get(spec.name, Counter())
            whole = at_end.get(namespace, {}).get(spec.name, Counter())
            seen_start = pods_start.get(namespace, {}).get(spec.name, {})
            seen = pods_end.get(namespace, {}).get(spec.name, {})
            cell = {
                "transitions_start": seen_start.get("transitions", 0),
                "transitions": seen.get("transitions", 0), "pod_changes": seen.get("changes", 0),
                "pods_seen": seen.get("pods", 0),
                "ours_start": start[f"{OURS} ok"], "ours": whole[f"{OURS} ok"],
                "ours_state_only_start": start["ours state-only"],
                "ours_state_only": whole["ours state-only"],
                "ours_status": whole["ours status"], "ours_409": whole[f"{OURS} 409"],
                "ours_verdicts": whole["ours verdicts"],
                "operator": whole[f"{spec.operator} ok"] if spec.operator else None,
                "operator_start": start[f"{spec.operator} ok"] if spec.operator else None,
                "operator_409": whole[f"{spec.operator} 409"] if spec.operator else None,
                "others": {key: n for key, n in whole.items() if key.endswith((" ok", " 409"))
                           and not key.startswith((OURS, "admin", str(spec.operator)))},
            }
            row[setup] = cell
            totals[setup]["writes"] += cell["ours"]
            totals[setup]["state_only"] += cell["ours_state_only"]
            totals[setup]["409"] += cell["ours_409"]
            totals[setup]["verdicts"] += cell["ours_verdicts"]
            totals[setup]["transitions"] += cell["transitions"]
            totals[setup]["operator"] += cell["operator"] or 0
            totals[setup]["operator_409"] += cell["operator_409"] or 0
        rows.append(row)
    return {"baseline": baseline, "namespaces": namespaces, "rows": rows,
            "totals": {k: dict(v) for k, v in totals.items()},
            "ours_409_metric": ours_409, "modified_lines": modified}


def table(f: dict[str, Any]) -> str:
    head = ("| job | pod transitions (pod changes) | ours before: start / lifetime (state-only) "
            "| ours after: start / lifetime (state-only) | verdicts we wrote | ours per pod "
            "transition, before / after | ours per verdict, before / after | the operator's "
            "writes beside none / before / after | 409s: ours before / after | the operator's "
            "409s beside none / before / after |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in f["rows"]:
        b, a, n = row["before"], row["after"], row["none"]
        per = [c["ours"] / c["transitions"] if c["transitions"] else 0.0 for c in (b, a)]
        per_verdict = [c["ours"] / c["ours_verdicts"] if c["ours_verdicts"] else 0.0
                       for c in (b, a)]
        if n["operator"] is None:
            operator, theirs = "-", "-"
        else:
            operator = " / ".join(str(c["operator"]) for c in (n, b, a))
            theirs = " / ".join(str(c["operator_409"]) for c in (n, b, a))
        lines.append(
            f"| {row['job']} | {a['transitions']} ({a['pod_changes']}) "
            f"| {b['ours_start']} / {b['ours']} ({b['ours_state_only']}) "
            f"| {a['ours_start']} / {a['ours']} ({a['ours_state_only']}) "
            f"| {a['ours_verdicts']} | {per[0]:.2f} / {per[1]:.2f} "
            f"| {per_verdict[0]:.2f} / {per_verdict[1]:.2f} | {operator} "
            f"| {b['ours_409']} / {a['ours_409']} | {theirs} |")
    t = f["totals"]
    lines.append("")
    lines.append(
        f"all jobs: ours before {t['before']['writes']} writes ({t['before']['state_only']} "
        f"state-only) over {t['before']['transitions']} pod transitions, after "
        f"{t['after']['writes']} ({t['after']['state_only']} state-only) over "
        f"{t['after']['transitions']}; 409s ours before {t['before']['409']}, after "
        f"{t['after']['409']} (our metric: before {f['ours_409_metric']['before']:g}, after "
        f"{f['ours_409_metric']['after']:g}); the operators' 409s beside none / before / after: "
        f"{t['none']['operator_409']} / {t['before']['operator_409']} / "
        f"{t['after']['operator_409']}; their logs' \"{MODIFIED}\" lines by namespace: "
        + "; ".join(f"{name} {lines_}" for name, lines_ in f["modified_lines"].items()))
    others = {row["name"]: {s: row[s]["others"] for s in SETUPS if row[s]["others"]}
              for row in f["rows"]}
    others = {k: v for k, v in others.items() if v}
    if others:
        lines.append(f"other writers: {json.dumps(others, sort_keys=True)}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
