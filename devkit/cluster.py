"""A real, local Kubernetes control plane for tests and demos.

Runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 with
throw-away credentials, then installs the CRDs in ``devkit/crds``. KWOK plays the kubelet of a few
fake nodes: pods that tolerate their taint are scheduled onto them and moved through their
lifecycle by the stages in ``devkit/stages``, as each pod's annotations choose. The Kubeflow
training operator runs TFJobs, PyTorchJobs and MPIJobs. Pods that stay off the nodes stay
unscheduled, and tests report their lifecycle through the ``pods/status`` subresource, as
Kubernetes' own Job integration tests do. Neither the runtime nor the compiler imports this
module: it is tooling around the product, run from the repository's root::

    python -m devkit.cluster up     # start detached; prints ``export KUBECONFIG=...`` on stdout
    python -m devkit.cluster up --nodes 5 --no-training-operator
    python -m devkit.cluster up --kueue     # with Kueue queueing Jobs, PyTorchJobs and TFJobs
    python -m devkit.cluster env    # print the export line of the running control plane
    python -m devkit.cluster down   # stop it and remove every file it wrote
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import dataclasses
import datetime
import functools
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devkit import crds

if TYPE_CHECKING:   # imported where used: `down` and `env` need no Kubernetes client
    from runtime.controller import kube

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "tools" / "k8s" / "build.sh"
CRDS = crds.FOLDER
BINARY_NAMES = ("etcd", "kube-apiserver", "kube-controller-manager")
# Every process a plane may run, in the order they are stopped: the API server's clients all at
# once, then kube-apiserver, then etcd.
STOP_TIERS = (("training-operator", "kueue", "kwok", "kube-scheduler", "kube-controller-manager"),
              ("kube-apiserver",), ("etcd",))
PROCESS_NAMES = tuple(name for tier in STOP_TIERS for name in tier)
# Controllers a batch-job test needs; the rest would only burn the two cores we have.
CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    "replicaset-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)
# How many KWOK nodes a plane gets unless told (`up --nodes N`, start(nodes=N)).
DEFAULT_NODES = 2
FIELD_MANAGER = "jobrules-cluster"
ROOT_PREFIX = "jobrules-cluster-"
# A root directory younger than this may belong to a launcher that has not spawned etcd yet.
STALE_AFTER_SECONDS = 60.0

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The control plane could not be found, started or reached; the message says what to do."""


# ---------------------------------------------------------------------------------------------
# Binaries


@dataclasses.dataclass(frozen=True, slots=True)
class Binaries:
    """Where the executables are. Only etcd and kube-apiserver are required (envtest has no
    more); without a part, what needs it does not run."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path | None
    kube_scheduler: Path | None = None
    kwok: Path | None = None
    training_operator: Path | None = None
    kueue: Path | None = None   # found only for a plane that asks for Kueue (start(kueue=True))


def find_binaries() -> Binaries:
    """Binaries from ``KUBEBUILDER_ASSETS``, else ``JOBRULES_K8S_BIN``, else a (cached) build;
    KWOK and the training operator from ``JOBRULES_KWOK_BIN`` and
    ``JOBRULES_TRAINING_OPERATOR_BIN``, else their (cached) builds."""
    if assets := os.environ.get("KUBEBUILDER_ASSETS"):
        folder = Path(assets)
        kcm = folder / "kube-controller-manager"
        found = _is_executable(kcm)
        if not found:
            print(
                f"warning: kube-controller-manager is missing from KUBEBUILDER_ASSETS={folder} "
                "(envtest ships only etcd and kube-apiserver): no Job pods, no garbage collection, "
                "no default ServiceAccounts. Unset KUBEBUILDER_ASSETS to build the full set "
                "with tools/k8s/build.sh.",
                file=sys.stderr,
            )
        print("warning: with KUBEBUILDER_ASSETS there is no kube-scheduler, KWOK or training "
              "operator: pods are never scheduled nor run.", file=sys.stderr)
        return Binaries(_executable(folder / "etcd"), _executable(folder / "kube-apiserver"),
                        kcm if found else None)
    own = os.environ.get("JOBRULES_K8S_BIN")
    folder = Path(own) if own else build_binaries()
    etcd, apiserver, controller_manager = (_executable(folder / name) for name in BINARY_NAMES)
    return Binaries(etcd, apiserver, controller_manager, *_world_binaries(folder))


def find_kubectl() -> Path:
    """kubectl next to the control-plane binaries (envtest ships one), else built into the cache."""
    for folder in (os.environ.get("KUBEBUILDER_ASSETS"), os.environ.get("JOBRULES_K8S_BIN")):
        if folder and _is_executable(Path(folder) / "kubectl"):
            return Path(folder) / "kubectl"
    return _executable(build_binaries("kubectl") / "kubectl")


def build_binaries(*extra: str) -> Path:
    """Run tools/k8s/build.sh (a no-op when its cache is filled) and return the binaries' folder;
    `extra` names more kubernetes commands to build there (``kubectl``)."""
    if not BUILD_SCRIPT.is_file():
        raise ClusterError(
            "no control-plane binaries: set JOBRULES_K8S_BIN or KUBEBUILDER_ASSETS "
            f"(the build script {BUILD_SCRIPT} is not there to build them)"
        )
    print(f"using {BUILD_SCRIPT} (a first build takes a while) ...", file=sys.stderr)
    done = subprocess.run(["bash", str(BUILD_SCRIPT), *extra], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise ClusterError(f"{BUILD_SCRIPT} failed with exit code {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1])


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _executable(path: Path) -> Path:
    if not _is_executable(path):
        raise ClusterError(f"{path.name} not found or not executable at {path}")
    return path


def crds_dir() -> Path:
    """The CRD folder (devkit.crds.folder), a ClusterError when JOBRULES_CRDS is no folder."""
    try:
        return crds.folder()
    except NotADirectoryError as err:
        raise ClusterError(str(err)) from None


crd_files = crds.files
crd_manifests = crds.manifests


# ---------------------------------------------------------------------------------------------
# Throw-away PKI


@dataclasses.dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A one-off CA; tests reuse it to give their own TLS servers (webhooks) a trusted cert."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            _certificate_builder(subject, subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self, common_name: str, *, organization: str | None = None, hosts: Sequence[str] = ()
    ) -> tuple[bytes, bytes]:
        """A (certificate PEM, key PEM) pair: a server cert when ``hosts`` are given, else a client cert."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        builder = _certificate_builder(x509.Name(attributes), self.cert.subject, key.public_key())
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
            usage = ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = ExtendedKeyUsageOID.CLIENT_AUTH
        cert = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False).sign(
            self.key, hashes.SHA256()
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _certificate_builder(
    subject: x509.Name, issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey, days: int = 30,
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes | str) -> None:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(0o600)


def _kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> str:
    """A self-contained kubeconfig (certificates inline), so it keeps working when copied."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    cluster = {"server": server, "certificate-authority-data": b64(ca_pem)}
    credentials = {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "jobrules", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "jobrules", "context": {"cluster": "jobrules", "user": user}}],
        "current-context": "jobrules",
    }, sort_keys=False)


# ---------------------------------------------------------------------------------------------
# The running control plane


@dataclasses.dataclass(frozen=True, slots=True)
class ControlPlane:
    """A started control plane. Everything it wrote lives under ``root``; stop() removes it."""

    root: Path
    server: str
    version: str
    controller_manager: bool
    scheduler: bool = False
    kwok: bool = False
    nodes: tuple[str, ...] = ()  # the KWOK nodes it made
    training_operator: bool = False
    kueue: bool = False

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def audited_kubeconfig(self) -> Path:
        """A cluster admin's kubeconfig whose every request the audit log records (the user
        `jobrules:audited`, verb and object, reads included): what a test proves a client
        only read with."""
        return self.root / "audited.kubeconfig"

    @property
    def controller_kubeconfig(self) -> Path:
        """A cluster admin's kubeconfig as the user `jobrules:controller` (CONTROLLER): what a
        test or a bench runs our controller with, so that the audit log tells its writes from
        the test's own and from the operators' (each of which has a user of its own)."""
        return self.root / "controller.kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines): pod deletions and evictions with their
        answers, writes to the job kinds and to Volcano Commands with their bodies."""
        return self.root / "audit.log"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    def client(self) -> kube.Client:
        """A ``runtime.controller.kube.Client`` authenticated as cluster admin."""
        return _admin_client(self.server, self.pki)

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "root": str(self.root)}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> ControlPlane:
        data = json.loads(text)
        return cls(**{**data, "root": Path(data["root"]), "nodes": tuple(data.get("nodes", ()))})


def _admin_client(server: str, pki: Path) -> kube.Client:
    from kubernetes import client

    from runtime.controller import kube

    config = client.Configuration()
    config.host = server
    config.ssl_ca_cert = str(pki / "ca.crt")
    config.cert_file = str(pki / "admin.crt")
    config.key_file = str(pki / "admin.key")
    return kube.Client(config, name=FIELD_MANAGER)   # not taken for the controller in audit logs


_ATTACHED: dict[Path, ControlPlane] = {}
_ATTACHED_LOCK = threading.Lock()
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the launcher dies, even by SIGKILL."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start(*, crds: bool = True, detached: bool = False, binaries: Binaries | None = None,
          timeout: float = 90.0, nodes: int = DEFAULT_NODES, scheduler: bool = True,
          training_operator: bool = True, profiling: bool = False,
          priority_and_fairness: bool = False, kueue: bool = False,
          feature_gates: Sequence[str] = (), controller_manager_qps: int = 100,
          max_requests_inflight: int | None = None) -> ControlPlane:
    """Start etcd, kube-apiserver and, when present, kube-controller-manager, kube-scheduler
    (``scheduler``), KWOK with ``nodes`` fake nodes (with the scheduler) and (``training_operator``,
    with the CRDs) the training operator; wait until usable.

    Usable means: ``/readyz`` is ok, every CRD from crds_dir() is Established and answers a
    LIST, the controller manager has created the ``default`` ServiceAccount, the scheduler is
    ready, every node is Ready and schedulable, and the training operator's webhook serves.
    ``profiling`` serves the API server's Go profiles (``/debug/pprof/``), for benchmarks;
    ``priority_and_fairness`` turns API Priority and Fairness on (off by default: it costs CPU
    and one client on loopback gains nothing from it), for tests of the FlowSchemas. ``kueue``
    (with the CRDs) runs Kueue too, its CRDs installed and its webhooks registered (off by
    default: its webhooks sit in front of every Job's creation). ``feature_gates`` are passed to
    kube-apiserver (``ShardedListAndWatch=true``). ``controller_manager_qps`` is
    kube-controller-manager's request rate to the API server (burst twice that): the scale bench
    raises it so that the Job controller makes 100,000 pods at the API server's pace.
    ``max_requests_inflight`` lowers kube-apiserver's seats (``--max-requests-inflight``, and half
    as many mutating), for tests of a server busier than its clients: fewer seats fill sooner. An
    attached control plane dies with this process (atexit, and the kernel's parent-death signal as
    a last resort); a detached one runs until stop() or ``down``.
    """
    if nodes < 0:
        raise ClusterError(f"nodes must be 0 or more, not {nodes}")
    binaries = binaries or find_binaries()
    if not scheduler:
        binaries = dataclasses.replace(binaries, kube_scheduler=None)
    if kueue and crds and binaries.kueue is None:
        binaries = dataclasses.replace(binaries, kueue=_tool("kueue", "JOBRULES_KUEUE_BIN"))
    crd_folder = crds_dir() if crds else None
    sweep_stale()
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=_scratch_parent()))
    try:
        plane = _launch(root, binaries, crd_folder, detached, time.monotonic() + timeout,
                        nodes, training_operator and crds, profiling, priority_and_fairness,
                        kueue and crds, tuple(feature_gates), controller_manager_qps,
                        max_requests_inflight)
    except BaseException:
        _terminate(root)
        _release_rotator_check()
        _release_kueue_metrics_certificate()
        shutil.rmtree(root, ignore_errors=True)
        raise
    if not detached:
        with _ATTACHED_LOCK:
            if not _ATTACHED:
                atexit.register(_stop_attached)
            _ATTACHED[root] = plane
    return plane


def stop(plane: ControlPlane) -> None:
    """Terminate the control plane's processes (SIGTERM, then SIGKILL) and delete its files."""
    with _ATTACHED_LOCK:
        _ATTACHED.pop(plane.root, None)
    _terminate(plane.root)
    _release_rotator_check()
    _release_kueue_metrics_certificate()
    shutil.rmtree(plane.root, ignore_errors=True)


@contextlib.contextmanager
def running(**options: Any) -> Iterator[ControlPlane]:
    """A control plane for the length of a with-block. SIGTERM becomes KeyboardInterrupt meanwhile,
    so a CI runner stopping the tests still tears it down."""
    restore = None
    if threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        restore = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        plane = start(**options)
        try:
            yield plane
        finally:
            stop(plane)
    finally:
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)


def _stop_attached() -> None:
    for plane in list(_ATTACHED.values()):
        stop(plane)


def _launch(root: Path, binaries: Binaries, crd_folder: Path | None, detached: bool,
            deadline: float, nodes: int, training_operator: bool, profiling: bool,
            priority_and_fairness: bool = False, kueue: bool = False,
            feature_gates: tuple[str, ...] = (), controller_manager_qps: int = 100,
            max_requests_inflight: int | None = None) -> ControlPlane:
    pki = root / "pki"
    pki.mkdir()
    etcd_client, etcd_peer, secure_port = free_ports(3)
    server = f"https://127.0.0.1:{secure_port}"

    ca = CertificateAuthority.create("jobrules-local-ca")
    _write(pki / "ca.crt", ca.cert_pem)
    serving = ca.issue(
        "kube-apiserver",
        hosts=["127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default",
               "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"],
    )
    _write(pki / "apiserver.crt", serving[0])
    _write(pki / "apiserver.key", serving[1])
    admin_cert, admin_key = ca.issue("admin", organization="system:masters")
    _write(pki / "admin.crt", admin_cert)
    _write(pki / "admin.key", admin_key)
    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write(pki / "sa.key", _key_pem(sa_key))
    _write(pki / "sa.pub", sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    _write(root / "kubeconfig", _kubeconfig(server, ca.cert_pem, admin_cert, admin_key, "admin"))
    audited_cert, audited_key = ca.issue(AUDITED, organization="system:masters")
    _write(root / "audited.kubeconfig",
           _kubeconfig(server, ca.cert_pem, audited_cert, audited_key, AUDITED))
    ours_cert, ours_key = ca.issue(CONTROLLER, organization="system:masters")
    _write(root / "controller.kubeconfig",
           _kubeconfig(server, ca.cert_pem, ours_cert, ours_key, CONTROLLER))

    processes: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with open(root / f"{name}.log", "wb") as log:
            processes[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, preexec_fn=None if detached else _die_with_parent,
            )

    peer = f"http://127.0.0.1:{etcd_peer}"
    spawn("etcd", [
        str(binaries.etcd), "--name=default", f"--data-dir={root / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
        f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync", "--log-level=warn",
    ])
    # kube-apiserver retries etcd itself, so both start at once.
    spawn("kube-apiserver", [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{etcd_client}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={secure_port}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--authorization-mode=Node,RBAC",
        # One client, loopback only: fairness queues and endpoint upkeep cost CPU and buy nothing
        # (unless a test asks for the queues).
        f"--enable-priority-and-fairness={str(priority_and_fairness).lower()}",
        "--endpoint-reconciler-type=none",
        # Old revisions go within seconds, not five minutes: tests of watches that expire
        # (410 Gone, then a relist) need not wait.
        "--etcd-compaction-interval=10s",
        # What the tests count writes and deletions by (ControlPlane.audit_log).
        f"--audit-policy-file={_write_audit_policy(root)}", f"--audit-log-path={root / 'audit.log'}",
        "--audit-log-format=json", "--audit-log-maxsize=0",
        f"--profiling={str(profiling).lower()}",
        *([f"--feature-gates={','.join(feature_gates)}"] if feature_gates else []),
        *([f"--max-requests-inflight={max_requests_inflight}",
           f"--max-mutating-requests-inflight={max(1, max_requests_inflight // 2)}"]
          if max_requests_inflight else []),
    ])

    def wait(what: str, ready: Callable[[], T]) -> T:
        return _wait(what, ready, root, processes, deadline)

    with contextlib.closing(_admin_client(server, pki)) as api, ThreadPoolExecutor(1) as pool:
        # Parsing 3 MB of CRDs takes a second: do it while the API server boots.
        crds = pool.submit(crd_manifests, crd_folder) if crd_folder else None
        wait("kube-apiserver /readyz", lambda: _get(api, "/readyz") == b"ok")
        version = api.get("/version")["gitVersion"]
        # The scheduler and KWOK need only the API: they boot while the CRDs are installed.
        started = _start_scheduler(ca, root, server, binaries, spawn).merge(
            _start_kwok(api, ca, root, server, binaries, nodes, spawn))
        # One at a time: concurrent CRD creations make the API server slower, not faster.
        installed = [_apply_crd(api, crd) for crd in (crds.result() if crds else [])]
        for name in installed:
            wait(f"CRD {name} Established", functools.partial(_established, api, name))
        if training_operator:
            started = started.merge(
                _start_training_operator(api, ca, root, server, binaries, installed, spawn))
        if kueue:
            started = started.merge(_start_kueue(api, ca, root, server, binaries, spawn, wait))
        if binaries.kube_controller_manager:
            kubeconfig = _component_kubeconfig(root, ca, server, "system:kube-controller-manager")
            # Started once the CRDs are served, so the garbage collector's first discovery sees them.
            spawn("kube-controller-manager", [
                str(binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                "--use-service-account-credentials=true",
                "--leader-elect=false", "--secure-port=0",
                f"--kube-api-qps={controller_manager_qps}",
                f"--kube-api-burst={2 * controller_manager_qps}",
            ])
            wait("kube-controller-manager to create ServiceAccount default/default",
                 lambda: _get(api, "/api/v1/namespaces/default/serviceaccounts/default") is not None)
        for what, ready in started.checks:
            wait(what, ready)
    return ControlPlane(root, server, version, binaries.kube_controller_manager is not None,
                        started.scheduler, started.kwok, started.nodes, started.training_operator,
                        started.kueue)


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together so they cannot repeat)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _scratch_parent() -> str:
    """tmpfs when there is one: etcd then never touches a disk."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _wait(what: str, ready: Callable[[], T], root: Path,
          processes: dict[str, subprocess.Popen[bytes]], deadline: float) -> T:
    """Poll ``ready`` until truthy; fail fast, quoting its log, if a process exits meanwhile."""
    while True:
        for name, process in processes.items():
            if process.poll() is not None:
                raise ClusterError(f"{name} exited with code {process.returncode} while waiting "
                                   f"for {what}\n{_log_tail(root / f'{name}.log')}")
        if result := ready():
            return result
        if time.monotonic() > deadline:
            tails = "\n".join(_log_tail(root / f"{name}.log") for name in processes)
            raise ClusterError(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.1)


def _log_tail(log: Path, lines: int = 20) -> str:
    text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
    return "\n".join([f"--- last lines of {log} ---", *text])


def _get(api: kube.Client, path: str) -> Any:
    """A GET's answer, or None while the server is not there yet or answers with an error."""
    from runtime.controller import kube

    try:
        return api.request("GET", path, accept="*/*", timeout=5)
    except kube.KubeError:
        return None


def _apply_crd(api: kube.Client, crd: dict[str, Any]) -> str:
    """Server-side apply one CRD (no size limit from a last-applied annotation); return its name."""
    name = crd["metadata"]["name"]
    api.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crd,
              field_manager=FIELD_MANAGER, force=True)
    return name


def _established(api: kube.Client, name: str) -> bool:
    """Established, and listed: right after, a LIST may still get 429 "storage is
    (re)initializing" while the API server's watch cache of the new resource fills."""
    crd = _get(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
    conditions = (crd.get("status") or {}).get("conditions") or []
    if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
        return False
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served"))
    return _get(api, f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1") is not None


# ---------------------------------------------------------------------------------------------
# The world: kube-scheduler, KWOK nodes and the Kubeflow training operator

STAGES = REPO / "devkit" / "stages"
TOOLS_BUILD_SCRIPT = REPO / "tools" / "build.sh"
# KWOK runs the pods of the nodes that carry this annotation. Their taint keeps off every pod that
# does not tolerate it, so the tests that report pod status by hand keep their pods to themselves.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
# The pod annotations that choose a pod's way through the stages (docs/cluster.md says how).
OUTCOME = "kwok.jobrules.dev/outcome"
OUTCOMES = ("succeed", "run", "oom-killed", "exit-code", "evicted", "init-failed")
AFTER = "kwok.jobrules.dev/after"
EXIT_CODE = "kwok.jobrules.dev/exit-code"
CONTAINER = "kwok.jobrules.dev/container"
# Addresses KWOK writes into node and pod status. Nothing serves them; loopback ranges, so that a
# client that dials one (the API server for `kubectl logs`) never leaves the machine.
NODE_IP = "127.0.0.1"
POD_CIDR = "127.244.0.0/16"
TRAINING_OPERATOR_NAMESPACE = "kubeflow"
# The kinds the training operator runs here (their CRDs are in devkit/crds).
TRAINING_OPERATOR_SCHEMES = ("tfjob", "pytorchjob", "mpijob")
# For each kind that v1.8.1 validates by webhook, the smallest object it admits.
_WEBHOOK_PROBES = {
    scheme: {"apiVersion": "kubeflow.org/v1", "kind": kind,
             "metadata": {"name": "probe", "namespace": TRAINING_OPERATOR_NAMESPACE},
             "spec": {field: {replica: {"replicas": 1, "template": {"spec": {
                 "containers": [{"name": container, "image": "busybox:1.36"}]}}}}}}
    for scheme, kind, field, replica, container in (
        ("tfjob", "TFJob", "tfReplicaSpecs", "Worker", "tensorflow"),
        ("pytorchjob", "PyTorchJob", "pytorchReplicaSpecs", "Master", "pytorch"))
}
# The operator's cert rotator reads its certificates from this Secret, checks that this
# ValidatingWebhookConfiguration carries their CA, and waits for a file at a path it hard-codes
# (where a Deployment would mount the Secret). The webhook server reads the certificates from
# $TMPDIR/k8s-webhook-server/serving-certs instead, so each operator gets its own TMPDIR.
_ROTATOR_SECRET = "training-operator-webhook-cert"
TRAINING_OPERATOR_WEBHOOKS = "validator.training-operator.kubeflow.org"
_ROTATOR_CHECKS = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")

_Spawn = Callable[..., None]
_Check = tuple[str, Callable[[], Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Started:
    """What the world's parts started, and what to wait for before the plane is usable."""

    scheduler: bool = False
    kwok: bool = False
    nodes: tuple[str, ...] = ()
    training_operator: bool = False
    kueue: bool = False
    checks: tuple[_Check, ...] = ()

    def merge(self, other: _Started) -> _Started:
        return _Started(self.scheduler or other.scheduler, self.kwok or other.kwok,
                        self.nodes + other.nodes,
                        self.training_operator or other.training_operator,
                        self.kueue or other.kueue, self.checks + other.checks)


def kwok_node(name: str) -> dict[str, Any]:
    """A Node whose pods KWOK runs; the plane makes ``nodes`` of them, a test may add more."""
    key, value = KWOK_NODE_ANNOTATION
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {key: value},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "spec": {"taints": [dict(KWOK_TAINT)]},
    }


def _world_binaries(k8s: Path) -> tuple[Path | None, Path | None, Path | None]:
    """kube-scheduler from the Kubernetes folder; KWOK and the training operator from their own."""
    scheduler = k8s / "kube-scheduler"
    if not _is_executable(scheduler):
        print(f"warning: no kube-scheduler in {k8s} (bash tools/k8s/build.sh builds it): pods are "
              "never scheduled, no KWOK nodes.", file=sys.stderr)
    return (scheduler if _is_executable(scheduler) else None,
            _tool("kwok", "JOBRULES_KWOK_BIN"),
            _tool("training-operator", "JOBRULES_TRAINING_OPERATOR_BIN"))


def _tool(name: str, variable: str) -> Path | None:
    """``name`` from the folder in ``variable``, else from tools/build.sh (a no-op once cached);
    None, with a warning, when it cannot be built."""
    if folder := os.environ.get(variable):
        return _executable(Path(folder) / name)
    done = subprocess.run(["bash", str(TOOLS_BUILD_SCRIPT), name], stdout=subprocess.PIPE,
                          text=True)
    if done.returncode != 0:
        print(f"warning: bash {TOOLS_BUILD_SCRIPT} {name} failed with exit code "
              f"{done.returncode}: no {name}.", file=sys.stderr)
        return None
    return _executable(Path(done.stdout.strip().splitlines()[-1]) / name)


def _component_kubeconfig(root: Path, ca: CertificateAuthority, server: str, user: str,
                          organization: str | None = None) -> Path:
    """A kubeconfig for one component, with its own client certificate."""
    cert, key = ca.issue(user, organization=organization)
    path = root / f"{user.removeprefix('system:')}.kubeconfig"
    _write(path, _kubeconfig(server, ca.cert_pem, cert, key, user))
    return path


def _start_scheduler(ca: CertificateAuthority, root: Path, server: str, binaries: Binaries,
                     spawn: _Spawn) -> _Started:
    """kube-scheduler, serving /readyz on loopback with a certificate from the plane's CA."""
    if binaries.kube_scheduler is None:
        return _Started()
    [port] = free_ports(1)
    cert, key = ca.issue("kube-scheduler", hosts=["127.0.0.1"])
    _write(root / "pki" / "kube-scheduler.crt", cert)
    _write(root / "pki" / "kube-scheduler.key", key)
    spawn("kube-scheduler", [
        str(binaries.kube_scheduler),
        f"--kubeconfig={_component_kubeconfig(root, ca, server, 'system:kube-scheduler')}",
        "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--tls-cert-file={root / 'pki' / 'kube-scheduler.crt'}",
        f"--tls-private-key-file={root / 'pki' / 'kube-scheduler.key'}",
    ])
    trusted = ssl.create_default_context(cadata=ca.cert_pem.decode())
    return _Started(scheduler=True, checks=(("kube-scheduler /readyz", functools.partial(
        _http_ok, f"https://127.0.0.1:{port}/readyz", trusted)),))


def _start_kwok(api: kube.Client, ca: CertificateAuthority, root: Path, server: str,
                binaries: Binaries, nodes: int, spawn: _Spawn) -> _Started:
    """KWOK with the stages of STAGES, and its ``nodes``. It needs the scheduler to place pods on
    them, and the controller manager's node lifecycle controller to lift the not-ready taint the
    API server gives every new node."""
    if None in (binaries.kwok, binaries.kube_scheduler, binaries.kube_controller_manager):
        return _Started()
    key_name, value = KWOK_NODE_ANNOTATION
    spawn("kwok", [
        str(binaries.kwok),
        f"--kubeconfig={_component_kubeconfig(root, ca, server, 'kwok', 'system:masters')}",
        *(f"--config={stage}" for stage in sorted(STAGES.glob("*.yaml"))),
        f"--manage-nodes-with-annotation-selector={key_name}={value}",
        f"--node-ip={NODE_IP}", f"--cidr={POD_CIDR}",
        # Renewed leases keep the node lifecycle controller from marking the nodes unreachable.
        "--node-lease-duration-seconds=40",
    ])
    names = tuple(f"kwok-node-{index}" for index in range(nodes))
    for name in names:
        api.create("/api/v1/nodes", kwok_node(name))
    return _Started(kwok=True, nodes=names, checks=(
        (f"KWOK nodes {', '.join(names)} Ready and schedulable",
         functools.partial(_nodes_ready, api, names)),))


def _nodes_ready(api: kube.Client, names: Sequence[str]) -> bool:
    listed = _get(api, "/api/v1/nodes?labelSelector=type%3Dkwok") or {"items": []}
    usable = {
        node["metadata"]["name"] for node in listed["items"]
        if any(c["type"] == "Ready" and c["status"] == "True"
               for c in (node.get("status") or {}).get("conditions") or [])
        and not any(t["key"] == "node.kubernetes.io/not-ready"
                    for t in node["spec"].get("taints") or [])
    }
    return usable >= set(names)


def _start_training_operator(api: kube.Client, ca: CertificateAuthority, root: Path, server: str,
                             binaries: Binaries, crds: Sequence[str], spawn: _Spawn) -> _Started:
    """The training operator for the kinds in TRAINING_OPERATOR_SCHEMES, its webhook registered
    with the API server and its certificates made here (see _webhook_pki)."""
    if binaries.training_operator is None:
        return _Started()
    missing = [s for s in TRAINING_OPERATOR_SCHEMES if f"{s}s.kubeflow.org" not in crds]
    if missing:
        print(f"warning: the training operator is not started: no CRD for {', '.join(missing)}",
              file=sys.stderr)
        return _Started()
    webhook_port, probe_port = free_ports(2)
    home = root / "training-operator"
    served = home / "k8s-webhook-server" / "serving-certs"
    served.mkdir(parents=True)
    ca_pem, ca_key, cert, key = _webhook_pki()
    _write(served / "tls.crt", cert)
    _write(served / "tls.key", key)
    namespace = TRAINING_OPERATOR_NAMESPACE
    api.create("/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    api.create(f"/api/v1/namespaces/{namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": _ROTATOR_SECRET, "namespace": namespace},
        "data": {name: base64.b64encode(data).decode() for name, data in (
            ("ca.crt", ca_pem), ("ca.key", ca_key), ("tls.crt", cert), ("tls.key", key))},
    })
    api.create("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
               _training_operator_webhooks(webhook_port, ca_pem))
    _hold_rotator_check()
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("KUBECONFIG", "KUBEFLOW_NAMESPACE")}
    spawn("training-operator", [
        str(binaries.training_operator),
        f"--kubeconfig={_component_kubeconfig(root, ca, server, 'training-operator', 'system:masters')}",
        *(f"--enable-scheme={scheme}" for scheme in TRAINING_OPERATOR_SCHEMES),
        f"--webhook-server-port={webhook_port}",
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        "--metrics-bind-address=0", "--zap-log-level=info",
    ], env=environment | {"TMPDIR": str(home), "MY_POD_NAMESPACE": namespace})
    # Ready first, then each webhook path: the operator registers them one by one once ready.
    return _Started(training_operator=True, checks=(
        ("the training operator's /readyz (certificates accepted, webhook serving)",
         functools.partial(_http_ok, f"http://127.0.0.1:{probe_port}/readyz")),
        *((f"the training operator's {scheme} webhook to admit a dry run",
           functools.partial(_admits, api, probe)) for scheme, probe in _WEBHOOK_PROBES.items()),
    ))


def _admits(api: kube.Client, probe: dict[str, Any]) -> bool:
    """Whether the API server, webhooks included, admits creating ``probe`` (dry run)."""
    return _admits_at(
        api, f"/apis/kubeflow.org/v1/namespaces/{TRAINING_OPERATOR_NAMESPACE}/{probe['kind'].lower()}s",
        probe)


def _webhook_pki() -> tuple[bytes, bytes, bytes, bytes]:
    """(CA cert, CA key, server cert, server key) PEMs that the operator's cert rotator keeps
    rather than replaces: an RSA CA with a PKCS #1 key and its own name as a DNS name, a server
    certificate for the operator's Service name (which it checks) and for 127.0.0.1 (which the
    API server dials), both valid past the rotator's 90-day look-ahead."""
    days = 400
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "training-operator-ca")])
    ca_cert = (
        _certificate_builder(ca_name, ca_name, ca_key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=True,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("training-operator-ca")]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    service = f"training-operator.{TRAINING_OPERATOR_NAMESPACE}.svc"
    cert = (
        _certificate_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service)]),
                             ca_name, key.public_key(), days)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName(service), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pkcs1 = ca_key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())
    return (ca_cert.public_bytes(serialization.Encoding.PEM), pkcs1,
            cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _training_operator_webhooks(port: int, ca_pem: bytes) -> dict[str, Any]:
    """The operator's ValidatingWebhookConfiguration, reaching it on loopback (there is no
    Service here) for the kinds it validates."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": TRAINING_OPERATOR_WEBHOOKS},
        "webhooks": [{
            "name": f"validator.{scheme}.training-operator.kubeflow.org",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/validate-kubeflow-org-v1-{scheme}",
                             "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": [f"{scheme}s"]}],
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        } for scheme in _WEBHOOK_PROBES],
    }


def _hold_rotator_check() -> None:
    """Make the file the cert rotator waits for (empty: it only checks that it exists)."""
    if not _ROTATOR_CHECKS.exists():
        _ROTATOR_CHECKS.parent.mkdir(parents=True, exist_ok=True)
        _ROTATOR_CHECKS.touch()


def _release_rotator_check() -> None:
    """Remove that empty file once no training operator runs on this machine any more."""
    with contextlib.suppress(OSError):
        if _ROTATOR_CHECKS.stat().st_size == 0 and not _pids(["training-operator"]):
            _ROTATOR_CHECKS.unlink()
            _ROTATOR_CHECKS.parent.rmdir()
            _ROTATOR_CHECKS.parent.parent.rmdir()


# ---------------------------------------------------------------------------------------------
# Kueue: holds jobs suspended until a ClusterQueue admits them

KUEUE_NAMESPACE = "kueue-system"
KUEUE_TOOL = REPO / "tools" / "kueue"
# What Kueue queues here: the kinds of this world it has an integration for.
KUEUE_FRAMEWORKS = ("batch/job", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob")
# The resources whose Kueue webhooks are registered: those of the integrations above and Kueue's
# own. Its other webhooks (pods, Deployments, Ray...) are left out: a webhook with nothing behind
# it would refuse every such object (their failurePolicy is Fail).
_KUEUE_WEBHOOK_RESOURCES = frozenset({"jobs", "pytorchjobs", "tfjobs", "clusterqueues", "cohorts",
                                      "resourceflavors", "workloads"})
# With its own certificate management off, Kueue loads a certificate for its metrics endpoint from
# this folder, which it hard-codes (where a Deployment would mount a Secret), even with the
# endpoint off. Any valid pair will do: one is made there while some Kueue runs on this machine.
_KUEUE_METRICS_CERTIFICATE = Path("/etc/kueue/metrics/certs")
_OURS = ".made-by-devkit"   # only a folder holding this is removed again
_WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration":
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration":
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}


def kueue_module() -> Path:
    """The folder of the Kueue module ``tools/kueue`` pins, in Go's module cache (fetched if
    absent): its CRDs and webhook configurations are installed from there, not kept here."""
    done = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue"],
                          cwd=KUEUE_TOOL, env=os.environ | {"GOFLAGS": "-mod=mod"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    folder = Path(done.stdout.strip())
    if done.returncode != 0 or not (folder / "config" / "components").is_dir():
        raise ClusterError(f"cannot find the Kueue module of {KUEUE_TOOL}/go.mod in Go's module "
                           f"cache: {done.stderr.strip() or 'no config/components in ' + str(folder)}")
    return folder


def _start_kueue(api: kube.Client, ca: CertificateAuthority, root: Path, server: str,
                 binaries: Binaries, spawn: _Spawn, wait: Callable[[str, Callable[[], Any]], Any],
                 ) -> _Started:
    """Kueue for KUEUE_FRAMEWORKS: its CRDs, its webhooks reached on loopback with a certificate
    from the plane's CA (its own certificate management is off), no leader election, no metrics,
    no visibility server (it would need a port of its own and an APIService)."""
    if binaries.kueue is None:
        return _Started()
    module = kueue_module()
    names = [_apply_crd(api, crd)
             for crd in crds.manifests(module / "config" / "components" / "crd" / "bases")]
    for name in names:
        wait(f"CRD {name} Established", functools.partial(_established, api, name))
    webhook_port, probe_port = free_ports(2)
    home = root / "kueue"
    served = home / "serving-certs"
    served.mkdir(parents=True)
    cert, key = ca.issue("kueue-webhook", hosts=["127.0.0.1"])
    _write(served / "tls.crt", cert)
    _write(served / "tls.key", key)
    _hold_kueue_metrics_certificate(ca)
    api.create("/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
    for configuration in _kueue_webhooks(module, webhook_port, ca.cert_pem):
        api.create(_WEBHOOK_CONFIGURATIONS[configuration["kind"]], configuration)
    config = home / "config.yaml"
    _write(config, yaml.safe_dump({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(served)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
    }, sort_keys=False))
    spawn("kueue", [
        str(binaries.kueue), f"--config={config}",
        f"--kubeconfig={_component_kubeconfig(root, ca, server, 'kueue', 'system:masters')}",
        "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info",
    ])
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "probe"}}
    return _Started(kueue=True, checks=(
        ("Kueue's /readyz", functools.partial(_http_ok, f"http://127.0.0.1:{probe_port}/readyz")),
        ("Kueue's webhooks to admit a dry run", functools.partial(
            _admits_at, api, "/apis/kueue.x-k8s.io/v1beta2/resourceflavors", flavor)),
    ))


def _hold_kueue_metrics_certificate(ca: CertificateAuthority) -> None:
    """Put a certificate where Kueue loads its metrics certificate from, unless one is there."""
    folder = _KUEUE_METRICS_CERTIFICATE
    if not (folder / "tls.crt").exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ClusterError(f"Kueue needs a certificate in {folder} (its path is fixed) and "
                               f"this user cannot make one: {error}") from None
        cert, key = ca.issue("kueue-metrics", hosts=["127.0.0.1"])
        _write(folder / "tls.key", key)
        _write(folder / "tls.crt", cert)
        _write(folder / _OURS, b"")


def _release_kueue_metrics_certificate() -> None:
    """Remove that certificate, and the folders made for it, once no Kueue runs here any more."""
    folder = _KUEUE_METRICS_CERTIFICATE
    with contextlib.suppress(OSError):
        if (folder / _OURS).exists() and not _pids(["kueue"]):
            for name in ("tls.crt", "tls.key", _OURS):
                (folder / name).unlink(missing_ok=True)
            for parent in (folder, folder.parent, folder.parent.parent):
                parent.rmdir()


def _kueue_webhooks(module: Path, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's own webhook configurations, reduced to _KUEUE_WEBHOOK_RESOURCES and pointed at
    127.0.0.1:``port`` (there is no Service here)."""
    out = []
    text = (module / "config" / "components" / "webhook" / "manifests.yaml").read_text()
    for configuration in yaml.safe_load_all(text):
        if not configuration:
            continue
        webhooks = []
        for webhook in configuration["webhooks"]:
            if not {r for rule in webhook["rules"] for r in rule["resources"]} <= (
                    _KUEUE_WEBHOOK_RESOURCES | {"workloads/status"}):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhooks.append({**webhook, "clientConfig": {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_pem).decode()}})
        kind = configuration["kind"]
        out.append({"apiVersion": configuration["apiVersion"], "kind": kind,
                    "metadata": {"name": f"kueue-{kind.removesuffix('Configuration').lower()}"},
                    "webhooks": webhooks})
    return out


def _admits_at(api: kube.Client, path: str, probe: dict[str, Any]) -> bool:
    """Whether the API server, webhooks included, admits creating ``probe`` at ``path`` (dry
    run)."""
    from runtime.controller import kube

    try:
        api.request("POST", path, probe, query=[("dryRun", "All")], timeout=5)
    except kube.KubeError:
        return False
    return True


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """GET ``url`` on loopback (never through a proxy): True on 200."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(url, timeout=2) as answer:
            return answer.status == 200
    except (OSError, http.client.HTTPException):  # urllib.error.URLError is an OSError
        return False


# ---------------------------------------------------------------------------------------------
# Finding and ending processes


# Every request of the audited user (AUDITED: who sends what, reads too), pods' deletions and
# evictions with the answer (the deleted pod's uid), writes to the kinds the rules describe, to
# Volcano's Commands and to Kueue's Workloads with their bodies; nothing else.
AUDITED = "jobrules:audited"
# Our controller's user (ControlPlane.controller_kubeconfig): its writes to the job kinds are
# logged like everyone's, and told apart by this name.
CONTROLLER = "jobrules:controller"
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["%s"]
- level: RequestResponse
  verbs: [delete, deletecollection]
  resources: [{group: "", resources: [pods]}]
- level: RequestResponse
  verbs: [create]
  resources: [{group: "", resources: [pods/eviction]}]
- level: Request
  verbs: [create, update, patch, delete]
  resources:
  - {group: batch}
  - {group: batch.volcano.sh}
  - {group: bus.volcano.sh}
  - {group: kubeflow.org}
  - {group: jobset.x-k8s.io}
  - {group: argoproj.io}
  - {group: tekton.dev}
  - {group: kueue.x-k8s.io, resources: [workloads]}
- level: None
""" % AUDITED


def _write_audit_policy(root: Path) -> Path:
    path = root / "audit-policy.yaml"
    path.write_text(AUDIT_POLICY)
    return path


def restart(plane: ControlPlane, name: str, *, timeout: float = 60.0) -> None:
    """Stop one process of the plane (SIGTERM, then SIGKILL) and start it again with the same
    command line and environment (the training operator's TMPDIR), as a node reboot or a
    crash-looping static pod would; etcd's data is kept. Returns once the API server is ready
    again."""
    [pid] = processes_using(plane.root, [name])
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    env = dict(entry.decode().split("=", 1)
               for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in entry)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10.0
    while processes_using(plane.root, [name]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for left in processes_using(plane.root, [name]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    with open(plane.root / f"{name}.log", "ab") as log:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         env=env, start_new_session=True, preexec_fn=_die_with_parent)
    with plane.client() as api:
        _wait(f"{name} to come back", lambda: _get(api, "/readyz") == b"ok", plane.root, {},
              time.monotonic() + timeout)


def processes_using(root: Path, names: Sequence[str] = PROCESS_NAMES) -> list[int]:
    """Pids of control-plane processes (of ``names``) whose command line points into ``root``.

    Found from /proc rather than from remembered pids, so nothing escapes when the launcher
    crashed or a pid was reused.
    """
    return _pids(names, os.fsencode(f"{root}/"))


def _pids(names: Sequence[str], marker: bytes | None = None) -> list[int]:
    """Pids of processes running one of ``names``, with ``marker`` in an argument if given."""
    wanted = {os.fsencode(name) for name in names}
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) in wanted and (
                marker is None or any(marker in arg for arg in argv[1:])):
            pids.append(int(entry.name))
    return pids


def _terminate(root: Path, grace: float = 5.0) -> None:
    """Stop the processes of ``root``: SIGTERM, then SIGKILL after ``grace`` seconds.

    Clients go first (STOP_TIERS): kube-apiserver drains its clients' requests (up to a minute)
    before it exits, and it needs etcd to exit cleanly. Returns once the processes have left the process
    table: our children are reaped here; a detached plane's belong to init, which reaps them.
    """
    ended: list[int] = []
    for names in STOP_TIERS:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            for pid in processes_using(root, names):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                ended.append(pid)
            deadline = time.monotonic() + wait
            while processes_using(root, names) and time.monotonic() < deadline:
                time.sleep(0.02)
    deadline = time.monotonic() + 5.0
    while ended and time.monotonic() < deadline:
        for pid in ended:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        ended = [pid for pid in ended if os.path.exists(f"/proc/{pid}")]
        time.sleep(0.02)


def sweep_stale(parent: str | None = None) -> list[Path]:
    """Remove root folders that no process uses any more (left by a launcher killed by SIGKILL)."""
    removed = []
    for path in Path(parent or _scratch_parent()).glob(f"{ROOT_PREFIX}*"):
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > STALE_AFTER_SECONDS and not processes_using(path):
                shutil.rmtree(path)
                removed.append(path)
    return removed


# ---------------------------------------------------------------------------------------------
# Command line


def state_file() -> Path:
    """Where ``up`` records the detached control plane (``JOBRULES_CLUSTER_STATE`` overrides the folder)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("JOBRULES_CLUSTER_STATE") or cache / "jobrules" / "cluster") / "state.json"


def _recorded() -> ControlPlane | None:
    path = state_file()
    return ControlPlane.from_json(path.read_text()) if path.exists() else None


def _export_line(plane: ControlPlane) -> str:
    return f"export KUBECONFIG={plane.kubeconfig}"


def _up(args: argparse.Namespace) -> int:
    if (plane := _recorded()) is not None:
        if processes_using(plane.root):
            print(f"already running at {plane.server}", file=sys.stderr)
            print(_export_line(plane))
            return 0
        _down(args)
    began = time.monotonic()
    plane = start(crds=not args.no_crds, detached=True, nodes=args.nodes,
                  training_operator=not args.no_training_operator, kueue=args.kueue)
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(plane.to_json())
    print(f"Kubernetes {plane.version} ready at {plane.server} in {time.monotonic() - began:.1f}s"
          f" ({_parts(plane)})\n"
          f"kubeconfig: {plane.kubeconfig}\nlogs: {plane.root}/*.log\n"
          "stop with: python -m devkit.cluster down", file=sys.stderr)
    print(_export_line(plane))
    return 0


def _parts(plane: ControlPlane) -> str:
    return ", ".join(filter(None, [
        "controller manager" if plane.controller_manager else "no controller manager",
        "scheduler" if plane.scheduler else "no scheduler",
        f"KWOK with {len(plane.nodes)} node(s)" if plane.kwok else "no KWOK",
        "training operator" if plane.training_operator else "no training operator",
        "Kueue" if plane.kueue else "",
    ]))


def _down(args: argparse.Namespace) -> int:
    if (plane := _recorded()) is None:
        print("no control plane is recorded; nothing to stop", file=sys.stderr)
        return 0
    stop(plane)
    state_file().unlink(missing_ok=True)
    print(f"stopped the control plane at {plane.server} and removed {plane.root}", file=sys.stderr)
    return 0


def _env(args: argparse.Namespace) -> int:
    plane = _recorded()
    if plane is None or not processes_using(plane.root):
        print("no control plane is running; start one with: python -m devkit.cluster up",
              file=sys.stderr)
        return 1
    print(_export_line(plane))
    return 0


_DESCRIPTION = ("Run a local Kubernetes control plane (etcd, kube-apiserver, "
                "kube-controller-manager, kube-scheduler) with the CRDs in devkit/crds, KWOK nodes "
                "and the Kubeflow training operator. Exit codes: 0 done, 1 `env` found nothing "
                "running, 2 the control plane could not be found, started or stopped.")


def _add_actions(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start a detached control plane and print its export line")
    up.add_argument("--no-crds", action="store_true",
                    help="skip installing the CRDs (and so the training operator)")
    up.add_argument("--nodes", type=_node_count, default=DEFAULT_NODES, metavar="N",
                    help=f"how many KWOK nodes to create (default {DEFAULT_NODES})")
    up.add_argument("--no-training-operator", action="store_true",
                    help="do not run the Kubeflow training operator")
    up.add_argument("--kueue", action="store_true",
                    help="run Kueue too (built from tools/kueue the first time)")
    up.set_defaults(func=_run, action_func=_up)
    actions.add_parser("down", help="stop it and remove its files").set_defaults(
        func=_run, action_func=_down)
    actions.add_parser("env", help="print the KUBECONFIG export line").set_defaults(
        func=_run, action_func=_env)


def _node_count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of nodes (0 or more), not {text!r}")
    return int(text)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.action_func(args)
    except ClusterError as error:
        print(f"devkit.cluster: {error}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m devkit.cluster ACTION``."""
    parser = argparse.ArgumentParser(prog="python -m devkit.cluster", description=_DESCRIPTION)
    _add_actions(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
