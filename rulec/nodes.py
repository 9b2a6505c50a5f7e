"""The typed syntax tree: frozen nodes, each with its source span as first field.

Values keep the spelling-independent meaning (decoded strings, seconds, plan vocabulary) so that
the checker and the emitter never look at text again. Nodes compare by identity (`eq=False`):
each stands for one place in one file, and skipping the generated `__eq__`/`__hash__` halves the
cost of defining the classes at start-up.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Union

from rulec.source import Span


# ---------------------------------------------------------------- leaves

@dataclass(frozen=True, slots=True, eq=False)
class Text:
    """A string literal, decoded."""

    span: Span
    value: str


@dataclass(frozen=True, slots=True, eq=False)
class Name:
    """An identifier: a kind or define name, a phase word, a kind's Kind."""

    span: Span
    value: str


@dataclass(frozen=True, slots=True, eq=False)
class Number:
    span: Span
    value: int


@dataclass(frozen=True, slots=True, eq=False)
class Duration:
    span: Span
    seconds: int


@dataclass(frozen=True, slots=True, eq=False)
class Expr:
    """A JMESPath expression; `line`/`column` locate its first character in the file."""

    span: Span
    text: str
    line: int
    column: int


@dataclass(frozen=True, slots=True, eq=False)
class Placeholder:
    span: Span
    name: str


@dataclass(frozen=True, slots=True, eq=False)
class Template:
    span: Span
    parts: tuple[Union[str, Placeholder, Expr], ...]

    def literal(self) -> str | None:
        """The text when the template is a plain string, else None."""
        if all(isinstance(p, str) for p in self.parts):
            return "".join(self.parts)  # type: ignore[arg-type]
        return None


@dataclass(frozen=True, slots=True, eq=False)
class FieldPath:
    span: Span
    segments: tuple[str, ...]


# ---------------------------------------------------------------- boolean structure
# Conditions, pod filters and injection filters share the connectives.

@dataclass(frozen=True, slots=True, eq=False)
class And:
    span: Span
    args: tuple["Node", ...]


@dataclass(frozen=True, slots=True, eq=False)
class Or:
    span: Span
    args: tuple["Node", ...]


@dataclass(frozen=True, slots=True, eq=False)
class Not:
    span: Span
    arg: "Node"


# ---------------------------------------------------------------- condition atoms

@dataclass(frozen=True, slots=True, eq=False)
class JobExpr:
    span: Span
    expr: Expr


@dataclass(frozen=True, slots=True, eq=False)
class PodQuant:
    span: Span
    quant: str                     # any | all | none
    task: Text | None
    state: str | None              # plan PodState
    for_: Duration | None
    filter: "Node | None"


@dataclass(frozen=True, slots=True, eq=False)
class PodCount:
    span: Span
    task: Text | None
    state: str | None
    filter: "Node | None"
    cmp: str
    value: Number | Expr


@dataclass(frozen=True, slots=True, eq=False)
class TaskQuant:
    span: Span
    quant: str                     # any | all
    task: Text | None
    state: str


@dataclass(frozen=True, slots=True, eq=False)
class TaskCount:
    """`count tasks [STATE] CMP N`."""

    span: Span
    state: str | None
    cmp: str
    value: Number | Expr


@dataclass(frozen=True, slots=True, eq=False)
class JobAge:
    span: Span
    longer_than: Duration


# ---------------------------------------------------------------- pod filter terms

@dataclass(frozen=True, slots=True, eq=False)
class ExitCodes:
    span: Span
    codes: tuple[Number, ...]
    ranges: tuple[tuple[Number, Number], ...]
    negate: bool


@dataclass(frozen=True, slots=True, eq=False)
class ContainerReason:
    span: Span
    values: tuple[Text, ...]
    negate: bool


@dataclass(frozen=True, slots=True, eq=False)
class ContainerScope:
    """`container "x"`: scopes the exit, reason and restarts terms of its filter."""

    span: Span
    name: Text


@dataclass(frozen=True, slots=True, eq=False)
class PodReason:
    span: Span
    values: tuple[Text, ...]
    negate: bool


@dataclass(frozen=True, slots=True, eq=False)
class PodCondition:
    span: Span
    type: Text
    statuses: tuple[Text, ...]     # () : "True"
    reasons: tuple[Text, ...]


@dataclass(frozen=True, slots=True, eq=False)
class TaskIs:
    span: Span
    values: tuple[Text, ...]
    negate: bool


@dataclass(frozen=True, slots=True, eq=False)
class Restarts:
    span: Span
    cmp: str
    value: Number


@dataclass(frozen=True, slots=True, eq=False)
class KeyTest:
    """`label`/`annotation`/`namespace label "k"` with `exists`, `= v`, `!= v`, `in [...]`,
    `not in [...]`."""

    span: Span
    what: str                      # label | annotation | namespace label
    key: Text
    values: tuple[Text, ...] | None  # None: exists
    negate: bool


@dataclass(frozen=True, slots=True, eq=False)
class Where:
    span: Span
    expr: Expr


@dataclass(frozen=True, slots=True, eq=False)
class IsDefine:
    span: Span
    name: Name


# ---------------------------------------------------------------- injection match terms

@dataclass(frozen=True, slots=True, eq=False)
class Namespace:
    span: Span
    values: tuple[Text, ...]
    negate: bool


@dataclass(frozen=True, slots=True, eq=False)
class PrimaryPod:
    span: Span


Node = Union[And, Or, Not, JobExpr, PodQuant, PodCount, TaskQuant, TaskCount, JobAge, ExitCodes,
             ContainerReason, ContainerScope, PodReason, PodCondition, TaskIs, Restarts, KeyTest,
             Where, IsDefine, Namespace, PrimaryPod]


# ---------------------------------------------------------------- kinds

@dataclass(frozen=True, slots=True, eq=False)
class Verdict:
    span: Span
    phase: str                     # plan Phase
    when: Node | None              # None: otherwise
    reason: Template | None
    message: Template | None


@dataclass(frozen=True, slots=True, eq=False)
class Event:
    span: Span
    name: str                      # plan Event
    task: Text | None
    for_: Duration | None
    to: Name | None
    evicted: bool = False          # `pod failed or evicted`


@dataclass(frozen=True, slots=True, eq=False)
class Action:
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


@dataclass(frozen=True, slots=True, eq=False)
class Policy:
    span: Span
    event: Event
    filter: Node | None
    action: Action
    id: Text | None
    audit: Span | None = None   # `audit on ...`: decided and recorded, never acted on


@dataclass(frozen=True, slots=True, eq=False)
class Step:
    """One step of how an action is done (`actions { ... }`)."""

    span: Span
    op: str                               # deletePods | set | condition | create | await
    scope: str | None = None              # deletePods: pod | task | job
    evict: bool = False
    path: FieldPath | None = None         # set
    value: object = None                  # set: a JSON value (a Text for a string)
    type: Text | None = None              # condition
    api_version: Name | None = None       # create
    kind: Name | None = None
    body: tuple[tuple[Text, "Template | str"], ...] = ()   # "job": the job's owner reference
    when: Node | None = None              # await
    timeout: Duration | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Recipe:
    """`VERB -> steps`, or `-> unsupported` / `-> record`."""

    span: Span
    verb: str                             # plan ActionName
    word: str | None                      # unsupported | record | None (steps)
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True, eq=False)
class PhaseMapEntry:
    span: Span
    phase: Name
    value: Text


@dataclass(frozen=True, slots=True, eq=False)
class Status:
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


@dataclass(frozen=True, slots=True, eq=False)
class PodLabel:
    span: Span
    key: Text
    value: Template


@dataclass(frozen=True, slots=True, eq=False)
class Final:
    """`final until <<expr>> changes` or `final never`."""

    span: Span
    until: Expr | None
    never: bool


@dataclass(frozen=True, slots=True, eq=False)
class Mode:
    """`mode audit [annotation only]`: every policy of the kind decides and records, none acts."""

    span: Span
    annotation_only: bool   # the verdict goes to our annotation only, not the kind's status


@dataclass(frozen=True, slots=True, eq=False)
class Kind:
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

    @property
    def has_task(self) -> bool:
        return self.task_label is not None or self.task_expr is not None


@dataclass(frozen=True, slots=True, eq=False)
class Extend:
    """`extend NAME { policies }`: policies added to a kind declared elsewhere."""

    span: Span
    name: Name
    policies: tuple[Policy, ...]


# ---------------------------------------------------------------- injection

@dataclass(frozen=True, slots=True, eq=False)
class Containers:
    span: Span
    select: str                    # primary | all | named
    names: tuple[Text, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Annotate:
    span: Span
    key: Text
    value: Template


@dataclass(frozen=True, slots=True, eq=False)
class SetLabel:
    span: Span
    key: Text
    value: Template


@dataclass(frozen=True, slots=True, eq=False)
class Env:
    span: Span
    name: Text
    value: Template
    containers: Containers | None


@dataclass(frozen=True, slots=True, eq=False)
class Volume:
    span: Span
    name: Text
    source: str                    # emptyDir | configMap | secret
    ref: Text | None


@dataclass(frozen=True, slots=True, eq=False)
class Mount:
    span: Span
    volume: Text
    path: Text
    read_only: bool
    containers: Containers | None


@dataclass(frozen=True, slots=True, eq=False)
class SidecarEnv:
    span: Span
    name: Text
    value: Template


@dataclass(frozen=True, slots=True, eq=False)
class Sidecar:
    span: Span
    name: Text
    native: bool
    image: Template | None
    command: tuple[Template, ...] | None
    args: tuple[Template, ...] | None
    env: tuple[SidecarEnv, ...]
    mounts: tuple[Mount, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Wrap:
    span: Span
    containers: Containers
    argv: tuple[Template, ...] | None
    shell: Template | None


Op = Union[Annotate, SetLabel, Env, Volume, Mount, Sidecar, Wrap]


@dataclass(frozen=True, slots=True, eq=False)
class Injection:
    span: Span
    name: Text | None
    kinds: tuple[Name, ...]
    match: Node | None
    ops: tuple[Op, ...]
    wait: tuple[Text, ...] | None


# ---------------------------------------------------------------- files

@dataclass(frozen=True, slots=True, eq=False)
class Define:
    span: Span
    name: Name
    filter: Node


@dataclass(frozen=True, slots=True, eq=False)
class Webhook:
    span: Span
    failure: Name | None           # open | closed
    timeout: Duration | None


Decl = Union[Kind, Extend, Injection, Define, Webhook]


@dataclass(frozen=True, slots=True, eq=False)
class AllowComment:
    """`# rulec: allow NAME`: silences warning NAME on its line (or the next, when alone)."""

    span: Span
    names: tuple[str, ...]
    own_line: bool


@dataclass(frozen=True, slots=True, eq=False)
class File:
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
