"""The closed vocabularies of the language and the plan, written once.

The compiler checks rules against these words and the runtime loads plans against them, so both
import this module; it imports nothing (the compiler's start-up must not pay for the plan types or
JMESPath). docs/plan.md lists the same words; a test keeps them in step.
"""

from __future__ import annotations

PLAN_VERSION = 1

# What jobrules writes on objects, spelled once: annotations of jobs (the stored state, the
# verdict, the intent journal), of pods (the injections' record, the completion containers),
# of the objects it makes, and labels.
STATE_ANNOTATION = "jobrules.dev/state"
VERDICT_ANNOTATION = "jobrules.dev/verdict"
INTENTS_ANNOTATION = "jobrules.dev/intents"
JOB_ANNOTATIONS = (STATE_ANNOTATION, VERDICT_ANNOTATION, INTENTS_ANNOTATION)
INJECTED_ANNOTATION = "jobrules.dev/injected"
COMPLETION_ANNOTATION = "jobrules.dev/completion-containers"
PLAN_DIGEST_ANNOTATION = "jobrules.dev/plan-digest"
NEEDED_BY_ANNOTATION = "jobrules.dev/needed-by"
PHASE_LABEL = "jobrules.dev/phase"            # on a job: its verdict's phase (`kubectl get -L`)
INTENT_LABEL = "jobrules.dev/intent"          # on an object an action made: its intent's id
SKIP_LABEL = "jobrules.dev/skip"              # a pod with it is never sent to the webhook
REPORTING_CONTROLLER = "jobrules.dev/controller"

PHASES = ("Pending", "Running", "Suspended", "Restarting", "Succeeded", "Failed")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# `failed` leaves evicted (disrupted) pods out; `failedOrEvicted` is both (`failed or evicted`).
POD_STATES = ("pending", "running", "succeeded", "failed", "failedOrEvicted", "evicted",
              "terminating")
POD_STATE_WORDS = {"failedOrEvicted": "failed or evicted"}
FAILURE_STATES = frozenset({"failed", "failedOrEvicted", "evicted"})   # read failed containers
TASK_STATES = ("pending", "running", "succeeded", "failed")
COMPARATORS = ("<", "<=", "==", "!=", ">=", ">")
CONDITION_STATUSES = ("True", "False", "Unknown")

# Events, with the words the rules use for them.
EVENTS = {
    "podPending": "pod pending", "podRunning": "pod running", "podSucceeded": "pod succeeded",
    "podFailed": "pod failed", "podEvicted": "pod evicted", "podDeleted": "pod deleted",
    "containerRestarted": "container restarted", "taskCompleted": "task completed",
    "taskFailed": "task failed", "jobVerdictChanged": "job verdict changed",
    "jobRunningLongerThan": "job running longer than",
}
POD_EVENTS = frozenset({"podPending", "podRunning", "podSucceeded", "podFailed", "podEvicted",
                        "podDeleted", "containerRestarted"})
TASK_EVENTS = frozenset({"taskCompleted", "taskFailed"})
JOB_EVENTS = frozenset({"jobVerdictChanged", "jobRunningLongerThan"})
TIMED_EVENTS = frozenset({"podPending", "jobRunningLongerThan"})   # take `for D`
FAILURE_EVENTS = frozenset({"podFailed", "podEvicted", "taskFailed"})   # read failed containers

# Actions, with the words the rules use for them.
ACTIONS = {
    "failJob": "fail job", "completeJob": "complete job", "restartJob": "restart job",
    "restartTask": "restart task", "restartPod": "restart pod", "abortJob": "abort job",
    "terminateJob": "terminate job", "ignore": "ignore", "failTask": "fail task", "count": "count",
}
RESTARTS = frozenset({"restartJob", "restartTask", "restartPod"})
# Actions with an effect in the cluster (`ignore` and `count` have none), and how a kind does
# each when its `actions { ... }` does not say: `record` writes the verdict and does nothing
# else; `unsupported` makes a policy taking it an error (R409).
EFFECTS = frozenset({"failJob", "completeJob", "restartJob", "restartTask", "restartPod",
                     "abortJob", "terminateJob", "failTask"})
DEFAULT_RECIPES = {"failJob": "record", "completeJob": "record", "terminateJob": "record",
                   "failTask": "record", "abortJob": "unsupported"}
DEFAULT_STEPS = {"restartPod": "pod", "restartTask": "task", "restartJob": "job"}   # delete pods
STEPS = ("deletePods", "set", "condition", "create", "await", "resize")
TASK_ACTIONS = frozenset({"restartTask", "failTask"})   # need a task
BUDGET_SCOPES = ("job", "task", "pod")
# What an evaluation says to do with an action: run it now, it waits for its delay, it was
# dropped, its budget is spent (no fallback), it only counted (a `count` within its budget), or
# its policy is in audit (decided and recorded, not taken).
ACTION_STATUSES = ("run", "scheduled", "cancelled", "spent", "counted", "audited")

# Template placeholders, by where the template stands (docs/language.md, Templates).
VERDICT_PLACEHOLDERS = (
    "job", "namespace", "kind", "task", "pod", "container", "container_reason", "exit_code",
    "pod_reason", "phase", "count", "total", "restarts", "event", "budget_used", "budget_max",
)
JOB_PLACEHOLDERS = ("job", "namespace", "kind")
INJECT_PLACEHOLDERS = ("job", "namespace", "kind", "task", "pod")
CONTAINER_PLACEHOLDERS = (*INJECT_PLACEHOLDERS, "container")
SHELL_PLACEHOLDERS = (*CONTAINER_PLACEHOLDERS, "argv")
PLACEHOLDERS = tuple(dict.fromkeys((*VERDICT_PLACEHOLDERS, *SHELL_PLACEHOLDERS)))
