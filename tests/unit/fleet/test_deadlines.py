"""Each queue's next wake: a deadline on the server's clock turned into the host's through the
offset read on every tick, the grace, the floor, the batches of a few milliseconds, re-arming
and forgetting; every time passed in."""

from __future__ import annotations

import pytest

from sweeperd.config.settings import QueueSettings
from sweeperd.fleet.deadlines import SLEW, SOON_S, Deadlines

HOST_S = 1_000.0  # the host's monotonic clock when the server's was read
SERVER_MS = 1_700_000_000_000.0  # the server's clock then, as the host's wall clock would say
AHEAD_MS, BEHIND_MS = 10_000.0, -10_000.0  # a server clock 10 s ahead of the host's, 10 s behind
INTERVAL_S = 60.0  # the queues' interval: wakes armed two of them (120 s) ahead at most


def deadlines(skew_ms: float = 0.0) -> Deadlines:
    """Grace 2 ms, floor 10 ms, window 5 ms, the server's clock read at HOST_S, `skew_ms` off."""
    made = Deadlines(grace_s=0.002, floor_s=0.01, window_s=0.005)
    made.measured(SERVER_MS + skew_ms, HOST_S)
    return made


class TestClockOffset:
    @pytest.mark.parametrize("skew_ms", [0.0, AHEAD_MS, BEHIND_MS])
    def test_a_deadline_comes_at_its_time_on_the_server(self, skew_ms: float) -> None:
        """A lease due 3 s after the server's reading is woken 3 s after the host's reading,
        plus the grace, whether the server's clock is ahead of the host's, behind or with it."""
        d = deadlines(skew_ms)
        d.arm("q", SERVER_MS + skew_ms + 3_000, HOST_S, INTERVAL_S)
        assert d.next_wake() == pytest.approx(HOST_S + 3.002)
        assert d.due(HOST_S + 3.001) == []
        assert d.due(HOST_S + 3.002) == ["q"]

    def test_the_host_time_of_a_server_time(self) -> None:
        """A server time is turned into host time by the offset; none before a reading."""
        assert Deadlines().host_s(SERVER_MS) is None
        d = deadlines(AHEAD_MS)
        assert d.host_s(SERVER_MS + AHEAD_MS + 500) == pytest.approx(HOST_S + 0.5)

    def test_a_reading_ahead_is_taken_at_once(self) -> None:
        """The clock is read on every tick: a server clock that stepped 1 s ahead since moves
        the wakes armed after the reading 1 s sooner."""
        d = deadlines()
        d.measured(SERVER_MS + 5_000 + 1_000, HOST_S + 5)
        d.arm("q", SERVER_MS + 9_000, HOST_S + 5, INTERVAL_S)
        assert d.next_wake() == pytest.approx(HOST_S + 8.002)

    def test_a_reply_read_late_moves_no_wake(self) -> None:
        """A reply read 30 ms after the server's clock was read (its thread waited) says the
        offset is 30 ms less than it is: the earlier, truer reading is kept, less its slew."""
        d = deadlines()
        d.measured(SERVER_MS + 2_000, HOST_S + 2.030)
        assert d.host_s(SERVER_MS + 3_000) == pytest.approx(HOST_S + 3 + 2 * SLEW)

    def test_a_server_clock_set_back_is_followed_at_the_slew(self) -> None:
        """A server clock set back 50 ms: the kept reading falls 1 ms a second (wakes come
        early meanwhile, 40 ms after 10 s, and find nothing due), and from 50 s on the wakes are
        at the server's time again."""
        d = deadlines()
        d.measured(SERVER_MS + 10_000 - 50, HOST_S + 10)
        assert d.host_s(SERVER_MS - 50) == pytest.approx(HOST_S - 0.05 + 10 * SLEW)
        for s in (20, 60, 70):
            d.measured(SERVER_MS + s * 1_000 - 50, HOST_S + s)
        assert d.host_s(SERVER_MS - 50) == pytest.approx(HOST_S)

    def test_no_reading_no_wake(self) -> None:
        """Before the server's clock is read no deadline can be placed: the interval sweeps."""
        d = Deadlines()
        d.arm("q", SERVER_MS, HOST_S, INTERVAL_S)
        assert (d.next_wake(), d.waiting()) == (None, 0)


class TestArm:
    def test_the_floor_after_a_sweep(self) -> None:
        """A deadline already past, or sooner than the floor, is woken the floor after the
        sweep: a queue whose deadlines keep falling due is swept at most that often."""
        d = deadlines()
        d.arm("past", SERVER_MS - 60_000, HOST_S + 1, INTERVAL_S)
        d.arm("soon", SERVER_MS + 1_001, HOST_S + 1, INTERVAL_S)
        assert d.due(HOST_S + 1.009) == []
        assert d.due(HOST_S + 1.010) == ["past", "soon"]

    @pytest.mark.parametrize("earliest_ms", [None, float("inf"), SERVER_MS + 120_001])
    def test_nothing_to_wake_for(self, earliest_ms: float | None) -> None:
        """No lease left, a deadline that never comes, or one past the horizon: no wake, and
        the queue's earlier wake is gone."""
        d = deadlines()
        d.arm("q", SERVER_MS + 1_000, HOST_S, INTERVAL_S)
        d.arm("q", earliest_ms, HOST_S, INTERVAL_S)
        assert (d.next_wake(), d.due(HOST_S + 200), d.waiting()) == (None, [], 0)

    def test_a_renewed_lease_re_arms_later(self) -> None:
        """A wake that found the lease renewed re-arms to the new deadline: the old time wakes
        nothing."""
        d = deadlines()
        d.arm("q", SERVER_MS + 1_000, HOST_S, INTERVAL_S)
        d.arm("q", SERVER_MS + 31_000, HOST_S + 0.5, INTERVAL_S)
        assert d.due(HOST_S + 1.1) == []
        assert d.next_wake() == pytest.approx(HOST_S + 31.002)
        assert d.due(HOST_S + 31.002) == ["q"]

    def test_an_earlier_deadline_re_arms_sooner(self) -> None:
        """A sweep that read an earlier deadline than the one armed moves the wake sooner."""
        d = deadlines()
        d.arm("q", SERVER_MS + 30_000, HOST_S, INTERVAL_S)
        d.arm("q", SERVER_MS + 2_000, HOST_S + 1, INTERVAL_S)
        assert d.due(HOST_S + 2.002) == ["q"]
        assert d.due(HOST_S + 31) == []

    def test_a_read_is_kept_until_a_sweep_sent_after_it_arms_the_queue(self) -> None:
        """A read of a change arms the queue; a sweep sent before that read and ending after it
        keeps the sooner wake (the read is kept for it), a sweep sent after it arms the queue
        as any sweep does and the read is dropped: at the start every queue is read once, and
        100,000 kept reads were 3.7 MiB."""
        d = deadlines()
        d.learn(HOST_S + 5, [("q", SERVER_MS + 2_000, INTERVAL_S)])
        d.arm_round(HOST_S + 4, [("q", SERVER_MS + 30_000, INTERVAL_S)])
        assert d.heard == {"q": HOST_S + 5}
        assert d.next_wake() == pytest.approx(HOST_S + 5.01)  # the read's, the floor after it
        d.arm_round(HOST_S + 6, [("q", SERVER_MS + 30_000, INTERVAL_S)])
        assert d.heard == {}
        assert d.next_wake() == pytest.approx(HOST_S + 30.002)

    def test_forget(self) -> None:
        """A forgotten queue (another replica's now, or another primary's) is never woken here;
        the others are."""
        d = deadlines()
        d.arm("gone", SERVER_MS + 1_000, HOST_S, INTERVAL_S)
        d.arm("kept", SERVER_MS + 2_000, HOST_S, INTERVAL_S)
        d.forget("gone")
        d.forget("never-armed")
        assert d.due(HOST_S + 10) == ["kept"]


class TestDue:
    def test_queues_due_together_wake_together(self) -> None:
        """Wakes within the 5 ms window of the soonest are one wake at the last of them, so
        none is swept before its time; the next one outside the window is the next wake."""
        d = deadlines()
        for queue, ms in (("c", 9.0), ("a", 0.0), ("b", 4.0)):
            d.arm(queue, SERVER_MS + 1_000 + ms, HOST_S, INTERVAL_S)
        assert d.next_wake() == pytest.approx(HOST_S + 1.006)
        assert d.due(HOST_S + 1.006) == ["a", "b"]
        assert d.next_wake() == pytest.approx(HOST_S + 1.011)

    @pytest.mark.parametrize(("interval_s", "waits_ms"), [(5.0, 5.0), (20.0, 20.0), (60.0, 30.0)])
    def test_a_wake_waits_a_thousandth_of_its_interval_for_others(
        self, interval_s: float, waits_ms: float
    ) -> None:
        """At the defaults a queue's wake waits for the wakes after it a thousandth of its
        interval, 30 ms at most: the default interval's queues come back within 5 ms of their
        time, a minute's gather 30 ms of deadlines in a round."""
        d = Deadlines(grace_s=0.0, floor_s=0.0)
        d.measured(SERVER_MS, HOST_S)
        d.arm("first", SERVER_MS + 1_000, HOST_S, interval_s)
        d.arm("within", SERVER_MS + 1_000 + waits_ms, HOST_S, interval_s)
        d.arm("past", SERVER_MS + 1_000 + waits_ms + 0.5, HOST_S, interval_s)
        assert d.next_wake() == pytest.approx(HOST_S + 1 + waits_ms / 1000)
        assert d.due(HOST_S + 1 + waits_ms / 1000) == ["first", "within"]

    def test_a_wake_that_may_wait_less_ends_the_round(self) -> None:
        """Each wake of a round waits at most its own slack: a 60 s queue's wake (30 ms) taken
        with a 5 s queue's due 1 ms after it waits no more than 6 ms in all."""
        d = Deadlines(grace_s=0.0, floor_s=0.0)
        d.measured(SERVER_MS, HOST_S)
        d.arm("minute", SERVER_MS + 1_000, HOST_S, 60.0)
        d.arm("short", SERVER_MS + 1_001, HOST_S, 5.0)
        d.arm("within six", SERVER_MS + 1_006, HOST_S, 60.0)
        d.arm("past six", SERVER_MS + 1_007, HOST_S, 60.0)
        assert d.next_wake() == pytest.approx(HOST_S + 1.006)
        assert d.due(HOST_S + 1.006) == ["minute", "short", "within six"]

    def test_a_wake_is_spent(self) -> None:
        """A queue is due once per arming: the sweep that follows arms its next wake."""
        d = deadlines()
        d.arm("q", SERVER_MS + 1_000, HOST_S, INTERVAL_S)
        assert d.due(HOST_S + 2) == ["q"]
        assert (d.due(HOST_S + 3), d.next_wake(), d.waiting()) == ([], None, 0)

    def test_late_wakes_take_every_queue_due_by_then(self) -> None:
        """Woken late (the process was stopped), every queue due by now comes at once, soonest
        first."""
        d = deadlines()
        for n in range(5):
            d.arm(f"q{n}", SERVER_MS + 1_000 * (5 - n), HOST_S, INTERVAL_S)
        assert d.due(HOST_S + 60) == ["q4", "q3", "q2", "q1", "q0"]

    def test_a_queue_woken_while_a_sweep_holds_it_is_deferred(self) -> None:
        """Woken while another tick holds them, queues are woken again a floor later, unless
        that tick armed them meanwhile (its wake stands)."""
        d = deadlines()
        d.arm("rearmed", SERVER_MS + 4_000, HOST_S, INTERVAL_S)
        d.deferred(["lost", "rearmed"], HOST_S + 1)
        assert d.due(HOST_S + 1.009) == []
        assert d.due(HOST_S + 1.010) == ["lost"]
        assert d.next_wake() == pytest.approx(HOST_S + 4.002)


class TestScheduledTicks:
    def test_a_queue_woken_soon_is_left_to_its_wake(self) -> None:
        """A scheduled tick leaves the queues whose wake comes within SOON_S (their wake is
        their sweep), keeps those woken later and those with no wake; a queue whose interval is
        shorter than that is kept while its wake is further off than its interval."""
        d = deadlines()
        d.arm("soon", SERVER_MS + 900, HOST_S, INTERVAL_S)
        d.arm("later", SERVER_MS + 1_100, HOST_S, INTERVAL_S)
        d.arm("short", SERVER_MS + 600, HOST_S, INTERVAL_S)
        batch = [QueueSettings(name, 5.0, 5, 1000) for name in ("soon", "later", "idle")]
        batch.append(QueueSettings("short", 0.5, 5, 1000))
        kept = d.unwoken(batch, HOST_S)
        assert [q.name for q in kept] == ["later", "idle", "short"]
        assert [q.name for q in d.unwoken(batch, HOST_S + 0.2)] == ["idle"]
        assert SOON_S == 1.0
