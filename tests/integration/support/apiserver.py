"""Raw-dict Kubernetes helpers for integration tests, and a stand-in for the kubelet.

Objects are plain camelCase dicts, sent and read through the controller's transport
(`runtime.controller.kube`). Pods made with ``on_kwok`` are scheduled onto KWOK nodes and run
there, their outcome chosen by annotations. For the pods that stay off those nodes, the
``report_*`` functions write what a kubelet would write to ``pods/status``: the phase, the
conditions and the container states of a pod that runs, succeeds, fails, is OOM-killed, evicted,
or whose init container fails.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from devkit import cluster
from runtime.controller.kube import ApiError, Client, NotFound, Resource

T = TypeVar("T")
Obj = dict[str, Any]


NAMESPACES = Resource("v1", "namespaces")
NODES = Resource("v1", "nodes")
SERVICE_ACCOUNTS = Resource("v1", "serviceaccounts")
PODS = Resource("v1", "pods")
JOBS = Resource("batch/v1", "jobs")
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations")
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io/v1",
                               "validatingwebhookconfigurations")
VOLCANO_JOBS = Resource("batch.volcano.sh/v1alpha1", "jobs")
TF_JOBS = Resource("kubeflow.org/v1", "tfjobs")
PYTORCH_JOBS = Resource("kubeflow.org/v1", "pytorchjobs")
WORKFLOWS = Resource("argoproj.io/v1alpha1", "workflows")


def get(api: Client, path: str) -> Obj:
    return api.get(path)


def create(api: Client, resource: Resource, body: Obj, **query: str) -> Obj:
    """Create ``body`` in its ``metadata.namespace`` (if any); ``query`` e.g. ``dryRun="All"``."""
    namespace = body["metadata"].get("namespace")
    return api.create(resource.path(namespace), body, query=list(query.items()))


def delete(api: Client, path: str) -> None:
    """Delete, in the background; an object already gone is fine."""
    with contextlib.suppress(NotFound):
        api.delete(path, propagation_policy="Background")


def exists(api: Client, path: str) -> bool:
    try:
        get(api, path)
    except NotFound:
        return False
    return True


def list_pods(api: Client, namespace: str, selector: str = "") -> list[Obj]:
    query = [("labelSelector", selector)] if selector else []
    items: list[Obj] = api.list(PODS.path(namespace), query=query)["items"]
    return items


def wait_for(what: str, check: Callable[[], T], timeout: float = 30.0) -> T:
    """Poll ``check`` (every 0.1 s) until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)
    return result


def wait_for_pods(api: Client, namespace: str, selector: str, count: int = 1,
                  timeout: float = 30.0) -> list[Obj]:
    return wait_for(
        f"{count} pod(s) matching {selector!r} in {namespace}",
        lambda: pods if len(pods := list_pods(api, namespace, selector)) >= count else None,
        timeout,
    )


def condition(obj: Obj, type_: str) -> Obj | None:
    """The status condition of that type, if the object has one."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), None)


def wait_for_crd(api: Client, name: str, timeout: float = 60.0) -> None:
    """A CRD Established and its resource served: `Established` comes before the API server
    serves the resource, and a create right after it can still be answered 404."""
    def served() -> bool:
        crd = get(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        if not condition(crd, "Established"):
            return False
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served"))
        try:   # 429 while the API server's cache of the new resource fills
            return exists(api, f"/apis/{spec['group']}/{version}/{spec['names']['plural']}")
        except ApiError:
            return False
    wait_for(f"the CRD {name} served", served, timeout)


def wait_for_condition(api: Client, path: str, type_: str, timeout: float = 30.0) -> Obj:
    """Wait until the object at ``path`` has condition ``type_`` with status True; return it."""
    def check() -> Obj | None:
        found = condition(get(api, path), type_)
        return found if found and found["status"] == "True" else None

    return wait_for(f"condition {type_}=True on {path}", check, timeout)


def watch_for(api: Client, resource: Resource, obj: Obj, what: str,
              check: Callable[[Obj], bool], timeout: float = 60.0) -> Obj:
    """The first version of ``obj`` after the one given for which ``check`` holds, from a watch:
    it sees every write, also one that the next overwrites before a poll could read it (an
    operator's Restarting that its Running replaces at once)."""
    meta = obj["metadata"]
    query = [("fieldSelector", f"metadata.name={meta['name']}"),
             ("resourceVersion", meta["resourceVersion"]), ("timeoutSeconds", str(int(timeout)))]
    for event in api.watch(resource.path(meta.get("namespace")), query, read_timeout=timeout + 10):
        if event["type"] in ("ADDED", "MODIFIED") and check(event["object"]):
            return event["object"]   # the watch's connection closes with its generator
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def owner_reference(owner: Obj) -> Obj:
    """An ownerReference to ``owner`` as its controller would set it."""
    return {
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": True, "blockOwnerDeletion": True,
    }


def pod_manifest(namespace: str, name: str, *, containers: Sequence[str] = ("main",),
                 init_containers: Sequence[str] = (), restart_policy: str = "Never",
                 owner: Obj | None = None, labels: dict[str, str] | None = None) -> Obj:
    """A minimal pod; containers run ``busybox`` (never pulled: no kubelet here)."""
    metadata: Obj = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    spec: Obj = {
        "restartPolicy": restart_policy,
        "containers": [{"name": c, "image": "busybox:1.36"} for c in containers],
    }
    if init_containers:
        spec["initContainers"] = [{"name": c, "image": "busybox:1.36"} for c in init_containers]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def job_manifest(namespace: str, name: str, *, backoff_limit: int = 3,
                 pod_failure_rules: list[Obj] | None = None) -> Obj:
    """A batch/v1 Job of one pod (init container ``setup``, container ``main``, never restarted)."""
    pod = pod_manifest(namespace, name, init_containers=["setup"])
    spec: Obj = {"backoffLimit": backoff_limit, "template": {"spec": pod["spec"]}}
    if pod_failure_rules:
        spec["podFailurePolicy"] = {"rules": pod_failure_rules}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def on_kwok(template: Obj, **stages: Any) -> Obj:
    """A copy of ``template`` (a pod, or a pod template) that tolerates the KWOK nodes' taint, so
    it is scheduled and run there, its way through the stages chosen as ``stage_annotations``
    says."""
    metadata = template.get("metadata") or {}
    spec = template["spec"]
    return template | {
        "metadata": metadata | {"annotations": (metadata.get("annotations") or {})
                                | stage_annotations(**stages)},
        "spec": spec | {"tolerations": [*(spec.get("tolerations") or []), cluster.KWOK_TOLERATION]},
    }


def stage_annotations(*, outcome: str | None = None, after: str | None = None,
                      exit_code: int | None = None, container: str | None = None) -> dict[str, str]:
    """The annotations that choose a KWOK pod's stages (docs/cluster.md): ``outcome`` (one of
    cluster.OUTCOMES; default succeed), ``after`` (a Go duration such as "2s"), ``exit_code``, and
    the ``container`` that fails."""
    if outcome is not None and outcome not in cluster.OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; expected one of {cluster.OUTCOMES}")
    chosen = {cluster.OUTCOME: outcome, cluster.AFTER: after, cluster.CONTAINER: container,
              cluster.EXIT_CODE: None if exit_code is None else str(exit_code)}
    return {key: value for key, value in chosen.items() if value is not None}


def change_outcome(api: Client, pod: Obj, **stages: Any) -> Obj:
    """Choose anew how a KWOK pod ends (``stage_annotations``' arguments), say when a test wants
    a running pod to fail: KWOK applies the stage the new annotations select."""
    meta = pod["metadata"]
    return api.merge_patch(PODS.path(meta["namespace"], meta["name"]),
                           {"metadata": {"annotations": stage_annotations(**stages)}})


def job_pods(api: Client, job: Obj, count: int = 1) -> list[Obj]:
    """Wait until the Job controller has created ``count`` pods for ``job``; return them."""
    meta = job["metadata"]
    return wait_for_pods(api, meta["namespace"], f"batch.kubernetes.io/job-name={meta['name']}",
                         count)


@contextlib.contextmanager
def gunicorn_tls(app: str, *, chdir: Path, workdir: Path) -> Iterator[tuple[str, bytes]]:
    """Serve the WSGI ``app`` ("module:variable") with gunicorn over TLS on loopback, as an
    admission webhook is served in production. Yields the base URL and the CA bundle (PEM) that
    trusts it; the key, certificate and log live in ``workdir``."""
    ca = cluster.CertificateAuthority.create("webhook-ca")
    cert, key = ca.issue("127.0.0.1", hosts=["127.0.0.1"])
    (workdir / "tls.crt").write_bytes(cert)
    (workdir / "tls.key").write_bytes(key)
    [port] = cluster.free_ports(1)
    log_path = workdir / "gunicorn.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "1",
             "--certfile", str(workdir / "tls.crt"), "--keyfile", str(workdir / "tls.key"),
             "--chdir", str(chdir), app],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        context = ssl.create_default_context(cadata=ca.cert_pem.decode())

        def serving() -> bool:
            assert server.poll() is None, f"gunicorn exited:\n{log_path.read_text()}"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    context.wrap_socket(sock, server_hostname="127.0.0.1").close()
            except OSError:
                return False
            return True

        wait_for("gunicorn to serve TLS", serving)
        yield f"https://127.0.0.1:{port}", ca.cert_pem
    finally:
        server.terminate()
        server.wait(10)


# ---------------------------------------------------------------------------------------------
# The kubelet's side: pod status


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _running(name: str, image: str, started: str) -> Obj:
    return {
        "name": name, "image": image, "imageID": f"docker.io/library/{image}@sha256:{'0' * 64}",
        "containerID": f"containerd://{uuid.uuid4().hex}", "ready": True, "started": True,
        "restartCount": 0, "state": {"running": {"startedAt": started}},
    }


def _terminated(name: str, image: str, started: str, exit_code: int, reason: str,
                message: str | None = None) -> Obj:
    terminated: Obj = {"exitCode": exit_code, "reason": reason, "startedAt": started,
                       "finishedAt": _now(), "containerID": f"containerd://{uuid.uuid4().hex}"}
    if message:
        terminated["message"] = message
    return {
        "name": name, "image": image, "imageID": f"docker.io/library/{image}@sha256:{'0' * 64}",
        "containerID": terminated["containerID"], "ready": False, "started": False,
        "restartCount": 0, "state": {"terminated": terminated},
    }


def _waiting(name: str, image: str, reason: str) -> Obj:
    return {"name": name, "image": image, "imageID": "", "ready": False, "started": False,
            "restartCount": 0, "state": {"waiting": {"reason": reason}}}


def _conditions(*, ready: bool, reason: str = "", initialized: bool = True) -> list[Obj]:
    now = _now()

    def item(type_: str, true: bool, why: str = "") -> Obj:
        found: Obj = {"type": type_, "status": str(true), "lastTransitionTime": now}
        if not true and why:
            found["reason"] = why
        return found

    return [item("PodScheduled", True),
            item("Initialized", initialized, "ContainersNotInitialized"),
            item("ContainersReady", ready, reason), item("Ready", ready, reason)]


def ready_conditions(ready: bool) -> list[Obj]:
    """A running pod's conditions as the kubelet writes them when its readiness flips."""
    return _conditions(ready=ready, reason="" if ready else "ContainersNotReady")


def set_status(api: Client, pod: Obj, status: Obj) -> Obj:
    """Merge ``status`` into the pod's status through ``pods/status``; return the stored pod."""
    meta = pod["metadata"]
    return api.merge_patch(PODS.path(meta["namespace"], meta["name"], "status"), {"status": status})


def _containers(pod: Obj, key: str = "containers") -> list[tuple[str, str]]:
    return [(c["name"], c["image"]) for c in pod["spec"].get(key, [])]


def _init_done(pod: Obj, started: str) -> list[Obj]:
    return [_terminated(n, i, started, 0, "Completed") for n, i in _containers(pod, "initContainers")]


def report_running(api: Client, pod: Obj) -> Obj:
    """All containers started and ready (init containers completed)."""
    started = _now()
    return set_status(api, pod, {
        "phase": "Running", "startTime": started, "conditions": _conditions(ready=True),
        "initContainerStatuses": _init_done(pod, started),
        "containerStatuses": [_running(n, i, started) for n, i in _containers(pod)],
    })


def report_succeeded(api: Client, pod: Obj) -> Obj:
    """Every container exited 0."""
    started = pod.get("status", {}).get("startTime") or _now()
    return set_status(api, pod, {
        "phase": "Succeeded", "startTime": started,
        "conditions": _conditions(ready=False, reason="PodCompleted"),
        "initContainerStatuses": _init_done(pod, started),
        "containerStatuses": [_terminated(n, i, started, 0, "Completed") for n, i in _containers(pod)],
    })


def report_failed(api: Client, pod: Obj, *, exit_code: int = 1, reason: str = "Error",
                  container: str | None = None, message: str | None = None) -> Obj:
    """``container`` (default: the first) terminated with ``exit_code``/``reason``; the others
    exited 0. The pod phase is Failed, as a kubelet reports it for ``restartPolicy: Never``."""
    started = pod.get("status", {}).get("startTime") or _now()
    names = _containers(pod)
    failing = container or names[0][0]
    statuses = [
        _terminated(n, i, started, exit_code, reason, message) if n == failing
        else _terminated(n, i, started, 0, "Completed")
        for n, i in names
    ]
    return set_status(api, pod, {
        "phase": "Failed", "startTime": started,
        "conditions": _conditions(ready=False, reason="PodFailed"),
        "initContainerStatuses": _init_done(pod, started), "containerStatuses": statuses,
    })


def report_oom_killed(api: Client, pod: Obj, *, container: str | None = None) -> Obj:
    """The kernel's OOM killer ended ``container``: reason OOMKilled, exit code 137."""
    return report_failed(api, pod, exit_code=137, reason="OOMKilled", container=container)


def report_oom_restarted(api: Client, pod: Obj, *, container: str | None = None) -> Obj:
    """The kernel's OOM killer ended ``container`` and the kubelet restarted it in place at
    once, as it does the first time (``restartPolicy: OnFailure``): the pod Running, the
    container running again with its last termination OOMKilled, exit code 137, one restart."""
    started = pod.get("status", {}).get("startTime") or _now()
    names = _containers(pod)
    killed = [n for n, _ in names].index(container or names[0][0])
    statuses = [_running(n, i, started) for n, i in names]
    last = _terminated(*names[killed], started, 137, "OOMKilled")
    statuses[killed] |= {"lastState": last["state"], "restartCount": 1}
    return set_status(api, pod, {"phase": "Running", "startTime": started,
                                 "conditions": _conditions(ready=True),
                                 "containerStatuses": statuses})


def report_evicted(api: Client, pod: Obj, *,
                   message: str = "The node was low on resource: memory.") -> Obj:
    """The kubelet evicted the pod under node pressure: phase Failed, reason Evicted, condition
    DisruptionTarget (reason TerminationByKubelet), containers killed with exit code 137."""
    started = pod.get("status", {}).get("startTime") or _now()
    conditions = _conditions(ready=False, reason="PodFailed")
    conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                       "message": message, "lastTransitionTime": _now()})
    return set_status(api, pod, {
        "phase": "Failed", "reason": "Evicted", "message": message, "startTime": started,
        "conditions": conditions, "initContainerStatuses": _init_done(pod, started),
        "containerStatuses": [_terminated(n, i, started, 137, "Error") for n, i in _containers(pod)],
    })


def report_init_failed(api: Client, pod: Obj, *, exit_code: int = 1, reason: str = "Error",
                       container: str | None = None) -> Obj:
    """Init container ``container`` (default: the first) failed; app containers never started.

    With ``restartPolicy: Never`` the pod is Failed; otherwise the kubelet keeps it Pending and
    retries the init container (CrashLoopBackOff).
    """
    started = pod.get("status", {}).get("startTime") or _now()
    names = _containers(pod, "initContainers")
    failing = [n for n, _ in names].index(container or names[0][0])
    gives_up = pod["spec"].get("restartPolicy", "Always") == "Never"
    failed = _terminated(*names[failing], started, exit_code, reason)
    if not gives_up:
        failed |= {"state": {"waiting": {"reason": "CrashLoopBackOff"}},
                   "lastState": failed["state"], "restartCount": 1}
    init_statuses = [
        *(_terminated(n, i, started, 0, "Completed") for n, i in names[:failing]),
        failed,
        *(_waiting(n, i, "PodInitializing") for n, i in names[failing + 1:]),
    ]
    return set_status(api, pod, {
        "phase": "Failed" if gives_up else "Pending", "startTime": started,
        "conditions": _conditions(ready=False, initialized=False, reason="ContainersNotReady"),
        "initContainerStatuses": init_statuses,
        "containerStatuses": [_waiting(n, i, "PodInitializing") for n, i in _containers(pod)],
    })
