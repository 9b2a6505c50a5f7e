"""The `rulec test` suite format: cases of inputs and expected outputs, run against rules.

A suite is a YAML file (`suite.yaml` or `*.suite.yaml`) next to its `.rules` files:

    rules: [vcjob.rules]            # default: every .rules file in the suite's folder
    defaults: {now: "2024-05-01T12:10:00Z", job: job.yaml}
    cases:
      - name: OOMKilled master fails the job
        pods: [pods/master-oomkilled.yaml]
        expect:
          phase: Failed
          message: {regex: "container main OOMKilled \\(exit 137\\)"}
          actions: []

Objects are inline or file names relative to the suite. A case with `steps` runs them in order:
each step inherits the previous step's inputs, its state (evaluation) or patched pod (mutation),
and `after: 30s` advances the clock. Expectations are compared by projection: every key given
must match (strings exactly or `{regex: ...}`, lists item by item and of equal length, objects as
subsets) and a mismatch is shown as a unified diff of expected against actual. The full
reference is docs/evaluation.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Mapping

import yaml

from rulec import api
from rulec.commands import inputs
from runtime import describe, evaluator, functions, mutator, objects, state
from runtime import patch as patchlib
from runtime import plan as planlib

EVAL_EXPECT = ("phase", "reason", "message", "rule", "final", "cause", "events", "actions",
               "state", "wakeAt", "problems")
MUTATE_EXPECT = ("patch", "pod", "applied", "kind", "error")
SHARED_EXPECT = ("explain",)
INPUTS = ("now", "after", "job", "pods", "state", "pod", "owner", "namespace", "namespaceLabels")
CASE_KEYS = ("name", "steps", "expect", "explain") + INPUTS
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Step:
    inputs: Mapping[str, Any]  # as written; resolved against the previous step when run
    expect: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Suite:
    path: str
    rules: tuple[str, ...]
    defaults: Mapping[str, Any]
    cases: tuple[Case, ...]

    @property
    def folder(self) -> str:
        return os.path.dirname(self.path) or "."


@dataclass(frozen=True, slots=True)
class Outcome:
    suite: str
    case: str
    passed: bool
    report: str = ""  # a diff
    updated: tuple[str, ...] = field(default=())  # golden files written
    error: str = ""  # an input the case could not use (a file, a missing `job`): exit 2


def is_suite(name: str) -> bool:
    return name in ("suite.yaml", "suite.yml") or name.endswith((".suite.yaml", ".suite.yml"))


def find(paths: list[str]) -> list[str]:
    """Suite files under the given paths; a file named explicitly is a suite whatever its name.
    In folders only regular files count (a FIFO would block)."""
    found: list[str] = []
    for given in paths:
        if os.path.isdir(given):
            for root, dirs, files in os.walk(given):
                dirs.sort()
                found.extend(os.path.join(root, f) for f in sorted(files)
                             if is_suite(f) and os.path.isfile(os.path.join(root, f)))
        elif os.path.isfile(given):
            found.append(given)
        else:
            raise api.InputError(f"{given}: no such file or directory")
    return list(dict.fromkeys(os.path.normpath(f) for f in found))


# ---------------------------------------------------------------------------------------------
# Loading


def load(path: str) -> Suite:
    docs = inputs.parse(inputs.read_text(path), path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise api.InputError(f"{path}: a suite is one YAML mapping with `cases`")
    doc = {k: v for k, v in docs[0].items() if not str(k).startswith("x-")}  # x-*: anchors only
    _keys(doc, ("rules", "defaults", "cases"), path)
    folder = os.path.dirname(path) or "."
    rules = doc.get("rules")
    if rules is None:
        rules = sorted(f for f in os.listdir(folder) if f.endswith(".rules"))
        if not rules:
            raise api.InputError(f"{path}: no `rules` given and no .rules file beside the suite")
    elif isinstance(rules, str):
        rules = [rules]
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise api.InputError(f"{path}: `rules` is a file name or a list of them")
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise api.InputError(f"{path}: `defaults` is a mapping")
    _keys(defaults, INPUTS, f"{path}: defaults")
    _inputs(defaults, f"{path}: defaults")
    cases = doc.get("cases")
    if not isinstance(cases, list) or not cases:
        raise api.InputError(f"{path}: `cases` is a non-empty list")
    loaded = tuple(_case(c, i, path) for i, c in enumerate(cases))
    names = [c.name for c in loaded]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise api.InputError(f"{path}: case names must be unique: {', '.join(duplicates)}")
    return Suite(path, tuple(os.path.normpath(os.path.join(folder, r)) for r in rules), defaults, loaded)


def _case(raw: Any, index: int, path: str) -> Case:
    where = f"{path}: cases[{index}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise api.InputError(f"{where}: a case is a mapping with a `name`")
    where = f"{path}: case {raw['name']!r}"
    _keys(raw, CASE_KEYS, where)
    own = {k: raw[k] for k in INPUTS + ("explain",) if k in raw}
    _inputs(own, where)
    if "steps" in raw:
        if "expect" in raw:
            raise api.InputError(f"{where}: give `expect` in each step, not beside `steps`")
        steps = raw["steps"]
        if not isinstance(steps, list) or not steps:
            raise api.InputError(f"{where}: `steps` is a non-empty list")
        out = []
        for i, s in enumerate(steps):
            if not isinstance(s, dict):
                raise api.InputError(f"{where}: steps[{i}] is a mapping")
            _keys(s, INPUTS + ("expect", "explain"), f"{where}: steps[{i}]")
            step_inputs = {k: s[k] for k in INPUTS + ("explain",) if k in s}
            _inputs(step_inputs, f"{where}: steps[{i}]")
            out.append(Step({**own, **step_inputs} if i == 0 else step_inputs,
                            _expect(s.get("expect"), f"{where}: steps[{i}]")))
        return Case(raw["name"], tuple(out))
    return Case(raw["name"], (Step(own, _expect(raw.get("expect"), where)),))


def _expect(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict) or not raw:
        raise api.InputError(f"{where}: `expect` is a non-empty mapping")
    _keys(raw, EVAL_EXPECT + MUTATE_EXPECT + SHARED_EXPECT, f"{where}: expect")
    if any(k in raw for k in EVAL_EXPECT) and any(k in raw for k in MUTATE_EXPECT if k != "error"):
        raise api.InputError(f"{where}: expect mixes evaluation and mutation keys")
    for key, want in raw.items():
        if isinstance(want, dict) and set(want) == {"golden"} and (
                not isinstance(want["golden"], str) or not want["golden"] or "\0" in want["golden"]):
            raise api.InputError(f"{where}: expect: {key}: `golden` is a file name")
        _patterns(want, f"{where}: expect: {key}")
    return raw


def _patterns(want: Any, where: str) -> None:
    """Every `{regex: ...}` of an expectation compiles."""
    stack = [want]
    while stack:
        item = stack.pop()
        if isinstance(item, dict) and set(item) == {"regex"}:
            try:
                re.compile(item["regex"])
            except (re.error, TypeError) as err:
                raise api.InputError(f"{where}: `regex` {item['regex']!r} is not a regular "
                                     f"expression: {err}") from None
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _inputs(given: Mapping[str, Any], where: str) -> None:
    """The inputs that can be checked without reading files: times, durations, types."""
    if "now" in given:
        _time(given["now"], where)
    if "after" in given:
        after = given["after"]
        try:
            if isinstance(after, bool) or not isinstance(after, (str, int, float)):
                raise ValueError
            functions.seconds(str(after))
        except ValueError:
            raise api.InputError(f"{where}: `after` is a duration such as 30s or 1h30m, not "
                                 f"{after!r}") from None
    for key, allowed, what in (
            ("job", (str, dict), "a file name or an object"),
            ("pod", (str, dict), "a file name or an object"),
            ("owner", (str, dict), "a file name or an object"),
            ("pods", (str, list), "a file name or a list (of objects or file names)"),
            ("state", (str, dict), "a file name or a state object"),
            ("namespace", (str,), "a name"),
            ("explain", (bool,), "true or false")):
        if key in given and not isinstance(given[key], allowed):
            raise api.InputError(f"{where}: `{key}` is {what}, not {given[key]!r}")


def _keys(raw: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in raw:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            more = f" (did you mean `{hint[0]}`?)" if hint else ""
            raise api.InputError(f"{where}: unknown key `{key}`{more}")


# ---------------------------------------------------------------------------------------------
# Running


def eval_result(plan: planlib.Plan, job: dict[str, Any], candidates: list[dict[str, Any]],
                prior: Any, now: datetime, explain: bool = False,
                where: str = "the job") -> dict[str, Any]:
    """What `rulec eval` prints: the evaluation of a job and its pods, as JSON.

    `prior` is the stored state (its JSON, or an earlier eval output holding it); None reads the
    job's own state annotation. Pods that do not belong to the job are left out and reported.
    `where` names the job in errors (its file).
    """
    try:
        kind = evaluator.kind_for(plan, job)
    except evaluator.UnknownKind as err:
        known = ", ".join(f"{k.api_version} {k.kind}" for k in plan.kinds) or "none"
        raise api.InputError(f"{where}: {err} (the rules declare: {known})") from None
    members = evaluator.pods_of(kind, job, candidates, now)
    if prior is None:
        text = objects.annotation(job, state.ANNOTATION)
    elif isinstance(prior, dict) and "state" in prior and "v" not in prior:
        text = json.dumps(prior["state"])
    else:
        text = prior if isinstance(prior, str) else json.dumps(prior)
    decoded = state.decode(text)
    result = evaluator.evaluate(kind, job, members, decoded.state, now, explain=explain)
    out = evaluator.to_json(result)
    problems = list(out.pop("problems", []))
    if decoded.error:
        problems.insert(0, decoded.error)
    strangers = [objects.name(p) for p in candidates if not any(p is m for m in members)]
    if strangers:
        problems.append(f"{len(strangers)} pod(s) do not belong to the job and were left out: "
                        + ", ".join(str(s) for s in strangers))
    if problems:
        out["problems"] = problems
    if "explain" in out:
        out["explain"] = out.pop("explain")
    return out


def mutate_result(plan: planlib.Plan, pod: dict[str, Any], owner: dict[str, Any] | None,
                  namespace: str | None, explain: bool = False,
                  namespace_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What `rulec mutate` prints: the patch, the patched pod, and the injections applied.

    As the API server does, every webhook entry that serves the namespace (by its labels) is
    called in turn on the pod the previous one patched; without labels, only the entry for
    every namespace is. As the webhook does, a plan that fails open leaves a failing injection
    out and applies the others (`error` then says which failed); one that fails closed is
    refused whole (no patch)."""
    entries = mutator.serving(plan, dict(namespace_labels)) if namespace_labels is not None else (None,)
    injector = mutator.prepare(plan)
    fail_open = plan.webhook.failure_policy != "Fail"
    patch: list[dict[str, Any]] = []
    applied: list[str] = []
    failed: list[mutator.MutationError] = []
    current, kind = pod, None
    try:
        for entry in entries:
            mutation = mutator.mutate(injector, current, owner, namespace, entry, isolate=fail_open)
            patch += mutation.patch
            applied += mutation.applied
            failed += mutation.failed
            kind = kind or mutation.kind
            current = patchlib.apply(current, mutation.patch)
    except mutator.MutationError as err:
        return {"error": str(err), "patch": [], "pod": pod, "applied": [], "kind": None}
    out: dict[str, Any] = {"patch": patch, "pod": current, "applied": applied, "kind": kind}
    if failed:
        out["error"] = "; ".join(str(err) for err in failed)
    if explain:
        out["explain"] = _explain_mutation(plan, pod, owner, namespace, applied, kind, entries)
    return out


def _explain_mutation(plan: planlib.Plan, pod: dict[str, Any], owner: dict[str, Any] | None,
                      namespace: str | None, applied: list[str], kind: str | None,
                      entries: tuple[str | None, ...]) -> list[dict[str, Any]]:
    """Per injection: applied, or the first reason it was not."""
    return [{"rule": str(i.span), "injection": i.name, "matched": i.name in applied,
             "why": "applied" if i.name in applied
             else _not_injected(plan, i, pod, owner, namespace, kind, entries)}
            for i in plan.injections]


def _not_injected(plan: planlib.Plan, injection: planlib.Injection, pod: dict[str, Any],
                  owner: dict[str, Any] | None, namespace: str | None, kind: str | None,
                  entries: tuple[str | None, ...]) -> str:
    """Why an injection left the pod alone: its owner kind, its namespace's labels, its record,
    its filter, or nothing to change (found by applying it once more without its filter)."""
    if kind not in injection.kinds:
        return f"the pod's owner kind ({kind or 'none declared'}) is not one of {', '.join(injection.kinds)}"
    if injection.namespace_selector not in entries:
        return (f"the namespace's labels (as given) do not match its namespace selector "
                f"{injection.namespace_selector}")
    annotations = objects.annotations(pod)
    if f'"{injection.name}@' in str(annotations.get(mutator.RECORD_ANNOTATION, "")):
        return "already injected (recorded on the pod)"
    def applies(match: Any) -> bool:
        alone = dataclasses.replace(plan, injections=(dataclasses.replace(injection, match=match),))
        selector = alone.injections[0].namespace_selector
        return bool(mutator.mutate(mutator.prepare(alone), pod, owner, namespace, selector).applied)

    try:
        if not applies(None):
            return "matched, but there was nothing to change"
        term = injection.match
        while isinstance(term, planlib.And):  # narrow down to the first false term
            term = next(t for t in term.args if not applies(t))
    except mutator.MutationError as err:
        return f"cannot apply: {err.message}"
    return f"match filter false: {describe.filter(term)}"


def _resolve(value: Any, folder: str, what: str) -> Any:
    """An inline value, or the contents of the file it names; objects and pods checked."""
    if what in ("job", "owner", "pod"):
        if isinstance(value, str):
            return inputs.read_object(os.path.join(folder, value), "pod" if what == "pod" else "object")
        if what == "pod":
            return inputs.pod(value, "`pod`", named=False)
        return inputs.kube_object(value, f"`{what}`")
    if what == "pods":
        if isinstance(value, str):
            return inputs.read_objects(os.path.join(folder, value))
        found: list[dict[str, Any]] = []
        for n, item in enumerate(value):
            found += (inputs.read_objects(os.path.join(folder, item)) if isinstance(item, str)
                      else inputs.pods([item], f"`pods` item {n + 1}"))
        return inputs.unique(found, "`pods`")
    if what == "state" and isinstance(value, str) and not value.lstrip().startswith("{"):
        return inputs.read_text(os.path.join(folder, value))
    return value


def _time(value: Any, where: str) -> datetime:
    moment = functions.timestamp(value) if isinstance(value, str) else None
    if moment is None:
        raise api.InputError(f"{where}: `now` is an RFC 3339 time such as 2024-05-01T12:00:00Z, "
                             f"not {value!r}")
    return moment


def run_case(suite: Suite, case: Case, plan: planlib.Plan, update: bool = False) -> Outcome:
    """Run every step of a case; the first failing step decides the outcome, and an input it
    cannot use (a file, a missing `job`) makes it an error."""
    current: dict[str, Any] = dict(suite.defaults)
    previous: dict[str, Any] | None = None
    now: datetime | None = None
    updated: list[str] = []
    label = ""
    try:
        for number, step in enumerate(case.steps, 1):
            given = step.inputs
            current.update({k: v for k, v in given.items() if k not in ("after", "state")})
            if "now" in given or now is None and "now" in current:
                now = _time(current["now"], suite.path)
            if "after" in given:
                if now is None:
                    raise api.InputError("`after` needs a `now` to start from")
                now += timedelta(seconds=functions.seconds(str(given["after"])))
            label = f"step {number}: " if len(case.steps) > 1 else ""
            if _is_mutation(step.expect, current):
                actual = _mutate_step(suite, plan, current, given, previous)
            else:
                actual = _eval_step(suite, plan, current, given, previous, now)
            ok, report, written = compare(step.expect, actual, suite.folder, update)
            updated += written
            if not ok:
                return Outcome(suite.path, case.name, False, label + report, tuple(updated))
            previous = actual
    except api.InputError as err:
        return Outcome(suite.path, case.name, False, "", tuple(updated), error=label + str(err))
    except patchlib.PatchError as err:
        return Outcome(suite.path, case.name, False, f"{label}error: {err}", tuple(updated))
    return Outcome(suite.path, case.name, True, "", tuple(updated))


def _is_mutation(expect: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    if any(k in expect for k in MUTATE_EXPECT if k != "error"):
        return True
    return not any(k in expect for k in EVAL_EXPECT) and "pod" in current and "job" not in current


def _mutate_step(suite: Suite, plan: planlib.Plan, current: Mapping[str, Any], given: Mapping[str, Any],
                 previous: dict[str, Any] | None) -> dict[str, Any]:
    """A mutation; a step that names no pod mutates the previous step's patched pod."""
    if previous is not None and "pod" not in given and "pod" in previous:
        pod = previous["pod"]
    elif "pod" in current:
        pod = _resolve(current["pod"], suite.folder, "pod")
    else:
        raise api.InputError("a mutation case needs a `pod`")
    owner = _resolve(current["owner"], suite.folder, "owner") if "owner" in current else None
    labels = current.get("namespaceLabels")
    if labels is not None and not (isinstance(labels, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise api.InputError(f"{suite.path}: `namespaceLabels` maps label keys to string values")
    return mutate_result(plan, pod, owner, current.get("namespace"),
                         bool(current.get("explain")), labels)


def _eval_step(suite: Suite, plan: planlib.Plan, current: Mapping[str, Any], given: Mapping[str, Any],
               previous: dict[str, Any] | None, now: datetime | None) -> dict[str, Any]:
    """An evaluation; the prior state is the step's own, else the previous step's result."""
    if "job" not in current:
        raise api.InputError("an evaluation case needs a `job` (here or in defaults)")
    if now is None:
        raise api.InputError("an evaluation case needs `now` (here or in defaults)")
    if "state" in given:
        prior = _resolve(given["state"], suite.folder, "state")
    elif previous is not None and "state" in previous:
        prior = previous["state"]
    else:
        prior = _resolve(current["state"], suite.folder, "state") if "state" in current else None
    job = _resolve(current["job"], suite.folder, "job")
    candidates = _resolve(current.get("pods", []), suite.folder, "pods")
    return eval_result(plan, job, candidates, prior, now, bool(current.get("explain")),
                       where=os.path.join(suite.folder, current["job"])
                       if isinstance(current["job"], str) else "`job`")


# ---------------------------------------------------------------------------------------------
# Comparing


def compare(expect: Mapping[str, Any], actual: Mapping[str, Any], folder: str,
            update: bool = False) -> tuple[bool, str, list[str]]:
    """Whether `actual` meets `expect`, a diff when it does not, and golden files written."""
    written: list[str] = []
    wanted: dict[str, Any] = {}
    seen: dict[str, Any] = {}
    golden_report = ""
    for key, want in expect.items():
        got = actual.get(key, _MISSING)
        if isinstance(want, dict) and set(want) == {"golden"}:
            ok, text, wrote = _golden(os.path.join(folder, want["golden"]), got, update)
            written += wrote
            if not ok:
                golden_report += text
            continue
        wanted[key] = want
        seen[key] = project(want, got)
    if seen == wanted and not golden_report:
        return True, "", written
    report = golden_report
    if seen != wanted:
        report = _diff(_dump(wanted), _dump(seen), "expected", "actual") + report
    return False, report, written


def project(want: Any, got: Any) -> Any:
    """`got` seen through `want`: equal to `want` exactly when `got` meets it."""
    if isinstance(want, dict) and set(want) == {"regex"} and isinstance(want["regex"], str):
        if isinstance(got, str) and re.search(want["regex"], got):
            return want
        return "<missing>" if got is _MISSING else got
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: project(v, got.get(k, _MISSING)) for k, v in want.items()}
    if isinstance(want, list) and isinstance(got, list):
        if len(want) == len(got):
            return [project(w, g) for w, g in zip(want, got)]
        # Lengths differ: show every actual item, cut to the keys the expected items name.
        keys = list(dict.fromkeys(k for w in want if isinstance(w, dict) for k in w))
        return [{k: g[k] for k in keys if k in g} if keys and isinstance(g, dict) else g for g in got]
    if got is _MISSING:
        return None if want is None else "<missing>"  # null and absent are the same
    if want == got and type(want) is type(got):
        return want
    return got


def _golden(path: str, got: Any, update: bool) -> tuple[bool, str, list[str]]:
    text = _dump(got)
    if update:
        Path(path).write_text(text, encoding="utf-8")
        return True, "", [path]
    try:
        expected = Path(path).read_text(encoding="utf-8")
    except OSError:
        return False, f"golden file {path} is missing (run with --update to write it)\n", []
    if expected == text:
        return True, "", []
    return False, _diff(expected, text, path, "actual"), []


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=100)


def _diff(expected: str, actual: str, a: str, b: str) -> str:
    return "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), a, b))

