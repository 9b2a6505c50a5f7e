"""The plan's injections, and the batch Job fragment, as the API server's own admission.

A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.36) mutates in
the API server, with CEL: no HTTP call, and nothing of ours needs to be up. This module decides,
for each injection of a plan, whether CEL can do what the webhook does (runtime/mutator/,
docs/injection.md) to the same pod, and writes the policy and its binding when it can; when it
cannot, the injection stays with the webhook, with a stable code of
`rulec.diagnostics.NATIVE_CODES` and the reason. It also writes the policy that adds a batch Job
kind's podFailurePolicy fragment (rulec/native.py) to a Job created without one.

The policies do what the webhook's patch does, field by field: the rule wins for annotations and
labels, the pod wins for env, volumes, mounts and sidecars (the API server's ServiceAccount
plugin then mounts its token into a sidecar, as it does after the webhook), and the record
annotation `jobrules.dev/injected` gets the injection's `name@digest` when it changed something
and does not name the injection yet: the webhook and the policy agree on "already done", and a
reinvocation changes nothing. docs/native.md, Injections, has the table and the codes.
Pure: the plan in, objects out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime import plan as planlib
from runtime import vocabulary
from runtime.mutator.inject import digest
from runtime.mutator.steps import COMPLETION_ENV
from runtime.registration import ALWAYS_EXCLUDED, SKIP_LABEL

Obj = dict[str, Any]
API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_KIND = "MutatingAdmissionPolicy"
BINDING_KIND = "MutatingAdmissionPolicyBinding"
PREFIX = "jobrules-"
RECORD = vocabulary.INJECTED_ANNOTATION
COMPLETION = vocabulary.COMPLETION_ANNOTATION
# The API server's CEL budget for one evaluation of an admission policy (k8s.io/apiserver
# celconfig.RuntimeCELCostBudget); spending more is a failure, handled by the failurePolicy.
# kube-apiserver 1.36.3 accepts a MutatingAdmissionPolicy whatever its expressions' estimated
# cost (a deliberately costly one was not refused), so the budget at run time is the limit.
RUNTIME_BUDGET = 10_000_000

_META = "object.metadata"
_REFS = f"{_META}.ownerReferences"
_CONTROLLER = "has(r.controller) && r.controller == true"


class _Engine(Exception):
    """Why an injection stays with the webhook: a NATIVE_CODES code and the reason."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


@dataclass(frozen=True, slots=True)
class InjectionDecision:
    """Where one injection goes: policies (one per kind it names) or the webhook (`code`)."""

    injection: str
    where: str                       # path:line:col of the `inject` block
    policies: tuple[str, ...] = ()
    code: str | None = None
    reason: str | None = None
    expressions: int = 0             # CEL expressions per policy (the most of its policies)
    objects: tuple[Obj, ...] = ()    # the policies and their bindings

    @property
    def native(self) -> bool:
        return bool(self.policies)

    def to_json(self) -> Obj:
        return {"injection": self.injection, "where": self.where, "native": self.native,
                "policies": list(self.policies), "code": self.code, "reason": self.reason,
                "expressions": self.expressions}


def q(text: str) -> str:
    """A CEL string literal (JSON's escapes are CEL's)."""
    return json.dumps(text, ensure_ascii=False)


def policy_name(injection: str, kind: str | None = None, prefix: str = PREFIX) -> str:
    """`jobrules-<injection>` (an injection's one policy, whatever kinds it names), or
    `jobrules-<kind>-<what>` (a Job kind's)."""
    name = f"{prefix}{injection}" if kind is None else f"{prefix}{injection}-{kind}"
    return re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")[:253]   # a DNS subdomain


def decide(plan: planlib.Plan, *, prefix: str = PREFIX,
           namespace_labels: Mapping[str, str] | None = None) -> tuple[InjectionDecision, ...]:
    """For each injection, in plan order, its policies and bindings or why it stays with the
    webhook. `namespace_labels` narrows every policy to namespaces with those labels too (tests
    share one control plane)."""
    out = []
    kinds = {k.name: k for k in plan.kinds}
    sidecars = frozenset(op.name for i in plan.injections for op in i.ops
                         if isinstance(op, planlib.Sidecar))
    for injection in plan.injections:
        where = str(injection.span)
        objects: list[Obj] = []
        try:
            if not injection.kinds:
                raise _Engine("N119", "the injection names no kind")
            each = [_Policy(injection, kinds[name], sidecars) for name in injection.kinds]
            objects += _objects(each, plan, policy_name(injection.name, prefix=prefix),
                                namespace_labels)
        except _Engine as err:
            out.append(InjectionDecision(injection.name, where, code=err.code, reason=err.reason))
            continue
        policies = [o for o in objects if o["kind"] == POLICY_KIND]
        count = max(len(p["spec"]["matchConditions"]) + len(p["spec"]["variables"])
                    + len(p["spec"]["mutations"]) for p in policies)
        out.append(InjectionDecision(injection.name, where,
                                     tuple(p["metadata"]["name"] for p in policies),
                                     expressions=count, objects=tuple(objects)))
    return tuple(out)


def job_policies(plan: planlib.Plan, *, prefix: str = PREFIX,
                 namespace_labels: Mapping[str, str] | None = None) -> tuple[Obj, ...]:
    """For each batch/v1 Job kind whose policies went native (`rulec native`, the plan's
    `native` section), a policy and binding that add its fragment to a Job created without a
    podFailurePolicy whose pod template uses `restartPolicy: Never` (the API server refuses a
    podFailurePolicy otherwise); per-index handling also needs `completionMode: Indexed`."""
    out: list[Obj] = []
    for kind in plan.kinds:
        if kind.native is None or not kind.native.fragment:
            continue
        fragment = dict(kind.native.fragment)
        conditions = [
            {"name": "no-pod-failure-policy", "expression": "!has(object.spec.podFailurePolicy)"},
            {"name": "restart-policy-never", "expression":
                "has(object.spec.template.spec.restartPolicy) && "
                "object.spec.template.spec.restartPolicy == \"Never\""}]
        rules = fragment.get("podFailurePolicy", {}).get("rules", [])
        if "backoffLimitPerIndex" in fragment or any(r.get("action") == "FailIndex" for r in rules):
            conditions.append({"name": "indexed", "expression":
                               "has(object.spec.completionMode) && "
                               "object.spec.completionMode == \"Indexed\""})
        if kind.namespaces is not None:
            conditions.append({"name": "in-the-kinds-namespaces", "expression":
                               f"request.namespace in [{', '.join(map(q, kind.namespaces))}]"})
        # one JSON patch op per field of the fragment: podFailurePolicy.rules is an atomic list,
        # which an apply configuration may not set; `add` replaces a defaulted backoffLimit
        ops = ", ".join(
            f'JSONPatch{{op: "add", path: "/spec/{key}", value: {_typed(value, f"Object.spec.{key}")}}}'
            for key, value in fragment.items())
        if "podFailurePolicy" in fragment:
            # defaulted to TerminatingOrFailed before admission (the Job had no
            # podFailurePolicy then); with one the API server takes only Failed, its default
            ops += ', JSONPatch{op: "add", path: "/spec/podReplacementPolicy", value: "Failed"}'
        selector: Obj = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                               "operator": "NotIn",
                                               "values": sorted(ALWAYS_EXCLUDED)}]}
        if namespace_labels:
            selector["matchLabels"] = dict(namespace_labels)
        objects: Obj = {"matchExpressions": [
            {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
            for r in kind.requirements]}
        name = policy_name(kind.name, "pod-failure-policy", prefix)
        labels = {"app.kubernetes.io/managed-by": "rulec", "jobrules.dev/kind": kind.name}
        out += [
            {"apiVersion": API_VERSION, "kind": POLICY_KIND,
             "metadata": {"name": name, "labels": labels,
                          "annotations": {"jobrules.dev/rule": str(kind.span)}},
             "spec": {
                 "matchConstraints": {
                     "resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                        "operations": ["CREATE"], "resources": ["jobs"],
                                        "scope": "Namespaced"}],
                     "namespaceSelector": selector, "objectSelector": objects,
                     "matchPolicy": "Equivalent"},
                 "matchConditions": conditions,
                 "failurePolicy": plan.webhook.failure_policy,
                 "reinvocationPolicy": "Never",   # it matches no Job that has a podFailurePolicy
                 "mutations": [{"patchType": "JSONPatch",
                                "jsonPatch": {"expression": f"[{ops}]"}}]}},
            {"apiVersion": API_VERSION, "kind": BINDING_KIND,
             "metadata": {"name": name, "labels": dict(labels)}, "spec": {"policyName": name}},
        ]
    return tuple(out)


def objects(plan: planlib.Plan, *, prefix: str = PREFIX,
            namespace_labels: Mapping[str, str] | None = None) -> list[Obj]:
    """Every native admission object of a plan: the injections' policies and the Jobs'."""
    found = [o for d in decide(plan, prefix=prefix, namespace_labels=namespace_labels)
             for o in d.objects]
    return found + list(job_policies(plan, prefix=prefix, namespace_labels=namespace_labels))


# ---------------------------------------------------------------------------------------------
# One injection into the pods of one kind as one policy


class _Policy:
    """An injection's CEL: match conditions (owner kind, scope, filter), the record, mutations."""

    def __init__(self, injection: planlib.Injection, kind: planlib.Kind,
                 sidecars: frozenset[str]) -> None:
        self.injection = injection
        self.sidecars = sidecars
        self.kind = kind
        for op in injection.ops:
            if isinstance(op, planlib.Wrap):
                raise _Engine("N118", "`wrap` needs the container's command, which may be in the "
                                      "image; the webhook refuses such a pod, a policy cannot")
        self.conditions = self._conditions()
        self.changes, self.mutations = self._mutations()

    # -- matching --------------------------------------------------------------------------

    def _conditions(self) -> list[Obj]:
        owners = " || ".join(
            f"(r.apiVersion == {q(v)} && r.kind == {q(self.kind.kind)})"
            for v in self.kind.api_versions())
        owned = (f"has({_REFS}) && size({_REFS}) > 0 && ({_REFS}.exists(r, {_CONTROLLER}) ? "
                 f"{_REFS}.exists(r, {_CONTROLLER} && ({owners})) : "
                 f"[{_REFS}[0]].exists(r, {owners}))")
        out = [{"name": "owned-by-a-declared-kind", "expression": owned}]
        if self.kind.namespaces is not None:
            out.append({"name": "in-the-kinds-namespaces", "expression":
                        f"request.namespace in [{', '.join(map(q, self.kind.namespaces))}]"})
        if self.injection.match is not None:
            test = self._filter(self.injection.match)
            if test != "true":
                out.append({"name": "where", "expression": test})
        return out

    def _filter(self, node: Any) -> str:
        match node:
            case None | planlib.NamespaceLabel():
                return "true"   # the binding's namespaceSelector tests namespace labels
            case planlib.And(args):
                return "(" + " && ".join(self._filter(a) for a in args) + ")"
            case planlib.Or(args):
                return "(" + " || ".join(self._filter(a) for a in args) + ")"
            case planlib.Not(arg):
                return f"!({self._filter(arg)})"
            case planlib.LabelIs(key, values, negate, annotation):
                test = _has_key("annotations" if annotation else "labels", key, values)
                return f"!{test}" if negate else test
            case planlib.NamespaceIs(namespaces, negate):
                test = f"(request.namespace in [{', '.join(map(q, sorted(namespaces)))}])"
                return f"!{test}" if negate else test
            case planlib.TaskIs(tasks, negate):
                label = self._task_label()
                test = _has_key("labels", label, frozenset(t for t in tasks if t))
                return f"!{test}" if negate else test
            case planlib.IsPrimary():
                primary = self.kind.primary_pods
                return "true" if primary is None else self._pod_filter(primary)
            case planlib.JmesPath(expr):
                raise _Engine("N117", f"the filter <<{expr.source}>> is JMESPath over the pod "
                                      f"and its owner, which CEL is not given")
        raise _Engine("N117", f"a filter term CEL is not given: {type(node).__name__}")

    def _pod_filter(self, node: Any) -> str:
        """The kind's `primary pods` filter at admission: label terms only."""
        match node:
            case planlib.And(args):
                return "(" + " && ".join(self._pod_filter(a) for a in args) + ")"
            case planlib.Or(args):
                return "(" + " || ".join(self._pod_filter(a) for a in args) + ")"
            case planlib.Not(arg):
                return f"!({self._pod_filter(arg)})"
            case planlib.LabelIs(key, values, negate, annotation):
                test = _has_key("annotations" if annotation else "labels", key, values)
                return f"!{test}" if negate else test
        raise _Engine("N117", f"`primary pods` of kind {self.kind.name} tests more than labels "
                              f"({type(node).__name__})")

    def _task_label(self) -> str:
        if self.kind.task_label is None:
            raise _Engine("N117", f"the task of kind {self.kind.name} is a JMESPath expression "
                                  f"over the pod, which CEL is not given")
        return self.kind.task_label

    # -- templates -------------------------------------------------------------------------

    def text(self, template: planlib.Template, container: str | None = None) -> str:
        """A template as a CEL string expression; `container` is the CEL of `{container}`."""
        parts: list[str] = []
        for part in template:
            if isinstance(part, str):
                parts.append(q(part))
            elif isinstance(part, planlib.Var):
                parts.append(self._var(part.name, container))
            else:
                parts.append(self._field(part))
        return " + ".join(parts) if parts else '""'

    def _var(self, name: str, container: str | None) -> str:
        if name == "job":
            return "string(variables.owner.name)"
        if name == "namespace":
            return "request.namespace"
        if name == "kind":
            return q(self.kind.kind)
        if name == "task":
            label = self._task_label()
            return (f"(has({_META}.labels) && {q(label)} in {_META}.labels ? "
                    f"{_META}.labels[{q(label)}] : \"\")")
        if name == "pod":
            return (f"(has({_META}.name) && {_META}.name != \"\" ? {_META}.name : "
                    f"(has({_META}.generateName) ? {_META}.generateName : \"\"))")
        if name == "container" and container is not None:
            return container
        raise _Engine("N117", f"the placeholder {{{name}}} has no CEL")

    _OWNER_FIELDS = {"owner.apiVersion": "apiVersion", "owner.kind": "kind",
                     "owner.metadata.name": "name", "owner.metadata.uid": "uid"}

    def _field(self, expr: planlib.Expr) -> str:
        source = expr.source.strip()
        if source in self._OWNER_FIELDS:
            return f"string(variables.owner.{self._OWNER_FIELDS[source]})"
        if source == "namespace":
            return "request.namespace"
        raise _Engine("N117", f"<<{source}>> is JMESPath over the owner object or the pod; "
                              f"admission sees only the owner reference "
                              f"(owner.apiVersion, owner.kind, owner.metadata.name/uid) in CEL")

    # -- mutations -------------------------------------------------------------------------

    def _select(self, which: planlib.Containers) -> tuple[str, tuple[str, ...]]:
        """A CEL test of a container `c` the op targets, and the lists it looks in."""
        not_ours = (f"!(c.name in [{', '.join(map(q, sorted(self.sidecars)))}])"
                    if self.sidecars else "true")
        kind = self.kind
        if which.select == "named":
            return (f"c.name in [{', '.join(map(q, which.names))}] && {not_ours}",
                    ("containers", "initContainers"))
        if which.select == "primary" and (kind.primary_containers is not None
                                          or kind.primary_prefix is not None):
            terms = [f"c.name in [{', '.join(map(q, kind.primary_containers or ()))}]"]
            if kind.primary_prefix is not None:
                terms.append(f"c.name.startsWith({q(kind.primary_prefix)})")
            return f"({' || '.join(terms)}) && {not_ours}", ("containers",)
        return not_ours, ("containers",)

    def _mutations(self) -> tuple[list[str], list[Obj]]:
        """One JSON patch, every part of it computed from the pod as received (each mutation of
        a policy costs the API server a conversion of the whole pod, each apply configuration a
        merge of it too: one patch is the cheapest), in the webhook's order: metadata and the
        record, volumes, container edits, sidecars. A list made for the patch is made once."""
        changes: list[str] = []
        annotations: list[tuple[str, str]] = []
        labels: list[tuple[str, str]] = []
        volumes: list[tuple[str, str]] = []                        # (missing, item)
        edits: dict[tuple[str, str], list[tuple[str, str]]] = {}   # (field, key) -> (test, item)
        sidecars: list[tuple[str, str, str]] = []                  # (field, missing, container)
        for op in self.injection.ops:
            if isinstance(op, planlib.Annotate):
                annotations.append((op.key, self.text(op.value)))
            elif isinstance(op, planlib.Label):
                labels.append((op.key, self.text(op.value)))
            elif isinstance(op, planlib.Env):
                test, fields = self._select(op.containers)
                lacks = f"!(has(c.env) && c.env.exists(e, e.name == {q(op.name)}))"
                for field in fields:
                    item = (f"Object.spec.{field}.env{{name: {q(op.name)}, "
                            f"value: {self.text(op.value, 'c.name')}}}")
                    edits.setdefault((field, "env"), []).append((f"{test} && {lacks}", item))
                    changes.append(_exists(field, f"{test} && {lacks}"))
            elif isinstance(op, planlib.Mount):
                test, fields = self._select(op.containers)
                lacks = (f"!(has(c.volumeMounts) && "
                         f"c.volumeMounts.exists(m, m.mountPath == {q(op.path)}))")
                for field in fields:
                    item = _mount_cel(f"Object.spec.{field}.volumeMounts", op.volume, op.path,
                                      op.read_only)
                    edits.setdefault((field, "volumeMounts"), []).append(
                        (f"{test} && {lacks}", item))
                    changes.append(_exists(field, f"{test} && {lacks}"))
            elif isinstance(op, planlib.Volume):
                missing = (f"!(has(object.spec.volumes) && "
                           f"object.spec.volumes.exists(v, v.name == {q(op.name)}))")
                volumes.append((missing, _typed({"name": op.name, **dict(op.source)},
                                                "Object.spec.volumes")))
                changes.append(missing)
            elif isinstance(op, planlib.Sidecar):
                sidecars.append(self._sidecar(op))
                changes.append(sidecars[-1][1])
        if self.injection.completion_containers is not None:
            annotations.append((COMPLETION, q(",".join(self.injection.completion_containers))))
        for field, pairs in (("annotations", annotations), ("labels", labels)):
            changes.extend(f"!(has({_META}.{field}) && {q(k)} in {_META}.{field} && "
                           f"{_META}.{field}[{q(k)}] == {v})" for k, v in pairs)
        if not changes:
            raise _Engine("N119", "the injection changes nothing")
        parts = [self._annotations(annotations, changes)]
        if labels:
            parts.append(_metadata("labels", labels))
        if volumes:
            parts.append(_appended("volumes", volumes))
        for (field, key), items in edits.items():
            parts.append(_edited(field, key, items))
        for field in ("containers", "initContainers"):
            made = [(missing, item) for f, missing, item in sidecars if f == field]
            if made:
                parts.append(_appended(field, made))
        return changes, [_patch(" + ".join(parts))]

    def _annotations(self, pairs: list[tuple[str, str]], changes: list[str]) -> str:
        """The annotations' ops, the record's among them: `name@digest` appended when some op
        changes the pod and the record does not name the injection yet (by name, as the
        webhook's draft reads it), written as the draft writes it (compact JSON)."""
        entry = f"{self.injection.name}@{digest(self.injection)}"
        new = q(json.dumps([entry]))
        annotations = f"{_META}.annotations"
        record = f"{annotations}[{q(RECORD)}]"
        listed = (f"{q(RECORD)} in {annotations} && "
                  f"{record}.contains({q(chr(34) + self.injection.name + '@')})")
        changed = " || ".join(dict.fromkeys(changes))
        a_list = q(r'^\[".*"\]$')
        grown = (f"({q(RECORD)} in {annotations} && {record}.matches({a_list})"
                 f" ? {record}.substring(0, size({record}) - 1) + {q(',' + json.dumps(entry) + ']')}"
                 f" : {new})")
        each = [f'JSONPatch{{op: "add", path: {q(_pointer("annotations", k))}, value: {v}}}'
                for k, v in pairs]
        present = (f"[{', '.join(each)}] + (!({listed}) && ({changed}) ? "
                   f'[JSONPatch{{op: "add", path: {q(_pointer("annotations", RECORD))}, '
                   f"value: {grown}}}] : [])")
        body = [f"{q(k)}: {v}" for k, v in pairs]
        whole = ", ".join([*body, f"{q(RECORD)}: {new}"])
        absent = (f'({changed}) ? [JSONPatch{{op: "add", path: "/metadata/annotations", '
                  f"value: {{{whole}}}}}] : "
                  + (f'[JSONPatch{{op: "add", path: "/metadata/annotations", '
                     f"value: {{{', '.join(body)}}}}}]" if body else "[]"))
        return f"(has({annotations}) ? {present} : ({absent}))"

    def _sidecar(self, op: planlib.Sidecar) -> tuple[str, str, str]:
        """(the list it goes to, CEL: no container has its name, CEL: the container)."""
        field = "initContainers" if op.native else "containers"
        typed = f"Object.spec.{field}"
        name = q(op.name)
        fields = [f"name: {name}", f"image: {self.text(op.image, name)}"]
        if op.command is not None:
            fields.append(f"command: [{', '.join(self.text(t, name) for t in op.command)}]")
        if op.args is not None:
            fields.append(f"args: [{', '.join(self.text(t, name) for t in op.args)}]")
        pairs = [(k, self.text(v, name)) for k, v in op.env]
        if self.injection.completion_containers is not None \
                and all(k != COMPLETION_ENV for k, _ in pairs):
            pairs.append((COMPLETION_ENV, q(",".join(self.injection.completion_containers))))
        if pairs:
            fields.append("env: [" + ", ".join(f"{typed}.env{{name: {q(k)}, value: {v}}}"
                                               for k, v in pairs) + "]")
        mounts = [_mount_cel(f"{typed}.volumeMounts", m.volume, m.path, m.read_only)
                  for m in op.mounts]
        if op.native:
            fields.append('restartPolicy: "Always"')
        if mounts:
            fields.append(f"volumeMounts: [{', '.join(mounts)}]")
        missing = (f"!(object.spec.containers.exists(c, c.name == {name}) || "
                   f"(has(object.spec.initContainers) && "
                   f"object.spec.initContainers.exists(c, c.name == {name})))")
        return field, missing, f"{typed}{{{', '.join(fields)}}}"


# ---------------------------------------------------------------------------------------------
# The policy and binding of one injection


def _objects(each: list[_Policy], plan: planlib.Plan, name: str,
             namespace_labels: Mapping[str, str] | None) -> tuple[Obj, Obj]:
    """One injection's policy and binding, whatever kinds it names: the API server spends a
    conversion of the whole pod on every policy it offers a pod to, even one whose match
    conditions then fail, so an injection into pods of several kinds is one policy whose
    condition and patch test the owner's kind (a patch per kind only where they differ)."""
    injection = each[0].injection
    requirements = [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": sorted(ALWAYS_EXCLUDED)}]
    requirements += [{"key": r.key, "operator": r.operator,
                      **({"values": list(r.values)} if r.values else {})}
                     for r in injection.namespace_requirements]
    selector: Obj = {"matchExpressions": requirements}
    if namespace_labels:
        selector["matchLabels"] = dict(namespace_labels)
    owner = (f"{_REFS}.exists(r, {_CONTROLLER}) ? {_REFS}.filter(r, {_CONTROLLER})[0] : "
             f"{_REFS}[0]")
    if len(each) == 1:
        conditions, mutations = each[0].conditions, each[0].mutations
    else:
        tests = ["(" + " && ".join(c["expression"] for c in p.conditions) + ")" for p in each]
        conditions = [{"name": "owned-by-a-declared-kind", "expression": " || ".join(tests)}]
        patches = [p.mutations[0]["jsonPatch"]["expression"] for p in each]
        if len(set(patches)) == 1:
            mutations = each[0].mutations
        else:   # the first kind whose test holds, as the match condition found it
            chain = "[]"
            for test, patch in reversed(list(zip(tests, patches))):
                chain = f"{test} ? {patch} : {chain}"
            mutations = [_patch(chain)]
    labels = {"app.kubernetes.io/managed-by": "rulec", "jobrules.dev/injection": injection.name}
    policy = {
        "apiVersion": API_VERSION, "kind": POLICY_KIND,
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"jobrules.dev/rule": str(injection.span),
                                     RECORD: f"{injection.name}@{digest(injection)}"}},
        "spec": {
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                   "operations": ["CREATE"], "resources": ["pods"],
                                   "scope": "Namespaced"}],
                "namespaceSelector": selector,
                "objectSelector": {"matchExpressions": [
                    {"key": SKIP_LABEL, "operator": "DoesNotExist"}]},
                "matchPolicy": "Equivalent",
            },
            "matchConditions": conditions,
            "variables": [{"name": "owner", "expression": owner}],
            "failurePolicy": plan.webhook.failure_policy,
            # Not `IfNeeded`: kube-apiserver 1.36.3 reinvokes an `IfNeeded` policy that changed
            # the pod every time (its dispatcher marks the policy for reinvocation by its own
            # change), which evaluates it twice a pod. What `Never` gives up: a container a
            # webhook adds (webhooks run after every policy) does not get this injection's env
            # and mounts; the injected sidecars of the plan are never targets anyway.
            "reinvocationPolicy": "Never",
            "mutations": mutations,
        },
    }
    binding = {"apiVersion": API_VERSION, "kind": BINDING_KIND,
               "metadata": {"name": name, "labels": dict(labels)},
               "spec": {"policyName": name}}
    return policy, binding


def _has_key(field: str, key: str, values: Iterable[str] | None) -> str:
    present = f"(has({_META}.{field}) && {q(key)} in {_META}.{field}"
    if values is None:
        return present + ")"
    return f"{present} && {_META}.{field}[{q(key)}] in [{', '.join(map(q, sorted(values)))}])"


def _exists(field: str, test: str) -> str:
    present = "has(object.spec.initContainers) && " if field == "initContainers" else ""
    return f"({present}object.spec.{field}.exists(c, {test}))"


def _mount_cel(typed: str, volume: str, path: str, read_only: bool) -> str:
    ro = ", readOnly: true" if read_only else ""
    return f"{typed}{{name: {q(volume)}, mountPath: {q(path)}{ro}}}"


def _typed(value: Any, typed: str) -> str:
    """A JSON value as CEL, objects typed (Object.spec...) as a policy's values need them."""
    if isinstance(value, dict):
        fields = ", ".join(f"{k}: {_typed(v, f'{typed}.{k}')}" for k, v in value.items())
        return f"{typed}{{{fields}}}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_typed(v, typed) for v in value) + "]"
    return json.dumps(value)


def _patch(expression: str) -> Obj:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def _metadata(field: str, pairs: list[tuple[str, str]]) -> str:
    """Set each key of `metadata.<field>` (`add` replaces a different value: the rule wins,
    docs/injection.md), the map made when absent."""
    each = ", ".join(f'JSONPatch{{op: "add", path: {q(_pointer(field, k))}, value: {v}}}'
                     for k, v in pairs)
    body = ", ".join(f"{q(k)}: {v}" for k, v in pairs)
    return (f"(has({_META}.{field}) ? [{each}] : "
            f'[JSONPatch{{op: "add", path: "/metadata/{field}", value: {{{body}}}}}])')


def _appended(field: str, items: list[tuple[str, str]]) -> str:
    """Append each item whose `missing` holds to `spec.<field>`. The list is made once when
    absent, empty: a list of objects as a value panics kube-apiserver 1.36.3's jsonPatcher
    (cel-go's list conversion to structpb.Value)."""
    lists = f"object.spec.{field}"
    anyone = " || ".join(f"({missing})" for missing, _ in items)
    out = [f'(!has({lists}) && ({anyone}) ? '
           f'[JSONPatch{{op: "add", path: "/spec/{field}", value: []}}] : [])']
    out += [f'({missing} ? [JSONPatch{{op: "add", path: "/spec/{field}/-", value: {item}}}] : [])'
            for missing, item in items]
    return " + ".join(out)


def _edited(field: str, key: str, items: list[tuple[str, str]]) -> str:
    """Append each item to the `key` list of every container of `field` its test holds for,
    by the container's index; the list made once (empty, see _appended) where absent."""
    lists = f"object.spec.{field}"
    at = f'"/spec/{field}/" + string({lists}.map(x, x.name).indexOf(c.name)) + "/{key}"'
    anyone = " || ".join(f"({test})" for test, _ in items)
    out = [f'{lists}.filter(c, !has(c.{key}) && ({anyone})).map(c, '
           f'JSONPatch{{op: "add", path: {at}, value: []}})']
    out += [f'{lists}.filter(c, {test}).map(c, '
            f'JSONPatch{{op: "add", path: {at} + "/-", value: {item}}})' for test, item in items]
    joined = " + ".join(out)
    return f"(has({lists}) ? {joined} : [])" if field == "initContainers" else f"({joined})"


def _pointer(field: str, key: str) -> str:
    """The JSON pointer of a metadata key (RFC 6901: `~` and `/` escaped)."""
    return f"/metadata/{field}/" + key.replace("~", "~0").replace("/", "~1")
