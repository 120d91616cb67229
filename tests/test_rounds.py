"""One pipelined round: replies, stats, and scripts the server lost, on a real server."""

from __future__ import annotations

import redis

from sweeperd.executors import NATIVE, SCRIPT
from sweeperd.keyspace import QueueKeys
from sweeperd.rounds import Call, Depths, SweepReply, sweep_round
from tests.helpers import lease, now_ms

A, B = QueueKeys("a"), QueueKeys("b")


def commands_called(r: redis.Redis, name: str) -> int:
    stats = r.info("commandstats").get(f"cmdstat_{name}", {})
    return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0


class TestSweepRound:
    def test_each_call_gets_its_reply_and_counts(self, r: redis.Redis) -> None:
        """Two queues in one round: each its own reply and the counts after its sweep."""
        lease(r, A, b"a1", attempts="1", stalled="0")
        lease(r, A, b"a2", deadline_ms=now_ms() + 3_600_000, attempts="1")
        lease(r, B, b"b1", attempts="1", stalled="4")
        r.hset(B.metrics_failed, "count", "7")
        a, b = sweep_round(r, NATIVE, [Call(A, 2, 100, now_ms()), Call(B, 2, 100, now_ms())])
        assert a.reply == SweepReply((b"a1",), ())
        assert b.reply == SweepReply((), (b"b1",))
        assert a.depths == Depths(expired=0, active=1, pending=1, dead=0, failed=0)
        assert b.depths == Depths(expired=0, active=0, pending=0, dead=1, failed=8)

    def test_a_lost_stats_script_never_repeats_the_sweep(self, r: redis.Redis) -> None:
        """With the script cache flushed, the native sweep runs once and keeps its reply."""
        lease(r, A, b"j", attempts="1", lease_epoch="an-earlier-run")
        r.script_flush()
        r.config_resetstat()
        [result] = sweep_round(r, NATIVE, [Call(A, 1, 100, now_ms())])
        assert result.reply == SweepReply((b"j",), ())
        assert result.depths == Depths(expired=0, active=0, pending=1, dead=0, failed=0)
        assert commands_called(r, "emq.stalled.check") == 1

    def test_a_lost_verb_script_is_loaded_and_sent_again(self, r_plain: redis.Redis) -> None:
        """The Lua port refused with NOSCRIPT wrote nothing: it is loaded and sent once more."""
        lease(r_plain, A, b"j", attempts="1")
        r_plain.script_flush()
        [result] = sweep_round(r_plain, SCRIPT, [Call(A, 1, 100, now_ms())])
        assert result.reply == SweepReply((), (b"j",))
        assert result.depths == Depths(expired=0, active=0, pending=0, dead=1, failed=1)
        assert r_plain.hget(A.metrics_failed, "count") == b"1"

    def test_a_refusal_is_that_call_alone(self, r: redis.Redis) -> None:
        """A lane row refuses queue A's call; queue B's call in the same round succeeds."""
        lease(r, A, b"lane", attempts="1", group="g")
        lease(r, B, b"j", attempts="1")
        a, b = sweep_round(r, NATIVE, [Call(A, 1, 100, now_ms()), Call(B, 1, 100, now_ms())])
        assert not isinstance(a.reply, SweepReply)
        assert a.reply.message == "EMQLANE job lane is a lane row"
        assert a.depths == Depths(expired=1, active=1, pending=0, dead=0, failed=0)
        assert b.reply == SweepReply((), (b"j",))
