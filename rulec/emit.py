"""Emission: a checked program to the plan JSON of docs/plan.md (planVersion 1).

Deterministic by construction: files come sorted by path, declarations keep source order, and
the text is dumped with sorted keys.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

from rulec import nodes
from rulec.source import SourceFile, Span
from runtime import vocabulary

DEFAULT_CONDITION = "JobRulesVerdict"
DEFAULT_TIMEOUT = 5

Json = dict[str, Any]


def plan(files: Sequence[tuple[SourceFile, nodes.File]]) -> Json:
    """The plan of a program; `files` must be sorted by path and free of errors."""
    decls = [d for _, f in files for d in f.decls]
    defines = {d.name.value: d for d in decls if isinstance(d, nodes.Define)}
    causes = {d.name.value: d for d in decls if isinstance(d, nodes.Cause)}
    extensions: dict[str, list[nodes.Policy]] = {}
    for d in decls:
        if isinstance(d, nodes.Extend):
            extensions.setdefault(d.name.value, []).extend(d.policies)
    emitter = _Emitter(defines, causes, extensions)
    kinds = [emitter.kind(d) for d in decls if isinstance(d, nodes.Kind)]
    injections = [emitter.injection(decl, name)
                  for _, file in files for decl, name in file.injection_names()]
    kinds = [_with_native(k, injections) for k in kinds]
    out = {
        "planVersion": vocabulary.PLAN_VERSION,
        "files": [{"path": s.path, "sha256": hashlib.sha256(s.text.encode()).hexdigest()}
                  for s, _ in files],
        "kinds": kinds,
        "injections": injections,
        "webhook": _webhook([d for d in decls if isinstance(d, nodes.Webhook)]),
    }
    native = _native_injections(out)
    if native:
        out["nativeInjections"] = native
    return out


def _native_injections(plan: Json) -> Json:
    """Injection -> the MutatingAdmissionPolicies that can do it (rulec/native_admission.py);
    the others stay with the webhook."""
    if not plan["injections"]:
        return {}
    from rulec import native_admission
    from runtime import plan as planlib

    return {d.injection: list(d.policies)
            for d in native_admission.decide(planlib.load(plan)) if d.native}


def _with_native(kind: Json, injections: Sequence[Json]) -> Json:
    """A batch/v1 Job kind with what `rulec native` decides (docs/native.md): the fragment and
    which policy went to which rule, so that the controller can leave those policies to the Job
    controller on Jobs that carry the fragment. Absent when nothing went native."""
    from rulec import native

    if not native.is_batch_job(kind):
        return kind
    report = native.decide_kind(kind, injections)
    if not report.native_count:
        return kind
    policies = {d.policy: ({"default": True} if d.default else {"rule": d.rule})
                for d in report.decisions if d.native}
    return {**kind, "native": {"fragment": report.fragment(), "policies": policies}}


def dumps(plan_json: Json) -> str:
    return json.dumps(plan_json, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def plural(kind: str) -> str:
    """The resource name Kubernetes derives from a Kind (as its code generators do)."""
    lower = kind.lower()
    if lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def span(s: Span) -> Json:
    return s.to_json()


def template(t: nodes.Template | None) -> list[Any] | None:
    if t is None:
        return None
    return [_part(p) for p in t.parts]


def _part(p: str | nodes.Placeholder | nodes.Expr) -> Any:
    if isinstance(p, str):
        return p
    if isinstance(p, nodes.Placeholder):
        return {"var": p.name}
    return {"expr": p.text, "span": span(p.span)}


def _webhook(hooks: list[nodes.Webhook]) -> Json:
    failure = next((h.failure.value for h in hooks if h.failure), "open")
    timeout = next((h.timeout.seconds for h in hooks if h.timeout), DEFAULT_TIMEOUT)
    return {"failurePolicy": "Fail" if failure == "closed" else "Ignore",
            "timeoutSeconds": timeout}


def _walk(n: nodes.Node | None) -> list[nodes.Node]:
    """The filter's terms in source order but those under `not` (the first `cause` term names
    a policy's cause: `not cause "x"` names none)."""
    if n is None or isinstance(n, nodes.Not):
        return []
    if isinstance(n, (nodes.And, nodes.Or)):
        return [n, *(t for a in n.args for t in _walk(a))]
    return [n]


def phase_name(word: str) -> str:
    return word[:1].upper() + word[1:].lower()


def container_scope(node: nodes.Node | None) -> tuple[nodes.Node | None, str | None]:
    """A filter without its top-level `container "x"` term, and x."""
    if isinstance(node, nodes.ContainerScope):
        return None, node.name.value
    if isinstance(node, nodes.And):
        scopes = [a for a in node.args if isinstance(a, nodes.ContainerScope)]
        if scopes:
            rest = tuple(a for a in node.args if not isinstance(a, nodes.ContainerScope))
            kept: nodes.Node | None = rest[0] if len(rest) == 1 else (
                nodes.And(node.span, rest) if rest else None)
            return kept, scopes[0].name.value
    return node, None


class _Emitter:
    __slots__ = ("defines", "causes", "extensions")

    def __init__(self, defines: Mapping[str, nodes.Define], causes: Mapping[str, nodes.Cause],
                 extensions: Mapping[str, list[nodes.Policy]]) -> None:
        self.defines = defines
        self.causes = causes  # in declaration order: the first that matches a verdict wins
        self.extensions = extensions  # kind name -> the policies `extend` adds, in plan order

    # ------------------------------------------------------------ kinds
    def kind(self, k: nodes.Kind) -> Json:
        owned = k.owned or not k.pod_labels
        task: Json | None = None
        if k.task_label is not None:
            task = {"label": k.task_label.value}
        elif k.task_expr is not None:
            task = {"expr": k.task_expr.text, "span": span(k.task_expr.span)}
        counters: dict[str, int] = {}
        policies = []
        for p in (*k.policies, *self.extensions.get(k.name.value, ())):
            n = counters.get(p.event.name, 0)
            counters[p.event.name] = n + 1
            policies.append(self.policy(p, p.id.value if p.id else f"{p.event.name}#{n}",
                                        audit=k.mode is not None))
        out = {
            "name": k.name.value, "span": span(k.span),
            "group": k.group, "version": k.version, "kind": k.kind.value,
            "plural": k.plural.value if k.plural else plural(k.kind.value),
            "apiVersion": k.api_version.value,
            "versions": [k.version, *(v.value for v in k.more_versions)],
            "selector": _selector(k.scope),
            "namespaces": _namespaces(k.scope),
            "final": {"sticky": not (k.final is not None and k.final.never),
                      "until": None if k.final is None or k.final.until is None
                      else {"expr": k.final.until.text, "span": span(k.final.until.span)}},
            "foreign": None if k.foreign is None else {
                "when": {"expr": k.foreign.when.text, "span": span(k.foreign.when.span)},
                "verdicts": k.foreign.verdicts},
            "pods": {"owned": owned,
                     "labels": {lbl.key.value: template(lbl.value) for lbl in k.pod_labels}},
            "task": task,
            "primaryPods": self.pod_filter(k.primary_pods),
            "primaryContainers": ([c.value for c in k.primary_containers]
                                  if k.primary_containers is not None else None),
            "primaryContainerPrefix": k.primary_prefix.value if k.primary_prefix else None,
            "verdicts": [self.verdict(v) for v in k.verdicts],
            "policies": policies,
            "status": self.status(k.status),
            "actions": {r.verb: self.recipe(r) for r in k.recipes if r.when is None},
            "audit": None if k.mode is None else {"span": span(k.mode.span),
                                                  "annotationOnly": k.mode.annotation_only},
        }
        guarded = [r for r in k.recipes if r.when is not None]
        if guarded:   # absent from the plans of kinds without them, as before them
            out["guardedActions"] = [
                {"action": r.verb, "when": {"expr": r.when.text, "span": span(r.when.span)},
                 "recipe": self.recipe(r)} for r in guarded if r.when is not None]
        if self.causes:  # absent from the plans of programs without causes, as before them
            out["causes"] = [self.cause(c) for c in self.causes.values()]
        return out

    def cause(self, c: nodes.Cause) -> Json:
        return {"name": c.name.value, "span": span(c.span), "hint": c.hint.value,
                "filter": self.pod_filter(c.filter)}

    def recipe(self, r: nodes.Recipe) -> Json | str:
        return r.word or {"span": span(r.span), "steps": [self.step(s) for s in r.steps]}

    def step(self, s: nodes.Step) -> Json:
        out: Json = {"op": s.op, "span": span(s.span)}
        if s.op == "deletePods":
            out.update(scope=s.scope, evict=s.evict)
        elif s.op == "set":
            assert s.path is not None
            out.update(path=list(s.path.segments),
                       value=s.value.value if isinstance(s.value, nodes.Text) else s.value)
            if s.on is not None:
                out["on"] = {"apiVersion": s.on.api_version.value, "kind": s.on.kind.value,
                             "plural": plural(s.on.kind.value),
                             "label": {"key": s.on.key.value, "value": template(s.on.value)}}
        elif s.op == "resize":
            assert s.path is not None
            out["path"] = list(s.path.segments)
            if s.within is not None:
                out["within"] = list(s.within.segments)
        elif s.op == "condition":
            assert s.type is not None
            out["type"] = s.type.value
        elif s.op == "create":
            assert s.api_version is not None and s.kind is not None
            out.update(apiVersion=s.api_version.value, kind=s.kind.value,
                       plural=plural(s.kind.value),
                       body={key.value: {"job": True} if isinstance(value, str)
                             else template(value) for key, value in s.body})
        else:
            assert s.when is not None and s.timeout is not None
            out.update(when=self.condition(s.when), timeout=s.timeout.seconds)
        return out

    def verdict(self, v: nodes.Verdict) -> Json:
        return {"span": span(v.span), "phase": v.phase,
                "when": None if v.when is None else self.condition(v.when),
                "reason": template(v.reason), "message": template(v.message)}

    def status(self, s: nodes.Status | None) -> Json:
        if s is None:
            return {"phase": None, "reason": None, "message": None,
                    "condition": DEFAULT_CONDITION, "annotations": True, "events": True}
        phase = None
        if s.phase is not None:
            phase = {"path": list(s.phase.segments),
                     "map": {phase_name(e.phase.value): e.value.value for e in s.phase_map},
                     "only": None if s.phase_only is None else [
                         phase_name(n.value) for n in s.phase_only],
                     "over": None if s.phase_over is None else [t.value for t in s.phase_over]}
        condition = None if s.condition_off else (
            s.condition.value if s.condition else DEFAULT_CONDITION)
        return {"span": span(s.span), "phase": phase,
                "reason": {"path": list(s.reason.segments)} if s.reason else None,
                "message": {"path": list(s.message.segments)} if s.message else None,
                "condition": condition, "annotations": s.annotations, "events": s.events}

    def policy(self, p: nodes.Policy, policy_id: str, *, audit: bool = False) -> Json:
        """`audit`: the kind's `mode audit` (a policy's own `audit on` counts as well)."""
        e = p.event
        out: Json = {
            "id": policy_id, "span": span(p.span), "event": e.name,
            "task": e.task.value if e.task else None,
            "filter": self.pod_filter(p.filter),
            "for": e.for_.seconds if e.for_ else None,
            "to": phase_name(e.to.value) if e.to else None,
            "evicted": e.evicted,
            "action": self.action(p.action, policy_id),
            "audit": audit or p.audit is not None,
        }
        cause = next((n.name.value for n in _walk(p.filter) if isinstance(n, nodes.IsCause)), None)
        if cause is not None:  # the policy's own cause: the one a verdict it decides carries
            out["cause"] = cause
        return out

    def action(self, a: nodes.Action, key: str) -> Json:
        budget = None
        if a.max is not None:
            limit = a.max.value if isinstance(a.max, nodes.Number) else {
                "expr": a.max.text, "span": span(a.max.span)}
            budget = {"max": limit, "per": a.per.value if a.per else "job",
                      "key": a.budget.value if a.budget else key}
        return {
            "action": a.verb, "reason": template(a.reason), "message": template(a.message),
            "budget": budget,
            "fallback": self.action(a.fallback, f"{key}/then") if a.fallback else None,
            "delay": a.delay.seconds if a.delay else None,
            "doubling": a.doubling is not None,
            "delayCap": a.delay_cap.seconds if a.delay_cap else None,
            **({"grow": {"resource": "memory", "factor": a.grow.factor,
                         "max": a.grow.max.value if a.grow.max else None}} if a.grow else {}),
        }

    # ------------------------------------------------------------ conditions
    def condition(self, n: nodes.Node) -> Json:
        if isinstance(n, (nodes.And, nodes.Or)):
            return {"op": "and" if isinstance(n, nodes.And) else "or",
                    "args": [self.condition(a) for a in n.args]}
        if isinstance(n, nodes.Not):
            return {"op": "not", "arg": self.condition(n.arg)}
        if isinstance(n, nodes.JobExpr):
            return _jmespath(n.expr)
        if isinstance(n, nodes.PodQuant):
            return {"op": "pods", "quant": n.quant, "task": n.task.value if n.task else None,
                    "state": n.state, "filter": self.pod_filter(n.filter),
                    "for": n.for_.seconds if n.for_ else None}
        if isinstance(n, nodes.PodCount):
            return {"op": "count", "task": n.task.value if n.task else None, "state": n.state,
                    "filter": self.pod_filter(n.filter), "cmp": n.cmp, "value": _count(n.value)}
        if isinstance(n, nodes.TaskQuant):
            return {"op": "task", "quant": n.quant, "task": n.task.value if n.task else None,
                    "state": n.state}
        if isinstance(n, nodes.TaskCount):
            return {"op": "taskCount", "state": n.state, "cmp": n.cmp, "value": _count(n.value)}
        assert isinstance(n, nodes.JobAge), n
        return {"op": "jobAge", "longerThan": n.longer_than.seconds}

    # ------------------------------------------------------------ pod filters
    def pod_filter(self, n: nodes.Node | None) -> Json | None:
        if n is None:
            return None
        rest, container = container_scope(n)
        return None if rest is None else self._pod(rest, container)

    def _pod(self, n: nodes.Node, container: str | None) -> Json:
        if isinstance(n, (nodes.And, nodes.Or)):
            return {"op": "and" if isinstance(n, nodes.And) else "or",
                    "args": [self._pod(a, container) for a in n.args]}
        if isinstance(n, nodes.Not):
            return {"op": "not", "arg": self._pod(n.arg, container)}
        if isinstance(n, nodes.ExitCodes):
            return {"op": "exitCode", "codes": [c.value for c in n.codes],
                    "ranges": [[lo.value, hi.value] for lo, hi in n.ranges],
                    "negate": n.negate, "container": container}
        if isinstance(n, nodes.ContainerReason):
            return {"op": "containerReason", "values": _values(n.values), "negate": n.negate,
                    "container": container}
        if isinstance(n, nodes.PodReason):
            return {"op": "podReason", "values": _values(n.values), "negate": n.negate}
        if isinstance(n, nodes.PodCondition):
            return {"op": "condition", "type": n.type.value, "reasons": _values(n.reasons),
                    "status": _values(n.statuses) or ["True"], "negate": False}
        if isinstance(n, nodes.TaskIs):
            return {"op": "task", "values": _values(n.values), "negate": n.negate}
        if isinstance(n, nodes.Restarts):
            return {"op": "restarts", "cmp": n.cmp, "value": n.value.value,
                    "container": container}
        if isinstance(n, nodes.KeyTest):
            return _key_test(n)
        if isinstance(n, nodes.Where):
            return _jmespath(n.expr)
        if isinstance(n, nodes.IsCause):
            emitted = self.pod_filter(self.causes[n.name.value].filter)
            assert emitted is not None
            return emitted
        assert isinstance(n, nodes.IsDefine), n
        emitted = self.pod_filter(self.defines[n.name.value].filter)
        assert emitted is not None
        return emitted

    # ------------------------------------------------------------ injection
    def injection(self, i: nodes.Injection, name: str) -> Json:
        return {
            "name": name, "span": span(i.span),
            "kinds": [k.value for k in i.kinds],
            "match": None if i.match is None else self._match(i.match),
            "ops": [self.op(o) for o in i.ops],
            "completionContainers": [w.value for w in i.wait] if i.wait is not None else None,
        }

    def _match(self, n: nodes.Node) -> Json:
        if isinstance(n, (nodes.And, nodes.Or)):
            return {"op": "and" if isinstance(n, nodes.And) else "or",
                    "args": [self._match(a) for a in n.args]}
        if isinstance(n, nodes.Not) and isinstance(n.arg, nodes.KeyTest) \
                and n.arg.what == "namespace label":
            # the API server applies it: one requirement (`not namespace label "k"` = DoesNotExist)
            return {**self._match(n.arg), "negate": not n.arg.negate}
        if isinstance(n, nodes.Not):
            return {"op": "not", "arg": self._match(n.arg)}
        if isinstance(n, nodes.KeyTest) and n.what == "namespace label":
            return {"op": "namespaceLabel", "key": n.key.value,
                    "values": None if n.values is None else _values(n.values), "negate": n.negate}
        if isinstance(n, nodes.KeyTest):
            return _key_test(n)
        if isinstance(n, nodes.Namespace):
            return {"op": "namespace", "values": _values(n.values), "negate": n.negate}
        if isinstance(n, nodes.TaskIs):
            return {"op": "task", "values": _values(n.values), "negate": n.negate}
        if isinstance(n, nodes.PrimaryPod):
            return {"op": "primary"}
        assert isinstance(n, nodes.Where), n
        return _jmespath(n.expr)

    def op(self, o: nodes.Op) -> Json:
        base: Json = {"span": span(o.span)}
        if isinstance(o, nodes.Annotate):
            return {**base, "op": "annotate", "key": o.key.value, "value": template(o.value)}
        if isinstance(o, nodes.SetLabel):
            return {**base, "op": "label", "key": o.key.value, "value": template(o.value)}
        if isinstance(o, nodes.Env):
            return {**base, "op": "env", "name": o.name.value, "value": template(o.value),
                    "containers": _containers(o.containers)}
        if isinstance(o, nodes.Volume):
            source: Json = {"emptyDir": {}}
            if o.source == "configMap":
                source = {"configMap": {"name": o.ref.value if o.ref else ""}}
            elif o.source == "secret":
                source = {"secret": {"secretName": o.ref.value if o.ref else ""}}
            return {**base, "op": "volume", "name": o.name.value, "source": source}
        if isinstance(o, nodes.Mount):
            return {**base, "op": "mount", "volume": o.volume.value, "path": o.path.value,
                    "readOnly": o.read_only, "containers": _containers(o.containers)}
        if isinstance(o, nodes.Sidecar):
            return {**base, "op": "sidecar", "name": o.name.value, "native": o.native,
                    "image": template(o.image),
                    "command": None if o.command is None else [template(t) for t in o.command],
                    "args": None if o.args is None else [template(t) for t in o.args],
                    "env": [{"name": e.name.value, "value": template(e.value)} for e in o.env],
                    "mounts": [{"volume": m.volume.value, "path": m.path.value,
                                "readOnly": m.read_only} for m in o.mounts]}
        assert isinstance(o, nodes.Wrap), o
        return {**base, "op": "wrap", "containers": _containers(o.containers),
                "argv": None if o.argv is None else [template(t) for t in o.argv],
                "shell": template(o.shell)}


def _count(value: nodes.Number | nodes.Expr) -> list[Any]:
    """A count's value: a number as the JMESPath literal `N` (so it compares as a number)."""
    if isinstance(value, nodes.Number):
        return [{"expr": f"`{value.value}`", "span": span(value.span)}]
    return [_part(value)]


def _scope_terms(scope: nodes.Node | None) -> tuple[nodes.Node, ...]:
    return () if scope is None else scope.args if isinstance(scope, nodes.And) else (scope,)


def _selector(scope: nodes.Node | None) -> list[Json] | None:
    """A kind scope's label tests as Kubernetes label-selector requirements, in source order."""
    out = []
    for term in _scope_terms(scope):
        negated = isinstance(term, nodes.Not)
        test = term.arg if isinstance(term, nodes.Not) else term
        if not isinstance(test, nodes.KeyTest):
            continue
        if test.values is None:
            operator = "DoesNotExist" if negated else "Exists"
        else:
            operator = "NotIn" if test.negate != negated else "In"
        out.append({"key": test.key.value, "operator": operator,
                    "values": [] if test.values is None else sorted(_values(test.values))})
    return out or None


def _namespaces(scope: nodes.Node | None) -> list[str] | None:
    """The namespaces a kind's scope names (every `namespace` term must hold: their common ones)."""
    found: set[str] | None = None
    for term in _scope_terms(scope):
        if isinstance(term, nodes.Namespace):
            values = set(_values(term.values))
            found = values if found is None else found & values
    return None if found is None else sorted(found)


def _jmespath(e: nodes.Expr) -> Json:
    return {"op": "jmespath", "expr": e.text, "span": span(e.span)}


def _values(texts: tuple[nodes.Text, ...]) -> list[str]:
    return [t.value for t in texts]


def _key_test(n: nodes.KeyTest) -> Json:
    return {"op": n.what, "key": n.key.value,
            "values": None if n.values is None else _values(n.values), "negate": n.negate}


def _containers(c: nodes.Containers | None) -> Json:
    if c is None:
        return {"select": "primary", "names": []}
    return {"select": c.select, "names": _values(c.names)}
