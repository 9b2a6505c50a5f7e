"""The controller's permissions, derived from a plan: pure, the RBAC rules and why each is there.

Each rule grants what the controller's requests for the plan need and nothing else, and carries
the places in the rules that need it (`path:line:col`, with what for), so a reviewer can trace
every verb back to a rule. What the controller sends, and so what it needs:

- every kind: list and watch (its informer), get (a re-read after a 409) and patch (the commit:
  `jobrules.dev/state` is always written, the verdict annotation and the intents journal with it,
  and `set spec...` steps); patch on `PLURAL/status` when a condition or status fields are written
  (by the verdict or by an action's steps): the controller learns at run time whether the kind
  has that subresource and writes the main resource when not, which the patch above covers;
- pods: list and watch (the pod informers, and a live list when a decision's pod is missing from
  the cache) as soon as one kind is declared; delete only where a recipe a policy takes deletes
  pods, `pods/eviction` create only where one evicts them;
- objects a recipe creates (`create bus.volcano.sh/v1alpha1 Command {...}`): create on them;
  objects of another kind a recipe writes a field of (`set spec.active = false on kueue.x-k8s.io/
  v1beta2 Workload label ...`): list (found by the label) and patch on them;
- events.k8s.io Events: create, and get and patch (a repeated problem's `series`), unless every
  kind says `no events`;
- a Lease for leader election and, when the controller manages the webhook's certificate, its
  Secret and the webhook configuration: by name (`resourceNames`), in the controller's
  namespace where the object is namespaced.

Discovery (is a kind served, has it a `/status` subresource) reads non-resource URLs every
authenticated user may read (the `system:discovery` role): nothing to grant.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from runtime import plan as planlib
from runtime import vocabulary
from runtime.span import Span

# The order verbs are listed in, as `kubectl create role` lists them.
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
EVENTS = ("events.k8s.io", "events")


@dataclass(frozen=True, slots=True)
class Need:
    """Why a rule is there: a place in the rules (None: not from the rules) and what for."""

    span: Span | None
    what: str

    def __str__(self) -> str:
        return f"{self.span}: {self.what}" if self.span is not None else self.what


@dataclass(frozen=True, slots=True)
class Rule:
    """One RBAC PolicyRule: verbs on one resource of one API group (optionally by name), and
    what needs it: each need with the verbs it needs, in the order first seen."""

    group: str
    resource: str                   # `plural` or `plural/subresource`
    verbs: tuple[str, ...]          # in VERBS order
    needs: tuple[tuple[Need, tuple[str, ...]], ...]
    names: tuple[str, ...] = ()     # resourceNames; () : any

    def policy_rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": [self.resource]}
        if self.names:
            rule["resourceNames"] = list(self.names)
        rule["verbs"] = list(self.verbs)
        return rule

    @property
    def title(self) -> str:
        """`jobs.batch/status patch`, as `kubectl auth can-i` names a resource."""
        plural, _, sub = self.resource.partition("/")
        name = f"{plural}.{self.group}" if self.group else plural
        return f"{name}{'/' + sub if sub else ''}{' ' + ','.join(self.names) if self.names else ''}" \
               f" {','.join(self.verbs)}"

    def reasons(self) -> list[str]:
        """A line per need: `[verbs: ]path:line:col: what`, the verbs named when it needs only
        some of the rule's."""
        return [(f"{','.join(verbs)}: " if verbs != self.verbs else "") + str(need)
                for need, verbs in self.needs]


def controller_rules(plan: planlib.Plan) -> tuple[Rule, ...]:
    """The cluster-wide rules the controller needs for `plan` (its ClusterRole)."""
    return merged(_kind_needs(plan))


def leader_election(namespace: str, lease: str) -> tuple[Rule, ...]:
    """The Lease the replicas elect a leader on (a Role in `namespace`). RBAC cannot scope
    `create` by name: the first replica creates it."""
    why = f"leader election on the Lease {namespace}/{lease}"
    return (_fixed("coordination.k8s.io", "leases", ("create",), why),
            _fixed("coordination.k8s.io", "leases", ("get", "update", "patch"), why, (lease,)))


def shard_leases(namespace: str, lease: str, shards: int) -> tuple[Rule, ...]:
    """The shards' Leases (`LEASE-shard-K`) and the replicas' member Leases (`LEASE-member-HASH`,
    named after each pod's name, so not known here): listed by label, created, renewed and
    released, a member's deleted when its replica stops; a Role in `namespace`."""
    why = (f"{shards} shards held on the Leases {namespace}/{lease}-shard-0..{shards - 1}, "
           f"and each replica's {lease}-member-* Lease")
    return (_fixed("coordination.k8s.io", "leases",
                   ("list", "create", "get", "update", "patch", "delete"), why),)


def serving_secret(namespace: str, secret: str) -> tuple[Rule, ...]:
    """The webhook's serving certificate, issued and rotated by the controller's leader (a Role
    in `namespace`). The Secret is made empty by the manifests, so no `create` is needed; it is
    written by guarded patches."""
    return (_fixed("", "secrets", ("get", "patch"),
                   f"the webhook's serving certificate in {namespace}/{secret}", (secret,)),)


def webhook_configuration(name: str) -> tuple[Rule, ...]:
    """The MutatingWebhookConfiguration whose caBundle the leader keeps current (cluster-wide)."""
    return (_fixed("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ("get", "patch"),
                   f"the caBundle of the webhook configuration {name}", (name,)),)


def _fixed(group: str, resource: str, verbs: tuple[str, ...], what: str,
           names: tuple[str, ...] = ()) -> Rule:
    """A rule not from the rules: one need, for all its verbs."""
    return Rule(group, resource, verbs, ((Need(None, what), verbs),), names)


def merged(needed: Iterable[tuple[str, str, str, Need]]) -> tuple[Rule, ...]:
    """One rule per (group, resource): the union of its verbs, its needs in the order first
    seen, each with its own verbs; rules sorted by group then resource (the core group first)."""
    needs: dict[tuple[str, str], dict[Need, set[str]]] = {}
    for group, resource, verb, need in needed:
        needs.setdefault((group, resource), {}).setdefault(need, set()).add(verb)
    return tuple(Rule(group, resource, _ordered(set().union(*needs[group, resource].values())),
                      tuple((need, _ordered(verbs)) for need, verbs in needs[group, resource].items()))
                 for group, resource in sorted(needs))


def _ordered(verbs: set[str]) -> tuple[str, ...]:
    return tuple(v for v in VERBS if v in verbs)


def explain(rules: Iterable[Rule]) -> str:
    """Every rule and what needs it, one line per need under its rule's title (the ClusterRole's
    `jobrules.dev/needed-by` annotation)."""
    lines = []
    for n, rule in enumerate(rules):
        lines.append(f"rules[{n}] {rule.title}")
        lines.extend(f"  {reason}" for reason in rule.reasons())
    return "\n".join(lines) + "\n"


def group_of(api_version: str) -> str:
    """`batch/v1` -> `batch`, `v1` -> `` (the core group)."""
    return api_version.rpartition("/")[0]


def _kind_needs(plan: planlib.Plan) -> Iterator[tuple[str, str, str, Need]]:
    for kind in plan.kinds:
        job = f"job {kind.name}"
        watched = Need(kind.span, f"{job}: its jobs watched, their state annotation written")
        for verb in ("get", "list", "watch", "patch"):
            yield kind.group, kind.plural, verb, watched
        status = kind.status
        where = status.span or kind.span
        annotation_only = kind.audit is not None and kind.audit.annotation_only
        if status.condition is not None and not annotation_only:
            yield kind.group, f"{kind.plural}/status", "patch", Need(
                where, f"{job}: condition {status.condition}")
        fields = [".".join(f.path) for f in (status.phase, status.reason, status.message)
                  if f is not None]
        if fields and not annotation_only:
            yield kind.group, f"{kind.plural}/status", "patch", Need(
                where, f"{job}: status fields {', '.join(fields)}")
        pods = Need(kind.span, f"{job}: its pods watched")
        yield "", "pods", "list", pods
        yield "", "pods", "watch", pods
        if status.events:
            events = Need(kind.span, f"{job}: Events")
            for verb in ("create", "get", "patch"):
                yield *EVENTS, verb, events
        yield from _action_needs(kind)


def _action_needs(kind: planlib.Kind) -> Iterator[tuple[str, str, str, Need]]:
    """What the recipes of the actions its policies take (fallbacks included) send."""
    for policy, action in _actions_taken(kind):
        said = vocabulary.ACTIONS[action]
        for step in _steps(kind.recipes(action)):   # every recipe the action may be done by
            # A step of the kind's `actions` block is cited there; a default one (a restart's
            # pod deletion) at the policy that takes it.
            need = Need(step.span or policy.span, f"job {kind.name}: {said} "
                        f"({_step_text(step)})" + (f", taken at {policy.span}"
                                                   if step.span is not None else ""))
            if isinstance(step, planlib.DeletePods):
                if step.evict:
                    yield "", "pods/eviction", "create", need
                else:
                    yield "", "pods", "delete", need
            elif isinstance(step, planlib.SetField):
                yield kind.group, kind.plural, "patch", need
                if step.path[0] == "status":
                    yield kind.group, f"{kind.plural}/status", "patch", need
            elif isinstance(step, planlib.SetObjectField):   # listed by label, then patched
                group = group_of(step.on.api_version)
                yield group, step.on.plural, "list", need
                yield group, step.on.plural, "patch", need
            elif isinstance(step, planlib.SetCondition):
                yield kind.group, f"{kind.plural}/status", "patch", need
            elif isinstance(step, planlib.CreateObject):
                yield group_of(step.api_version), step.plural, "create", need


def _steps(recipes: Iterable[planlib.Recipe]) -> Iterator[planlib.Step]:
    for recipe in recipes:
        if not isinstance(recipe, str):     # record | unsupported: nothing is sent
            yield from recipe


def _actions_taken(kind: planlib.Kind) -> Iterator[tuple[planlib.Policy, str]]:
    """(policy, action) for every action a policy may take: its own, then its fallbacks. A
    policy in audit takes none, so a plan in audit is granted no delete, eviction or create."""
    for policy in kind.policies:
        if policy.audit:
            continue
        for action in policy.action.chain():
            if action.action in vocabulary.EFFECTS:
                yield policy, action.action


def _step_text(step: planlib.Step) -> str:
    if isinstance(step, planlib.DeletePods):
        return f"{'evict' if step.evict else 'delete'} the {step.scope}'s pods" \
            if step.scope != "pod" else f"{'evict' if step.evict else 'delete'} the pod"
    if isinstance(step, planlib.SetField):
        return f"set {'.'.join(step.path)}"
    if isinstance(step, planlib.SetObjectField):
        return f"set {'.'.join(step.path)} on {step.on.api_version} {step.on.kind}"
    if isinstance(step, planlib.SetCondition):
        return f"condition {step.type}"
    if isinstance(step, planlib.CreateObject):
        return f"create {step.api_version} {step.kind}"
    return "await"
