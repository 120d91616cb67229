"""A scheduled tick on a real server: failures of every kind counted, logged once per change;
each queue woken again at the deadline its call read, time passed in."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs

from sweeperd.fleet.deadlines import GRACE_S, Deadlines
from sweeperd.fleet.node import LOOK_EVERY_S, Node
from sweeperd.fleet.outcome import Outcome
from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import connect
from tests.support.clock import Clock
from tests.support.helpers import lease, server_ms
from tests.support.node_rig import NODE, Rig, queue, seed
from tests.support.servers import RedisServer

A, B = QueueKeys("a"), QueueKeys("b")


class TestTickFailures:
    def test_an_exception_in_a_tick_is_a_failure_of_reason_other(
        self, r: redis.Redis, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Whatever breaks inside a tick is counted for each of its queues as `other` and
        logged as sweep_failed, never left to the scheduler."""
        rig = Rig(redis_server.url)

        def broken(self: Node, now: float) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(Node, "look", broken)
        with capture_logs() as logs:
            rig.tick(queue("a"), queue("b"))
        for name in ("a", "b"):
            assert rig.value("sweeperd_sweep_failures_total", queue=name, reason="other") == 1
        failed = [e for e in logs if e["event"] == "sweep_failed"]
        assert [(e["queue"], e["reason"], e["error"]) for e in failed] == [
            ("a", "other", "RuntimeError: a bug"),
            ("b", "other", "RuntimeError: a bug"),
        ]

    def test_a_down_server_logs_once_per_queue_and_counts_every_tick(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Three ticks against a dead port: three failures counted per queue, one sweep_failed
        line per queue; the server back: one sweep_recovered line per queue."""
        rig = Rig(redis_server.url)
        good = rig.node.client
        rig.node.client = connect("redis://127.0.0.1:1/0", socket_timeout=1.0)
        with capture_logs() as logs:
            for _ in range(3):
                rig.node.retry_at = 0.0  # the backoff is the node's own test
                rig.tick(queue("a"), queue("b"))
            rig.node.client = good
            lease(r, QueueKeys("a"), b"j", attempts="1")
            rig.node.retry_at = 0.0
            rig.tick(queue("a"), queue("b"))
        assert rig.value("sweeperd_sweep_failures_total", queue="a", reason="connection") == 3
        events = [(e["event"], e.get("queue")) for e in logs if "sweep" in e["event"]]
        assert events == [
            ("sweep_failed", "a"),
            ("sweep_failed", "b"),
            ("sweep_recovered", "a"),
            ("sweep", "a"),
            ("sweep_recovered", "b"),
        ]
        assert rig.value("sweeperd_recovered_total", queue="a") == 1


class TestTickGhosts:
    def test_ghosts_are_logged_at_warning_with_their_ids(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A tick that removes ids without a row logs its `sweep` at warning, naming them, and
        counts them on the node; a tick without ghosts logs at info and names none."""
        rig = Rig(redis_server.url)
        lease(r, QueueKeys("a"), b"lost-1")
        lease(r, QueueKeys("a"), b"fine", attempts="1")
        lease(r, QueueKeys("a"), b"lost-2")
        lease(r, QueueKeys("b"), b"ok", attempts="1")
        with capture_logs() as logs:
            rig.tick(queue("a"), queue("b"))
        swept = {e["queue"]: e for e in logs if e["event"] == "sweep"}
        assert (swept["a"]["log_level"], swept["a"]["ghosts"]) == ("warning", 2)
        assert swept["a"]["ghost_ids"] == ["lost-1", "lost-2"]
        assert swept["b"]["log_level"] == "info" and "ghost_ids" not in swept["b"]
        assert rig.value("sweeperd_ghosts_removed_total", queue="a", node=NODE) == 2


def calls(r: redis.Redis, command: str) -> int:
    """How many times the server ran `command` (INFO commandstats)."""
    found = r.info("commandstats").get(f"cmdstat_{command}", {})
    return int(found.get("calls", 0)) if isinstance(found, dict) else 0


def armed(deadlines: Deadlines | None) -> Deadlines:
    assert deadlines is not None
    return deadlines


class TestTickWakes:
    def test_each_queue_is_woken_at_the_deadline_its_call_read(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A tick reads the server's clock and arms each queue at the earliest deadline its call
        left, plus the grace: the outcome's wake is the soonest; a queue with nothing left has
        none, and neither has one whose deadline is past the horizon (two intervals)."""
        rig = Rig(redis_server.url, wakes=True)
        deadlines = armed(rig.deadlines)
        due_ms = server_ms(r) + 4_000
        lease(r, A, b"soon", due_ms, attempts="1")
        lease(r, A, b"later", due_ms + 1_000, attempts="1")
        lease(r, QueueKeys("far"), b"j", due_ms + 10_001, attempts="1")
        outcome = rig.tick(queue("a"), queue("b"), queue("far"))
        host = deadlines.host_s(due_ms)
        assert host is not None and outcome.wake == host + GRACE_S
        assert deadlines.waiting() == 1
        assert deadlines.due(host + GRACE_S) == ["a"]

    def test_a_queue_left_draining_is_woken_when_its_drain_ends(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A backlog is the drain's: no wake while it drains; its last call arms the queue at
        the deadline it left, and says so."""
        rig = Rig(redis_server.url, size=10, wakes=True)
        deadlines = armed(rig.deadlines)
        seed(r, A, 50)
        due_ms = server_ms(r) + 4_000
        lease(r, A, b"live", due_ms, attempts="1")
        outcome = rig.tick(queue("a", limit=10))
        assert (outcome.wake, deadlines.waiting()) == (None, 0)
        assert rig.drain() > 0 and r.zcard(A.active) == 1
        host = deadlines.host_s(due_ms)
        assert host is not None
        assert [o.wake for o in rig.told] == [host + GRACE_S]
        assert deadlines.due(host + GRACE_S) == ["a"]

    def test_a_refused_call_is_not_woken(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A call the verb refuses (a lane row due) drops the queue's wake: waking it again at
        the floor would only be refused again; its interval tries again."""
        rig = Rig(redis_server.url, wakes=True)
        deadlines = armed(rig.deadlines)
        lease(r, A, b"j", server_ms(r) + 3_000, attempts="1")
        assert rig.tick(queue("a")).wake is not None
        lease(r, A, b"lane", attempts="1", group="g")
        assert rig.tick(queue("a")).wake is None
        assert deadlines.waiting() == 0

    def test_a_wake_round_is_one_round_trip(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Without a look the round sends the calls alone (the one INFO is the sweep script's
        own, where a look adds another), reads the server's clock off their replies and arms
        the queue as a tick does."""
        rig = Rig(redis_server.url, wakes=True)
        deadlines = armed(rig.deadlines)
        due_ms = server_ms(r) + 3_000
        lease(r, A, b"j", due_ms, attempts="1")
        r.config_resetstat()
        rig.tick(queue("a"))
        assert (calls(r, "info"), calls(r, "evalsha")) == (2, 1)
        r.config_resetstat()
        outcome = rig.tick(queue("a"), look=False)
        assert (calls(r, "info"), calls(r, "evalsha")) == (1, 1)
        host = deadlines.host_s(due_ms)
        assert host is not None and outcome.wake == host + GRACE_S
        assert not outcome.restarted

    def test_brief_rounds_read_the_epoch_once(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Idle brief calls read no run_id nor INFO, and run no script: a round sends its first
        call whole (the run_id, the ACL checks, the clock that judges the probes), so a round
        reads INFO once beside its tick's look and runs one script, whatever its size; the
        others are a ZRANGE each."""
        rig = Rig(redis_server.url, wakes=True, brief=True)
        lease(r, A, b"j", server_ms(r) + 60_000, attempts="1")
        lease(r, B, b"j", server_ms(r) + 60_000, attempts="1")
        idle = [queue("a"), queue("b"), queue("c")]
        r.config_resetstat()
        outcome = rig.tick(*idle)
        assert (calls(r, "info"), calls(r, "evalsha"), calls(r, "zrange")) == (2, 1, 3)
        r.config_resetstat()
        rig.member.ticks.run(idle, rig.clock(), look=False, woken=True)
        assert (calls(r, "info"), calls(r, "evalsha"), calls(r, "zrange")) == (1, 1, 3)
        assert not outcome.restarted and rig.node.restarts == 0

    def test_a_brief_reply_does_not_size_the_calls(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A brief reply found nothing due and says nothing of what a call costs: its round trip
        (here 10 ms, five times the call target) leaves the call size as it was. A round of one
        sends its call whole, timed by the server: a call that took nothing leaves the size too,
        however slow a loaded host made it."""
        rig = Rig(redis_server.url, wakes=True, brief=True, clock=Clock(step=0.01), size=400)
        rig.tick(queue("a"))
        rig.tick(queue("a"))
        assert rig.node.call_size(1000) == 400

    def test_a_scheduled_tick_leaves_a_queue_to_its_wake(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A queue whose wake comes within a second is not in its scheduled tick's round (a wake
        that found it in a round in flight would wait for the whole round); its wake sweeps it,
        and a tick after the wake takes it again."""
        rig = Rig(redis_server.url, wakes=True)
        deadlines = armed(rig.deadlines)
        lease(r, A, b"j", server_ms(r) + 500, attempts="1")
        rig.tick(queue("a"))
        r.config_resetstat()
        rig.tick(queue("a"), queue("b"))
        assert calls(r, "evalsha") == 1  # b's alone
        assert deadlines.waiting() == 1
        wake = deadlines.next_wake()
        assert wake is not None
        assert deadlines.due(wake) == ["a"]
        r.config_resetstat()
        rig.member.ticks.run([queue("a")], rig.clock(), look=False, woken=True)
        assert calls(r, "evalsha") == 1

    def test_a_wake_round_sees_a_restart_in_its_replies(
        self, server_kind: str, tmp_path: Path
    ) -> None:
        """A server restarted since the last look: the reply's run_id is another run's, the node
        looks again (the restart counted once) and the outcome says restarted."""
        with RedisServer(tmp_path, kind=server_kind) as server:
            rig = Rig(server.url, wakes=True)
            before = rig.node.run_id
            server.restart()
            rig.node.client.connection_pool.disconnect()
            outcome = rig.tick(queue("a"), look=False)
            assert outcome.restarted and rig.node.restarts == 1
            assert rig.node.run_id not in (None, before)
            assert not rig.tick(queue("a"), look=False).restarted

    def test_a_brief_wake_round_sees_a_restart(self, server_kind: str, tmp_path: Path) -> None:
        """Brief idle calls carry no run_id; the round's first call, sent whole, does: a
        restart is seen and counted once. Where that call is refused (no run_id in any reply),
        the node is looked at instead."""
        with RedisServer(tmp_path, kind=server_kind) as server:
            rig = Rig(server.url, wakes=True, brief=True)
            server.restart()
            rig.node.client.connection_pool.disconnect()
            outcome = rig.member.ticks.run([queue("a"), queue("b")], rig.clock(), look=False)
            assert outcome.restarted and rig.node.restarts == 1
            server.restart()
            rig.node.client.connection_pool.disconnect()
            c = rig.node.client
            c.set(A.active, "not a zset")
            outcome = rig.member.ticks.run([queue("a"), queue("b")], rig.clock(), look=False)
            assert outcome.restarted and rig.node.restarts == 2
            assert not rig.member.ticks.run(
                [queue("a"), queue("b")], rig.clock(), look=False
            ).restarted
            c.connection_pool.disconnect()


class TestLookEverySecond:
    """A scheduled tick looks at its node's epoch at most once a LOOK_EVERY_S (a look per batch
    of 200 was a tenth of the idle CPU at 100,000 queues); time passed in."""

    def run(self, rig: Rig, *queues: str) -> Outcome:
        rig.member.run([queue(q) for q in queues], look=True, woken=False)
        return rig.told[-1]

    def test_a_tick_within_the_second_of_a_look_goes_without(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Within the second of the last look the tick sends its call alone (the one INFO is the
        sweep script's own); the first tick a second after it looks again."""
        clock = Clock()
        rig = Rig(redis_server.url, clock=clock)  # looked at once made
        for moved, infos in ((0.0, 1), (LOOK_EVERY_S - 0.001, 1), (0.001, 2), (0.5, 1)):
            clock.now += moved
            r.config_resetstat()
            self.run(rig, "a")
            assert calls(r, "info") == infos, moved

    def test_a_restart_within_the_second_is_seen(self, server_kind: str, tmp_path: Path) -> None:
        """A server restarted within the second of the last look: the tick goes without a look,
        its reply's run_id is another run's, the node looks then (counted once)."""
        with RedisServer(tmp_path, kind=server_kind) as server:
            rig = Rig(server.url, clock=Clock())
            server.restart()
            rig.node.client.connection_pool.disconnect()
            assert self.run(rig, "a").restarted and rig.node.restarts == 1
            assert not self.run(rig, "a").restarted

    def test_a_demotion_is_seen_a_second_after_the_last_look(
        self, server_kind: str, tmp_path: Path
    ) -> None:
        """A primary made a replica (REPLICAOF) just after a look: a tick within the second may
        still call it (a write there is refused), the first tick a second after the look sees
        the demotion and its queues go to the new primary (moved, held)."""
        with (
            RedisServer(tmp_path / "old", kind=server_kind) as old,
            RedisServer(tmp_path / "new", kind=server_kind) as new,
        ):
            clock = Clock()
            rig = Rig(old.url, clock=clock)
            rig.node.primary_only = True
            demoted = old.client()
            demoted.replicaof("127.0.0.1", str(new.port))
            assert self.run(rig, "a", "b").moved == ()
            clock.now += LOOK_EVERY_S
            assert self.run(rig, "a", "b").moved == ("a", "b")
            demoted.replicaof("NO", "ONE")
            demoted.close()
