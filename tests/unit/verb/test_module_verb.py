"""The reference module's EMQ.STALLED.CHECK, raw, against a real redis-server (the verb:
docs/keyspace.md)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import (
    BAD_NUMBERS,
    FUTURE_OFFSET_MS,
    PAST_MS,
    dump_all,
    hash_of,
    lease,
    members,
    now_ms,
    run_id,
)
from tests.support.servers import RedisServer

Q = QueueKeys("q")
LLONG_MAX = 9_223_372_036_854_775_807
WRONGTYPE = b"WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = b"ERR hash value is not an integer"
OVERFLOW = b"ERR increment or decrement would overflow"

VERB = "emq.stalled.check"
ARGS = (Q.active, Q.pending, Q.dead, Q.prefix, 1, 100)

Reply = list[list[bytes]]


def check(
    r: redis.Redis, max_stalled: object = 1, limit: object = 100, keys: QueueKeys = Q
) -> Reply:
    """Sends the verb for queue `keys` and returns its reply."""
    reply = r.execute_command(  # type: ignore[no-untyped-call]
        "EMQ.STALLED.CHECK", keys.active, keys.pending, keys.dead, keys.prefix, max_stalled, limit
    )
    assert isinstance(reply, list)
    return reply


def raw_error(r: redis.Redis, *args: object) -> bytes:
    """Sends one command on a bare socket; returns its error line exactly as sent."""
    kwargs = r.connection_pool.connection_kwargs
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    wire = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
    with socket.create_connection((kwargs["host"], kwargs["port"]), timeout=10) as sock:
        sock.sendall(wire)
        line = b""
        while not line.endswith(b"\r\n"):
            line += sock.recv(4096)
    assert line.startswith(b"-"), line
    return line[1:-2]


def refused(r: redis.Redis, max_stalled: object = 1, limit: object = 100) -> bytes:
    """Sends the verb expecting a refusal; asserts the keyspace is byte-for-byte unchanged."""
    before = dump_all(r)
    error = raw_error(
        r, "EMQ.STALLED.CHECK", Q.active, Q.pending, Q.dead, Q.prefix, max_stalled, limit
    )
    assert dump_all(r) == before
    return error


def row(r: redis.Redis, job_id: str) -> dict[bytes, bytes]:
    return hash_of(r, Q.job(job_id))


class TestSpecTable:
    """The cases of docs/keyspace.md#what-a-sweep-does, one test a row (max_stalled 1 unless
    said)."""

    def test_earlier_epoch_is_exempt(self, r: redis.Redis) -> None:
        """A lease of an earlier process goes to pending uncounted, listed as recovered."""
        lease(r, Q, b"j", attempts=1, lease_epoch="0" * 40)
        assert check(r) == [[b"j"], []]
        assert row(r, "j") == {b"attempts": b"1", b"lease_epoch": b"0" * 40, b"state": b"pending"}
        assert r.zscore(Q.pending, "j") == 0
        assert not r.exists(Q.active)

    def test_current_epoch_is_counted_to_death(self, r: redis.Redis) -> None:
        """A lease of this process spends its stall budget: stalled 1 at max 1 is dead."""
        lease(r, Q, b"j", attempts=1, lease_epoch=run_id(r))
        assert check(r) == [[], [b"j"]]
        assert row(r, "j") == {
            b"attempts": b"1",
            b"lease_epoch": run_id(r),
            b"stalled": b"1",
            b"state": b"dead",
            b"last_error": b"stalled",
        }
        assert r.zscore(Q.dead, "j") == 0
        assert r.hget(Q.metrics_failed, "count") == b"1"

    def test_no_epoch_is_counted(self, r: redis.Redis) -> None:
        """A row without lease_epoch is counted like one of this process."""
        lease(r, Q, b"j", attempts=1)
        assert check(r) == [[], [b"j"]]
        assert row(r, "j")[b"stalled"] == b"1"
        assert members(r, Q.dead) == [b"j"]
        assert r.hget(Q.metrics_failed, "count") == b"1"

    def test_budget_left_is_recovered(self, r: redis.Redis) -> None:
        """At max_stalled 3 a lease with stalled 1 is recovered with stalled 2."""
        lease(r, Q, b"j", attempts=1, stalled=1, lease_epoch=run_id(r))
        assert check(r, max_stalled=3) == [[b"j"], []]
        assert row(r, "j")[b"stalled"] == b"2"
        assert row(r, "j")[b"state"] == b"pending"
        assert members(r, Q.pending) == [b"j"]
        assert not r.exists(Q.dead, Q.metrics_failed)

    def test_ghost_is_removed_and_listed_nowhere(self, r: redis.Redis) -> None:
        """An id without a row leaves active, is listed nowhere and gets no row."""
        lease(r, Q, b"ghost")
        assert check(r) == [[], []]
        assert r.keys("*") == []

    def test_lane_row_refuses_everything(self, r: redis.Redis) -> None:
        """A lane row among ordinary rows refuses the call; nothing is written."""
        lease(r, Q, b"a", PAST_MS, attempts=1)
        lease(r, Q, b"lane", PAST_MS + 1, attempts=1, group="g")
        lease(r, Q, b"b", PAST_MS + 2, attempts=1)
        assert refused(r) == b"EMQLANE job lane is a lane row"

    def test_stalled_not_an_integer(self, r: redis.Redis) -> None:
        """stalled = abc on a counted row is HINCRBY's refusal; nothing written."""
        lease(r, Q, b"j", attempts=1, stalled="abc")
        assert refused(r) == NOT_INTEGER

    @pytest.mark.parametrize("bad", ["0", "x", "-1"])
    def test_bad_arguments(self, r: redis.Redis, bad: str) -> None:
        """max_stalled and limit of 0, x or -1 are refused; nothing written."""
        lease(r, Q, b"j", attempts=1)
        assert refused(r, max_stalled=bad) == b"ERR max_stalled must be a positive integer"
        assert refused(r, limit=bad) == b"ERR limit must be a positive integer"


class TestRefusals:
    """Every refusal replies its exact text and leaves the keyspace byte-for-byte unchanged."""

    @pytest.mark.parametrize("argc", [1, 6, 8])
    def test_arity(self, r: redis.Redis, argc: int) -> None:
        """A wrong argument count gets the server's arity error, named in lowercase."""
        lease(r, Q, b"j", attempts=1)
        before = dump_all(r)
        args = [Q.active, Q.pending, Q.dead, Q.prefix, "1", "1", "1"][: argc - 1]
        error = raw_error(r, "EMQ.STALLED.CHECK", *args)
        assert error == b"ERR wrong number of arguments for 'emq.stalled.check' command"
        assert dump_all(r) == before

    @pytest.mark.parametrize("bad", BAD_NUMBERS)
    def test_max_stalled(self, r: redis.Redis, bad: str) -> None:
        """max_stalled follows Redis' strict integer syntax and must be at least 1."""
        lease(r, Q, b"j", attempts=1)
        assert refused(r, max_stalled=bad) == b"ERR max_stalled must be a positive integer"

    @pytest.mark.parametrize("bad", BAD_NUMBERS)
    def test_limit(self, r: redis.Redis, bad: str) -> None:
        """limit follows Redis' strict integer syntax and must be at least 1."""
        lease(r, Q, b"j", attempts=1)
        assert refused(r, limit=bad) == b"ERR limit must be a positive integer"

    def test_max_stalled_checked_before_limit(self, r: redis.Redis) -> None:
        """With both arguments bad, max_stalled is named."""
        error = refused(r, max_stalled="0", limit="0")
        assert error == b"ERR max_stalled must be a positive integer"

    def test_largest_arguments_accepted(self, r: redis.Redis) -> None:
        """2^63-1 is a valid max_stalled and limit."""
        lease(r, Q, b"j", attempts=1)
        assert check(r, max_stalled=LLONG_MAX, limit=LLONG_MAX) == [[b"j"], []]

    def test_active_wrong_type(self, r: redis.Redis) -> None:
        """An active key that is not a zset is the standard WRONGTYPE."""
        r.set(Q.active, "x")
        assert refused(r) == WRONGTYPE

    def test_arguments_checked_before_active(self, r: redis.Redis) -> None:
        """A bad argument is named even when active has the wrong type."""
        r.set(Q.active, "x")
        assert refused(r, limit="x") == b"ERR limit must be a positive integer"

    def test_row_not_a_hash(self, r: redis.Redis) -> None:
        """A row that is not a hash names the id; earlier members are not written."""
        lease(r, Q, b"a", PAST_MS, attempts=1)
        lease(r, Q, b"b", PAST_MS + 1)
        r.set(Q.job("b"), "string")
        assert refused(r) == b"WRONGTYPE job b is not a hash"

    def test_first_failing_member_wins(self, r: redis.Redis) -> None:
        """Members are judged in selection order: the first refusal is the one replied."""
        lease(r, Q, b"a", PAST_MS, stalled="abc")
        lease(r, Q, b"b", PAST_MS + 1, group="g")
        assert refused(r) == NOT_INTEGER

    def test_stalled_at_maximum(self, r: redis.Redis) -> None:
        """stalled 2^63-1 cannot be incremented: HINCRBY's overflow text."""
        lease(r, Q, b"j", attempts=1, stalled=LLONG_MAX)
        assert refused(r, max_stalled=LLONG_MAX) == OVERFLOW

    def test_exempt_stalled_not_judged(self, r: redis.Redis) -> None:
        """An exempt member's stalled value is not judged, even when it is not an integer."""
        lease(r, Q, b"j", stalled="abc", lease_epoch="old")
        assert check(r) == [[b"j"], []]
        assert row(r, "j")[b"stalled"] == b"abc"

    def test_pending_wrong_type(self, r: redis.Redis) -> None:
        """A recovered member needs pending to be a zset or missing."""
        lease(r, Q, b"j", attempts=1)
        r.set(Q.pending, "x")
        assert refused(r, max_stalled=5) == WRONGTYPE

    def test_pending_unchecked_without_recovery(self, r: redis.Redis) -> None:
        """When every member dies, pending is not used and not checked."""
        lease(r, Q, b"j", attempts=1)
        r.set(Q.pending, "x")
        assert check(r) == [[], [b"j"]]

    def test_dead_wrong_type(self, r: redis.Redis) -> None:
        """A dead member needs dead to be a zset or missing."""
        lease(r, Q, b"j", attempts=1)
        r.hset(Q.dead, "x", "y")
        assert refused(r) == WRONGTYPE

    def test_metrics_wrong_type(self, r: redis.Redis) -> None:
        """A dead member needs the metric hash to be a hash or missing."""
        lease(r, Q, b"j", attempts=1)
        r.zadd(Q.metrics_failed, {"x": 1})
        assert refused(r) == WRONGTYPE

    def test_metrics_count_not_an_integer(self, r: redis.Redis) -> None:
        """A metric count HINCRBY would refuse refuses the call."""
        lease(r, Q, b"j", attempts=1)
        r.hset(Q.metrics_failed, "count", "many")
        assert refused(r) == NOT_INTEGER

    def test_metrics_count_overflow(self, r: redis.Redis) -> None:
        """count + dead past 2^63-1 refuses the call."""
        lease(r, Q, b"a", PAST_MS, attempts=1)
        lease(r, Q, b"b", PAST_MS + 1, attempts=1)
        r.hset(Q.metrics_failed, "count", LLONG_MAX - 1)
        assert refused(r) == OVERFLOW

    def test_target_checks_in_order(self, r: redis.Redis) -> None:
        """pending is checked before the metric count."""
        lease(r, Q, b"a", PAST_MS, attempts=1, stalled=5)
        lease(r, Q, b"b", PAST_MS + 1, attempts=1)
        r.set(Q.pending, "x")
        r.hset(Q.metrics_failed, "count", "many")
        assert refused(r, max_stalled=3) == WRONGTYPE


class TestSelection:
    """Which leases are taken, in which order, and what is written for them."""

    def test_empty_active(self, r: redis.Redis) -> None:
        """A missing active key replies two empty arrays and writes nothing."""
        assert check(r) == [[], []]
        assert r.keys("*") == []

    def test_future_leases_untouched(self, r: redis.Redis) -> None:
        """Leases whose deadline is ahead stay in active; their rows are not read."""
        lease(r, Q, b"later", now_ms() + FUTURE_OFFSET_MS, group="g")
        before = dump_all(r)
        assert check(r) == [[], []]
        assert dump_all(r) == before

    def test_order_is_score_then_member(self, r: redis.Redis) -> None:
        """Replies list ids by score, ties by member bytes, split into recovered and dead."""
        for job_id, deadline in [(b"c", 5), (b"b", 5), (b"a", 9), (b"d", 1)]:
            lease(r, Q, job_id, PAST_MS + deadline, stalled=1 if job_id in (b"a", b"c") else 0)
        assert check(r, max_stalled=2) == [[b"d", b"b"], [b"c", b"a"]]
        assert members(r, Q.pending) == [b"b", b"d"]

    def test_limit_takes_the_oldest(self, r: redis.Redis) -> None:
        """At most `limit` leases are taken, the earliest deadlines first."""
        for i in range(5):
            lease(r, Q, b"j%d" % i, PAST_MS + i, attempts=1)
        assert check(r, max_stalled=9, limit=2) == [[b"j0", b"j1"], []]
        assert members(r, Q.active) == [b"j2", b"j3", b"j4"]

    def test_just_expired_is_taken(self, r: redis.Redis) -> None:
        """A deadline a moment ago is expired."""
        lease(r, Q, b"j", now_ms() - 5, attempts=1)
        assert check(r, max_stalled=2) == [[b"j"], []]

    def test_negative_stalled_counts_up(self, r: redis.Redis) -> None:
        """A negative stalled is an integer like any other: -5 becomes -4."""
        lease(r, Q, b"j", stalled=-5)
        assert check(r) == [[b"j"], []]
        assert row(r, "j")[b"stalled"] == b"-4"

    def test_only_spec_fields_written(self, r: redis.Redis) -> None:
        """attempts, failures, lease_epoch and foreign fields are untouched."""
        lease(
            r, Q, b"j", attempts=7, failures=2, lease_epoch=run_id(r), payload="p", state="active"
        )
        check(r, max_stalled=5)
        assert row(r, "j") == {
            b"attempts": b"7",
            b"failures": b"2",
            b"lease_epoch": run_id(r),
            b"payload": b"p",
            b"state": b"pending",
            b"stalled": b"1",
        }

    def test_metric_accumulates(self, r: redis.Redis) -> None:
        """The metric count grows by the number of dead."""
        r.hset(Q.metrics_failed, mapping={"count": 5, "other": "x"})
        for job_id in (b"a", b"b", b"c"):
            lease(r, Q, job_id, attempts=1)
        assert check(r) == [[], [b"a", b"b", b"c"]]
        assert r.hgetall(Q.metrics_failed) == {b"count": b"8", b"other": b"x"}

    def test_ghost_among_rows(self, r: redis.Redis) -> None:
        """A ghost is removed and not recreated; the others are processed."""
        lease(r, Q, b"a", PAST_MS, attempts=1)
        lease(r, Q, b"ghost", PAST_MS + 1)
        lease(r, Q, b"b", PAST_MS + 2, attempts=1)
        assert check(r, max_stalled=2) == [[b"a", b"b"], []]
        assert not r.exists(Q.job("ghost"))
        assert members(r, Q.pending) == [b"a", b"b"]

    def test_active_kept_when_not_emptied(self, r: redis.Redis) -> None:
        """Active keeps its unexpired leases."""
        lease(r, Q, b"a", attempts=1)
        lease(r, Q, b"b", now_ms() + FUTURE_OFFSET_MS, attempts=1)
        check(r, max_stalled=2)
        assert members(r, Q.active) == [b"b"]

    def test_active_deleted_when_emptied(self, r: redis.Redis) -> None:
        """An active key emptied by the sweep is gone, as ZREM leaves it."""
        lease(r, Q, b"a", attempts=1)
        check(r, max_stalled=2)
        assert not r.exists(Q.active)

    def test_binary_ids(self, r: redis.Redis) -> None:
        """Ids are bytes: the row key is prefix + job: + the raw id."""
        job_id = b"\x00\xff id\r\n"
        lease(r, Q, job_id, attempts=1)
        assert check(r, max_stalled=2) == [[job_id], []]
        assert r.hget(Q.job(job_id), "stalled") == b"1"

    def test_every_verdict_at_once(self, r: redis.Redis) -> None:
        """Ghost, exempt, recovered and dead in one call: each goes where §3 says."""
        lease(r, Q, b"g", PAST_MS)
        lease(r, Q, b"e", PAST_MS + 1, lease_epoch="old", stalled=9)
        lease(r, Q, b"r", PAST_MS + 2, lease_epoch=run_id(r))
        lease(r, Q, b"d", PAST_MS + 3, stalled=1)
        assert check(r, max_stalled=2) == [[b"e", b"r"], [b"d"]]
        assert members(r, Q.pending) == [b"e", b"r"]
        assert members(r, Q.dead) == [b"d"]
        assert row(r, "e")[b"stalled"] == b"9"

    def test_keyspace_events(self, r: redis.Redis) -> None:
        """The writes fire the keyspace events a scripted version would."""
        lease(r, Q, b"g", PAST_MS)
        lease(r, Q, b"r", PAST_MS + 1, attempts=1)
        lease(r, Q, b"d", PAST_MS + 2, stalled=1)
        r.config_set("notify-keyspace-events", "KEA")
        try:
            with cast(redis.client.PubSub, cast(Callable[[], Any], r.pubsub)()) as sub:
                sub.psubscribe("__keyevent@0__:*")
                check(r, max_stalled=2)
                r.ping()
                events = collect_events(sub)
        finally:
            r.config_set("notify-keyspace-events", "")
        assert events == [
            (b"zrem", Q.active.encode()),
            (b"zrem", Q.active.encode()),
            (b"zrem", Q.active.encode()),
            (b"del", Q.active.encode()),
            (b"hset", Q.job("r")),
            (b"hset", Q.job("d")),
            (b"zadd", Q.pending.encode()),
            (b"zadd", Q.dead.encode()),
            (b"hincrby", Q.metrics_failed.encode()),
        ]


def collect_events(sub: redis.client.PubSub) -> list[tuple[bytes, bytes]]:
    """Drains pattern messages from `sub` until it has been quiet for a moment."""
    events: list[tuple[bytes, bytes]] = []
    while (message := sub.get_message(timeout=0.2)) is not None:
        if message["type"] == "pmessage":
            events.append((message["channel"].split(b":", 1)[1], message["data"]))
    return events


def seed_mixed(r: redis.Redis) -> None:
    """A queue with every verdict and a metric already counting."""
    epoch = run_id(r)
    r.hset(Q.metrics_failed, "count", 3)
    lease(r, Q, b"ghost", PAST_MS)
    lease(r, Q, b"exempt", PAST_MS + 1, attempts=1, lease_epoch="earlier", stalled=4)
    lease(r, Q, b"recovered", PAST_MS + 2, attempts=2, lease_epoch=epoch)
    lease(r, Q, b"dead", PAST_MS + 3, attempts=3, lease_epoch=epoch, stalled=1)
    lease(r, Q, b"later", now_ms() + FUTURE_OFFSET_MS, attempts=1, lease_epoch=epoch)
    for i in range(150):
        lease(r, Q, b"bulk%03d" % i, PAST_MS + 10 + i, attempts=1, stalled=i % 3)


@pytest.fixture
def primary(server_kind: str, tmp_path: Path) -> Iterator[RedisServer]:
    """A module server of this test's own, for replicas to attach to."""
    with RedisServer(tmp_path / "primary", kind=server_kind) as server:
        yield server


class TestReplication:
    """A replica without the module replays the effects to the primary's exact keyspace."""

    @staticmethod
    def wait_link(replica: redis.Redis) -> None:
        """Waits until the replica has synced with its primary."""
        deadline = time.monotonic() + 10
        while replica.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replica never linked"
            time.sleep(0.05)

    def test_replica_matches_primary(self, primary: RedisServer, tmp_path: Path) -> None:
        """After sweeps of every verdict the replica's DUMPs equal the primary's."""
        origin = ("127.0.0.1", primary.port)
        with (
            RedisServer(
                tmp_path / "replica", kind=primary.kind, module=None, replicaof=origin
            ) as replica,
            primary.client() as p,
            replica.client() as rep,
        ):
            self.wait_link(rep)
            seed_mixed(p)
            check(p, max_stalled=2, limit=50)
            check(p, max_stalled=2, limit=1000)
            assert p.execute_command("WAIT", 1, 5000) == 1
            assert dump_all(rep) == dump_all(p)
            assert p.exists(Q.dead, Q.pending, Q.active) == 3


class TestAof:
    """The AOF carries the effects, and a restart's new run_id exempts the old leases."""

    def test_restart_exempts_then_reloads_exactly(self, server_kind: str, tmp_path: Path) -> None:
        """Leases of the previous process return uncounted; the AOF reloads the swept keyspace."""
        with RedisServer(tmp_path / "aof", kind=server_kind, appendonly=True) as server:
            with server.client() as r:
                first = run_id(r)
                for job_id in (b"a", b"b"):
                    lease(r, Q, job_id, attempts=1, stalled=1, lease_epoch=first)
            server.restart()
            with server.client() as r:
                assert run_id(r) != first
                assert check(r, max_stalled=2) == [[b"a", b"b"], []]
                assert row(r, "a") == {
                    b"attempts": b"1",
                    b"stalled": b"1",
                    b"lease_epoch": first,
                    b"state": b"pending",
                }
                seed_mixed(r)
                check(r, max_stalled=2)
                swept = dump_all(r)
            server.restart()
            with server.client() as r:
                assert dump_all(r) == swept


class TestWatch:
    """Only keys the verb writes are signalled as modified to WATCH and client caches."""

    @staticmethod
    def watched_exec_survives(r: redis.Redis, sweep: Callable[[], object]) -> bool:
        """WATCHes the queue's keys, runs `sweep` on another connection, then tries EXEC."""
        with r.pipeline() as pipe:
            pipe.watch(Q.active, Q.pending, Q.dead, Q.metrics_failed, Q.job(b"j"))  # type: ignore[no-untyped-call]
            sweep()
            pipe.multi()
            pipe.ping()
            try:
                pipe.execute()
            except redis.WatchError:
                return False
            return True

    def test_empty_sweep_and_refusal_touch_nothing(self, r: redis.Redis) -> None:
        """A sweep that finds nothing and a refused sweep leave a WATCH intact."""
        lease(r, Q, b"j", now_ms() + FUTURE_OFFSET_MS, attempts=1)
        assert self.watched_exec_survives(r, lambda: check(r))
        lease(r, Q, b"j", PAST_MS, attempts=1, stalled="abc")
        assert self.watched_exec_survives(r, lambda: raw_error(r, "EMQ.STALLED.CHECK", *ARGS))

    def test_sweep_signals_written_keys(self, r: redis.Redis) -> None:
        """A sweep that moves a lease invalidates a WATCH on its keys."""
        lease(r, Q, b"j", attempts=1)
        assert not self.watched_exec_survives(r, lambda: check(r))


class TestCommandInfo:
    """The verb is registered as a write command with keys 1 to 3."""

    def test_flags_and_keys(self, r: redis.Redis) -> None:
        """COMMAND INFO shows write and denyoom, first key 1, last key 3, step 1."""
        reply = r.execute_command("COMMAND", "INFO", VERB)  # type: ignore[no-untyped-call]
        info = reply[VERB]
        assert {"write", "denyoom"} <= set(info["flags"])
        assert (info["first_key_pos"], info["last_key_pos"], info["step_count"]) == (1, 3, 1)
