"""`rulec why KIND/NAME`: a live job explained the way the controller sees it.

Nothing here decides anything: the job is read through the controller's own read path (a GET
put through the kind's job cache, `runtime.watches.job_store`, so cut to the same projection),
its pods listed as the controller's pod watch lists them and put through that watch's cache
(`watches.pod_store`, `pod_query`), the candidates taken from the cache's indexes
(`watches.candidates`), and `runtime.reconcile.sync` decodes the stored state and the journal
and decides, as the controller's worker does. What is printed is that decision, explained as
`rulec eval --explain` explains it (`run.eval_text`), what is written on the job, what of the
verdict the controller would write again (the difference between the two), and the journal's
open intents. Only GET and LIST requests are sent.

Exit codes: 0 decided, and it agrees with the verdict written; 1 decided, and it differs (so a
script can alert); 2 usage, rules, connection or API errors (one line, never a traceback).

The Kubernetes client is imported only when the command runs (`rulec check` and `rulec --help`
never pay for it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO

from rulec import api
from rulec.commands import inputs, run
from runtime import evaluator, intents, objects, reconcile, vocabulary, watches
from runtime import environment
from runtime import plan as planlib

if TYPE_CHECKING:
    from runtime.controller import kube

AGREES, DIFFERS, TROUBLE = 0, 1, 2
REQUEST_TIMEOUT = 30.0   # seconds for one request: a command should not hang for a minute
# The fields of the verdict annotation and of our condition that follow from another one (the
# time of the last change follows the phase or the status): listed only when nothing else differs.
_FOLLOWING = frozenset({"since", "lastTransitionTime"})
_ANNOTATION_FIELDS = ("phase", "reason", "message", "rule", "final", "since", "observedGeneration")
_CONDITION_FIELDS = ("status", "reason", "message", "lastTransitionTime", "observedGeneration")


def register(subparsers: Any) -> None:
    """Add the `why` subcommand (once, however often called)."""
    if "why" in subparsers.choices:
        return
    why = subparsers.add_parser(
        "why", help="explain a live job as the controller sees it, and whether it agrees",
        description="Read a job, its pods and its stored state from the API server the way the "
                    "controller does, decide as the controller would now, and explain it as "
                    "`rulec eval --explain` does; say whether the verdict written on the job "
                    "differs, and which intents its journal holds. Only reads (GET and LIST). "
                    "Exit 0: the decision agrees with what is written; 1: it differs; 2: usage, "
                    "rules or API errors.")
    why.add_argument("target", metavar="KIND/NAME", nargs="?",
                     help="the job: the rules' kind name, or the resource as kubectl spells it "
                          "(job/x, jobs.batch/x, jobs.v1.batch/x, vcjob/x, a short name)")
    why.add_argument("-n", "--namespace", metavar="NS",
                     help="its namespace (default: the kubeconfig context's; in a pod, its "
                          "service account's; else default)")
    why.add_argument("--rules", nargs="+", required=True, metavar="PATH",
                     help="the controller's rules: .rules files, folders of them, or one "
                          "compiled plan (.json); rule positions are part of the verdict written, "
                          "so give the plan the controller runs")
    why.add_argument("--kubeconfig", metavar="FILE",
                     help="default: JOBRULES_KUBECONFIG, else KUBECONFIG, else in-cluster, as "
                          "the controller")
    why.add_argument("--format", choices=("text", "json"), default="text")
    why.set_defaults(func=_main, command="why")


class Trouble(Exception):
    """A reason to stop with exit 2, said in one line."""


# ---------------------------------------------------------------------------------------------
# Which kind of the plan KIND names


@dataclass(frozen=True, slots=True)
class Spelled:
    """KIND as typed: the resource word and the group (or version.group) after its first dot."""

    text: str
    resource: str
    group: str

    @classmethod
    def of(cls, text: str) -> Spelled:
        resource, _, group = text.partition(".")
        return cls(text, resource.lower(), group.lower())


def resolve(rules: planlib.Plan, spelled: Spelled,
            short_names: Mapping[str, tuple[str, ...]] | None = None) -> planlib.Kind | None:
    """The plan's kind KIND names: the rules' kind name, else the resource as kubectl spells it
    (plural, singular or Kind, any case; with `.group` or `.version.group`; a short name from
    discovery, `short_names` by kind name). Where several kinds match, a built-in group wins,
    as in kubectl (`job` is batch/v1's, not Volcano's); None when none does. Trouble when
    still ambiguous."""
    named = [k for k in rules.kinds if k.name == spelled.text]
    if named:
        return named[0]
    found = [k for k in rules.kinds if _group_matches(k, spelled.group)
             and (spelled.resource in (k.plural.lower(), k.kind.lower())
                  or spelled.resource in (short_names or {}).get(k.name, ()))]
    if len(found) > 1:
        builtin = [k for k in found if _builtin(k.group)]
        if len(builtin) == 1:
            return builtin[0]
        raise Trouble(f"{spelled.text} is ambiguous: it names "
                      + ", ".join(f"{k.name} ({_resource_name(k)})" for k in found)
                      + "; write the group (PLURAL.GROUP/NAME) or the rules' kind name")
    return found[0] if found else None


def _group_matches(kind: planlib.Kind, group: str) -> bool:
    if not group:
        return True
    return group == kind.group.lower() or group in {f"{v}.{kind.group}".lower()
                                                      for v in kind.versions or (kind.version,)}


def _builtin(group: str) -> bool:
    """A group Kubernetes serves itself (core, `batch`, `*.k8s.io`), not a CRD's."""
    return "." not in group or group.endswith(".k8s.io")


def _resource_name(kind: planlib.Kind) -> str:
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def short_names(client: kube.Client, rules: planlib.Plan) -> dict[str, tuple[str, ...]]:
    """Each kind's short names, from the discovery of its group version (one GET each)."""
    served: dict[str, dict[str, tuple[str, ...]]] = {}
    out: dict[str, tuple[str, ...]] = {}
    for kind in rules.kinds:
        if kind.api_version not in served:
            path = "/api/v1" if kind.api_version == "v1" else f"/apis/{kind.api_version}"
            found = client.get(path).get("resources") or []
            served[kind.api_version] = {
                str(r.get("name")): tuple(str(s).lower() for s in r.get("shortNames") or ())
                for r in found if isinstance(r, dict)}
        out[kind.name] = served[kind.api_version].get(kind.plural, ())
    return out


def _not_in_plan(rules: planlib.Plan, spelled: Spelled, note: str = "") -> Trouble:
    kinds = ", ".join(f"{k.name} ({_resource_name(k)})" for k in rules.kinds) or "none"
    return Trouble(f"{spelled.text} is not a kind of the rules (their kinds: {kinds}){note}")


# ---------------------------------------------------------------------------------------------
# Reading, as the controller reads


@dataclass(frozen=True, slots=True)
class Live:
    """A job as the controller's cache holds it, and the reconcile it would run now."""

    kind: planlib.Kind
    job: Mapping[str, Any]        # projected, as cached
    listed: int                   # pods the pod watch's list returned
    writes: reconcile.Writes


def read(client: kube.Client, rules: planlib.Plan, kind: planlib.Kind, namespace: str, name: str,
         now: datetime) -> Live:
    """Read the job and its pods the controller's way and decide as it would (GET and LIST)."""
    jobs = watches.job_store(kind)
    jobs.put(client.get(objects.path(kind.api_version, kind.plural, namespace, name)))
    job = jobs.get((namespace, name))
    if job is None:   # the server answered another object: not what the cache would key
        raise Trouble(f"{_resource_name(kind)} {namespace}/{name}: the API server answered "
                      "another object")
    why_not = reconcile.left_alone(kind, job, now)
    if why_not is not None:
        raise Trouble(f"{_resource_name(kind)} {namespace}/{name}: the controller leaves it "
                      f"alone: {why_not}")
    selector = watches.pod_selector(kind)
    pods = watches.pod_store(selector, watches.pod_watches(rules.kinds)[selector])
    listed = client.list(objects.path("v1", "pods", namespace), query=watches.pod_query(selector))
    for _ in pods.replace(listed.get("items") or []):
        pass
    writes = reconcile.sync(
        kind, job, watches.candidates(kind, pods, job), now,
        lambda: client.list(objects.path("v1", "pods", namespace))["items"], explain=True)
    return Live(kind, job, len(pods), writes)


# ---------------------------------------------------------------------------------------------
# What is written, and what the controller would write again


@dataclass(frozen=True, slots=True)
class Difference:
    """One field of the verdict the controller would write again: as written, as decided."""

    part: str       # "verdict annotation", "condition TYPE", "status field", "stored state"
    field: str
    written: Any
    decided: Any


def differences(live: Live) -> list[Difference]:
    """What of the verdict written on the job the controller would change now: read off the
    patches its reconcile makes (runtime.writeback compares; nothing is compared here)."""
    kind, job, writes = live.kind, live.job, live.writes
    out: list[Difference] = []
    annotations = ((writes.commit or {}).get("metadata") or {}).get("annotations") or {}
    if vocabulary.VERDICT_ANNOTATION in annotations:
        out += _fields("verdict annotation", _json(objects.annotation(
            job, vocabulary.VERDICT_ANNOTATION)), _json(annotations[vocabulary.VERDICT_ANNOTATION]),
            _ANNOTATION_FIELDS)
    status = dict((writes.status or {}).get("status") or {})
    ctype = kind.status.condition
    conditions = status.pop("conditions", None)
    if ctype is not None and isinstance(conditions, list):
        wanted: dict[str, Any] = next((c for c in conditions if c.get("type") == ctype), {})
        existing = dict(objects.condition(job, ctype) or {})
        # observedGeneration only where the kind's schema keeps it (as runtime.writeback)
        names = tuple(n for n in _CONDITION_FIELDS
                      if n != "observedGeneration" or n in existing)
        out += _fields(f"condition {ctype}", existing, wanted, names)
    for path, value in _leaves(("status",), status) if status else ():
        out.append(Difference("status field", ".".join(path), objects.at(job, path), value))
    if writes.verdict_changed:
        out.append(Difference("stored state", "verdict", writes.previous_phase,
                              writes.evaluation.verdict.phase))
    return out


def _fields(part: str, written: Mapping[str, Any], decided: Mapping[str, Any],
            names: tuple[str, ...]) -> list[Difference]:
    """The fields that differ (those that only follow another, when nothing else does); the
    whole part when none of `names` does (the controller writes it all the same)."""
    changed = [Difference(part, n, written.get(n), decided.get(n)) for n in names
               if written.get(n) != decided.get(n)]
    leading = [d for d in changed if d.field not in _FOLLOWING]
    return leading or changed or [Difference(part, "", dict(written) or None, dict(decided))]


def _leaves(path: tuple[str, ...], value: Any) -> Iterable[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from _leaves((*path, key), inner)
    else:
        yield path, value


def _json(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def written(live: Live) -> dict[str, Any]:
    """The verdict as it is written on the job: the annotation, our condition, the kind's
    status fields, the phase the stored state remembers."""
    kind, job = live.kind, live.job
    text = objects.annotation(job, vocabulary.VERDICT_ANNOTATION)
    fields = [f for f in (kind.status.phase, kind.status.reason, kind.status.message)
              if f is not None]
    out: dict[str, Any] = {
        "verdict": (_json(text) or text) if text is not None else None,
        "condition": (dict(objects.condition(job, kind.status.condition) or {}) or None
                      if kind.status.condition else None),
        "status": {".".join(f.path): objects.at(job, f.path) for f in fields},
        "state": live.writes.previous_phase,
    }
    return out


# ---------------------------------------------------------------------------------------------
# The report


def report(live: Live) -> dict[str, Any]:
    """What `--format json` prints."""
    writes = live.writes
    meta = objects.meta(live.job)
    decided = evaluator.to_json(writes.evaluation)
    problems = [p for p in (writes.state_error, writes.journal_error) if p]
    problems += decided.pop("problems", [])
    if problems:
        decided["problems"] = problems
    if "explain" in decided:
        decided["explain"] = decided.pop("explain")
    found = differences(live)
    opened = writes.journal[:len(writes.journal) - len(writes.new)]
    return {
        "job": {"kind": live.kind.name, "apiVersion": live.kind.api_version,
                "namespace": meta.get("namespace"), "name": meta.get("name"),
                "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
        "pods": sorted(str(objects.name(p)) for p in writes.pods),
        "podsListed": live.listed,
        "decided": decided,
        "written": written(live),
        "agrees": not found,
        "differences": [{"part": d.part, "field": d.field, "written": d.written,
                         "decided": d.decided} for d in found],
        "intents": _intents(opened),
        "newIntents": _intents(writes.new),
    }


def _intents(found: tuple[intents.Intent, ...]) -> list[dict[str, Any]]:
    text = intents.encode(found)
    return list(json.loads(text)["open"]) if text else []


def text(r: dict[str, Any]) -> str:
    """What `--format text` prints: the decision as `rulec eval --explain` prints it, then what
    is written, the journal, and whether they agree."""
    job = r["job"]
    pods = r["pods"]
    lines = [f"{job['kind']} {job['namespace']}/{job['name']} ({job['apiVersion']}, "
             f"resourceVersion {job['resourceVersion']}): "
             + (f"{len(pods)} pod(s): " + ", ".join(pods[:10]) + (", ..." if len(pods) > 10 else "")
                if pods else "no pods"),
             "decided now:"]
    lines += [f"  {line}" for line in run.eval_text(r["decided"]).rstrip("\n").split("\n")]
    lines.append("written on the job:")
    lines += [f"  {line}" for line in _written_text(r["written"])]
    lines.append("journal: " + (f"{len(r['intents'])} open intent(s)" if r["intents"]
                                else "no open intents"))
    lines += [f"  {_intent_text(i)}" for i in r["intents"]]
    if r["newIntents"]:
        lines.append("decided now, not yet in the journal:")
        lines += [f"  {_intent_text(i)}" for i in r["newIntents"]]
    if r["agrees"]:
        lines.append("agrees with what is written")
    else:
        lines.append("differs from what is written (the controller would write):")
        lines += [f"  {d['part']}" + (f" {d['field']}" if d["field"] else "")
                  + f": {_value(d['written'])} -> {_value(d['decided'])}"
                  for d in r["differences"]]
    return "\n".join(lines) + "\n"


def _written_text(w: dict[str, Any]) -> list[str]:
    out = []
    verdict = w["verdict"]
    if isinstance(verdict, dict):
        out.append(f"verdict: {verdict.get('phase')}"
                   + (f" ({verdict['reason']})" if verdict.get("reason") else "")
                   + (f"  [{verdict['rule']}]" if verdict.get("rule") else "")
                   + ("  final" if verdict.get("final") else "")
                   + (f"  since {verdict['since']}" if verdict.get("since") else "")
                   + (f"  cause {verdict['cause']}" if verdict.get("cause") else ""))
        if verdict.get("message"):
            out.append(f"  {verdict['message']}")
        if verdict.get("hint"):
            out.append(f"  hint: {verdict['hint']}")
    elif verdict is not None:
        out.append(f"verdict: unreadable: {verdict}")
    else:
        out.append("verdict: none")
    condition = w["condition"]
    if condition is not None:
        out.append(f"condition {condition.get('type')}: {condition.get('status')} "
                   f"{condition.get('reason') or ''}".rstrip())
        if condition.get("message"):
            out.append(f"  {condition['message']}")
    out += [f"{path}: {_value(value)}" for path, value in w["status"].items()]
    out.append(f"stored state: {w['state'] or 'none'}")
    return out


def _intent_text(i: dict[str, Any]) -> str:
    target = " ".join(f"{k} {i[k]}" for k in ("pod", "task") if i.get(k))
    return (f"{i['action']}" + (f" {target}" if target else "")
            + f"  [{i['policy']} at {i['rule']}]  step {i.get('step', 0)}"
            + (f", {i['attempts']} refused" if i.get("attempts") else "")
            + (f", since {i['since']}" if i.get("since") else "")
            + (f": {i['reason']}" if i.get("reason") else ""))


def _value(value: Any) -> str:
    return "none" if value is None else json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# The command


def _main(args: argparse.Namespace) -> int:
    from runtime.controller import kube   # the Kubernetes client: only when the command runs

    config = args.kubeconfig or environment.kubeconfig(os.environ)
    return command(args, sys.stdout, sys.stderr,
                   lambda: kube.Client.connect(config, timeout=REQUEST_TIMEOUT),
                   lambda: datetime.now(timezone.utc),
                   default_namespace=lambda: kube.default_namespace(config))


def command(args: argparse.Namespace, out: TextIO, err: TextIO, connect: Callable[[], Any],
            clock: Callable[[], datetime],
            default_namespace: Callable[[], str | None] = lambda: None) -> int:
    """`rulec why` with its connection given (`connect` makes the client, `clock` says now):
    every failure is one line on `err` and exit 2."""
    from runtime.controller import kube

    try:
        target, paths = _target(args.target, args.rules)
        rules = inputs.load_plan(paths)
        namespace = args.namespace or default_namespace() or "default"
        client = connect()
        try:
            result = look(client, rules, target, namespace, clock)
        finally:
            close = getattr(client, "close", None)
            if close is not None:
                close()
    except api.InputError as error:
        print(f"rulec why: {error}", file=err)
        return TROUBLE
    except (Trouble, kube.KubeError) as error:
        print(f"rulec why: {_one_line(str(error))}", file=err)
        return TROUBLE
    out.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n" if args.format == "json"
              else text(result))
    return AGREES if result["agrees"] else DIFFERS


def look(client: kube.Client, rules: planlib.Plan, target: str, namespace: str,
         clock: Callable[[], datetime]) -> dict[str, Any]:
    """The report on KIND/NAME in `namespace` (Trouble, or the client's KubeError, when there
    is none to make)."""
    from runtime.controller import kube

    resource, slash, name = target.partition("/")
    if not slash or not resource or not name or "/" in name:
        raise Trouble(f"{target!r}: expected KIND/NAME, e.g. job/train")
    spelled = Spelled.of(resource)
    kind = resolve(rules, spelled)
    if kind is None:
        try:
            kind = resolve(rules, spelled, short_names(client, rules))
        except kube.KubeError as error:
            raise _not_in_plan(rules, spelled, "; short names not looked up: "
                                               f"{_one_line(str(error))}") from None
        if kind is None:
            raise _not_in_plan(rules, spelled)
    try:
        live = read(client, rules, kind, namespace, name, clock())
    except kube.NotFound as error:
        raise Trouble(f"{_resource_name(kind)} {namespace}/{name} not found: "
                      f"{error.message}") from None
    return report(live)


def _target(given: str | None, rules: list[str]) -> tuple[str, list[str]]:
    """KIND/NAME and the rules paths. `--rules PATH...` takes every word up to the next option,
    so `--rules rules/ job/train` swallows the job: a word that is no file or folder, not named
    like rules or a plan, and shaped KIND/NAME is the job."""
    if given is not None:
        return given, rules
    jobs = [r for r in rules if not os.path.exists(r) and not r.endswith((".rules", ".json"))
            and re.fullmatch(r"[A-Za-z][\w.-]*/[\w.-]+", r)]
    if len(jobs) != 1 or len(rules) < 2:
        raise Trouble("the following arguments are required: KIND/NAME")
    return jobs[0], [r for r in rules if r != jobs[0]]


def _one_line(message: str) -> str:
    return re.sub(r"\s+", " ", message).strip()
