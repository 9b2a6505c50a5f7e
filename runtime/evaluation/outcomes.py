"""What an evaluation answers, piece by piece: the verdict, the events detected, the actions
decided (with the budget they drew on) and, for `--explain`, a finding per rule.

Plain frozen values, shared by the modules that work them out (occurrences, policies,
decisions, verdicts) and re-exported by `runtime.evaluator`, whose `Evaluation` carries them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runtime.resources import Resize


@dataclass(frozen=True, slots=True)
class Verdict:
    phase: str
    reason: str | None
    message: str | None
    rule: str | None  # path:line:col of the deciding rule (or of the policy that made it final)
    final: bool = False  # made by an action; holds from then on
    cause: str | None = None  # the named cause of a Failed verdict (docs/causes.md)
    hint: str | None = None   # that cause's hint, for the job's owner


@dataclass(frozen=True, slots=True)
class Event:
    """Something detected in this evaluation, and the policy (if any) that took it."""

    event: str
    pod: str | None
    uid: str | None
    task: str | None
    container: str | None
    policy: str | None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Target:
    job: str
    namespace: str | None
    task: str | None
    pod: str | None
    uid: str | None


@dataclass(frozen=True, slots=True)
class BudgetUse:
    key: str
    used: int  # after this action
    max: int


@dataclass(frozen=True, slots=True)
class Action:
    """What to do. Only `status == "run"` is to be executed now; `scheduled` waits for `due`,
    `cancelled` is a scheduled one dropped (its pod recovered or the job ended), `spent` is one
    whose budget ran out with no fallback, `audited` one its policy only records (audit mode)."""

    action: str
    status: str  # run | counted | scheduled | cancelled | spent | audited
    policy: str
    event: str
    rule: str
    reason: str | None
    message: str | None
    target: Target
    due: datetime | None = None
    budget: BudgetUse | None = None
    resize: tuple[Resize, ...] = ()   # a restart with more memory: the new sizes


@dataclass(frozen=True, slots=True)
class Finding:
    """Explanation of one rule: whether it matched, and if not, why."""

    rule: str
    what: str  # verdict | policy
    name: str
    matched: bool
    why: str
