"""One pipelined round: replies with their accounting, counts, scripts the server lost, and the
calls sent behind CLIENT CACHING yes, which alone track what they read."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis.connection import Connection

from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.calls import command
from sweeperd.server.connection import connect
from sweeperd.server.packed import resp
from sweeperd.verb.executors import NATIVE, SCRIPT
from sweeperd.verb.replies import (
    Call,
    CallResult,
    Depths,
    SweepReply,
    keeps_draining,
    probed,
    result_of,
)
from sweeperd.verb.rounds import Packed, sweep_round
from tests.support.helpers import (
    FUTURE_OFFSET_MS,
    PAST_MS,
    dump_all,
    invalidations,
    lease,
    now_ms,
    run_id,
    tracked_keys,
)
from tests.support.servers import RedisServer
from tests.support.targets import Target

A, B, C = QueueKeys("a"), QueueKeys("b"), QueueKeys("c")


def commands_called(r: redis.Redis, name: str) -> int:
    stats = r.info("commandstats").get(f"cmdstat_{name}", {})
    return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0


def numbers(d: Depths | None) -> tuple[int, int | None, int | None, int | None, int | None]:
    """expired, active, pending, dead and failed of a result's depths."""
    assert d is not None
    return (d.expired, d.active, d.pending, d.dead, d.failed)


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
        assert result.reply == SweepReply((b"j",), (), (), ghosts=2, ghost_ids=(b"g1", b"g2"))
        assert isinstance(result.reply, SweepReply) and result.reply.taken == 3

    def test_ghost_ids_among_the_first_listed(self, on: Target) -> None:
        """With `listed` 3, the ghosts named are those among the first 3 ids the call took; the
        count is whole."""
        c, executor = on.client, on.executor
        for n, job in enumerate([b"j0", b"g0", b"j1", b"g1", b"g2"]):
            lease(c, A, job, n + 1, **({} if job.startswith(b"g") else {"attempts": "1"}))
        [result] = sweep_round(c, executor, [Call(A, 5, 100, listed=3)])
        assert result.reply == SweepReply((b"j0", b"j1"), (), (), ghosts=3, ghost_ids=(b"g0",))

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

    def test_a_listed_cap_keeps_the_counts_whole(self, on: Target) -> None:
        """With `listed` 2, a call that took 5 lists its first 2 ids of each list and carries
        the whole counts: 4 recovered (1 exempt, the last), 1 dead."""
        c, executor = on.client, on.executor
        for n in range(4):
            epoch = "an-earlier-run" if n == 3 else run_id(c).decode()
            lease(c, A, f"j{n}".encode(), PAST_MS + n, attempts="1", lease_epoch=epoch)
        lease(c, A, b"dies", PAST_MS + 9, attempts="1", stalled="4")
        [result] = sweep_round(c, executor, [Call(A, 5, 100, listed=2)])
        assert result.reply == SweepReply((b"j0", b"j1"), (b"dies",), (b"j3",), 0, (4, 1, 1))
        assert isinstance(result.reply, SweepReply)
        assert (result.reply.sizes, result.reply.taken) == ((4, 1, 1), 5)

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


def due(r: redis.Redis, keys: QueueKeys, count: int) -> None:
    """`count` expired leases of jobs with rows on the queue."""
    for n in range(count):
        lease(r, keys, f"j{n}".encode(), attempts="1")


def tracking_on_request(port: int, redirect: int) -> redis.Redis:
    """A client of one connection that tracks on request (OPTIN) to `redirect`, as the
    listener makes the sweeps' connections track."""
    client = redis.Redis(port=port, protocol=2, max_connections=1)
    command(client, "CLIENT", "TRACKING", "on", "REDIRECT", redirect, "NOLOOP", "OPTIN")
    return client


def first_invalidated(sub: redis.Connection) -> list[bytes]:
    """The keys of the next invalidation message."""
    message = sub.read_response()
    assert isinstance(message, list) and message[:2] == [b"message", b"__redis__:invalidate"]
    keys = message[2]
    assert isinstance(keys, list)
    return keys


class TestTrackedCalls:
    def test_only_a_call_sent_tracked_tracks_its_queue(self, on: Target) -> None:
        """A round of an untracked call and a tracked one, on a connection that tracks on
        request: the same replies as ever, and only the tracked queue's write is told."""
        c = on.client
        lease(c, A, b"a1", attempts="1")
        lease(c, B, b"b1", attempts="1")
        with invalidations(on.server.port) as (sub, own_id):
            client = tracking_on_request(on.server.port, own_id)
            b, a = sweep_round(
                client, on.executor, [Call(B, 5, 100), Call(A, 5, 100, tracked=True)]
            )
            assert (a.reply, b.reply) == (SweepReply((b"a1",), ()), SweepReply((b"b1",), ()))
            assert not (a.untracked or b.untracked)
            assert numbers(a.depths) == numbers(b.depths) == (0, 0, 1, 0, 0)
            c.zadd(B.active, {b"b2": 1})
            c.zadd(A.active, {b"a2": 1})
            # Told in the order written: B's write, had it been tracked, would come first.
            assert first_invalidated(sub) == [A.active.encode()]

    def test_an_idle_brief_round_tracks_nothing(self, on: Target) -> None:
        """Brief calls that find nothing due, untracked: the server's tracking table stays
        empty (Redis 7.0 entered a script's five keys in it at each call of a tracking
        connection)."""
        lease(on.client, A, b"a1", deadline_ms=now_ms() + FUTURE_OFFSET_MS, attempts="1")
        with invalidations(on.server.port) as (_, own_id):
            client = tracking_on_request(on.server.port, own_id)
            calls = [Call(A, 5, 100, brief=True), Call(B, 5, 100, brief=True)]
            for _ in range(3):
                assert [
                    r.due_next_ms is not None for r in sweep_round(client, on.executor, calls)
                ] == [
                    True,
                    False,
                ]
            assert tracked_keys(on.client) == 0
            sweep_round(client, on.executor, [Call(A, 5, 100, brief=True, tracked=True)])
            assert tracked_keys(on.client) >= 1

    def test_a_refused_caching_is_that_call_untracked(self, on: Target) -> None:
        """CLIENT CACHING refused (a connection that does not track on request): the call runs
        as ever, marked untracked; the call beside it is untouched."""
        c = on.client
        lease(c, A, b"a1", attempts="1")
        lease(c, B, b"b1", attempts="1")
        a, b = sweep_round(c, on.executor, [Call(A, 5, 100, tracked=True), Call(B, 5, 100)])
        assert (a.reply, b.reply) == (SweepReply((b"a1",), ()), SweepReply((b"b1",), ()))
        assert (a.untracked, b.untracked) == (True, False)

    def test_a_lost_script_is_sent_again_tracked(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """NOSCRIPT on a tracked call: loaded, sent again behind its CLIENT CACHING yes, and the
        queue tracked."""
        lease(r, A, b"a1", attempts="1")
        r.script_flush()
        with invalidations(redis_server.port) as (sub, own_id):
            client = tracking_on_request(redis_server.port, own_id)
            [a] = sweep_round(client, NATIVE, [Call(A, 5, 100, tracked=True)])
            assert (a.reply, a.untracked) == (SweepReply((b"a1",), ()), False)
            r.zadd(A.active, {b"a2": 1})
            assert A.active.encode() in first_invalidated(sub)


class TestPackedRound:
    def test_resp_is_the_wire_format(self) -> None:
        """A command packs as RESP's array of bulk strings; numbers as text, bytes as they are."""
        packed_command = resp(["EVALSHA", "ab", 4, b"k\xff"])
        assert packed_command == b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n4\r\n$2\r\nk\xff\r\n"

    def test_a_changed_call_is_packed_anew(self, r: redis.Redis) -> None:
        """Calls that differ in their queue's name alone share a shape; a new limit is a new
        shape, and each round takes what its calls say."""
        due(r, A, 5)
        due(r, B, 5)
        packed = Packed()
        first = [Call(A, 2, 1), Call(B, 2, 1)]
        assert [packed.sweep(NATIVE, call) for call in first] == [
            resp(c.args(NATIVE)) for c in first
        ]
        assert len(packed) == 1
        assert [len(x.reply.recovered) for x in sweep_round(r, NATIVE, first, packed)] == [1, 1]  # type: ignore[union-attr]
        again = [Call(A, 2, 3), Call(B, 2, 3)]
        assert packed.sweep(NATIVE, again[0]) != packed.sweep(NATIVE, first[0])
        results = sweep_round(r, NATIVE, again, packed)
        assert [len(x.reply.recovered) for x in results] == [3, 3]  # type: ignore[union-attr]
        assert [x.expired_left for x in results] == [1, 1]
        assert len(packed) == 2

    def test_each_size_of_a_call_is_one_shape(self) -> None:
        """A queue woken at its deadline goes in rounds of several sizes, and in its tick's
        round between them: each size is one shape, whatever the queues."""
        packed = Packed()
        for limit in (1000, 333, 1000, 333):
            for n in range(100):
                call = Call(QueueKeys(f"q{n:03}"), 2, limit)
                assert packed.sweep(NATIVE, call) == resp(call.args(NATIVE))
        assert len(packed) == 2

    @pytest.mark.parametrize(
        ("queue", "root"),
        [("é-ü", "emq"), ("q", "r\x00\x00t"), ("q\x00", "emq"), ("x", "r\x00")],
    )
    def test_any_name_and_root_pack_as_resp(self, queue: str, root: str) -> None:
        """Names of any bytes and length, and a root holding the shapes' placeholder (packed
        whole, each time), pack as the call's RESP, on either executor, brief or not, and so do
        their probes."""
        for executor in (NATIVE, SCRIPT):
            for brief in (False, True):
                call = Call(QueueKeys(queue, root), 1, 7, 99, 10, brief=brief)
                packed = Packed()
                for _ in range(2):  # packed, then from its shape (or whole again)
                    assert packed.sweep(executor, call) == resp(call.args(executor))
                    assert packed.probe(call) == resp(call.probe_args())

    def test_a_lost_sweep_script_in_a_round(self, r: redis.Redis) -> None:
        """A round whose script the server lost is loaded and sent again: each verb runs once."""
        due(r, A, 1)
        due(r, B, 1)
        r.script_flush()
        r.config_resetstat()
        results = sweep_round(r, NATIVE, [Call(A, 2, 100), Call(B, 2, 100)])
        assert [x.reply for x in results] == [SweepReply((b"j0",), ())] * 2
        assert commands_called(r, "emq.stalled.check") == 2
        assert commands_called(r, "evalsha") == 4

    def test_the_connection_serves_the_next_round(self, r: redis.Redis) -> None:
        """After a round with an error reply the pooled connection answers the next round."""
        due(r, A, 1)
        r.hset(A.job(b"j0"), "group", "g")
        due(r, B, 1)
        [refused, fine] = sweep_round(r, NATIVE, [Call(A, 2, 100), Call(B, 2, 100)])
        assert isinstance(refused.reply, SweepError) and fine.reply == SweepReply((b"j0",), ())
        assert [x.reply for x in sweep_round(r, NATIVE, [Call(B, 2, 1), Call(B, 2, 1)])] == [
            SweepReply(),
            SweepReply(),
        ]
        assert r.ping()

    def test_an_unreachable_server_raises(self) -> None:
        """A round to a server that does not answer raises the connection error."""
        client = connect("redis://127.0.0.1:1/0", socket_timeout=1.0)
        with pytest.raises(redis.ConnectionError):
            sweep_round(client, NATIVE, [Call(A, 2, 100), Call(B, 2, 100)])


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def refusal(result: CallResult) -> tuple[Reason | None, str | None]:
    """A refused call's reason and text; (None, None) for a reply."""
    error = result.reply
    return (error.reason, error.message) if isinstance(error, SweepError) else (None, None)


class TestBriefCalls:
    """A brief call that finds nothing due replies after one read, as the verb would (it selects
    nothing, writes nothing); any other brief call is the whole call."""

    def test_the_scripts_idle_reply_reads_one_lease_and_writes_nothing(self, on: Target) -> None:
        """The script on its own (a probe that could not say, a call in flight), nothing due:
        the verb's empty verdict, the server's clock and the earliest deadline (an empty active
        set: neither, the clock unread); no INFO, no verb, no count, the keyspace byte for byte
        as it was."""
        c = on.client
        deadline = now_ms() + FUTURE_OFFSET_MS
        lease(c, A, b"later", deadline, attempts="1")
        before = dump_all(c)
        on.executor.prepare(c)
        c.config_resetstat()
        idle, empty = (
            result_of(call, command(c, *call.args(on.executor)))
            for call in (Call(A, 1, 100, brief=True), Call(B, 1, 100, brief=True))
        )
        assert (idle.reply, empty.reply) == (SweepReply(), SweepReply())
        assert idle.depths is not None and empty.depths is not None
        assert (idle.depths.run_id, idle.depths.jobs, idle.depths.failed) == (None, None, None)
        assert (idle.depths.expired, idle.depths.earliest_ms) == (0, float(deadline))
        assert (empty.depths.earliest_ms, empty.depths.now_ms) == (None, 0)
        assert abs(idle.depths.now_ms - now_ms()) < 60_000
        assert idle.due_next_ms == deadline and not keeps_draining(idle)
        assert empty.due_next_ms is None and not keeps_draining(empty)
        called = ("info", "zcard", "zcount", "hget", "emq.stalled.check", "zrange", "time")
        assert [commands_called(c, name) for name in called] == [0, 0, 0, 0, 0, 2, 1]
        assert dump_all(c) == before

    def test_an_idle_round_is_a_read_a_queue(self, on: Target) -> None:
        """A round of a whole call and idle brief ones: each idle queue costs one ZRANGE, judged
        by the whole call's clock (read after it); the replies are the script's brief ones, the
        keyspace byte for byte as it was."""
        c = on.client
        deadline = now_ms() + FUTURE_OFFSET_MS
        lease(c, A, b"later", deadline, attempts="1")
        lease(c, C, b"later", deadline, attempts="1")
        before = dump_all(c)
        on.executor.prepare(c)
        c.config_resetstat()
        calls = [Call(C, 1, 100), Call(A, 1, 100, brief=True), Call(B, 1, 100, brief=True)]
        whole, idle, empty = sweep_round(c, on.executor, calls)
        assert whole.depths is not None and whole.depths.run_id == run_id(c)
        clock = whole.depths.now_ms
        assert (idle.reply, idle.depths) == (SweepReply(), Depths.brief(clock, b"%d" % deadline))
        assert (empty.reply, empty.depths) == (SweepReply(), Depths.brief(0, None))
        assert commands_called(c, "evalsha") == 1
        assert dump_all(c) == before

    def test_a_probe_that_cannot_say_goes_as_its_script(self, on: Target) -> None:
        """No whole call in the round (no clock to judge a deadline by), or a lease due: the
        call goes as its script, which sweeps what is due and replies whole; an empty active set
        needs no clock."""
        c = on.client
        deadline = now_ms() + FUTURE_OFFSET_MS
        lease(c, A, b"later", deadline, attempts="1")
        on.executor.prepare(c)
        c.config_resetstat()
        idle, empty = sweep_round(
            c, on.executor, [Call(A, 1, 100, brief=True), Call(B, 1, 100, brief=True)]
        )
        assert idle.depths is not None and idle.depths.earliest_ms == float(deadline)
        assert idle.depths.now_ms > 0 and empty.depths == Depths.brief(0, None)
        assert commands_called(c, "evalsha") == 1
        lease(c, B, b"due", attempts="1")
        c.config_resetstat()
        _, due = sweep_round(c, on.executor, [Call(A, 1, 100), Call(B, 2, 100, brief=True)])
        assert due.reply == SweepReply((b"due",), ())
        assert due.depths is not None and due.depths.run_id == run_id(c)
        assert commands_called(c, "evalsha") == 2
        assert c.zscore(B.pending, b"due") is not None

    def test_a_user_without_zrange_is_refused_by_the_script(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A user who may not ZRANGE: each probe refused, sent again as its script, which
        refuses as the whole call does, naming the command; nothing written."""
        lease(r, A, b"later", now_ms() + FUTURE_OFFSET_MS, attempts="1")
        lease(r, C, b"later", now_ms() + FUTURE_OFFSET_MS, attempts="1")
        before = dump_all(r)
        r.acl_setuser(
            "nozrange", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-zrange"]
        )
        url = redis_server.url.replace("redis://", "redis://nozrange:pw@")
        client = connect(url, socket_timeout=10.0)
        NATIVE.prepare(client)
        results = sweep_round(
            client,
            NATIVE,
            [Call(C, 1, 100), Call(A, 1, 100, brief=True), Call(B, 1, 100, brief=True)],
        )
        reasons = {refusal(x)[0] for x in results}
        assert reasons == {Reason.NOPERM}
        assert all("'zrange'" in str(x.reply) for x in results)
        assert dump_all(r) == before

    def test_a_server_gone_before_the_second_round_trip(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The server dies between the two round trips: the first's sweeps stand (counted), the
        calls sent again fail as unreachable; nothing raises."""
        with RedisServer(tmp_path) as server:
            c = server.client()
            lease(c, C, b"due", attempts="1")
            lease(c, A, b"due", attempts="1")
            client = connect(server.url, socket_timeout=5.0)
            NATIVE.prepare(client)
            lend, lent = client.connection_pool.get_connection, []

            def lend_then_die() -> Connection:
                lent.append(1)
                if len(lent) == 2 and server.process is not None:
                    server.process.kill()
                    server.process.wait()
                return lend()

            monkeypatch.setattr(client.connection_pool, "get_connection", lend_then_die)
            whole, probed_first = sweep_round(
                client, NATIVE, [Call(C, 2, 100), Call(A, 2, 100, brief=True)]
            )
        assert whole.reply == SweepReply((b"due",), ())
        assert isinstance(probed_first.reply, SweepError)
        assert probed_first.reply.reason is Reason.CONNECTION

    @pytest.mark.parametrize(
        ("reply", "clock", "said"),
        [
            ([], None, Depths.brief(0, None)),
            ([], 5, Depths.brief(0, None)),
            ([b"j", b"1001"], 1000, Depths.brief(1000, b"1001")),
            ([[b"j", 1001.0]], 1000, Depths.brief(1000, b"1001")),
            ([[b"j", 1000.0]], 1000, None),
            ([b"j", b"inf"], 1000, Depths.brief(1000, b"inf")),
            ([b"j", b"1000"], 1000, None),
            ([b"j", b"-inf"], 1000, None),
            ([b"j", b"1001"], None, None),
            (redis.ResponseError("WRONGTYPE"), 1000, None),
            ([b"j"], 1000, None),
        ],
    )
    def test_a_probe_says_only_nothing_due(
        self, reply: object, clock: int | None, said: Depths | None
    ) -> None:
        """A probe is the whole answer for an empty active set, or a first deadline after the
        clock read after it; a deadline at the clock is due (the verb takes a deadline at or
        before its now), and no clock or an odd reply leaves it to the script."""
        result = probed(Call(A, 1, 100, brief=True), reply, clock)
        assert (result and result.depths) == said
        assert result is None or result.reply == SweepReply()

    def test_a_brief_call_with_a_lease_due_is_the_whole_call(self, on: Target) -> None:
        """A lease due: the brief call sweeps and replies as the whole call does, counts and
        run_id included."""
        c = on.client
        lease(c, A, b"due", attempts="1")
        lease(c, A, b"later", now_ms() + FUTURE_OFFSET_MS, attempts="1")
        lease(c, B, b"due", attempts="1")
        lease(c, B, b"later", now_ms() + FUTURE_OFFSET_MS, attempts="1")
        [brief] = sweep_round(c, on.executor, [Call(A, 2, 100, brief=True)])
        [whole] = sweep_round(c, on.executor, [Call(B, 2, 100)])
        assert brief.reply == whole.reply == SweepReply((b"due",), ())
        assert numbers(brief.depths) == numbers(whole.depths) == (0, 1, 1, 0, 0)
        assert brief.depths is not None and brief.depths.run_id == run_id(c)

    @pytest.mark.parametrize("args", [(0, 100), (1, 0), (-1, 100)])
    def test_a_brief_call_refuses_as_the_verb_does(self, on: Target, args: tuple[int, int]) -> None:
        """Arguments the verb refuses are refused by a brief call too, with the verb's text,
        though nothing is due; so is an active set of the wrong type."""
        c = on.client
        c.set(B.active, "not a zset")
        before = dump_all(c)
        max_stalled, limit = args
        brief, whole = (
            sweep_round(c, on.executor, [Call(A, max_stalled, limit, brief=b)])[0]
            for b in (True, False)
        )
        assert refusal(brief) == refusal(whole) != (None, None)
        [wrong, wrong_whole] = (
            sweep_round(c, on.executor, [Call(B, 1, 100, brief=b)])[0] for b in (True, False)
        )
        assert refusal(wrong) == refusal(wrong_whole) == (Reason.WRONGTYPE, WRONGTYPE)
        assert dump_all(c) == before
