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
MEMBERS = "emq:sweeperd:{members}"
BEAT_S = 2.0  # the membership job's period in the test below: above the grace of 1 s
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

    def test_no_line_in_the_library_s_words(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """Stopped right after a heartbeat for 1.75 of the membership job's periods, `run`
        wakes 1.5 s after a missed run time, past APScheduler's grace of 1 s: it logs no line in
        the library's words ("Run time of job ... was missed by ..."), and beats again."""
        args = ["-q", "q", "--redis-url", redis_server.url, "--heartbeat", str(3 * BEAT_S)]
        with DaemonProcess(tmp_path, *args) as daemon:
            daemon.wait_swept("q")
            assert daemon.process is not None
            wait_until(lambda: r.zcard(MEMBERS), what="the first heartbeat")
            last = r.zrange(MEMBERS, 0, -1, withscores=True)
            wait_until(lambda: r.zrange(MEMBERS, 0, -1, withscores=True) != last, what="a beat")
            daemon.process.send_signal(signal.SIGSTOP)
            time.sleep(1.75 * BEAT_S)  # the stop itself: the beat due after one period missed
            daemon.process.send_signal(signal.SIGCONT)
            r.delete(MEMBERS)  # written again by the next heartbeat
            wait_until(lambda: r.exists(MEMBERS), what="a heartbeat after the stop")
            assert daemon.stop() == 0
        text = daemon.log_text()
        assert '"logger": "apscheduler' not in text
        assert "was missed by" not in text
