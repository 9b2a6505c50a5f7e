"""The mutator on plans compiled from real `.rules` (the shipped kinds + the Katib/Argo injections).

These are the two cases from the seed issue: Katib's metrics collector injected as a native
sidecar into the primary pods of TFJob and PyTorchJob only, and Argo pods where `main`, not the
executor's `wait` container, decides completion.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import jsonpatch
import pytest

from rulec import api
from runtime import mutator, plan
from runtime.mutator import inject

ROOT = Path(__file__).resolve().parents[4]

INJECTIONS = """\
inject "katib-metrics" into pods of tfjob, pytorchjob
        where label "katib.kubeflow.org/trial" exists and primary {
    annotate "sidecar.istio.io/inject" = "false"
    env "KATIB_TRIAL" = <<owner.metadata.name>> in primary
    volume "metrics" empty dir
    mount volume "metrics" at "/var/log/katib" in primary
    sidecar "metrics-collector" native {
        image "ghcr.io/kubeflow/katib/file-metrics-collector:v0.18.0"
        args  ["-t", <<owner.metadata.name>>, "-path", "/var/log/katib/metrics.log"]
        mount volume "metrics" at "/var/log/katib"
    }
    # The output goes to the log and stays on stdout, and the program keeps its exit status and
    # receives the signals: tee reads a FIFO, and the shell is replaced by the program.
    wrap primary with shell "mkfifo /tmp/out; tee -a /var/log/katib/metrics.log </tmp/out & exec {argv} >/tmp/out 2>&1"
}

inject "argo-collector" into pods of workflow where label "katib.kubeflow.org/trial" exists {
    volume "metrics" empty dir
    mount volume "metrics" at "/var/log/katib" in primary
    sidecar "metrics-collector" native {
        image "ghcr.io/kubeflow/katib/file-metrics-collector:v0.18.0"
        args  ["-t", <<owner.metadata.name>>]
        mount volume "metrics" at "/var/log/katib"
    }
    wait for containers ["main"]
}
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> plan.Plan:
    path = tmp_path_factory.mktemp("rules") / "katib.rules"
    path.write_text(INJECTIONS)
    build = api.build([str(ROOT / "rules"), str(path)])
    assert not build.errors, [str(d) for d in build.errors]
    return plan.loads(json.dumps(build.plan, sort_keys=True))


def training_pod(api_version: str, kind: str, container: str, role: str | None,
                 trial: bool = True) -> dict:
    labels = {"training.kubeflow.org/job-name": "mnist-t1",
              "training.kubeflow.org/replica-type": "master" if role == "master" else "worker"}
    if role is not None:
        labels["training.kubeflow.org/job-role"] = role
    if trial:
        labels["katib.kubeflow.org/trial"] = "mnist-t1"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "mnist-t1-", "labels": labels, "ownerReferences": [
            {"apiVersion": api_version, "kind": kind, "name": "mnist-t1", "uid": "u1",
             "controller": True}]},
        "spec": {"containers": [{"name": container, "image": "trainer",
                                 "command": ["python", "train.py"], "args": ["--lr", "0.01"]}]},
    }


def apply_and_reinvoke(plan_: plan.Plan, pod: dict) -> tuple[mutator.Mutation, dict]:
    mutation = mutator.mutate(mutator.prepare(plan_), pod, None, "kubeflow")
    result = jsonpatch.apply_patch(pod, list(mutation.patch))
    assert mutator.mutate(mutator.prepare(plan_), result, None, "kubeflow").patch == ()
    return mutation, result


@pytest.mark.parametrize(("api_version", "kind", "container"), [
    ("kubeflow.org/v1", "TFJob", "tensorflow"),
    ("kubeflow.org/v1", "PyTorchJob", "pytorch"),
])
def test_katib_collector_goes_into_primary_training_pods(compiled, api_version, kind, container):
    mutation, pod = apply_and_reinvoke(compiled, training_pod(api_version, kind, container, "master"))
    assert mutation.applied == ("katib-metrics",)
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    [collector] = pod["spec"]["initContainers"]
    assert collector == {
        "name": "metrics-collector",
        "image": "ghcr.io/kubeflow/katib/file-metrics-collector:v0.18.0",
        "args": ["-t", "mnist-t1", "-path", "/var/log/katib/metrics.log"],
        "volumeMounts": [{"name": "metrics", "mountPath": "/var/log/katib"}],
        "restartPolicy": "Always",
    }
    [main] = pod["spec"]["containers"]
    assert main["env"] == [{"name": "KATIB_TRIAL", "value": "mnist-t1"}]
    assert main["volumeMounts"] == [{"name": "metrics", "mountPath": "/var/log/katib"}]
    assert main["command"] == ["/bin/sh", "-c",
                               "mkfifo /tmp/out; tee -a /var/log/katib/metrics.log </tmp/out & "
                               "exec python train.py --lr 0.01 >/tmp/out 2>&1"]
    assert "args" not in main


@pytest.mark.parametrize("pod", [
    training_pod("kubeflow.org/v1", "TFJob", "tensorflow", None),              # a worker
    training_pod("kubeflow.org/v1", "TFJob", "tensorflow", "worker"),
    training_pod("kubeflow.org/v1", "TFJob", "tensorflow", "master", trial=False),
    training_pod("kubeflow.org/v1", "MPIJob", "mpi", "master"),                 # not named
    training_pod("batch/v1", "Job", "main", "master"),                          # not named
], ids=["worker-no-role", "worker", "not-a-trial", "other-kind", "batch-job"])
def test_katib_collector_stays_out_of_other_pods(compiled, pod):
    assert mutator.mutate(mutator.prepare(compiled), pod, None, "kubeflow").patch == ()


def test_katib_wrap_refuses_an_image_entrypoint(compiled):
    pod = training_pod("kubeflow.org/v1", "TFJob", "tensorflow", "master")
    del pod["spec"]["containers"][0]["command"]
    with pytest.raises(mutator.MutationError) as info:
        mutator.mutate(mutator.prepare(compiled), pod)
    assert str(info.value).endswith(
        "injection katib-metrics: container 'tensorflow' has no command: its entrypoint is in "
        "the image, which the webhook does not read; spell the command out in the pod template")
    assert info.value.span.line == 14


def test_katib_wrapped_command_runs_the_original_argv(compiled, tmp_path):
    pod = training_pod("kubeflow.org/v1", "TFJob", "tensorflow", "master")
    pod["spec"]["containers"][0].update(command=["printf", "%s\\n"],
                                        args=["it's", "$HOME", "a b", "line\nbreak"])
    _, result = apply_and_reinvoke(compiled, pod)
    done = subprocess.run(local(result, tmp_path), capture_output=True, check=True, timeout=10)
    expected = "it's\n$HOME\na b\nline\nbreak\n"
    assert done.stdout.decode() == expected
    assert (tmp_path / "metrics.log").read_text() == expected


def local(pod: dict, tmp_path: Path) -> list[str]:
    """The wrapped command of a pod's first container, with its paths moved under tmp_path."""
    command = pod["spec"]["containers"][0]["command"]
    script = command[2].replace("/var/log/katib/metrics.log", str(tmp_path / "metrics.log")) \
        .replace("/tmp/out", str(tmp_path / "out"))
    return [command[0], command[1], script]


def test_katib_wrap_keeps_the_exit_status_and_hands_the_process_to_the_program(compiled, tmp_path):
    """What a shell pipeline (`exec {argv} | tee`, R505) loses: the program's exit status, and
    the program being the container's process (the one SIGTERM is sent to)."""
    pod = training_pod("kubeflow.org/v1", "TFJob", "tensorflow", "master")
    pod["spec"]["containers"][0].update(command=["sh", "-c", "echo oops; exit 3"], args=[])
    failing = subprocess.run(local(apply_and_reinvoke(compiled, pod)[1], tmp_path),
                             capture_output=True, timeout=10)
    assert (failing.returncode, failing.stdout) == (3, b"oops\n")
    assert (tmp_path / "metrics.log").read_text() == "oops\n"
    pod["spec"]["containers"][0].update(command=["sleep", "30"], args=[])
    process = subprocess.Popen(local(apply_and_reinvoke(compiled, pod)[1], tmp_path))
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{process.pid}/cmdline").read_bytes() != b"sleep\x0030\x00":
            assert time.monotonic() < deadline, "the shell never became the program"
            time.sleep(0.01)
        process.terminate()
        assert process.wait(timeout=10) == -15   # the program itself got SIGTERM
    finally:
        process.kill()


def argo_pod() -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "wf-1-step-123", "labels": {"katib.kubeflow.org/trial": "t1"},
                     "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                          "name": "wf-1", "uid": "u2", "controller": True}]},
        "spec": {"containers": [
            {"name": "wait", "image": "quay.io/argoproj/argoexec:v3.5", "command": ["argoexec", "wait"]},
            {"name": "main", "image": "trainer", "command": ["python", "train.py"]}]},
    }


def test_argo_collector_waits_for_main_not_wait(compiled):
    mutation, result = apply_and_reinvoke(compiled, argo_pod())
    assert (mutation.kind, mutation.applied) == ("workflow", ("argo-collector",))
    assert result["metadata"]["annotations"][mutator.COMPLETION_ANNOTATION] == "main"
    [collector] = result["spec"]["initContainers"]
    assert collector["env"] == [{"name": mutator.COMPLETION_ENV, "value": "main"}]
    assert collector["restartPolicy"] == "Always"
    wait, main = result["spec"]["containers"]
    assert "volumeMounts" not in wait
    assert main["volumeMounts"] == [{"name": "metrics", "mountPath": "/var/log/katib"}]
    [collector_injection] = [i for i in compiled.injections if i.name == "argo-collector"]
    assert json.loads(result["metadata"]["annotations"][mutator.RECORD_ANNOTATION]) == \
        [f"argo-collector@{inject.digest(collector_injection)}"]


def test_the_pod_depends_on_its_injection_only(compiled, tmp_path):
    """Rules written elsewhere (another path in every position), with a comment above the
    injection, another injection changed and a kind added: another plan digest, the same
    mutated pod, its record included."""
    edited = ("# a comment that moves every line below\n\n"
              + INJECTIONS.replace('annotate "sidecar.istio.io/inject" = "false"',
                                   'annotate "sidecar.istio.io/inject" = "no"')
              + '\njob extra: example.dev/v1 Extra {\n    pods owned\n    pending otherwise\n}\n')
    path = tmp_path / "elsewhere.rules"
    path.write_text(edited)
    build = api.build([str(ROOT / "rules"), str(path)])
    assert not build.errors, [str(d) for d in build.errors]
    other = plan.loads(json.dumps(build.plan, sort_keys=True))
    assert other.digest != compiled.digest
    assert apply_and_reinvoke(other, argo_pod())[1] == apply_and_reinvoke(compiled, argo_pod())[1]
    changed = plan.loads(json.dumps(api.build([str(ROOT / "rules"), str(_written(
        tmp_path / "changed.rules", INJECTIONS.replace('args  ["-t", <<owner.metadata.name>>]',
                                                       'args  ["-t", "fixed"]')))]).plan))
    record = mutator.RECORD_ANNOTATION
    assert apply_and_reinvoke(changed, argo_pod())[1]["metadata"]["annotations"][record] != \
        apply_and_reinvoke(compiled, argo_pod())[1]["metadata"]["annotations"][record]


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
