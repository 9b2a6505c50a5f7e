"""A work queue with client-go's semantics (`k8s.io/client-go/util/workqueue`), for the controller.

The rules a reconcile loop relies on:

- a key is handed to one worker at a time: `get` never returns a key until `done` was called for
  its previous `get`;
- adds collapse: a key added N times before a worker takes it is taken once;
- a key added while a worker holds it is taken exactly once more, after `done`;
- `add_after(key, seconds)` adds the key once the delay has passed; a key already waiting keeps
  the earlier of its deadlines, so it waits once, not once per call;
- `add_rate_limited(key)` adds it after the larger of its own exponential backoff (5 ms doubling
  per retry up to 1,000 s) and an overall token bucket (10 per second, bursts of 100), client-go's
  default controller rate limiter; `forget(key)` resets the key's backoff, `num_requeues(key)`
  tells how many retries it has had since;
- after `shut_down` adds are ignored, workers still get the keys that were ready, then `None`;
  waiting (delayed) keys are dropped.

Pure: no I/O and no thread of its own. Deadlines, backoff and metrics read the injected `clock`
(monotonic seconds); due keys are moved to the ready queue by whichever call comes next, and a
blocked `get` wakes up for the earliest deadline. Thread-safe: one lock guards all of it.
Metrics go through `QueueMetrics` with client-go's meaning; the default records nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)

Clock = Callable[[], float]
Unfinished = Callable[[], tuple[float, float]]


class QueueMetrics(Protocol):
    """What a queue reports, in client-go's terms (`workqueue_*` metrics, one queue name)."""

    def added(self) -> None:
        """A key became dirty: `adds_total` and `depth` go up."""

    def taken(self, queued_seconds: float) -> None:
        """A worker took a key that waited that long since it became dirty: `depth` goes down,
        `queue_duration_seconds` observes."""

    def finished(self, work_seconds: float) -> None:
        """A worker called `done` after that long: `work_duration_seconds` observes."""

    def retried(self) -> None:
        """`add_after` or `add_rate_limited` was called: `retries_total` goes up."""

    def track(self, unfinished: Unfinished) -> None:
        """Called once with a function giving (seconds of work in progress, seconds of the
        longest-running one) at any moment, for `unfinished_work_seconds` and
        `longest_running_processor_seconds`."""


class NoMetrics:
    """Records nothing."""

    def added(self) -> None:
        pass

    def taken(self, queued_seconds: float) -> None:
        pass

    def finished(self, work_seconds: float) -> None:
        pass

    def retried(self) -> None:
        pass

    def track(self, unfinished: Unfinished) -> None:
        pass


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """client-go's default controller rate limiter: the larger of a per-key exponential delay
    (`base` * 2^retries, at most `cap` seconds) and an overall token bucket (`rate` per second,
    `burst` tokens) that every `add_rate_limited` draws from."""

    base: float = 0.005
    cap: float = 1000.0
    rate: float = 10.0
    burst: int = 100

    def __post_init__(self) -> None:
        if not (0 < self.base <= self.cap and self.rate > 0 and self.burst >= 1):
            raise ValueError(f"backoff needs 0 < base <= cap, rate > 0 and burst >= 1: {self}")

    def delay(self, retries: int) -> float:
        """The per-key delay after `retries` earlier retries."""
        # 2.0 ** 1100 would overflow; any exponent past the cap gives the cap anyway.
        return self.cap if retries >= 1024 else min(self.base * 2.0 ** retries, self.cap)


class WorkQueue(Generic[K]):
    """Keys that need processing, handed to workers with client-go's guarantees (module doc)."""

    def __init__(self, *, clock: Clock = time.monotonic, backoff: Backoff = Backoff(),
                 metrics: QueueMetrics | None = None) -> None:
        self._clock = clock
        self._backoff = backoff
        self._metrics = metrics or NoMetrics()
        lock = threading.Lock()
        self._cond = threading.Condition(lock)   # workers wait here for keys
        self._idle = threading.Condition(lock)   # shut_down_with_drain waits here
        self._ready: collections.deque[K] = collections.deque()  # dirty, not processing, in order
        self._dirty: dict[K, float] = {}       # key -> when it became dirty
        self._processing: dict[K, float] = {}  # key -> when a worker took it
        self._waiting: list[tuple[float, int, K]] = []  # heap of (due, tie-break, key)
        self._due: dict[K, float] = {}         # key -> its live deadline in _waiting
        self._order = itertools.count()
        self._failures: dict[K, int] = {}
        self._tokens = float(backoff.burst)
        self._refilled = clock()
        self._shutting_down = False
        self._draining = False
        self._metrics.track(self.unfinished_work)

    # -- adding

    def add(self, key: K) -> None:
        """Mark `key` as needing processing (ignored after shutdown)."""
        with self._cond:
            now = self._clock()
            self._promote(now)
            if not self._shutting_down:
                self._add(key, now)

    def add_after(self, key: K, seconds: float, *, retry: bool = True) -> None:
        """Add `key` once `seconds` have passed; at once when `seconds` <= 0. Counted as a
        retry (client-go's meaning) unless `retry` is False: a first add held back on purpose,
        so that more changes of the key join it."""
        with self._cond:
            now = self._clock()
            self._promote(now)
            if not self._shutting_down:
                self._add_after(key, seconds, now, retry)

    def add_rate_limited(self, key: K, at_least: float = 0.0) -> None:
        """Add `key` after its backoff (see `Backoff`), or after `at_least` seconds if that is
        longer (a server's Retry-After), and count one more retry for it."""
        with self._cond:
            now = self._clock()
            self._promote(now)
            if self._shutting_down:
                return
            retries = self._failures.get(key, 0)
            self._failures[key] = retries + 1
            self._add_after(key, max(self._backoff.delay(retries), self._reserve(now), at_least),
                            now)

    def forget(self, key: K) -> None:
        """Stop tracking `key`'s retries (after a success, or when giving up on it)."""
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        """How many times `key` went through `add_rate_limited` since it was last forgotten."""
        with self._cond:
            return self._failures.get(key, 0)

    # -- working

    def get(self, timeout: float | None = None) -> K | None:
        """The next ready key, which the caller must pass to `done`; None when the queue is shut
        down and has nothing ready, or when `timeout` (real seconds) passed first."""
        with self._cond:
            give_up = None if timeout is None else time.monotonic() + timeout
            watching = False   # this caller last slept until the earliest deadline
            try:
                while True:
                    now = self._clock()
                    self._promote(now)
                    if self._ready:
                        key = self._ready.popleft()
                        self._metrics.taken(now - self._dirty.pop(key))
                        self._processing[key] = now
                        return key
                    if self._shutting_down:
                        return None
                    wait = self._due_in(now)
                    watching = wait is not None
                    if give_up is not None:
                        left = give_up - time.monotonic()
                        if left <= 0:
                            return None
                        wait = left if wait is None else min(wait, left)
                    self._cond.wait(wait)
            finally:
                # A caller that slept until the earliest deadline hands that watch over as it
                # leaves. One that slept without a deadline (none was waiting then) leaves it to
                # the waiter woken when the deadline came: waking another at every `get` cost a
                # wake-up and a look per reconcile. (Every ready key already woke a waiter of
                # its own when it became ready.)
                if watching and self._waiting:
                    self._cond.notify()

    def done(self, key: K) -> None:
        """`key` is processed; if it was added meanwhile it becomes ready again."""
        with self._cond:
            now = self._clock()
            try:
                started = self._processing.pop(key)
            except KeyError:
                raise ValueError(f"done({key!r}): that key is not being processed") from None
            self._metrics.finished(now - started)
            if key in self._dirty:
                self._ready.append(key)
                self._cond.notify()
            self._promote(now)   # after: a due key just re-queued must not be queued twice
            if self._draining and not self._processing and not self._ready:
                self._idle.notify_all()

    # -- stopping

    def shut_down(self) -> None:
        """Ignore adds from now on; `get` returns the keys still ready, then None."""
        with self._cond:
            self._stop()
            self._draining = False
            self._cond.notify_all()
            self._idle.notify_all()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """`shut_down`, then wait until no key is ready or being processed (workers must go on
        calling `get` and `done`). False when `timeout` passed or `shut_down` was called first."""
        with self._cond:
            self._stop()
            self._draining = True
            self._cond.notify_all()
            give_up = None if timeout is None else time.monotonic() + timeout
            while self._draining and (self._processing or self._ready):
                left = None if give_up is None else give_up - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
            return self._draining

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    # -- reading

    def __len__(self) -> int:
        """Keys ready to be taken now (not those being processed or still waiting)."""
        with self._cond:
            self._promote(self._clock())
            return len(self._ready)

    def unfinished_work(self) -> tuple[float, float]:
        """(seconds of work in progress over all workers, seconds of the longest one)."""
        with self._cond:
            now = self._clock()
            ages = [now - started for started in self._processing.values()]
            return sum(ages), max(ages, default=0.0)

    # -- under the lock

    def _add(self, key: K, now: float) -> None:
        if key in self._dirty:
            return
        self._dirty[key] = now
        self._metrics.added()
        if key not in self._processing:
            self._ready.append(key)
            self._cond.notify()

    def _add_after(self, key: K, seconds: float, now: float, retry: bool = True) -> None:
        if retry:
            self._metrics.retried()
        if seconds <= 0:
            self._add(key, now)
            return
        due = now + seconds
        if key in self._due and self._due[key] <= due:
            return
        earliest = self._waiting[0][0] if self._waiting else None
        self._due[key] = due
        heapq.heappush(self._waiting, (due, next(self._order), key))
        if earliest is None or due < earliest:
            self._cond.notify()   # a waiter may be sleeping until a later deadline

    def _promote(self, now: float) -> None:
        """Add the keys whose deadline has come."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            due, _, key = heapq.heappop(waiting)
            if self._due.get(key) == due:   # else a stale entry: the key got an earlier deadline
                del self._due[key]
                self._add(key, now)

    def _due_in(self, now: float) -> float | None:
        return max(self._waiting[0][0] - now, 0.0) if self._waiting else None

    def _reserve(self, now: float) -> float:
        """Take a token from the bucket; how long until it is really there (a reservation)."""
        backoff = self._backoff
        self._tokens = min(float(backoff.burst),
                           self._tokens + (now - self._refilled) * backoff.rate)
        self._refilled = now
        self._tokens -= 1.0
        return max(0.0, -self._tokens / backoff.rate)

    def _stop(self) -> None:
        """Stop adding. Keys already due are added first; those still waiting are dropped, as
        client-go's delaying queue drops them."""
        self._promote(self._clock())
        self._shutting_down = True
        self._waiting.clear()
        self._due.clear()
