"""Which policies of a batch/v1 Job kind the Job controller can carry out itself.

Kubernetes' Job has a `podFailurePolicy` of its own (FailJob, Ignore, Count, FailIndex on exit
codes or pod conditions), a `backoffLimit` and a `backoffLimitPerIndex`. A policy the Job
controller can take needs no engine to watch for it: this module decides, for each policy of a
batch Job kind in a compiled plan (the JSON of docs/plan.md, what the runtime reads), whether it
goes native (and into which rule) or stays with the engine (and why, with a stable code of
`rulec.diagnostics.NATIVE_CODES`), and builds the Job `spec` fragment that says it natively.

The first matching policy wins and nothing is ever reordered, so only the longest prefix of
native policies, in the order the engine tries them, may go native; a `count` goes native only
when every failure policy does and the last is the unfiltered `count` (the Job's own default
handling), since the Job's one budget counts every failure no rule takes. docs/native.md has the
table, the codes and the traps. Pure: no I/O, the plan in, values out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from rulec.diagnostics import NATIVE_BY_CODE

Json = dict[str, Any]

INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
MAX_RULES = 20          # rules of a podFailurePolicy (API validation)
MAX_CODES = 255         # values of one onExitCodes (API validation)
UNLIMITED = 2147483647  # the largest int32: a backoff limit that is never reached
FAIL_REASON = "PodFailurePolicy"
EXIT_MESSAGE = ("Container {container} for pod {namespace}/{pod} failed with exit code "
                "{exit_code} matching FailJob rule at index {index}")
CONDITION_MESSAGE = "Pod {namespace}/{pod} has condition {type} matching FailJob rule at index {index}"
BACKOFF_REASON = "BackoffLimitExceeded"
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"
# Events the engine tries before `pod failed` for the same pod (an evicted or deleted pod's
# occurrence names them first): a policy on one of them takes failures a rule would take.
FIRST_EVENTS = ("podEvicted", "podDeleted")
# The limits read from the Job itself, as `max <<...>>` says them.
LIMIT_EXPRS = {"job": "spec.backoffLimit", "task": "spec.backoffLimitPerIndex"}


@dataclass(frozen=True, slots=True)
class ExitCodes:
    """A rule's `onExitCodes`: values sorted and unique, as the API server wants them."""

    operator: str                 # In | NotIn
    values: tuple[int, ...]
    container: str | None = None

    def to_json(self) -> Json:
        out: Json = {"operator": self.operator, "values": list(self.values)}
        if self.container is not None:
            out["containerName"] = self.container
        return out


@dataclass(frozen=True, slots=True)
class Rule:
    """One podFailurePolicy rule: exit codes or condition patterns (type, status), never both."""

    action: str                   # FailJob | Ignore | Count | FailIndex
    exit_codes: ExitCodes | None = None
    conditions: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> Json:
        if self.exit_codes is not None:
            return {"action": self.action, "onExitCodes": self.exit_codes.to_json()}
        return {"action": self.action,
                "onPodConditions": [{"type": t, "status": s} for t, s in self.conditions]}


@dataclass(frozen=True, slots=True)
class Decision:
    """Where one policy went: `rule` (0-based, as the Job controller's messages count) or the
    Job's default handling when native; `code` and `reason` when it stays with the engine."""

    position: int                 # 1-based, the kind's policies in plan order
    policy: str                   # the policy's id
    where: str                    # path:line:column
    rule: int | None = None
    default: bool = False
    code: str | None = None
    reason: str = ""

    @property
    def native(self) -> bool:
        return self.code is None

    def text(self) -> str:
        if self.code is not None:
            return f"engine: {self.code} {self.reason}"
        if self.default:
            return f"native: the Job's default handling ({self.reason})"
        return f"native: podFailurePolicy rule {self.rule}"

    def to_json(self) -> Json:
        return {"position": self.position, "policy": self.policy, "where": self.where,
                "native": self.native, "rule": self.rule, "default": self.default,
                "code": self.code,
                "name": NATIVE_BY_CODE[self.code].name if self.code else None,
                "reason": self.reason, "decision": self.text()}


@dataclass(frozen=True, slots=True)
class KindReport:
    """The decisions for one batch Job kind, in plan order, and the native fragment."""

    kind: str
    where: str
    decisions: tuple[Decision, ...]
    rules: tuple[Rule, ...]
    per_index: bool               # the kind counts per index (`fail task`, `per task`)
    limit: int | None             # the Job's budget; None: the one in the Job's manifest
    api: str = "batch/v1 Job"     # the kind's apiVersion and kind

    @property
    def native_count(self) -> int:
        return sum(d.native for d in self.decisions)

    def fragment(self) -> Json:
        """The Job `spec` fields that say natively what the native policies say."""
        out: Json = {}
        if self.limit == UNLIMITED:
            # Never reached, per job and, where the kind counts per index anywhere, per index.
            out["backoffLimit"] = UNLIMITED
            if self.per_index:
                out["backoffLimitPerIndex"] = UNLIMITED
        elif self.limit is not None:
            out["backoffLimitPerIndex" if self.per_index else "backoffLimit"] = self.limit
        if self.rules:
            out["podFailurePolicy"] = {"rules": [r.to_json() for r in self.rules]}
        return out

    def to_json(self) -> Json:
        return {"kind": self.kind, "api": self.api, "where": self.where,
                "policies": [d.to_json() for d in self.decisions],
                "native": self.native_count, "total": len(self.decisions),
                "fragment": self.fragment()}


def decide(plan: Mapping[str, Any]) -> tuple[KindReport, ...]:
    """A report for every batch/v1 Job kind of a compiled plan, in plan order."""
    return tuple(decide_kind(k, plan.get("injections", ()))
                 for k in plan.get("kinds", ()) if is_batch_job(k))


def decide_every_kind(plan: Mapping[str, Any]) -> tuple[KindReport, ...]:
    """A report for every kind of a compiled plan, in plan order: a batch/v1 Job kind's as
    `decide` gives it; another kind's policies all stay with the engine (N120: rulec compiles
    failure handling only to the Job's podFailurePolicy)."""
    out = []
    for kind in plan.get("kinds", ()):
        if is_batch_job(kind):
            out.append(decide_kind(kind, plan.get("injections", ())))
            continue
        api = f"{kind.get('apiVersion')} {kind.get('kind')}"
        decisions = tuple(
            Decision(n, p["id"], _where(p["span"]), code="N120",
                     reason=f"{api} has no failure policy rulec compiles to")
            for n, p in enumerate(kind["policies"], 1))
        out.append(KindReport(kind["name"], _where(kind["span"]), decisions, (), False, None, api))
    return tuple(out)


def is_batch_job(kind: Mapping[str, Any]) -> bool:
    return kind.get("apiVersion") == "batch/v1" and kind.get("kind") == "Job"


def decide_kind(kind: Mapping[str, Any], injections: Iterable[Mapping[str, Any]] = ()) -> KindReport:
    """The decisions for one kind of the plan; `injections` are the plan's (a sidecar they add
    is a container the rules never read, N113)."""
    facts = _Facts.of(kind, injections)
    walk = _Walk(facts, counts=True)
    walk.run()
    if not walk.complete and walk.has_counts:
        # A count goes native only when every failure policy does and the last is the
        # unfiltered count (N115): decide again with the counts kept by the engine.
        walk = _Walk(facts, counts=False, why=walk.first_engine)
        walk.run()
    by_id = walk.decided
    decisions = tuple(by_id[p["id"]] for p in kind["policies"])
    # The Job's budget: the unfiltered count's when every failure policy went native; else,
    # with some rules native, one never reached, so that the failures no rule takes are the
    # engine's (the rules count none of them); with nothing native, the Job's own.
    limit: int | None = None
    if walk.complete:
        limit = walk.default_limit
    elif walk.rules:
        limit = UNLIMITED
    return KindReport(kind["name"], _where(kind["span"]), decisions, tuple(walk.rules),
                      walk.mode == "task" or facts.per_index, limit)


# ------------------------------------------------------------------ internals

@dataclass(frozen=True, slots=True)
class _Facts:
    """What the decisions read of a kind besides its policies."""

    policies: tuple[Json, ...]
    index_task: bool              # the task is the completion index label
    some_containers: bool         # exit codes read from some containers only (N113)
    per_index: bool               # some failure policy fails or counts per task

    @classmethod
    def of(cls, kind: Mapping[str, Any], injections: Iterable[Mapping[str, Any]]) -> _Facts:
        task = kind.get("task") or {}
        sidecars = any(op.get("op") == "sidecar" for i in injections
                       if not i.get("kinds") or kind["name"] in i["kinds"] for op in i["ops"])
        primary = (kind.get("primaryContainers") is not None
                   or kind.get("primaryContainerPrefix") is not None)
        per_index = any(_per_task(p["action"]) for p in kind["policies"] if _competes(p))
        return cls(tuple(kind["policies"]), task.get("label") == INDEX_LABEL, sidecars or primary,
                   per_index)


class _Engine(Exception):
    """A policy stays with the engine: its code and why."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Budget:
    key: str
    limit: int | None             # None: the Job's own (`max <<spec.backoffLimit>>`)
    per: str                      # job | task


class _Walk:
    """One pass over a kind's failure policies in the order the engine tries them."""

    def __init__(self, facts: _Facts, *, counts: bool, lookahead: bool = True,
                 why: str | None = None) -> None:
        self.facts = facts
        self.counts = counts      # whether a count may go native at all
        self.why = why            # without counts: the failure policy the first pass kept
        self.first_engine: str | None = None
        self.lookahead = lookahead  # whether merges look ahead to a FailJob's message index
        self.order: list[Json] = _tried(facts.policies)
        self.decided: dict[str, Decision] = {}
        self.rules: list[Rule] = []
        self.mergeable = False    # the last rule may take more condition patterns
        self.budget: _Budget | None = None
        self.mode: str | None = None       # job | task: how failures are counted
        self.blocked: str | None = None    # why every later failure policy stays
        self.default_limit: int | None = None
        self.default_seen = False
        self.engine_failure = False        # some failure policy stays with the engine
        self.has_counts = False

    @property
    def complete(self) -> bool:
        """Every failure policy went native, the last one the Job's default handling."""
        return self.default_seen and not self.engine_failure

    def run(self) -> None:
        positions = {p["id"]: n for n, p in enumerate(self.facts.policies, 1)}
        for at, policy in enumerate(self.order):
            n = positions[policy["id"]]
            try:
                self.decided[policy["id"]] = self.take(policy, n, at)
            except _Engine as engine:
                self.decided[policy["id"]] = Decision(n, policy["id"], _where(policy["span"]),
                                                      code=engine.code, reason=engine.reason)
                shadowed = engine.code == "N107" and self.default_seen and self.blocked is None
                if _competes(policy) and not shadowed:
                    self.engine_failure = True
                    self.first_engine = self.first_engine or f"{policy['id']}: {engine.code}"
                    if self.blocked is None:
                        self.blocked = f"after {policy['id']} ({engine.code}), which the engine keeps"

    def take(self, policy: Json, n: int, at: int) -> Decision:
        event = policy["event"]
        if not _competes(policy):
            raise _Engine("N102", f"`{_event_words(policy)}` is no pod failure")
        if self.blocked is not None:
            raise _Engine("N107", f"{self.blocked}: first match wins")
        if self.default_seen:
            raise _Engine("N107", "after the default handling: never reached")
        if event in FIRST_EVENTS:
            raise _Engine("N102", f"`{_event_words(policy)}` is tried before `pod failed`; "
                                  "the Job controller has no such event")
        if not policy["evicted"]:
            raise _Engine("N110", "`pod failed` leaves evicted pods out; the Job controller's "
                                  "rules take them")
        if policy["task"] is not None:
            raise _Engine("N103", f"scoped to task \"{policy['task']}\"")
        if policy["audit"]:
            raise _Engine("N114", "in audit: it only watches")
        action = policy["action"]
        verb = self.native_action(action)
        if policy["filter"] is None:
            if verb != "Count":
                raise _Engine("N103", "no filter: a rule needs exit codes or pod conditions")
            return self.default(policy, n)
        requirement = _requirement(policy["filter"], self.facts)
        where = _where(policy["span"])
        merge = self._merges(verb, requirement, action) and (
            verb == "FailJob" or not self.lookahead or self._merge_fits(at))
        if len(self.rules) >= MAX_RULES and not merge:
            raise _Engine("N108", f"would be rule {len(self.rules)}: at most {MAX_RULES} rules")
        index = len(self.rules) - 1 if merge else len(self.rules)
        if verb == "FailJob":
            _check_fail_text(action, requirement, index)
        self._commit_budget(verb, action)
        if merge:
            last = self.rules[-1]
            self.rules[-1] = Rule(last.action, None, last.conditions + requirement.conditions)
        else:
            self.rules.append(Rule(verb, requirement.exit_codes, requirement.conditions))
        self.mergeable = requirement.exit_codes is None
        return Decision(n, policy["id"], where, rule=index)

    def default(self, policy: Json, n: int) -> Decision:
        """The unfiltered count: the Job's own handling of a failure no rule takes."""
        budget = _count_budget(policy["action"], self.facts)
        self._commit_budget("Count", policy["action"])
        self.default_seen = True
        self.default_limit = budget.limit
        field = "backoffLimitPerIndex" if budget.per == "task" else "backoffLimit"
        limit = "the Job's" if budget.limit is None else str(budget.limit)
        return Decision(n, policy["id"], _where(policy["span"]), default=True,
                        reason=f"{field}: {limit}")

    def native_action(self, action: Json) -> str:
        """The podFailurePolicy action of a policy's action, or _Engine."""
        verb = action["action"]
        if verb in ("failJob", "ignore", "failTask") and (action["budget"] or action["fallback"]
                                                          or action["delay"]):
            raise _Engine("N111", f"`{_VERBS.get(verb, verb)}` with a budget or a delay")
        if verb == "ignore":
            return "Ignore"
        if verb == "failJob":
            return "FailJob"
        if verb == "failTask":
            if not self.facts.index_task:
                raise _Engine("N112", "`fail task` on a task that is not the completion index")
            self._mode("task", "`fail task`")
            return "FailIndex"
        if verb == "count":
            if not self.counts:
                why = (f"{self.why} stays with the engine" if self.why
                       else "no unfiltered count ends the rules")
                raise _Engine("N115", "the Job's one budget would also count the failures no "
                                      f"rule takes ({why})")
            budget = _count_budget(action, self.facts)
            self._mode(budget.per, "a count per task" if budget.per == "task" else "a count per job")
            if self.budget is not None and self.budget != budget:
                raise _Engine("N111", f"a second budget (`{budget.key}`, max "
                                      f"{_limit_text(budget)}): the Job has one, "
                                      f"`{self.budget.key}`")
            return "Count"
        raise _Engine("N101", f"`{_VERBS.get(verb, verb)}` has no podFailurePolicy action")

    def _mode(self, mode: str, what: str) -> None:
        if self.mode is not None and self.mode != mode:
            raise _Engine("N116", f"{what} beside the budgets "
                                  f"{'per index' if self.mode == 'task' else 'per job'} "
                                  "of the earlier policies")

    def _commit_budget(self, verb: str, action: Json) -> None:
        if verb == "FailIndex":
            self.mode = "task"
        if verb == "Count":
            budget = _count_budget(action, self.facts)
            self.budget = self.budget or budget
            self.mode = budget.per
            self.has_counts = True

    def _merge_fits(self, at: int) -> bool:
        """Whether merging the policy at `at` into the last rule still lets the next FailJob
        whose message names its rule index have that index: merging is optional for Ignore,
        Count and FailIndex (first match wins either way), and is done unless it would leave
        too few rules before that FailJob (the later merges taken as they come)."""
        ahead = next((k for k in range(at + 1, len(self.order))
                      if self.order[k]["action"]["action"] == "failJob"
                      and _message_index(self.order[k]["action"]) is not None), None)
        if ahead is None:
            return True
        trial = _Walk(self.facts, counts=self.counts, lookahead=False)
        trial.rules, trial.mergeable, trial.budget = list(self.rules), self.mergeable, self.budget
        trial.mode, trial.default_seen = self.mode, self.default_seen
        for k in range(at, ahead + 1):
            try:
                trial.take(self.order[k], 0, k)
            except _Engine as engine:
                return k != ahead or engine.code != "N109"
        return True

    def _merges(self, verb: str, requirement: _Requirement, action: Json) -> bool:
        """Whether a condition policy joins the previous rule as more patterns: the same
        action, right after it (first match wins either way); a FailJob whose message names
        another rule index starts a new rule."""
        if not (self.mergeable and self.rules and requirement.exit_codes is None):
            return False
        last = self.rules[-1]
        if last.action != verb:
            return False
        if verb != "FailJob":
            return True
        index = _message_index(action)
        return index is None or index == len(self.rules) - 1


@dataclass(frozen=True, slots=True)
class _Requirement:
    exit_codes: ExitCodes | None
    conditions: tuple[tuple[str, str], ...]


def _requirement(f: Json, facts: _Facts) -> _Requirement:
    """The rule requirement of a filter, or _Engine."""
    leaves = list(_leaves(f))
    ops = {leaf["op"] for leaf in leaves}
    if "exitCode" in ops and "condition" in ops:
        raise _Engine("N104", "exit codes and pod conditions in one filter")
    if f["op"] == "exitCode":
        return _Requirement(_exit_codes(f, facts), ())
    if f["op"] == "condition" or (f["op"] == "or" and ops == {"condition"}
                                  and all(_only_or(f))):
        patterns: list[tuple[str, str]] = []
        for leaf in leaves:
            if leaf["reasons"]:
                raise _Engine("N103", f"condition \"{leaf['type']}\" with a reason: a pattern "
                                      "has a type and a status")
            patterns += [(leaf["type"], s) for s in leaf["status"]]
        return _Requirement(None, tuple(patterns))
    unsupported = sorted(ops - {"exitCode", "condition"})
    what = ", ".join(f"`{o}`" for o in unsupported) if unsupported else f"`{f['op']}`"
    raise _Engine("N103", f"{what} in the filter")


def _leaves(f: Json) -> Iterable[Json]:
    if f["op"] in ("and", "or"):
        for arg in f["args"]:
            yield from _leaves(arg)
    elif f["op"] == "not":
        yield {"op": "not"}
        yield from _leaves(f["arg"])
    else:
        yield f


def _only_or(f: Json) -> Iterable[bool]:
    """For each node: whether it is an `or` or a condition (no `and`, no `not`)."""
    yield f["op"] in ("or", "condition")
    if f["op"] == "or":
        for arg in f["args"]:
            yield from _only_or(arg)


def _exit_codes(f: Json, facts: _Facts) -> ExitCodes:
    if facts.some_containers:
        raise _Engine("N113", "the kind reads exit codes of some containers only (primary "
                              "containers, or sidecars its injections add)")
    total = len(f["codes"]) + sum(hi - lo + 1 for lo, hi in f["ranges"])
    if total > MAX_CODES:
        raise _Engine("N105", f"{total} exit codes: at most {MAX_CODES}")
    values = set(f["codes"])
    for lo, hi in f["ranges"]:
        values.update(range(lo, hi + 1))
    if len(values) > MAX_CODES:
        raise _Engine("N105", f"{len(values)} exit codes: at most {MAX_CODES}")
    operator = "NotIn" if f["negate"] else "In"
    if operator == "In" and 0 in values:
        raise _Engine("N106", "exit 0 in `exit in [...]`: the API server rejects it")
    return ExitCodes(operator, tuple(sorted(values)), f.get("container"))


def _count_budget(action: Json, facts: _Facts) -> _Budget:
    """The Job budget a count keeps, or _Engine."""
    budget = action["budget"]
    if budget is None or action["delay"] is not None:
        raise _Engine("N111", "a count with a delay")
    per = budget["per"]
    if per not in ("job", "task"):
        raise _Engine("N111", f"a budget per {per}: the Job's is per job or per index")
    if per == "task" and not facts.index_task:
        raise _Engine("N112", "a budget per task that is not the completion index")
    limit = budget["max"]
    if isinstance(limit, dict):
        if re.sub(r"\s+", "", limit["expr"]) != LIMIT_EXPRS[per]:
            raise _Engine("N111", f"`max <<{limit['expr']}>>`: the Job's budget is a number or "
                                  f"`<<{LIMIT_EXPRS[per]}>>`")
        limit = None
    fallback = action["fallback"]
    want = "failJob" if per == "job" else "failTask"
    if fallback is None or fallback["action"] != want:
        words = _VERBS[want]
        raise _Engine("N101", f"a count whose fallback is not `{words}`")
    if fallback["budget"] is not None or fallback["delay"] is not None:
        raise _Engine("N111", "a fallback with a budget or a delay of its own")
    reason, message = _text(fallback["reason"]), _text(fallback["message"])
    if per == "job" and (reason not in (None, BACKOFF_REASON)
                         or message not in (None, BACKOFF_MESSAGE)):
        raise _Engine("N109", f"the fallback's reason or message is not `{BACKOFF_REASON}`, "
                              f"\"{BACKOFF_MESSAGE}\"")
    if per == "task" and (reason is not None or message is not None):
        raise _Engine("N109", "a reason or message for `fail task`: the Job controller writes none")
    return _Budget(budget["key"], limit, per)


def _check_fail_text(action: Json, requirement: _Requirement, index: int) -> None:
    reason, message = _text(action["reason"]), _text(action["message"])
    if reason not in (None, FAIL_REASON):
        raise _Engine("N109", f"reason \"{reason}\": the Job controller writes \"{FAIL_REASON}\"")
    if message is None:
        return
    if requirement.exit_codes is not None:
        wanted = {EXIT_MESSAGE.replace("{index}", str(index))}
    else:
        # The Job controller names the condition the pod has: a fixed message can name it only
        # when the policy has one condition type.
        wanted = {CONDITION_MESSAGE.replace("{type}", t).replace("{index}", str(index))
                  for t, _ in requirement.conditions}
    if message not in wanted or len(wanted) > 1:
        shown = " or ".join(f'"{w}"' for w in sorted(wanted))
        raise _Engine("N109", f"message \"{message}\": the Job controller writes {shown}")


def _message_index(action: Json) -> int | None:
    message = _text(action["message"])
    found = re.search(r"matching FailJob rule at index (\d+)$", message or "")
    return int(found.group(1)) if found else None


def _text(template: Sequence[Any] | None) -> str | None:
    """A template as the text it was written as (`{name}` for a placeholder); None: none."""
    if template is None:
        return None
    out = []
    for part in template:
        if isinstance(part, str):
            out.append(part.replace("{", "{{").replace("}", "}}"))
        elif "var" in part:
            out.append("{" + part["var"] + "}")
        else:
            out.append("{<<" + part["expr"] + ">>}")
    return "".join(out)


def _tried(policies: Sequence[Json]) -> list[Json]:
    """The policies in the order the engine tries them for a failed pod (runtime.evaluation.
    policies): the events an evicted or deleted pod is first, task-scoped policies before
    job-wide ones; then `pod failed` the same way; then every other policy, in plan order."""
    out: list[Json] = []
    for event in (*FIRST_EVENTS, "podFailed"):
        these = [p for p in policies if p["event"] == event]
        out += [p for p in these if p["task"] is not None] + [p for p in these if p["task"] is None]
    return out + [p for p in policies if p not in out]


def _competes(policy: Json) -> bool:
    """Whether the engine may give a pod's failure to this policy rather than to a rule."""
    return policy["event"] in (*FIRST_EVENTS, "podFailed")


def _per_task(action: Json | None) -> bool:
    """Whether an action, or its fallback, fails or counts per task."""
    if action is None:
        return False
    budget = action["budget"]
    return (action["action"] == "failTask" or (budget is not None and budget["per"] == "task")
            or _per_task(action["fallback"]))


def _limit_text(budget: _Budget) -> str:
    return f"<<{LIMIT_EXPRS[budget.per]}>>" if budget.limit is None else str(budget.limit)


_VERBS = {"failJob": "fail job", "completeJob": "complete job", "restartJob": "restart job",
          "abortJob": "abort job", "terminateJob": "terminate job", "ignore": "ignore",
          "restartTask": "restart task", "failTask": "fail task", "restartPod": "restart pod",
          "count": "count"}

_EVENT_WORDS = {"podPending": "pod pending", "podRunning": "pod running",
                "podSucceeded": "pod succeeded", "podFailed": "pod failed",
                "podEvicted": "pod evicted", "podDeleted": "pod deleted",
                "containerRestarted": "container restarted", "taskCompleted": "task completed",
                "taskFailed": "task failed", "jobVerdictChanged": "job verdict changed",
                "jobRunningLongerThan": "job running longer than"}


def _event_words(policy: Json) -> str:
    event = str(policy["event"])
    return _EVENT_WORDS.get(event, event)


def _where(span: Mapping[str, Any]) -> str:
    return f"{span['path']}:{span['line']}:{span['column']}"
