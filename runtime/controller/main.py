"""The controller process: `python -m runtime.controller` (console script `jobrules-controller`).

It watches every kind the plan declares and the pods they may own (runtime.controller.caches),
and its workers reconcile each job that changed (runtime.controller.worker). This module is the
process around them, as controller-runtime's manager is: the plan (re-read when its file
changes, without a restart), leader election (workers start only once leading), the periodic
resync, health and metrics, signals. docs/controller.md says what is written where, and how each
fault is handled.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from runtime import about, plan, reloading, shards
from runtime.controller import events, health, kube, leader, metrics
from runtime.controller import shards as shardslib
from runtime.controller.settings import VARIABLES, ControllerSettings, SettingsError
from runtime.controller.worker import Worker

log = logging.getLogger("jobrules.controller")


class Controller:
    def __init__(self, settings: ControllerSettings, client: kube.Client,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.settings = settings
        self.client = client
        self.plan: plan.Plan | None = None
        self.recorder = events.Recorder(client, settings.identity,
                                        on_drop=lambda why: metrics.EVENTS_DROPPED.labels(why).inc())
        self.worker = Worker(settings, client, self.recorder, clock)
        self.stopping = threading.Event()
        self.leading = threading.Event()
        self._plans = reloading.Reloading(
            "plan", (settings.plan_path,), self._load_plan,
            settings.reload_interval, self._plan_loaded,
            lambda err, kept: log.error("plan %s not loaded (%s): %s", settings.plan_path,
                                        "keeping the previous one" if kept else "none yet", err))
        self._workers: list[threading.Thread] = []
        self._elector: leader.Elector | None = None
        self._shards: shardslib.Shards | None = None
        self._singletons: threading.Event | None = None   # set to stop the shard-0 holder's tasks
        metrics.INTENTS_OPEN.set_function(lambda: self.worker.intents_open)

    def run(self) -> int:
        """Run until `stop`; the exit status."""
        if self._plans.get() is None:
            log.error("no usable plan at %s: not starting", self.settings.plan_path)
            return 2
        try:
            server = health.serve(self.settings.health, self) if self.settings.health else None
        except OSError as err:
            log.error("cannot serve health and metrics on %s: %s", self.settings.health, err)
            return 2
        self.recorder.start()
        threading.Thread(target=self._reload_loop, name="plan-reload", daemon=True).start()
        threading.Thread(target=self._resync_loop, name="resync", daemon=True).start()
        if self.settings.leader_elect and self.settings.shards > 1:
            self._shards = shardslib.Shards(
                self.client, count=self.settings.shards,
                namespace=self.settings.lease_namespace, base=self.settings.lease_name,
                identity=self.settings.identity, lease_duration=self.settings.lease_duration,
                renew_deadline=self.settings.renew_deadline,
                retry_period=self.settings.retry_period, on_gained=self._gained,
                on_given=self._given, on_lost=shardslib.exit_lost)
            self.worker.gate = self._shards
            self._start_workers()
            self._shards.start()
        elif self.settings.leader_elect:
            self._elector = leader.Elector(
                self.client, self.client.api, namespace=self.settings.lease_namespace,
                name=self.settings.lease_name, identity=self.settings.identity,
                lease_duration=self.settings.lease_duration,
                renew_deadline=self.settings.renew_deadline,
                retry_period=self.settings.retry_period,
                on_started=self._lead, on_lost=self._lost).start()
        else:
            self._lead()
        # A timed wait: Python runs signal handlers in the main thread only, between bytecodes,
        # and a wait without a timeout may sleep through a signal the kernel gave another
        # thread (a controller under a profiler once slept through its SIGTERM).
        while not self.stopping.wait(1.0):
            pass
        log.info("stopping")
        self.worker.queue.shut_down_with_drain(timeout=10.0)
        for worker in self._workers:
            worker.join(timeout=10.0)
        if self._elector is not None:
            self._elector.release()
        if self._shards is not None:
            self._shards.release()
        self.recorder.stop()
        if server is not None:
            server.shutdown()
        return 0

    def stop(self) -> None:
        self.stopping.set()

    def _lead(self) -> None:
        self.leading.set()
        metrics.LEADER.set(1)
        self._start_singletons(self.stopping)
        self._start_workers()
        self.worker.resync()

    def _start_singletons(self, stopping: threading.Event) -> None:
        """What one replica does for all: keep the webhook's serving certificate."""
        settings = self.settings
        if settings.webhook_secret is not None and settings.webhook_service is not None:
            # Imported here: the certificate library is an extra ('jobrules[certs]'), needed by
            # this mode only (the settings refused the mode without it).
            from runtime.controller import serving
            keeper = serving.Keeper(self.client, secret=settings.webhook_secret,
                                    service=settings.webhook_service,
                                    configuration=settings.webhook_configuration)
            threading.Thread(target=keeper.run, args=(stopping,), name="serving-certificate",
                             daemon=True).start()

    def _start_workers(self) -> None:
        for n in range(self.settings.workers):
            thread = threading.Thread(target=self.worker.work, name=f"worker-{n}", daemon=True)
            thread.start()
            self._workers.append(thread)

    def _gained(self, gained: frozenset[int]) -> None:
        """Shards taken: reconcile their jobs (from their stored state and journal, as a new
        leader does); shard 0's holder does what the leader alone did."""
        self.leading.set()
        self._reshard()
        if 0 in gained and self._singletons is None:
            metrics.LEADER.set(1)
            self._singletons = threading.Event()
            self._start_singletons(self._singletons)
        self.worker.resync()

    def _reshard(self) -> None:
        """Ask the API server for the shards held now (where it offers sharded watch)."""
        if self._shards is not None:
            self.worker.caches.reshard(shards.selector(self._shards.owned, self.settings.shards))

    def _given(self, given: frozenset[int]) -> None:
        self._reshard()
        if 0 in given and self._singletons is not None:
            metrics.LEADER.set(0)
            self._singletons.set()
            self._singletons = None

    def _lost(self) -> None:
        log.error("lost leadership: exiting so that no stale worker writes on")
        metrics.LEADER.set(0)
        os._exit(1)

    @property
    def ready(self) -> bool:
        return self.plan is not None and all(i.ready for i in self.worker.caches.informers())

    def checks(self) -> list[tuple[str, bool, str]]:
        """(name, ok, detail) of each readiness check, for /readyz."""
        out = [("plan", self.plan is not None, self.plan.digest[:12] if self.plan else "not loaded")]
        for i in self.worker.caches.informers():
            detail = "synced" if i.synced.is_set() else (i.error or "listing")
            out.append((f"informer {i.name}", i.ready, detail))
        return out

    # -- plans -------------------------------------------------------------------------------

    def _load_plan(self) -> plan.Plan:
        """The plan file, with the policies `JOBRULES_AUDIT` names put in audit. An entry that
        names nothing in it refuses the plan: the operator meant some policy to only watch."""
        loaded = plan.load_file(self.settings.plan_path)
        unknown = plan.unknown_audits(loaded, self.settings.audit)
        if unknown:
            raise plan.PlanError(f"JOBRULES_AUDIT names no kind or policy of the plan: "
                                 f"{', '.join(unknown)}")
        return plan.audited(loaded, self.settings.audit)

    def _plan_loaded(self, previous: plan.Plan | None, new: plan.Plan) -> None:
        if previous is not None:
            metrics.PLAN_INFO.labels(previous.digest, str(previous.version)).set(0)
        metrics.PLAN_INFO.labels(new.digest, str(new.version)).set(1)
        log.info("plan loaded: digest %s, %d kinds", new.digest[:12], len(new.kinds))
        self.apply(new)

    def _reload_loop(self) -> None:
        while not self.stopping.wait(self.settings.reload_interval):
            self._plans.get()

    def apply(self, new: plan.Plan) -> None:
        """Watch what `new` declares and reconcile every cached job under it."""
        self.worker.caches.apply(new)
        self.plan = new
        self.worker.resync()

    def _resync_loop(self) -> None:
        while not self.stopping.wait(self.settings.resync * random.uniform(0.9, 1.1)):
            self.worker.resync()


# ---------------------------------------------------------------------------------------------
# Entry point


class _Arguments(argparse.ArgumentParser):
    """An unknown argument is one line (exit 2): the settings are the environment's."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message} (settings are environment variables: see --help)",
              file=sys.stderr)
        raise SystemExit(2)


def arguments() -> argparse.ArgumentParser:
    """The command line: nothing but --help and --version; --help lists the settings."""
    rows = "\n".join(f"  {v.names} ({v.default if v.default == 'required' else 'default: ' + v.default})\n"
                     + textwrap.fill(v.meaning, 79, initial_indent=" " * 6,
                                     subsequent_indent=" " * 6) for v in VARIABLES)
    parser = _Arguments(
        prog="jobrules-controller", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "The jobrules controller: watches the kinds of a compiled plan and their pods, "
            "writes each job's verdict and carries out its policies' actions "
            "(docs/controller.md). `python -m runtime.controller` is the same.", 79),
        epilog=f"settings, from the environment:\n{rows}\n\n"
               "A bad value stops the start with a message naming the variable (exit 2).")
    parser.add_argument("--version", action="version", help="print the version and exit",
                        version=f"jobrules-controller {about.version()}")
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    try:
        arguments().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as done:   # --help, --version (0) or a usage error (2)
        return done.code if isinstance(done.code, int) else 2
    try:
        settings = ControllerSettings.from_env(os.environ)
    except SettingsError as err:
        print(f"jobrules-controller: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        client = kube.Client.connect(settings.kubeconfig, on_response=metrics.count_api_request)
    except kube.ConfigError as err:
        print(f"jobrules-controller: {err}", file=sys.stderr)
        return 2
    controller = Controller(settings, client)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: controller.stop())
    return controller.run()
