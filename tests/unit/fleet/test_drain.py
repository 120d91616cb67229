"""Backlogs drained call after call on a real server: exact counts, turns, sizes, failures."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from structlog.testing import capture_logs

from sweeperd.fleet.drain import PROGRESS_LOG_S
from sweeperd.fleet.outcome import RESTARTED
from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import connect
from tests.support.clock import Clock
from tests.support.helpers import PAST_MS, lease, run_id
from tests.support.node_rig import NODE, Rig, queue, seed
from tests.support.servers import RedisServer


@pytest.fixture
def rig(r: redis.Redis, redis_server: RedisServer) -> Iterator[Rig]:
    yield Rig(redis_server.url)


class TestDrain:
    def test_a_backlog_drains_after_its_tick(self, r: redis.Redis, rig: Rig) -> None:
        """One tick takes a call's worth; the drainer takes the rest without another tick,
        and the counters equal the keyspace."""
        keys = QueueKeys("big")
        seed(r, keys, 3000)
        rig.tick(queue("big"))
        assert rig.drainer.is_draining("big")
        assert 0 < r.zcard(keys.pending) < 3000
        calls = rig.drain()
        assert calls >= 2
        assert not rig.drainer.is_draining("big")
        assert (r.zcard(keys.active), r.zcard(keys.pending)) == (0, 3000)
        assert rig.value("sweeperd_recovered_total", queue="big") == 3000
        assert rig.value("sweeperd_sweeps_total", queue="big", node=NODE) == 1 + calls
        assert rig.value("sweeperd_expired_leases", queue="big") == 0
        assert rig.value("sweeperd_oldest_expired_age_seconds", queue="big") == 0

    def test_a_draining_queue_is_left_out_of_its_tick(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """While the drainer holds a queue, its scheduled tick sends nothing for it."""
        rig = Rig(redis_server.url, size=100)
        seed(r, QueueKeys("big"), 500)
        rig.tick(queue("big"))
        assert rig.drainer.is_draining("big")
        rig.tick(queue("big"))
        assert rig.value("sweeperd_sweeps_total", queue="big", node=NODE) == 1

    def test_backlogged_queues_take_turns(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Two backlogged queues alternate, one call each, until both are drained."""
        # roomy: a server slowed by other work shrinks no call
        rig = Rig(redis_server.url, target_s=1.0, size=100)
        for name in ("a", "b"):
            seed(r, QueueKeys(name), 250)
        rig.tick(queue("a", limit=50), queue("b", limit=50))
        order = []
        while True:
            before = [rig.value("sweeperd_sweeps_total", queue=n, node=NODE) for n in ("a", "b")]
            if rig.drainer.step() is None:
                break
            after = [rig.value("sweeperd_sweeps_total", queue=n, node=NODE) for n in ("a", "b")]
            order.append("ab"[[x != y for x, y in zip(before, after, strict=True)].index(True)])
        assert "".join(order) == "abababab"  # 50 a call: 4 more each after the tick's 50

    def test_exempt_stays_exact(self, r: redis.Redis, rig: Rig) -> None:
        """Leases of an earlier server run, spread through a backlog, are exactly the exempt."""
        keys = QueueKeys("mixed")
        seed(r, keys, 2000, lease_epoch=run_id(r))
        old = [f"j{n:06}" for n in range(0, 2000, 7)]
        for job in old:
            r.hset(keys.job(job), "lease_epoch", "an-earlier-run")
        rig.tick(queue("mixed", max_stalled=5))
        rig.drain()
        assert rig.value("sweeperd_recovered_total", queue="mixed") == 2000
        assert rig.value("sweeperd_exempt_total", queue="mixed") == len(old)
        assert r.hget(keys.job(old[0]), "stalled") is None
        assert r.hget(keys.job("j000001"), "stalled") == b"1"

    def test_ghosts_and_deaths_are_counted(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A backlog of rows at their budget and ids without rows: dead and ghosts counted."""
        rig = Rig(redis_server.url, size=64)
        keys = QueueKeys("grim")
        seed(r, keys, 300, stalled=0)
        for n in range(40):
            lease(r, keys, f"ghost{n}".encode(), PAST_MS)
        rig.tick(queue("grim", max_stalled=1))
        rig.drain()
        assert rig.value("sweeperd_dead_total", queue="grim") == 300
        assert rig.value("sweeperd_ghosts_removed_total", queue="grim", node=NODE) == 40
        assert r.hget(keys.metrics_failed, "count") == b"300"
        assert r.zcard(keys.active) == 0

    def test_progress_is_logged_every_few_seconds(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """With time passed in moving a second a reading, drain_progress appears with what was
        done and what is left, and drain_finished ends it."""
        rig = Rig(redis_server.url, size=20, clock=Clock(step=1.0))
        seed(r, QueueKeys("slow"), 400)
        with capture_logs() as logs:
            rig.tick(queue("slow", limit=20))
            rig.drain()
        progress = [e for e in logs if e["event"] == "drain_progress"]
        assert progress, [e["event"] for e in logs]
        first = progress[0]
        assert first["done"] + first["left"] == 400 - 20
        assert first["elapsed_s"] >= PROGRESS_LOG_S
        assert first["rate"] > 0 and first["eta_s"] is not None
        finished = [e for e in logs if e["event"] == "drain_finished"]
        assert len(finished) == 1 and finished[0]["left"] == 0 and finished[0]["done"] == 380

    def test_a_drain_keeps_the_node_answering(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Each drain call that succeeds is an answer from the node, so a long drain whose
        queue skips its ticks keeps /readyz up."""
        rig = Rig(redis_server.url, size=50, clock=Clock(step=1.0))
        seed(r, QueueKeys("long"), 500)
        rig.tick(queue("long", limit=50))
        ticked = rig.node.last_answer
        rig.drain()
        assert ticked is not None and rig.node.last_answer is not None
        assert rig.node.last_answer >= ticked + 9  # nine more calls, a second of clock each

    def test_a_share_below_one_pauses_as_long_as_the_call_ran(
        self, r: redis.Redis, rig: Rig, server_kind: str
    ) -> None:
        """At drain_share 0.5 the pause owed after a call equals its server time, and the next
        call waits for it; at 1 none is owed and the next call is sent before the last is
        counted."""
        seed(r, QueueKeys("q"), 2000)
        rig.tick(queue("q", limit=100))
        assert rig.drainer.step() == 0.0
        assert rig.drainer.sending
        rig.drainer.share = 0.5
        owed = rig.drainer.step()
        assert owed is not None and owed > 0
        assert not rig.drainer.sending
        r.config_resetstat()
        pause = rig.drainer.step()
        ran_s = int(r.info("commandstats")["cmdstat_evalsha"]["usec"]) / 1_000_000
        # The script's own timing: TIME's on Redis; on Valkey the server's CPU time (os.clock),
        # which leaves out a preemption that commandstats' wall time counts.
        least = {"redis": 0.5 * ran_s, "valkey": 0.0}[server_kind]
        assert pause is not None and pause > 0 and least <= pause <= ran_s

    def test_call_size_adapts_to_the_target(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A tiny target shrinks calls to a handful of leases; a roomy one grows them to the
        queue's limit."""
        tight = Rig(redis_server.url, target_s=20e-6)
        seed(r, QueueKeys("t"), 3000)
        tight.tick(queue("t"))
        for _ in range(10):
            tight.drainer.step()
        assert tight.node.share(1) < 20
        roomy = Rig(redis_server.url, target_s=1.0)
        seed(r, QueueKeys("w"), 3000)
        roomy.tick(queue("w", limit=700))
        roomy.drain()
        assert roomy.node.share(1) >= 700
        assert roomy.node.call_size(700) == 700

    def test_a_restart_seen_in_a_reply_is_looked_at(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A reply from another run of the server: the restart is counted and reported."""
        rig = Rig(redis_server.url, size=100)
        seed(r, QueueKeys("q"), 500)
        rig.tick(queue("q"))
        rig.node.run_id = b"an-earlier-process"
        rig.drainer.step()
        assert rig.told == [RESTARTED]
        assert rig.node.restarts == 1
        assert rig.node.run_id == run_id(r)

    def test_an_unreachable_server_ends_every_drain(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """The connection fails mid-drain: the node is down, the failure counted, no queue
        left in the turns (the ticks bring them back)."""
        rig = Rig(redis_server.url, size=100)
        for name in ("a", "b"):
            seed(r, QueueKeys(name), 300)
        rig.tick(queue("a"), queue("b"))
        rig.node.client = connect("redis://127.0.0.1:1/0", socket_timeout=1.0)
        assert rig.drainer.step() is None
        assert not rig.drainer.is_draining("a") and not rig.drainer.is_draining("b")
        assert rig.node.up is False
        assert rig.value("sweeperd_sweep_failures_total", queue="a", reason="connection") == 1

    def test_a_refusal_mid_drain_stops_that_queue(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A lane row deep in one backlog fails that queue's drain with reason lane; the other
        queue drains to the end. (Calls of the queue's limit, 50, however slow the server: a
        target no call reaches never shrinks them, so the refused call is the sixth.)"""
        seed(r, QueueKeys("lane"), 300)
        r.hset(QueueKeys("lane").job("j000250"), "group", "g")
        seed(r, QueueKeys("fine"), 300)
        rig = Rig(redis_server.url, target_s=10.0, size=100)
        rig.tick(queue("lane", limit=50), queue("fine", limit=50))
        rig.drain()
        assert rig.value("sweeperd_sweep_failures_total", queue="lane", reason="lane") == 1
        assert r.zcard(QueueKeys("lane").active) == 300 - 250
        assert r.zcard(QueueKeys("fine").active) == 0


class TestTicksDuringADrain:
    def test_another_queue_is_swept_while_one_drains(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """With the drainer thread on a big backlog, another queue's ticks each take about one
        call, not the drain: the server is shared call by call."""
        seed(r, QueueKeys("huge"), 150_000)
        seed(r, QueueKeys("small"), 1)
        rig = Rig(redis_server.url, clock=time.monotonic)
        rig.tick(queue("huge"))
        rig.metrics.numbers.add_queue("small")
        rig.drainer.start()
        durations: list[float] = []
        try:
            while rig.drainer.is_draining("huge") and len(durations) < 30:
                r.zadd(QueueKeys("small").active, {"j000000": PAST_MS})
                started = time.monotonic()
                rig.member.ticks.run([queue("small")], time.monotonic())
                durations.append(time.monotonic() - started)
        finally:
            rig.drainer.stop(5.0)
        assert len(durations) >= 10, "the drain ended before the ticks could be timed"
        assert r.zcard(QueueKeys("small").active) == 0
        assert rig.value("sweeperd_sweeps_total", queue="small", node=NODE) == len(durations)
        assert sorted(durations)[len(durations) // 2] < 0.05, durations

    def test_an_unexpected_error_gives_the_queues_back_to_their_ticks(
        self, r: redis.Redis, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A bug inside a drain step does not end the drain thread with queues held (their
        ticks would skip them forever): each held queue fails with reason other and is let go,
        and the thread goes on."""
        rig = Rig(redis_server.url, size=100, clock=time.monotonic)
        for name in ("a", "b"):
            seed(r, QueueKeys(name), 300)
        rig.tick(queue("a"), queue("b"))
        calls = iter([RuntimeError("a bug")])

        def broken() -> float | None:
            raise next(calls)

        monkeypatch.setattr(rig.drainer, "step", broken)
        rig.drainer.start()
        wait = time.monotonic() + 5
        while (
            rig.drainer.is_draining("a") or rig.drainer.is_draining("b")
        ) and time.monotonic() < wait:
            time.sleep(0.01)
        monkeypatch.undo()
        assert not rig.drainer.is_draining("a") and not rig.drainer.is_draining("b")
        assert rig.drainer.running
        rig.drainer.stop(5.0)
        for name in ("a", "b"):
            assert rig.value("sweeperd_sweep_failures_total", queue=name, reason="other") == 1

    def test_stop_ends_the_thread_after_its_call(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """stop() returns once the call in flight is read and counted: the counters equal the
        keyspace, and the rest of the backlog stays."""
        rig = Rig(redis_server.url, size=100, clock=time.monotonic)
        keys = QueueKeys("q")
        seed(r, keys, 20_000)
        r.config_resetstat()
        rig.tick(queue("q", limit=100))
        rig.drainer.start()
        time.sleep(0.05)
        rig.drainer.stop(5.0)
        assert not rig.drainer.running
        assert not rig.drainer.sending
        assert r.zcard(keys.active) > 0
        assert rig.value("sweeperd_recovered_total", queue="q") == r.zcard(keys.pending)
        calls = r.info("commandstats")["cmdstat_evalsha"]["calls"]
        assert rig.value("sweeperd_sweeps_total", queue="q", node=NODE) == calls
