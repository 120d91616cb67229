"""`sweeperd run`: the long-running sweeper, from start to a clean stop."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import FrameType

import redis
import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from sweeperd import __version__
from sweeperd.discovery import discover_queues
from sweeperd.fleet import Fleet, Tuning
from sweeperd.http import MetricsServer, serve
from sweeperd.logs import configure_logging
from sweeperd.metrics import Metrics
from sweeperd.node import Node
from sweeperd.notify import Notifier
from sweeperd.schedule import SWEEPS, Batch, Schedule, plan_batches
from sweeperd.settings import ConfigError, QueueSettings, Settings
from sweeperd.sharing import Sharing

log = structlog.get_logger("sweeperd.daemon")

WORKERS = 4  # batches swept at once
HEARTBEAT_S = 1.0  # the scheduler proves it is alive this often
READY_INTERVALS = 3  # ready while every node answered within this many intervals
STOP_TIMEOUT_S = 8.0  # the in-flight sweep finishes within this, or is left behind
WAKE_S = 0.5  # the main thread's loop: signals, readiness, watchdog
OVERRUN_LOG_S = 60.0  # at most one sweep_overrun log line this often
LOADING_RETRY_S = 0.5  # a server loading its dataset is tried again this soon
DISCOVERED_TTL_S = 3600.0  # a discovered queue no scan finds any more is kept this long
# What a SIGHUP cannot change in place: the servers and their clients, what the HTTP side
# serves, the membership (its key lives under the root, as the slots of the queues it maps).
# restart_only() names each of them as the options do, for reload_needs_restart.
RESTART_SETTINGS = ("connection", "prefix_root", "executor", "metrics_host", "metrics_port",
                    "shard", "heartbeat", "instance_id", "web_config", "queue_metrics")  # fmt: skip


@dataclass
class Daemon:
    """The scheduler, the primaries, the metrics server and the signals, wired together."""

    settings: Settings
    reload: Callable[[], Settings]
    notifier: Notifier = field(default_factory=Notifier.from_environ)
    metrics: Metrics = field(default_factory=lambda: Metrics(version=__version__))
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        s = self.settings
        self.fleet = Fleet(
            s.connection, self.metrics, tuning(s), on_restart=self.restarted,
            on_moved=self.restarted_all, on_retry=self.retry_soon, clock=self.clock,
        )  # fmt: skip
        # The heartbeat has a thread of its own: sweeps stuck on a hung server must not make
        # a live scheduler look dead to the liveness probe.
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={"default": ThreadPoolExecutor(1), "beat": ThreadPoolExecutor(1),
                       "members": ThreadPoolExecutor(1)},  # default: discovery; batches: SWEEPS
        )  # fmt: skip
        self.schedule = Schedule(
            self.scheduler, self.sweep, workers=WORKERS, jitter=s.jitter, on_overrun=self.overrun
        )
        self.stop_requested = threading.Event()
        self.reload_requested = threading.Event()
        self.heartbeat = self.clock()
        self.discovered: dict[str, float] = {}  # queue -> when a scan last found it (monotonic)
        self.found_on: dict[str, set[str]] = {}  # primary -> the queues its last scan found
        self.swept: set[str] = set()  # the queues this replica sweeps now
        self.exported: set[str] = set()  # the queues with series: swept once, still known
        self.sharing = Sharing.of(s, self.fleet.home)
        for series in self.schedule.series:
            self.metrics.add_collector(series)
        state = self.metrics.state
        state.nodes, state.ready = self.fleet.states, self.ready
        state.members, state.ownership_changes = self.sharing.seen, lambda: self.sharing.changes
        state.owned = lambda: len(self.swept)
        self.queues_lock = threading.Lock()  # discovery, membership and SIGHUP apply queues
        self.server: MetricsServer | None = None
        self.announced_ready = False
        self.overruns_logged_at: float | None = None
        # Overruns are counted and logged below, at most once a minute, not once per batch.
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)

    # The sweep of one batch, run by the scheduler's pool.
    def sweep(self, batch: Batch) -> None:
        if self.stop_requested.is_set():
            return
        self.fleet.sweep(batch)

    def restarted(self, _node: Node) -> None:
        """A new run of a server, or a new primary: every queue at once, so its earlier leases
        go back now."""
        self.schedule.sweep_now()

    def restarted_all(self) -> None:
        """Slots changed hands: every queue at once, on the primary that holds it now."""
        self.schedule.sweep_now()

    def retry_soon(self) -> None:
        """A server is loading its dataset: every queue again shortly, so that the sweep that
        brings back the previous run's leases comes as soon as it has loaded."""
        self.schedule.sweep_soon(LOADING_RETRY_S)

    def known(self) -> list[QueueSettings]:
        """Every queue this replica knows: the configured, then those a scan found within the
        last DISCOVERED_TTL_S."""
        named = {q.name for q in self.settings.queues}
        found = sorted(self.discovered.keys() - named)
        return [*self.settings.queues, *(self.settings.for_queue(n) for n in found)]

    def queues(self) -> list[QueueSettings]:
        """The known queues this replica owns now: the ones it sweeps."""
        return self.sharing.owned(self.known())

    def apply_queues(self) -> tuple[set[str], set[str]]:
        """Schedule the queues owned now. A queue owned no more keeps its counters and its last
        success (what this replica did stays summable across replicas and outages), and loses
        the gauges only its owner can keep true; a queue no longer known loses every series.
        Returns the names gained and lost."""
        with self.queues_lock:
            known = {q.name for q in self.known()}
            wanted = self.sharing.owned(self.known())
            names = {q.name for q in wanted}
            gained, lost = names - self.swept, self.swept - names
            numbers = self.metrics.numbers
            for name in gained:
                numbers.add_queue(name)
            for name in lost:
                numbers.disown_queue(name)
                self.fleet.forget(name)
            self.exported = (self.exported | names) & known
            numbers.keep_queues(self.exported)
            self.swept = names
            self.schedule.sync(wanted)
        return gained, lost

    def share(self) -> None:
        """The membership job: a heartbeat; when the members changed, the queues chosen anew."""
        if not self.sharing.refresh(self.clock()):
            return
        had = bool(self.swept)
        gained, lost = self.apply_queues()
        self.sharing.moved(len(gained), len(lost), len(self.swept))
        if had and (gained or lost):
            # Sync keeps batch timers but not batch contents: a queue may have landed on a later
            # timer. One sweep of every owned queue now bounds each one's wait by its interval.
            for batch in plan_batches(self.queues()).values():
                self.scheduler.add_job(self.sweep, args=[batch], name="takeover", executor=SWEEPS)

    def discover(self) -> None:
        """SCAN every primary; a primary whose scan failed keeps its last list. A queue is
        swept (and keeps its series) until no scan has found it for DISCOVERED_TTL_S: a drained
        queue's active set is gone until its next lease, and its counters must not go with it."""
        nodes = self.fleet.nodes()
        for node in nodes:
            self.discover_on(node)
        names = {node.name for node in nodes}
        self.found_on = {name: found for name, found in self.found_on.items() if name in names}
        found = set().union(*self.found_on.values()) if self.found_on else set()
        now = self.clock()
        added = found - self.discovered.keys()
        self.discovered.update(dict.fromkeys(found, now))
        dropped = {q for q, seen in self.discovered.items() if now - seen > DISCOVERED_TTL_S}
        for queue in dropped:
            del self.discovered[queue]
        if added or dropped:
            log.info("queues_discovered", added=sorted(added), dropped=sorted(dropped))
            self.apply_queues()

    def discover_on(self, node: Node) -> None:
        try:
            self.found_on[node.name] = discover_queues(node.client, self.settings.prefix_root)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            node.failed(self.clock(), exc)  # logged once per change, as the sweeps do
            self.fleet.doubt()
            return
        except redis.RedisError as exc:  # a failed scan keeps the last list
            log.warning("discovery_failed", node=node.name, error=str(exc))
            return
        with node.lock:
            node.answered(self.clock())

    def overrun(self) -> None:
        """A batch skipped, still sweeping (counted by the schedule): logged once a minute."""
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
        """Every primary that owns a swept queue (every primary, while none is swept) answered
        within the last three intervals, and the servers are the topology the options name."""
        interval = self.schedule.shortest_interval() or max(
            self.settings.interval, self.settings.discover
        )
        now, nodes = self.clock(), self.fleet.holding(self.schedule.queue_names())
        return bool(nodes) and all(
            n.answered_within(now, READY_INTERVALS * interval) for n in nodes or ()
        )

    def add_jobs(self) -> None:
        """The heartbeat, the membership, the discovery scan and one job per batch of queues."""
        self.scheduler.add_job(
            self.beat, "interval", seconds=HEARTBEAT_S, id="heartbeat", coalesce=True,
            executor="beat",
        )  # fmt: skip
        if self.sharing.on:
            self.scheduler.add_job(
                self.share, "interval", seconds=self.sharing.period_s, id="members",
                coalesce=True, executor="members", next_run_time=datetime.now(UTC),
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
        """The fleet first (servers that are not the topology named refuse the start), then
        /metrics, the jobs and the scheduler."""
        s = self.settings
        self.fleet.start()
        self.server = serve(
            s.metrics_host,
            s.metrics_port,
            self.metrics.registry,
            healthy=self.healthy,
            ready=self.ready,
            landing=lambda: f"{self.status_text(self.ready())}\n{self.sharing.describe()}",
            web=s.web_config,
            exposition=self.metrics.exposition,
        )
        self.add_jobs()
        self.scheduler.start()
        log.info("started", version=__version__, **s.describe())
        said(s)

    def request_stop(self, signum: int, _frame: FrameType | None) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        self.stop_requested.set()

    def request_reload(self, _signum: int, _frame: FrameType | None) -> None:
        self.reload_requested.set()

    def apply_reload(self) -> None:
        """SIGHUP: the config file again; queues, budgets, jitter and logs change in place, the
        restart-only settings keep the values they run with (the log names each one)."""
        self.reload_requested.clear()
        try:
            wanted = self.reload()
        except ConfigError as exc:
            log.error("reload_failed", error=str(exc))
            return
        waiting = restart_changes(self.settings, wanted)
        if waiting:
            log.warning("reload_needs_restart", settings=waiting)
        fresh = replace(wanted, **{name: getattr(self.settings, name) for name in RESTART_SETTINGS})
        self.fleet.retune(tuning(fresh))
        self.settings = fresh
        self.schedule.jitter = fresh.jitter
        self.scheduler.remove_all_jobs()  # every job anew: intervals may have changed
        self.schedule.reset()
        self.add_jobs()
        log.info("reloaded", **fresh.describe())
        said(fresh)
        # Last: the lines above still show at the level they were asked at, whatever the new one.
        configure_logging(fresh.log_format, fresh.log_level)

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
                log.info("ready", nodes=self.node_names())
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
            return f"sweeping {len(self.schedule.queue_names())} queues on {self.node_names()}"
        return f"waiting for {self.node_names()} to answer"

    def node_names(self) -> str:
        """The primaries swept now, or where they are asked for while none is known."""
        names = [n.name for n in self.fleet.nodes()]
        if names:
            return ", ".join(names)
        return self.settings.connection.node

    def stop(self) -> None:
        """Stop scheduling, let the in-flight sweep finish its call, close the server."""
        self.notifier.stopping()
        self.sharing.leave()  # first: the others take its queues while its last calls finish
        self.fleet.stop(STOP_TIMEOUT_S / 2)
        done = threading.Thread(target=self.scheduler.shutdown, kwargs={"wait": True})
        done.start()
        done.join(STOP_TIMEOUT_S)
        if done.is_alive():
            log.warning("stop_timeout", waited_s=STOP_TIMEOUT_S)
        if self.server is not None:
            self.server.close()
        log.info("stopped")


def restart_only(s: Settings) -> dict[str, tuple[object, object]]:
    """The restart-only settings as the options name them: each one's value, and how the log
    shows it (no credential, no password, a web config by its path)."""
    c, t, web, bound = s.connection, s.connection.topology, s.web_config, s.metrics_host

    def same(value: object) -> tuple[object, object]:
        return value, value

    def secret(value: str | None) -> tuple[object, object]:
        return value, None if value is None else "<set>"

    return {
        "redis_url": (c.url, c.shown_url),
        "redis_password": secret(c.password),
        "socket_timeout": same(c.socket_timeout),
        **{key: same(path) for key, path in c.tls.by_key().items()},
        "cluster": same(t.cluster),
        "sentinels": (t.sentinels, [f"{host}:{port}" for host, port in t.sentinels]),
        "sentinel_master": same(t.sentinel_master),
        "sentinel_password": secret(t.sentinel_password),
        "prefix_root": same(s.prefix_root),
        "executor": same(str(s.executor)),
        "metrics_addr": same(f"{f'[{bound}]' if ':' in bound else bound}:{s.metrics_port}"),
        "web_config_file": (web, str(web.path) if web else None),
        "shard": same(str(s.shard)),
        "heartbeat": same(s.heartbeat),
        "instance_id": same(s.instance_id),
        "queue_metrics": same(str(s.queue_metrics)),
    }


def restart_changes(running: Settings, wanted: Settings) -> dict[str, dict[str, object]]:
    """The restart-only settings the file changes: each with the value that runs and the one
    wanted, marked changed where both show alike (a password, a web config's content)."""
    before, after = restart_only(running), restart_only(wanted)
    changes: dict[str, dict[str, object]] = {}
    for key, (value, shown) in after.items():
        old, old_shown = before[key]
        if value != old:
            changes[key] = {
                "running": old_shown,
                "wanted": shown if shown != old_shown else f"{shown} (changed)",
            }
    return changes


def said(s: Settings) -> None:
    """The config file's notes, once per read: it works as written, but should be rewritten."""
    for note in s.notes:
        log.warning("config_deprecated", note=note)


def tuning(s: Settings) -> Tuning:
    """What every primary's node and drainer are built with (SIGHUP changes the last two)."""
    return Tuning(s.prefix_root, s.executor, s.call_target_ms / 1000, s.drain_share)


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
