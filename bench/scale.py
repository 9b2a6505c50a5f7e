"""The controller's scale curve: what it holds and how fast it answers at 10,000 to 100,000 pods.

    .venv/bin/python bench/scale.py [--sizes 10000,30000,100000] [--shapes 5,20,400] [--rate 500]
                                    [--seconds 10] [--hot SHARE] [--quick] [--no-fail]

One control plane (docs/cluster.md) without scheduler or KWOK, with kube-controller-manager's
Job controller; the controller (`python -m runtime.controller`) on a plan compiled from the
shipped rules (`rules/`), watching the namespace `bench`. For each size, in increasing order:

1. Grow to that many pods held: batch/v1 Jobs of `--shapes` pods in turn (parallelism = completions),
   their pods made by kube-controller-manager's Job controller (its request rate raised to
   `--controller-manager-qps`), as in the upstream batch load test; timed until every pod
   exists (a rate). Pods this process made raced the Job controller, which then drained the
   surplus for longer than the creates took.
2. A fresh controller: time from start to ready (/readyz passes once every cache has synced),
   then from ready until it has caught up (every Job has a verdict and its work queue is empty:
   the Jobs made while it was not running get their first verdicts, a write each, the backlog a
   restart leaves), its peak RSS meanwhile (VmHWM) and its RSS settled 5 s after, from /proc;
   the bytes of its caches (`jobrules_controller_store_bytes`). The stream below starts from
   there, so that its latencies are those of a controller that keeps up, not of its catching up.
3. `--rate` pod events a second for `--seconds` through pods/status on Pending pods of every
   Job in turn: the first event of each Job makes a pod Running (the shipped rules then say the
   Job is running: a new verdict), the following ones alternate Running, Succeeded (exit 0) and
   Failed (exit 1; the Job controller starts another pod). Measured: the verdict latency from
   the PATCH's return to `jobrules.dev/verdict` showing Running on a Job watch (p50/p99), the
   same from the controller's own histogram (`jobrules_controller_verdict_latency_seconds`,
   bucket bounds), the rate actually sent, and the requests per pod event of the controller
   (`jobrules_controller_api_requests_total`, every verb) and of the Job controller (its writes
   to Jobs and its pod deletions from the API server's audit log, the pods it created and the
   tracking finalizers it removed, counted from the pods: its reads are shared watches), and
   what the machine did meanwhile: the CPU seconds of kube-apiserver, etcd,
   kube-controller-manager, the controller and this bench, from the stream's start until every
   first verdict was seen, beside how busy the machine's cores were (from /proc). With
   `--hot SHARE` that share of the events goes to one Job, the largest, each one of its pods
   reported Running again (a change the controller reads: a reconcile of the whole Job), spread
   evenly through the stream: how the other Jobs' verdicts fare beside a Job that never rests.

Targets at 100,000 pods: RSS <= 200 MiB, initial sync < 60 s, verdict p99 <= 1 s at 500 events
a second, requests per pod event no more than the Job controller's. Exits 1 when one is missed
(at the largest size run), unless --no-fail. --quick: 2,000 pods, 20 per Job, 100 events a
second for 5 s.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "bench"))

import controller as bench_controller  # noqa: E402  (bench/controller.py: its Controller)
from support import apiserver  # noqa: E402
from devkit import cluster  # noqa: E402
from rulec import api as rulec_api  # noqa: E402
from rulec import emit  # noqa: E402
from runtime.controller import kube as transport  # noqa: E402

NAMESPACE = "bench"
RSS_LIMIT_MIB = 200.0
SYNC_LIMIT_S = 60.0
P99_LIMIT_S = 1.0
P99_AT_RATE = 500.0   # events a second the p99 target is for
TARGET_PODS = 100_000
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
TRACKING = "batch.kubernetes.io/job-tracking"
# The control plane's processes whose CPU is read beside the controller's (from /proc).
PROCESSES = ("kube-apiserver", "etcd", "kube-controller-manager")
UID_LABEL = "batch.kubernetes.io/controller-uid"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,30000,100000")
    parser.add_argument("--shapes", default="5,20,400",
                        help="pods per Job, in turn (the upstream batch load test's shapes)")
    parser.add_argument("--controller-manager-qps", type=int, default=1000,
                        help="kube-controller-manager's requests a second (the Job controller's pace)")
    parser.add_argument("--rate", type=float, default=P99_AT_RATE, help="pod events a second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=32, help="concurrent creates and patches")
    parser.add_argument("--hot", type=float, default=0.0,
                        help="the share of the stream's events that go to one Job (the largest)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-fail", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.shapes, args.rate, args.seconds = "2000", "20", 100.0, 5.0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    shapes = [int(s) for s in args.shapes.split(",")]
    rows = run(sizes, shapes, args.rate, args.seconds, args.threads, args.controller_manager_qps,
               args.hot)
    print(table(rows))
    missed = misses(rows[-1])
    print("MISSED: " + "; ".join(missed) if missed else "all targets met (at the largest size)")
    return 1 if missed and not args.no_fail else 0


def run(sizes: list[int], shapes: list[int], rate: float, seconds: float,
        threads: int = 32, controller_manager_qps: int = 1000,
        hot: float = 0.0) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="jobrules-bench-scale-"))
    plan_path = shipped_plan(work)
    rows = []
    with (cluster.running(training_operator=False, scheduler=False,
                          controller_manager_qps=controller_manager_qps) as plane,
          plane.client() as api):
        apiserver.create(api, apiserver.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
        env = {**os.environ, "KUBECONFIG": str(plane.controller_kubeconfig),
               "JOBRULES_PLAN": str(plan_path), "JOBRULES_NAMESPACES": NAMESPACE,
               "JOBRULES_LEADER_ELECT": "false", "JOBRULES_LOG_LEVEL": "warning"}
        jobs: list[dict[str, Any]] = []
        for size in sizes:
            row: dict[str, Any] = {"size": size}
            row.update(grow(api, jobs, size, shapes, threads))
            row.update(start(env, work, api, row))
            controller = row.pop("controller")
            print(json.dumps(row, default=str), file=sys.stderr)   # kept if the drive fails
            try:
                row.update(drive(api, plane, controller, jobs, rate, seconds, threads, hot))
            finally:
                controller.stop()
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items()}, default=str), file=sys.stderr)
    return rows


def shipped_plan(work: Path) -> Path:
    """The plan of the shipped rules (`rules/`), written into `work`."""
    built = rulec_api.build([str(p) for p in sorted((ROOT / "rules").glob("*.rules"))])
    assert built.plan is not None, built.diagnostics
    path = work / "plan.json"
    path.write_text(emit.dumps(built.plan))
    return path


def parallel(fn: Any, items: list[Any], threads: int) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def machine_busy() -> float:
    """CPU seconds the whole machine spent not idle so far (every core)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_by_process(pids: dict[str, list[int]]) -> dict[str, float]:
    return {name: sum(bench_controller.cpu_seconds(p) for p in ps) for name, ps in pids.items()}


def _pods(api: transport.Client) -> list[dict[str, Any]]:
    """Every pod of the Jobs, in one unpaged LIST: a paged list of 100,000 pods on a loaded
    machine outlasted its continue token (410 Expired) five times in a row."""
    items: list[dict[str, Any]] = api.request("GET", apiserver.PODS.path(NAMESPACE), query=[
        ("labelSelector", UID_LABEL)], timeout=600)["items"]
    return items


def _count(api: transport.Client) -> int:
    """The pods in the namespace (terminating ones too), from one page of one item."""
    page = next(api.pages(apiserver.PODS.path(NAMESPACE), limit=1))
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


def _live_pods(api: transport.Client) -> list[dict[str, Any]]:
    return [p for p in _pods(api) if not p["metadata"].get("deletionTimestamp")]


def grow(api: transport.Client, jobs: list[dict[str, Any]], size: int, shapes: list[int],
         threads: int) -> dict[str, Any]:
    """Jobs until their pods number `size`, their sizes taken from `shapes` in turn (parallelism =
    completions), and the Job controller left to make their pods, as in the upstream batch load
    test: nothing races it, so no surplus to drain. Timed until the pods hold."""
    first = len(jobs)
    have = sum(j["spec"]["parallelism"] for j in jobs)
    sizes: list[int] = []
    while have + sum(sizes) < size:
        sizes.append(shapes[(first + len(sizes)) % len(shapes)])

    def job(item: tuple[int, int]) -> dict[str, Any]:
        i, pods = item
        made = apiserver.job_manifest(NAMESPACE, f"job-{i:05d}", backoff_limit=1_000_000)
        made["spec"].update(parallelism=pods, completions=pods)
        return apiserver.create(api, apiserver.JOBS, made)

    began = time.monotonic()
    jobs.extend(parallel(job, list(enumerate(sizes, start=first)), threads))
    wanted = have + sum(sizes)
    last, steady, count = -1, 0, 0
    while time.monotonic() - began < 3600:
        count = _count(api)
        steady = steady + 1 if count == last else 0
        if count >= wanted or steady >= 30:   # every pod made, or the Job controller stalled
            break
        last = count
        time.sleep(2)
    created = time.monotonic() - began
    print(f"{size}: {len(sizes)} Jobs, {count} pods of {wanted} after {created:.0f}s "
          f"({(count - have) / created:.0f}/s)", file=sys.stderr)
    return {"jobs": len(jobs), "created": count - have, "create_s": created,
            "create_rate": (count - have) / created, "held": count}


def start(env: dict[str, str], work: Path, api: transport.Client,
          row: dict[str, Any]) -> dict[str, Any]:
    """A fresh controller: start to ready, peak and settled RSS, its caches' bytes."""
    began = time.monotonic()
    controller = bench_controller.Controller(env, work)
    apiserver.wait_for("the controller ready", lambda: "readyz check passed" in controller.get("/readyz"),
                       900)
    sync_s = time.monotonic() - began
    apiserver.wait_for("the controller caught up", lambda: _caught_up(api, controller), 900)
    catch_up_s = time.monotonic() - began - sync_s
    time.sleep(5)
    status = _status(controller.process.pid)
    return {"controller": controller, "sync_s": sync_s, "catch_up_s": catch_up_s,
            "rss_peak": status["VmHWM"],
            "rss_settled": status["VmRSS"],
            "store_pods": _sum(controller, 'jobrules_controller_store_objects{resource="pods'),
            "store_objects": controller.metric("jobrules_controller_store_objects"),
            "store_mib": controller.metric("jobrules_controller_store_bytes") / 2**20}


def _caught_up(api: transport.Client, controller: Any) -> bool:
    """Every Job has our verdict, and nothing waits in the controller's queue."""
    jobs = api.list(apiserver.JOBS.path(NAMESPACE))["items"]
    return (all(bench_controller._verdict(j) is not None for j in jobs)
            and controller.metric("workqueue_depth") == 0)


def _sum(controller: Any, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in controller.get("/metrics").splitlines()
               if line.startswith(prefix))


def _status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of `pid`, MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def _histogram(controller: Any, name: str) -> dict[float, float]:
    out: dict[float, float] = {}
    for line in controller.get("/metrics").splitlines():
        if line.startswith(name + "_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(bound)] = float(line.rsplit(" ", 1)[1])
    return out


def _bucket_pct(before: dict[float, float], after: dict[float, float], pct: float) -> float:
    """The upper bound of the bucket that holds the pct-th percentile of what was added."""
    delta = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    total = delta[-1][1] if delta else 0.0
    for bound, count in delta:
        if total and count >= pct / 100 * total:
            return bound
    return float("nan")


def _audit_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _job_controller_writes(path: Path, skip: int) -> dict[str, int]:
    """The Job controller's writes logged after line `skip`: to Jobs, and pod deletions."""
    out = {"jobs": 0, "pod_deletes": 0}
    with open(path, "rb") as f:
        for i, line in enumerate(f):
            if i < skip:
                continue
            entry = json.loads(line)
            if entry.get("stage") != "ResponseComplete":
                continue
            if (entry.get("user") or {}).get("username") != JOB_CONTROLLER:
                continue
            ref = entry.get("objectRef") or {}
            if ref.get("namespace") != NAMESPACE:
                continue
            if ref.get("resource") == "jobs":
                out["jobs"] += 1
            elif ref.get("resource") == "pods" and entry.get("verb") == "delete":
                out["pod_deletes"] += 1
    return out


def drive(api: transport.Client, plane: Any, controller: Any, jobs: list[dict[str, Any]],
          rate: float, seconds: float, threads: int, hot: float = 0.0) -> dict[str, Any]:
    count = int(rate * seconds)
    pods = _live_pods(api)
    owner = "batch.kubernetes.io/job-name"
    # `hot`: that share of the events goes to the Job with most pods, each a pod of it reported
    # Running again (new start times: a change the controller reads, a reconcile of the whole
    # Job), spread evenly through the stream; that Job's verdict is not timed.
    sizes = collections.Counter(p["metadata"]["labels"][owner] for p in pods)
    hot_name = max(sizes, key=lambda n: (sizes[n], n)) if hot > 0 else None
    hot_pods = [p for p in pods if p["metadata"]["labels"][owner] == hot_name]
    hot_count = int(count * hot)
    count -= hot_count
    before_names = {p["metadata"]["name"] for p in pods}
    pending: dict[str, list[dict[str, Any]]] = {}
    for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if (p.get("status") or {}).get("phase", "Pending") == "Pending" \
                and p["metadata"]["labels"][owner] != hot_name:
            pending.setdefault(p["metadata"]["labels"][owner], []).append(p)
    # Jobs with a verdict still pending come first, so that each round's first event is new.
    names = sorted(pending, key=lambda n: (n not in {j["metadata"]["name"] for j in jobs}, n))
    plan: list[tuple[str, dict[str, Any], str]] = []   # (job, pod, what)
    fresh = {n for n in names if all((p.get("status") or {}).get("phase", "Pending") == "Pending"
                                     for p in pods if p["metadata"]["labels"].get(
                                         "batch.kubernetes.io/job-name") == n)}
    round_ = 0
    while len(plan) < count and any(pending.values()):
        for name in names:
            if len(plan) >= count:
                break
            if pending[name]:
                what = ("running" if round_ == 0 else
                        ("running", "succeeded", "failed")[round_ % 3])
                plan.append((name, pending[name].pop(0), what))
        round_ += 1
    firsts = {name for name, _, what in plan[:len(names)] if name in fresh and what == "running"}
    if hot_count:   # the hot events spread evenly among the others
        total, cold = len(plan) + hot_count, iter(plan)
        plan = [(str(hot_name), hot_pods[i % len(hot_pods)], "hot")
                if (i + 1) * hot_count // total > i * hot_count // total else next(cold)
                for i in range(total)]
    t0: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()
    version = next(api.pages(apiserver.JOBS.path(NAMESPACE), limit=1))["metadata"]["resourceVersion"]

    def mark(obj: dict[str, Any]) -> None:
        name = obj["metadata"].get("name")
        if name in firsts and name not in seen and bench_controller._verdict(obj) == "Running":
            seen[name] = time.monotonic()

    watcher = threading.Thread(target=bench_controller.follow_jobs, daemon=True, args=(
        api, version, stop, mark, [("allowWatchBookmarks", "true")]))
    watcher.start()
    time.sleep(1)
    audit0 = _audit_lines(plane.audit_log)
    requests0 = controller.metric("jobrules_controller_api_requests_total")
    hist0 = _histogram(controller, "jobrules_controller_verdict_latency_seconds")
    everyone = {name: cluster.processes_using(plane.root, (name,)) for name in PROCESSES}
    everyone.update({"controller": [controller.process.pid], "this bench": [os.getpid()]})
    by_process0, busy0 = cpu_by_process(everyone), machine_busy()
    cpu0 = controller.cpu()
    done_at: list[float] = []
    began = time.monotonic()

    def send(i: int) -> None:
        time.sleep(max(0.0, began + i / rate - time.monotonic()))
        name, pod, what = plan[i]
        if what in ("running", "hot"):
            apiserver.report_running(api, pod)
        elif what == "succeeded":
            apiserver.report_succeeded(api, pod)
        else:
            apiserver.report_failed(api, pod, exit_code=1)
        if name in firsts and what == "running":
            t0.setdefault(name, time.monotonic())
        done_at.append(time.monotonic())

    parallel(send, list(range(len(plan))), threads)
    sent_s = max(done_at) - began
    apiserver.wait_for("every first verdict", lambda: len(seen) >= len(firsts), 300)
    # What the machine did for the stream: each process's CPU from its start until every first
    # verdict was seen (the events sent by then too).
    first_round_s = max(seen.values()) - began
    by_process = {name: round(used - by_process0[name], 1)
                  for name, used in cpu_by_process(everyone).items()}
    busy = machine_busy() - busy0
    busy_s = time.monotonic() - began
    time.sleep(5)   # the Job controller's syncs (each Job at most once a second) and ours
    stop.set()
    requests = controller.metric("jobrules_controller_api_requests_total") - requests0
    diagnosis = [line for line in controller.get("/metrics").splitlines()
                 if line.startswith(("jobrules_controller_reconcile_total",
                                     "jobrules_controller_reconcile_duration_seconds_sum",
                                     "jobrules_controller_api_request_duration_seconds_sum",
                                     "jobrules_controller_api_request_duration_seconds_count",
                                     "jobrules_controller_verdict_latency_seconds_bucket",
                                     "jobrules_controller_api_requests_total",
                                     "workqueue_retries", "workqueue_queue_duration_seconds_sum",
                                     "workqueue_queue_duration_seconds_count",
                                     "workqueue_work_duration_seconds_sum", "workqueue_adds"))]
    (Path(plane.root) / f"metrics-{len(pods)}.txt").write_text("\n".join(diagnosis))
    print("\n".join(diagnosis), file=sys.stderr)
    hist = _histogram(controller, "jobrules_controller_verdict_latency_seconds")
    cpu = controller.cpu() - cpu0
    logged = _job_controller_writes(plane.audit_log, audit0)
    after = _pods(api)
    made = sum(1 for p in after if p["metadata"]["name"] not in before_names)
    finished = {pod["metadata"]["name"] for _, pod, what in plan if what != "running"}
    unfinalized = sum(1 for p in after if p["metadata"]["name"] in finished
                      and TRACKING not in (p["metadata"].get("finalizers") or []))
    latencies = sorted(seen[n] - t0[n] for n in firsts)
    job_controller = logged["jobs"] + logged["pod_deletes"] + made + unfinalized
    return {"events": len(plan), "sent_rate": len(plan) / sent_s, "verdicts": len(firsts),
            "p50": bench_controller._pct(latencies, 50), "p99": bench_controller._pct(latencies, 99),
            "hist_p50": _bucket_pct(hist0, hist, 50), "hist_p99": _bucket_pct(hist0, hist, 99),
            "ours_per_event": requests / len(plan), "cpu_per_1000": cpu / len(plan) * 1000,
            "jc_per_event": job_controller / len(plan),
            "jc_parts": {"job writes": logged["jobs"], "pod deletes": logged["pod_deletes"],
                         "pods created": made, "finalizers removed": unfinalized},
            "hot": hot, "hot_job": f"{hot_name} ({sizes[hot_name]} pods)" if hot_name else None,
            "first_round_s": first_round_s, "window_s": busy_s, "window_cpu": by_process,
            "window_busy": busy / (busy_s * (os.cpu_count() or 1))}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| pods held | Jobs | create rate | initial sync, then caught up | RSS peak / settled "
        "| cache (projected) "
        "| events sent | verdict p50 / p99 (histogram) | requests per pod event: ours / Job controller "
        "| CPU per 1,000 events |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        hot = f" ({r['hot']:.0%} to {r['hot_job']})" if r.get("hot") else ""
        lines.append(
            f"| {r['held']:,} | {r['jobs']:,} | {r['create_rate']:.0f}/s ({r['create_s']:.0f} s) "
            f"| {r['sync_s']:.1f} s, {r['catch_up_s']:.1f} s "
            f"| {r['rss_peak']:.0f} / {r['rss_settled']:.0f} MiB "
            f"| {r['store_mib']:.1f} MiB ({r['store_pods']:,.0f} pods) "
            f"| {r['events']:,} at {r['sent_rate']:.0f}/s{hot} "
            f"| {r['p50']:.3f} / {r['p99']:.3f} s ({r['verdicts']} verdicts; <= {r['hist_p50']} / "
            f"<= {r['hist_p99']} s) "
            f"| {r['ours_per_event']:.2f} / {r['jc_per_event']:.2f} "
            f"| {r['cpu_per_1000']:.2f} s |")
    parts = "; ".join(f"{r['held']:,}: " + ", ".join(f"{k} {v}" for k, v in r["jc_parts"].items())
                      for r in rows)
    window = "; ".join(
        f"{r['held']:,}: {r['window_s']:.1f} s (the last first verdict at "
        f"{r['first_round_s']:.1f} s), the machine {r['window_busy']:.0%} busy, CPU s "
        + ", ".join(f"{k} {v}" for k, v in r["window_cpu"].items()) for r in rows)
    return ("\n".join(lines) + f"\n\nJob controller's requests, by kind: {parts}"
            f"\n\nThe stream, until every first verdict was seen: {window}")


def misses(r: dict[str, Any]) -> list[str]:
    out = []
    scale = "" if r["held"] >= TARGET_PODS else f" (at {r['held']:,} pods, not {TARGET_PODS:,})"
    if r["rss_peak"] > RSS_LIMIT_MIB:
        out.append(f"RSS peak {r['rss_peak']:.0f} MiB > {RSS_LIMIT_MIB:.0f}{scale}")
    if r["sync_s"] >= SYNC_LIMIT_S:
        out.append(f"initial sync {r['sync_s']:.1f} s >= {SYNC_LIMIT_S:.0f}{scale}")
    if r["p99"] > P99_LIMIT_S:
        out.append(f"verdict p99 {r['p99']:.3f} s > {P99_LIMIT_S}{scale}")
    if r["sent_rate"] < 0.95 * P99_AT_RATE:   # a p99 met at a slower stream is not the target's
        out.append(f"verdict p99 measured at {r['sent_rate']:.0f} events/s, not "
                   f"{P99_AT_RATE:.0f}")
    if r["ours_per_event"] > r["jc_per_event"]:
        out.append(f"requests per pod event {r['ours_per_event']:.2f} > the Job controller's "
                   f"{r['jc_per_event']:.2f}")
    return out


if __name__ == "__main__":
    sys.exit(main())
