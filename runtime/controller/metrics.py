"""Prometheus metrics of the controller (one process: prometheus_client's default registry).

The work-queue metrics carry client-go's names, help texts, buckets and `name` label
(`k8s.io/component-base/metrics/prometheus/workqueue`), so dashboards made for Kubernetes
controllers read ours too.
"""

from __future__ import annotations

import functools

from prometheus_client import Counter, Gauge, Histogram

from runtime.workqueue import Unfinished

API_REQUESTS = Counter(
    "jobrules_controller_api_requests",
    "Requests to the Kubernetes API server, by verb, resource and HTTP status code "
    "('<error>' when no answer came).",
    ["verb", "resource", "code"],
)
API_LATENCY = Histogram(
    "jobrules_controller_api_request_duration_seconds",
    "Time from sending a request to its answer read (to the response headers, for a watch).",
    ["verb"],
    buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0),
)

# client-go's buckets: ExponentialBuckets(10e-9, 10, 10), 10 ns to 10 s.
_WORKQUEUE_BUCKETS = tuple(10.0 ** exponent for exponent in range(-8, 2))

DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", ["name"])
ADDS = Counter("workqueue_adds", "Total number of adds handled by workqueue", ["name"])
QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested.",
    ["name"], buckets=_WORKQUEUE_BUCKETS,
)
WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    ["name"], buckets=_WORKQUEUE_BUCKETS,
)
UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has done that is in progress and hasn't been observed by "
    "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
    "threads by observing the rate at which this increases.",
    ["name"],
)
LONGEST_RUNNING = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    ["name"],
)
RETRIES = Counter("workqueue_retries", "Total number of retries handled by workqueue", ["name"])


@functools.cache
def _api_requests(verb: str, resource: str, code: str) -> Counter:
    return API_REQUESTS.labels(verb, resource, code)


def count_api_request(verb: str, resource: str, code: int, seconds: float) -> None:
    """`kube.Client`'s `on_response` hook."""
    _api_requests(verb, resource, str(code) if code else "<error>").inc()
    API_LATENCY.labels(verb).observe(seconds)


class WorkQueueMetrics:
    """`runtime.workqueue.QueueMetrics` for the queue called `name`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._depth = DEPTH.labels(name)
        self._adds = ADDS.labels(name)
        self._queue_duration = QUEUE_DURATION.labels(name)
        self._work_duration = WORK_DURATION.labels(name)
        self._retries = RETRIES.labels(name)

    def added(self) -> None:
        self._adds.inc()
        self._depth.inc()

    def taken(self, queued_seconds: float) -> None:
        self._depth.dec()
        self._queue_duration.observe(queued_seconds)

    def finished(self, work_seconds: float) -> None:
        self._work_duration.observe(work_seconds)

    def retried(self) -> None:
        self._retries.inc()

    def track(self, unfinished: Unfinished) -> None:
        """Read at scrape time: exact, where client-go samples every 500 ms."""
        UNFINISHED_WORK.labels(self.name).set_function(lambda: unfinished()[0])
        LONGEST_RUNNING.labels(self.name).set_function(lambda: unfinished()[1])


# -- the reconcile loop ------------------------------------------------------------------------

RECONCILES = Counter(
    "jobrules_controller_reconcile",
    "Reconciles, by kind and result (success, requeue, conflict, error, skipped).",
    ["kind", "result"],
)
RECONCILE_DURATION = Histogram(
    "jobrules_controller_reconcile_duration_seconds",
    "Time to reconcile one job: evaluation and its writes.",
    ["kind"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
VERDICTS = Counter(
    "jobrules_controller_verdicts",
    "Verdict changes written, by kind and the new phase.",
    ["kind", "phase"],
)
FAILURES = Counter(
    "jobrules_failures",
    "Jobs failed, by kind and the named cause that matched (none: no cause did).",
    ["kind", "cause"],
)
NO_CAUSE = "none"  # the cause label of a failure no cause matched (no cause may be so named)


def verdict_changed(kind: str, phase: str, cause: str | None) -> None:
    """Count a verdict change written; a change to Failed is a job failed, counted by cause."""
    VERDICTS.labels(kind, phase).inc()
    if phase == "Failed":
        FAILURES.labels(kind, cause or NO_CAUSE).inc()


VERDICT_LATENCY = Histogram(
    "jobrules_controller_verdict_latency_seconds",
    "From the first pod event of a change received to the verdict it caused committed.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
WATCH_RESTARTS = Counter(
    "jobrules_controller_watch_restarts",
    "Watches reopened, by resource and why (idle, error, not-found).",
    ["resource", "reason"],
)
RELISTS = Counter(
    "jobrules_controller_relists",
    "Lists after a watch's resource version expired (410 Gone), by resource.",
    ["resource"],
)
STORE_OBJECTS = Gauge("jobrules_controller_store_objects",
                      "Objects in the controller's cache, by resource.", ["resource"])
STORE_BYTES = Gauge("jobrules_controller_store_bytes",
                    "Bytes of projected objects in the controller's cache, by resource.",
                    ["resource"])
RESOURCE_SERVED = Gauge(
    "jobrules_controller_resource_served",
    "1 when the API server serves a declared kind's resource, 0 when not (CRD missing).",
    ["kind"],
)
ACTIONS = Counter(
    "jobrules_controller_actions",
    "Actions carried out to the end (done), given up (dropped), or decided by a policy in "
    "audit and not taken (audited), by kind and action.",
    ["kind", "action", "result"],
)
ACTION_WRITES = Counter(
    "jobrules_controller_action_writes",
    "Writes made to carry actions out, by kind and part: the steps' own requests (effect), the "
    "journal's cursor and clear patches (journal), the Events saying an action was done or "
    "dropped (event). The intents ride in the reconcile's commit, which is no extra write.",
    ["kind", "part"],
)
NATIVE_DISAGREEMENTS = Counter(
    "jobrules_native_disagreements",
    "Jobs in shadow mode (carrying the podFailurePolicy fragment `rulec native` compiled) whose "
    "outcome the Job controller and jobrules decided differently, by kind and podFailurePolicy "
    "rule (`default`: the backoff limit; `none`: no rule named).",
    ["kind", "rule"],
)
NATIVE_COMPARISONS = Counter(
    "jobrules_native_comparisons",
    "Outcomes of Jobs in shadow mode compared with jobrules' decision, once each, by kind and "
    "result (agree, disagree).",
    ["kind", "result"],
)
INTENTS_OPEN = Gauge("jobrules_controller_intents_open",
                     "Actions committed and not yet done, over the jobs this replica acted on.")
EVENTS_DROPPED = Counter("jobrules_controller_events_dropped",
                         "Events not sent, by why (rate, queue, error).", ["reason"])
LEADER = Gauge("jobrules_controller_leader",
               "1 while this replica holds the lease (or runs without election).")
SHARDS_HELD = Gauge("jobrules_controller_shards_held",
                    "Shards this replica holds (JOBRULES_SHARDS > 1).")
SHARDS_SHARE = Gauge("jobrules_controller_shards_share",
                     "This replica's fair share of the shards: ceil(shards / live replicas).")
PLAN_INFO = Gauge("jobrules_controller_plan_info", "1 for the plan in use, by digest.",
                  ["digest", "plan_version"])
CERTIFICATE_EXPIRY = Gauge("jobrules_controller_serving_certificate_expiry_timestamp_seconds",
                           "When the webhook's serving certificate the leader keeps expires "
                           "(self-managed certificates; unset otherwise).")
