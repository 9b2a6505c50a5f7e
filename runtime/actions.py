"""How an intent's next step is carried out, as a pure function of the intent, the job and its pods.

Each step of a kind's recipe (runtime.plan: DeletePods, SetField, SetCondition, CreateObject,
Await) becomes the requests that do it, or says it is done, must wait, or cannot be done. Every
request is idempotent, so a step replayed after a crash repeats no effect:

- a pod is deleted (or evicted) with its uid and the resourceVersion seen as preconditions, and
  only the pods recorded when the action was decided: 404 means that incarnation is gone, a 409
  that it changed (or was replaced) since, and the step is looked at again on a fresh view. A
  replacement the operator made since is never touched. The resourceVersion is what keeps two
  controllers that carry out the same intent at once from both removing the pod: the API server
  answers 200 to both of two graceless deletes that race (kubernetes#19403), and a precondition
  on the version makes the later one a 409;
- a field or a condition is compared first and written only when it differs, with the job's
  resourceVersion as a precondition;
- an object is created under a name made from the intent (`jr-<id>`): 409 means it exists. An
  object its consumer deletes once it has acted (a Volcano Command) could be made twice by a
  replay, so it is created only while the job's status is as it was when the action was decided;
  a status that moved since means the object may have done its work, and the step ends;
- a field of the job's objects of another kind (`set spec.active = false on kueue.x-k8s.io/
  v1beta2 Workload label "kueue.x-k8s.io/job-uid" = <<metadata.uid>>`) is compared on each
  object the shell listed live by that label for this pass (`lookups` says which lists), and
  written where it differs: a merge patch of one value, 404 meaning the object is gone. The
  journal machine looks at such a step only on lists no other such step of the pass has written
  since they were read;
- `await` holds the intent until its condition holds, and fails it past its time.

A kind may have several recipes for one action (`restart job when EXPR -> ...`): the one for a
job is chosen once, when the action is decided (`variant`), and recorded on the intent, so that
its steps are the same ones however the job changes while they are carried out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping, TypeAlias

from runtime import (conditions, functions, intents, objects, pods, plan, resources, templates,
                     vocabulary)

DONE_ON_DELETE = frozenset({404})        # that incarnation is gone already
DONE_ON_CREATE = frozenset({409})        # it exists already
AWAIT_POLL = 2.0                          # seconds between looks while awaiting


# A list of the job's objects of another kind: its path (the namespace's collection) and the
# label selector; and what the shell found for each, by it.
Lookup: TypeAlias = tuple[str, str]
Related: TypeAlias = Mapping[Lookup, Sequence[Mapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class Request:
    method: str                      # DELETE | POST | PATCH
    path: str
    body: Any
    done_on: frozenset[int] = frozenset()   # statuses that mean "already so"
    guarded: bool = False            # a merge patch to send with the job's resourceVersion


@dataclass(frozen=True, slots=True)
class Next:
    """What the intent's current step needs: requests to send (then it is done), a wait, a
    failure, or nothing (it is done already)."""

    requests: tuple[Request, ...] = ()
    wait: float | None = None        # seconds to look again in
    failed: str | None = None        # why it cannot be done
    note: str | None = None          # why it was taken as done without a request

    @property
    def done(self) -> bool:
        return not self.requests and self.wait is None and self.failed is None


def variant(kind: plan.Kind, action: str, job: Mapping[str, Any], now: datetime) -> int | None:
    """The kind's first guarded recipe of `action` whose `when` holds for the job (JMESPath
    truth), recorded on the intent; None: the plain recipe."""
    search = templates.searcher(functions.options(now))
    for i, g in enumerate(kind.guarded):
        if g.action == action and pods.truthy(search(g.when, job)):
            return i
    return None


def lookup(on: plan.Objects, job: Mapping[str, Any], now: datetime) -> Lookup | None:
    """Where the job's objects of `on` are listed; None when the label's value is null for it."""
    value = templates.render_text(on.value, job, _variables(job),
                                  templates.searcher(functions.options(now)))
    if value is None:
        return None
    return objects.path(on.api_version, on.plural, objects.namespace(job)), f"{on.key}={value}"


def lookups(kind: plan.Kind, journal: Iterable[intents.Intent], job: Mapping[str, Any],
            now: datetime) -> tuple[Lookup, ...]:
    """The lists the shell reads before carrying out the journal: those of the steps of other
    objects each open intent has still to do (a pass may go through several steps)."""
    out: list[Lookup] = []
    for intent in journal:
        recipe = kind.recipe(intent.action, intent.recipe)
        if isinstance(recipe, str):
            continue
        for step in recipe[intent.step:]:
            if isinstance(step, plan.SetObjectField):
                found = lookup(step.on, job, now)
                if found is not None and found not in out:
                    out.append(found)
    return tuple(out)


def next_step(kind: plan.Kind, intent: intents.Intent, job: Mapping[str, Any],
              pod_objects: list[Mapping[str, Any]], now: datetime, *,
              status_subresource: bool, related: Related | None = None) -> Next:
    """The requests for the intent's current step (`intent.step` of its kind's recipe, the
    one chosen at the decision); `related`: the lists `lookups` named, as the shell read them."""
    recipe = kind.recipe(intent.action, intent.recipe)
    if isinstance(recipe, str) or intent.step >= len(recipe):
        return Next()
    step = recipe[intent.step]
    namespace = objects.namespace(job)
    job_path = objects.path(kind.api_version, kind.plural, namespace, objects.name(job))
    if isinstance(step, plan.DeletePods):
        return _delete(step, intent, pod_objects, namespace)
    if isinstance(step, plan.SetObjectField):
        return _set_objects(step, job, related or {}, now)
    if isinstance(step, plan.SetField):
        if objects.at(job, step.path) == step.value:
            return Next(note="already so")
        patch = objects.put({}, step.path, step.value)
        return Next((Request("PATCH", _target(job_path, step.path[0], status_subresource), patch,
                             guarded=True),))
    if isinstance(step, plan.SetCondition):
        return _condition(step, intent, job, job_path, now, status_subresource)
    if isinstance(step, plan.CreateObject):
        return _create(kind, step, intent, job, namespace, now)
    if isinstance(step, plan.ResizeTemplate):
        return _resize(step, intent, job, job_path)
    return _await(kind, step, intent, job, pod_objects, now)


def _target(job_path: str, first: str, status_subresource: bool) -> str:
    return f"{job_path}/status" if first == "status" and status_subresource else job_path


def _delete(step: plan.DeletePods, intent: intents.Intent, pod_objects: list[Mapping[str, Any]],
            namespace: str | None) -> Next:
    """Delete the pods recorded on the intent that are still there as those incarnations and
    not already on their way out."""
    live = {objects.uid(p): p for p in pod_objects}
    out = []
    for pod_name, uid in intent.targets:
        pod = live.get(uid)
        if pod is None or objects.deleting(pod):
            continue
        path = objects.path("v1", "pods", namespace, pod_name)
        version = objects.resource_version(pod)
        preconditions = {"preconditions": {"uid": uid,
                                           **({"resourceVersion": version} if version else {})}}
        if step.evict:
            out.append(Request("POST", f"{path}/eviction", {
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod_name, "namespace": namespace},
                "deleteOptions": preconditions}, DONE_ON_DELETE))
        else:
            out.append(Request("DELETE", path, preconditions, DONE_ON_DELETE))
    return Next(tuple(out), note=None if out else "no such pod left")


def _set_objects(step: plan.SetObjectField, job: Mapping[str, Any], related: Related,
                 now: datetime) -> Next:
    """A merge patch of the one field on each of the job's objects the shell listed where it
    differs."""
    where = lookup(step.on, job, now)
    if where is None:
        return Next(failed=f"the label {step.on.key} of its {step.on.kind} objects is null "
                           f"for this job")
    found = related.get(where)
    if found is None:                 # not read for this pass: look again
        return Next(wait=AWAIT_POLL)
    patch = objects.put({}, step.path, step.value)
    named = [o for o in found if objects.name(o)]
    out = tuple(Request("PATCH", objects.path(step.on.api_version, step.on.plural,
                                              objects.namespace(job), objects.name(o)),
                        patch, DONE_ON_DELETE)
                for o in named if objects.at(o, step.path) != step.value)
    if out:
        return Next(out)
    return Next(note="already so" if named else f"no {step.on.kind} with {where[1]}")


def _variables(job: Mapping[str, Any]) -> dict[str, Any]:
    return {"job": objects.name(job), "namespace": objects.namespace(job), "kind": job.get("kind")}


def _condition(step: plan.SetCondition, intent: intents.Intent, job: Mapping[str, Any],
               job_path: str, now: datetime, status_subresource: bool) -> Next:
    conditions_ = objects.conditions(job)
    if any(c.get("type") == step.type and c.get("status") == "True" for c in conditions_):
        return Next(note="already so")
    time = functions.rfc3339(now)
    word = "".join(w.capitalize() for w in vocabulary.ACTIONS[intent.action].split())  # FailJob
    wanted = {"type": step.type, "status": "True",
              "reason": objects.condition_reason(intent.reason, word),
              "message": objects.bounded(intent.message or intent.reason or intent.action,
                                         objects.CONDITION_MESSAGE_MAX),
              "lastTransitionTime": time, "lastProbeTime": time}
    kept = [c for c in conditions_ if c.get("type") != step.type]
    return Next((Request("PATCH", _target(job_path, "status", status_subresource),
                         {"status": {"conditions": [*kept, wanted]}}, guarded=True),))


def _resize(step: plan.ResizeTemplate, intent: intents.Intent, job: Mapping[str, Any],
            job_path: str) -> Next:
    """Write the intent's new sizes into the job's pod template: its container lists with
    those containers' memory changed, as one patch guarded by the resourceVersion (a merge
    patch replaces a list whole, so it is built from the job as it now is)."""
    if not intent.resize:
        return Next(note="no new size to write")
    path = step.path
    if step.within is not None:
        entries = objects.at(job, step.path)
        wanted = intent.task.lower() if intent.task else None   # no task, no entry
        key = next((k for k in (entries if isinstance(entries, dict) else {})
                    if k.lower() == wanted), None)
        if key is None:
            return Next(failed=f"no entry of {'.'.join(step.path)} for task {intent.task!r}")
        path = (*step.path, key, *step.within)
    template = objects.at(job, path)
    lists = resources.resized(template if isinstance(template, dict) else {}, intent.resize)
    if lists is None:
        return Next(note="already so")
    patch = objects.put({}, (*path, "spec"), lists)
    return Next((Request("PATCH", job_path, patch, guarded=True),))


def _create(kind: plan.Kind, step: plan.CreateObject, intent: intents.Intent,
            job: Mapping[str, Any], namespace: str | None, now: datetime) -> Next:
    if intent.observed.get("status") != intents.status_digest(kind, job):
        return Next(note="the job's status moved since the action was decided: the object may "
                         "have done its work already")
    owner = {"apiVersion": job.get("apiVersion"), "kind": job.get("kind"),
             "name": objects.name(job), "uid": objects.uid(job), "controller": False,
             "blockOwnerDeletion": False}
    search = templates.searcher(functions.options(now))
    variables = {"job": objects.name(job), "namespace": namespace, "kind": job.get("kind"),
                 "task": intent.task, "pod": intent.pod}
    body: dict[str, Any] = {
        "apiVersion": step.api_version, "kind": step.kind,
        "metadata": {"name": f"jr-{intent.id}", "namespace": namespace,
                     "labels": {vocabulary.INTENT_LABEL: intent.id},
                     "ownerReferences": [owner]}}
    for key, template in step.body:
        if template is None:
            body[key] = owner
        else:
            text = templates.render_text(template, job, variables, search)
            body[key] = intent.reason if key == "reason" and text is None else text
    return Next((Request("POST", objects.path(step.api_version, step.plural, namespace), body,
                         DONE_ON_CREATE),))


def _await(kind: plan.Kind, step: plan.Await, intent: intents.Intent, job: Mapping[str, Any],
           pod_objects: list[Mapping[str, Any]], now: datetime) -> Next:
    search = templates.searcher(functions.options(now))
    facts = [pods.facts(kind, p, search) for p in pod_objects]
    snapshot = conditions.Snapshot(job, facts, now, search,
                                   {"job": objects.name(job), "namespace": objects.namespace(job),
                                    "kind": job.get("kind")})
    if snapshot.holds(step.when)[0]:
        return Next(note="holds")
    began = functions.timestamp(intent.since) or now
    if now - began >= timedelta(seconds=step.timeout):
        return Next(failed=f"waited {step.timeout}s for it in vain")
    return Next(wait=AWAIT_POLL)
