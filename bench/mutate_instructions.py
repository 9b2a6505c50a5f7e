"""Instructions per mutation of `bench/evaluate.py`'s 7.4 KB pod, counted by valgrind.

    .venv/bin/python bench/mutate_instructions.py [--fresh] [--calls 50]

Runs itself under `valgrind --tool=callgrind` (PYTHONHASHSEED=0) and counts only inside
`itertools.starmap`, which makes the counted calls: not start-up, not the plan's compilation,
not the 20 warm-up calls before. Instructions do not depend on the machine's load, so two
builds compare on a shared machine where timings do not (bench/RESULTS.md).

--fresh: each call on its own freshly decoded copy of the pod, as the webhook mutates one per
request (the decoding is not counted); else the same pod object every call, as the timing bench.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = 20


def count(fresh: bool, calls: int) -> int:
    """Instructions per call, from a callgrind run of this script in --inner mode."""
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", "--toggle-collect=starmap_next",
             f"--callgrind-out-file={tmp}/out", sys.executable, __file__, "--inner",
             "--calls", str(calls)] + (["--fresh"] if fresh else []),
            env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True)
    collected = re.search(r"Collected : (\d+)", run.stderr)
    assert collected is not None, run.stderr
    return int(collected.group(1)) // calls


def inner(fresh: bool, calls: int) -> None:
    """The counted calls (under valgrind)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import orjson

    import evaluate
    from rulec import api, emit
    from rulec.source import SourceFile
    from runtime import mutator, plan

    built = api.build_sources([SourceFile.from_text("bench.rules", evaluate.RULES)])
    assert built.plan is not None, built.diagnostics
    injector = mutator.prepare(plan.loads(emit.dumps(built.plan)))
    pod = evaluate.tf_pod()
    for _ in range(WARM_UP):
        mutator.mutate(injector, pod)
    if fresh:
        raw = orjson.dumps(pod)
        args: object = [(injector, orjson.loads(raw)) for _ in range(calls)]
    else:
        args = itertools.repeat((injector, pod), calls)
    for _ in itertools.starmap(mutator.mutate, args):   # type: ignore[call-overload]
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fresh", action="store_true", help="a freshly decoded pod per call")
    parser.add_argument("--calls", type=int, default=50, help="calls counted")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        sys.path.insert(0, str(ROOT))
        inner(args.fresh, args.calls)
        return 0
    print(f"{count(args.fresh, args.calls):,} instructions per mutation"
          f" ({'a fresh pod' if args.fresh else 'the same pod'} each call, {args.calls} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
