"""The Lua port of EMQ.STALLED.CHECK on a server without the module (docs/keyspace.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from sweeperd.constants import LLONG_MAX, LLONG_MIN
from sweeperd.keyspace import QueueKeys
from sweeperd.model import NOT_AN_INTEGER, OVERFLOW, WRONGTYPE
from sweeperd.verb.executors import SCRIPT
from sweeperd.verb.replies import Call, SweepReply
from sweeperd.verb.rounds import sweep_round
from sweeperd.verb.scripts import STALLED_CHECK, SWEEP_SCRIPT
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
from tests.support.keyspace_oracle import ARITY, Reply, call

Q = QueueKeys("q")
TWO_TO_53 = 2**53
MAX = str(LLONG_MAX)


@pytest.fixture
def rs(r_plain: redis.Redis) -> Iterator[redis.Redis]:
    """The server without the module, its keyspace empty and the script loaded."""
    STALLED_CHECK.load(r_plain)
    yield r_plain


def check(r: redis.Redis, max_stalled: object = 1, limit: object = 100) -> Reply:
    """One call of the script for queue q: its reply, or its error text."""
    args = [Q.active, Q.pending, Q.dead, Q.prefix, max_stalled, limit]
    return call(r, "EVALSHA", STALLED_CHECK.sha, 3, *map(str, args))


def refused(r: redis.Redis, *argv: object, numkeys: int = 3) -> str:
    """Sends the script expecting a refusal; asserts the keyspace is byte-for-byte unchanged."""
    if not argv:
        argv = (Q.active, Q.pending, Q.dead, Q.prefix, 1, 100)
    before = dump_all(r)
    reply = call(r, "EVALSHA", STALLED_CHECK.sha, numkeys, *map(str, argv))
    assert dump_all(r) == before
    assert isinstance(reply, str), reply
    return reply


def row(r: redis.Redis, job_id: str | bytes) -> dict[bytes, bytes]:
    return hash_of(r, Q.job(job_id))


class TestSpecTable:
    """The cases of docs/keyspace.md#what-a-sweep-does through the script (max_stalled 1
    unless said)."""

    def test_earlier_epoch_is_exempt(self, rs: redis.Redis) -> None:
        """A lease of an earlier process goes to pending uncounted, listed as recovered."""
        lease(rs, Q, b"j", attempts=1, lease_epoch="0" * 40)
        assert check(rs) == ((b"j",), ())
        assert row(rs, "j") == {b"attempts": b"1", b"lease_epoch": b"0" * 40, b"state": b"pending"}
        assert rs.zscore(Q.pending, "j") == 0
        assert not rs.exists(Q.active, Q.dead, Q.metrics_failed)

    def test_current_epoch_is_counted_to_death(self, rs: redis.Redis) -> None:
        """A lease of this process spends its budget: stalled 1 at max 1 is dead and counted."""
        lease(rs, Q, b"j", attempts=1, lease_epoch=run_id(rs))
        assert check(rs) == ((), (b"j",))
        assert row(rs, "j") == {
            b"attempts": b"1",
            b"lease_epoch": run_id(rs),
            b"stalled": b"1",
            b"state": b"dead",
            b"last_error": b"stalled",
        }
        assert rs.zscore(Q.dead, "j") == 0
        assert rs.hget(Q.metrics_failed, "count") == b"1"

    def test_no_epoch_is_counted(self, rs: redis.Redis) -> None:
        """A row without lease_epoch is counted like one of this process."""
        lease(rs, Q, b"j", attempts=1)
        assert check(rs) == ((), (b"j",))
        assert row(rs, "j")[b"stalled"] == b"1"
        assert members(rs, Q.dead) == [b"j"]
        assert rs.hget(Q.metrics_failed, "count") == b"1"

    def test_budget_left_is_recovered(self, rs: redis.Redis) -> None:
        """At max_stalled 3 a lease with stalled 1 is recovered with stalled 2."""
        lease(rs, Q, b"j", attempts=1, stalled=1, lease_epoch=run_id(rs))
        assert check(rs, max_stalled=3) == ((b"j",), ())
        assert row(rs, "j") == {
            b"attempts": b"1",
            b"stalled": b"2",
            b"lease_epoch": run_id(rs),
            b"state": b"pending",
        }
        assert members(rs, Q.pending) == [b"j"]
        assert not rs.exists(Q.dead, Q.metrics_failed)

    def test_ghost_is_removed_and_listed_nowhere(self, rs: redis.Redis) -> None:
        """An id without a row leaves active, is listed nowhere and gets no row."""
        lease(rs, Q, b"ghost")
        assert check(rs) == ((), ())
        assert rs.keys("*") == []

    def test_lane_row_refuses_everything(self, rs: redis.Redis) -> None:
        """A lane row among ordinary ones refuses the call before anything is written."""
        lease(rs, Q, b"a", attempts=1)
        lease(rs, Q, b"lane", attempts=1, group="g")
        lease(rs, Q, b"z", attempts=1)
        assert refused(rs) == "EMQLANE job lane is a lane row"

    def test_stalled_garbage_refuses_everything(self, rs: redis.Redis) -> None:
        """stalled = abc on a counted row is HINCRBY's refusal, and nothing is written."""
        lease(rs, Q, b"a", deadline_ms=PAST_MS - 1, attempts=1)
        lease(rs, Q, b"j", attempts=1, stalled="abc")
        assert refused(rs) == NOT_AN_INTEGER

    @pytest.mark.parametrize("bad", ["0", "x", "-1"])
    def test_bad_budget_and_limit_are_refused(self, rs: redis.Redis, bad: str) -> None:
        """max_stalled or limit 0, x or -1 are refused with the argument's name."""
        lease(rs, Q, b"j", attempts=1)
        assert refused(rs, Q.active, Q.pending, Q.dead, Q.prefix, bad, 1) == (
            "ERR max_stalled must be a positive integer"
        )
        assert refused(rs, Q.active, Q.pending, Q.dead, Q.prefix, 1, bad) == (
            "ERR limit must be a positive integer"
        )


class TestRefusals:
    """Every refusal of docs/keyspace.md#what-a-sweep-does through the script: its text, and
    nothing written."""

    @pytest.mark.parametrize(
        "numkeys, extra", [(3, ("1",)), (3, ("1", "1", "1")), (2, ("1", "1")), (4, ("1", "1"))]
    )
    def test_arity(self, rs: redis.Redis, numkeys: int, extra: tuple[str, ...]) -> None:
        """Three keys and three arguments, or the server's arity error for the verb."""
        lease(rs, Q, b"j", attempts=1)
        argv = (Q.active, Q.pending, Q.dead, Q.prefix, *extra)
        assert refused(rs, *argv, numkeys=numkeys) == ARITY

    @pytest.mark.parametrize("bad", BAD_NUMBERS)
    def test_max_stalled_is_checked_before_limit(self, rs: redis.Redis, bad: str) -> None:
        """A refused max_stalled is named even when the limit is refused too."""
        assert refused(rs, Q.active, Q.pending, Q.dead, Q.prefix, bad, bad) == (
            "ERR max_stalled must be a positive integer"
        )

    @pytest.mark.parametrize("bad", BAD_NUMBERS)
    def test_limit(self, rs: redis.Redis, bad: str) -> None:
        """Anything but 1 … 2^63-1 as the limit is refused with its name."""
        assert refused(rs, Q.active, Q.pending, Q.dead, Q.prefix, 1, bad) == (
            "ERR limit must be a positive integer"
        )

    def test_active_of_wrong_type_before_selection(self, rs: redis.Redis) -> None:
        """An active key that is not a zset is refused even with nothing to select."""
        rs.set(Q.active, "x")
        assert refused(rs) == WRONGTYPE

    def test_row_that_is_not_a_hash(self, rs: redis.Redis) -> None:
        """A row of another type refuses the call, naming the id."""
        lease(rs, Q, b"a", deadline_ms=PAST_MS - 1, attempts=1)
        lease(rs, Q, b"s")
        rs.rpush(Q.job("s"), "x")
        assert refused(rs) == "WRONGTYPE job s is not a hash"

    def test_first_refusal_in_selection_order_wins(self, rs: redis.Redis) -> None:
        """The read pass stops at the first refused member in selection order."""
        lease(rs, Q, b"lane", deadline_ms=PAST_MS + 1, attempts=1, group="g")
        lease(rs, Q, b"bad", deadline_ms=PAST_MS, attempts=1, stalled="x")
        assert refused(rs) == NOT_AN_INTEGER

    def test_stalled_at_the_bound_overflows(self, rs: redis.Redis) -> None:
        """stalled = 2^63-1 cannot take one more: HINCRBY's overflow text."""
        lease(rs, Q, b"j", attempts=1, stalled=LLONG_MAX)
        assert refused(rs) == OVERFLOW

    @pytest.mark.parametrize("value", ["-0", "+1", "01", "", " 1", "1.5", "9223372036854775808"])
    def test_stalled_that_hincrby_refuses(self, rs: redis.Redis, value: str) -> None:
        """A stalled value outside Redis' strict integer form is not an integer."""
        lease(rs, Q, b"j", attempts=1, stalled=value)
        assert refused(rs) == NOT_AN_INTEGER

    def test_exempt_stalled_is_not_judged(self, rs: redis.Redis) -> None:
        """The stalled value of an exempt member is neither read nor refused."""
        lease(rs, Q, b"j", attempts=1, stalled="abc", lease_epoch="other")
        assert check(rs) == ((b"j",), ())
        assert row(rs, "j")[b"stalled"] == b"abc"

    def test_pending_of_wrong_type_when_recovering(self, rs: redis.Redis) -> None:
        """A pending key that is not a zset refuses a call that recovers something."""
        lease(rs, Q, b"j", attempts=1, lease_epoch="other")
        rs.set(Q.pending, "x")
        assert refused(rs) == WRONGTYPE

    def test_pending_of_wrong_type_is_fine_when_only_dying(self, rs: redis.Redis) -> None:
        """Nothing goes to pending, so a wrong-typed pending key is not looked at."""
        lease(rs, Q, b"j", attempts=1)
        rs.set(Q.pending, "x")
        assert check(rs) == ((), (b"j",))

    @pytest.mark.parametrize("key", [Q.dead, Q.metrics_failed])
    def test_dead_targets_of_wrong_type(self, rs: redis.Redis, key: str) -> None:
        """A dead set or metrics hash of the wrong type refuses a call where a job dies."""
        lease(rs, Q, b"j", attempts=1)
        rs.set(key, "x")
        assert refused(rs) == WRONGTYPE

    def test_dead_targets_are_not_looked_at_without_a_death(self, rs: redis.Redis) -> None:
        """Wrong-typed dead and metrics keys do not stop a call where nobody dies."""
        lease(rs, Q, b"j", attempts=1, lease_epoch="other")
        rs.set(Q.dead, "x")
        rs.rpush(Q.metrics_failed, "x")
        assert check(rs) == ((b"j",), ())

    @pytest.mark.parametrize("count", ["x", "01", "", "-0"])
    def test_metrics_count_that_is_not_an_integer(self, rs: redis.Redis, count: str) -> None:
        """The failed count must parse as HINCRBY would parse it."""
        lease(rs, Q, b"j", attempts=1)
        rs.hset(Q.metrics_failed, "count", count)
        assert refused(rs) == NOT_AN_INTEGER

    def test_metrics_count_overflow_counts_every_death(self, rs: redis.Redis) -> None:
        """count + the number of deaths must stay within 2^63-1."""
        lease(rs, Q, b"a", attempts=1)
        lease(rs, Q, b"b", attempts=1)
        rs.hset(Q.metrics_failed, "count", LLONG_MAX - 1)
        assert refused(rs) == OVERFLOW
        rs.zrem(Q.active, "b")
        assert check(rs) == ((), (b"a",))
        assert rs.hget(Q.metrics_failed, "count") == str(LLONG_MAX).encode()


class TestWideIntegers:
    """64-bit values are exact in the script although Lua numbers are doubles."""

    def test_budget_compared_beyond_the_double(self, rs: redis.Redis) -> None:
        """2^53 + 1 stays below a budget of 2^53 + 2, where doubles would round it up."""
        lease(rs, Q, b"j", attempts=1, stalled=TWO_TO_53)
        assert check(rs, max_stalled=TWO_TO_53 + 2) == ((b"j",), ())
        assert row(rs, "j")[b"stalled"] == str(TWO_TO_53 + 1).encode()

    def test_budget_reached_beyond_the_double(self, rs: redis.Redis) -> None:
        """2^53 + 1 reaches a budget of 2^53 + 1 exactly."""
        lease(rs, Q, b"j", attempts=1, stalled=TWO_TO_53)
        assert check(rs, max_stalled=TWO_TO_53 + 1) == ((), (b"j",))

    def test_stalled_up_to_the_bound(self, rs: redis.Redis) -> None:
        """2^63-2 becomes 2^63-1 and dies at the largest budget."""
        lease(rs, Q, b"j", attempts=1, stalled=LLONG_MAX - 1)
        assert check(rs, max_stalled=LLONG_MAX) == ((), (b"j",))
        assert row(rs, "j")[b"stalled"] == str(LLONG_MAX).encode()

    @pytest.mark.parametrize(
        "before, after",
        [("-5", "-4"), ("-1", "0"), ("-10", "-9"), ("99", "100"), (str(LLONG_MIN), "-" + MAX)],
    )
    def test_increment_as_decimal_strings(self, rs: redis.Redis, before: str, after: str) -> None:
        """stalled + 1 is written as the exact decimal, negatives and carries included."""
        lease(rs, Q, b"j", attempts=1, stalled=before)
        assert check(rs, max_stalled=LLONG_MAX) == ((b"j",), ())
        assert row(rs, "j")[b"stalled"] == after.encode()

    @pytest.mark.parametrize(
        "before, after",
        [
            ("99999999999999", "100000000000000"),  # 14 digits: plain numbers
            ("999999999999999", "1000000000000000"),  # the widest plain value, s one digit wider
            ("1000000000000000", "1000000000000001"),  # 16 digits: decimal strings
            ("9999999999999999", "10000000000000000"),  # 16 to 17 digits, past 2^53
            (str(TWO_TO_53 - 1), str(TWO_TO_53)),
            ("-99999999999999", "-99999999999998"),  # 15 characters with the sign: plain
            ("-100000000000000", "-99999999999999"),  # 16 characters: decimal strings
            ("-999999999999999", "-999999999999998"),
        ],
    )
    def test_increment_across_the_fast_path_bound(
        self, rs: redis.Redis, before: str, after: str
    ) -> None:
        """Values of 15 characters or fewer (plain Lua numbers) and wider ones increment alike."""
        lease(rs, Q, b"j", attempts=1, stalled=before)
        assert check(rs, max_stalled=LLONG_MAX) == ((b"j",), ())
        assert row(rs, "j")[b"stalled"] == after.encode()

    @pytest.mark.parametrize(
        "stalled, max_stalled, died",
        [
            (10**15 - 1, 10**15 - 1, True),
            (10**15 - 1, 10**15, True),  # s = 10^15 on the fast path reaches a 16-digit budget
            (10**15 - 1, 10**15 + 1, False),
            (10**15 - 1, TWO_TO_53, False),
            (10**15 - 1, TWO_TO_53 + 1, False),  # a budget a double rounds down to 2^53
            (10**15 - 1, LLONG_MAX, False),
            (10**15 - 2, 10**15 - 1, True),
            (10**15 - 3, 10**15 - 1, False),
            (TWO_TO_53 - 2, TWO_TO_53 - 1, True),
            (TWO_TO_53 - 2, TWO_TO_53, False),
            (TWO_TO_53 - 1, TWO_TO_53, True),
            (-(10**14) + 1, 1, False),
        ],
    )
    def test_budget_at_the_fast_path_bound(
        self, rs: redis.Redis, stalled: int, max_stalled: int, died: bool
    ) -> None:
        """s >= max_stalled is exact for a plain-number s against budgets wide or near 2^53."""
        lease(rs, Q, b"j", attempts=1, stalled=stalled)
        assert check(rs, max_stalled=max_stalled) == (((), (b"j",)) if died else ((b"j",), ()))
        assert row(rs, "j")[b"stalled"] == str(stalled + 1).encode()

    def test_shared_values_each_move_their_own_row(self, rs: redis.Redis) -> None:
        """Rows sharing a stalled value are judged alike and each gets its own s."""
        for i, stalled in enumerate(["1", "2", "1", str(LLONG_MIN), "2", str(LLONG_MIN)]):
            lease(rs, Q, f"j{i}".encode(), deadline_ms=PAST_MS + i, attempts=1, stalled=stalled)
        assert check(rs, max_stalled=3) == ((b"j0", b"j2", b"j3", b"j5"), (b"j1", b"j4"))
        written = [row(rs, f"j{i}")[b"stalled"] for i in range(6)]
        assert written == [b"2", b"3", b"2", b"-" + MAX.encode(), b"3", b"-" + MAX.encode()]

    def test_refused_value_after_a_shared_one(self, rs: redis.Redis) -> None:
        """A refused value later in selection order refuses the call though earlier rows passed."""
        lease(rs, Q, b"a", deadline_ms=PAST_MS, attempts=1, stalled=1)
        lease(rs, Q, b"b", deadline_ms=PAST_MS + 1, attempts=1, stalled=1)
        lease(rs, Q, b"c", deadline_ms=PAST_MS + 2, attempts=1, stalled="01")
        assert refused(rs, Q.active, Q.pending, Q.dead, Q.prefix, 5, 100) == NOT_AN_INTEGER

    def test_largest_limit_is_taken(self, rs: redis.Redis) -> None:
        """A limit of 2^63-1 is passed to ZRANGEBYSCORE as it came."""
        for i in range(3):
            lease(rs, Q, f"j{i}".encode(), attempts=1, lease_epoch="other")
        assert check(rs, limit=LLONG_MAX) == ((b"j0", b"j1", b"j2"), ())


class TestSelection:
    """ZRANGEBYSCORE active -inf now LIMIT 0 limit, and writes in selection order."""

    def test_order_is_by_deadline_then_id(self, rs: redis.Redis) -> None:
        """Earlier deadlines first, ties by id bytes; the limit cuts the tail."""
        lease(rs, Q, b"b", deadline_ms=PAST_MS, lease_epoch="other")
        lease(rs, Q, b"a", deadline_ms=PAST_MS, lease_epoch="other")
        lease(rs, Q, b"c", deadline_ms=PAST_MS - 1, lease_epoch="other")
        assert check(rs, limit=2) == ((b"c", b"a"), ())
        assert members(rs, Q.active) == [b"b"]

    def test_unexpired_leases_stay(self, rs: redis.Redis) -> None:
        """A deadline in the future, or +inf, is not selected; -inf always is."""
        lease(rs, Q, b"later", deadline_ms=now_ms() + FUTURE_OFFSET_MS, attempts=1)
        rs.zadd(Q.active, {"never": float("inf"), "always": float("-inf")})
        rs.hset(Q.job("always"), "lease_epoch", "other")
        assert check(rs) == ((b"always",), ())
        assert members(rs, Q.active) == [b"later", b"never"]

    def test_only_named_fields_are_written(self, rs: redis.Redis) -> None:
        """attempts, failures and lease_epoch are untouched by a death."""
        epoch = run_id(rs)
        lease(rs, Q, b"j", attempts=7, failures=2, lease_epoch=epoch, stalled=2)
        assert check(rs, max_stalled=3) == ((), (b"j",))
        assert row(rs, "j") == {
            b"attempts": b"7",
            b"failures": b"2",
            b"lease_epoch": epoch,
            b"stalled": b"3",
            b"state": b"dead",
            b"last_error": b"stalled",
        }

    def test_binary_ids_byte_for_byte(self, rs: redis.Redis) -> None:
        """Ids that are not UTF-8 (a NUL included) are moved and replied verbatim."""
        odd = b"\xff\x00id\xfe"
        lease(rs, Q, odd, attempts=1, lease_epoch="other")
        lease(rs, Q, b"\xc3", deadline_ms=PAST_MS + 1, attempts=1)
        assert check(rs) == ((odd,), (b"\xc3",))
        assert members(rs, Q.pending) == [odd]
        assert row(rs, b"\xc3")[b"state"] == b"dead"


class TestWideCalls:
    """A call that takes more members than one variadic write carries (1,000 a command)."""

    def test_every_member_of_a_wide_call_is_moved(self, rs: redis.Redis) -> None:
        """2,501 leases in one call each land in pending or dead; the metric counts the dead."""
        epoch = run_id(rs)
        pipe = rs.pipeline(transaction=False)
        for i in range(2501):
            pipe.zadd(Q.active, {f"j{i:04}": PAST_MS})
            pipe.hset(Q.job(f"j{i:04}"), mapping={"stalled": i % 3, "lease_epoch": epoch})
        pipe.execute()
        reply = check(rs, max_stalled=3, limit=5000)
        assert not isinstance(reply, str), reply
        recovered, dead = reply
        assert len(recovered) == 1668 and len(dead) == 833
        assert members(rs, Q.pending) == sorted(recovered)
        assert members(rs, Q.dead) == sorted(dead)
        assert rs.hget(Q.metrics_failed, "count") == b"833"
        assert not rs.exists(Q.active)


class TestAsAFunctionBody:
    """The script's text also runs as the body of a Lua function, as a bigger script may wrap it."""

    def test_wrapped_port_answers_alike(self, rs: redis.Redis) -> None:
        """Wrapped in `local function port(KEYS, ARGV) ... end`, reply and writes are the same."""
        body = STALLED_CHECK.source
        wrapped = f"local function port(KEYS, ARGV)\n{body}\nend\nreturn port(KEYS, ARGV)"
        args = [Q.active, Q.pending, Q.dead, Q.prefix, "3", "100"]
        lease(rs, Q, b"a", attempts=1, lease_epoch="other")
        lease(rs, Q, b"b", deadline_ms=PAST_MS + 1, attempts=1, stalled=2)
        assert call(rs, "EVAL", wrapped, 3, *args) == ((b"a",), (b"b",))
        assert row(rs, "b")[b"stalled"] == b"3"
        assert rs.hget(Q.metrics_failed, "count") == b"1"
        lease(rs, Q, b"lane", attempts=1, group="g")
        before = dump_all(rs)
        assert call(rs, "EVAL", wrapped, 3, *args) == "EMQLANE job lane is a lane row"
        assert dump_all(rs) == before


class TestLostScript:
    """A server that lost the script (restart, SCRIPT FLUSH) gets it again."""

    def test_noscript_is_recovered_by_sweep_round(self, rs: redis.Redis) -> None:
        """After SCRIPT FLUSH the round loads the script and re-sends the call."""
        lease(rs, Q, b"j", attempts=1, lease_epoch="other")
        rs.script_flush()
        [result] = sweep_round(rs, SCRIPT, [Call(Q, 1, 100, now_ms())])
        assert result.reply == SweepReply((b"j",), (), (b"j",))
        assert result.expired_left == 0
        assert rs.script_exists(SWEEP_SCRIPT.sha) == [True]
