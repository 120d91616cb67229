"""A scheduled tick on a real server: failures of every kind counted, logged once per change."""

from __future__ import annotations

import pytest
import redis
from structlog.testing import capture_logs

from sweeperd.fleet.node import Node
from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import connect
from tests.support.helpers import lease
from tests.support.node_rig import Rig, queue
from tests.support.servers import RedisServer


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
        assert rig.value("sweeperd_ghosts_removed_total", queue="a") == 2  # full: per queue
