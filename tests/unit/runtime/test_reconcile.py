"""runtime.reconcile, table-driven: the cases in reconcile/cases.yaml, each a job lived through in
time order, every step's writes merged back into it as the API server would merge them."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulec import api, emit
from rulec.commands import suite
from runtime import functions, plan, reconcile, writeback

HERE = Path(__file__).resolve().parent / "reconcile"
ROOT = Path(__file__).resolve().parents[3]
CASES = yaml.safe_load((HERE / "cases.yaml").read_text())["cases"]
PODS = yaml.safe_load((HERE / "pods.yaml").read_text())


def _kind(rules: str, tmp: Path) -> plan.Kind:
    if "\n" in rules:
        (tmp / "j.rules").write_text(rules)
        built = api.build_sources([api.read(str(tmp / "j.rules"))])
        built_plan = built.plan
        text = emit.dumps(built_plan).replace(str(tmp) + "/", "")   # cite `j.rules:3:5`
    else:
        built = api.build([str(ROOT / rules)])
        text = emit.dumps(built.plan).replace(str(ROOT) + "/", "")
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [kind] = plan.loads(text).kinds
    return kind


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def _pods(names: list[str], job: dict[str, Any]) -> list[dict[str, Any]]:
    meta = job["metadata"]
    out = []
    for name in names:
        pod = copy.deepcopy(PODS[name])
        pod["metadata"]["ownerReferences"] = [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                               "name": meta["name"], "uid": meta["uid"],
                                               "controller": True}]
        out.append(pod)
    return out


def _seen(writes: reconcile.Writes, job: dict[str, Any]) -> dict[str, Any]:
    annotation = ((job.get("metadata") or {}).get("annotations") or {}).get(writeback.VERDICT_ANNOTATION)
    return {
        "commit": writes.commit, "status": writes.status,
        "events": [{"name": e.name, "type": e.type, "reason": e.reason, "action": e.action,
                    "note": e.note} for e in writes.events],
        "requeue": functions.rfc3339(writes.requeue_at) if writes.requeue_at else None,
        "verdict": json.loads(annotation) if annotation else None,
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict[str, Any], tmp_path: Path) -> None:
    kind = _kind(case["rules"], tmp_path)
    job = copy.deepcopy(case["job"])
    for number, step in enumerate(case["steps"]):
        job = merge(job, step.get("job") or {})
        now = datetime.fromisoformat(step["now"].replace("Z", "+00:00"))
        writes = reconcile.reconcile(kind, job, _pods(step.get("pods") or [], job), now)
        for patch in (writes.commit, writes.status):
            if patch is not None:
                job = merge(job, patch)
        rv = int(job["metadata"]["resourceVersion"]) + 1
        job["metadata"]["resourceVersion"] = str(rv)
        ok, diff, _ = suite.compare(step["expect"], _seen(writes, job), str(HERE))
        assert ok, f"step {number} ({step['now']}):\n{diff}"
