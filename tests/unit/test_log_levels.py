"""Log levels: other libraries' records keep theirs, and --log-level debug is sweeperd's debug."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import structlog

from sweeperd.keyspace import QueueKeys
from sweeperd.logs import configure_logging
from tests.support.daemon_process import DaemonProcess
from tests.support.servers import RedisServer

BACKLOG = 2000  # leases a drain takes call after call, each call's sweep logged at debug
THEIRS = ("apscheduler", "redis", "tzlocal")  # loggers of the libraries sweeperd runs on


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Each test leaves the logging setup as it found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in THEIRS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in levels.items():
        logging.getLogger(name).setLevel(was)
    structlog.reset_defaults()


class TestTheirLevels:
    @pytest.mark.parametrize("fmt", ["json", "console"])
    def test_a_record_keeps_its_level(self, fmt: str) -> None:
        """A warning of apscheduler and an error of redis are rendered as warning and error
        (its job stores': the daemon keeps its scheduler's and executors' to errors)."""
        out = io.StringIO()
        configure_logging(fmt, "info", stream=out)
        logging.getLogger("apscheduler.jobstores.default").warning("job missed")
        logging.getLogger("redis.connection").error("connection reset")
        lines = out.getvalue().splitlines()
        if fmt == "json":
            assert [(e["logger"], e["level"]) for e in map(json.loads, lines)] == [
                ("apscheduler.jobstores.default", "warning"),
                ("redis.connection", "error"),
            ]
        else:
            assert "[warning  ] job missed" in lines[0] and "[error    ] connection" in lines[1]

    def test_debug_is_sweeperds_own(self) -> None:
        """At debug, sweeperd's debug lines show; the libraries still log warnings and up."""
        out = io.StringIO()
        configure_logging("json", "debug", stream=out)
        structlog.get_logger("sweeperd.ledger").debug("sweep", queue="q")
        for name in THEIRS:
            logging.getLogger(f"{name}.x").info("chatter")
            logging.getLogger(f"{name}.x").warning("heard")
        seen = [(e["event"], e["level"]) for e in map(json.loads, out.getvalue().splitlines())]
        assert seen == [("sweep", "debug"), *[("heard", "warning")] * len(THEIRS)]


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
