"""The bad days, on real processes: the daemon killed, the server hung, restarted, full, a reply
lost on the wire, keys changing under the daemon. Nothing is lost and nothing counted twice."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from sweeperd.verb.executors import NATIVE
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import PAST_MS, dump_all, hash_of, lease, run_id
from tests.support.invoke import sweeperd
from tests.support.lossy_proxy import LosingProxy
from tests.support.servers import RedisServer

BACKLOG = 100_000
MAX_STALLED = 3  # every third row starts at stalled 2 and dies; the others come back pending
SEED = """
-- KEYS[1] active; ARGV: prefix, how many, deadline (ms), lease_epoch ('' for none)
local row = ARGV[1] .. 'job:'
for i = 1, tonumber(ARGV[2]) do
  local id = 'j' .. i
  redis.call('ZADD', KEYS[1], ARGV[3], id)
  redis.call('HSET', row .. id, 'state', 'active', 'attempts', '1')
  if ARGV[4] ~= '' then redis.call('HSET', row .. id, 'lease_epoch', ARGV[4]) end
  if i % 3 == 0 then redis.call('HSET', row .. id, 'stalled', '2') end
end
"""
CENSUS = """
-- KEYS: active, pending, dead; ARGV: prefix, how many. Each row as "sets:state:stalled",
-- sets being the sets it is in (a, p, d; '' for none).
local row, out = ARGV[1] .. 'job:', {}
for i = 1, tonumber(ARGV[2]) do
  local id, sets = 'j' .. i, ''
  if redis.call('ZSCORE', KEYS[1], id) then sets = sets .. 'a' end
  if redis.call('ZSCORE', KEYS[2], id) then sets = sets .. 'p' end
  if redis.call('ZSCORE', KEYS[3], id) then sets = sets .. 'd' end
  local f = redis.call('HMGET', row .. id, 'state', 'stalled')
  out[i] = sets .. ':' .. (f[1] or '') .. ':' .. (f[2] or '')
end
return out
"""


def seed(client: redis.Redis, keys: QueueKeys, n: int, epoch: bytes = b"") -> None:
    """n expired leases j1..jn with rows; every third at stalled 2 (it dies at max 3)."""
    client.eval(SEED, 1, keys.active, keys.prefix, n, PAST_MS, epoch)


def census(client: redis.Redis, keys: QueueKeys, n: int) -> list[str]:
    raw = client.eval(CENSUS, 3, keys.active, keys.pending, keys.dead, keys.prefix, n)
    return [entry.decode() for entry in raw]


def check_rows(rows: list[str], *, exempt_allowed: bool = False) -> Counter[str]:
    """Every row in exactly one set, its state that set's, its stall counted at most once:
    stalled is the seed's value (active, or exempt) or one more (counted). The tally by set."""
    tally: Counter[str] = Counter()
    for i, entry in enumerate(rows, start=1):
        sets, state, stalled = entry.split(":")
        seeded = "2" if i % 3 == 0 else ""
        counted = "3" if i % 3 == 0 else "1"
        assert len(sets) == 1, f"j{i} is in {sets!r}"
        expected_state = {"a": "active", "p": "pending", "d": "dead"}[sets]
        assert state == expected_state, f"j{i}: {entry}"
        if sets == "a":
            assert stalled == seeded, f"j{i}: {entry}"
        elif exempt_allowed:
            assert stalled in (seeded, counted), f"j{i}: {entry}"
        else:
            assert stalled == counted, f"j{i}: {entry}"
        tally[sets] += 1
    return tally


def daemon(workdir: Path, url: str, *args: str) -> DaemonProcess:
    """One replica on its own: no heartbeat key in the keyspace or the wire the faults watch
    (replicas sharing queues have their own faults in test_replicas.py)."""
    return DaemonProcess(
        workdir, "--redis-url", url, "--max-stalled", str(MAX_STALLED), "--shard", "off", *args
    )


def failures(d: DaemonProcess, queue: str, reason: str) -> float:
    return d.value("sweeperd_sweep_failures_total", queue=queue, reason=reason) or 0.0


def commandstat_calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    entry = stats.get(f"cmdstat_{command}", {})
    return int(entry.get("calls", 0)) if isinstance(entry, dict) else 0


@pytest.fixture
def server(server_kind: str, tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, with the module: the test may stop, hang or fill it."""
    with RedisServer(tmp_path / "redis", kind=server_kind) as started:
        yield started


@pytest.fixture
def aof_server(server_kind: str, tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis-aof", kind=server_kind, appendonly=True) as started:
        yield started


class TestKilledMidDrain:
    def test_kill_9_mid_drain_then_a_fresh_start_finishes_it(
        self, server: RedisServer, workdir: Path
    ) -> None:
        """kill -9 while a 100,000-lease backlog drains; a fresh daemon drains the rest, and
        every row is in exactly one set with its stall counted exactly once."""
        keys = QueueKeys("big")
        with server.client() as client:
            seed(client, keys, BACKLOG)
            first = daemon(
                workdir, server.url, "--queue", "big", "--interval", "1", "--drain-share", "0.05"
            ).start()
            try:
                wait_until(lambda: client.zcard(keys.active) < BACKLOG * 0.8, 60, "mid-drain")
                first.stop(signal.SIGKILL)
            finally:
                first.__exit__(None, None, None)
            left = client.zcard(keys.active)
            assert 0 < left < BACKLOG, left
            assert first.events("drain_started"), first.log_text()[-2000:]
            with daemon(workdir, server.url, "--queue", "big", "--interval", "1") as second:
                wait_until(lambda: client.zcard(keys.active) == 0, 60, "the drain's end")
                second.wait_value("sweeperd_expired_leases", 0, queue="big")
                taken = sum(
                    second.value(name, queue="big") or 0
                    for name in ("sweeperd_recovered_total", "sweeperd_dead_total")
                )
                assert taken == left
            tally = check_rows(census(client, keys, BACKLOG))
        assert tally == {"p": BACKLOG - BACKLOG // 3, "d": BACKLOG // 3}


class TestServerHung:
    def test_sigstop_past_the_socket_timeout_then_sigcont(
        self, server: RedisServer, workdir: Path
    ) -> None:
        """A hung server fails its queues with reason timeout, logged once per change;
        /readyz goes 503 and back to 200; sweeping resumes; no row's stall counted twice."""
        keys = QueueKeys("q")
        assert server.process is not None
        with (
            server.client() as client,
            daemon(
                workdir, server.url, "--queue", "q", "--interval", "0.5", "--socket-timeout", "0.5"
            ) as d,
        ):
            wait_until(lambda: d.get("/readyz")[0] == 200, what="ready")
            seed(client, keys, 30)
            d.wait_value("sweeperd_recovered_total", 20, queue="q")
            now_ms = int(time.time() * 1000)
            for i in range(31, 41):  # due while the server is stopped
                lease(client, keys, f"j{i}".encode(), now_ms + 800, state="active")
            server.process.send_signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            try:
                wait_until(lambda: failures(d, "q", "timeout") >= 1, what="a timeout")
                wait_until(lambda: d.get("/readyz")[0] == 503, what="/readyz 503")
                unready_at = time.monotonic()
                time.sleep(max(0.0, 3.0 - (time.monotonic() - stopped_at)))
            finally:
                server.process.send_signal(signal.SIGCONT)
            continued_at = time.monotonic()
            wait_until(lambda: d.get("/readyz")[0] == 200, what="/readyz 200 again")
            ready_at = time.monotonic()
            wait_until(lambda: client.zcard(keys.active) == 0, what="the rest swept")
            d.wait_value("sweeperd_expired_leases", 0, queue="q")
            timeouts = [e for e in d.events("sweep_failed") if e.get("reason") == "timeout"]
            assert len(timeouts) == 1, timeouts
            assert len(d.events("redis_down")) == 1
            assert d.events("sweep_recovered")
            recovered = d.value("sweeperd_recovered_total", queue="q") or 0
            print(
                f"\nSIGSTOP: 503 after {unready_at - stopped_at:.1f}s stopped, 200 again "
                f"{ready_at - continued_at:.1f}s after SIGCONT "
                f"(503 for {ready_at - unready_at:.1f}s);"
                f" timeouts counted {failures(d, 'q', 'timeout'):g}, recovered counted "
                f"{recovered:g} of the 30 that recover (20 seeded, 10 due while stopped)"
            )
            assert recovered <= 30  # a call that ran after its timeout is not counted
            for i in range(31, 41):
                row = hash_of(client, keys.job(f"j{i}".encode()))
                assert row[b"state"] == b"pending" and row[b"stalled"] == b"1", (i, row)
        assert sorted(check_rows(census(client, keys, 30)).elements()) == ["d"] * 10 + ["p"] * 20


class TestReplyLost:
    def test_once_does_not_resend_a_call_whose_reply_was_lost(
        self, server: RedisServer, workdir: Path
    ) -> None:
        """once through a proxy that drops the sweep's reply: exit 3, reason reply_lost, the
        call ran exactly once on the server and its leases moved once."""
        keys = QueueKeys("q")
        with server.client() as client, LosingProxy(server.port) as proxy:
            seed(client, keys, 6)
            NATIVE.prepare(client)  # the first EVALSHA is the sweep, not a NOSCRIPT
            proxy.armed.set()
            before = commandstat_calls(client, "evalsha")
            ran = sweeperd(
                "once",
                "--queue",
                "q",
                "--json",
                "--redis-url",
                proxy.url,
                "--max-stalled",
                str(MAX_STALLED),
            )
            assert proxy.lost.is_set()
            assert ran.code == 3, ran.err
            error = ran.json()["error"]
            assert error["reason"] == "reply_lost"
            assert "may have run" in error["message"]
            assert commandstat_calls(client, "evalsha") - before == 1
            assert check_rows(census(client, keys, 6)) == {"p": 4, "d": 2}

    def test_the_daemon_counts_a_lost_reply_and_goes_on(
        self, server: RedisServer, workdir: Path
    ) -> None:
        """The daemon's sweep loses its reply: one failure with reason reply_lost, logged, not
        resent; the next tick succeeds and the rows were moved once."""
        keys = QueueKeys("q")
        with server.client() as client, LosingProxy(server.port) as proxy:
            seed(client, keys, 6)
            NATIVE.prepare(client)
            proxy.armed.set()
            with daemon(workdir, proxy.url, "--queue", "q", "--interval", "0.5") as d:
                wait_until(proxy.lost.is_set, what="the reply dropped")
                wait_until(lambda: d.events("sweep_recovered"), what="sweep_recovered")
                assert failures(d, "q", "reply_lost") == 1
                [logged] = [e for e in d.events("sweep_failed") if e["reason"] == "reply_lost"]
                assert "connection broke" in str(logged["error"])
                assert d.value("sweeperd_recovered_total", queue="q") == 0  # not known: lost
            assert check_rows(census(client, keys, 6)) == {"p": 4, "d": 2}


class TestServerRestarts:
    def test_aof_restart_during_a_drain(self, aof_server: RedisServer, workdir: Path) -> None:
        """The server restarts with AOF mid-drain: no crash, the restart counted, the drain
        finishes, leases taken after it are exempt, none counted twice."""
        keys = QueueKeys("big")
        n = 30_000
        with aof_server.client() as client:
            seed(client, keys, n, run_id(client))
        with daemon(
            workdir, aof_server.url, "--queue", "big", "--interval", "1", "--drain-share", "0.05"
        ) as d:
            with aof_server.client() as client:
                wait_until(lambda: client.zcard(keys.active) < n * 0.8, 60, "mid-drain")
            aof_server.restart()
            d.wait_value("sweeperd_server_restarts_total", 1, node=f"127.0.0.1:{aof_server.port}")
            with aof_server.client() as client:
                wait_until(lambda: client.zcard(keys.active) == 0, 60, "the drain's end")
                assert not d.exited()
                assert (d.value("sweeperd_exempt_total", queue="big") or 0) > 0
                taken = sum(
                    d.value(name, queue="big") or 0
                    for name in ("sweeperd_recovered_total", "sweeperd_dead_total")
                )
                assert taken <= n
                tally = check_rows(census(client, keys, n), exempt_allowed=True)
        assert tally["a"] == 0 and tally["p"] + tally["d"] == n

    def test_restart_without_persistence(self, server: RedisServer, workdir: Path) -> None:
        """A restart that loses every key: no crash, the restart counted, the vanished queue
        has nothing due, and the daemon is ready again."""
        keys = QueueKeys("q")
        with server.client() as client:
            seed(client, keys, 9)
        args = ("--queue", "q", "--interval", "0.5", "--queue-metrics", "full")  # set sizes
        with daemon(workdir, server.url, *args) as d:
            d.wait_value("sweeperd_dead_total", 3, queue="q")
            server.restart()
            d.wait_value("sweeperd_server_restarts_total", 1, node=f"127.0.0.1:{server.port}")
            wait_until(lambda: d.get("/readyz")[0] == 200, what="ready again")
            d.wait_value("sweeperd_queue_jobs", 0, queue="q", set="pending")
            assert d.value("sweeperd_expired_leases", queue="q") == 0
            assert not d.exited()
            with server.client() as client:
                assert client.dbsize() == 0


class TestOutOfMemory:
    def test_the_verb_is_refused_at_maxmemory_and_sweeping_recovers(
        self, server: RedisServer, workdir: Path
    ) -> None:
        """maxmemory with noeviction: the native verb (deny-oom) is refused, counted as oom,
        nothing written; when memory frees, the sweep goes through."""
        keys = QueueKeys("q")
        with server.client() as client:
            seed(client, keys, 6)
            used = int(client.info("memory")["used_memory"])
            client.set("filler", b"x" * (16 * 2**20))
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", used + 4 * 2**20)  # over it until the filler goes
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                client.set("probe", b"y")
            before = dump_all(client)
            with daemon(
                workdir, server.url, "--queue", "q", "--interval", "0.5", "--executor", "native"
            ) as d:
                wait_until(lambda: failures(d, "q", "oom") >= 2, what="oom failures")
                assert dump_all(client) == before
                [logged] = [e for e in d.events("sweep_failed") if e["reason"] == "oom"]
                assert str(logged["error"]).startswith("OOM command not allowed")
                client.delete("filler")
                d.wait_value("sweeperd_recovered_total", 4, queue="q")
                d.wait_value("sweeperd_dead_total", 2, queue="q")
                assert d.events("sweep_recovered")
            assert check_rows(census(client, keys, 6)) == {"p": 4, "d": 2}

    def test_the_lua_port_goes_through_at_maxmemory(
        self, server: RedisServer, workdir: Path
    ) -> None:
        """The Lua port at maxmemory: Redis checks deny-oom only before a script's first write,
        and the port's first (ZREMRANGEBYRANK) is not deny-oom, so its sweep goes through."""
        keys = QueueKeys("q")
        with server.client() as client:
            seed(client, keys, 6)
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", 1)
            with daemon(
                workdir, server.url, "--queue", "q", "--interval", "0.5", "--executor", "script"
            ) as d:
                d.wait_value("sweeperd_recovered_total", 4, queue="q")
                assert failures(d, "q", "oom") == 0
            client.config_set("maxmemory", 0)
            assert check_rows(census(client, keys, 6)) == {"p": 4, "d": 2}


class TestKeysChangeUnderTheDaemon:
    def test_a_queue_whose_keys_change_type_fails_alone(
        self, server: RedisServer, workdir: Path
    ) -> None:
        """A queue's active set turned into a string, then its pending set, then a row: that
        queue fails with reason wrongtype (logged once while the reason stays), writing
        nothing; the other queue goes on; deleted keys leave it nothing due and it recovers."""
        bad, good = QueueKeys("bad"), QueueKeys("good")
        with (
            server.client() as client,
            daemon(
                workdir, server.url, "--queue", "bad", "--queue", "good", "--interval", "0.3"
            ) as d,
        ):
            seed(client, good, 3)
            d.wait_value("sweeperd_recovered_total", 2, queue="good")
            client.set(bad.active, "not a zset")
            wait_until(lambda: failures(d, "bad", "wrongtype") >= 1, what="active's type")
            client.delete(bad.active)
            client.set(bad.pending, "not a zset")
            seed(client, bad, 2)
            wait_until(lambda: failures(d, "bad", "wrongtype") >= 2, what="pending's type")
            with client.pipeline(transaction=True) as swap:  # no sweep between the two
                swap.delete(bad.pending, bad.job(b"j1"))
                swap.set(bad.job(b"j1"), "not a hash")
                swap.execute()
            refused = failures(d, "bad", "wrongtype")
            wait_until(lambda: failures(d, "bad", "wrongtype") >= refused + 2, what="the row")
            assert client.zcard(bad.active) == 2  # the refusal wrote nothing
            for key in client.scan_iter(match="emq:{bad}:*"):
                client.delete(key)
            wait_until(lambda: d.events("sweep_recovered"), what="bad recovered")
            lease(client, good, b"late", PAST_MS, state="active")
            d.wait_value("sweeperd_recovered_total", 3, queue="good")
            assert d.value("sweeperd_expired_leases", queue="bad") == 0
            assert failures(d, "good", "wrongtype") == 0
            assert not d.exited()
