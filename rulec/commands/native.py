"""`rulec native RULES...`: which rules the cluster's own machinery can take (`rulec.native`
and `rulec.native_admission` decide; this prints).

`--format text` (the default) prints per kind a table of its policies (native, and into which
podFailurePolicy rule, or kept by the engine with a code `rulec explain` knows: a kind other
than batch/v1 Job has no native failure policy, N120), the share that went native and the
Job fragment as YAML; then each injection's MutatingAdmissionPolicy or why the webhook keeps
it; then "N of M rules native". `json` the whole report; `yaml` only the batch Job fragments,
one document per kind, to paste into a Job's manifest. Exit codes: 0 reported; 1 the rules
have errors (no report); 2 unreadable input.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rulec import api, native, native_admission
from runtime import plan as planlib

FORMATS = ("text", "json", "yaml")


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "native", help="which rules the cluster's own machinery can take",
        description="For each kind, which of its policies the Job controller's "
                    "podFailurePolicy can take (batch/v1 Jobs; in order: first match wins) and "
                    "the Job spec fragment that says it; for each injection, the "
                    "MutatingAdmissionPolicy that does it; and the share of the rules that went "
                    "native (docs/native.md).")
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".rules files or folders")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text (default): tables and fragments; json: the whole report; "
                             "yaml: the fragments only")
    parser.set_defaults(func=run, command="native")
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        result = api.build(args.paths)
    except api.InputError as err:
        print(f"rulec: {err}", file=sys.stderr)
        return 2
    if result.plan is None:
        from rulec import diagnostics

        sys.stderr.write(diagnostics.render(result.errors, "concise", result.sources))
        print(f"rulec: no report: {len(result.errors)} error(s)", file=sys.stderr)
        return 1
    injections = native_admission.decide(planlib.load(result.plan))
    if args.format == "json":
        reports = native.decide_every_kind(result.plan)
        sys.stdout.write(json.dumps({"kinds": [r.to_json() for r in reports],
                                     "injections": [i.to_json() for i in injections],
                                     "summary": summary(reports, injections)},
                                    indent=2, ensure_ascii=False) + "\n")
    elif args.format == "yaml":
        sys.stdout.write(fragments_yaml(native.decide(result.plan)))
    else:
        sys.stdout.write(text(native.decide_every_kind(result.plan), injections))
    return 0


def summary(reports: tuple[native.KindReport, ...],
            injections: tuple[native_admission.InjectionDecision, ...]) -> dict[str, int]:
    """How many rules (policies of every kind, injections) went native, of how many."""
    policies = sum(len(r.decisions) for r in reports)
    native_policies = sum(r.native_count for r in reports)
    native_injections = sum(d.native for d in injections)
    return {"native": native_policies + native_injections, "rules": policies + len(injections),
            "nativePolicies": native_policies, "policies": policies,
            "nativeInjections": native_injections, "injections": len(injections)}


def text(reports: tuple[native.KindReport, ...],
         injections: tuple[native_admission.InjectionDecision, ...] = ()) -> str:
    """The report as a person reads it: per kind its policies, then the injections, then the
    share of the rules that went native."""
    out: list[str] = []
    for report in reports:
        batch = report.api == "batch/v1 Job"
        out.append(f"kind {report.kind} ({report.api}), {report.where}")
        total = len(report.decisions)
        if total:
            rows = [("#", "policy", "where", "decision")] + [
                (str(d.position), d.policy, d.where, d.text()) for d in report.decisions]
            widths = [max(len(r[i]) for r in rows) for i in range(3)]
            out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3]
                    for r in rows]
            share = round(100 * report.native_count / total)
            out.append(f"  native: {report.native_count} of {total} policies ({share}%)")
        else:
            out.append("  no policies" + (": the Job's own podFailurePolicy and backoffLimit "
                                          "decide" if batch else ""))
        fragment = report.fragment()
        if fragment and total:
            needs = "restartPolicy: Never in the pod template" + (
                ", completionMode: Indexed" if report.per_index else "")
            out.append(f"  fragment (Job spec; it needs {needs}):")
            out += ["    " + line for line in _yaml(fragment).splitlines()]
        out.append("")
    tail = injections_text(injections)
    if tail:
        out.append(tail)
    counts = summary(reports, injections)
    percent = f" ({round(100 * counts['native'] / counts['rules'])}%)" if counts["rules"] else ""
    out.append(f"{counts['native']} of {counts['rules']} rules native{percent}: "
               f"{counts['nativePolicies']} of {counts['policies']} policies, "
               f"{counts['nativeInjections']} of {counts['injections']} injections")
    return "\n".join(out) + "\n"


def injections_text(injections: tuple[native_admission.InjectionDecision, ...]) -> str:
    """Per injection: the MutatingAdmissionPolicy that does it, or why the webhook keeps it."""
    if not injections:
        return ""
    rows = [("injection", "where", "decision")]
    for d in injections:
        if d.native:
            rows.append((d.injection, d.where,
                         f"native: MutatingAdmissionPolicy {', '.join(d.policies)} "
                         f"({d.expressions} CEL expressions)"))
        else:
            rows.append((d.injection, d.where, f"engine: {d.code} {d.reason} (the webhook)"))
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    out = ["injections (MutatingAdmissionPolicy, admissionregistration.k8s.io/v1)"]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r[:2], widths)) + "  " + r[2]
            for r in rows]
    count = sum(d.native for d in injections)
    out.append(f"  native: {count} of {len(injections)} injections "
               f"({round(100 * count / len(injections))}%); one JSON patch each, walking the "
               f"pod's containers once per op, under the API server's runtime CEL budget of "
               f"{native_admission.RUNTIME_BUDGET:,} per evaluation")
    return "\n".join(out) + "\n"


def fragments_yaml(reports: tuple[native.KindReport, ...]) -> str:
    """The fragments, one YAML document per kind (an empty mapping where nothing is native)."""
    docs = [f"# kind {r.kind} ({r.where}): {r.native_count} of {len(r.decisions)} policies "
            f"native\n{_yaml(r.fragment()) if r.fragment() else '{}'}\n"
            for r in reports]
    return "---\n".join(docs)


def _yaml(value: Any) -> str:
    import yaml

    return str(yaml.safe_dump(value, sort_keys=False, default_flow_style=None, width=100)).rstrip("\n")
