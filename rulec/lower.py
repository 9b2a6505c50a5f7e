"""Lowering: the Lark tree of one file to its typed AST.

Structural mistakes the grammar lets through (a clause given twice, a malformed API version) are
reported here; everything that needs the whole program is left to the checker.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Protocol

from rulec import diagnostics, expr, nodes, template
from rulec.diagnostics import Diagnostic, Note
from rulec.source import Span
from rulec.syntax import Comment, Parsed, token_span
from runtime import vocabulary

if TYPE_CHECKING:
    from lark import Token
    from lark.tree import Meta

    class Tree(Protocol):
        """A Lark tree as the lowering reads it. Which children of a rule are tokens and which
        are trees is the grammar's to say, not a type's: each method reads one rule's children
        by position, so they are Any here (Lark's `Token | Tree` would want a check at each of
        the hundred reads that the grammar already guarantees)."""

        @property
        def data(self) -> str: ...

        @property
        def children(self) -> list[Any]: ...

        @property
        def meta(self) -> Meta: ...

_PHASE = {p.lower(): p for p in vocabulary.PHASES}
_VERBS = {
    ("fail", "job"): "failJob", ("complete", "job"): "completeJob",
    ("restart", "job"): "restartJob", ("restart", "task"): "restartTask",
    ("restart", "pod"): "restartPod", ("abort", "job"): "abortJob",
    ("terminate", "job"): "terminateJob", ("ignore",): "ignore", ("fail", "task"): "failTask",
    ("count",): "count",
}
_POD_EVENTS = {"pending": "podPending", "running": "podRunning", "succeeded": "podSucceeded",
               "failed": "podFailed", "evicted": "podEvicted", "deleted": "podDeleted"}
_DURATION_PART = re.compile(r"(\d+)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_CORE_VERSION = re.compile(r"v\d+(?:(?:alpha|beta)\d+)?")
_ALLOW = re.compile(r"#\s*rulec:\s*allow\s+(.*)")


def lower(parsed: Parsed, out: list[Diagnostic]) -> nodes.File:
    """The AST of a parsed file (after a syntax error, of its declarations that parsed);
    problems go to `out`."""
    tree = parsed.decls
    assert tree is not None
    lowering = _Lowering(parsed.source.path, out)
    decls = []
    for child in tree.children:
        try:
            decls.append(lowering.decl(child))
        except RecursionError:
            out.append(_too_deep(parsed.source.path, child))
    allows = tuple(a for a in (_allow(c, parsed.source.text) for c in parsed.comments) if a)
    end = parsed.source.end_span()
    return nodes.File(Span(parsed.source.path, 1, 1, end.line, end.column), tuple(decls), allows,
                      tuple(lowering.exprs))


def _too_deep(path: str, decl: Tree) -> Diagnostic:
    """R005 for a declaration too deep to lower, at its first node past the limit."""
    where, stack = decl, [(decl, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > expr.MAX_NESTING:
            where = node
            break
        stack.extend((c, depth + 1) for c in getattr(node, "children", ()) if hasattr(c, "meta"))
    m = where.meta
    return diagnostics.make(
        "nesting-too-deep", Span(path, m.line, m.column, m.end_line, m.end_column),
        f"this nests more than {expr.MAX_NESTING} levels deep (hundreds of nested `not`, "
        "parentheses or `then`); it cannot be read")


def _allow(comment: Comment, text: str) -> nodes.AllowComment | None:
    m = _ALLOW.match(comment.text)
    if not m:
        return None
    names = tuple(n for n in re.split(r"[\s,]+", m.group(1).strip()) if n)
    lines = text.split("\n")
    before = lines[comment.span.line - 1][: comment.span.column - 1]
    return nodes.AllowComment(comment.span, names, own_line=not before.strip())


def spine(tree: Tree) -> list:
    """The children of a left-nested chain (`a or b or c`) in order, without recursion, so
    that a long chain cannot exhaust the stack."""
    out = []
    stack = [iter(tree.children)]
    while stack:
        for child in stack[-1]:
            if getattr(child, "data", None) == tree.data:
                stack.append(iter(child.children))
                break
            out.append(child)
        else:
            stack.pop()
    return out


def duration_seconds(text: str) -> int:
    return sum(int(n) * _UNIT[u] for n, u in _DURATION_PART.findall(text))


class _Lowering:
    __slots__ = ("path", "out", "exprs", "_dispatch")

    def __init__(self, path: str, out: list[Diagnostic]) -> None:
        self.path = path
        self.out = out
        self.exprs: list[nodes.Expr] = []
        self._dispatch: dict[str, Callable[[Tree], nodes.Node]] = {
            "c_or": self._or, "f_or": self._or, "c_and": self._and, "f_and": self._and,
            "c_not": self._not, "f_not": self._not,
            "c_expr": lambda t: nodes.JobExpr(self.span(t), self.expr(t.children[0])),
            "c_job_age": lambda t: nodes.JobAge(self.span(t), self.duration(t.children[0])),
            "pod_quant": self._pod_quant, "pod_count": self._pod_count,
            "task_quant": self._task_quant, "task_named": self._task_named,
            "task_count": self._task_count,
            "exit_term": self._exit, "reason_term": self._reason,
            "container_term": lambda t: nodes.ContainerScope(self.span(t), self.text(t.children[0])),
            "pod_reason_term": self._pod_reason, "condition_term": self._condition,
            "task_term": self._task_term, "restarts_term": self._restarts,
            "label_term": lambda t: self._key_test(t, "label"),
            "annotation_term": lambda t: self._key_test(t, "annotation"),
            "namespace_label_term": lambda t: self._key_test(t, "namespace label"),
            "where_term": lambda t: nodes.Where(self.span(t), self.expr(t.children[0])),
            "is_term": lambda t: nodes.IsDefine(self.span(t), self.name(t.children[0])),
            "cause_term": lambda t: nodes.IsCause(self.span(t), self.text(t.children[0])),
            "namespace_term": self._namespace,
            "primary_term": lambda t: nodes.PrimaryPod(self.span(t)),
        }

    # ------------------------------------------------------------ leaves
    def span(self, node: Tree | Token) -> Span:
        if isinstance(node, str):  # a Token
            return token_span(self.path, node)
        m = node.meta
        return Span(self.path, m.line, m.column, m.end_line, m.end_column)

    def text(self, token: Token) -> nodes.Text:
        span = self.span(token)
        return nodes.Text(span, template.decode(str(token), span, self.out))

    def name(self, token: Token) -> nodes.Name:
        return nodes.Name(self.span(token), str(token))

    def number(self, token: Token) -> nodes.Number:
        return nodes.Number(self.span(token), int(token))

    def duration(self, token: Token) -> nodes.Duration:
        return nodes.Duration(self.span(token), duration_seconds(str(token)))

    def expr(self, token: Token) -> nodes.Expr:
        e = template.expr_of(str(token), self.span(token))
        self.exprs.append(e)
        return e

    def value(self, token: Token) -> nodes.Template:
        if token.type == "EXPR":
            return nodes.Template(self.span(token), (self.expr(token),))
        tpl = template.from_string(str(token), self.span(token), self.out)
        self.exprs.extend(p for p in tpl.parts if isinstance(p, nodes.Expr))
        return tpl

    def texts(self, tree: Tree) -> tuple[nodes.Text, ...]:
        return tuple(self.text(t) for t in tree.children)

    def values(self, tree: Tree) -> tuple[nodes.Template, ...]:
        return tuple(self.value(t) for t in tree.children)

    def once(self, seen: dict[str, Span], key: str, span: Span, what: str) -> bool:
        """Record `key`; report and return False when it was seen before."""
        first = seen.get(key)
        if first is None:
            seen[key] = span
            return True
        self.out.append(diagnostics.make(
            "duplicate-clause", span, f"{what} is given twice",
            notes=(Note("first given here", first),)))
        return False

    # ------------------------------------------------------------ declarations
    def decl(self, tree: Tree) -> nodes.Decl:
        lowerings: dict[str, Callable[[Tree], nodes.Decl]] = {
            "kind_decl": self.kind, "extend_decl": self.extend, "inject_decl": self.injection,
            "define_decl": self.define, "cause_decl": self.cause, "webhook_decl": self.webhook}
        return lowerings[tree.data](tree)

    def extend(self, tree: Tree) -> nodes.Extend:
        name, *policies = tree.children
        return nodes.Extend(self.span(tree), self.name(name),
                            tuple(self.policy(p) for p in policies))

    def define(self, tree: Tree) -> nodes.Define:
        name, body = tree.children
        return nodes.Define(self.span(tree), self.name(name), self.node(body))

    def cause(self, tree: Tree) -> nodes.Cause:
        name, body, hint = tree.children
        return nodes.Cause(self.span(tree), self.text(name), self.node(body), self.text(hint))

    def webhook(self, tree: Tree) -> nodes.Webhook:
        seen: dict[str, Span] = {}
        failure = timeout = None
        for setting in tree.children:
            key, value = setting.children
            if not self.once(seen, str(key), self.span(setting), f"`webhook {key}`"):
                continue
            if str(key) == "failure":
                failure = self.name(value)
            else:
                timeout = self.duration(value)
        return nodes.Webhook(self.span(tree), failure, timeout)

    def kind(self, tree: Tree) -> nodes.Kind:
        name, api, *rest = tree.children
        more: tuple[nodes.Name, ...] = ()
        if getattr(rest[0], "data", None) == "more_versions":
            more = tuple(self.name(v) for v in rest.pop(0).children)
        kind_name, *stmts = rest
        scope = None
        if stmts and getattr(stmts[0], "data", None) == "kind_where":
            scope = self.node(stmts.pop(0).children[0])
        api_version = str(api)
        group, _, version = api_version.rpartition("/")
        if api.type == "NAME" and not _CORE_VERSION.fullmatch(api_version):
            self.out.append(diagnostics.make(
                "syntax-error", self.span(api), f"`{api_version}` is not an API version",
                help="write GROUP/VERSION such as `batch/v1`, or `v1` for the core group"))
        for v in more:
            if not _CORE_VERSION.fullmatch(v.value):
                self.out.append(diagnostics.make(
                    "syntax-error", v.span, f"`{v.value}` is not a version",
                    help="after the first API version, list more versions of the same group: "
                         "`tekton.dev/v1, v1beta1`"))
        seen: dict[str, Span] = {}
        plural = task_label = task_expr = primary_pods = primary_containers = status = None
        final = prefix = mode = foreign = None
        owned = False
        labels: list[nodes.PodLabel] = []
        verdicts: list[nodes.Verdict] = []
        policies: list[nodes.Policy] = []
        recipes: list[nodes.Recipe] = []
        for stmt in stmts:
            kind, span, ch = stmt.data, self.span(stmt), stmt.children
            if kind == "verdict":
                verdicts.append(self.verdict(stmt))
            elif kind == "policy":
                policies.append(self.policy(stmt))
            elif kind == "plural_stmt":
                if self.once(seen, "plural", span, "`plural`"):
                    plural = self.text(ch[0])
            elif kind == "pods_owned":
                owned = self.once(seen, "owned", span, "`pods owned`") or owned
            elif kind == "pods_label":
                key = self.text(ch[0])
                if self.once(seen, f"label:{key.value}", span, f"`pods label \"{key.value}\"`"):
                    labels.append(nodes.PodLabel(span, key, self.value(ch[1])))
            elif kind in ("task_label", "task_expr"):
                if self.once(seen, "task", span, "`task`"):
                    if kind == "task_label":
                        task_label = self.text(ch[0])
                    else:
                        task_expr = self.expr(ch[0])
            elif kind == "primary_pods":
                if self.once(seen, "primary pods", span, "`primary pods`"):
                    primary_pods = self.node(ch[0])
            elif kind in ("primary_container", "primary_containers", "primary_prefix"):
                if self.once(seen, "primary container", span, "`primary container`"):
                    if kind == "primary_prefix":
                        prefix = self.text(ch[0])
                    else:
                        primary_containers = ((self.text(ch[0]),) if kind == "primary_container"
                                              else self.texts(ch[0]))
            elif kind in ("final_until", "final_never"):
                if self.once(seen, "final", span, "`final`"):
                    final = nodes.Final(span, self.expr(ch[0]) if ch else None,
                                        kind == "final_never")
            elif kind == "foreign_stmt":
                if self.once(seen, "foreign", span, "`foreign`"):
                    foreign = nodes.Foreign(span, self.expr(ch[0]), len(ch) > 1)
            elif kind == "mode_audit":
                if self.once(seen, "mode", span, "`mode`"):
                    mode = nodes.Mode(span, bool(ch))
            elif kind == "status_block":
                if self.once(seen, "status", span, "`status`"):
                    status = self.status(stmt)
            elif kind == "actions_block":
                if self.once(seen, "actions", span, "`actions`"):
                    recipes += [self.recipe(r, seen) for r in ch]
        return nodes.Kind(
            self.span(tree), self.name(name), nodes.Name(self.span(api), api_version), group,
            version, self.name(kind_name), plural, owned, tuple(labels), task_label, task_expr,
            primary_pods, primary_containers, tuple(verdicts), tuple(policies), status,
            more, scope, final, prefix, tuple(recipes), mode, foreign)

    def recipe(self, tree: Tree, seen: dict[str, Span]) -> nodes.Recipe:
        verb, *body = tree.children
        action = _VERBS[tuple(str(t) for t in verb.children)]
        when = None
        if body and getattr(body[0], "data", None) == "recipe_when":
            when = self.expr(body[0].children[0])
            body = body[1:]
        else:   # one plain recipe per action; any number with `when`
            self.once(seen, f"recipe:{action}", self.span(tree),
                      f"`{' '.join(str(t) for t in verb.children)}` in `actions`")
        if body and getattr(body[0], "data", None) == "recipe_word":
            return nodes.Recipe(self.span(tree), action, str(body[0].children[0]), (), when)
        return nodes.Recipe(self.span(tree), action, None, tuple(self.step(s) for s in body),
                            when)

    def step(self, tree: Tree) -> nodes.Step:
        span, ch = self.span(tree), tree.children
        if tree.data == "step_delete":
            target = ch[0].children   # `pod`, `pods`, or `pods` `of task`
            scope = "pod" if str(target[0]) == "pod" else "task" if len(target) > 1 else "job"
            return nodes.Step(span, "deletePods", scope=scope, evict=len(ch) > 1)
        if tree.data == "step_set":
            token = ch[1].children[0]
            raw = str(token)
            value: object = {"true": True, "false": False, "null": None}.get(raw, raw)
            if token.type == "INT":
                value = int(raw)
            elif token.type == "STRING":
                value = self.text(token)
            on = None
            if len(ch) > 2:   # `on API KIND label "KEY" = VALUE`
                api, kind, key, given = ch[2].children
                on = nodes.ObjectsRef(self.span(ch[2]), nodes.Name(self.span(api), str(api)),
                                      self.name(kind), self.text(key), self.value(given))
            return nodes.Step(span, "set", path=self.path_of(ch[0]), value=value, on=on)
        if tree.data == "step_condition":
            return nodes.Step(span, "condition", type=self.text(ch[0]))
        if tree.data == "step_create":
            api, kind, *fields = ch
            body = []
            for f in fields:
                key, given = f.children
                name = nodes.Text(self.span(key), str(key)) if key.type == "NAME" else self.text(key)
                body.append((name, "job" if getattr(given, "data", None) == "create_job"
                             else self.value(given)))
            return nodes.Step(span, "create", api_version=nodes.Name(self.span(api), str(api)),
                              kind=self.name(kind), body=tuple(body))
        if tree.data == "step_resize":
            if ch[0].type == "TASK_PATH":   # `MAP[task].WITHIN`
                where, within = str(ch[0]).split("[task].")
                return nodes.Step(span, "resize", path=nodes.FieldPath(span, tuple(where.split("."))),
                                  within=nodes.FieldPath(span, tuple(within.split("."))))
            return nodes.Step(span, "resize", path=self.path_of(ch[0]))
        return nodes.Step(span, "await", when=self.node(ch[0]), timeout=self.duration(ch[1]))

    def verdict(self, tree: Tree) -> nodes.Verdict:
        phase, test, *clauses = tree.children
        when = None if test.data == "otherwise" else self.node(test)
        reason = message = None
        seen: dict[str, Span] = {}
        for clause in clauses:
            which = clause.data.removesuffix("_clause")
            if self.once(seen, which, self.span(clause), f"`{which}`"):
                if which == "reason":
                    reason = self.value(clause.children[0])
                else:
                    message = self.value(clause.children[0])
        return nodes.Verdict(self.span(tree), _PHASE[str(phase.children[0])], when, reason,
                             message)

    def status(self, tree: Tree) -> nodes.Status:
        seen: dict[str, Span] = {}
        phase = reason = message = condition = None
        phase_only: tuple[nodes.Name, ...] | None = None
        phase_over: tuple[nodes.Text, ...] | None = None
        phase_map: tuple[nodes.PhaseMapEntry, ...] = ()
        condition_off, events, annotations = False, True, True
        for stmt in tree.children:
            kind, span, ch = stmt.data, self.span(stmt), stmt.children
            if kind == "status_off":
                what = str(ch[1])
                key = "condition" if what == "condition" else what
                if not self.once(seen, key, span, f"`{what}`"):
                    continue
                if what == "condition":
                    condition_off = True
                elif what == "events":
                    events = False
                else:
                    annotations = False
            elif kind == "status_condition":
                if self.once(seen, "condition", span, "`condition`"):
                    condition = self.text(ch[0])
            elif self.once(seen, kind, span, f"`{kind.removeprefix('status_')} at`"):
                path = self.path_of(ch[0])
                if kind == "status_phase":
                    phase = path
                    for part in ch[1:]:
                        if part.data == "phase_only":
                            phase_only = tuple(self.name(w) for w in part.children)
                        elif part.data == "phase_over":
                            phase_over = self.texts(part)
                        else:
                            phase_map = tuple(
                                nodes.PhaseMapEntry(self.span(e), self.name(e.children[0]),
                                                    self.text(e.children[1]))
                                for e in part.children)
                elif kind == "status_reason":
                    reason = path
                else:
                    message = path
        return nodes.Status(self.span(tree), phase, phase_only, phase_over, phase_map, reason,
                            message, condition, condition_off, events, annotations)

    def path_of(self, token: Token) -> nodes.FieldPath:
        return nodes.FieldPath(self.span(token), tuple(str(token).split(".")))

    # ------------------------------------------------------------ policies
    def policy(self, tree: Tree) -> nodes.Policy:
        audit = None
        if getattr(tree.children[0], "data", None) == "audit_mark":
            audit = self.span(tree.children[0])
        event, *rest = tree.children[1:] if audit is not None else tree.children
        policy_id = None
        if rest and rest[-1].data == "policy_id":
            policy_id = self.text(rest.pop().children[0])
        action = rest.pop()
        filt = self.node(rest[0]) if rest else None
        return nodes.Policy(self.span(tree), self.event(event), filt, self.action(action),
                            policy_id, audit)

    def event(self, tree: Tree) -> nodes.Event:
        span, ch = self.span(tree), tree.children
        task = for_ = to = None
        if ch and getattr(ch[0], "data", None) == "event_task":
            task = self.text(ch[0].children[0])
            ch = ch[1:]
        if tree.data == "pod_event":
            kind = ch[0].children
            if len(kind) > 1:
                for_ = self.duration(kind[1].children[0])
            if kind[0].type == "FAILED_OR_EVICTED":
                return nodes.Event(span, "podFailed", task, None, None, evicted=True)
            return nodes.Event(span, _POD_EVENTS[str(kind[0])], task, for_, None)
        if tree.data == "container_event":
            return nodes.Event(span, "containerRestarted", task, None, None)
        if tree.data == "task_event":
            *named, kind = ch
            task = self.text(named[0]) if named else None
            which = str(kind.children[0])
            return nodes.Event(span, "taskCompleted" if which == "completed" else "taskFailed",
                               task, None, None)
        if tree.data == "verdict_event":
            to = self.name(ch[0]) if ch else None
            return nodes.Event(span, "jobVerdictChanged", None, None, to)
        return nodes.Event(span, "jobRunningLongerThan", None, self.duration(ch[0]), None)

    def action(self, tree: Tree) -> nodes.Action:
        verb, *clauses = tree.children
        fields: dict[str, object] = {}
        seen: dict[str, Span] = {}
        fallback = None
        for clause in clauses:
            kind, ch = clause.data, clause.children
            if kind == "then_clause":
                fallback = self.action(ch[0])
                continue
            which = kind.removesuffix("_clause")
            if not self.once(seen, which, self.span(clause), f"`{which}`"):
                continue
            if kind in ("reason_clause", "message_clause"):
                fields[which] = self.value(ch[0])
            elif kind == "max_clause":
                fields["max"] = self.number(ch[0]) if ch[0].type == "INT" else self.expr(ch[0])
                if len(ch) > 1:
                    fields["per"] = nodes.Name(self.span(ch[1]), str(ch[1].children[1]))
            elif kind == "budget_clause":
                fields["budget"] = self.text(ch[0])
            elif kind == "grow_clause":
                fields["grow"] = nodes.Grow(
                    self.span(clause), float(ch[0]),
                    nodes.Text(self.span(ch[1]), str(ch[1])) if len(ch) > 1 else None)
            else:
                fields["delay"] = self.duration(ch[0])
                if len(ch) > 1:
                    doubling = ch[1]
                    fields["doubling"] = nodes.Name(self.span(doubling), "doubling")
                    if doubling.children:
                        fields["cap"] = self.duration(doubling.children[0])
        words = tuple(str(t) for t in verb.children)
        return nodes.Action(
            self.span(tree), _VERBS[words], fields.get("reason"),  # type: ignore[arg-type]
            fields.get("message"), fields.get("max"), fields.get("per"),  # type: ignore[arg-type]
            fields.get("budget"), fields.get("delay"), fallback,  # type: ignore[arg-type]
            fields.get("doubling"), fields.get("cap"), fields.get("grow"))  # type: ignore[arg-type]

    # ------------------------------------------------------------ conditions and filters
    def node(self, tree: Tree) -> nodes.Node:
        return self._dispatch[tree.data](tree)

    def _flatten(self, tree: Tree) -> tuple[nodes.Node, ...]:
        return tuple(self.node(child) for child in spine(tree))

    def _or(self, tree: Tree) -> nodes.Node:
        return nodes.Or(self.span(tree), self._flatten(tree))

    def _and(self, tree: Tree) -> nodes.Node:
        return nodes.And(self.span(tree), self._flatten(tree))

    def _not(self, tree: Tree) -> nodes.Node:
        return nodes.Not(self.span(tree), self.node(tree.children[0]))

    def _pod_parts(self, children: list) -> tuple:
        task = state = for_ = filt = None
        rest = []
        for child in children:
            data = getattr(child, "data", None)
            if data == "of_task":
                task = self.text(child.children[0])
            elif data == "pod_state":
                token = child.children[0]
                state = "failedOrEvicted" if token.type == "FAILED_OR_EVICTED" else str(token)
            elif data == "for_dur":
                for_ = self.duration(child.children[0])
            elif data in ("quant", "cmp") or data is None:
                rest.append(child)
            else:
                filt = self.node(child)
        return task, state, for_, filt, rest

    def _pod_quant(self, tree: Tree) -> nodes.Node:
        task, state, for_, filt, rest = self._pod_parts(tree.children)
        quant = str(rest[0].children[0])
        return nodes.PodQuant(self.span(tree), "none" if quant == "no" else quant, task, state,
                              for_, filt)

    def _pod_count(self, tree: Tree) -> nodes.Node:
        task, state, _, filt, rest = self._pod_parts(tree.children)
        cmp, value = rest
        amount = self.number(value) if value.type == "INT" else self.expr(value)
        return nodes.PodCount(self.span(tree), task, state, filt, str(cmp.children[0]), amount)

    def _task_quant(self, tree: Tree) -> nodes.Node:
        quant, state = tree.children
        return nodes.TaskQuant(self.span(tree), str(quant.children[0]), None,
                               str(state.children[0]))

    def _task_named(self, tree: Tree) -> nodes.Node:
        name, state = tree.children
        return nodes.TaskQuant(self.span(tree), "any", self.text(name), str(state.children[0]))

    def _task_count(self, tree: Tree) -> nodes.Node:
        *state, cmp, value = tree.children
        amount = self.number(value) if value.type == "INT" else self.expr(value)
        return nodes.TaskCount(self.span(tree), str(state[0].children[0]) if state else None,
                               str(cmp.children[0]), amount)

    def _choice(self, tree: Tree) -> tuple[tuple[nodes.Text, ...], bool]:
        """The values of `X "v"` or `X [not] in [...]`, and whether negated."""
        ch = tree.children
        if len(ch) == 1:
            return (self.text(ch[0]),), False
        return self.texts(ch[1]), len(ch[0].children) == 2

    def _exit(self, tree: Tree) -> nodes.Node:
        ch = tree.children
        negate = False
        items = ch
        if len(ch) == 2:
            negate = len(ch[0].children) == 2
            items = ch[1].children
        codes, ranges = [], []
        for item in items:
            if getattr(item, "data", None) == "code_range":
                lo, hi = item.children
                ranges.append((self.number(lo), self.number(hi)))
            else:
                codes.append(self.number(item))
        return nodes.ExitCodes(self.span(tree), tuple(codes), tuple(ranges), negate)

    def _reason(self, tree: Tree) -> nodes.Node:
        values, negate = self._choice(tree)
        return nodes.ContainerReason(self.span(tree), values, negate)

    def _pod_reason(self, tree: Tree) -> nodes.Node:
        values, negate = self._choice(tree)
        return nodes.PodReason(self.span(tree), values, negate)

    def _task_term(self, tree: Tree) -> nodes.Node:
        values, negate = self._choice(tree)
        return nodes.TaskIs(self.span(tree), values, negate)

    def _namespace(self, tree: Tree) -> nodes.Node:
        values, negate = self._choice(tree)
        return nodes.Namespace(self.span(tree), values, negate)

    def _condition(self, tree: Tree) -> nodes.Node:
        ctype, *rest = tree.children
        statuses: tuple[nodes.Text, ...] = ()
        reasons: tuple[nodes.Text, ...] = ()
        for part in rest:
            item = part.children[0]
            values = self.texts(item) if hasattr(item, "data") else (self.text(item),)
            if part.data == "condition_status":
                statuses = values
            else:
                reasons = values
        return nodes.PodCondition(self.span(tree), self.text(ctype), statuses, reasons)

    def _restarts(self, tree: Tree) -> nodes.Node:
        cmp, value = tree.children
        return nodes.Restarts(self.span(tree), str(cmp.children[0]), self.number(value))

    def _key_test(self, tree: Tree, what: str) -> nodes.Node:
        key, *test = tree.children
        values: tuple[nodes.Text, ...] | None = None
        negate = False
        if test:
            first, *rest = test[0].children
            if hasattr(first, "data"):  # in_op str_list
                negate = len(first.children) == 2
                values = self.texts(rest[0])
            elif str(first) in ("=", "!="):
                negate = str(first) == "!="
                values = (self.text(rest[0]),)
        return nodes.KeyTest(self.span(tree), what, self.text(key), values, negate)

    # ------------------------------------------------------------ injection
    def injection(self, tree: Tree) -> nodes.Injection:
        name = None
        kinds: list[nodes.Name] = []
        match = None
        ops: list[nodes.Op] = []
        wait = None
        seen: dict[str, Span] = {}
        for child in tree.children:
            data = getattr(child, "data", None)
            if data is None:
                if child.type == "STRING":
                    name = self.text(child)
                else:
                    kinds.append(self.name(child))
            elif data == "inject_where":
                match = self.node(child.children[0])
            elif data == "wait_op":
                if self.once(seen, "wait", self.span(child), "`wait for`"):
                    item = child.children[0]
                    wait = self.texts(item) if hasattr(item, "data") else (self.text(item),)
            else:
                ops.append(self.op(child))
        return nodes.Injection(self.span(tree), name, tuple(kinds), match, tuple(ops), wait)

    def containers(self, tree: Tree | None) -> nodes.Containers | None:
        if tree is None:
            return None
        select = tree.data.removeprefix("select_")
        names = self.texts(tree.children[0]) if select == "named" else ()
        return nodes.Containers(self.span(tree), select, names)

    def op(self, tree: Tree) -> nodes.Op:
        span, ch, kind = self.span(tree), tree.children, tree.data
        if kind == "annotate_op":
            return nodes.Annotate(span, self.text(ch[0]), self.value(ch[1]))
        if kind == "label_op":
            return nodes.SetLabel(span, self.text(ch[0]), self.value(ch[1]))
        if kind == "env_op":
            return nodes.Env(span, self.text(ch[0]), self.value(ch[1]),
                             self.containers(ch[2] if len(ch) > 2 else None))
        if kind == "volume_op":
            source = ch[1]
            ref = self.text(source.children[0]) if source.children else None
            return nodes.Volume(span, self.text(ch[0]),
                                {"empty_dir": "emptyDir", "config_map": "configMap",
                                 "secret": "secret"}[source.data], ref)
        if kind == "mount_op":
            return self.mount(tree)
        if kind == "sidecar_op":
            return self.sidecar(tree)
        # wrap_op
        target, how = ch
        if how.data == "wrap_shell":
            return nodes.Wrap(span, self.containers(target), None,  # type: ignore[arg-type]
                              self.value(how.children[0]))
        return nodes.Wrap(span, self.containers(target), self.values(how),  # type: ignore[arg-type]
                          None)

    def mount(self, tree: Tree) -> nodes.Mount:
        ch = tree.children
        read_only = any(getattr(c, "data", None) == "read_only" for c in ch)
        containers = next((c for c in ch if getattr(c, "data", "").startswith("select_")),
                          None)
        return nodes.Mount(self.span(tree), self.text(ch[0]), self.text(ch[1]), read_only,
                           self.containers(containers))

    def sidecar(self, tree: Tree) -> nodes.Sidecar:
        name, *rest = tree.children
        native = bool(rest) and rest[0].data == "native"
        fields: dict[str, object] = {}
        env: list[nodes.SidecarEnv] = []
        mounts: list[nodes.Mount] = []
        seen: dict[str, Span] = {}
        for stmt in rest[1:] if native else rest:
            kind, span, ch = stmt.data, self.span(stmt), stmt.children
            if kind == "sidecar_env":
                env.append(nodes.SidecarEnv(span, self.text(ch[0]), self.value(ch[1])))
            elif kind == "sidecar_mount":
                mounts.append(self.mount(stmt))
            else:
                which = kind.removeprefix("sidecar_")
                if self.once(seen, which, span, f"`{which}`"):
                    fields[which] = (self.value(ch[0]) if which == "image"
                                     else self.values(ch[0]))
        return nodes.Sidecar(self.span(tree), self.text(name), native,
                             fields.get("image"), fields.get("command"),  # type: ignore[arg-type]
                             fields.get("args"), tuple(env), tuple(mounts))  # type: ignore[arg-type]

