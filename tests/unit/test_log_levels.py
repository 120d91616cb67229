"""`run --log-level debug` as a process: sweeperd's debug lines, and none of the libraries' below
warning (their levels in-process are in test_logs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess
from tests.support.servers import RedisServer

BACKLOG = 2000  # leases a drain takes call after call, each call's sweep logged at debug
THEIRS = ("apscheduler", "redis", "tzlocal")  # loggers of the libraries sweeperd runs on


class TestDaemonAtDebug:
    def test_a_drain_at_debug_is_not_drowned(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """`run --log-level debug` draining a backlog: its debug sweep lines are there, and no
        line of APScheduler, redis-py or tzlocal below warning (two per job run before)."""
        keys = QueueKeys("q")
        pipe = r.pipeline(transaction=False)
        for n in range(BACKLOG):
            pipe.zadd(keys.active, {f"j{n}": 1_000_000})
            pipe.hset(keys.job(f"j{n}"), "attempts", 1)
        pipe.execute()
        args = ["-q", "q", "--redis-url", redis_server.url, "--interval", "0.1", "--limit", "100"]
        with DaemonProcess(tmp_path, *args, "--log-level", "debug") as daemon:
            daemon.wait_value("sweeperd_dead_total", BACKLOG, queue="q")
            assert daemon.stop() == 0
        lines = [json.loads(line) for line in daemon.log_text().splitlines()]
        theirs = [e for e in lines if str(e.get("logger")).split(".")[0] in THEIRS]
        assert [e for e in theirs if e["level"] in ("debug", "info")] == []
        drained = [e for e in lines if e["event"] == "sweep" and e["level"] == "debug"]
        assert sum(e["dead"] for e in drained) >= BACKLOG - 100 * 2
