"""What the API server's CEL spends on each MutatingAdmissionPolicy `rulec native` generates
for the example injections, as docs/native.md (Injections, CEL cost) lists it.

kube-apiserver 1.36 does not type-check a MutatingAdmissionPolicy, so it has no static estimate
of its cost (nothing is refused or warned at creation); it counts the cost at run time, against
a limit per expression (1,000,000) and a budget per evaluation (10,000,000). tools/celcost/
builds (once, cached) a harness that compiles a policy as the API server does and evaluates it
on a pod with k8s.io/apiserver's own evaluators, which return the budget left. Here every pod of
the example suites (with the service-account token volume and mounts the API server's
ServiceAccount plugin adds before the policies run) goes through every policy; each policy's
highest cost over the pods it injects must be the documented one: a change that makes a policy
dearer fails here until the docs say so. Skipped, saying why, where Go or the Go module cache's
k8s.io/apiserver is missing.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from rulec import api, native_admission
from runtime import plan as planlib
from runtime.mutator.draft import TOKEN_PATH

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / "tools" / "celcost" / "build.sh"
EXAMPLES = ("argo-wait-main", "injected-sidecar", "katib-metrics-collector")
NO_GO, NO_MODULE = 3, 4
Obj = dict[str, Any]
# docs/native.md's rows: | `policy` | expressions | highest cost | pods injected |
ROW = re.compile(r"^\| `(jobrules-[a-z0-9.-]+)` \| (\d+) \| ([\d,]+) \| (\d+) of (\d+) \|$", re.M)


@functools.lru_cache(maxsize=None)
def _binary() -> tuple[Path | None, str]:
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    if done.returncode in (NO_GO, NO_MODULE):
        return None, done.stderr.strip().splitlines()[-1]
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD} failed ({done.returncode}):\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1]), ""


def binary() -> Path:
    path, why = _binary()
    if path is None:
        pytest.skip(f"no CEL cost harness: {why}")
    return path


def ask(cases: list[Obj]) -> list[Obj]:
    text = "".join(json.dumps(c, separators=(",", ":")) + "\n" for c in cases)
    done = subprocess.run([str(binary())], input=text, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"celcost failed ({done.returncode}): {done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def suite_pods() -> Iterator[Obj]:
    """Every pod of the example suites (cases, defaults, steps), once each."""
    seen: set[str] = set()
    for example in EXAMPLES:
        for path in sorted((ROOT / "examples" / example).glob("*suite.yaml")):
            suite = yaml.safe_load(path.read_text())
            nodes = [suite.get("defaults") or {}]
            for case in suite.get("cases") or ():
                nodes += [case, *(case.get("steps") or ())]
            for node in nodes:
                for pod in [node["pod"]] if "pod" in node else node.get("pods") or ():
                    if isinstance(pod, str):
                        pod = yaml.safe_load((path.parent / pod).read_text())
                    key = json.dumps(pod, sort_keys=True)
                    if isinstance(pod, dict) and pod.get("kind") == "Pod" and key not in seen:
                        seen.add(key)
                        yield pod


def received(pod: Obj) -> Obj:
    """The pod as the policies get it: no status, and the token volume and mounts the
    ServiceAccount plugin adds first (unless the pod opts out)."""
    pod = copy.deepcopy(pod)
    pod.pop("status", None)
    spec = pod["spec"]
    if spec.get("automountServiceAccountToken") is not False:
        spec.setdefault("volumes", []).append({"name": "kube-api-access-abcde", "projected": {
            "sources": [{"serviceAccountToken": {"path": "token"}}]}})
        for field in ("initContainers", "containers"):
            for container in spec.get(field) or ():
                container.setdefault("volumeMounts", []).append(
                    {"name": "kube-api-access-abcde", "mountPath": TOKEN_PATH, "readOnly": True})
    return pod


@functools.lru_cache(maxsize=None)
def measured() -> dict[str, tuple[int, int, int, int]]:
    """Per policy: (expressions, highest cost over the pods it injects, pods it injects, pods)."""
    built = api.build([str(ROOT / "examples" / e) for e in EXAMPLES])
    assert built.plan is not None
    decisions = native_admission.decide(planlib.load(json.loads(json.dumps(built.plan))))
    policies = [(d.expressions, o) for d in decisions for o in d.objects
                if o["kind"] == native_admission.POLICY_KIND]
    pods = [received(p) for p in suite_pods()]
    answers = ask([{"policy": o, "pod": p, "namespace": "default"}
                   for _, o in policies for p in pods])
    out = {}
    for n, (expressions, policy) in enumerate(policies):
        mine = answers[n * len(pods):(n + 1) * len(pods)]
        assert all(not a.get("error") for a in mine), [a["error"] for a in mine if a.get("error")]
        injected = [a["total"] for a in mine if a["matched"]]
        out[policy["metadata"]["name"]] = (expressions, max(injected, default=0), len(injected),
                                           len(pods))
    return out


def documented() -> dict[str, tuple[int, int, int, int]]:
    doc = (ROOT / "docs" / "native.md").read_text(encoding="utf-8")
    return {m[1]: (int(m[2]), int(m[3].replace(",", "")), int(m[4]), int(m[5]))
            for m in ROW.finditer(doc)}


def test_each_policy_costs_the_api_server_what_the_docs_say() -> None:
    found, said = measured(), documented()
    assert set(found) == set(said), (found, said)
    for name, (expressions, cost, injected, pods) in found.items():
        assert (expressions, injected, pods) == said[name][:1] + said[name][2:], name
        # a policy grown dearer fails; one much cheaper than documented is a stale doc
        assert 0.9 * said[name][1] <= cost <= said[name][1], (name, cost, said[name][1])
        assert cost < 1_000_000   # the API server's limit per expression (celconfig.PerCallLimit)


def test_the_harness_counts_what_an_expression_spends() -> None:
    """The harness can fail: a policy whose patch walks the containers once more costs more."""
    policy = next(o for d in native_admission.decide(planlib.load(json.loads(json.dumps(
        api.build([str(ROOT / "examples" / "injected-sidecar")]).plan))))
        for o in d.objects if o["kind"] == native_admission.POLICY_KIND)
    pod = next(received(p) for p in suite_pods()
               if p["metadata"].get("ownerReferences", [{}])[0].get("kind") == "Trainer")
    dearer = copy.deepcopy(policy)
    mutation = dearer["spec"]["mutations"][0]["jsonPatch"]
    mutation["expression"] = ("object.spec.containers.all(c, c.name != \"\") ? "
                              f"{mutation['expression']} : []")
    [plain, more] = ask([{"policy": p, "pod": pod, "namespace": "default"} for p in (policy, dearer)])
    assert plain["matched"] and more["matched"]
    assert more["total"] > plain["total"] > 0
