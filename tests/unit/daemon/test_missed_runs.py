"""`run` stopped (SIGSTOP) and continued: the runs it missed are counted, their lag the first's
(the schedule's own counting, with its clock passed in, is in test_schedule.py)."""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import redis

from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.servers import RedisServer

INTERVAL_S = 0.2
STOPPED_S = 2.0  # about ten intervals: about nine runs missed, the tenth runs


class TestStoppedDaemon:
    def test_sigstop_for_ten_intervals(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """`run` stopped (SIGSTOP) for ten intervals, then continued: the runs due while it was
        stopped (measured) counted missed (0, exported, before), and the lag observed from the
        first of them."""
        args = [
            "-q",
            "q",
            "--redis-url",
            redis_server.url,
            "--interval",
            str(INTERVAL_S),
            "--jitter",
            "0",
            "--shard",
            "off",
        ]
        with DaemonProcess(tmp_path, *args) as daemon:
            daemon.wait_swept("q")
            assert daemon.value("sweeperd_schedule_missed_runs_total") == 0
            lag_before = daemon.value("sweeperd_schedule_lag_seconds_sum") or 0.0
            assert daemon.process is not None
            stopping = time.monotonic()
            daemon.process.send_signal(signal.SIGSTOP)
            time.sleep(STOPPED_S)
            daemon.process.send_signal(signal.SIGCONT)
            stopped_s = time.monotonic() - stopping  # the stop, measured around the signals
            missed = wait_until(
                lambda: daemon.value("sweeperd_schedule_missed_runs_total"), what="missed runs"
            )
            seen_s = time.monotonic() - stopping  # the scheduler woke and counted before this
            # Listed at the wake: every run time due while stopped (less an interval's slack for
            # the signals' delivery), at most those due from an interval before the stop until
            # the count was seen; all but the one run are missed.
            fewest = math.floor(stopped_s / INTERVAL_S) - 2
            most = math.floor(seen_s / INTERVAL_S) + 1
            assert isinstance(missed, float), missed
            assert fewest <= missed <= most, (missed, stopped_s, seen_s)
            lag = daemon.value("sweeperd_schedule_lag_seconds_sum")
            assert lag is not None and lag - lag_before >= stopped_s - 2 * INTERVAL_S
            assert daemon.stop() == 0
