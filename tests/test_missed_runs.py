"""Runs the scheduler missed (SIGSTOP, a paused VM) are counted, and their lag is the first's."""

from __future__ import annotations

import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
from apscheduler.schedulers.background import BackgroundScheduler

from sweeperd.schedule import SWEEPS, Batch, Schedule
from sweeperd.settings import QueueSettings
from tests.daemon_process import DaemonProcess, wait_until
from tests.server import RedisServer

INTERVAL_S = 0.2
STOPPED_S = 2.0  # ten intervals: nine runs missed, the tenth runs


class TestSchedule:
    def test_a_late_batch_runs_once_and_counts_the_runs_it_missed(self) -> None:
        """A batch one second (ten intervals) late: swept once, nine runs missed, and the lag
        is measured from the first run it missed."""
        scheduler = BackgroundScheduler(timezone=UTC)
        swept: list[Batch] = []
        ran = threading.Event()

        def sweep(batch: Batch) -> None:
            swept.append(batch)
            ran.set()

        schedule = Schedule(scheduler, sweep, workers=1, jitter=0.0, on_overrun=lambda: None)
        schedule.sync([QueueSettings("q", 0.1, 1, 100)])
        [job] = scheduler.get_jobs()
        assert job.executor == SWEEPS
        job.modify(next_run_time=datetime.now(UTC) - timedelta(seconds=0.95))
        scheduler.start()
        try:
            assert ran.wait(5)
        finally:
            scheduler.shutdown(wait=True)
        assert len(swept) == 1
        assert schedule.missed._value.get() == 9
        assert 0.95 <= schedule.lag._sum.get() < 2  # one observation, the first missed run's


class TestStoppedDaemon:
    def test_sigstop_for_ten_intervals(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """`run` stopped (SIGSTOP) for ten intervals, then continued: about nine runs counted
        missed (0, exported, before), and the lag observed from the first of them."""
        args = ["-q", "q", "--redis-url", redis_server.url, "--interval", str(INTERVAL_S),
                "--jitter", "0", "--shard", "off"]  # fmt: skip
        with DaemonProcess(tmp_path, *args) as daemon:
            daemon.wait_swept("q")
            assert daemon.value("sweeperd_schedule_missed_runs_total") == 0
            lag_before = daemon.value("sweeperd_schedule_lag_seconds_sum") or 0.0
            assert daemon.process is not None
            daemon.process.send_signal(signal.SIGSTOP)
            time.sleep(STOPPED_S)
            daemon.process.send_signal(signal.SIGCONT)
            wait_until(
                lambda: daemon.value("sweeperd_schedule_missed_runs_total"), what="missed runs"
            )
            missed = daemon.value("sweeperd_schedule_missed_runs_total")
            assert missed is not None and 7 <= missed <= 11
            lag = daemon.value("sweeperd_schedule_lag_seconds_sum")
            assert lag is not None and lag - lag_before >= STOPPED_S - 2 * INTERVAL_S - 0.1
            assert daemon.stop() == 0
