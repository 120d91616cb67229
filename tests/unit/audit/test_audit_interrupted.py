"""Ctrl-C during `sweeperd audit`, a real process on a real server: the reading stops, what was
found so far is read again and printed, marked interrupted, exit 130, and nothing is written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import redis

from sweeperd.constants import EXIT_INTERRUPTED
from sweeperd.keyspace import QueueKeys
from tests.support.helpers import dump_all
from tests.support.invoke import CLI_TIMEOUT_S, environment
from tests.support.servers import RedisServer
from tests.support.topologies import wait_for

Q = QueueKeys("q")
ROWS = 2_000
RATE = "400"  # keys a second: a SCAN of 500 keys each 1.25 s, the whole audit 5 s at least


def observed(r: redis.Redis) -> int:
    """The read-only observing calls the server has run so far."""
    stats = r.info("commandstats").get("cmdstat_evalsha_ro", {})
    return int(stats.get("calls", 0))


class TestCtrlC:
    """The first Ctrl-C ends the reading, not the audit."""

    def test_what_was_found_so_far(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """SIGINT once the first batch was observed: exit 130, --json marked interrupted,
        some of the stranded jobs found (and only those planted), not all; every key's DUMP
        equal after."""
        pipe = r.pipeline(transaction=False)
        for n in range(ROWS):
            pipe.hset(Q.job(f"s{n:04}"), mapping={"state": "active", "attempts": "1"})
        pipe.execute()
        before, calls = dump_all(r), observed(r)
        argv = ["audit", "--redis-url", redis_server.url, "--json", "--rate", RATE, "--grace", "0"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "sweeperd", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        try:
            wait_for(lambda: observed(r) > calls, "the audit's first batch observed", 30)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == EXIT_INTERRUPTED, err
        body = json.loads(out)
        [audited] = body["queues"]
        stranded = audited["findings"]["stranded"]
        assert body["interrupted"] is True
        assert 0 < stranded["count"] < ROWS, stranded["count"]
        assert body["totals"]["stranded"] == body["findings"] == stranded["count"]
        assert set(stranded["ids"]) <= {f"s{n:04}" for n in range(ROWS)}
        assert dump_all(r) == before
