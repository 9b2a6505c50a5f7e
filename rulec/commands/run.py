"""`rulec eval`, `rulec mutate` and `rulec test`: run rules offline against objects on disk.

Thin shells over the runtime's pure cores (evaluator, mutator) and the suite runner. Exit codes
follow the CLI convention: 0 success, 1 test failures, 2 usage, input or rules errors (reported
in one line naming the file, never as a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable, TextIO

from rulec import api
from rulec.commands import inputs, suite
from runtime import functions


def register(subparsers: Any) -> None:
    """Add the `eval`, `mutate` and `test` subcommands (once, however often called)."""
    if "eval" in subparsers.choices:
        return
    ev = subparsers.add_parser(
        "eval", help="evaluate a job and its pods: verdict, events, actions, new state",
        description="Evaluate a job object and its pods against the rules: the verdict, the events "
                    "detected against the stored state, the actions policies take, the new state.")
    ev.add_argument("--rules", nargs="+", required=True, metavar="PATH",
                    help=".rules files, folders of them, or one compiled plan (.json)")
    ev.add_argument("--object", required=True, metavar="FILE",
                    help="the job (YAML or JSON; - : standard input)")
    ev.add_argument("--pods", metavar="FILE", action="append",
                    help="its pods: a JSON array, a `kind: List`, or multi-document YAML "
                         "(repeatable: the files' pods in order; - : standard input)")
    ev.add_argument("--state", metavar="FILE",
                    help="stored state (JSON, or an earlier eval output; - : standard input); "
                         "default: the job's jobrules.dev/state annotation")
    ev.add_argument("--now", metavar="TIME", help="evaluation time, RFC 3339 (default: the clock)")
    ev.add_argument("--format", choices=("json", "text"), default="json")
    ev.add_argument("--explain", action="store_true",
                    help="say for every rule whether it matched and, if not, why")
    ev.set_defaults(func=_guarded(_eval), command="eval")

    mu = subparsers.add_parser(
        "mutate", help="apply the injections to a pod: JSON patch and patched pod",
        description="Apply the rules' injections to a pod as the admission webhook would.")
    mu.add_argument("--rules", nargs="+", required=True, metavar="PATH",
                    help=".rules files, folders of them, or one compiled plan (.json)")
    mu.add_argument("--pod", required=True, metavar="FILE",
                    help="the pod (YAML or JSON; - : standard input)")
    mu.add_argument("--owner", metavar="FILE",
                    help="the owner job object, when known (- : standard input)")
    mu.add_argument("--namespace", metavar="NS", help="the request namespace")
    mu.add_argument("--namespace-label", action="append", default=None, metavar="KEY=VALUE",
                    dest="namespace_labels",
                    help="a label of the pod's namespace, for injections opted into by "
                         "`namespace label` (repeatable; without any, those never apply)")
    mu.add_argument("--format", choices=("json", "text"), default="json")
    mu.add_argument("--explain", action="store_true",
                    help="say for every injection whether it applied and, if not, why")
    mu.set_defaults(func=_guarded(_mutate), command="mutate")

    te = subparsers.add_parser(
        "test", help="run test suites (suite.yaml, *.suite.yaml)",
        description="Run the cases of rule test suites; exit 1 if any case fails.")
    te.add_argument("paths", nargs="+", metavar="PATH", help="suite files or folders")
    te.add_argument("-k", metavar="TEXT", dest="keyword", help="only cases whose name contains TEXT")
    te.add_argument("--update", action="store_true", help="rewrite golden files with actual output")
    te.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")
    te.add_argument("--format", choices=("text", "junit"), default="text",
                    help="text as cases run, or a JUnit XML report at the end (default: text)")
    te.set_defaults(func=_guarded(_test), command="test")


def _guarded(command: Callable[[argparse.Namespace, TextIO], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args, sys.stdout)
        except _Usage as err:
            print(err, file=sys.stderr)
            return 2
        except api.InputError as err:
            print(f"rulec {args.command}: {err}", file=sys.stderr)
            return 2
    return run


def _one_stdin(args: argparse.Namespace, *options: str) -> None:
    """Standard input can be read once: at most one of the file options may be `-`."""
    reading = []
    for option in options:
        given = getattr(args, option)
        reading += [f"--{option}" for value in (given if isinstance(given, list) else [given])
                    if value == inputs.STDIN]
    if len(reading) > 1:
        raise _Usage(f"rulec {args.command}: only one file option may be - (standard input), "
                     f"not {' and '.join(reading)}")


class _Usage(api.InputError):
    """A usage error found after parsing (exit 2, one line)."""


def _now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(timezone.utc)
    moment = functions.timestamp(text)
    if moment is None:
        raise api.InputError(f"--now {text!r}: expected an RFC 3339 time such as 2024-05-01T12:00:00Z")
    return moment


def _eval(args: argparse.Namespace, out: TextIO) -> int:
    _one_stdin(args, "object", "pods", "state")
    plan = inputs.load_plan(args.rules)
    job = inputs.read_object(args.object)
    candidates = inputs.read_pod_files(args.pods or ())
    prior = inputs.read_state(args.state) if args.state else None
    result = suite.eval_result(plan, job, candidates, prior, _now(args.now), args.explain,
                               where=inputs.where(args.object))
    out.write(_json(result) if args.format == "json" else eval_text(result))
    for problem in result.get("problems", []):
        print(f"rulec eval: warning: {problem}", file=sys.stderr)
    return 0


def _mutate(args: argparse.Namespace, out: TextIO) -> int:
    _one_stdin(args, "pod", "owner")
    plan = inputs.load_plan(args.rules)
    pod = inputs.read_object(args.pod, "pod")
    owner = inputs.read_object(args.owner) if args.owner else None
    labels = None
    if args.namespace_labels is not None:
        labels = {}
        for item in args.namespace_labels:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise api.InputError(f"--namespace-label {item!r}: expected KEY=VALUE")
            labels[key] = value
    result = suite.mutate_result(plan, pod, owner, args.namespace, args.explain, labels)
    out.write(_json(result) if args.format == "json" else mutate_text(result))
    if "error" in result:
        print(f"rulec mutate: {result['error']}", file=sys.stderr)
        return 2
    return 0


def _test(args: argparse.Namespace, out: TextIO) -> int:
    from rulec.commands import junit

    files = suite.find(args.paths)
    if not files:
        raise api.InputError(f"no test suites (suite.yaml, *.suite.yaml) under {' '.join(args.paths)}")
    text = args.format == "text"
    notes = out if text else sys.stderr  # golden files written
    runs: list[junit.SuiteRun] = []
    plans: dict[tuple[str, ...], Any] = {}  # suites of one folder share their compiled rules
    for path in files:
        try:
            loaded = suite.load(path)
            key = (loaded.folder, *loaded.rules)
            if key not in plans:
                plans[key] = inputs.load_plan(list(loaded.rules), loaded.folder)
        except api.InputError as err:
            print(f"rulec test: {err}", file=sys.stderr)
            runs.append(junit.SuiteRun(path, (), str(err)))
            continue
        cases: list[tuple[suite.Outcome, float]] = []
        for case in loaded.cases:
            if args.keyword and args.keyword not in case.name:
                continue
            start = time.perf_counter()
            outcome = suite.run_case(loaded, case, plans[key], args.update)
            cases.append((outcome, time.perf_counter() - start))
            if outcome.error:
                print(f"rulec test: {path}: case {case.name!r}: {outcome.error}", file=sys.stderr)
            if text and (not outcome.passed or not args.quiet):
                verdict = "ERROR" if outcome.error else "PASS" if outcome.passed else "FAIL"
                out.write(f"{verdict} {path}: {case.name}\n")
            if text and outcome.report and not outcome.passed:
                out.write("".join(f"    {line}\n" for line in outcome.report.rstrip("\n").splitlines()))
            for written in outcome.updated:
                notes.write(f"     wrote {written}\n")
        runs.append(junit.SuiteRun(path, tuple(cases)))
    outcomes = [o for r in runs for o, _ in r.cases]
    errors = sum(bool(o.error) for o in outcomes)
    failed = sum(not o.passed for o in outcomes) - errors
    if text:
        out.write(f"{len(outcomes) - failed - errors} passed, {failed} failed"
                  + (f", {errors} errors" if errors else "") + "\n")
    else:
        out.write(junit.render(runs))
    if errors or any(r.error is not None for r in runs):
        return 2
    return 1 if failed else 0


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def eval_text(r: dict[str, Any]) -> str:
    """The eval output for a terminal."""
    lines = [f"{r['phase']}" + (f" ({r['reason']})" if r.get("reason") else "")
             + (f"  [{r['rule']}]" if r.get("rule") else "") + ("  final" if r.get("final") else "")
             + (f"  cause {r['cause']}" if r.get("cause") else "")]
    if r.get("message"):
        lines.append(f"  {r['message']}")
    lines.append("events:" if r["events"] else "events: none")
    for e in r["events"]:
        where = " ".join(f"{k} {e[k]}" for k in ("pod", "task", "container") if e.get(k))
        lines.append(f"  {e['event']}" + (f" {e['detail']}" if e.get("detail") else "")
                     + (f"  {where}" if where else "")
                     + (f"  -> {e['policy']}" if e.get("policy") else "  (no policy)"))
    lines.append("actions:" if r["actions"] else "actions: none")
    for a in r["actions"]:
        target = " ".join(f"{k} {v}" for k, v in a["target"].items() if k not in ("namespace", "uid"))
        line = f"  {a['status']:<9} {a['action']}  {target}  [{a['policy']} at {a['rule']}]"
        if a.get("due"):
            line += f" due {a['due']}"
        if a.get("budget"):
            line += f" budget {a['budget']['key']} {a['budget']['used']}/{a['budget']['max']}"
        lines.append(line)
        if a.get("reason") or a.get("message"):
            lines.append(f"            {a.get('reason') or ''}: {a.get('message') or ''}".rstrip(": "))
    lines.append("state: " + json.dumps(r["state"], separators=(",", ":"), sort_keys=True))
    if r.get("wakeAt"):
        lines.append(f"evaluate again at {r['wakeAt']}")
    lines += [f"problem: {p}" for p in r.get("problems", [])]
    lines += _explain_text(r.get("explain", []))
    return "\n".join(lines) + "\n"


def mutate_text(r: dict[str, Any]) -> str:
    """The mutate output for a terminal."""
    if "error" in r and not r["patch"]:
        return f"error: {r['error']}\n"
    lines = [f"kind: {r['kind'] or 'none'}", "applied: " + (", ".join(r["applied"]) or "none")]
    if "error" in r:   # fail-open: the others applied
        lines.append(f"failed: {r['error']}")
    for op in r["patch"]:
        value = "" if op["op"] == "remove" else " " + json.dumps(op.get("value"), separators=(",", ":"))
        lines.append(f"  {op['op']} {op['path']}{value}")
    lines += _explain_text(r.get("explain", []))
    return "\n".join(lines) + "\n"


def _explain_text(findings: list[dict[str, Any]]) -> list[str]:
    if not findings:
        return []
    out = ["explain:"]
    for f in findings:
        name = f.get("name") or f.get("injection")
        what = f.get("what", "injection")
        out.append(f"  {f['rule']}: {what} {name}: {'matched' if f['matched'] else 'no'}: {f['why']}")
    return out
