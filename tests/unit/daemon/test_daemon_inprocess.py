"""The daemon in-process, its clock passed in: throttled overruns, reloads, discovery, readiness."""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
import redis
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from redis.backoff import NoBackoff
from redis.retry import Retry
from structlog.testing import capture_logs

from sweeperd.config.settings import ConfigError, QueueSettings, Settings, build_settings
from sweeperd.daemon.daemon import OVERRUN_LOG_S, SWITCH_INTERVAL_S, Daemon, run
from sweeperd.daemon.health import READY_INTERVALS
from sweeperd.daemon.queueset import DISCOVERED_TTL_S
from sweeperd.daemon.schedule import TAKEOVER, plan_batches
from sweeperd.daemon.settle import YOUNG_THRESHOLD
from sweeperd.fleet.node import Node
from sweeperd.fleet.routes import Routes
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason
from tests.support.clock import Clock
from tests.support.daemon_inprocess import in_process, settings_for, stopped
from tests.support.helpers import lease
from tests.support.servers import RedisServer, free_port


def make(settings: Settings, clock: Clock, reload: object = None) -> Daemon:
    def again() -> Settings:
        if isinstance(reload, Exception):
            raise reload
        return settings

    return in_process(settings, again, clock)


def value(daemon: Daemon, name: str, **labels: str) -> float | None:
    return daemon.metrics.registry.get_sample_value(name, labels)


@pytest.fixture
def clock() -> Clock:
    return Clock(100.0)


@pytest.fixture
def daemon(r: redis.Redis, redis_server: RedisServer, clock: Clock) -> Iterator[Daemon]:
    made = make(settings_for(redis_server.url, discover="30"), clock)
    made.fleet.refresh()  # the one primary, as start() finds it
    yield made
    stopped(made)


def sweep_owned(daemon: Daemon) -> None:
    """One tick of every queue the daemon owns, as its batches' jobs run them."""
    for batch in plan_batches(daemon.queues.owned()).values():
        daemon.sweep(batch)


def node_of(daemon: Daemon) -> Node:
    [node] = daemon.fleet.primaries()
    assert isinstance(node, Node)
    return node


class TestOverruns:
    def test_overruns_are_counted_each_and_logged_once_a_minute(
        self, daemon: Daemon, clock: Clock
    ) -> None:
        """Three overruns in a minute: three counted, one sweep_overrun line; a minute on,
        the next one is logged again. Another job skipped (the wakes' job) is no overrun."""
        batch = JobSubmissionEvent(EVENT_JOB_MAX_INSTANCES, "sweep:5s:0", "default", [])
        with capture_logs() as logs:
            for _ in range(3):
                daemon.schedule.overran(batch)  # what the scheduler's event calls
                clock.now += 1
            clock.now += OVERRUN_LOG_S
            daemon.schedule.overran(batch)
            daemon.schedule.overran(JobSubmissionEvent(EVENT_JOB_MAX_INSTANCES, "wake", "", []))
        assert value(daemon, "sweeperd_schedule_overruns_total") == 4
        assert [e["event"] for e in logs] == ["sweep_overrun", "sweep_overrun"]


class TestSharing:
    def test_the_heartbeat_hands_the_choice_over(
        self, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """share() sends the heartbeat and asks for a choice; it never makes the choice itself
        (at 100,000 queues that outlasted the heartbeat's time to live: the replicas flapped)."""
        asked: list[bool] = []
        monkeypatch.setattr(daemon.sharing, "refresh", lambda _now: True)
        monkeypatch.setattr(daemon._chooser, "soon", lambda: asked.append(True))

        def apply() -> None:
            raise AssertionError("the choice made on the heartbeat's thread")

        monkeypatch.setattr(daemon.queues, "apply", apply)
        daemon.share()
        assert asked == [True]


class TestStopping:
    def test_no_takeover_is_scheduled_once_stopping(
        self, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Queues gained while stopping schedule no takeover sweep: the scheduler's shutdown
        holds its job store's lock while it waits for the membership's thread, which would wait for
        that lock until the stop timed out (seen once in a takeover scenario under load)."""
        daemon.queues.apply()
        gained = [daemon.settings.for_queue("fixed")]
        monkeypatch.setattr(daemon.queues, "apply", lambda: (gained, set()))

        def takeovers() -> int:
            return sum(job.name == TAKEOVER for job in daemon.scheduler.get_jobs())

        daemon.choose()
        assert takeovers() == 1
        daemon.request_stop(signal.SIGTERM)
        daemon.choose()
        assert takeovers() == 1


class TestReload:
    def test_a_broken_file_on_reload_keeps_the_running_settings(
        self, redis_server: RedisServer, clock: Clock
    ) -> None:
        """A reload whose file is refused logs reload_failed and changes nothing."""
        settings = settings_for(redis_server.url)
        daemon = make(settings, clock, reload=ConfigError("interval in f must be positive"))
        with capture_logs() as logs:
            daemon.apply_reload()
        assert daemon.settings is settings
        assert logs == [
            {
                "event": "reload_failed",
                "log_level": "error",
                "error": "interval in f must be positive",
            }
        ]

    def test_a_reload_that_breaks_keeps_the_daemon_running(
        self, redis_server: RedisServer, clock: Clock
    ) -> None:
        """A reload that raises what no refusal is (a bug) is logged as reload_failed with its
        traceback; the daemon goes on with the running settings."""
        settings = settings_for(redis_server.url)
        daemon = make(settings, clock, reload=RuntimeError("no such attribute"))
        with capture_logs() as logs:
            daemon.apply_reload()
        assert daemon.settings is settings
        [failed] = logs
        assert (failed["event"], failed["log_level"], failed["exc_info"]) == (
            "reload_failed",
            "error",
            True,
        )


class TestDiscovery:
    def test_found_queues_are_scheduled_and_logged(self, r: redis.Redis, daemon: Daemon) -> None:
        """A scan finds the active sets: the new queues get series and the node answered; the
        queues known are the configured one and the one found."""
        lease(r, QueueKeys("found"), b"j", attempts="1")
        assert value(daemon, "sweeperd_known_queues") == 1
        with capture_logs() as logs:
            daemon.discover()
            daemon.discover()
        assert [(e["event"], e.get("added")) for e in logs] == [
            ("redis_up", None),
            ("queues_discovered", ["found"]),
        ]
        assert daemon.queues.sweeping() == {"fixed", "found"}
        assert value(daemon, "sweeperd_known_queues") == 2
        assert value(daemon, "sweeperd_recovered_total", queue="found") == 0
        assert node_of(daemon).up is True

    def test_an_unlisted_table_no_scan_finds_is_warned_of_once(
        self, r: redis.Redis, redis_server: RedisServer, clock: Clock, tmp_path: Path
    ) -> None:
        """With discovery on, a table for a queue the list does not name is kept; a scan that
        does not find its queue says so once (a typo?), one that finds it says nothing."""
        config = tmp_path / "sweeperd.toml"
        config.write_text('queues = ["fixed"]\n[queue.found]\nlimit = 7\n[queue.fixd]\n')
        settings = build_settings(
            {"redis_url": redis_server.url, "discover": "30", "shard": "off"},
            config,
            logs_to_tty=False,
        )
        daemon = make(settings, clock)
        daemon.fleet.refresh()
        lease(r, QueueKeys("found"), b"j", attempts="1")
        try:
            with capture_logs() as logs:
                daemon.discover()
                daemon.discover()
        finally:
            stopped(daemon)
        [said] = [e for e in logs if e["event"] == "queue_table_unmatched"]
        assert (said["queue"], said["log_level"]) == ("fixd", "warning")
        assert said["hint"].startswith("[queue.fixd] is for a queue the list does not name")

    def test_an_unreachable_server_keeps_the_last_list(
        self, r: redis.Redis, daemon: Daemon
    ) -> None:
        """A scan that cannot reach the server marks the node down once and keeps what was
        found before."""
        lease(r, QueueKeys("found"), b"j", attempts="1")
        daemon.discover()
        node_of(daemon).client = redis.Redis(
            port=1, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)
        )
        with capture_logs() as logs:
            daemon.discover()
            daemon.discover()
        assert [e["event"] for e in logs] == ["redis_down"]
        assert daemon.queues.sweeping() == {"fixed", "found"} and node_of(daemon).up is False

    def test_a_drained_queue_keeps_its_series_for_an_hour(
        self, r: redis.Redis, daemon: Daemon, clock: Clock
    ) -> None:
        """A found queue whose active set is gone (drained) stays swept with its counters;
        only once no scan has found it for an hour is it dropped, series and all."""
        lease(r, QueueKeys("found"), b"j", attempts="1")
        daemon.discover()
        daemon.metrics.numbers.record_failure("n", "found", Reason.TIMEOUT)
        r.delete(QueueKeys("found").active)  # drained: EchoMQ's last lease left
        clock.now += DISCOVERED_TTL_S
        daemon.discover()
        assert daemon.queues.sweeping() == {"fixed", "found"}
        assert value(daemon, "sweeperd_sweep_failures_total", queue="found", reason="timeout") == 1
        clock.now += 1.0
        with capture_logs() as logs:
            daemon.discover()
        assert [(e["event"], e.get("dropped")) for e in logs] == [("queues_discovered", ["found"])]
        assert daemon.queues.sweeping() == {"fixed"}
        assert value(daemon, "sweeperd_recovered_total", queue="found") is None


class TestEvidenceAtStart:
    """What a daemon exports before it has read its server: counters at 0, no gauge."""

    COUNTERS = ("sweeperd_recovered_total", "sweeperd_dead_total", "sweeperd_exempt_total")
    GAUGES = ("sweeperd_expired_leases", "sweeperd_oldest_expired_age_seconds")
    SPLIT = (  # per queue and node at full
        "sweeps_total",
        "ghosts_removed_total",
        "sweep_duration_seconds_count",
        "recovery_delay_seconds_count",
    )

    @pytest.mark.parametrize("level", ["auto", "basic", "full"])  # auto: basic here
    @pytest.mark.parametrize("shard", ["on", "off"])
    def test_a_server_down_at_start(self, clock: Clock, shard: str, level: str) -> None:
        """The server down from the start, sharing on (no heartbeat answered: it owns nothing
        yet) or off (it owns every queue, and every call fails): each configured queue's
        counters exist at 0 (at full, its sweeps on the URL's node too: that route is known
        before the server answers), its state's gauges are absent, never a 0 of a server
        never read."""
        url = f"redis://127.0.0.1:{free_port()}/0"
        settings = settings_for(
            url, queues=["a", "b"], shard=shard, socket_timeout="0.5", queue_metrics=level
        )
        daemon = make(settings, clock)
        try:
            daemon.fleet.refresh()
            daemon.add_jobs()
            daemon.share()
            daemon.choose()
            sweep_owned(daemon)
        finally:
            stopped(daemon)
        failures = 1 if shard == "off" else None  # one call each, refused by nobody: counted
        for queue in ("a", "b"):
            assert [value(daemon, name, queue=queue) for name in self.COUNTERS] == [0, 0, 0]
            assert [value(daemon, name, queue=queue) for name in self.GAUGES] == [None, None]
            reason = {"queue": queue, "reason": "connection"}
            assert value(daemon, "sweeperd_sweep_failures_total", **reason) == failures
            on = {"queue": queue, "node": settings.connection.node}
            split = [value(daemon, f"sweeperd_{name}", **on) for name in self.SPLIT]
            calls = failures or 0  # each a sweep, and its tick's round trip a duration
            assert split == ([calls, 0, calls, 0] if level == "full" else [None] * 4)
        assert value(daemon, "sweeperd_owned_queues") == (2 if shard == "off" else 0)

    def test_the_gauges_appear_with_the_first_read(
        self, r: redis.Redis, daemon: Daemon, clock: Clock
    ) -> None:
        """Once a call has read the queue, its gauges say what it read (0 is then a fact)."""
        daemon.queues.apply()
        assert value(daemon, "sweeperd_expired_leases", queue="fixed") is None
        sweep_owned(daemon)
        assert value(daemon, "sweeperd_expired_leases", queue="fixed") == 0
        assert value(daemon, "sweeperd_oldest_expired_age_seconds", queue="fixed") == 0


class TestNodeSeries:
    def test_restarts_exist_at_zero_from_the_start(self, daemon: Daemon) -> None:
        """A primary's restart counter is exported at 0 as soon as it is known, so an alert on
        its increase sees the first restart."""
        assert value(daemon, "sweeperd_server_restarts_total", node=node_of(daemon).name) == 0


class TestReadiness:
    def test_ready_within_three_intervals_of_an_answer(self, daemon: Daemon, clock: Clock) -> None:
        """Not ready before any answer; ready for three intervals after one; then not."""
        daemon.queues.apply()
        assert not daemon.health.ready()
        node_of(daemon).answered(clock.now)
        clock.now += READY_INTERVALS * 5
        assert daemon.health.ready()
        assert value(daemon, "sweeperd_ready") == 1
        clock.now += 0.1
        assert not daemon.health.ready()
        assert value(daemon, "sweeperd_ready") == 0

    def test_the_queues_are_routed_once_per_plan_and_layout(
        self, daemon: Daemon, clock: Clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Readiness is asked twice a second (and at each scrape): the owners of the queue set
        are found again only when the plan or the layout changed (routing 10,000 queues each
        time was half the daemon's CPU at idle)."""
        routed: list[int] = []
        owners = Routes.owners

        def counted(routes: Routes, queues: Collection[str]) -> set[str | None]:
            routed.append(len(queues))
            return owners(routes, queues)

        monkeypatch.setattr(Routes, "owners", counted)
        daemon.queues.apply()
        node_of(daemon).answered(clock.now)
        assert [daemon.health.ready() for _ in range(3)] == [True] * 3
        assert routed == [1]
        daemon.schedule.sync([*daemon.queues.owned(), QueueSettings("more", 5.0, 3, 1000)])
        assert daemon.health.ready() and daemon.health.ready()
        assert routed == [1, 2]
        daemon.fleet.refresh()  # the layout read again: its routes are new
        assert daemon.health.ready()
        assert routed == [1, 2, 2]


class TestSignals:
    def test_the_handlers_are_in_place_before_the_daemon_serves(
        self, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """run() takes SIGHUP and SIGTERM before start(): from there /healthz answers, and a
        SIGHUP sent then, before its handler, would end the process (SIGHUP's default)."""
        held: dict[int, object] = {}
        wakeup: list[int] = []
        young: list[int] = []

        def start(_daemon: Daemon) -> None:
            held.update({s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM)})
            wakeup.append(signal.set_wakeup_fd(-1))  # read, then put back
            signal.set_wakeup_fd(wakeup[0])
            held[0] = sys.getswitchinterval()  # a wake waits for the GIL 1 ms, not 5
            young.append(gc.get_threshold()[0])
            raise RuntimeError("stopped at start")

        before = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
        switch, threshold = sys.getswitchinterval(), gc.get_threshold()
        monkeypatch.setattr(Daemon, "start", start)
        settings = settings_for(redis_server.url)
        try:
            with pytest.raises(RuntimeError, match="stopped at start"):
                run(settings, lambda: settings)
            after = {s: signal.getsignal(s) for s in before}
        finally:
            for number, handler in before.items():
                signal.signal(number, handler)
            sys.setswitchinterval(switch)
            gc.set_threshold(*threshold)
        assert getattr(held[signal.SIGHUP], "__func__", None) is Daemon.interrupt_start
        assert getattr(held[signal.SIGTERM], "__func__", None) is Daemon.interrupt_start
        assert wakeup[0] != -1  # the signals' wakeup socket: the main loop waits on it
        assert signal.set_wakeup_fd(-1) == -1  # both given back when run() ends
        assert after == before
        assert held[0] == pytest.approx(SWITCH_INTERVAL_S)
        assert young == [YOUNG_THRESHOLD]
