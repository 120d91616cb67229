"""The sweep script's two readings of time: the earliest deadline left in active after the verb
(when the queue is due next) and how long after its deadline the call took its oldest lease."""

from __future__ import annotations

import pytest

from sweeperd.keyspace import QueueKeys
from sweeperd.verb.replies import Call, CallResult, Depths, SweepReply
from sweeperd.verb.rounds import sweep_round
from tests.support.helpers import dump_all, lease, server_ms
from tests.support.targets import Target

A = QueueKeys("a")
HOUR_MS = 3_600_000


def swept(on: Target, limit: int = 100) -> tuple[CallResult, Depths]:
    [result] = sweep_round(on.client, on.executor, [Call(A, 5, limit)])
    assert result.depths is not None
    return result, result.depths


class TestEarliestDeadline:
    def test_an_empty_active_has_none(self, on: Target) -> None:
        """No lease at all: no earliest deadline, no delay, and nothing is due."""
        result, depths = swept(on)
        assert result.reply == SweepReply()
        assert (depths.earliest_ms, depths.delay_ms, depths.oldest_expired_ms) == (None, None, None)

    def test_leases_not_due_give_the_first_and_stay(self, on: Target) -> None:
        """Leases not due yet are left as they are; the earliest deadline is the lowest, exactly."""
        c = on.client
        soon = server_ms(c) + HOUR_MS
        lease(c, A, b"later", soon + 7, attempts="1")
        lease(c, A, b"first", soon, attempts="1")
        before = dump_all(c)
        result, depths = swept(on)
        assert result.reply == SweepReply()
        assert (depths.earliest_ms, depths.delay_ms, depths.oldest_expired_ms) == (soon, None, None)
        assert dump_all(c) == before

    def test_after_the_verb_the_first_left(self, on: Target) -> None:
        """A call that takes the due leases gives the deadline of the first one it left."""
        c = on.client
        now = server_ms(c)
        lease(c, A, b"old", now - 5_000, attempts="1")
        lease(c, A, b"next", now + HOUR_MS, attempts="1")
        result, depths = swept(on)
        assert result.reply == SweepReply((b"old",), ())
        assert (depths.earliest_ms, depths.oldest_expired_ms) == (now + HOUR_MS, None)
        assert depths.active == 1

    def test_a_limit_leaves_the_due_ones_first(self, on: Target) -> None:
        """A call cut by its limit gives the deadline of the next due lease: due now, so it is
        the oldest expired one too."""
        c = on.client
        now = server_ms(c)
        for n in range(4):
            lease(c, A, f"j{n}".encode(), now - 4_000 + n, attempts="1")
        result, depths = swept(on, limit=2)
        assert result.reply == SweepReply((b"j0", b"j1"), ())
        assert depths.earliest_ms == depths.oldest_expired_ms == now - 4_000 + 2
        assert depths.expired == 2

    def test_a_renewed_lease_gives_its_new_deadline(self, on: Target) -> None:
        """A lease due, then renewed (its score moved on) before the call: not taken, and the
        earliest deadline is the renewed one."""
        c = on.client
        now = server_ms(c)
        lease(c, A, b"renewed", now - 1_000, attempts="1")
        c.zadd(A.active, {b"renewed": now + HOUR_MS}, xx=True)
        result, depths = swept(on)
        assert result.reply == SweepReply()
        assert (depths.earliest_ms, depths.delay_ms) == (now + HOUR_MS, None)
        assert c.hget(A.job(b"renewed"), "state") is None

    @pytest.mark.parametrize(
        ("score", "read"),
        [("+inf", float("inf")), ("1e300", 1e300), ("9007199254740993", 9007199254740992.0)],
    )
    def test_scores_beyond_any_clock(self, on: Target, score: str, read: float) -> None:
        """+inf, 1e300 and an integer past a double's precision are read as the double the
        server keeps."""
        on.client.execute_command("ZADD", A.active, score, "far")  # type: ignore[no-untyped-call]
        _, depths = swept(on)
        assert (depths.earliest_ms, depths.oldest_expired_ms) == (read, None)

    def test_a_refused_call_gives_the_first_lease(self, on: Target) -> None:
        """A call the verb refuses (a lane row) writes nothing and gives that row's deadline."""
        c = on.client
        now = server_ms(c)
        lease(c, A, b"lane", now - 1_000, attempts="1", group="g")
        before = dump_all(c)
        result, depths = swept(on)
        assert not isinstance(result.reply, SweepReply)
        assert (depths.earliest_ms, depths.delay_ms) == (now - 1_000, None)
        assert dump_all(c) == before


class TestDelay:
    def test_the_first_taken_lease_counts(self, on: Target) -> None:
        """The delay is the server's time at the call minus the deadline of the first lease it
        took (the oldest), not of any later one."""
        c = on.client
        before = server_ms(c)
        lease(c, A, b"oldest", before - 5_000, attempts="1")
        c.zadd(A.active, {b"oldest": before - 5_000.5})  # a deadline between two milliseconds
        lease(c, A, b"newer", before - 10, attempts="1")
        result, depths = swept(on)
        assert result.reply == SweepReply((b"oldest", b"newer"), ())
        assert depths.delay_ms is not None
        assert 5_000.5 <= depths.delay_ms <= depths.now_ms + 1 - (before - 5_000.5)

    def test_a_ghost_is_a_lease_taken(self, on: Target) -> None:
        """An id without a row is taken too: its deadline gives the delay."""
        c = on.client
        before = server_ms(c)
        lease(c, A, b"ghost", before - 2_000)
        result, depths = swept(on)
        assert isinstance(result.reply, SweepReply) and result.reply.ghosts == 1
        assert depths.delay_ms is not None
        assert 2_000 <= depths.delay_ms <= depths.now_ms + 1 - (before - 2_000)

    def test_a_minus_inf_deadline_counts_from_1970(self, on: Target) -> None:
        """A lease scored -inf is overdue since 1970, for its delay as for its age."""
        c = on.client
        before = server_ms(c)
        c.execute_command("ZADD", A.active, "-inf", "ancient")  # type: ignore[no-untyped-call]
        c.hset(A.job(b"ancient"), "attempts", "1")
        c.execute_command("ZADD", A.active, "-inf", "kept")  # type: ignore[no-untyped-call]
        c.hset(A.job(b"kept"), "attempts", "1")
        result, depths = swept(on, limit=1)
        assert result.reply == SweepReply((b"ancient",), ())
        assert depths.delay_ms is not None and before <= depths.delay_ms <= depths.now_ms + 1
        assert depths.earliest_ms == depths.oldest_expired_ms == float("-inf")
        assert depths.oldest_expired_age_s == depths.now_ms / 1000


STATS: list[object] = [b"run", 10_000, 0, 1, 0, 0, None, b"12000", 40, None]  # as the script says


class TestParse:
    def test_ten_parts(self) -> None:
        """The stats are ten parts: a reply of any other length is not read."""
        assert Depths.parse(STATS) == Depths(b"run", 10_000, 0, 1, 0, 0, 0, 12_000.0, 40)
        assert Depths.parse(STATS[:9]) is None
        assert Depths.parse([*STATS, None]) is None

    def test_a_count_of_the_wrong_type_is_not_read(self) -> None:
        """A count the script could not read (false) leaves no depths."""
        assert Depths.parse([*STATS[:3], None, *STATS[4:]]) is None

    def test_a_delay_and_a_minus_inf(self) -> None:
        """The delay and the earliest deadline come as the text of a double, -inf too."""
        parsed = Depths.parse([*STATS[:7], b"-inf", 40, b"2.5"])
        assert parsed is not None
        assert (parsed.earliest_ms, parsed.delay_ms) == (float("-inf"), 2.5)
