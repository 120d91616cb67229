"""The pure model of EMQ.STALLED.CHECK (docs/keyspace.md): parsing, selection, verdicts, writes."""

from __future__ import annotations

import pytest

from sweeperd import model
from sweeperd.constants import LLONG_MAX, LLONG_MIN
from sweeperd.keyspace import QueueKeys
from sweeperd.model import (
    NOT_AN_INTEGER,
    OVERFLOW,
    WRONGTYPE,
    Judgement,
    Lease,
    NotAHash,
    Plan,
    Refusal,
    Snapshot,
    Verdict,
)
from tests.support import keyspace_oracle

Q = QueueKeys("q")
EPOCH = b"a" * 40
EARLIER = b"0" * 40
ROW = b"emq:{q}:job:"
VERB_KEYS = [Q.active.encode(), Q.pending.encode(), Q.dead.encode(), Q.prefix.encode()]
LANE = Refusal("EMQLANE job L is a lane row")


def counted(job_id: bytes, **fields: bytes) -> Lease:
    """A lease of the current epoch with the given extra row fields."""
    row = {b"attempts": b"1", b"lease_epoch": EPOCH}
    row.update({k.encode(): v for k, v in fields.items()})
    return Lease(job_id, row)


def snapshot(*leases: Lease, count: bytes | None = None, **types: str) -> Snapshot:
    """A snapshot of these leases; `types` names key types (active, pending, dead, metrics)."""
    return Snapshot(leases=leases, key_types=types, metrics_count=count)


class TestString2ll:
    """string2ll follows Redis' strict rule, the one HINCRBY reads a field by."""

    @pytest.mark.parametrize(
        ("raw", "value"),
        [
            (b"0", 0),
            (b"1", 1),
            (b"-1", -1),
            (b"42", 42),
            (b"9223372036854775807", LLONG_MAX),
            (b"-9223372036854775808", LLONG_MIN),
            (b"1000000000000000000", 10**18),
        ],
    )
    def test_accepts(self, raw: bytes, value: int) -> None:
        """Plain decimal digits with an optional '-' and no leading zero are taken."""
        assert model.string2ll(raw) == value

    @pytest.mark.parametrize(
        "raw",
        [
            b"",
            b"-",
            b"-0",
            b"01",
            b"-01",
            b"00",
            b"+1",
            b" 1",
            b"1 ",
            b"1.0",
            b"1e3",
            b"0x1",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"18446744073709551616",
            b"-" + b"1" * 20,
            b"1" * 21,
            b"\xd9\xa1",
        ],
    )
    def test_refuses(self, raw: bytes) -> None:
        """Empty, signs but '-', spaces, leading zeros, -0 and values past 64 bits are refused."""
        assert model.string2ll(raw) is None

    def test_twenty_characters_is_the_longest(self) -> None:
        """A 20-character number is read, a 21-character one never (Redis' LONG_STR_SIZE)."""
        assert len(b"-9223372036854775808") == 20
        assert model.string2ll(b"-1000000000000000000") == -(10**18)
        assert model.string2ll(b"-" + b"0" * 19 + b"1") is None
        assert model.string2ll(b"1" * 19) == int("1" * 19)
        assert model.string2ll(b"1" * 20) is None  # 20 digits: past 2^63 - 1


class TestParseArguments:
    """parse_arguments checks arity, then max_stalled, then limit, naming the argument."""

    def test_valid(self) -> None:
        """Six arguments with two positive integers give (max_stalled, limit)."""
        assert keyspace_oracle.parse_arguments([*VERB_KEYS, b"3", b"100"]) == (3, 100)
        assert keyspace_oracle.parse_arguments([*VERB_KEYS, b"9223372036854775807", b"1"]) == (
            LLONG_MAX,
            1,
        )

    @pytest.mark.parametrize("count", [0, 5, 7])
    def test_arity(self, count: int) -> None:
        """Any count but six is the server's usual arity error."""
        argv = [*VERB_KEYS, b"1", b"1", b"1"][:count]
        assert keyspace_oracle.parse_arguments(argv) == Refusal(keyspace_oracle.ARITY)
        assert (
            keyspace_oracle.ARITY == "ERR wrong number of arguments for 'emq.stalled.check' command"
        )

    @pytest.mark.parametrize("bad", [b"0", b"-1", b"x", b"", b"+1", b"01", b"9223372036854775808"])
    def test_max_stalled_named(self, bad: bytes) -> None:
        """A max_stalled that is not a positive 64-bit integer is refused by name."""
        assert keyspace_oracle.parse_arguments([*VERB_KEYS, bad, b"1"]) == Refusal(
            "ERR max_stalled must be a positive integer"
        )

    @pytest.mark.parametrize("bad", [b"0", b"-1", b"x", b"1.5"])
    def test_limit_named(self, bad: bytes) -> None:
        """A limit that is not a positive 64-bit integer is refused by name."""
        assert keyspace_oracle.parse_arguments([*VERB_KEYS, b"1", bad]) == Refusal(
            "ERR limit must be a positive integer"
        )

    def test_max_stalled_before_limit(self) -> None:
        """When both are bad the refusal names max_stalled, the one read first."""
        assert keyspace_oracle.parse_arguments([*VERB_KEYS, b"0", b"0"]) == Refusal(
            "ERR max_stalled must be a positive integer"
        )


class TestSelect:
    """select is ZRANGEBYSCORE active -inf now LIMIT 0 limit."""

    def test_score_order_and_bound(self) -> None:
        """Members due by now (inclusive) come lowest score first; later ones are left."""
        active = [(b"c", 300.0), (b"a", 100.0), (b"b", 200.0), (b"late", 301.0)]
        assert keyspace_oracle.select(active, 300, 10) == [b"a", b"b", b"c"]

    def test_ties_by_member_bytes(self) -> None:
        """Equal scores are ordered by member bytes, unsigned, as the zset orders them."""
        active = [(b"b", 5.0), (b"\xff", 5.0), (b"B", 5.0), (b"a", 5.0), (b"ab", 5.0)]
        assert keyspace_oracle.select(active, 5, 10) == [b"B", b"a", b"ab", b"b", b"\xff"]

    def test_infinities(self) -> None:
        """A -inf deadline is always due and first; a +inf one never is."""
        active = [(b"never", float("inf")), (b"x", 0.0), (b"always", float("-inf"))]
        assert keyspace_oracle.select(active, LLONG_MAX, 10) == [b"always", b"x"]

    def test_limit(self) -> None:
        """At most `limit` members are taken, the earliest."""
        active = [(str(n).encode(), float(n)) for n in range(10)]
        assert keyspace_oracle.select(active, 100, 3) == [b"0", b"1", b"2"]
        assert keyspace_oracle.select(active, 100, 1) == [b"0"]

    def test_nothing_due(self) -> None:
        """An empty active set or one with only future deadlines selects nothing."""
        assert keyspace_oracle.select([], 100, 10) == []
        assert keyspace_oracle.select([(b"a", 101.0)], 100, 10) == []


class TestJudgeLease:
    """judge_lease gives one member's verdict or refuses the whole call."""

    def test_ghost(self) -> None:
        """A member with no row is a ghost, with no stalled value."""
        assert model.judge_lease(Lease(b"g", None), EPOCH, 1) == Judgement(b"g", Verdict.GHOST)

    def test_not_a_hash(self) -> None:
        """A row of another type refuses the call with WRONGTYPE naming the id."""
        got = model.judge_lease(Lease(b"s", NotAHash("string")), EPOCH, 1)
        assert got == Refusal("WRONGTYPE job s is not a hash")

    def test_not_a_hash_id_with_newline(self) -> None:
        """An id with CR or LF is named with spaces, as the server's error line carries it."""
        got = model.judge_lease(Lease(b"a\r\nb", NotAHash("list")), EPOCH, 1)
        assert got == Refusal("WRONGTYPE job a  b is not a hash")

    def test_not_a_hash_id_with_nul(self) -> None:
        """An id with a NUL cuts the text there: the server builds errors as C strings."""
        got = model.judge_lease(Lease(b"a\0b", NotAHash("string")), EPOCH, 1)
        assert got == Refusal("WRONGTYPE job a")

    def test_lane(self) -> None:
        """A row with a group field refuses the call with EMQLANE naming the id."""
        lease = Lease(b"L", {b"group": b"g", b"lease_epoch": EPOCH})
        assert model.judge_lease(lease, EPOCH, 1) == LANE

    def test_lane_of_an_earlier_epoch(self) -> None:
        """A lane row is refused even when its lease is from an earlier run."""
        lease = Lease(b"L", {b"group": b"g", b"lease_epoch": EARLIER})
        assert model.judge_lease(lease, EPOCH, 1) == LANE

    def test_exempt(self) -> None:
        """A lease_epoch other than the epoch makes the lease exempt, with no stalled value."""
        lease = Lease(b"e", {b"attempts": b"1", b"lease_epoch": EARLIER})
        assert model.judge_lease(lease, EPOCH, 1) == Judgement(b"e", Verdict.EXEMPT)

    @pytest.mark.parametrize("stalled", [b"abc", b"9223372036854775807", b"-0", b""])
    def test_exempt_stalled_not_judged(self, stalled: bytes) -> None:
        """An exempt member's stalled value is not read, however bad it is."""
        lease = Lease(b"e", {b"stalled": stalled, b"lease_epoch": EARLIER})
        assert model.judge_lease(lease, EPOCH, 1) == Judgement(b"e", Verdict.EXEMPT)

    def test_counted_missing_stalled(self) -> None:
        """A counted row with no stalled field stalls for the first time: s = 1."""
        got = model.judge_lease(counted(b"j"), EPOCH, 3)
        assert got == Judgement(b"j", Verdict.RECOVERED, 1)

    def test_counted_without_lease_epoch(self) -> None:
        """A row without lease_epoch is counted like one of the current epoch."""
        got = model.judge_lease(Lease(b"j", {b"attempts": b"1"}), EPOCH, 1)
        assert got == Judgement(b"j", Verdict.DEAD, 1)

    def test_counted_abc(self) -> None:
        """A counted row whose stalled is not an integer refuses with HINCRBY's text."""
        got = model.judge_lease(counted(b"j", stalled=b"abc"), EPOCH, 3)
        assert got == Refusal(NOT_AN_INTEGER)
        assert NOT_AN_INTEGER == "ERR hash value is not an integer"

    def test_counted_llong_max(self) -> None:
        """A counted row at LLONG_MAX refuses with HINCRBY's overflow text."""
        got = model.judge_lease(counted(b"j", stalled=str(LLONG_MAX).encode()), EPOCH, 3)
        assert got == Refusal(OVERFLOW)
        assert OVERFLOW == "ERR increment or decrement would overflow"

    def test_counted_one_below_llong_max(self) -> None:
        """LLONG_MAX - 1 still takes one more stall, and that is dead at any budget."""
        raw = str(LLONG_MAX - 1).encode()
        got = model.judge_lease(counted(b"j", stalled=raw), EPOCH, LLONG_MAX)
        assert got == Judgement(b"j", Verdict.DEAD, LLONG_MAX)

    def test_counted_negative(self) -> None:
        """A negative stalled is incremented like any integer: -5 becomes -4, recovered."""
        got = model.judge_lease(counted(b"j", stalled=b"-5"), EPOCH, 1)
        assert got == Judgement(b"j", Verdict.RECOVERED, -4)

    def test_counted_llong_min(self) -> None:
        """LLONG_MIN is a valid stalled value and increments without trouble."""
        got = model.judge_lease(counted(b"j", stalled=str(LLONG_MIN).encode()), EPOCH, 1)
        assert got == Judgement(b"j", Verdict.RECOVERED, LLONG_MIN + 1)

    def test_recovered_below_max(self) -> None:
        """s below max_stalled recovers: stalled 1 with max 3 becomes 2."""
        got = model.judge_lease(counted(b"j", stalled=b"1"), EPOCH, 3)
        assert got == Judgement(b"j", Verdict.RECOVERED, 2)

    def test_dead_at_max(self) -> None:
        """s equal to max_stalled is dead: stalled 2 with max 3 becomes 3."""
        got = model.judge_lease(counted(b"j", stalled=b"2"), EPOCH, 3)
        assert got == Judgement(b"j", Verdict.DEAD, 3)

    def test_dead_above_max(self) -> None:
        """s above max_stalled is dead too: stalled 7 with max 3 becomes 8."""
        got = model.judge_lease(counted(b"j", stalled=b"7"), EPOCH, 3)
        assert got == Judgement(b"j", Verdict.DEAD, 8)


class TestDecide:
    """decide judges every member before any write, in the verb's check order."""

    def test_plan_in_selection_order(self) -> None:
        """A plan lists every judgement in selection order; the reply's arrays follow it."""
        got = model.decide(
            snapshot(
                counted(b"d"),
                Lease(b"g", None),
                Lease(b"e", {b"lease_epoch": EARLIER}),
                counted(b"r", stalled=b"-1"),
                active="zset",
            ),
            EPOCH,
            1,
        )
        assert isinstance(got, Plan)
        assert got.judgements == (
            Judgement(b"d", Verdict.DEAD, 1),
            Judgement(b"g", Verdict.GHOST),
            Judgement(b"e", Verdict.EXEMPT),
            Judgement(b"r", Verdict.RECOVERED, 0),
        )
        assert (got.recovered, got.dead, got.exempt, got.ghosts) == (
            [b"e", b"r"],
            [b"d"],
            [b"e"],
            [b"g"],
        )

    def test_empty(self) -> None:
        """Nothing selected, with no keys at all, is an empty plan."""
        assert model.decide(Snapshot(), EPOCH, 1) == Plan(())

    @pytest.mark.parametrize("kind", ["string", "hash", "list", "set"])
    def test_active_wrongtype_first(self, kind: str) -> None:
        """An active key that is not a zset refuses before any member is judged."""
        got = model.decide(snapshot(Lease(b"L", {b"group": b"g"}), active=kind), EPOCH, 1)
        assert got == Refusal(WRONGTYPE)

    def test_first_failing_member_wins(self) -> None:
        """Of several refusable members, the first in selection order names the refusal."""
        bad = counted(b"j", stalled=b"abc")
        lane = Lease(b"L", {b"group": b"g"})
        string = Lease(b"s", NotAHash())
        assert model.decide(snapshot(bad, lane, string), EPOCH, 1) == Refusal(NOT_AN_INTEGER)
        assert model.decide(snapshot(lane, bad, string), EPOCH, 1) == LANE
        assert model.decide(snapshot(string, lane, bad), EPOCH, 1) == Refusal(
            "WRONGTYPE job s is not a hash"
        )

    def test_member_refusal_before_targets(self) -> None:
        """A refusable member is named even when a target key is of the wrong type too."""
        got = model.decide(
            snapshot(counted(b"ok"), Lease(b"L", {b"group": b"g"}), dead="string"), EPOCH, 1
        )
        assert got == LANE

    def test_pending_checked_when_recovering(self) -> None:
        """A pending key that is not a zset refuses a plan that recovers."""
        got = model.decide(snapshot(counted(b"r"), pending="hash"), EPOCH, 2)
        assert got == Refusal(WRONGTYPE)

    def test_pending_checked_when_exempt(self) -> None:
        """An exempt member writes pending too, so the pending type is checked."""
        lease = Lease(b"e", {b"lease_epoch": EARLIER})
        assert model.decide(snapshot(lease, pending="string"), EPOCH, 1) == Refusal(WRONGTYPE)

    def test_pending_unchecked_without_recoveries(self) -> None:
        """Ghosts and deaths do not write pending, so its type does not matter."""
        got = model.decide(snapshot(Lease(b"g", None), counted(b"d"), pending="string"), EPOCH, 1)
        assert isinstance(got, Plan)
        assert (got.ghosts, got.dead) == ([b"g"], [b"d"])

    def test_dead_checked_when_dying(self) -> None:
        """A dead key that is not a zset refuses a plan with a death."""
        got = model.decide(snapshot(counted(b"d"), dead="list"), EPOCH, 1)
        assert got == Refusal(WRONGTYPE)

    def test_metrics_checked_when_dying(self) -> None:
        """A metrics:failed key that is not a hash refuses a plan with a death."""
        got = model.decide(snapshot(counted(b"d"), metrics="string"), EPOCH, 1)
        assert got == Refusal(WRONGTYPE)

    def test_metrics_count_not_integer(self) -> None:
        """A failed count HINCRBY would refuse refuses a plan with a death."""
        got = model.decide(snapshot(counted(b"d"), count=b"abc", metrics="hash"), EPOCH, 1)
        assert got == Refusal(NOT_AN_INTEGER)

    def test_dead_and_metrics_unchecked_without_deaths(self) -> None:
        """Recoveries alone never look at dead or metrics:failed."""
        got = model.decide(
            Snapshot(
                leases=(counted(b"r"),),
                key_types={"dead": "string", "metrics": "list"},
                metrics_count=b"abc",
            ),
            EPOCH,
            2,
        )
        assert got == Plan((Judgement(b"r", Verdict.RECOVERED, 1),))

    def test_dead_checked_before_metrics(self) -> None:
        """With both wrong, the refusal is the same WRONGTYPE whichever is read first."""
        got = model.decide(
            Snapshot((counted(b"d"),), {"dead": "set", "metrics": "string"}), EPOCH, 1
        )
        assert got == Refusal(WRONGTYPE)

    def test_count_overflow_with_several_dead(self) -> None:
        """The count must take one increment per death: LLONG_MAX-2 takes two, not three."""
        three = [counted(b"a"), counted(b"b"), counted(b"c")]
        near = str(LLONG_MAX - 2).encode()
        over = Snapshot(tuple(three), {"metrics": "hash"}, near)
        fits = Snapshot(tuple(three[:2]), {"metrics": "hash"}, near)
        assert model.decide(over, EPOCH, 1) == Refusal(OVERFLOW)
        got = model.decide(fits, EPOCH, 1)
        assert isinstance(got, Plan)
        assert got.dead == [b"a", b"b"]

    def test_negative_count(self) -> None:
        """A negative failed count is an integer HINCRBY takes."""
        got = model.decide(Snapshot((counted(b"d"),), {"metrics": "hash"}, b"-3"), EPOCH, 1)
        assert isinstance(got, Plan)
        assert got.dead == [b"d"]


class TestWrites:
    """writes() spells the write pass of a plan as commands, in selection order."""

    def test_ghost(self) -> None:
        """A ghost is only removed from active."""
        plan = Plan((Judgement(b"g", Verdict.GHOST),))
        assert keyspace_oracle.writes(plan, Q) == [(b"ZREM", b"emq:{q}:active", b"g")]

    def test_exempt(self) -> None:
        """An exempt lease goes to pending with its state; stalled is not written."""
        plan = Plan((Judgement(b"e", Verdict.EXEMPT),))
        assert keyspace_oracle.writes(plan, Q) == [
            (b"ZREM", b"emq:{q}:active", b"e"),
            (b"HSET", ROW + b"e", b"state", b"pending"),
            (b"ZADD", b"emq:{q}:pending", b"0", b"e"),
        ]

    def test_recovered(self) -> None:
        """A recovered lease gets its new stalled count and goes to pending."""
        plan = Plan((Judgement(b"r", Verdict.RECOVERED, 2),))
        assert keyspace_oracle.writes(plan, Q) == [
            (b"ZREM", b"emq:{q}:active", b"r"),
            (b"HSET", ROW + b"r", b"stalled", b"2", b"state", b"pending"),
            (b"ZADD", b"emq:{q}:pending", b"0", b"r"),
        ]

    def test_dead(self) -> None:
        """A dead lease is marked, dead-lettered and counted in metrics:failed."""
        plan = Plan((Judgement(b"d", Verdict.DEAD, 1),))
        assert keyspace_oracle.writes(plan, Q) == [
            (b"ZREM", b"emq:{q}:active", b"d"),
            (
                b"HSET",
                ROW + b"d",
                b"stalled",
                b"1",
                b"state",
                b"dead",
                b"last_error",
                b"stalled",
            ),
            (b"ZADD", b"emq:{q}:dead", b"0", b"d"),
            (b"HINCRBY", b"emq:{q}:metrics:failed", b"count", b"1"),
        ]

    def test_order_and_root(self) -> None:
        """Ops follow the judgements' order, under the queue's own root, ids kept as bytes."""
        keys = QueueKeys("jobs", "app")
        plan = Plan((Judgement(b"\xff\x00", Verdict.GHOST), Judgement(b"n", Verdict.RECOVERED, -4)))
        assert keyspace_oracle.writes(plan, keys) == [
            (b"ZREM", b"app:{jobs}:active", b"\xff\x00"),
            (b"ZREM", b"app:{jobs}:active", b"n"),
            (b"HSET", b"app:{jobs}:job:n", b"stalled", b"-4", b"state", b"pending"),
            (b"ZADD", b"app:{jobs}:pending", b"0", b"n"),
        ]

    def test_empty(self) -> None:
        """An empty plan writes nothing."""
        assert keyspace_oracle.writes(Plan(), Q) == []
