"""The input benchmark's generated pods are what it says: pods of its job, read alike from
JSON and YAML (the benchmark itself is never timed in tests)."""
from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

from rulec.commands import inputs, suite

BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_generated_pods_belong_to_the_job_and_read_alike(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))  # the benchmark imports its neighbour, as when run
    try:
        spec = importlib.util.spec_from_file_location("bench_inputs", BENCH / "inputs.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    pods = module.pod_list(30)
    (tmp_path / "pods.json").write_text(json.dumps(pods, indent=4))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump(pods))
    read = inputs.read_objects(tmp_path / "pods.json")
    assert read == inputs.read_objects(tmp_path / "pods.yaml") == pods["items"]
    plan = inputs.load_plan([str(module.EXAMPLE / "vcjob.rules")])
    result = suite.eval_result(plan, module.JOB, read, None, datetime(2020, 3, 12, 11, 15,
                                                                       tzinfo=timezone.utc))
    assert result["phase"] == "Running" and "problems" not in result
    assert 5_000 < len(json.dumps(pods["items"][1], indent=4)) < 15_000  # a realistic pod size
