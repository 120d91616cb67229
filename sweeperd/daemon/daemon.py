"""`sweeperd run`: the long-running sweeper wired together, from start to a clean stop."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import FrameType

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from sweeperd import __version__
from sweeperd.config.settings import ConfigError, DaemonSettings, Settings
from sweeperd.constants import DeadlineSource, SweepAt
from sweeperd.daemon.audit import BackgroundAudit
from sweeperd.daemon.choosing import Chooser
from sweeperd.daemon.discovery import Discovery
from sweeperd.daemon.eviction import EvictionWatch
from sweeperd.daemon.health import HEARTBEAT_S, Health
from sweeperd.daemon.http import MetricsServer, serve
from sweeperd.daemon.notify import Notifier
from sweeperd.daemon.queueset import QueueSet
from sweeperd.daemon.reload import in_effect, log_notes, restart_changes
from sweeperd.daemon.schedule import Batch, Schedule
from sweeperd.daemon.settle import (
    RELEASE_S,
    SETTLE_INTERVALS,
    release,
    settle,
    tune_collector,
)
from sweeperd.daemon.sharing import Sharing
from sweeperd.daemon.wakes import Wakes
from sweeperd.fleet.fleet import Fleet, Tuning
from sweeperd.fleet.outcome import Outcome
from sweeperd.logs import configure_logging
from sweeperd.metrics.registry import Metrics
from sweeperd.metrics.state import StateReaders
from sweeperd.signals import SignalInbox

log = structlog.get_logger("sweeperd.daemon")

# WORKERS batches are swept at once; at stop, the sweep in flight finishes within
# STOP_TIMEOUT_S or is left behind.
WORKERS = 4
STOP_TIMEOUT_S = 8.0
# A thread waiting for the GIL gets it within SWITCH_INTERVAL_S (Python's: 5 ms): a wake at a
# deadline waits for it at each read and write of its round, while a tick of hundreds of queues
# parses their replies.
SWITCH_INTERVAL_S = 0.001
# The main thread's loop (signals, readiness, the watchdog) turns every TURN_S; sweep_overrun
# is logged at most every OVERRUN_LOG_S; a server loading its dataset is tried again after
# LOADING_RETRY_S; the first background audit runs AUDIT_FIRST_S after the start at the latest.
TURN_S = 0.5
OVERRUN_LOG_S = 60.0
LOADING_RETRY_S = 0.5
AUDIT_FIRST_S = 30.0
# The signals that stop the daemon; SIGHUP reloads it.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequested(BaseException):
    """SIGTERM or SIGINT while the daemon starts: the start ends where it is (a call waiting on
    a server that does not answer, e.g. a TLS handshake to a plain port, is not waited for)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class Daemon:
    """The scheduler, the primaries, the queues, the metrics server and the signals."""

    settings: Settings
    reload: Callable[[], Settings]
    notifier: Notifier = field(default_factory=Notifier.from_environ)
    metrics: Metrics = field(default_factory=lambda: Metrics(version=__version__))
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        s = self.settings
        self.fleet = Fleet(
            s.connection, self.metrics, tuning(s), report=self.answer, clock=self.clock
        )
        # One thread per kind of job, so that none waits behind another: the heartbeat's (a
        # sweep stuck on a hung server must not make a live scheduler look dead), the
        # membership's, the eviction watch's (a hung server's INFO), the audit's (long);
        # discovery and the settling run on default. The schedule adds the batches' executor
        # (SWEEPS).
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={
                "default": ThreadPoolExecutor(1),
                "beat": ThreadPoolExecutor(1),
                "members": ThreadPoolExecutor(1),
                "eviction": ThreadPoolExecutor(1),
                "audit": ThreadPoolExecutor(1),
            },
        )
        self.schedule = Schedule(
            self.scheduler,
            self.sweep,
            workers=WORKERS,
            jitter=s.daemon.jitter,
            on_overrun=self.overrun,
        )
        self._wakes = Wakes(self.wake, self.fleet.next_wake, clock=self.clock)
        self._chooser = Chooser(self.choose)
        self.sharing = Sharing.of(s, self.fleet.home, relocate=self.fleet.follow)
        self.queues = QueueSet(
            s,
            self.sharing,
            self.metrics.numbers,
            self.schedule,
            own=self.fleet.own,
            clock=self.clock,
        )
        self._discovery = Discovery(
            self.fleet.primaries,
            s.prefix_root,
            refresh_layout=self.fleet.refresh_soon,
            clock=self.clock,
        )
        self.health = Health(
            self.scheduler, self.schedule, self.fleet, lambda: self.settings, self.clock
        )
        for series in self.schedule.series:
            self.metrics.add_collector(series)
        self.metrics.read_state(
            StateReaders(
                nodes=self.fleet.states,
                ready=self.health.ready,
                members=self.sharing.seen,
                owned=lambda: len(self.queues.sweeping()),
                known=self.queues.known_count,
                ownership_changes=lambda: self.sharing.changes,
            )
        )
        self._stop_requested = threading.Event()
        self.eviction = EvictionWatch(self.fleet.primaries)
        self.audit = BackgroundAudit(
            s.prefix_root,
            self.queues.sweeping,
            lambda queue: self.fleet.primaries_of((queue,)),
            self._stop_requested,
        )
        self.metrics.add_collector(self.eviction)
        self.metrics.add_collector(self.audit)
        self._server: MetricsServer | None = None
        self._announced_ready = False
        self._starting = False
        self._overruns_logged_at: float | None = None
        # Overruns are counted and logged below, at most once a minute, not once per batch;
        # a batch's missed runs are counted, and no job's is said in APScheduler's words.
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
        logging.getLogger("apscheduler.executors").setLevel(logging.ERROR)

    # What the scheduler's jobs run.
    def sweep(self, batch: Batch) -> None:
        if self._stop_requested.is_set():
            return
        self.fleet.sweep(batch)

    def wake(self, now: float) -> None:
        """Sweep the queues due at their deadlines by `now` (the wakes' thread)."""
        if self._stop_requested.is_set():
            return
        self.fleet.wake(now)

    def answer(self, outcome: Outcome) -> None:
        """Answer what the fleet found. A new run of a server, a new primary or slots that changed
        hands: every queue at once, on the primary that holds it now, so that its earlier
        leases go back now. A server loading its dataset: every queue again shortly, so that
        the sweep that brings back the previous run's leases comes as soon as it has loaded.
        A queue falling due: the wakes' thread wakes then, if that is sooner. Stopping, nothing:
        the scheduler's shutdown holds its job store's lock while it waits for the sweeps'
        threads, and a job changed from one of them would wait for that lock."""
        if self._stop_requested.is_set():
            return
        if outcome.restarted:
            self.schedule.sweep_now()
        elif outcome.loading:
            self.schedule.sweep_soon(LOADING_RETRY_S)
        if outcome.wake is not None:
            self._wakes.soon(outcome.wake)

    def share(self) -> None:
        """Send the membership's heartbeat; when the members changed, have the queues chosen
        anew on the chooser's thread, never in the heartbeat's way."""
        if self.sharing.refresh(self.clock()):
            self._chooser.soon()

    def choose(self) -> None:
        """Choose the queues this replica owns, and sweep the ones it gained at once."""
        had = bool(self.queues.sweeping())
        gained, lost = self.queues.apply()
        self.sharing.moved(len(gained), len(lost), len(self.queues.sweeping()))
        # Not once stopping: the takeover's jobs would wait for the job store's lock, which the
        # scheduler's shutdown holds while it waits for the sweeps (see answer()).
        if had and gained and not self._stop_requested.is_set():
            self.schedule.sweep_once(gained)

    def discover(self) -> None:
        """SCAN every primary and keep the queues found (see QueueSet.add_found)."""
        self.queues.add_found(self._discovery.scan())

    def overrun(self) -> None:
        """Log a batch skipped while still sweeping (the schedule counts it), once a minute."""
        now = self.clock()
        if self._overruns_logged_at is None or now - self._overruns_logged_at >= OVERRUN_LOG_S:
            self._overruns_logged_at = now
            log.warning(
                "sweep_overrun",
                hint="a batch was still sweeping when it fell due again: raise --interval, "
                "or see sweeperd_schedule_overruns_total",
            )

    def _every(
        self,
        func: Callable[[], object],
        seconds: float,
        job: str,
        first: datetime,
        *,
        executor: str = "default",
    ) -> None:
        """Run `func` every `seconds` from `first`, missed runs coalesced into one, and a late
        run run all the same: APScheduler's default drops a run started over a second late, and
        a heartbeat sent late keeps the member in where one never sent lets it lapse."""
        self.scheduler.add_job(
            func,
            "interval",
            seconds=seconds,
            id=job,
            coalesce=True,
            misfire_grace_time=None,
            executor=executor,
            next_run_time=first,
        )

    def add_jobs(self) -> None:
        """Add the scheduler's jobs: the heartbeat, the membership, the discovery scan, the
        eviction watch, the memory's release, the audit, one job per batch of queues, and the
        settling of the objects made (see settle) once every queue has been swept."""
        now = datetime.now(UTC)
        # At once too: a reload adds every job anew, and reloads in a row must not starve it.
        self._every(self.health.beat, HEARTBEAT_S, "heartbeat", now, executor="beat")
        if self.sharing.on:
            self._every(self.share, self.sharing.period_s, "members", now, executor="members")
        if self.settings.daemon.discover:
            self._every(self.discover, self.settings.daemon.discover, "discover", now)
        self._every(
            self.eviction.look, self.settings.interval, "eviction", now, executor="eviction"
        )
        self._every(release, RELEASE_S, "release", now + timedelta(seconds=RELEASE_S))
        every = self.settings.daemon.audit_every
        if every:
            # The first once the queues are owned: after a heartbeat, or the period if sooner.
            first = now + timedelta(seconds=min(every, AUDIT_FIRST_S))
            self._every(self.audit.run, every, "audit", first, executor="audit")
        self.queues.apply()
        longest = self.schedule.longest_interval() or self.settings.interval
        self.scheduler.add_job(
            settle,
            "date",
            run_date=datetime.now(UTC) + timedelta(seconds=SETTLE_INTERVALS * longest),
            id="settle",
            misfire_grace_time=None,  # run late rather than never (see _every)
        )

    # The lifetime.
    def start(self) -> None:
        """Start the fleet first (servers that are not the topology named refuse the start),
        then /metrics, the jobs, the scheduler and the wakes."""
        s, d = self.settings, self.settings.daemon
        self._starting = True
        try:
            self._start(s, d)
        finally:
            self._starting = False
        log.info("started", version=__version__, **s.describe())
        log_notes(s)

    def _start(self, s: Settings, d: DaemonSettings) -> None:
        self.fleet.start()
        health = self.health
        self._server = serve(
            d.metrics_host,
            d.metrics_port,
            self.metrics.registry,
            healthy=health.healthy,
            ready=health.ready,
            landing=lambda: "\n".join(
                [health.status_text(health.ready()), health.sources(), self.sharing.describe()]
            ),
            web=d.web_config,
            exposition=self.metrics.exposition,
            waiting=health.waiting,
        )
        self.add_jobs()
        self._chooser.start()
        self.scheduler.start()
        if s.daemon.sweep_at is SweepAt.DEADLINE:
            self._wakes.start()

    def interrupt_start(self, signum: int, _frame: FrameType | None) -> None:
        """Handle SIGTERM and SIGINT while starting: end the start where it is. Otherwise, and
        for SIGHUP, do nothing here: the main thread's loop reads the signal (see signals.py)."""
        if self._starting and signum in STOP_SIGNALS:
            self._starting = False
            raise StopRequested(signum)

    def request_stop(self, signum: int) -> None:
        """Stop changing jobs from now on (a sweep in flight writes nothing more, no takeover
        is scheduled); stop() does the rest."""
        log.info("stopping", signal=signal.Signals(signum).name)
        self._stop_requested.set()

    def apply_reload(self) -> None:
        """Answer SIGHUP: read the config file again, framed for systemd by RELOADING=1 and
        READY=1 once ready (before, a READY=1 would say the start is done)."""
        # At once: systemd 252 holds `systemctl reload` until the READY=1 only when this comes
        # before ExecReload='s kill has exited; later, the unit is still `reloading` till then.
        framed = self._announced_ready and self.notifier.reloading()
        try:
            self.reread()
        finally:
            if framed:
                self.notifier.ready()

    def reread(self) -> None:
        """Read the config file again: queues, budgets, jitter and logs change in place, every
        job is added anew (intervals may have changed), the restart-only settings keep the
        values they run with (the log names each one); a broken file, or a bug in reading it,
        changes nothing."""
        try:
            wanted = self.reload()
        except ConfigError as exc:
            log.error("reload_failed", error=str(exc))
            return
        except Exception:
            log.exception("reload_failed", error="the file could not be read (a bug: report it)")
            return
        waiting = restart_changes(self.settings, wanted)
        if waiting:
            log.warning("reload_needs_restart", settings=waiting)
        fresh = in_effect(self.settings, wanted)
        self.fleet.retune(tuning(fresh))
        self.settings = fresh
        self.queues.reconfigure(fresh)
        self.schedule.retune(fresh.daemon.jitter)
        self.scheduler.remove_all_jobs()
        self.schedule.reset()
        self.add_jobs()
        log.info("reloaded", **fresh.describe())
        log_notes(fresh)
        # Last: the lines above still show at the level they were asked at, whatever the new one.
        configure_logging(fresh.log_format, fresh.log_level)

    def serve_forever(self, signals: SignalInbox) -> None:
        """Run the main thread's loop until SIGTERM or SIGINT: signals, readiness and the
        watchdog, the first turn at once (STATUS= from the start, a signal that came during the
        start answered), then at each signal or every TURN_S."""
        watchdog = self.notifier.watchdog_interval_s
        last_watchdog = 0.0
        status = ""
        heard = signals.take()
        while True:
            stop = next((s for s in heard if s in STOP_SIGNALS), None)
            if stop is not None:
                self.request_stop(stop)
                return
            if signal.SIGHUP in heard:
                self.apply_reload()
            ready = self.health.ready()
            if ready and not self._announced_ready:
                self.notifier.ready()
                self._announced_ready = True
                log.info("ready", nodes=self.health.node_names())
            now_status = self.health.status_text(ready)
            if now_status != status:
                self.notifier.status(now_status)
                status = now_status
            now = self.clock()
            if watchdog and now - last_watchdog >= watchdog and self.health.healthy():
                self.notifier.watchdog()
                last_watchdog = now
            heard = signals.wait(TURN_S)

    @property
    def metrics_port(self) -> int | None:
        """The port /metrics is served on, once started."""
        return None if self._server is None else self._server.port

    def stop(self) -> None:
        """Stop scheduling, let the in-flight sweep finish its call, close the server."""
        # First: a sweep in flight changes no job from now on, no wake sweeps again, and the
        # others take this replica's queues while its last calls finish.
        self._stop_requested.set()
        self._wakes.stop()
        self._chooser.stop()
        self.notifier.stopping()
        self.sharing.leave()
        self.fleet.stop(STOP_TIMEOUT_S / 2)
        if self.scheduler.running:
            done = threading.Thread(target=self._finish)
            done.start()
            done.join(STOP_TIMEOUT_S)
            if done.is_alive():
                log.warning("stop_timeout", waited_s=STOP_TIMEOUT_S)
        if self._server is not None:
            self._server.close()
        log.info("stopped")

    def _finish(self) -> None:
        """Wait for the sweeps in flight: a wake's, then the scheduler's jobs'."""
        self._wakes.join(STOP_TIMEOUT_S)
        self._chooser.join(STOP_TIMEOUT_S)
        self.scheduler.shutdown(wait=True)


def tuning(s: Settings) -> Tuning:
    """Return what every primary's member is built with; SIGHUP changes the call target and the
    drain share in place (see Fleet.retune), a restart the rest."""
    return Tuning(
        s.prefix_root,
        s.executor,
        s.call_target_ms / 1000,
        s.drain_share,
        at_deadlines=s.daemon.sweep_at is SweepAt.DEADLINE,
        hear_changes=s.daemon.deadline_source is DeadlineSource.TRACKING,
    )


def run(settings: Settings, reload: Callable[[], Settings]) -> int:
    """Run until SIGTERM or SIGINT; SIGHUP re-reads the config file."""
    daemon = Daemon(
        settings,
        reload,
        metrics=Metrics(version=__version__, level=settings.daemon.queue_metrics),
    )
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    tune_collector()
    # Before start(): /healthz answers from there on, and a SIGHUP that came before its handler
    # would end the process (SIGHUP's default); one that comes during start() is read at once.
    with SignalInbox((*STOP_SIGNALS, signal.SIGHUP), daemon.interrupt_start) as signals:
        try:
            daemon.start()
        except StopRequested as stop:
            daemon.request_stop(stop.signum)
            daemon.stop()
            return 0
        try:
            daemon.serve_forever(signals)
        finally:
            daemon.stop()
    return 0
