"""A real, local Kubernetes control plane for tests and demos.

Runs etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 with throw-away credentials,
then installs the CRDs in ``devkit/crds``. There is no kubelet and no scheduler: pods stay unscheduled and
tests report their lifecycle through the ``pods/status`` subresource, as Kubernetes' own Job
integration tests do. Neither the runtime nor the compiler imports this module: it is tooling around the product, run
from the repository's root::

    python -m devkit.cluster up     # start detached; prints ``export KUBECONFIG=...`` on stdout
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
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:   # imported where used: `down` and `env` need no Kubernetes client
    from runtime.controller import kube

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "tools" / "k8s" / "build.sh"
CRDS = REPO / "devkit" / "crds"
BINARY_NAMES = ("etcd", "kube-apiserver", "kube-controller-manager")
# Controllers a batch-job test needs; the rest would only burn the two cores we have.
CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    "replicaset-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)
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
    """Where the control-plane executables are; the controller manager is optional (envtest)."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path | None


def find_binaries() -> Binaries:
    """Binaries from ``KUBEBUILDER_ASSETS``, else ``JOBRULES_K8S_BIN``, else a (cached) build."""
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
        return Binaries(_executable(folder / "etcd"), _executable(folder / "kube-apiserver"),
                        kcm if found else None)
    own = os.environ.get("JOBRULES_K8S_BIN")
    folder = Path(own) if own else build_binaries()
    etcd, apiserver, controller_manager = (_executable(folder / name) for name in BINARY_NAMES)
    return Binaries(etcd, apiserver, controller_manager)


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
    """The CRD folder: ``JOBRULES_CRDS`` (must exist), else the repository's ``devkit/crds``."""
    if explicit := os.environ.get("JOBRULES_CRDS"):
        if not Path(explicit).is_dir():
            raise ClusterError(f"JOBRULES_CRDS={explicit} is not a directory")
        return Path(explicit)
    return CRDS


def crd_files() -> list[Path]:
    """The CRD manifests the project tests against, sorted: for the cluster, tests and benches."""
    return sorted(crds_dir().glob("*.y*ml"))


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
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
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

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

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
        return cls(**{**data, "root": Path(data["root"])})


def _admin_client(server: str, pki: Path) -> kube.Client:
    from kubernetes import client

    from runtime.controller import kube

    config = client.Configuration()
    config.host = server
    config.ssl_ca_cert = str(pki / "ca.crt")
    config.cert_file = str(pki / "admin.crt")
    config.key_file = str(pki / "admin.key")
    return kube.Client(config)


_ATTACHED: dict[Path, ControlPlane] = {}
_ATTACHED_LOCK = threading.Lock()
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the launcher dies, even by SIGKILL."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start(*, crds: bool = True, detached: bool = False, binaries: Binaries | None = None,
          timeout: float = 90.0) -> ControlPlane:
    """Start etcd, kube-apiserver and (when present) kube-controller-manager; wait until usable.

    Usable means: ``/readyz`` is ok, every CRD from crds_dir() is Established and answers a
    LIST, and the controller manager has created the ``default`` ServiceAccount. An attached
    control plane dies with this process (atexit, and the kernel's parent-death signal as a last
    resort); a detached one runs until stop() or ``down``.
    """
    binaries = binaries or find_binaries()
    crd_folder = crds_dir() if crds else None
    sweep_stale()
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=_scratch_parent()))
    try:
        plane = _launch(root, binaries, crd_folder, detached, time.monotonic() + timeout)
    except BaseException:
        _terminate(root)
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
            deadline: float) -> ControlPlane:
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

    processes: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(name: str, argv: list[str]) -> None:
        with open(root / f"{name}.log", "wb") as log:
            processes[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
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
        # One client, loopback only: fairness queues and endpoint upkeep cost CPU and buy nothing.
        "--enable-priority-and-fairness=false",
        "--endpoint-reconciler-type=none",
        # Old revisions go within seconds, not five minutes: tests of watches that expire
        # (410 Gone, then a relist) need not wait.
        "--etcd-compaction-interval=10s",
        "--profiling=false",
    ])

    def wait(what: str, ready: Callable[[], T]) -> T:
        return _wait(what, ready, root, processes, deadline)

    with contextlib.closing(_admin_client(server, pki)) as api, ThreadPoolExecutor(1) as pool:
        # Parsing 3 MB of CRDs takes a second: do it while the API server boots.
        crds = pool.submit(crd_manifests, crd_folder) if crd_folder else None
        wait("kube-apiserver /readyz", lambda: _get(api, "/readyz") == b"ok")
        version = api.get("/version")["gitVersion"]
        # One at a time: concurrent CRD creations make the API server slower, not faster.
        for name in [_apply_crd(api, crd) for crd in (crds.result() if crds else [])]:
            wait(f"CRD {name} Established", functools.partial(_established, api, name))
        if binaries.kube_controller_manager:
            kcm_cert, kcm_key = ca.issue("system:kube-controller-manager")
            _write(root / "kube-controller-manager.kubeconfig", _kubeconfig(
                server, ca.cert_pem, kcm_cert, kcm_key, "system:kube-controller-manager"))
            # Started once the CRDs are served, so the garbage collector's first discovery sees them.
            spawn("kube-controller-manager", [
                str(binaries.kube_controller_manager),
                f"--kubeconfig={root / 'kube-controller-manager.kubeconfig'}",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                "--use-service-account-credentials=true",
                "--leader-elect=false", "--secure-port=0",
                "--kube-api-qps=100", "--kube-api-burst=200",
            ])
            wait("kube-controller-manager to create ServiceAccount default/default",
                 lambda: _get(api, "/api/v1/namespaces/default/serviceaccounts/default") is not None)
    return ControlPlane(root, server, version, binaries.kube_controller_manager is not None)


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


def crd_manifests(folder: Path) -> list[dict[str, Any]]:
    """The CRDs in ``folder``, as they are installed here.

    CRDs whose conversion webhook would point at a Service that does not exist here (Tekton) get
    ``strategy: None``: objects are then read and written in the version they are sent with.
    """
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 20x faster on 3 MB of CRDs
    crds = []
    for path in sorted(folder.glob("*.y*ml")):
        for crd in yaml.load_all(path.read_text(), Loader=loader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            if crd["spec"].get("conversion", {}).get("strategy") == "Webhook":
                crd["spec"]["conversion"] = {"strategy": "None"}
            crds.append(crd)
    return crds


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
# Finding and ending processes


def restart(plane: ControlPlane, name: str, *, timeout: float = 60.0) -> None:
    """Stop one process of the plane (SIGTERM, then SIGKILL) and start it again with the same
    command line, as a node reboot or a crash-looping static pod would; etcd's data is kept.
    Returns once the API server is ready again."""
    [pid] = processes_using(plane.root, [name])
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
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
                         start_new_session=True, preexec_fn=_die_with_parent)
    with plane.client() as api:
        _wait(f"{name} to come back", lambda: _get(api, "/readyz") == b"ok", plane.root, {},
              time.monotonic() + timeout)


def processes_using(root: Path, names: Sequence[str] = BINARY_NAMES) -> list[int]:
    """Pids of control-plane processes (of ``names``) whose command line points into ``root``.

    Found from /proc rather than from remembered pids, so nothing escapes when the launcher
    crashed or a pid was reused.
    """
    marker = os.fsencode(f"{root}/")
    wanted = {os.fsencode(name) for name in names}
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) in wanted and any(marker in arg for arg in argv[1:]):
            pids.append(int(entry.name))
    return pids


def _terminate(root: Path, grace: float = 5.0) -> None:
    """Stop the processes of ``root``: SIGTERM, then SIGKILL after ``grace`` seconds.

    Clients go first: kube-apiserver drains its clients' requests (up to a minute) before it
    exits, and it needs etcd to exit cleanly. Returns once the processes have left the process
    table: our children are reaped here; a detached plane's belong to init, which reaps them.
    """
    ended: list[int] = []
    for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            for pid in processes_using(root, [name]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                ended.append(pid)
            deadline = time.monotonic() + wait
            while processes_using(root, [name]) and time.monotonic() < deadline:
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
    plane = start(crds=not args.no_crds, detached=True)
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(plane.to_json())
    print(f"Kubernetes {plane.version} ready at {plane.server} in {time.monotonic() - began:.1f}s\n"
          f"kubeconfig: {plane.kubeconfig}\nlogs: {plane.root}/*.log\n"
          "stop with: python -m devkit.cluster down", file=sys.stderr)
    print(_export_line(plane))
    return 0


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
                "kube-controller-manager) with the CRDs in devkit/crds. Exit codes: 0 done, 1 `env` found "
                "nothing running, 2 the control plane could not be found, started or stopped.")


def _add_actions(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start a detached control plane and print its export line")
    up.add_argument("--no-crds", action="store_true", help="skip installing the CRDs")
    up.set_defaults(func=_run, action_func=_up)
    actions.add_parser("down", help="stop it and remove its files").set_defaults(
        func=_run, action_func=_down)
    actions.add_parser("env", help="print the KUBECONFIG export line").set_defaults(
        func=_run, action_func=_env)


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
