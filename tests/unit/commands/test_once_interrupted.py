"""Ctrl-C during `once --drain`, a real process on a real server: no moved id left unsaid."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import cast

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from sweeperd.constants import EXIT_INTERRUPTED
from sweeperd.keyspace import QueueKeys
from tests.support.invoke import CLI_TIMEOUT_S, environment
from tests.support.servers import RedisServer

Q = QueueKeys("q")
SEED = """
for n = 1, tonumber(ARGV[1]) do
  redis.call('ZADD', KEYS[1], 1000000, 'j' .. n)
  redis.call('HSET', ARGV[2] .. 'j' .. n, 'attempts', 1)
end
"""  # KEYS[1] active; ARGV[1] how many expired leases, ARGV[2] the rows' key prefix
BUSY_PROBE_S = 0.2  # a PING unanswered this long: the server is running a call
BUSY_POLL_S = 0.01  # between probes while waiting for a call


def backlog(r: redis.Redis, leases: int) -> set[bytes]:
    """`leases` expired leases with rows, all due: their ids."""
    r.eval(SEED, 1, Q.active, leases, Q.prefix + "job:")
    return {f"j{n}".encode() for n in range(1, leases + 1)}


def once(server: RedisServer, *args: str) -> subprocess.Popen[str]:
    """`sweeperd once -q q --drain` with the Lua port (slow enough to catch a call in flight),
    at a budget given (the default's own line on stderr is test_once_default_budget's)."""
    argv = ["once", "-q", "q", "--redis-url", server.url, "--executor", "script", "--drain"]
    argv += ["--max-stalled", "1"]
    return subprocess.Popen(
        [sys.executable, "-m", "sweeperd", *argv, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )


def busy(server: RedisServer) -> bool:
    """The server is inside a call: a PING is not answered at once, or is answered BUSY (a
    script past the busy threshold, lua-time-limit)."""
    probe = redis.Redis(port=server.port, socket_timeout=BUSY_PROBE_S, retry=Retry(NoBackoff(), 0))
    try:
        probe.ping()
    except redis.TimeoutError:
        return True
    except redis.ResponseError as exc:  # redis-py has no class of its own for BUSY
        if str(exc).startswith("BUSY "):
            return True
        raise
    finally:
        probe.close()
    return False


def when_busy(server: RedisServer, proc: subprocess.Popen[str]) -> None:
    """Wait until a call of `proc` runs on the server: a PING waits. Only PINGs probe, as any
    other command sent while the call runs would wait it out and miss it (`idle_after` has
    waited out the last test's call, so the call is this process's)."""
    deadline = time.monotonic() + CLI_TIMEOUT_S
    try:
        while not busy(server):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no call ever ran"
            time.sleep(BUSY_POLL_S)
    except BaseException:
        proc.kill()  # a process left running would fail a later test, not this one
        proc.communicate()
        raise


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """The process's exit code and output; killed if it has not ended by the CLI timeout (a
    process left running would fail a later test on the shared server)."""
    try:
        out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


@pytest.fixture
def idle_after(redis_server: RedisServer) -> Iterator[None]:
    """After the test, the server is done with the last call (an abandoned one runs on)."""
    yield
    while busy(redis_server):
        time.sleep(0.05)


class TestFirstCtrlC:
    @pytest.mark.parametrize("output", ["json", "text"])
    def test_every_moved_id_is_in_the_output(
        self, r: redis.Redis, redis_server: RedisServer, idle_after: None, output: str
    ) -> None:
        """SIGINT while a call runs: that call is read and counted; the ids the output lists
        are exactly those gone from active, `left` is what is still there; exit 130."""
        ids = backlog(r, 300_000)
        proc = once(redis_server, "--limit", "60000", *(["--json"] if output == "json" else []))
        when_busy(redis_server, proc)
        proc.send_signal(signal.SIGINT)
        code, out, err = finished(proc)
        remaining = set(cast(list[bytes], r.zrange(Q.active, 0, -1)))
        moved = ids - remaining
        assert code == EXIT_INTERRUPTED, err
        assert moved and remaining, "interrupted mid-drain"
        if output == "json":
            body = json.loads(out)
            listed = [*body["recovered"], *body["dead"], *body["ghosts"]]
            assert sorted(listed) == sorted(i.decode() for i in moved)
            assert body["left"] == len(remaining)
            assert err.splitlines() == [f"sweeperd: interrupted after {body['calls']} calls"]
        else:
            counts = re.search(r"^recovered (\d+) .*dead (\d+)  ghosts (\d+)", out, re.M)
            assert counts is not None, out
            assert sum(map(int, counts.groups())) == len(moved)
            assert re.fullmatch(r"sweeperd: interrupted after \d+ calls\n", err)


class TestSecondCtrlC:
    def test_stops_at_once(
        self, r: redis.Redis, redis_server: RedisServer, idle_after: None
    ) -> None:
        """A second SIGINT during the call in flight ends the process without waiting for it."""
        backlog(r, 150_000)
        proc = once(redis_server, "--limit", "150000", "--json")  # one call of seconds
        when_busy(redis_server, proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        code, out, _ = finished(proc)
        assert (code, out) == (EXIT_INTERRUPTED, "")
        assert busy(redis_server), "the call was still running when the process ended"
