"""`foreign when <<expr>> [write verdicts]`: a job another controller runs (its `spec.managedBy`)
gets no actions and, unless the rules ask, no writes. From the source to what the controller's
reconcile decides: the plan carries the clause, the evaluator puts the policies in audit for
such a job, and `reconcile.left_alone` keeps the controller's hands off it."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rulec import api, emit
from runtime import evaluator, plan, reconcile

NOW = datetime(2026, 12, 4, 13, 30, tzinfo=timezone.utc)
RULES = """\
job batchjob: batch/v1 Job {
    foreign when <<spec.managedBy && spec.managedBy != 'kubernetes.io/job-controller'>>%s
    failed     when any pod failed
    running    when any pod running
    pending    otherwise
    on pod failed exit 137 -> restart job max 2 as "killed"
}
"""
UID = "7e7e7e7e-0000-4000-8000-000000000003"


def compiled(tmp_path: Path, clause: str = "") -> plan.Kind:
    path = tmp_path / "j.rules"
    path.write_text(RULES % clause)
    built = api.build([str(path)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [kind] = plan.loads(emit.dumps(built.plan)).kinds
    return kind


def job(managed_by: str | None) -> dict[str, Any]:
    spec = {} if managed_by is None else {"managedBy": managed_by}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "remote", "namespace": "team-a", "uid": UID,
                         "resourceVersion": "7", "creationTimestamp": "2026-12-04T13:00:00Z"},
            "spec": spec}


def killed_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "remote-x1", "namespace": "team-a", "uid": UID[:-1] + "9",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "remote", "uid": UID, "controller": True}]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {
            "terminated": {"exitCode": 137, "reason": "Error",
                           "finishedAt": "2026-12-04T13:20:00Z"}}}]},
    }


def test_the_plan_carries_the_clause(tmp_path: Path) -> None:
    kind = compiled(tmp_path)
    assert kind.foreign is not None and kind.foreign.verdicts is False
    assert kind.foreign.when.source == (
        "spec.managedBy && spec.managedBy != 'kubernetes.io/job-controller'")
    assert compiled(tmp_path, " write verdicts").foreign.verdicts is True   # type: ignore[union-attr]


@pytest.mark.parametrize(("managed_by", "foreign"), [
    (None, False), ("", False), ("kubernetes.io/job-controller", False),
    ("kueue.x-k8s.io/multikueue", True), ("example.com/in-house", True),
])
def test_which_jobs_are_foreign(tmp_path: Path, managed_by: str | None, foreign: bool) -> None:
    kind = compiled(tmp_path)
    assert evaluator.foreign(kind, job(managed_by), NOW) is foreign
    why = reconcile.left_alone(kind, job(managed_by), NOW)
    assert (why is not None) is foreign
    if foreign:
        assert why == ("it is another controller's (kind batchjob: foreign when "
                       "<<spec.managedBy && spec.managedBy != 'kubernetes.io/job-controller'>>)")


def test_a_kind_without_the_clause_has_no_foreign_jobs(tmp_path: Path) -> None:
    path = tmp_path / "j.rules"
    path.write_text("".join(line for line in (RULES % "").splitlines(keepends=True)
                            if "foreign" not in line))
    built = api.build([str(path)])
    assert built.plan is not None
    [kind] = plan.loads(emit.dumps(built.plan)).kinds
    assert kind.foreign is None
    assert not evaluator.foreign(kind, job("kueue.x-k8s.io/multikueue"), NOW)
    assert reconcile.left_alone(kind, job("kueue.x-k8s.io/multikueue"), NOW) is None


@pytest.mark.parametrize(("managed_by", "status"), [
    ("kueue.x-k8s.io/multikueue", "audited"), (None, "run")])
def test_a_foreign_job_policies_decide_and_act_on_nothing(tmp_path: Path, managed_by: str | None,
                                                         status: str) -> None:
    kind = compiled(tmp_path)
    done = evaluator.evaluate(kind, job(managed_by), [killed_pod()], None, NOW)
    assert [(a.action, a.status) for a in done.actions] == [("restartJob", status)]


def test_write_verdicts_keeps_the_writes_and_drops_the_actions(tmp_path: Path) -> None:
    kind = compiled(tmp_path, " write verdicts")
    remote = job("kueue.x-k8s.io/multikueue")
    assert reconcile.left_alone(kind, remote, NOW) is None
    writes = reconcile.reconcile(kind, remote, [killed_pod()], NOW)
    assert writes.evaluation.verdict.phase == "Failed"
    assert writes.commit is not None and writes.status is not None   # the verdict is written
    assert writes.new == () and writes.journal == ()                 # no action to carry out
    ours = reconcile.reconcile(kind, job(None), [killed_pod()], NOW)
    assert [i.action for i in ours.new] == ["restartJob"]


def test_foreign_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.rules"
    path.write_text((RULES % "").replace(
        "    failed ", "    foreign when <<spec.managedBy>>\n    failed ", 1))
    built = api.build([str(path)])
    assert built.plan is None
    [found] = [d for d in built.diagnostics if d.code == "R106"]
    assert (found.span.line, found.span.column) == (3, 5)
    assert "`foreign`" in found.message


def test_a_foreign_clause_reads_the_clock_of_the_evaluation(tmp_path: Path) -> None:
    """`age()` in the clause: the job (made at 13:00) is another controller's from 13:20 on."""
    path = tmp_path / "j.rules"
    path.write_text((RULES % "").replace(
        "<<spec.managedBy && spec.managedBy != 'kubernetes.io/job-controller'>>",
        "<<age(metadata.creationTimestamp) > `1200`>>"))
    built = api.build([str(path)])
    assert built.plan is not None, [str(d) for d in built.diagnostics]
    [kind] = plan.loads(emit.dumps(built.plan)).kinds
    early = datetime(2026, 12, 4, 13, 10, tzinfo=timezone.utc)
    assert (evaluator.foreign(kind, job(None), early), evaluator.foreign(kind, job(None), NOW)) == (
        False, True)
    for now, status in ((early, "run"), (NOW, "audited")):
        done = evaluator.evaluate(kind, job(None), [killed_pod()], None, now)
        assert [(a.action, a.status) for a in done.actions] == [("restartJob", status)]
