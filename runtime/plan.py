"""The evaluation plan as typed, immutable values, loaded from the JSON that `rulec compile` writes.

The runtime reads only plans (never the compiler or Lark). Loading validates every closed
vocabulary and compiles each JMESPath expression once, so evaluation does no parsing. The JSON
contract is documented in docs/plan.md; this module is its single reader.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Iterable, Mapping, Protocol, TypeAlias, TypeVar, Union

import jmespath
import jmespath.exceptions

from runtime import functions, shape, vocabulary
from runtime.span import Span

class PlanError(shape.ShapeError):
    """A plan that cannot be used: wrong version, unknown vocabulary, or a malformed value."""


@dataclass(frozen=True, slots=True)
class Expr:
    """A JMESPath expression, compiled once at load; `source` is kept for messages."""

    source: str
    span: Span
    compiled: Searchable


class Searchable(Protocol):
    def search(self, value: Any, options: jmespath.Options | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class FieldPath:
    """A JMESPath expression that only names fields (`owner.metadata.name`), searched by plain
    lookups: the commonest expression in rules, and the library's tree walk costs ~10x more.
    Same result as JMESPath: a field of anything but an object is null."""

    keys: tuple[str, ...]

    def search(self, value: Any, options: jmespath.Options | None = None) -> Any:
        for key in self.keys:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value


def compile_expression(text: str) -> Searchable:
    """`text` compiled (raises jmespath's errors); a FieldPath when it only names fields."""
    parsed = jmespath.compile(text)
    keys = _field_keys(parsed.parsed)
    return FieldPath(keys) if keys is not None else parsed


def _field_keys(node: dict[str, Any]) -> tuple[str, ...] | None:
    if node["type"] == "field":
        return (node["value"],)
    if node["type"] == "subexpression":
        parts = [_field_keys(child) for child in node["children"]]
        if all(part is not None for part in parts):
            return tuple(key for part in parts for key in part)  # type: ignore[union-attr]
    return None


@dataclass(frozen=True, slots=True)
class Var:
    """A template placeholder such as `{pod}`."""

    name: str


Part: TypeAlias = Union[str, Var, Expr]
Template: TypeAlias = tuple[Part, ...]


# Boolean structure shared by verdict conditions, pod filters and injection filters: `N` is the
# family (Condition, PodFilter, InjectFilter below).
N = TypeVar("N")


@dataclass(frozen=True, slots=True)
class And(Generic[N]):
    args: tuple[N, ...]


@dataclass(frozen=True, slots=True)
class Or(Generic[N]):
    args: tuple[N, ...]


@dataclass(frozen=True, slots=True)
class Not(Generic[N]):
    arg: N


# Pod filters.
@dataclass(frozen=True, slots=True)
class ExitCode:
    codes: frozenset[int]
    ranges: tuple[tuple[int, int], ...]
    negate: bool
    container: str | None


@dataclass(frozen=True, slots=True)
class ContainerReason:
    values: frozenset[str]
    negate: bool
    container: str | None


@dataclass(frozen=True, slots=True)
class PodReason:
    values: frozenset[str]
    negate: bool


@dataclass(frozen=True, slots=True)
class PodCondition:
    type: str
    reasons: frozenset[str]
    negate: bool
    statuses: frozenset[str] = frozenset({"True"})


@dataclass(frozen=True, slots=True)
class TaskIs:
    values: frozenset[str]
    negate: bool


@dataclass(frozen=True, slots=True)
class Restarts:
    cmp: str
    value: int
    container: str | None


@dataclass(frozen=True, slots=True)
class LabelIs:
    """A label (or, in injection filters, annotation) test; `values` None means "exists"."""

    key: str
    values: frozenset[str] | None
    negate: bool
    annotation: bool = False


@dataclass(frozen=True, slots=True)
class JmesPath:
    expr: Expr


# Verdict condition atoms.
PodFilter: TypeAlias = Union["And[PodFilter]", "Or[PodFilter]", "Not[PodFilter]", ExitCode,
                             ContainerReason, PodReason, PodCondition, TaskIs, Restarts, LabelIs,
                             JmesPath]


@dataclass(frozen=True, slots=True)
class Pods:
    quant: str  # any | all | none
    task: str | None
    state: str | None
    filter: PodFilter | None
    for_seconds: int | None


@dataclass(frozen=True, slots=True)
class Count:
    task: str | None
    state: str | None
    filter: PodFilter | None
    cmp: str
    value: Template


@dataclass(frozen=True, slots=True)
class TaskState:
    quant: str  # any | all
    task: str | None
    state: str


@dataclass(frozen=True, slots=True)
class TaskCount:
    state: str | None
    cmp: str
    value: Template


@dataclass(frozen=True, slots=True)
class JobAge:
    longer_than: int


# Injection filter atoms (besides LabelIs, TaskIs, JmesPath and the boolean structure).
@dataclass(frozen=True, slots=True)
class NamespaceIs:
    values: frozenset[str]
    negate: bool


@dataclass(frozen=True, slots=True)
class IsPrimary:
    pass


@dataclass(frozen=True, slots=True)
class NamespaceLabel:
    """A test of the pod's namespace's labels: the API server applies it, as the webhook's
    namespaceSelector (docs/injection.md), so the mutator never sees the labels."""

    key: str
    values: frozenset[str] | None
    negate: bool


Condition: TypeAlias = Union["And[Condition]", "Or[Condition]", "Not[Condition]", JmesPath, Pods,
                             Count, TaskState, TaskCount, JobAge]
InjectFilter: TypeAlias = Union["And[InjectFilter]", "Or[InjectFilter]", "Not[InjectFilter]",
                                LabelIs, NamespaceIs, NamespaceLabel, TaskIs, IsPrimary, JmesPath]


@dataclass(frozen=True, slots=True)
class Verdict:
    span: Span
    phase: str
    when: Condition | None  # None: `otherwise`
    reason: Template | None
    message: Template | None


@dataclass(frozen=True, slots=True)
class Budget:
    max: int | Expr  # an Expr is read from the job (`max <<spec.backoffLimit>>`)
    per: str  # job | task | pod
    key: str


@dataclass(frozen=True, slots=True)
class Grow:
    """`with memory * FACTOR [up to MAX]`: the containers that ran out of memory restart with
    FACTOR times it, at most MAX bytes (runtime.resources)."""

    factor: float
    max_bytes: float | None = None
    max: str | None = None   # MAX as written


@dataclass(frozen=True, slots=True)
class Action:
    action: str
    reason: Template | None
    message: Template | None
    budget: Budget | None
    fallback: Action | None
    delay: int | None
    doubling: bool = False  # the delay doubles with each use of the budget ...
    delay_cap: int | None = None  # ... up to this many seconds
    grow: Grow | None = None  # restart with more memory

    def chain(self) -> Iterator[Action]:
        """This action, then its fallbacks (`then ...`) in order."""
        action: Action | None = self
        while action is not None:
            yield action
            action = action.fallback


@dataclass(frozen=True, slots=True)
class Policy:
    id: str
    span: Span
    event: str
    task: str | None
    filter: PodFilter | None
    for_seconds: int | None
    to: str | None
    action: Action
    evicted: bool = False  # podFailed: evicted (disrupted) pods too (`pod failed or evicted`)
    audit: bool = False    # decided and recorded (an Event, a metric), never acted on
    cause: str | None = None  # the first `cause "x"` of its filter: the verdict it makes has it


@dataclass(frozen=True, slots=True)
class Cause:
    """A named failure cause (`cause "oom" when FILTER hint "..."`): the verdicts that fail a
    job say which one matched, so that failures can be counted by cause on every kind."""

    name: str
    span: Span
    hint: str
    filter: PodFilter | None


@dataclass(frozen=True, slots=True)
class Audit:
    """`mode audit`: the kind's policies decide and record, none acts; with `annotation_only`
    the verdict is written only as our annotation, not into the kind's own status."""

    annotation_only: bool = False


@dataclass(frozen=True, slots=True)
class Native:
    """What `rulec native` decided for a batch/v1 Job kind (docs/native.md): the Job `spec`
    fragment, and the policies it carries (id -> podFailurePolicy rule, None for the Job's
    default handling). On a Job whose spec carries the fragment the Job controller owns those
    policies: the controller only shadows them (runtime.shadow)."""

    fragment: Mapping[str, Any]
    policies: Mapping[str, int | None]


@dataclass(frozen=True, slots=True)
class Foreign:
    """`foreign when <<expr>>`: a job the expression holds for is another controller's (its
    `spec.managedBy`, say). Its policies decide and record, none acts (as in audit); unless
    `verdicts` (`write verdicts`), the controller writes nothing to it either."""

    when: Expr
    verdicts: bool = False


@dataclass(frozen=True, slots=True)
class StatusField:
    path: tuple[str, ...]
    map: Mapping[str, str]
    only: frozenset[str] | None  # the phases written (a phase field); None: every phase
    over: frozenset[str] | None = None  # the current values it may replace; None: any


@dataclass(frozen=True, slots=True)
class Status:
    phase: StatusField | None
    reason: StatusField | None
    message: StatusField | None
    condition: str | None
    annotations: bool
    events: bool
    span: Span | None = None  # the `status { ... }` block; None: the kind has none


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of a Kubernetes label selector (operator In, NotIn, Exists, DoesNotExist)."""

    key: str
    operator: str
    values: tuple[str, ...]

    def text(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return "!" + self.key
        if len(self.values) == 1:
            return f"{self.key}{'=' if self.operator == 'In' else '!='}{self.values[0]}"
        return f"{self.key} {'in' if self.operator == 'In' else 'notin'} ({','.join(self.values)})"

    def holds(self, labels: Mapping[str, Any]) -> bool:
        present = self.key in labels
        if self.operator in ("Exists", "DoesNotExist"):
            return present == (self.operator == "Exists")
        hit = present and labels[self.key] in self.values
        return hit == (self.operator == "In")


# How an action is done on a kind (`actions { ... }`): a closed set of steps.
@dataclass(frozen=True, slots=True)
class DeletePods:
    span: Span | None
    scope: str   # pod (the action's pod) | task (its task's pods) | job (all the job's pods)
    evict: bool  # through the Eviction API (which adds DisruptionTarget), else a delete


@dataclass(frozen=True, slots=True)
class SetField:
    span: Span | None
    path: tuple[str, ...]   # under `status`: through /status where the kind has it
    value: Any              # a JSON value


@dataclass(frozen=True, slots=True)
class Objects:
    """The job's objects of another kind (`on API KIND label "KEY" = VALUE`): those in its
    namespace whose label KEY is VALUE rendered from the job (Kueue's Workloads: `job-uid`)."""

    api_version: str
    kind: str
    plural: str
    key: str
    value: Template


@dataclass(frozen=True, slots=True)
class SetObjectField:
    """`set PATH = VALUE on OBJECTS`: the field written on each of those objects (not the job)
    where it differs, a merge patch of one value."""

    span: Span | None
    path: tuple[str, ...]
    value: Any
    on: Objects


@dataclass(frozen=True, slots=True)
class SetCondition:
    span: Span | None
    type: str               # status "True"; reason and message: the action's


@dataclass(frozen=True, slots=True)
class CreateObject:
    span: Span | None
    api_version: str
    kind: str
    plural: str
    body: tuple[tuple[str, Template | None], ...]   # None: the job, as an owner reference


@dataclass(frozen=True, slots=True)
class Await:
    span: Span | None
    when: Condition
    timeout: int            # seconds; the action fails when it is not met by then


@dataclass(frozen=True, slots=True)
class ResizeTemplate:
    span: Span | None
    path: tuple[str, ...]   # the job's pod template the action's new sizes are written into
    # with `PATH[task].WITHIN`: PATH is a map with an entry per task (its key the task in any
    # letter case: Kubeflow's `Worker` for pods labelled `worker`), the template at WITHIN in it
    within: tuple[str, ...] | None = None


Step: TypeAlias = Union[DeletePods, SetField, SetObjectField, SetCondition, CreateObject, Await,
                       ResizeTemplate]
Recipe: TypeAlias = Union[tuple[Step, ...], str]   # steps, or "record" | "unsupported"


@dataclass(frozen=True, slots=True)
class Guarded:
    """`VERB when EXPR -> ...`: how the kind does `action` on the jobs `when` holds for."""

    action: str
    when: Expr
    recipe: Recipe


def default_recipe(action: str) -> Recipe:
    """How a kind does an action its `actions` block does not mention (docs/plan.md)."""
    scope = vocabulary.DEFAULT_STEPS.get(action)
    if scope is not None:
        return (DeletePods(None, scope, False),)
    return vocabulary.DEFAULT_RECIPES.get(action, "record")


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    span: Span
    group: str
    version: str
    kind: str
    plural: str
    api_version: str
    pods_owned: bool
    pod_labels: tuple[tuple[str, Template], ...]
    task_label: str | None
    task_expr: Expr | None
    primary_pods: PodFilter | None
    primary_containers: tuple[str, ...] | None
    verdicts: tuple[Verdict, ...]
    policies: tuple[Policy, ...]
    status: Status
    versions: tuple[str, ...] = ()  # every served version, preferred first (`version` is the first)
    requirements: tuple[Requirement, ...] = ()  # the scope's label selector
    namespaces: tuple[str, ...] | None = None  # the scope's namespaces; None: all
    sticky: bool = True  # terminal verdicts of the rules hold (`final never`: they do not)
    final_until: Expr | None = None  # a terminal verdict holds until this value changes
    primary_prefix: str | None = None  # containers named with it are primary too
    injected: frozenset[str] = frozenset()  # containers the plan's injections add to its pods
    actions: Mapping[str, Recipe] = dataclasses.field(default_factory=dict)  # declared recipes
    audit: Audit | None = None  # `mode audit`: every policy audits (Policy.audit says so)
    foreign: Foreign | None = None  # `foreign when ...`: whose jobs we watch but do not act on
    causes: tuple[Cause, ...] = ()  # the program's causes, in declaration order
    native: Native | None = None  # batch/v1 Job: the policies a Job with the fragment owns
    guarded: tuple[Guarded, ...] = ()  # recipes with `when`, in declaration order
    # task -> the events some policy takes for a pod (or the task) of that task; None: of a
    # task no policy names. Derived from `policies` once, since every pod of every evaluation
    # asks.
    _heard: Mapping[str | None, frozenset[str]] = dataclasses.field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        everyone = frozenset(p.event for p in self.policies if p.task is None)
        heard: dict[str | None, frozenset[str]] = {None: everyone}
        for p in self.policies:
            if p.task is not None:
                heard[p.task] = heard.get(p.task, everyone) | {p.event}
        object.__setattr__(self, "_heard", heard)

    def heard(self, task: str | None) -> frozenset[str]:
        """The events some policy takes for a pod (or the task) of `task`: a change that is
        none of them changes no decision."""
        found = self._heard.get(task)
        return found if found is not None else self._heard[None]

    def recipe(self, action: str, variant: int | None = None) -> Recipe:
        """How this kind does `action`: the guarded recipe `variant` (chosen by
        runtime.actions.variant when the action was decided), else its `actions` block, else
        the default."""
        if variant is not None and 0 <= variant < len(self.guarded) \
                and self.guarded[variant].action == action:
            return self.guarded[variant].recipe
        found = self.actions.get(action)
        return found if found is not None else default_recipe(action)

    def recipes(self, action: str) -> tuple[Recipe, ...]:
        """Every way this kind may do `action`: its guarded recipes, then the plain one."""
        return (*(g.recipe for g in self.guarded if g.action == action), self.recipe(action))

    @property
    def selector(self) -> str | None:
        """The scope as a Kubernetes label-selector string (`team=ml,tier in (a,b)`)."""
        return ",".join(r.text() for r in self.requirements) or None

    def api_versions(self) -> tuple[str, ...]:
        """`apiVersion` of every served version, preferred first."""
        group = f"{self.group}/" if self.group else ""
        return tuple(group + v for v in self.versions) or (self.api_version,)

    def covers(self, obj: Mapping[str, Any]) -> bool:
        """Whether a job object is in the kind's scope (its label selector and namespaces)."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        if self.namespaces is not None and meta.get("namespace") not in self.namespaces:
            return False
        labels = meta.get("labels")
        labels = labels if isinstance(labels, dict) else {}
        return all(r.holds(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class Containers:
    select: str  # primary | all | named
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Annotate:
    span: Span
    key: str
    value: Template


@dataclass(frozen=True, slots=True)
class Label:
    span: Span
    key: str
    value: Template


@dataclass(frozen=True, slots=True)
class Env:
    span: Span
    name: str
    value: Template
    containers: Containers


@dataclass(frozen=True, slots=True)
class Volume:
    span: Span
    name: str
    source: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Mount:
    span: Span
    volume: str
    path: str
    read_only: bool
    containers: Containers


@dataclass(frozen=True, slots=True)
class SidecarMount:
    volume: str
    path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class Sidecar:
    span: Span
    name: str
    native: bool
    image: Template
    command: tuple[Template, ...] | None
    args: tuple[Template, ...] | None
    env: tuple[tuple[str, Template], ...]
    mounts: tuple[SidecarMount, ...]


@dataclass(frozen=True, slots=True)
class Wrap:
    span: Span
    containers: Containers
    argv: tuple[Template, ...] | None
    shell: Template | None


Op: TypeAlias = Union[Annotate, Label, Env, Volume, Mount, Sidecar, Wrap]


@dataclass(frozen=True, slots=True)
class Injection:
    name: str
    span: Span
    kinds: tuple[str, ...]
    match: InjectFilter | None
    ops: tuple[Op, ...]
    completion_containers: tuple[str, ...] | None

    @property
    def namespace_requirements(self) -> tuple[Requirement, ...]:
        """Its `namespace label` tests (the loader keeps them at the top-level `and`)."""
        terms = self.match.args if isinstance(self.match, And) else (self.match,)
        return tuple(_requirement(t.key, t.values, t.negate) for t in terms
                     if isinstance(t, NamespaceLabel))

    @property
    def namespace_selector(self) -> str | None:
        """Its `namespace label` tests as a label-selector string: the webhook entry that
        serves it (None: the entry for every namespace)."""
        return ",".join(r.text() for r in self.namespace_requirements) or None


def _requirement(key: str, values: frozenset[str] | None, negate: bool) -> Requirement:
    if values is None:
        return Requirement(key, "DoesNotExist" if negate else "Exists", ())
    return Requirement(key, "NotIn" if negate else "In", tuple(sorted(values)))


@dataclass(frozen=True, slots=True)
class Webhook:
    failure_policy: str  # Ignore | Fail
    timeout_seconds: int


@dataclass(frozen=True, slots=True)
class Plan:
    version: int
    files: tuple[tuple[str, str], ...]  # (path, sha256)
    kinds: tuple[Kind, ...]
    injections: tuple[Injection, ...]
    webhook: Webhook
    digest: str  # sha256 of the plan text, to tell plans apart in logs and metrics
    # injection -> the MutatingAdmissionPolicies that do it (rulec/native_admission.py): what the
    # webhook's registration leaves out when they are shipped (`rulec manifests --native`)
    native_injections: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def kind_named(self, name: str) -> Kind:
        for kind in self.kinds:
            if kind.name == name:
                return kind
        raise KeyError(name)

    def namespace_selectors(self) -> tuple[str | None, ...]:
        """The namespace selectors of the injections, None (every namespace) first: one webhook
        entry each (runtime.registration), each serving its injections."""
        named = {i.namespace_selector for i in self.injections} - {None}
        return (None, *sorted(named))  # type: ignore[type-var]

    def kind_for(self, api_version: str, kind: str) -> Kind | None:
        """The kind declared for an object's apiVersion + kind (any of its versions), if any."""
        for declared in self.kinds:
            if declared.kind == kind and api_version in declared.api_versions():
                return declared
        return None


def audited(source: Plan, selectors: Iterable[str]) -> Plan:
    """The plan with more policies in audit, as the controller's `JOBRULES_AUDIT` says: `*`
    (every kind), a kind's name, or `KIND/POLICY-ID`. Returns the plan itself when none is new."""
    chosen = {s.strip() for s in selectors if s.strip()}
    if not chosen:
        return source

    def picked(kind: Kind, policy: Policy) -> bool:
        return bool({"*", kind.name, f"{kind.name}/{policy.id}"} & chosen)

    kinds = tuple(dataclasses.replace(k, policies=tuple(
        dataclasses.replace(p, audit=True) if picked(k, p) else p for p in k.policies))
        for k in source.kinds)
    return dataclasses.replace(source, kinds=kinds)


def in_audit(kind: Kind) -> Kind:
    """The kind with every policy in audit: each decides and records, none acts."""
    return dataclasses.replace(kind, policies=tuple(
        dataclasses.replace(p, audit=True) for p in kind.policies))


def unknown_audits(source: Plan, selectors: Iterable[str]) -> list[str]:
    """The `JOBRULES_AUDIT` entries that name no kind or policy of the plan (a typo would
    otherwise leave a policy acting that its operator meant to watch)."""
    known = {"*"} | {k.name for k in source.kinds} | {
        f"{k.name}/{p.id}" for k in source.kinds for p in k.policies}
    return sorted({s.strip() for s in selectors if s.strip()} - known)


def expressions(node: Any) -> Iterator[Expr]:
    """Every expression in a plan node (or a tuple of them), however nested."""
    if isinstance(node, Expr):
        yield node
    elif isinstance(node, tuple):
        for item in node:
            yield from expressions(item)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for field in dataclasses.fields(node):
            yield from expressions(getattr(node, field.name))


# ---------------------------------------------------------------------------------------------
# Loading


def load_file(path: str | Path) -> Plan:
    """Read and load a plan file; every problem is a PlanError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise PlanError(f"{path}: cannot read plan: {err.strerror or err}") from None
    try:
        return loads(text)
    except PlanError as err:
        raise PlanError(f"{path}: {err}") from None


def loads(text: str) -> Plan:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlanError(f"not JSON: {err}") from None
    except RecursionError:
        raise PlanError("nested too deeply to be a plan") from None
    return load(data, digest=hashlib.sha256(text.encode()).hexdigest())


def load(data: Any, digest: str = "") -> Plan:
    """Build a Plan from decoded JSON, validating it completely; every problem is a PlanError."""
    try:
        return _load(data, digest)
    except PlanError:
        raise
    except shape.ShapeError as err:
        raise PlanError(str(err)) from None


def _load(data: Any, digest: str) -> Plan:
    obj = shape.obj(data, "plan")
    version = obj.get("planVersion")
    if version != vocabulary.PLAN_VERSION:
        raise PlanError(f"unsupported planVersion {version!r} (this runtime reads {vocabulary.PLAN_VERSION})")
    files = tuple((shape.string(f["path"], "files.path"), shape.string(f["sha256"], "files.sha256"))
                  for f in shape.array(obj.get("files", []), "files"))
    kinds = tuple(_kind(k) for k in shape.array(obj.get("kinds", []), "kinds"))
    names = {k.name for k in kinds}
    injections = tuple(_injection(i, names) for i in shape.array(obj.get("injections", []), "injections"))
    kinds = tuple(dataclasses.replace(k, injected=frozenset(
        op.name for i in injections if k.name in i.kinds for op in i.ops if isinstance(op, Sidecar)))
        for k in kinds)
    seen: set[str] = set()
    for injection in injections:  # names key the pod's record of what was injected
        if injection.name in seen:
            raise PlanError(f"injection {injection.name}: the name is used twice")
        seen.add(injection.name)
    hook = shape.obj(obj.get("webhook", {}), "webhook")
    webhook = Webhook(
        failure_policy=_choice(hook.get("failurePolicy", "Ignore"), ("Ignore", "Fail"),
                               "webhook.failurePolicy"),
        timeout_seconds=shape.integer(hook.get("timeoutSeconds", 5), "webhook.timeoutSeconds"),
    )
    native = shape.obj(obj.get("nativeInjections", {}), "nativeInjections")
    for name in native:
        if name not in seen:
            raise PlanError(f"nativeInjections: unknown injection {name!r}")
    return Plan(vocabulary.PLAN_VERSION, files, kinds, injections, webhook, digest,
                {name: _strs(policies, f"nativeInjections.{name}")
                 for name, policies in native.items()})


def _opt_int(value: Any, where: str) -> int | None:
    return None if value is None else shape.integer(value, where)


def _choice(value: Any, allowed: Iterable[str], where: str) -> str:
    if value not in allowed:
        raise PlanError(f"{where}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _strs(value: Any, where: str) -> tuple[str, ...]:
    return tuple(shape.string(v, where) for v in shape.array(value, where))


def _span(value: Any) -> Span:
    s = shape.obj(value, "span")
    try:
        return Span(str(s["path"]), int(s["line"]), int(s["column"]),
                    int(s["endLine"]), int(s["endColumn"]))
    except (KeyError, TypeError, ValueError) as err:
        raise PlanError(f"span: malformed ({err})") from None


def _expr(source: Any, span: Any) -> Expr:
    text = shape.string(source, "expr")
    where = _span(span)
    try:
        compiled = compile_expression(text)
    except jmespath.exceptions.JMESPathError as err:
        raise PlanError(f"{where}: invalid JMESPath {text!r}: {err}") from None
    return Expr(text, where, compiled)


def _template(value: Any, where: str,
              allowed: tuple[str, ...] = vocabulary.VERDICT_PLACEHOLDERS) -> Template:
    """A template whose placeholders are those that have a value where it stands."""
    parts: list[Part] = []
    for part in shape.array(value, where):
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and "var" in part:
            name = _choice(part["var"], vocabulary.PLACEHOLDERS, f"{where}.var")
            if name not in allowed:
                raise PlanError(f"{where}: placeholder {{{name}}} has no value here "
                                f"(these do: {', '.join(allowed)})")
            parts.append(Var(name))
        elif isinstance(part, dict) and "expr" in part:
            parts.append(_expr(part["expr"], part.get("span")))
        else:
            raise PlanError(f"{where}: malformed template part {part!r}")
    return tuple(parts)


def _opt_template(value: Any, where: str) -> Template | None:
    return None if value is None else _template(value, where)


def _boolean(node: Mapping[str, Any], leaf, where: str) -> Any:
    op = node.get("op")
    if op in ("and", "or"):
        args = tuple(leaf(shape.obj(a, where), where) for a in shape.array(node.get("args"), where))
        return And(args) if op == "and" else Or(args)
    if op == "not":
        return Not(leaf(shape.obj(node.get("arg"), where), where))
    return None


def _pod_filter(node: Mapping[str, Any], where: str = "filter") -> Any:
    combined = _boolean(node, _pod_filter, where)
    if combined is not None:
        return combined
    op = node.get("op")
    negate = bool(node.get("negate", False))
    container = node.get("container")
    if op == "exitCode":
        ranges = tuple((shape.integer(lo, where), shape.integer(hi, where)) for lo, hi in node.get("ranges", []))
        return ExitCode(frozenset(shape.integer(c, where) for c in node.get("codes", [])), ranges, negate,
                        container)
    if op == "containerReason":
        return ContainerReason(frozenset(_strs(node["values"], where)), negate, container)
    if op == "podReason":
        return PodReason(frozenset(_strs(node["values"], where)), negate)
    if op == "condition":
        statuses = frozenset(_choice(s, vocabulary.CONDITION_STATUSES, f"{where}.status")
                             for s in _strs(node.get("status", ["True"]), where))
        return PodCondition(shape.string(node["type"], where), frozenset(_strs(node.get("reasons", []), where)),
                            negate, statuses)
    if op == "task":
        return TaskIs(frozenset(_strs(node["values"], where)), negate)
    if op == "restarts":
        return Restarts(_choice(node["cmp"], vocabulary.COMPARATORS, where), shape.integer(node["value"], where),
                        container)
    if op == "label":
        return _label(node, where)
    if op == "jmespath":
        return JmesPath(_expr(node["expr"], node.get("span")))
    raise PlanError(f"{where}: unknown pod filter op {op!r}")


def _label(node: Mapping[str, Any], where: str, annotation: bool = False) -> LabelIs:
    values = node.get("values")
    return LabelIs(shape.string(node["key"], where),
                   None if values is None else frozenset(_strs(values, where)),
                   bool(node.get("negate", False)), annotation)


def _opt_pod_filter(value: Any, where: str) -> Any:
    return None if value is None else _pod_filter(shape.obj(value, where), where)


def _condition(node: Mapping[str, Any], where: str = "when") -> Any:
    combined = _boolean(node, _condition, where)
    if combined is not None:
        return combined
    op = node.get("op")
    if op == "jmespath":
        return JmesPath(_expr(node["expr"], node.get("span")))
    if op == "pods":
        return Pods(_choice(node["quant"], ("any", "all", "none"), where), node.get("task"),
                    _opt_state(node.get("state"), vocabulary.POD_STATES, where),
                    _opt_pod_filter(node.get("filter"), where), _opt_int(node.get("for"), where))
    if op == "count":
        return Count(node.get("task"), _opt_state(node.get("state"), vocabulary.POD_STATES, where),
                     _opt_pod_filter(node.get("filter"), where),
                     _choice(node["cmp"], vocabulary.COMPARATORS, where),
                     _template(node["value"], where, vocabulary.JOB_PLACEHOLDERS))
    if op == "task":
        return TaskState(_choice(node["quant"], ("any", "all"), where), node.get("task"),
                         _choice(node["state"], vocabulary.TASK_STATES, where))
    if op == "taskCount":
        return TaskCount(_opt_state(node.get("state"), vocabulary.TASK_STATES, where),
                         _choice(node["cmp"], vocabulary.COMPARATORS, where),
                         _template(node["value"], where, vocabulary.JOB_PLACEHOLDERS))
    if op == "jobAge":
        return JobAge(shape.integer(node["longerThan"], where))
    raise PlanError(f"{where}: unknown condition op {op!r}")


def _opt_state(value: Any, allowed: tuple[str, ...], where: str) -> str | None:
    return None if value is None else _choice(value, allowed, where)


def _action(node: Any, where: str) -> Action:
    a = shape.obj(node, where)
    budget = a.get("budget")
    return Action(
        action=_choice(a.get("action"), vocabulary.ACTIONS, f"{where}.action"),
        reason=_opt_template(a.get("reason"), f"{where}.reason"),
        message=_opt_template(a.get("message"), f"{where}.message"),
        budget=None if budget is None else Budget(
            _budget_max(budget.get("max"), f"{where}.budget.max"),
            _choice(budget.get("per", "job"), vocabulary.BUDGET_SCOPES, f"{where}.budget.per"),
            shape.string(budget["key"], f"{where}.budget.key")),
        fallback=None if a.get("fallback") is None else _action(a["fallback"], f"{where}.fallback"),
        delay=_opt_int(a.get("delay"), f"{where}.delay"),
        doubling=bool(a.get("doubling", False)),
        delay_cap=_opt_int(a.get("delayCap"), f"{where}.delayCap"),
        grow=_grow(a.get("grow"), f"{where}.grow"),
    )


def _grow(value: Any, where: str) -> Grow | None:
    if value is None:
        return None
    g = shape.obj(value, where)
    _choice(g.get("resource"), ("memory",), f"{where}.resource")
    factor = g.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 1:
        raise PlanError(f"{where}.factor: expected a number above 1, got {factor!r}")
    cap = shape.opt_string(g.get("max"), f"{where}.max")
    try:
        cap_bytes = None if cap is None else functions.quantity(cap)
    except ValueError as err:
        raise PlanError(f"{where}.max: {err}") from None
    return Grow(float(factor), cap_bytes, cap)


def _budget_max(value: Any, where: str) -> int | Expr:
    if isinstance(value, dict):
        return _expr(value.get("expr"), value.get("span"))
    return shape.integer(value, where)


def _status_field(value: Any, where: str) -> StatusField | None:
    if value is None:
        return None
    f = shape.obj(value, where)
    mapping = shape.obj(f.get("map", {}), f"{where}.map")
    for phase in mapping:
        _choice(phase, vocabulary.PHASES, f"{where}.map")
    only = None if f.get("only") is None else frozenset(
        _choice(p, vocabulary.PHASES, f"{where}.only") for p in shape.array(f["only"], f"{where}.only"))
    over = None if f.get("over") is None else frozenset(_strs(f["over"], f"{where}.over"))
    return StatusField(_strs(f["path"], f"{where}.path"), dict(sorted(mapping.items())), only, over)


def _kind(value: Any) -> Kind:
    k = shape.obj(value, "kind")
    name = shape.string(k.get("name"), "kind.name")
    where = f"kind {name}"
    pods = shape.obj(k.get("pods", {}), f"{where}.pods")
    labels = shape.obj(pods.get("labels", {}), f"{where}.pods.labels")
    task = k.get("task")
    status = shape.obj(k.get("status", {}), f"{where}.status")
    primary = k.get("primaryContainers")
    final = shape.obj(k.get("final") or {}, f"{where}.final")
    until = final.get("until")
    version = shape.string(k.get("version"), f"{where}.version")
    return _cited_causes(Kind(
        name=name,
        span=_span(k.get("span")),
        group=shape.string(k.get("group", ""), f"{where}.group"),
        version=version,
        kind=shape.string(k.get("kind"), f"{where}.kind"),
        plural=shape.string(k.get("plural"), f"{where}.plural"),
        api_version=shape.string(k.get("apiVersion"), f"{where}.apiVersion"),
        pods_owned=bool(pods.get("owned", False)),
        pod_labels=tuple((key, _template(v, f"{where}.pods.labels", vocabulary.JOB_PLACEHOLDERS))
                         for key, v in sorted(labels.items())),
        task_label=task.get("label") if isinstance(task, dict) else None,
        task_expr=_expr(task["expr"], task.get("span")) if isinstance(task, dict) and "expr" in task else None,
        primary_pods=_opt_pod_filter(k.get("primaryPods"), f"{where}.primaryPods"),
        primary_containers=None if primary is None else _strs(primary, f"{where}.primaryContainers"),
        verdicts=tuple(
            Verdict(
                span=_span(v.get("span")),
                phase=_choice(v.get("phase"), vocabulary.PHASES, f"{where}.verdicts.phase"),
                when=None if v.get("when") is None else _condition(shape.obj(v["when"], where), where),
                reason=_opt_template(v.get("reason"), f"{where}.verdicts.reason"),
                message=_opt_template(v.get("message"), f"{where}.verdicts.message"),
            )
            for v in map(lambda x: shape.obj(x, f"{where}.verdicts"), shape.array(k.get("verdicts", []), where))
        ),
        policies=tuple(
            Policy(
                id=shape.string(p.get("id"), f"{where}.policies.id"),
                span=_span(p.get("span")),
                event=_choice(p.get("event"), vocabulary.EVENTS, f"{where}.policies.event"),
                task=p.get("task"),
                filter=_opt_pod_filter(p.get("filter"), f"{where}.policies.filter"),
                for_seconds=_opt_int(p.get("for"), f"{where}.policies.for"),
                to=_opt_state(p.get("to"), vocabulary.PHASES, f"{where}.policies.to"),
                action=_action(p.get("action"), f"{where}.policies.action"),
                evicted=bool(p.get("evicted", False)),
                audit=bool(p.get("audit", False)),
                cause=shape.opt_string(p.get("cause"), f"{where}.policies.cause"),
            )
            for p in map(lambda x: shape.obj(x, f"{where}.policies"), shape.array(k.get("policies", []), where))
        ),
        status=Status(
            phase=_status_field(status.get("phase"), f"{where}.status.phase"),
            reason=_status_field(status.get("reason"), f"{where}.status.reason"),
            message=_status_field(status.get("message"), f"{where}.status.message"),
            condition=status.get("condition"),
            annotations=bool(status.get("annotations", True)),
            events=bool(status.get("events", True)),
            span=_span(status["span"]) if status.get("span") is not None else None,
        ),
        versions=_versions(k.get("versions"), version, where),
        requirements=tuple(_selector(r, f"{where}.selector")
                           for r in shape.array(k.get("selector") or [], f"{where}.selector")),
        namespaces=None if k.get("namespaces") is None else _strs(k["namespaces"], f"{where}.namespaces"),
        sticky=bool(final.get("sticky", True)),
        final_until=None if until is None else _expr(shape.obj(until, f"{where}.final.until").get("expr"),
                                                     until.get("span")),
        primary_prefix=shape.opt_string(k.get("primaryContainerPrefix"), f"{where}.primaryContainerPrefix"),
        actions={_choice(action, vocabulary.EFFECTS, f"{where}.actions"):
                 _recipe(recipe, f"{where}.actions.{action}")
                 for action, recipe in shape.obj(k.get("actions") or {}, f"{where}.actions").items()},
        audit=None if k.get("audit") is None else Audit(
            bool(shape.obj(k["audit"], f"{where}.audit").get("annotationOnly", False))),
        foreign=_foreign(k.get("foreign"), f"{where}.foreign"),
        causes=_causes(k.get("causes"), f"{where}.causes"),
        native=_native(k, f"{where}.native"),
        guarded=tuple(_guarded(g, f"{where}.guardedActions") for g in shape.array(
            k.get("guardedActions") or [], f"{where}.guardedActions")),
    ), where)


def _guarded(value: Any, where: str) -> Guarded:
    g = shape.obj(value, where)
    action = _choice(g.get("action"), vocabulary.EFFECTS, f"{where}.action")
    when = shape.obj(g.get("when"), f"{where}.when")
    return Guarded(action, _expr(when.get("expr"), when.get("span")),
                   _recipe(g.get("recipe"), f"{where}.{action}"))


NATIVE_FIELDS = ("backoffLimit", "backoffLimitPerIndex", "podFailurePolicy")


def _native(k: Mapping[str, Any], where: str) -> Native | None:
    """A kind's `native` section, checked: only on a batch/v1 Job, naming its own policies,
    a fragment of the Job spec fields `rulec native` writes."""
    if k.get("native") is None:
        return None
    if (k.get("apiVersion"), k.get("kind")) != ("batch/v1", "Job"):
        raise PlanError(f"{where}: only a batch/v1 Job kind goes native")
    section = shape.obj(k["native"], where)
    fragment = dict(shape.obj(section.get("fragment"), f"{where}.fragment"))
    for key, value in fragment.items():
        if key not in NATIVE_FIELDS:
            raise PlanError(f"{where}.fragment: {key!r} is not one of {', '.join(NATIVE_FIELDS)}")
        if key == "podFailurePolicy":
            rules = shape.array(shape.obj(value, f"{where}.fragment.{key}").get("rules"),
                                f"{where}.fragment.{key}.rules")
            for rule in rules:
                _choice(shape.obj(rule, f"{where}.fragment.{key}.rules").get("action"),
                        ("FailJob", "Ignore", "Count", "FailIndex"), f"{where}.fragment.{key}.rules.action")
        elif shape.integer(value, f"{where}.fragment.{key}") < 0:
            raise PlanError(f"{where}.fragment.{key}: {value} is negative")
    ids = {shape.obj(p, f"{where}.policies").get("id") for p in shape.array(k.get("policies", []), where)}
    count = len(shape.array(fragment.get("podFailurePolicy", {}).get("rules", []), where))
    policies: dict[str, int | None] = {}
    for policy, to in shape.obj(section.get("policies"), f"{where}.policies").items():
        at = f"{where}.policies.{policy}"
        if policy not in ids:
            raise PlanError(f"{at}: no such policy in the kind")
        to = shape.obj(to, at)
        if to.get("default") is True and set(to) == {"default"}:
            policies[policy] = None
        elif set(to) == {"rule"} and 0 <= shape.integer(to["rule"], f"{at}.rule") < count:
            policies[policy] = int(to["rule"])
        else:
            raise PlanError(f"{at}: {dict(to)!r} is neither {{rule: N}} (a rule of the fragment) "
                            "nor {default: true}")
    return Native(fragment, policies)


def _cited_causes(kind: Kind, where: str) -> Kind:
    """A policy's cause must be one of the kind's: a verdict cannot carry a cause it lacks."""
    names = {c.name for c in kind.causes}
    for p in kind.policies:
        if p.cause is not None and p.cause not in names:
            raise PlanError(f"{where}.policies.cause: {p.cause!r} is not one of the kind's causes")
    return kind


def _causes(value: Any, where: str) -> tuple[Cause, ...]:
    out: list[Cause] = []
    for raw in shape.array(value or [], where):
        c = shape.obj(raw, where)
        name = shape.string(c.get("name"), f"{where}.name")
        if any(seen.name == name for seen in out):
            raise PlanError(f"{where}: cause {name!r} is declared twice")
        out.append(Cause(name, _span(c.get("span")), shape.string(c.get("hint"), f"{where}.hint"),
                         _opt_pod_filter(c.get("filter"), f"{where}.filter")))
    return tuple(out)


def _foreign(value: Any, where: str) -> Foreign | None:
    if value is None:
        return None
    f = shape.obj(value, where)
    when = shape.obj(f.get("when"), f"{where}.when")
    return Foreign(_expr(when.get("expr"), when.get("span")), bool(f.get("verdicts", False)))


def _recipe(value: Any, where: str) -> Recipe:
    if isinstance(value, str):
        return _choice(value, ("record", "unsupported"), where)
    steps = []
    for raw in shape.array(shape.obj(value, where).get("steps"), f"{where}.steps"):
        s = shape.obj(raw, f"{where}.steps")
        op, span = _choice(s.get("op"), vocabulary.STEPS, f"{where}.op"), _span(s.get("span"))
        step: Step
        if op == "deletePods":
            step = DeletePods(span, _choice(s.get("scope"), ("pod", "task", "job"), f"{where}.scope"),
                              bool(s.get("evict", False)))
        elif op == "set":
            value = s.get("value")
            if not (value is None or isinstance(value, (bool, int, str))):
                raise PlanError(f"{where}.value: expected null, a bool, an integer or a string, "
                                f"got {type(value).__name__}")
            if s.get("on") is None:
                step = SetField(span, _strs(s.get("path"), f"{where}.path"), value)
            else:
                on = shape.obj(s["on"], f"{where}.on")
                label = shape.obj(on.get("label"), f"{where}.on.label")
                step = SetObjectField(span, _strs(s.get("path"), f"{where}.path"), value, Objects(
                    shape.string(on.get("apiVersion"), f"{where}.on.apiVersion"),
                    shape.string(on.get("kind"), f"{where}.on.kind"),
                    shape.string(on.get("plural"), f"{where}.on.plural"),
                    shape.string(label.get("key"), f"{where}.on.label.key"),
                    _template(label.get("value"), f"{where}.on.label.value",
                              vocabulary.JOB_PLACEHOLDERS)))
        elif op == "condition":
            step = SetCondition(span, shape.string(s.get("type"), f"{where}.type"))
        elif op == "resize":
            step = ResizeTemplate(span, _strs(s.get("path"), f"{where}.path"),
                                  None if s.get("within") is None
                                  else _strs(s["within"], f"{where}.within"))
        elif op == "create":
            body = tuple((key, None if isinstance(v, dict) and v.get("job") is True
                          else _template(v, f"{where}.body"))
                         for key, v in shape.obj(s.get("body") or {}, f"{where}.body").items())
            step = CreateObject(span, shape.string(s.get("apiVersion"), f"{where}.apiVersion"),
                                shape.string(s.get("kind"), f"{where}.kind"),
                                shape.string(s.get("plural"), f"{where}.plural"), body)
        else:
            step = Await(span, _condition(shape.obj(s.get("when"), where), where),
                         shape.integer(s.get("timeout"), f"{where}.timeout"))
        steps.append(step)
    return tuple(steps)


def _versions(value: Any, version: str, where: str) -> tuple[str, ...]:
    versions = (version,) if value is None else _strs(value, f"{where}.versions")
    if not versions or versions[0] != version:
        raise PlanError(f"{where}.versions: must start with the kind's version {version!r}")
    return versions


def _selector(value: Any, where: str) -> Requirement:
    r = shape.obj(value, where)
    operator = _choice(r.get("operator"), ("In", "NotIn", "Exists", "DoesNotExist"), f"{where}.operator")
    values = _strs(r.get("values", []), f"{where}.values")
    if (operator in ("In", "NotIn")) != bool(values):
        raise PlanError(f"{where}: operator {operator} {'needs' if values == () else 'takes no'} values")
    return Requirement(shape.string(r.get("key"), f"{where}.key"), operator, values)


def _inject_filter(node: Mapping[str, Any], where: str = "match") -> Any:
    combined = _boolean(node, _inject_filter, where)
    if combined is not None:
        return combined
    op = node.get("op")
    if op in ("label", "annotation"):
        return _label(node, where, annotation=op == "annotation")
    if op == "namespace":
        return NamespaceIs(frozenset(_strs(node["values"], where)), bool(node.get("negate", False)))
    if op == "namespaceLabel":
        values = node.get("values")
        return NamespaceLabel(shape.string(node["key"], where),
                              None if values is None else frozenset(_strs(values, where)),
                              bool(node.get("negate", False)))
    if op == "task":
        return TaskIs(frozenset(_strs(node["values"], where)), bool(node.get("negate", False)))
    if op == "primary":
        return IsPrimary()
    if op == "jmespath":
        return JmesPath(_expr(node["expr"], node.get("span")))
    raise PlanError(f"{where}: unknown injection filter op {op!r}")


def _containers(value: Any, where: str) -> Containers:
    c = shape.obj(value, where)
    return Containers(_choice(c.get("select"), ("primary", "all", "named"), where),
                      _strs(c.get("names", []), where))


def _op(value: Any, where: str) -> Op:
    o = shape.obj(value, where)
    op = o.get("op")
    span = _span(o.get("span"))
    inject, container = vocabulary.INJECT_PLACEHOLDERS, vocabulary.CONTAINER_PLACEHOLDERS
    if op == "annotate":
        return Annotate(span, shape.string(o["key"], where), _template(o["value"], where, inject))
    if op == "label":
        return Label(span, shape.string(o["key"], where), _template(o["value"], where, inject))
    if op == "env":
        return Env(span, shape.string(o["name"], where), _template(o["value"], where, container),
                   _containers(o["containers"], where))
    if op == "volume":
        source = shape.obj(o["source"], where)
        if len(source) != 1 or next(iter(source)) not in ("emptyDir", "configMap", "secret"):
            raise PlanError(f"{where}: volume source must be one of emptyDir, configMap, secret")
        return Volume(span, shape.string(o["name"], where), source)
    if op == "mount":
        return Mount(span, shape.string(o["volume"], where), shape.string(o["path"], where),
                     bool(o.get("readOnly", False)), _containers(o["containers"], where))
    if op == "sidecar":
        def templates(v: Any) -> tuple[Template, ...] | None:
            return None if v is None else tuple(_template(t, where, container)
                                                for t in shape.array(v, where))
        return Sidecar(
            span, shape.string(o["name"], where), bool(o.get("native", False)),
            _template(o["image"], where, container), templates(o.get("command")),
            templates(o.get("args")),
            tuple((shape.string(e["name"], where), _template(e["value"], where, container))
                  for e in o.get("env", [])),
            tuple(SidecarMount(shape.string(m["volume"], where), shape.string(m["path"], where),
                               bool(m.get("readOnly", False))) for m in o.get("mounts", [])),
        )
    if op == "wrap":
        argv = o.get("argv")
        return Wrap(span, _containers(o["containers"], where),
                    None if argv is None else tuple(_template(t, where, container)
                                                    for t in shape.array(argv, where)),
                    None if o.get("shell") is None
                    else _template(o["shell"], where, vocabulary.SHELL_PLACEHOLDERS))
    raise PlanError(f"{where}: unknown injection op {op!r}")


def _injection(value: Any, kind_names: set[str]) -> Injection:
    i = shape.obj(value, "injection")
    name = shape.string(i.get("name"), "injection.name")
    where = f"injection {name}"
    kinds = _strs(i.get("kinds", []), f"{where}.kinds")
    for kind in kinds:
        if kind not in kind_names:
            raise PlanError(f"{where}: unknown kind {kind!r}")
    completion = i.get("completionContainers")
    match = None if i.get("match") is None else _inject_filter(shape.obj(i["match"], where), where)
    top = match.args if isinstance(match, And) else (match,)
    if any(isinstance(n, NamespaceLabel) and n not in top for n in _nodes(match)):
        raise PlanError(f"{where}: a namespaceLabel test must be at the top-level `and` of match")
    return Injection(
        name=name,
        span=_span(i.get("span")),
        kinds=kinds,
        match=match,
        ops=tuple(_op(o, f"{where}.ops") for o in shape.array(i.get("ops", []), where)),
        completion_containers=None if completion is None else _strs(completion, where),
    )


def _nodes(node: Any) -> Any:
    """Every node of a boolean filter, itself included."""
    yield node
    if isinstance(node, (And, Or)):
        for arg in node.args:
            yield from _nodes(arg)
    elif isinstance(node, Not):
        yield from _nodes(node.arg)
