"""The typed syntax tree: frozen nodes, each with its source span as first field.

Values keep the spelling-independent meaning (decoded strings, seconds, plan vocabulary) so that
the checker and the emitter never look at text again. Nodes compare by identity (`eq=False`):
each stands for one place in one file.

The nodes are msgspec structs rather than dataclasses because every `rulec` run defines all of
them: a frozen dataclass generates and compiles its methods when its class is created, about
1 ms a class (50 ms for this module, at every start), where a struct class is made in C. Both
are slotted and frozen; a struct's `__struct_fields__` names its fields in order.
"""
from __future__ import annotations

from pathlib import PurePath
from typing import Union

import msgspec

from rulec.source import Span


class AstNode(msgspec.Struct, frozen=True, eq=False):
    """The base of every node: frozen, slotted, compared by identity. (Each node repeats
    `frozen=True`: msgspec passes it on to subclasses, but mypy does not know that.)"""


# ---------------------------------------------------------------- leaves

class Text(AstNode, frozen=True):
    """A string literal, decoded."""

    span: Span
    value: str


class Name(AstNode, frozen=True):
    """An identifier: a kind or define name, a phase word, a kind's Kind."""

    span: Span
    value: str


class Number(AstNode, frozen=True):
    span: Span
    value: int


class Duration(AstNode, frozen=True):
    span: Span
    seconds: int


class Expr(AstNode, frozen=True):
    """A JMESPath expression; `line`/`column` locate its first character in the file."""

    span: Span
    text: str
    line: int
    column: int


class Placeholder(AstNode, frozen=True):
    span: Span
    name: str


class Template(AstNode, frozen=True):
    span: Span
    parts: tuple[Union[str, Placeholder, Expr], ...]

    def literal(self) -> str | None:
        """The text when the template is a plain string, else None."""
        if all(isinstance(p, str) for p in self.parts):
            return "".join(self.parts)  # type: ignore[arg-type]
        return None


class FieldPath(AstNode, frozen=True):
    span: Span
    segments: tuple[str, ...]


# ---------------------------------------------------------------- boolean structure
# Conditions, pod filters and injection filters share the connectives.

class And(AstNode, frozen=True):
    span: Span
    args: tuple["Node", ...]


class Or(AstNode, frozen=True):
    span: Span
    args: tuple["Node", ...]


class Not(AstNode, frozen=True):
    span: Span
    arg: "Node"


# ---------------------------------------------------------------- condition atoms

class JobExpr(AstNode, frozen=True):
    span: Span
    expr: Expr


class PodQuant(AstNode, frozen=True):
    span: Span
    quant: str                     # any | all | none
    task: Text | None
    state: str | None              # plan PodState
    for_: Duration | None
    filter: "Node | None"


class PodCount(AstNode, frozen=True):
    span: Span
    task: Text | None
    state: str | None
    filter: "Node | None"
    cmp: str
    value: Number | Expr


class TaskQuant(AstNode, frozen=True):
    span: Span
    quant: str                     # any | all
    task: Text | None
    state: str


class TaskCount(AstNode, frozen=True):
    """`count tasks [STATE] CMP N`."""

    span: Span
    state: str | None
    cmp: str
    value: Number | Expr


class JobAge(AstNode, frozen=True):
    span: Span
    longer_than: Duration


# ---------------------------------------------------------------- pod filter terms

class ExitCodes(AstNode, frozen=True):
    span: Span
    codes: tuple[Number, ...]
    ranges: tuple[tuple[Number, Number], ...]
    negate: bool


class ContainerReason(AstNode, frozen=True):
    span: Span
    values: tuple[Text, ...]
    negate: bool


class ContainerScope(AstNode, frozen=True):
    """`container "x"`: scopes the exit, reason and restarts terms of its filter."""

    span: Span
    name: Text


class PodReason(AstNode, frozen=True):
    span: Span
    values: tuple[Text, ...]
    negate: bool


class PodCondition(AstNode, frozen=True):
    span: Span
    type: Text
    statuses: tuple[Text, ...]     # () : "True"
    reasons: tuple[Text, ...]


class TaskIs(AstNode, frozen=True):
    span: Span
    values: tuple[Text, ...]
    negate: bool


class Restarts(AstNode, frozen=True):
    span: Span
    cmp: str
    value: Number


class KeyTest(AstNode, frozen=True):
    """`label`/`annotation`/`namespace label "k"` with `exists`, `= v`, `!= v`, `in [...]`,
    `not in [...]`."""

    span: Span
    what: str                      # label | annotation | namespace label
    key: Text
    values: tuple[Text, ...] | None  # None: exists
    negate: bool


class Where(AstNode, frozen=True):
    span: Span
    expr: Expr


class IsDefine(AstNode, frozen=True):
    span: Span
    name: Name


class IsCause(AstNode, frozen=True):
    """`cause "name"`: the `when` of a named cause, inlined as a define is."""

    span: Span
    name: Text


# ---------------------------------------------------------------- injection match terms

class Namespace(AstNode, frozen=True):
    span: Span
    values: tuple[Text, ...]
    negate: bool


class PrimaryPod(AstNode, frozen=True):
    span: Span


Node = Union[And, Or, Not, JobExpr, PodQuant, PodCount, TaskQuant, TaskCount, JobAge, ExitCodes,
             ContainerReason, ContainerScope, PodReason, PodCondition, TaskIs, Restarts, KeyTest,
             Where, IsDefine, IsCause, Namespace, PrimaryPod]


# ---------------------------------------------------------------- kinds

class Verdict(AstNode, frozen=True):
    span: Span
    phase: str                     # plan Phase
    when: Node | None              # None: otherwise
    reason: Template | None
    message: Template | None


class Event(AstNode, frozen=True):
    span: Span
    name: str                      # plan Event
    task: Text | None
    for_: Duration | None
    to: Name | None
    evicted: bool = False          # `pod failed or evicted`


class Grow(AstNode, frozen=True):
    """`with memory * FACTOR [up to MAX]`: a restart that first raises the memory of the
    containers that ran out of it."""

    span: Span
    factor: float
    max: Text | None              # a Kubernetes quantity, as written


class Action(AstNode, frozen=True):
    span: Span
    verb: str                      # plan ActionName
    reason: Template | None
    message: Template | None
    max: Number | Expr | None
    per: Name | None               # per task | per job | per pod
    budget: Text | None
    delay: Duration | None
    fallback: "Action | None"
    doubling: Name | None = None   # `after D doubling`: the delay doubles with each use
    delay_cap: Duration | None = None  # `... up to D`
    grow: Grow | None = None       # `with memory * F up to MAX`


class Policy(AstNode, frozen=True):
    span: Span
    event: Event
    filter: Node | None
    action: Action
    id: Text | None
    audit: Span | None = None   # `audit on ...`: decided and recorded, never acted on


class Step(AstNode, frozen=True):
    """One step of how an action is done (`actions { ... }`)."""

    span: Span
    op: str                               # deletePods | set | condition | create | await | resize
    scope: str | None = None              # deletePods: pod | task | job
    evict: bool = False
    path: FieldPath | None = None         # set; resize: the pod template
    value: object = None                  # set: a JSON value (a Text for a string)
    type: Text | None = None              # condition
    api_version: Name | None = None       # create
    kind: Name | None = None
    body: tuple[tuple[Text, "Template | str"], ...] = ()   # "job": the job's owner reference
    when: Node | None = None              # await
    timeout: Duration | None = None
    within: FieldPath | None = None       # resize `PATH[task].WITHIN`: a map keyed by task
    on: "ObjectsRef | None" = None        # set `... on API KIND label K = V`: those objects


class ObjectsRef(AstNode, frozen=True):
    """`on API KIND label "KEY" = VALUE`: the objects of another kind in the job's namespace
    whose label KEY is VALUE, made from the job (Kueue's Workloads of a job: `job-uid`)."""

    span: Span
    api_version: Name
    kind: Name
    key: Text
    value: Template


class Recipe(AstNode, frozen=True):
    """`VERB -> steps`, or `-> unsupported` / `-> record`; with `when EXPR`, for the jobs the
    expression holds for (the first such recipe of the action, else its plain one)."""

    span: Span
    verb: str                             # plan ActionName
    word: str | None                      # unsupported | record | None (steps)
    steps: tuple[Step, ...]
    when: Expr | None = None


class PhaseMapEntry(AstNode, frozen=True):
    span: Span
    phase: Name
    value: Text


class Status(AstNode, frozen=True):
    span: Span
    phase: FieldPath | None
    phase_only: tuple[Name, ...] | None    # the phases written; None: all of them
    phase_over: tuple[Text, ...] | None    # the current values the phase may replace; None: any
    phase_map: tuple[PhaseMapEntry, ...]
    reason: FieldPath | None
    message: FieldPath | None
    condition: Text | None
    condition_off: bool
    events: bool
    annotations: bool


class PodLabel(AstNode, frozen=True):
    span: Span
    key: Text
    value: Template


class Final(AstNode, frozen=True):
    """`final until <<expr>> changes` or `final never`."""

    span: Span
    until: Expr | None
    never: bool


class Mode(AstNode, frozen=True):
    """`mode audit [annotation only]`: every policy of the kind decides and records, none acts."""

    span: Span
    annotation_only: bool   # the verdict goes to our annotation only, not the kind's status


class Foreign(AstNode, frozen=True):
    """`foreign when <<expr>> [write verdicts]`: a job of the kind that another controller runs
    (its `spec.managedBy`, say) gets no actions, and no verdict writes unless asked."""

    span: Span
    when: Expr
    verdicts: bool


class Kind(AstNode, frozen=True):
    span: Span
    name: Name
    api_version: Name
    group: str
    version: str
    kind: Name
    plural: Text | None
    owned: bool
    pod_labels: tuple[PodLabel, ...]
    task_label: Text | None
    task_expr: Expr | None
    primary_pods: Node | None
    primary_containers: tuple[Text, ...] | None
    verdicts: tuple[Verdict, ...]
    policies: tuple[Policy, ...]
    status: Status | None
    more_versions: tuple[Name, ...] = ()   # further served versions of the group
    scope: Node | None = None              # `where ...` in the header
    final: Final | None = None
    primary_prefix: Text | None = None     # `primary containers prefix "step-"`
    recipes: tuple[Recipe, ...] = ()       # `actions { ... }`
    mode: Mode | None = None               # `mode audit`
    foreign: Foreign | None = None         # `foreign when ...`

    @property
    def has_task(self) -> bool:
        return self.task_label is not None or self.task_expr is not None


class Extend(AstNode, frozen=True):
    """`extend NAME { policies }`: policies added to a kind declared elsewhere."""

    span: Span
    name: Name
    policies: tuple[Policy, ...]


# ---------------------------------------------------------------- injection

class Containers(AstNode, frozen=True):
    span: Span
    select: str                    # primary | all | named
    names: tuple[Text, ...]


class Annotate(AstNode, frozen=True):
    span: Span
    key: Text
    value: Template


class SetLabel(AstNode, frozen=True):
    span: Span
    key: Text
    value: Template


class Env(AstNode, frozen=True):
    span: Span
    name: Text
    value: Template
    containers: Containers | None


class Volume(AstNode, frozen=True):
    span: Span
    name: Text
    source: str                    # emptyDir | configMap | secret
    ref: Text | None


class Mount(AstNode, frozen=True):
    span: Span
    volume: Text
    path: Text
    read_only: bool
    containers: Containers | None


class SidecarEnv(AstNode, frozen=True):
    span: Span
    name: Text
    value: Template


class Sidecar(AstNode, frozen=True):
    span: Span
    name: Text
    native: bool
    image: Template | None
    command: tuple[Template, ...] | None
    args: tuple[Template, ...] | None
    env: tuple[SidecarEnv, ...]
    mounts: tuple[Mount, ...]


class Wrap(AstNode, frozen=True):
    span: Span
    containers: Containers
    argv: tuple[Template, ...] | None
    shell: Template | None


Op = Union[Annotate, SetLabel, Env, Volume, Mount, Sidecar, Wrap]


class Injection(AstNode, frozen=True):
    span: Span
    name: Text | None
    kinds: tuple[Name, ...]
    match: Node | None
    ops: tuple[Op, ...]
    wait: tuple[Text, ...] | None


# ---------------------------------------------------------------- files

class Define(AstNode, frozen=True):
    span: Span
    name: Name
    filter: Node


class Cause(AstNode, frozen=True):
    """`cause "name" when FILTER hint "text"`: a failure cause named once, matched in
    verdicts and usable in filters, with a hint for the job's owner."""

    span: Span
    name: Text
    filter: Node
    hint: Text


class Webhook(AstNode, frozen=True):
    span: Span
    failure: Name | None           # open | closed
    timeout: Duration | None


Decl = Union[Kind, Extend, Injection, Define, Cause, Webhook]


class AllowComment(AstNode, frozen=True):
    """`# rulec: allow NAME`: silences warning NAME on its line (or the next, when alone)."""

    span: Span
    names: tuple[str, ...]
    own_line: bool


class File(AstNode, frozen=True):
    span: Span
    decls: tuple[Decl, ...]
    allows: tuple[AllowComment, ...]
    exprs: tuple[Expr, ...]        # every JMESPath expression of the file, in source order

    def injection_names(self) -> tuple[tuple[Injection, str], ...]:
        """Each injection with its plan name: as given, else `FILESTEM#N`, N its index among
        the file's injections (the checker keeps the names unique: they key the pod's record)."""
        stem = PurePath(self.span.path).stem
        injections = (d for d in self.decls if isinstance(d, Injection))
        return tuple((i, i.name.value if i.name else f"{stem}#{n}")
                     for n, i in enumerate(injections))
