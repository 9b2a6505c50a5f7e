"""The benchmark's generated rules stay valid (the benchmark itself is never timed in tests)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from rulec import api
from rulec.source import SourceFile

BENCH = Path(__file__).resolve().parents[3] / "bench" / "check.py"


def test_generated_rules_compile_cleanly() -> None:
    spec = importlib.util.spec_from_file_location("bench_check", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.generate(300)
    assert text.count("\n") >= 300
    build = api.build_sources([SourceFile.from_text("bench.rules", text)])
    assert build.plan is not None and build.diagnostics == ()
