"""Verdict throughput of one replica against two replicas over two shards, on one control plane.

    .venv/bin/python bench/shards.py [--jobs 400] [--namespaces 8] [--rounds 2]
                                     [--profile DIR] [--no-fail]

One control plane (docs/cluster.md) with kube-controller-manager's Job controller, without
scheduler or KWOK; the controller (`python -m runtime.controller`) on the shipped rules with
`JOBRULES_SHARDS=2` in both set-ups, so that only the number of replicas differs: one replica
holds both shards, or two replicas hold one each. Per round, one replica then two:

1. `--namespaces` new namespaces, half in each shard (runtime.shards), and `--jobs` batch/v1
   Jobs of one pod spread over them; the Job controller makes the pods (Pending: nothing runs
   them).
2. The replicas started and ready, each holding its shards (their Leases), and every Job's
   first verdict (Pending) written.
3. A burst: every Job's pod reported Running through pods/status by 32 threads at once (the
   shipped rules then say the Job runs: a new verdict). Measured on a cluster-wide Job watch:
   verdicts a second, from the burst's first PATCH to the last Running verdict; the verdict
   latency p50/p99; and the CPU seconds each process of the machine spent in that window
   (kube-apiserver, etcd, kube-controller-manager, the replicas, this bench) beside the
   machine's two cores, from /proc: what the time went to. With `--profile DIR` the API server
   profiles its own CPU for the burst's first `--profile-seconds` (DIR/ROUND-REPLICAS.pprof),
   and its heaviest frames are printed (`go tool pprof -top -cum`, where Go is on PATH).

Target: two replicas at least 1.6x one replica's verdicts a second; below that the CPU table says
why. Exits 1 when missed, unless --no-fail.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "bench"))

import controller as bench_controller  # noqa: E402  (bench/controller.py: its Controller)
import scale  # noqa: E402  (bench/scale.py: the shipped rules' plan)
from support import apiserver  # noqa: E402
from devkit import cluster  # noqa: E402
from runtime import shards  # noqa: E402
from runtime.controller import kube as transport  # noqa: E402

SHARDS = 2
TARGET = 1.6
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
LEASE_NAME = "jobrules-controller"
ALL_JOBS = "/apis/batch/v1/jobs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--namespaces", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="profile the API server's CPU during each burst into DIR")
    parser.add_argument("--profile-seconds", type=int, default=10)
    parser.add_argument("--no-fail", action="store_true")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rows = run(args.jobs, args.namespaces, args.rounds, args.threads, args.profile,
               args.profile_seconds)
    print(table(rows))
    if args.profile:
        print(profile_top(args.profile))
    ratio = speedup(rows)
    verdict = f"two replicas / one: {ratio:.2f}x (target >= {TARGET}x)"
    print(verdict if ratio >= TARGET else "MISSED: " + verdict)
    return 1 if ratio < TARGET and not args.no_fail else 0


def run(jobs: int, namespaces: int, rounds: int, threads: int, profile: Path | None = None,
        profile_seconds: int = 10) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="jobrules-bench-shards-"))
    plan_path = scale.shipped_plan(work)
    rows = []
    with (cluster.running(training_operator=False, scheduler=False, profiling=profile is not None,
                          controller_manager_qps=1000) as plane,
          plane.client() as api):
        env = {**os.environ, "KUBECONFIG": str(plane.controller_kubeconfig),
               "JOBRULES_PLAN": str(plan_path), "JOBRULES_SHARDS": str(SHARDS),
               "JOBRULES_LEADER_ELECT": "true", "JOBRULES_LEASE_NAMESPACE": "default",
               "JOBRULES_LEASE_DURATION": "6", "JOBRULES_RENEW_DEADLINE": "4",
               "JOBRULES_RETRY_PERIOD": "1", "JOBRULES_LOG_LEVEL": "warning"}
        pids = {name: cluster.processes_using(plane.root, (name,)) for name in scale.PROCESSES}
        for r in range(rounds):
            for replicas in (1, 2):
                row = {"round": r + 1, "replicas": replicas}
                names = make_jobs(api, jobs, namespaces, threads)
                where = profile / f"{r + 1}-{replicas}.pprof" if profile else None
                row.update(burst(api, env, work, replicas, names, pids, threads,
                                 where, profile_seconds))
                rows.append(row)
                print(json.dumps(row, default=str), file=sys.stderr)
    return rows


def spread_namespaces(count: int) -> list[str]:
    """`count` new namespace names, as many in each shard as can be."""
    found: dict[int, list[str]] = {k: [] for k in range(SHARDS)}
    while sum(len(v) for v in found.values()) < count:
        name = f"b{uuid.uuid4().hex[:10]}"
        k = shards.shard_of(name, SHARDS)
        if len(found[k]) < -(-count // SHARDS):
            found[k].append(name)
    return [n for k in range(SHARDS) for n in found[k]][:count]


def make_jobs(api: transport.Client, jobs: int, namespaces: int,
              threads: int) -> list[tuple[str, str]]:
    """(namespace, name) of `jobs` one-pod Jobs over new namespaces, once every pod exists."""
    spaces = spread_namespaces(namespaces)
    for ns in spaces:
        apiserver.create(api, apiserver.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": ns}})
    names = [(spaces[i % len(spaces)], f"job-{i:05d}") for i in range(jobs)]

    def job(item: tuple[str, str]) -> None:
        apiserver.create(api, apiserver.JOBS, apiserver.job_manifest(*item, backoff_limit=1000))

    scale.parallel(job, names, threads)
    apiserver.wait_for(f"the pods of {jobs} Jobs",
                       lambda: sum(len(apiserver.list_pods(api, ns)) for ns in spaces) >= jobs, 600)
    return names


def _holders(api: transport.Client) -> dict[str, str]:
    out = {}
    for lease in api.get(LEASES)["items"]:
        name = lease["metadata"]["name"]
        if name.startswith(f"{LEASE_NAME}-shard-"):
            out[name] = (lease.get("spec") or {}).get("holderIdentity") or ""
    return out


def burst(api: transport.Client, env: dict[str, str], work: Path, replicas: int,
          names: list[tuple[str, str]], pids: dict[str, list[int]], threads: int,
          profile: Path | None = None, profile_seconds: int = 10) -> dict[str, Any]:
    identities = [f"bench-{uuid.uuid4().hex[:6]}" for _ in range(replicas)]
    started = [bench_controller.Controller({**env, "JOBRULES_IDENTITY": who}, work)
               for who in identities]
    try:
        for c in started:
            apiserver.wait_for("a replica ready", lambda: "readyz check passed" in c.get("/readyz"),
                               300)
        apiserver.wait_for(f"{SHARDS} shards held by {replicas} replicas", lambda: (
            set(_holders(api).values()) == set(identities)
            and len(_holders(api)) == SHARDS), 120)
        wanted = set(names)

        def pending() -> bool:
            jobs = api.list(ALL_JOBS)["items"]
            return sum((j["metadata"]["namespace"], j["metadata"]["name"]) in wanted
                       and bench_controller._verdict(j) == "Pending" for j in jobs) >= len(names)

        apiserver.wait_for("every first verdict (Pending)", pending, 300)
        pods = {}
        for ns in {n for n, _ in names}:
            for pod in apiserver.list_pods(api, ns):
                pods[ns, pod["metadata"]["labels"]["job-name"]] = pod
        seen: dict[tuple[str, str], float] = {}
        sent: dict[tuple[str, str], float] = {}
        stop = threading.Event()
        version = next(api.pages(ALL_JOBS, limit=1))["metadata"]["resourceVersion"]

        def mark(obj: dict[str, Any]) -> None:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if key in wanted and key not in seen and bench_controller._verdict(obj) == "Running":
                seen[key] = time.monotonic()

        watcher = threading.Thread(target=bench_controller.follow_jobs, daemon=True,
                                   args=(api, version, stop, mark, (), ALL_JOBS))
        watcher.start()
        time.sleep(1)
        everyone = {name: [p for p in ps] for name, ps in pids.items()}
        everyone.update({f"replica {i + 1}": [c.process.pid] for i, c in enumerate(started)})
        everyone["this bench"] = [os.getpid()]
        cpu0 = scale.cpu_by_process(everyone)
        busy0 = scale.machine_busy()
        began = time.monotonic()
        profiler = concurrent.futures.ThreadPoolExecutor(1)
        taken = profiler.submit(api.request, "GET", "/debug/pprof/profile", query=[
            ("seconds", str(profile_seconds))], timeout=profile_seconds + 60) if profile else None

        def send(key: tuple[str, str]) -> None:
            sent[key] = time.monotonic()
            apiserver.report_running(api, pods[key])

        scale.parallel(send, names, threads)
        apiserver.wait_for("every Running verdict", lambda: len(seen) >= len(names), 600)
        ended = max(seen.values())
        stop.set()
        cpu = {name: used - cpu0[name] for name, used in scale.cpu_by_process(everyone).items()}
        busy = scale.machine_busy() - busy0
        window = time.monotonic() - began
        if taken is not None and profile is not None:
            profile.write_bytes(taken.result())
        profiler.shutdown()
        latencies = sorted(seen[k] - sent[k] for k in names)
        return {"jobs": len(names), "seconds": ended - began,
                "verdicts_per_s": len(names) / (ended - began),
                "p50": statistics.median(latencies), "p99": bench_controller._pct(latencies, 99),
                "cpu": {k: round(v, 2) for k, v in cpu.items()}, "busy": round(busy, 2),
                "window": round(window, 2), "cores": os.cpu_count()}
    finally:
        for c in started:
            c.stop()


def profile_top(folder: Path, lines: int = 25) -> str:
    """The heaviest frames (cumulative) of each profile in `folder`."""
    go = shutil.which("go")
    if go is None:
        return f"no go on PATH: read {folder}/*.pprof with `go tool pprof -top -cum`"
    out = []
    for path in sorted(folder.glob("*.pprof")):
        text = subprocess.run([go, "tool", "pprof", "-top", "-cum", f"-nodecount={lines}",
                               str(path)], capture_output=True, text=True).stdout
        out.append(f"== {path.name} (round-replicas)\n{text}")
    return "\n".join(out)


def speedup(rows: list[dict[str, Any]]) -> float:
    """Two replicas' verdicts a second over one's, each the median of its rounds."""
    def rate(n: int) -> float:
        return statistics.median(r["verdicts_per_s"] for r in rows if r["replicas"] == n)
    return rate(2) / rate(1)


def table(rows: list[dict[str, Any]]) -> str:
    names = list(rows[0]["cpu"]) if rows else []
    every = sorted({k for r in rows for k in r["cpu"]}, key=lambda k: (k not in names, k))
    lines = ["| round | replicas | verdicts | verdicts/s | p50 / p99 | machine busy (of cores x s) | "
             + " | ".join(f"CPU s: {k}" for k in every) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(every)]
    for r in rows:
        lines.append(
            f"| {r['round']} | {r['replicas']} | {r['jobs']} | {r['verdicts_per_s']:.1f} "
            f"| {r['p50']:.2f} / {r['p99']:.2f} s | {r['busy']:.1f} of {r['cores']} x "
            f"{r['window']:.1f} s | " + " | ".join(f"{r['cpu'].get(k, 0):.1f}" for k in every)
            + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
