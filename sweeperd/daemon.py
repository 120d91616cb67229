"""`sweeperd run`: the long-running sweeper, from start to a clean stop."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType

import redis
import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from sweeperd import __version__
from sweeperd.discovery import discover_queues
from sweeperd.drain import Drainer
from sweeperd.http import MetricsServer, serve
from sweeperd.ledger import Ledger
from sweeperd.logs import configure_logging
from sweeperd.metrics import Metrics
from sweeperd.node import Node
from sweeperd.notify import Notifier
from sweeperd.schedule import Batch, Schedule
from sweeperd.settings import ConfigError, QueueSettings, Settings
from sweeperd.sizing import CallSizer
from sweeperd.tick import Tick

log = structlog.get_logger("sweeperd.daemon")

WORKERS = 4  # batches swept at once
HEARTBEAT_S = 1.0  # the scheduler proves it is alive this often
READY_INTERVALS = 3  # ready while every node answered within this many intervals
STOP_TIMEOUT_S = 8.0  # the in-flight sweep finishes within this, or is left behind
WAKE_S = 0.5  # the main thread's loop: signals, readiness, watchdog
OVERRUN_LOG_S = 60.0  # at most one sweep_overrun log line this often


@dataclass
class Daemon:
    """The scheduler, the node, the metrics server and the signals, wired together."""

    settings: Settings
    reload: Callable[[], Settings]
    notifier: Notifier = field(default_factory=Notifier.from_environ)
    metrics: Metrics = field(default_factory=lambda: Metrics(version=__version__))
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        s = self.settings
        self.node = Node(
            s.connection.node,
            s.connection.client(),
            s.executor,
            self.metrics,
            CallSizer(s.call_target_ms / 1000),
        )
        self.ledger = Ledger(self.metrics, self.node.name)
        self.drainer = Drainer(
            self.node, self.ledger, share=s.drain_share, on_restart=self.restarted
        )
        # The heartbeat has a thread of its own: sweeps stuck on a hung server must not make
        # a live scheduler look dead to the liveness probe.
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={"default": ThreadPoolExecutor(WORKERS), "beat": ThreadPoolExecutor(1)},
        )
        self.schedule = Schedule(
            self.scheduler, self.sweep, jitter=s.jitter, on_lag=self.metrics.schedule_lag,
            on_overrun=self.overrun,
        )  # fmt: skip
        self.stop_requested = threading.Event()
        self.reload_requested = threading.Event()
        self.heartbeat = self.clock()
        self.discovered: set[str] = set()
        self.swept: set[str] = set()  # the queues that have series
        self.server: MetricsServer | None = None
        self.announced_ready = False
        self.overruns_logged_at: float | None = None
        # Overruns are counted and logged below, at most once a minute, not once per batch.
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)

    # The sweep of one batch, run by the scheduler's pool.
    def sweep(self, batch: Batch) -> None:
        if self.stop_requested.is_set():
            return
        Tick(
            self.node,
            self.metrics,
            self.ledger,
            self.drainer,
            self.settings.prefix_root,
            on_restart=self.restarted,
        ).run(batch)

    def restarted(self, _node: Node) -> None:
        """A new run of the server: every queue at once, so its earlier leases go back now."""
        self.schedule.sweep_now()

    def queues(self) -> list[QueueSettings]:
        named = {q.name for q in self.settings.queues}
        found = [self.settings.for_queue(n) for n in sorted(self.discovered - named)]
        return [*self.settings.queues, *found]

    def apply_queues(self) -> None:
        """Schedule the queues wanted now; a queue no longer wanted loses its series."""
        wanted = self.queues()
        names = {q.name for q in wanted}
        for name in names - self.swept:
            self.metrics.add_queue(name)
        for name in self.swept - names:
            self.metrics.forget_queue(name)
            self.drainer.forget(name)
            self.ledger.forget(name)
        self.swept = names
        self.schedule.sync(wanted)

    def discover(self) -> None:
        try:
            found = discover_queues(self.node.client, self.settings.prefix_root)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.node.failed(self.clock(), exc)  # logged once per change, as the sweeps do
            return
        except redis.RedisError as exc:  # a failed scan keeps the last list
            log.warning("discovery_failed", node=self.node.name, error=str(exc))
            return
        with self.node.lock:
            self.node.answered(self.clock())
        if found != self.discovered:
            log.info(
                "queues_discovered",
                added=sorted(found - self.discovered),
                dropped=sorted(self.discovered - found),
            )
            self.discovered = found
            self.apply_queues()

    def overrun(self) -> None:
        self.metrics.schedule_overrun()
        now = self.clock()
        if self.overruns_logged_at is None or now - self.overruns_logged_at >= OVERRUN_LOG_S:
            self.overruns_logged_at = now
            log.warning(
                "sweep_overrun",
                hint="a batch was still sweeping when it fell due again: raise --interval, "
                "or see sweeperd_schedule_overruns_total",
            )

    def beat(self) -> None:
        self.heartbeat = self.clock()

    def healthy(self) -> bool:
        """The scheduler is alive: its heartbeat job ran lately."""
        return self.scheduler.running and self.clock() - self.heartbeat <= 5 * HEARTBEAT_S

    def ready(self) -> bool:
        """Every node answered within the last three intervals."""
        interval = self.schedule.shortest_interval() or max(
            self.settings.interval, self.settings.discover
        )
        ready = self.node.answered_within(self.clock(), READY_INTERVALS * interval)
        self.metrics.set_ready(ready)
        return ready

    def add_jobs(self) -> None:
        """The heartbeat, the discovery scan and one job per batch of queues."""
        self.scheduler.add_job(
            self.beat, "interval", seconds=HEARTBEAT_S, id="heartbeat", coalesce=True,
            executor="beat",
        )  # fmt: skip
        if self.settings.discover:
            self.scheduler.add_job(
                self.discover,
                "interval",
                seconds=self.settings.discover,
                id="discover",
                coalesce=True,
                next_run_time=datetime.now(UTC),
            )
        self.apply_queues()

    def start(self) -> None:
        s = self.settings
        self.server = serve(
            s.metrics_host,
            s.metrics_port,
            self.metrics.registry,
            healthy=self.healthy,
            ready=self.ready,
            landing=lambda: self.status_text(self.ready()),
            exposition=self.metrics.exposition,
        )
        self.add_jobs()
        self.drainer.start()
        self.scheduler.start()
        log.info("started", version=__version__, **s.describe())

    def request_stop(self, signum: int, _frame: FrameType | None) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        self.stop_requested.set()

    def request_reload(self, _signum: int, _frame: FrameType | None) -> None:
        self.reload_requested.set()

    def apply_reload(self) -> None:
        """SIGHUP: the config file again; queues, budgets and log level change in place."""
        self.reload_requested.clear()
        try:
            fresh = self.reload()
        except ConfigError as exc:
            log.error("reload_failed", error=str(exc))
            return
        needs_restart = [
            name
            for name in ("connection", "executor", "metrics_host", "metrics_port", "queue_metrics")
            if getattr(fresh, name) != getattr(self.settings, name)
        ]
        if needs_restart:
            log.warning("reload_needs_restart", settings=needs_restart)
        configure_logging(fresh.log_format, fresh.log_level)
        self.node.sizer.target_s = fresh.call_target_ms / 1000
        self.drainer.share = fresh.drain_share
        self.settings = fresh
        self.scheduler.remove_all_jobs()  # every job anew: intervals may have changed
        self.schedule.reset()
        self.add_jobs()
        log.info("reloaded", **fresh.describe())

    def serve_forever(self) -> None:
        """The main thread: signals, readiness and the watchdog, until asked to stop."""
        watchdog = self.notifier.watchdog_interval_s
        last_watchdog = 0.0
        status = ""
        while not self.stop_requested.wait(WAKE_S):
            if self.reload_requested.is_set():
                self.apply_reload()
            ready = self.ready()
            if ready and not self.announced_ready:
                self.notifier.ready()
                self.announced_ready = True
                log.info("ready", node=self.node.name)
            now_status = self.status_text(ready)
            if now_status != status:
                self.notifier.status(now_status)
                status = now_status
            now = self.clock()
            if watchdog and now - last_watchdog >= watchdog and self.healthy():
                self.notifier.watchdog()
                last_watchdog = now

    def status_text(self, ready: bool) -> str:
        """What systemctl status shows: what the daemon sweeps, or what it waits for."""
        if ready:
            return f"sweeping {len(self.schedule.queue_names())} queues on {self.node.name}"
        return f"waiting for {self.node.name} to answer"

    def stop(self) -> None:
        """Stop scheduling, let the in-flight sweep finish its call, close the server."""
        self.notifier.stopping()
        self.drainer.stop(STOP_TIMEOUT_S / 2)
        done = threading.Thread(target=self.scheduler.shutdown, kwargs={"wait": True})
        done.start()
        done.join(STOP_TIMEOUT_S)
        if done.is_alive():
            log.warning("stop_timeout", waited_s=STOP_TIMEOUT_S)
        if self.server is not None:
            self.server.close()
        log.info("stopped")


def run(settings: Settings, reload: Callable[[], Settings]) -> int:
    """Run until SIGTERM or SIGINT; SIGHUP re-reads the config file."""
    daemon = Daemon(
        settings, reload, metrics=Metrics(version=__version__, level=settings.queue_metrics)
    )
    daemon.start()
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    signal.signal(signal.SIGHUP, daemon.request_reload)
    try:
        daemon.serve_forever()
    finally:
        daemon.stop()
    return 0
