"""Checking: every rule the grammar cannot express, collected as diagnostics in one pass.

Never raises on user error. Cross-file references are resolved over the whole program; when a
file did not parse, "unknown name" errors are held back (the name may live in that file).
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from rulec import diagnostics, expr, names, nodes
from rulec.diagnostics import Diagnostic, Note
from rulec.source import SourceFile, Span
from runtime import vocabulary

INT32 = (-2**31, 2**31 - 1)
_EXEC_ARGV = re.compile(r"(?:^|[\s;&|(])exec\s+$")
_PIPE = re.compile(r"(?<![|>])\|(?!\|)")   # a pipeline's `|`, not `||` nor the clobbering `>|`
_NAME_PREFIX = re.compile(r"[a-z0-9][a-z0-9-]{0,61}")
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")


def check(files: Sequence[tuple[SourceFile, nodes.File]], found: Iterable[Diagnostic], *,
          unsure: frozenset[str] = frozenset(), schemas: Any = None) -> list[Diagnostic]:
    """`found` plus everything the checker finds, less the warnings that comments allow.

    `unsure`: kind and define names that a declaration with a syntax error may declare;
    references to them are not reported (the declaration could not be read)."""
    checker = _Checker([f for _, f in files], unsure, schemas)
    checker.run()
    return _allowed([*found, *checker.out], [f for _, f in files])


def walk(node: Any) -> Iterator[Any]:
    """Every AST node under `node` (itself included), depth first, in field order."""
    stack = [node]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(reversed(_children(item)))


def _children(node: Any) -> list[Any]:
    """The AST nodes held by `node`'s fields, in field order (tuples of nodes flattened)."""
    out: list[Any] = []
    stack = [getattr(node, name) for name in reversed(node.__dataclass_fields__)]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        elif hasattr(item, "__dataclass_fields__") and not isinstance(item, Span):
            out.append(item)
    return out


def _nesting(root: Any, defines: dict[str, int]) -> tuple[int, Span]:
    """How many levels of AST nodes `root` nests, each `is NAME` counting as the define's
    filter (its depth in `defines`), and where the first level past MAX_NESTING is (when none
    is, the deepest)."""
    deepest, where = 0, root.span
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        children = _children(node)
        if isinstance(node, nodes.IsDefine):
            depth += defines.get(node.name.value, 0)
        elif not children:
            continue  # a name, a number, an expression (checked on its own): no level
        if depth > deepest:
            if deepest <= expr.MAX_NESTING:
                where = node.span
            deepest = depth
        stack.extend((child, depth + 1) for child in reversed(children))
    return deepest, where


@dataclass(frozen=True, slots=True)
class _Write:
    """One field an injection op sets, for conflict detection."""

    field: str
    value: Any
    injection: nodes.Injection
    containers: nodes.Containers | None
    span: Span


class _Checker:
    def __init__(self, files: list[nodes.File], unsure: frozenset[str], schemas: Any) -> None:
        self.files = files
        self.unsure = unsure
        self.schemas = schemas
        self.out: list[Diagnostic] = []
        self.decls = [d for f in files for d in f.decls]
        self.kinds: dict[str, nodes.Kind] = {}
        self.defines: dict[str, nodes.Define] = {}
        self.parsed: dict[nodes.Expr, expr.Parsed] = {}

    def report(self, name: str, span: Span, message: str, help: str | None = None,
               notes: Iterable[Note] = ()) -> None:
        self.out.append(diagnostics.make(name, span, message, help, notes))

    def run(self) -> None:
        for file in self.files:
            for e in file.exprs:
                self.parsed[e] = expr.parse(e, self.out)
                expr.check_quotes(e, self.out)
                expr.check_not_precedence(self.parsed[e], self.out)
                expr.check_functions(self.parsed[e], self.out)
        self.declarations()
        self.define_cycles()
        deep = self.nesting()
        for decl in self.decls:
            if decl in deep:
                continue  # checking it would recurse too deeply
            if isinstance(decl, nodes.Kind):
                self.kind(decl)
            elif isinstance(decl, nodes.Extend):
                self.extend(decl)
            elif isinstance(decl, nodes.Injection):
                self.injection(decl)
            elif isinstance(decl, nodes.Define):
                self.filter_root(decl.filter, None, failure=False)
        self.conflicts([d for d in self.decls if isinstance(d, nodes.Injection)])
        self.webhooks([d for d in self.decls if isinstance(d, nodes.Webhook)])

    # ------------------------------------------------------------ names
    def declarations(self) -> None:
        firsts: dict[tuple[str, str], Span] = {}

        def unique(space: str, key: str, span: Span, what: str, help: str | None = None) -> bool:
            first = firsts.setdefault((space, key), span)
            if first is not span:
                self.report("duplicate-name", span, f"{what} is declared twice", help=help,
                            notes=(Note("first declared here", first),))
                return False
            return True

        defaults = ("unnamed injections are called FILESTEM#N, N counting the file's injections "
                    "from 0")
        for f in self.files:
            for i, name in f.injection_names():
                if i.name is not None:
                    unique("inject", name, i.name.span, f"injection \"{name}\"",
                           help=f"{defaults}; choose another name" if "#" in name else None)
                else:
                    keyword = Span(i.span.path, i.span.line, i.span.column, i.span.line,
                                   i.span.column + len("inject"))
                    unique("inject", name, keyword, f"unnamed injection \"{name}\"",
                           help=f"{defaults}; name this one: `inject \"name\" into ...`")
        for d in self.decls:
            if isinstance(d, nodes.Kind):
                if unique("kind", d.name.value, d.name.span, f"kind `{d.name.value}`"):
                    self.kinds[d.name.value] = d
                versions: dict[str, Span] = {}
                for api, span in _api_versions(d):
                    first = versions.setdefault(api, span)
                    if first is not span:
                        self.report("duplicate-clause", span, f"version `{api}` is listed twice",
                                    notes=(Note("first listed here", first),))
                    else:
                        unique("gvk", f"{api} {d.kind.value}", span, f"`{api} {d.kind.value}`")
            elif isinstance(d, nodes.Define):
                if unique("define", d.name.value, d.name.span, f"define `{d.name.value}`"):
                    self.defines[d.name.value] = d

    def define_cycles(self) -> None:
        uses = {name: [n for n in walk(d.filter) if isinstance(n, nodes.IsDefine)]
                for name, d in self.defines.items()}
        done: set[str] = set()

        def visit(name: str, trail: list[str]) -> None:
            if name in trail:
                cycle = trail[trail.index(name):] + [name]
                first = self.defines[cycle[0]]
                self.report("define-cycle", first.name.span,
                            f"define `{cycle[0]}` uses itself: {' -> '.join(cycle)}")
                return
            if name in done or name not in uses:
                return
            for use in uses[name]:
                visit(use.name.value, [*trail, name])
            done.add(name)

        for name in self.defines:
            visit(name, [])

    def nesting(self) -> set[nodes.Decl]:
        """Report declarations nested more than MAX_NESTING levels, defines expanded (a use of
        a define that is too deep itself is not reported again); returns the ones too deep."""
        depths: dict[str, int] = {}
        deep: set[nodes.Decl] = set()
        over: set[str] = set()
        for decl in [*self._defines_in_order(),
                     *(d for d in self.decls if not isinstance(d, nodes.Define))]:
            is_define = isinstance(decl, nodes.Define)
            depth, where = _nesting(decl.filter if is_define else decl, depths)
            if is_define:
                depths[decl.name.value] = depth
            if depth <= expr.MAX_NESTING:
                continue
            deep.add(decl)
            uses = {n.name.value for n in walk(decl) if isinstance(n, nodes.IsDefine)}
            if not uses & over:
                self.report("nesting-too-deep", where,
                            f"this nests {depth} levels deep"
                            + (" with the defines it uses" if uses else "")
                            + f"; at most {expr.MAX_NESTING} levels can be evaluated",
                            help="use defines side by side rather than each inside the next"
                            if uses else None)
            if is_define:
                over.add(decl.name.value)
        return deep

    def _defines_in_order(self) -> list[nodes.Define]:
        """The defines, each after the defines it uses (a cycle, reported apart, in any order)."""
        order: list[nodes.Define] = []
        entered: set[str] = set()
        for first in self.defines:
            stack: list[tuple[str, bool]] = [(first, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    order.append(self.defines[name])
                    continue
                if name in entered or name not in self.defines:
                    continue
                entered.add(name)
                stack.append((name, True))
                stack.extend((n.name.value, False) for n in walk(self.defines[name].filter)
                             if isinstance(n, nodes.IsDefine))
        return order

    # ------------------------------------------------------------ kinds
    def kind(self, k: nodes.Kind) -> None:
        if k.scope is not None:
            self.scope(k.scope)
        if k.primary_prefix is not None and not _NAME_PREFIX.fullmatch(k.primary_prefix.value):
            self.report("invalid-dns-label", k.primary_prefix.span,
                        f"invalid container name prefix \"{k.primary_prefix.value}\": no container "
                        "name starts with it",
                        help="container names are lower-case letters, digits and `-`, starting "
                             "with a letter or digit, at most 63 characters")
        for label in k.pod_labels:
            self.key(label.key, "label")
            self.template(label.value, vocabulary.JOB_PLACEHOLDERS, "a pod selector")
            literal = label.value.literal()
            if literal is not None:
                self.label_value(literal, label.value.span)
        if k.task_label is not None:
            self.key(k.task_label, "label")
        if k.primary_pods is not None:
            self.filter_root(k.primary_pods, k, failure=False)
        for name in k.primary_containers or ():
            self.dns_label(name, "container")
        for v in k.verdicts:
            if v.when is not None:
                self.condition(v.when, k)
            self.template(v.reason, vocabulary.VERDICT_PLACEHOLDERS, "a verdict")
            self.template(v.message, vocabulary.VERDICT_PLACEHOLDERS, "a verdict")
        self.verdict_order(k)
        for p in k.policies:
            self.policy(p, k)
        self.policy_ids(k)
        self.recipes(k)
        self.shadowing(k)
        for e in self.extensions(k):
            for p in e.policies:
                self.policy(p, k)
        if k.status is not None:
            self.phase_list(k.status.phase_only or (), "listed")
            self.phase_list([e.phase for e in k.status.phase_map], "mapped")
            firsts: dict[str, Span] = {}
            for value in k.status.phase_over or ():
                first = firsts.setdefault(value.value, value.span)
                if first is not value.span:
                    self.report("duplicate-clause", value.span,
                                f"value {value.value!r} is listed twice in `over`",
                                notes=(Note("first listed here", first),))
        self.check_schema_paths(k)

    def scope(self, scope: nodes.Node) -> None:
        """A kind's scope: an `and` of label tests and `namespace` lists (a label selector and
        the namespaces to watch)."""
        for term in scope.args if isinstance(scope, nodes.And) else (scope,):
            negated = isinstance(term, nodes.Not)
            inner = term.arg if negated else term
            if isinstance(inner, nodes.KeyTest) and inner.what == "label":
                self.filter_terms(inner, None, failure=False, positive=True)
            elif isinstance(inner, nodes.Namespace) and not negated and not inner.negate:
                pass
            else:
                self.report("invalid-filter", term.span,
                            "a kind's scope is an `and` of `label` tests and `namespace` lists",
                            help="it must be a Kubernetes label selector and the namespaces to "
                                 "watch: `where label \"team\" = \"ml\" and namespace in [\"a\"]`")

    def extensions(self, k: nodes.Kind) -> list[nodes.Extend]:
        return [d for d in self.decls if isinstance(d, nodes.Extend) and d.name.value == k.name.value]

    def extend(self, e: nodes.Extend) -> None:
        if e.name.value not in self.kinds and e.name.value not in self.unsure:
            self.report("unknown-kind", e.name.span, f"no kind is called `{e.name.value}`",
                        help=diagnostics.did_you_mean(e.name.value, self.kinds))

    def verdict_order(self, k: nodes.Kind) -> None:
        reachable: list[nodes.Verdict] = []
        otherwise = None
        for v in k.verdicts:
            if otherwise is not None:
                self.report("unreachable-verdict", v.span,
                            f"this `{v.phase.lower()}` verdict is never used",
                            notes=(Note("`otherwise` before it always holds", otherwise.span),))
                continue
            reachable.append(v)
            if v.when is None:
                otherwise = v
        if not any(v.phase in vocabulary.TERMINAL_PHASES for v in reachable):
            self.report("no-terminal-verdict", k.name.span,
                        f"kind `{k.name.value}` never becomes Succeeded or Failed",
                        help="add verdicts such as `succeeded when all pods succeeded` and "
                             "`failed when any pod failed`")

    def need_task(self, k: nodes.Kind | None, span: Span, what: str) -> None:
        if k is not None and not k.has_task:
            self.report("no-task-selector", span,
                        f"{what} needs a task, but kind `{k.name.value}` declares no `task`",
                        help='add `task label "..."` or `task <<expr>>` to the kind')

    def phase_list(self, phases: Sequence[nodes.Name], what: str) -> None:
        """Phases of `only [...]` or a status map: each known, none given twice."""
        firsts: dict[str, Span] = {}
        for name in phases:
            self.phase(name)
            first = firsts.setdefault(name.value.lower(), name.span)
            if first is not name.span:
                self.report("duplicate-clause", name.span,
                            f"phase `{name.value}` is {what} twice",
                            notes=(Note(f"first {what} here", first),))

    def phase(self, name: nodes.Name) -> None:
        if name.value.lower() not in {p.lower() for p in vocabulary.PHASES}:
            self.report("unknown-phase", name.span, f"unknown phase `{name.value}`",
                        help=diagnostics.did_you_mean(name.value, vocabulary.PHASES)
                        or f"phases are {', '.join(vocabulary.PHASES)}")

    # ------------------------------------------------------------ conditions and filters
    def condition(self, n: nodes.Node, k: nodes.Kind) -> None:
        if isinstance(n, (nodes.And, nodes.Or)):
            for a in n.args:
                self.condition(a, k)
        elif isinstance(n, nodes.Not):
            self.condition(n.arg, k)
        elif isinstance(n, nodes.JobExpr):
            expr.check_condition(self.parsed[n.expr], self.out, self.field_types(k))
        elif isinstance(n, (nodes.PodQuant, nodes.PodCount)):
            if n.task is not None:
                self.need_task(k, n.task.span, "`of task`")
            if n.filter is not None:
                self.filter_root(n.filter, k, failure=n.state in vocabulary.FAILURE_STATES)
            if isinstance(n, nodes.PodCount) and isinstance(n.value, nodes.Number) \
                    and n.value.value < 0:
                self.report("value-out-of-range", n.value.span,
                            "a count of pods is never negative")
        elif isinstance(n, nodes.TaskQuant):
            self.need_task(k, n.span, "a task condition")
        elif isinstance(n, nodes.TaskCount):
            self.need_task(k, n.span, "`count tasks`")
            if isinstance(n.value, nodes.Number) and n.value.value < 0:
                self.report("value-out-of-range", n.value.span,
                            "a count of tasks is never negative")

    def filter_root(self, root: nodes.Node, k: nodes.Kind | None, failure: bool) -> None:
        top = root.args if isinstance(root, nodes.And) else (root,)
        scopes = [a for a in top if isinstance(a, nodes.ContainerScope)]
        for node in walk(root):
            if isinstance(node, nodes.ContainerScope) and node not in scopes:
                self.report("invalid-filter", node.span,
                            "`container` must be joined with `and` at the top of the filter",
                            help="it scopes every exit, reason and restarts term of its filter")
        for extra in scopes[1:]:
            self.report("invalid-filter", extra.span, "a filter scopes to one container",
                        notes=(Note("the first `container` term", scopes[0].span),))
        if scopes and not any(isinstance(n, (nodes.ExitCodes, nodes.ContainerReason, nodes.Restarts))
                              for n in walk(root)):
            self.report("invalid-filter", scopes[0].span, "this `container` term scopes nothing",
                        help="join it with an `exit`, `reason` or `restarts` term using `and`")
        self.filter_terms(root, k, failure, positive=True)

    def filter_terms(self, n: nodes.Node, k: nodes.Kind | None, failure: bool,
                     positive: bool) -> None:
        if isinstance(n, (nodes.And, nodes.Or)):
            for a in n.args:
                self.filter_terms(a, k, failure, positive)
        elif isinstance(n, nodes.Not):
            self.filter_terms(n.arg, k, failure, not positive)
        elif isinstance(n, nodes.ExitCodes):
            self.exit_codes(n, failure and positive and not n.negate)
        elif isinstance(n, nodes.ContainerScope):
            self.dns_label(n.name, "container")
        elif isinstance(n, nodes.TaskIs):
            self.need_task(k, n.span, "a task filter")
        elif isinstance(n, nodes.Restarts):
            if n.value.value < 0:
                self.report("value-out-of-range", n.value.span,
                            "a restart count is never negative")
        elif isinstance(n, nodes.KeyTest):
            self.key(n.key, n.what)
            if n.what != "annotation":
                for v in n.values or ():
                    self.label_value(v.value, v.span)
        elif isinstance(n, nodes.PodCondition):
            for status in n.statuses:
                if status.value not in vocabulary.CONDITION_STATUSES:
                    self.report("unknown-condition-status", status.span,
                                f"a condition status is never \"{status.value}\"",
                                help=diagnostics.did_you_mean(status.value,
                                                              vocabulary.CONDITION_STATUSES)
                                or "condition statuses are \"True\", \"False\" and \"Unknown\"")
        elif isinstance(n, nodes.Where):
            expr.check_condition(self.parsed[n.expr], self.out)
        elif isinstance(n, nodes.IsDefine):
            if n.name.value not in self.defines and n.name.value not in self.unsure:
                self.report("unknown-define", n.name.span, f"no define is called `{n.name.value}`",
                            help=diagnostics.did_you_mean(n.name.value, self.defines))

    def exit_codes(self, n: nodes.ExitCodes, on_failure: bool) -> None:
        low, high = INT32
        for code in (*n.codes, *(bound for pair in n.ranges for bound in pair)):
            if not low <= code.value <= high:
                self.report("exit-code-range", code.span,
                            f"exit code {code.value} is outside the 32-bit range of exit codes "
                            "and never matches")
        for lo, hi in n.ranges:
            if lo.value > hi.value:
                self.report("exit-code-range", Span(lo.span.path, lo.span.line, lo.span.column,
                                                    hi.span.end_line, hi.span.end_column),
                            f"the range {lo.value}..{hi.value} is empty")
        zero = next((c.span for c in n.codes if c.value == 0), None)  # a range may well match
        if on_failure and zero is not None:
            self.report("exit-zero-on-failure", zero,
                        "exit 0 in a filter on a failure never matches",
                        help="on a failure only containers that exited non-zero are read; "
                             "match the code they exit with")

    # ------------------------------------------------------------ policies
    def policy(self, p: nodes.Policy, k: nodes.Kind) -> None:
        e = p.event
        if e.task is not None:
            self.need_task(k, e.task.span, "a task-scoped event")
        elif e.name in vocabulary.TASK_EVENTS:
            self.need_task(k, e.span, f"`{vocabulary.EVENTS[e.name]}`")
        if e.to is not None:
            self.phase(e.to)
        if p.filter is not None:
            if e.name in vocabulary.JOB_EVENTS:
                self.report("invalid-filter", p.filter.span,
                            f"`{vocabulary.EVENTS[e.name]}` concerns the job: there is no pod to filter",
                            help="use a verdict condition for the job's own state")
            else:
                self.filter_root(p.filter, k, failure=e.name in vocabulary.FAILURE_EVENTS)
        self.action(p.action, e, k)

    def action(self, a: nodes.Action, e: nodes.Event, k: nodes.Kind) -> None:
        event = vocabulary.EVENTS[e.name]
        verb = vocabulary.ACTIONS[a.verb]
        if a.verb == "restartPod" and e.name not in vocabulary.POD_EVENTS:
            self.report("action-not-allowed", a.span,
                        f"`restart pod` needs a pod event, and `{event}` has no pod",
                        help="restart the job or the task instead")
        elif a.verb in vocabulary.TASK_ACTIONS:
            if e.name in vocabulary.JOB_EVENTS:
                self.report("action-not-allowed", a.span,
                            f"`{verb}` needs a pod or task event, and `{event}` has no task")
            elif not k.has_task:
                self.report("action-not-allowed", a.span,
                            f"`{verb}` needs a task, but kind `{k.name.value}` declares "
                            "no `task`",
                            help='add `task label "..."` or `task <<expr>>` to the kind')
        if a.verb == "count" and (a.max is None or a.fallback is None):
            self.report("invalid-budget", a.span,
                        "`count` only counts: it needs `max N` and `then ACTION`, the action "
                        "taken once more than N occurrences were counted",
                        help="e.g. `count max 2 then fail job`")
        if a.max is not None:
            least = 0 if a.verb == "count" else 1
            if a.verb == "ignore":
                self.report("invalid-budget", a.max.span, "`ignore` counts nothing: `max` does "
                            "not apply")
            elif isinstance(a.max, nodes.Number) and a.max.value < least:
                self.report("value-out-of-range", a.max.span, f"`max` must be at least {least}")
            if a.per is not None and a.per.value == "task" and (
                    e.name in vocabulary.JOB_EVENTS or not k.has_task):
                self.report("invalid-budget", a.per.span,
                            "`per task` needs an event with a task and a kind that declares "
                            "`task`")
            if a.per is not None and a.per.value == "pod" and e.name not in vocabulary.POD_EVENTS:
                self.report("invalid-budget", a.per.span,
                            f"`per pod` needs a pod event, and `{event}` has no pod")
        else:
            if a.doubling is not None:
                self.report("invalid-budget", a.doubling.span,
                            "`doubling` doubles the delay with each use of the budget, but there "
                            "is no `max`", help=f"add `max N`, e.g. `{verb} max 6 after 10s "
                                                "doubling up to 6m`")
            if a.fallback is not None:
                self.report("invalid-budget", a.fallback.span,
                            "`then` runs when the budget is spent, but there is no `max`",
                            help=f"add `max N` before `then`, e.g. `{verb} max 3 then ...`")
            if a.budget is not None:
                self.report("invalid-budget", a.budget.span, "`budget` names a budget, but "
                            "there is no `max`")
            if a.verb in vocabulary.RESTARTS:
                self.report("restart-without-budget", a.span,
                            f"`{verb}` has no budget and may repeat forever",
                            help=f"add `max N`, e.g. `{verb} max 3 then fail job`")
        if a.delay is not None and a.delay_cap is not None and a.delay_cap.seconds < a.delay.seconds:
            self.report("value-out-of-range", a.delay_cap.span,
                        "the delay's cap is shorter than the first delay")
        self.template(a.reason, vocabulary.VERDICT_PLACEHOLDERS, "an action")
        self.template(a.message, vocabulary.VERDICT_PLACEHOLDERS, "an action")
        self.supported(a, k)
        if a.fallback is not None:
            self.action(a.fallback, e, k)

    def supported(self, a: nodes.Action, k: nodes.Kind) -> None:
        """R409: the kind can do the action (its `actions` block, else the default)."""
        if a.verb not in vocabulary.EFFECTS:
            return
        recipe = next((r for r in k.recipes if r.verb == a.verb), None)
        word = recipe.word if recipe is not None else vocabulary.DEFAULT_RECIPES.get(a.verb)
        if word != "unsupported":
            return
        verb = vocabulary.ACTIONS[a.verb]
        if recipe is not None:
            self.report("action-unsupported", a.span,
                        f"kind `{k.name.value}` cannot `{verb}`: its `actions` say so",
                        notes=(Note("said here", recipe.span),))
        else:
            self.report("action-unsupported", a.span,
                        f"kind `{k.name.value}` has no way to `{verb}`",
                        help=f"say how in the kind's `actions {{ ... }}`, e.g. `{verb} -> set "
                             "spec.suspend = true` (docs/language.md, Actions)")

    def recipes(self, k: nodes.Kind) -> None:
        for r in k.recipes:
            verb = vocabulary.ACTIONS[r.verb]
            if r.verb not in vocabulary.EFFECTS:
                self.report("action-not-allowed", r.span, f"`{verb}` has no effect to describe")
                continue
            for step in r.steps:
                if step.op == "deletePods" and step.scope == "task" and not k.has_task:
                    self.need_task(k, step.span, "`delete pods of task`")
                elif step.op == "deletePods" and step.scope == "pod" and r.verb != "restartPod":
                    self.report("action-not-allowed", step.span,
                                f"`delete pod` deletes the pod an action is about, and `{verb}` "
                                "is about no pod", help="write `delete pods` (all of the job's) "
                                "or `delete pods of task`")
                elif step.op == "deletePods" and step.scope == "task" and \
                        r.verb not in vocabulary.TASK_ACTIONS:
                    self.report("action-not-allowed", step.span,
                                f"`delete pods of task` needs an action about a task, and "
                                f"`{verb}` is not")
                elif step.op == "await" and step.when is not None:
                    self.condition(step.when, k)
                elif step.op == "condition" and step.type is not None and not step.type.value:
                    self.report("empty-value", step.type.span, "a condition type cannot be empty")
                elif step.op == "create":
                    seen: dict[str, Span] = {}
                    for key, value in step.body:
                        first = seen.setdefault(key.value, key.span)
                        if first is not key.span:
                            self.report("duplicate-clause", key.span,
                                        f"field `{key.value}` is given twice",
                                        notes=(Note("first given here", first),))
                        if not isinstance(value, str):
                            self.template(value, vocabulary.VERDICT_PLACEHOLDERS, "a created object")

    def policy_ids(self, k: nodes.Kind) -> None:
        counters: dict[str, int] = defaultdict(int)
        firsts: dict[str, Span] = {}
        for p in (*k.policies, *(p for e in self.extensions(k) for p in e.policies)):
            n = counters[p.event.name]
            counters[p.event.name] += 1
            policy_id = p.id.value if p.id else f"{p.event.name}#{n}"
            span = p.id.span if p.id else p.span
            first = firsts.setdefault(policy_id, span)
            if first is not span:
                self.report("duplicate-name", span, f"policy id `{policy_id}` is used twice",
                            help="policy ids key the stored state; give each policy its own "
                                 "`as \"id\"`",
                            notes=(Note("first used here", first),))

    def shadowing(self, k: nodes.Kind) -> None:
        policies = (*k.policies, *(p for e in self.extensions(k) for p in e.policies))
        for i, later in enumerate(policies):
            for earlier in policies[:i]:
                if _catches_all(earlier, later):
                    self.report(
                        "shadowed-policy", later.span, "this policy is never used",
                        help="policies are tried in order; put the narrower one first",
                        notes=(Note("this earlier policy catches every "
                                    f"`{vocabulary.EVENTS[later.event.name]}` first", earlier.span),))
                    break

    # ------------------------------------------------------------ injection
    def injection(self, i: nodes.Injection) -> None:
        for name in i.kinds:
            if name.value not in self.kinds and name.value not in self.unsure:
                self.report("unknown-kind", name.span, f"no kind is called `{name.value}`",
                            help=diagnostics.did_you_mean(name.value, self.kinds))
        if i.match is not None:
            self.filter_terms(i.match, None, failure=False, positive=True)
            top = i.match.args if isinstance(i.match, nodes.And) else (i.match,)
            top = tuple(n.arg if isinstance(n, nodes.Not) else n for n in top)
            for node in walk(i.match):
                if isinstance(node, nodes.KeyTest) and node.what == "namespace label" \
                        and node not in top:
                    self.report("invalid-filter", node.span,
                                "a `namespace label` test must be joined with `and` at the top "
                                "of the injection's `where`",
                                help="the API server tests it, as the webhook's "
                                     "namespaceSelector, before the webhook sees the pod")
        firsts: dict[tuple[str, str], Span] = {}
        for op in i.ops:
            self.op(op, firsts)
        for name in i.wait or ():
            self.dns_label(name, "container")
        self.sidecar_names(i)

    def sidecar_names(self, i: nodes.Injection) -> None:
        """A sidecar named like a primary container of a kind it is injected into would be
        taken for that container, already injected (R504)."""
        for op in i.ops:
            if not isinstance(op, nodes.Sidecar):
                continue
            for name in i.kinds:
                k = self.kinds.get(name.value)
                primary = next((c for c in (k.primary_containers or ()) if c.value == op.name.value),
                               None) if k is not None else None
                if primary is not None:
                    self.report("sidecar-shadows-container", op.name.span,
                                f"sidecar `{op.name.value}` has the name of a primary container "
                                f"of kind `{k.name.value}`",
                                help="give the sidecar a name of its own",
                                notes=(Note("the primary container", primary.span),))
                    break

    def op(self, op: nodes.Op, firsts: dict[tuple[str, str], Span]) -> None:
        def unique(space: str, name: nodes.Text) -> None:
            first = firsts.setdefault((space, name.value), name.span)
            if first is not name.span:
                self.report("duplicate-name", name.span,
                            f"{space} `{name.value}` is declared twice in this injection",
                            notes=(Note("first declared here", first),))

        with_container = vocabulary.CONTAINER_PLACEHOLDERS
        if isinstance(op, nodes.Annotate):
            self.key(op.key, "annotation")
            self.template(op.value, vocabulary.INJECT_PLACEHOLDERS, "an injection")
        elif isinstance(op, nodes.SetLabel):
            self.key(op.key, "label")
            self.template(op.value, vocabulary.INJECT_PLACEHOLDERS, "an injection")
            literal = op.value.literal()
            if literal is not None:
                self.label_value(literal, op.value.span)
        elif isinstance(op, nodes.Env):
            self.env_name(op.name)
            self.containers(op.containers)
            self.template(op.value, with_container, "an `env` value")
        elif isinstance(op, nodes.Volume):
            self.dns_label(op.name, "volume")
            unique("volume", op.name)
        elif isinstance(op, nodes.Mount):
            self.dns_label(op.volume, "volume")
            self.mount_path(op.path)
            self.containers(op.containers)
        elif isinstance(op, nodes.Sidecar):
            self.dns_label(op.name, "sidecar")
            unique("sidecar", op.name)
            if op.image is None:
                self.report("missing-clause", op.name.span,
                            f"sidecar `{op.name.value}` has no `image`")
            elif op.image.literal() == "":
                self.report("empty-value", op.image.span,
                            f"sidecar `{op.name.value}` has an empty image",
                            help="the API server refuses a container without an image")
            for tpl in (op.image, *(op.command or ()), *(op.args or ())):
                self.template(tpl, vocabulary.INJECT_PLACEHOLDERS, "a sidecar")
            for env in op.env:
                self.env_name(env.name)
                self.template(env.value, vocabulary.INJECT_PLACEHOLDERS, "a sidecar")
            for mount in op.mounts:
                self.dns_label(mount.volume, "volume")
                self.mount_path(mount.path)
        else:
            self.containers(op.containers)
            for tpl in op.argv or ():
                self.template(tpl, with_container, "a `wrap`")
            if op.shell is not None:
                self.template(op.shell, vocabulary.SHELL_PLACEHOLDERS, "a `wrap ... shell`")
                self.shell(op.shell)

    def shell(self, tpl: nodes.Template) -> None:
        text = ""
        for n, part in enumerate(tpl.parts):
            if isinstance(part, nodes.Placeholder) and part.name == "argv":
                if not _EXEC_ARGV.search(text):
                    self.report("wrap-without-exec", part.span,
                                "`{argv}` runs as a child of the shell, so it gets no signals",
                                help="write `exec {argv}` so the program replaces the shell")
                after = "".join(p if isinstance(p, str) else "_" for p in tpl.parts[n + 1:])
                if _PIPE.search(_QUOTED.sub("", after.split("\n")[0])):
                    self.report("wrap-loses-status", part.span,
                                "the output of `{argv}` is piped: the container exits with the "
                                "status of the pipeline's last command, not the program's",
                                help="redirect to the file instead (`exec {argv} >>FILE 2>&1`), "
                                     "or through a FIFO to keep stdout too: `mkfifo /tmp/out; "
                                     "tee -a FILE </tmp/out & exec {argv} >/tmp/out 2>&1`")
                return
            text += part if isinstance(part, str) else "_"
        self.report("wrap-drops-command", tpl.span,
                    "this shell never runs the container's own command",
                    help="include `{argv}` (usually as `exec {argv}`)")

    def containers(self, c: nodes.Containers | None) -> None:
        for name in c.names if c is not None else ():
            self.dns_label(name, "container")

    def conflicts(self, injections: list[nodes.Injection]) -> None:
        by_field: dict[str, list[_Write]] = defaultdict(list)
        for i in injections:
            for op in i.ops:
                for w in _writes(op, i):
                    by_field[w.field].append(w)
        injected = _injected_keys(injections)
        for writes in by_field.values():
            for n, later in enumerate(writes):
                for earlier in writes[:n]:
                    if self._clash(earlier, later, injected):
                        self.report(
                            "conflicting-injection", later.span,
                            f"{_describe_field(later.field)} is already set differently",
                            notes=(Note("set here", earlier.span),))
                        break

    def _clash(self, a: _Write, b: _Write, injected: frozenset[str]) -> bool:
        if a.injection is b.injection and a.field.startswith("sidecar:"):
            return False  # reported as a duplicate name
        shared = set(_kind_names(a.injection)) & set(_kind_names(b.injection))
        if a.injection is not b.injection:
            shared = {k for k in shared if not _disjoint(
                a.injection.match, b.injection.match, _key_resolver(self.kinds.get(k), injected))}
        if a.field.startswith("sidecar:"):
            return bool(shared)
        if a.value == b.value:
            return False
        if a.injection is b.injection:
            shared = shared or {""}
        if a.containers is None and b.containers is None:
            return bool(shared)
        return any(self._overlap(a.containers, b.containers, self.kinds.get(k)) for k in shared)

    @staticmethod
    def _overlap(a: nodes.Containers | None, b: nodes.Containers | None,
                 k: nodes.Kind | None) -> bool:
        primary = None if k is None or k.primary_containers is None else {
            c.value for c in k.primary_containers}

        def resolve(c: nodes.Containers | None) -> set[str] | None:
            select = c.select if c is not None else "primary"
            if select == "all" or (select == "primary" and primary is None):
                return None
            return primary if select == "primary" else {n.value for n in c.names}  # type: ignore[union-attr]

        sa, sb = resolve(a), resolve(b)
        return sa is None or sb is None or bool(sa & sb)

    # ------------------------------------------------------------ webhook
    def webhooks(self, hooks: list[nodes.Webhook]) -> None:
        failure = timeout = None
        for h in hooks:
            if h.failure is not None:
                if failure is not None:
                    self.report("duplicate-clause", h.failure.span,
                                "`webhook failure` is set twice",
                                notes=(Note("first set here", failure),))
                failure = failure or h.failure.span
            if h.timeout is not None:
                if timeout is not None:
                    self.report("duplicate-clause", h.timeout.span,
                                "`webhook timeout` is set twice",
                                notes=(Note("first set here", timeout),))
                timeout = timeout or h.timeout.span
                if not 1 <= h.timeout.seconds <= 30:
                    self.report("value-out-of-range", h.timeout.span,
                                "the webhook timeout must be between 1s and 30s")

    # ------------------------------------------------------------ values
    def template(self, tpl: nodes.Template | None, allowed: Sequence[str], where: str) -> None:
        for part in tpl.parts if tpl is not None else ():
            if not isinstance(part, nodes.Placeholder) or part.name in allowed:
                continue
            if part.name in vocabulary.VERDICT_PLACEHOLDERS or part.name == "argv":
                hint = ("`{argv}` exists only in `wrap ... with shell`" if part.name == "argv"
                        else f"placeholders here: {', '.join(allowed)}")
                self.report("unknown-placeholder", part.span,
                            f"placeholder `{{{part.name}}}` has no value in {where}", help=hint)
            else:
                self.report("unknown-placeholder", part.span,
                            f"unknown placeholder `{{{part.name}}}`",
                            help=diagnostics.did_you_mean(part.name, allowed)
                            or f"placeholders here: {', '.join(allowed)}")

    def key(self, key: nodes.Text, what: str) -> None:
        problem = names.key_problem(key.value)
        if problem:
            self.report("invalid-key", key.span, f"invalid {what} key \"{key.value}\": {problem}")

    def label_value(self, value: str, span: Span) -> None:
        problem = names.label_value_problem(value)
        if problem:
            self.report("invalid-label-value", span, f"invalid label value \"{value}\": {problem}")

    def env_name(self, name: nodes.Text) -> None:
        """Names the API server accepts: not empty, printable ASCII, no `=` (R307)."""
        value = name.value
        odd = next((c for c in value if not " " <= c <= "~"), None)
        if not value:
            problem = "it is empty"
        elif "=" in value:
            problem = "it holds `=`, which ends a name in the environment"
        elif odd is not None:
            problem = f"it holds {diagnostics.show_char(odd)}, which is not printable ASCII"
        else:
            return
        shown = f" \"{value}\"" if odd is None else ""
        self.report("invalid-env-name", name.span,
                    f"invalid environment variable name{shown}: {problem}",
                    help="the API server refuses the pod, so every pod the injection matches "
                         "would be refused")

    def mount_path(self, path: nodes.Text) -> None:
        if not path.value:
            self.report("empty-value", path.span, "the mount path is empty",
                        help="mount the volume at an absolute path such as \"/var/run/x\"")

    def dns_label(self, name: nodes.Text, what: str) -> None:
        problem = names.dns_label_problem(name.value)
        if problem:
            self.report("invalid-dns-label", name.span,
                        f"invalid {what} name \"{name.value}\": {problem}")

    # ------------------------------------------------------------ CRD schemas
    def field_types(self, k: nodes.Kind) -> expr.FieldTypes | None:
        """The JSON types of a kind's fields, from its CRD schema when `--crd` gave one."""
        if self.schemas is None:
            return None
        group, _, version = k.api_version.value.rpartition("/")
        schema = self.schemas.schemas.get((group, version, k.kind.value))
        if schema is None:
            return None
        return lambda path: _schema_types(schema, path)

    def check_schema_paths(self, k: nodes.Kind) -> None:
        """Look the kind's status paths and job-side JMESPath reads up in the CRD schema of
        each version it serves."""
        if self.schemas is None:
            return
        kind = k.kind.value
        for api, span in _api_versions(k):
            if not self.schemas.has_kind(api, kind):
                self.report("no-schema", span if span is not k.api_version.span else k.kind.span,
                            f"no CRD given defines `{api} {kind}`; its paths are not checked")
                continue
            if k.status is not None:
                for path in (k.status.phase, k.status.reason, k.status.message):
                    if path is not None:
                        self._status_path(k, api, path)
            self._recipe_paths(k, api)
            for e in _job_exprs(k, self.extensions(k)):
                parsed = self.parsed.get(e)
                if parsed is None or parsed.tree is None:
                    continue
                self._expr_paths(k, api, e)

    def _status_path(self, k: nodes.Kind, api: str, path: nodes.FieldPath) -> None:
        problem = self.schemas.check_path(api, k.kind.value, path.segments)
        if problem is None:
            return
        column = path.span.column + sum(len(s) + 1 for s in path.segments[:problem.index])
        span = Span(path.span.path, path.span.line, column, path.span.line,
                    column + len(problem.segment))
        self._unknown_field(k.kind.value, api, span, path.segments[:problem.index + 1], problem)

    def _recipe_paths(self, k: nodes.Kind, api: str) -> None:
        """The fields the kind's recipes write, and those of the objects they create where a
        CRD given defines them."""
        for r in k.recipes:
            for step in r.steps:
                if step.op == "set" and step.path is not None:
                    self._status_path(k, api, step.path)
                elif step.op == "condition":
                    problem = self.schemas.check_path(api, k.kind.value, ("status", "conditions"))
                    if problem is not None:
                        self._unknown_field(k.kind.value, api, step.span,
                                            ("status", "conditions")[:problem.index + 1], problem)
                elif step.op == "create" and step.api_version and step.kind and \
                        self.schemas.has_kind(step.api_version.value, step.kind.value):
                    for key, _ in step.body:
                        problem = self.schemas.check_path(step.api_version.value,
                                                          step.kind.value, (key.value,))
                        if problem is not None:
                            self._unknown_field(step.kind.value, step.api_version.value,
                                                key.span, (key.value,), problem)

    def _expr_paths(self, k: nodes.Kind, api: str, e: nodes.Expr) -> None:
        from rulec import schema

        reported: set[tuple[str, ...]] = set()
        for path in schema.paths_in_jmespath(e.text):
            problem = self.schemas.check_path(api, k.kind.value, path)
            if problem is None:
                continue
            bad = path[:problem.index + 1]
            if bad in reported:
                continue
            reported.add(bad)
            self._unknown_field(k.kind.value, api, _field_span(e, problem.segment), bad, problem)

    def _unknown_field(self, kind: str, api: str, span: Span, path: tuple[str, ...],
                       problem: Any) -> None:
        parent = ".".join(path[:-1]) or "the object"
        help = f"did you mean `{problem.suggestion}`?" if problem.suggestion else None
        if help is None and problem.expected:
            shown = ", ".join(problem.expected[:8]) + (", ..." if len(problem.expected) > 8 else "")
            help = f"fields of {parent}: {shown}"
        self.report("unknown-field", span,
                    f"`{'.'.join(path)}` is not in the schema of `{api} {kind}`",
                    help=help)


# ---------------------------------------------------------------- helpers


def _catches_all(earlier: nodes.Policy, later: nodes.Policy) -> bool:
    """Whether `earlier` matches every case `later` would (same event and scope, no filter)."""
    a, b = earlier.event, later.event
    if a.name != b.name or earlier.filter is not None or b.evicted and not a.evicted:
        return False
    if (a.task.value if a.task else None) != (b.task.value if b.task else None):
        return False
    if a.for_ is not None and (b.for_ is None or a.for_.seconds > b.for_.seconds):
        return False
    if a.to is not None and (b.to is None or a.to.value.lower() != b.to.value.lower()):
        return False
    return True


def _api_versions(k: nodes.Kind) -> Iterator[tuple[str, Span]]:
    """Every apiVersion a kind serves, with where it is written."""
    yield k.api_version.value, k.api_version.span
    group = f"{k.group}/" if k.group else ""
    for v in k.more_versions:
        yield group + v.value, v.span


def _kind_names(i: nodes.Injection) -> list[str]:
    return [k.value for k in i.kinds]


# ---------------------------------------------------------------- disjoint injection filters
# A test of one key's value: (values, negate); values None tests presence. Keys are
# `label:K`, `annotation:K`, `namespace` and `task`.
_Test = tuple[frozenset[str] | None, bool]
# The runtime records what it injected in annotations of its own (docs/injection.md).
_RUNTIME_ANNOTATIONS = "annotation:jobrules.dev/"


def _disjoint(a: nodes.Node | None, b: nodes.Node | None,
              resolve: Callable[[str], str | None]) -> bool:
    """Whether no pod can match both filters, provably from their top-level `and` of
    label, annotation, namespace and task tests on the keys that `resolve` keeps.

    Other terms (`or`, `where`, `primary`) are left out, which only widens what a filter
    matches: filters proved disjoint without them are disjoint with them."""
    tests: dict[str, list[_Test]] = defaultdict(list)
    for key, test in (*_tests(a), *_tests(b)):
        resolved = resolve(key)
        if resolved is not None:
            tests[resolved].append(test)
    return any(not _satisfiable(t) for t in tests.values())


def _tests(match: nodes.Node | None) -> Iterator[tuple[str, _Test]]:
    """The key tests that every pod `match` keeps passes (its top-level `and`)."""
    for term in (match.args if isinstance(match, nodes.And) else (match,) if match else ()):
        flip = isinstance(term, nodes.Not)
        term = term.arg if isinstance(term, nodes.Not) else term
        if isinstance(term, nodes.KeyTest):
            values = None if term.values is None else frozenset(v.value for v in term.values)
            yield f"{term.what}:{term.key.value}", (values, term.negate != flip)
        elif isinstance(term, (nodes.Namespace, nodes.TaskIs)):
            key = "namespace" if isinstance(term, nodes.Namespace) else "task"
            yield key, (frozenset(v.value for v in term.values), term.negate != flip)


def _satisfiable(tests: list[_Test]) -> bool:
    """Whether some value of one key, or its absence, passes every test (values None: present;
    negated: absent; else the value is one of them; negated: absent or none of them)."""
    allowed: frozenset[str] | None = None
    excluded: set[str] = set()
    present = absent = False
    for values, negate in tests:
        if values is None:
            absent, present = absent or negate, present or not negate
        elif negate:
            excluded |= values
        else:
            present = True
            allowed = values if allowed is None else allowed & values
    if absent:
        return not present
    return allowed is None or bool(allowed - excluded)


def _injected_keys(injections: list[nodes.Injection]) -> frozenset[str]:
    """The labels and annotations that injection writes: a filter on them may see the written
    value when the webhook is invoked again, so they prove nothing (nor do the runtime's own
    annotations, under `jobrules.dev/`: see `_key_resolver`)."""
    written: set[str] = set()
    for i in injections:
        for op in i.ops:
            if isinstance(op, nodes.SetLabel):
                written.add(f"label:{op.key.value}")
            elif isinstance(op, nodes.Annotate):
                written.add(f"annotation:{op.key.value}")
    return frozenset(written)


def _key_resolver(k: nodes.Kind | None, injected: frozenset[str]) -> Callable[[str], str | None]:
    """The key a test reads for pods of kind `k`, or None when it cannot prove disjointness.
    A task is the kind's task label (and proves nothing when an expression reads it: that
    may read anything)."""
    task_label = f"label:{k.task_label.value}" if k is not None and k.task_label else None

    def resolve(key: str) -> str | None:
        read = task_label if key == "task" else key
        if read is None or read in injected or read.startswith(_RUNTIME_ANNOTATIONS):
            return None
        return read

    return resolve


def _template_key(tpl: nodes.Template | None) -> Any:
    if tpl is None:
        return None
    return tuple(p if isinstance(p, str) else
                 ("var", p.name) if isinstance(p, nodes.Placeholder) else ("expr", p.text)
                 for p in tpl.parts)


def _writes(op: nodes.Op, i: nodes.Injection) -> list[_Write]:
    if isinstance(op, nodes.Annotate):
        return [_Write(f"annotation:{op.key.value}", _template_key(op.value), i, None, op.span)]
    if isinstance(op, nodes.SetLabel):
        return [_Write(f"label:{op.key.value}", _template_key(op.value), i, None, op.span)]
    if isinstance(op, nodes.Env):
        return [_Write(f"env:{op.name.value}", _template_key(op.value), i,
                       op.containers or nodes.Containers(op.span, "primary", ()), op.span)]
    if isinstance(op, nodes.Sidecar):
        return [_Write(f"sidecar:{op.name.value}", None, i, None, op.span)]
    if isinstance(op, nodes.Volume):
        return [_Write(f"volume:{op.name.value}", (op.source, op.ref.value if op.ref else None),
                       i, None, op.span)]
    return []


def _describe_field(field: str) -> str:
    what, _, name = field.partition(":")
    return {"annotation": f"annotation \"{name}\"", "label": f"label \"{name}\"",
            "env": f"environment variable `{name}`", "sidecar": f"sidecar `{name}`",
            "volume": f"volume `{name}`"}[what]


def _job_exprs(k: nodes.Kind, extensions: Sequence[nodes.Extend] = ()) -> Iterator[nodes.Expr]:
    """The expressions of a kind that read the job object (not the pod)."""
    def in_condition(n: nodes.Node) -> Iterator[nodes.Expr]:
        if isinstance(n, (nodes.And, nodes.Or)):
            for a in n.args:
                yield from in_condition(a)
        elif isinstance(n, nodes.Not):
            yield from in_condition(n.arg)
        elif isinstance(n, nodes.JobExpr):
            yield n.expr
        elif isinstance(n, (nodes.PodCount, nodes.TaskCount)) and isinstance(n.value, nodes.Expr):
            yield n.value

    def in_template(t: nodes.Template | None) -> Iterator[nodes.Expr]:
        for part in t.parts if t is not None else ():
            if isinstance(part, nodes.Expr):
                yield part

    for label in k.pod_labels:
        yield from in_template(label.value)
    for v in k.verdicts:
        if v.when is not None:
            yield from in_condition(v.when)
        yield from in_template(v.reason)
        yield from in_template(v.message)
    if k.final is not None and k.final.until is not None:
        yield k.final.until
    for p in (*k.policies, *(p for e in extensions for p in e.policies)):
        action: nodes.Action | None = p.action
        while action is not None:
            yield from in_template(action.reason)
            yield from in_template(action.message)
            if isinstance(action.max, nodes.Expr):
                yield action.max
            action = action.fallback


def _schema_types(schema: Any, path: tuple[str, ...]) -> frozenset[str] | None:
    """The JSON types an OpenAPI schema gives `path`, or None when it does not say."""
    node = schema
    for segment in path:
        if not isinstance(node, dict) or node.get("x-kubernetes-preserve-unknown-fields"):
            return None
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        node = properties.get(segment, extra if isinstance(extra, dict) else None)
        if node is None:
            return None
    if node.get("x-kubernetes-int-or-string"):
        return frozenset({"number", "string"})
    kind = node.get("type")
    if kind is None or node.get("x-kubernetes-preserve-unknown-fields"):
        return None
    return frozenset({"number" if kind == "integer" else kind})


def _field_span(e: nodes.Expr, segment: str) -> Span:
    """Where `segment` is first read in the expression (the whole expression if not found)."""
    from jmespath import lexer

    for tok in lexer.Lexer().tokenize(e.text):
        if tok["type"] in ("unquoted_identifier", "quoted_identifier") and tok["value"] == segment:
            length = len(segment) + (2 if tok["type"] == "quoted_identifier" else 0)
            return expr.position(e, tok["start"], length)
    return e.span


def _allowed(found: list[Diagnostic], files: list[nodes.File]) -> list[Diagnostic]:
    """Drop the warnings that a `# rulec: allow NAME` comment covers; report unknown names.

    A comment covers its line, or the next line when it stands alone; when that line is part
    of a verdict or a policy, it covers the whole statement (which `rulec fmt` may break).
    """
    allows = [a for f in files for a in f.allows]
    if not allows:
        return found
    out: list[Diagnostic] = []
    for a in allows:
        for name in a.names:
            code = diagnostics.BY_NAME.get(name)
            if code is None:
                out.append(diagnostics.make(
                    "unknown-allow", a.span, f"`{name}` is not a diagnostic name",
                    help=diagnostics.did_you_mean(
                        name, [c.name for c in diagnostics.CODES
                               if c.severity == diagnostics.WARNING])))
            elif code.severity == diagnostics.ERROR:
                out.append(diagnostics.make(
                    "unknown-allow", a.span, f"`{name}` is an error and cannot be allowed"))
    statements = defaultdict(list)  # verdicts and policies: the statements fmt may break
    for f in files:
        for kind in (d for d in f.decls if isinstance(d, nodes.Kind)):
            for node in (*kind.verdicts, *kind.policies):
                statements[node.span.path].append((node.span.line, node.span.end_line))
    covered = defaultdict(list)
    for a in allows:
        line = a.span.line + 1 if a.own_line else a.span.line
        ranges = [r for r in statements[a.span.path]
                  if (r[0] == line if a.own_line else r[0] <= line <= r[1])]
        for name in a.names:
            covered[(a.span.path, name)].extend(ranges or [(line, line)])
    for d in found:
        ranges = covered.get((d.span.path, d.name), ())
        if d.severity == diagnostics.WARNING and any(
                d.span.line <= end and start <= d.span.end_line for start, end in ranges):
            continue
        out.append(d)
    return out
