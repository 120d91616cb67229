"""One pipelined round: replies with their accounting, counts, and scripts the server lost."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import redis

from sweeperd.executors import NATIVE, SCRIPT, Executor
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError
from sweeperd.rounds import Call, Depths, SweepReply, keeps_draining, sweep_round
from tests.helpers import FUTURE_OFFSET_MS, PAST_MS, dump_all, lease, now_ms, run_id

A, B = QueueKeys("a"), QueueKeys("b")


def commands_called(r: redis.Redis, name: str) -> int:
    stats = r.info("commandstats").get(f"cmdstat_{name}", {})
    return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0


def numbers(d: Depths | None) -> tuple[int, int, int, int, int | None]:
    """expired, active, pending, dead and failed of a result's depths."""
    assert d is not None
    return (d.expired, d.active, d.pending, d.dead, d.failed)


@dataclass(frozen=True)
class Target:
    client: redis.Redis
    executor: Executor


@pytest.fixture(params=["native", "script"])
def on(request: pytest.FixtureRequest) -> Target:
    """The module server with the native executor, or the plain one with the Lua port."""
    if request.param == "native":
        return Target(request.getfixturevalue("r"), NATIVE)
    return Target(request.getfixturevalue("r_plain"), SCRIPT)


class TestSweepRound:
    def test_each_call_gets_its_reply_and_counts(self, on: Target) -> None:
        """Two queues in one round: each its own reply and the counts after its sweep."""
        c, executor = on.client, on.executor
        lease(c, A, b"a1", attempts="1", stalled="0")
        lease(c, A, b"a2", deadline_ms=now_ms() + FUTURE_OFFSET_MS, attempts="1")
        lease(c, B, b"b1", attempts="1", stalled="4")
        c.hset(B.metrics_failed, "count", "7")
        a, b = sweep_round(c, executor, [Call(A, 2, 100), Call(B, 2, 100)])
        assert a.reply == SweepReply((b"a1",), ())
        assert b.reply == SweepReply((), (b"b1",))
        assert numbers(a.depths) == (0, 1, 1, 0, 0)
        assert numbers(b.depths) == (0, 0, 0, 1, 8)
        assert a.depths is not None and a.depths.run_id == run_id(c)
        assert a.depths.oldest_expired_ms is None

    def test_exempt_is_exactly_the_rows_of_another_epoch(self, on: Target) -> None:
        """Recovered rows whose lease_epoch is not the run_id are exempt; the rest are not."""
        c, executor = on.client, on.executor
        lease(c, A, b"old", 1, attempts="1", lease_epoch="an-earlier-run")
        lease(c, A, b"now", 2, attempts="1", lease_epoch=run_id(c))
        lease(c, A, b"none", 3, attempts="1")
        lease(c, A, b"dies", 4, attempts="1", stalled="5")
        [result] = sweep_round(c, executor, [Call(A, 3, 100)])
        assert result.reply == SweepReply((b"old", b"now", b"none"), (b"dies",), (b"old",))

    def test_ghosts_are_counted(self, on: Target) -> None:
        """Ids in active with no row are removed, listed nowhere, and counted as ghosts."""
        c, executor = on.client, on.executor
        lease(c, A, b"g1")
        lease(c, A, b"g2")
        lease(c, A, b"j", attempts="1")
        lease(c, A, b"later", deadline_ms=now_ms() + FUTURE_OFFSET_MS)
        [result] = sweep_round(c, executor, [Call(A, 5, 100)])
        assert result.reply == SweepReply((b"j",), (), (), ghosts=2)
        assert isinstance(result.reply, SweepReply) and result.reply.taken == 3

    def test_the_limit_and_what_is_left(self, on: Target) -> None:
        """A call takes `limit` leases; the rest stay counted as expired, the oldest's age given."""
        c, executor = on.client, on.executor
        for n in range(5):
            lease(c, A, f"j{n}".encode(), PAST_MS + n, attempts="1")
        [result] = sweep_round(c, executor, [Call(A, 5, 2)])
        assert result.reply == SweepReply((b"j0", b"j1"), ())
        assert numbers(result.depths) == (3, 3, 2, 0, 0)
        assert result.depths is not None and result.depths.oldest_expired_ms == PAST_MS + 2
        assert result.depths.oldest_expired_age_s == (result.depths.now_ms - PAST_MS - 2) / 1000
        assert keeps_draining(result)

    def test_a_bound_counts_only_what_was_due_by_then(self, r: redis.Redis) -> None:
        """With a bound, `expired` counts leases due by it, not those due since."""
        lease(r, A, b"early", PAST_MS, attempts="1")
        lease(r, A, b"late", PAST_MS + 50, attempts="1")
        [result] = sweep_round(r, NATIVE, [Call(A, 5, 1, bound_ms=PAST_MS + 10)])
        assert result.reply == SweepReply((b"early",), ())
        assert result.expired_left == 0
        assert not keeps_draining(result)

    def test_a_lost_sweep_script_is_loaded_and_sent_once(self, r: redis.Redis) -> None:
        """With the script cache flushed, the sweep is refused with NOSCRIPT, loaded, sent again,
        and the verb runs once."""
        lease(r, A, b"j", attempts="1", lease_epoch="an-earlier-run")
        r.script_flush()
        r.config_resetstat()
        [result] = sweep_round(r, NATIVE, [Call(A, 1, 100)])
        assert result.reply == SweepReply((b"j",), (), (b"j",))
        assert numbers(result.depths) == (0, 0, 1, 0, 0)
        assert commands_called(r, "emq.stalled.check") == 1
        assert commands_called(r, "evalsha") == 2

    def test_a_refusal_is_that_call_alone(self, on: Target) -> None:
        """A lane row refuses queue A's call and writes nothing; queue B's call succeeds."""
        c, executor = on.client, on.executor
        lease(c, A, b"lane", attempts="1", group="g")
        lease(c, B, b"j", attempts="1")
        before = {k: v for k, v in dump_all(c).items() if b"{a}" in k}
        a, b = sweep_round(c, executor, [Call(A, 1, 100), Call(B, 1, 100)])
        assert isinstance(a.reply, SweepError)
        assert (a.reply.reason, a.reply.message) == (Reason.LANE, "EMQLANE job lane is a lane row")
        assert numbers(a.depths) == (1, 1, 0, 0, 0)
        assert b.reply == SweepReply((), (b"j",))
        assert {k: v for k, v in dump_all(c).items() if b"{a}" in k} == before

    def test_the_native_verb_missing_is_no_verb(self, r_plain: redis.Redis) -> None:
        """The native sweep on a server without the module fails with reason no_verb."""
        lease(r_plain, A, b"j", attempts="1")
        [result] = sweep_round(r_plain, NATIVE, [Call(A, 1, 100)])
        assert isinstance(result.reply, SweepError)
        assert result.reply.reason is Reason.NO_VERB
        assert r_plain.zcard(A.active) == 1

    def test_a_wrong_type_active_key_has_no_counts(self, r: redis.Redis) -> None:
        """An active key that is not a zset: the verb's WRONGTYPE, and no counts."""
        r.set(A.active, "x")
        [result] = sweep_round(r, NATIVE, [Call(A, 1, 100)])
        assert isinstance(result.reply, SweepError) and result.depths is None
        assert (result.reply.reason, result.reply.message) == (
            Reason.WRONGTYPE,
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        )
