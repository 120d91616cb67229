"""The wakes' thread: it waits for the soonest wake armed, sweeps what is due then and waits
again; a sooner wake told ends its wait, a stop ends it for good. Real time where it waits (on
a condition, never a sleep), a clock passed in where nothing does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sweeperd.daemon.wakes import Wakes
from sweeperd.fleet.deadlines import Deadlines
from tests.support.clock import Clock

T0 = 1_000.0  # the fake monotonic clock's reading
SERVER_MS = 1_700_000_000_000.0  # the server's clock then
WAIT_S = 10.0  # what a test waits at most for the thread


class Rig:
    """The wakes and the deadlines they wake for; each sweep pops the queues due and records
    them with when it ran."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadlines = Deadlines(grace_s=0.0, floor_s=0.0, window_s=0.0)
        self.deadlines.measured(SERVER_MS, clock())
        self.swept: list[tuple[float, list[str]]] = []
        self.woken = threading.Condition()
        self.wakes = Wakes(self.sweep, self.deadlines.next_wake, clock=clock)

    def sweep(self, now: float) -> None:
        due = self.deadlines.due(now)
        with self.woken:
            self.swept.append((now, due))
            self.woken.notify_all()

    def arm(self, queue: str, in_s: float) -> float:
        """A queue due `in_s` from now; its wake (monotonic)."""
        now = self.clock()
        host = self.deadlines.host_s(SERVER_MS)
        assert host is not None
        self.deadlines.arm(queue, SERVER_MS + (now - host + in_s) * 1000, now, 3600)
        at = self.deadlines.next_wake()
        assert at is not None
        return at

    def queues_swept(self, count: int) -> list[list[str]]:
        """The queues of the first sweeps that took any, once `count` queues were swept."""
        with self.woken:
            self.woken.wait_for(lambda: sum(len(q) for _, q in self.swept) >= count, WAIT_S)
            return [queues for _, queues in self.swept if queues]

    def waits_for(self, at: float | None) -> bool:
        """Whether the thread comes to wait for `at` within WAIT_S (polled every millisecond:
        the thread says nothing when it starts to wait)."""
        until = time.monotonic() + WAIT_S
        while self.wakes.waiting_for != at and time.monotonic() < until:
            time.sleep(0.001)
        return self.wakes.waiting_for == at


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    yield made
    made.wakes.stop()
    made.wakes.join(WAIT_S)


class TestWaking:
    def test_each_wake_is_swept_at_its_time(self, rig: Rig) -> None:
        """Two wakes 50 ms apart: each swept in a sweep of its own, none before its time."""
        first, second = rig.arm("a", 0.05), rig.arm("b", 0.10)
        rig.wakes.start()
        assert rig.queues_swept(2) == [["a"], ["b"]]
        [at_a] = [now for now, q in rig.swept if q == ["a"]]
        [at_b] = [now for now, q in rig.swept if q == ["b"]]
        assert (at_a >= first, at_b >= second) == (True, True)

    def test_a_sooner_wake_ends_the_wait(self, rig: Rig) -> None:
        """The thread waiting 20 s for its next wake is told of one due now: it sweeps it at
        once, and waits for the later one again."""
        late = rig.arm("late", 20)
        rig.wakes.start()
        assert rig.waits_for(late)
        rig.wakes.soon(rig.arm("now", 0))
        assert rig.queues_swept(1) == [["now"]]
        assert rig.waits_for(late)

    def test_a_later_wake_leaves_the_wait_alone(self, rig: Rig) -> None:
        """Told of a wake after the one it waits for, the thread waits on for its own."""
        soon = rig.arm("soon", 20)
        rig.wakes.start()
        assert rig.waits_for(soon)
        rig.wakes.soon(rig.arm("later", 30))
        assert rig.wakes.waiting_for == soon

    def test_with_no_queue_waiting_it_waits_to_be_told(self, rig: Rig) -> None:
        """No wake armed: the thread waits for none until one is told, then sweeps it."""
        rig.wakes.start()
        assert rig.waits_for(None)
        rig.wakes.soon(rig.arm("a", 0))
        assert rig.queues_swept(1) == [["a"]]


class TestLate:
    def test_a_late_thread_sweeps_everything_due_at_once(self) -> None:
        """Started long after its wakes (the process was stopped): one sweep takes every queue
        due by now."""
        clock = Clock(T0)
        late = Rig(clock)
        for n in range(3):
            late.arm(f"q{n}", n + 1)
        clock.now = T0 + 60
        late.wakes.start()
        try:
            assert late.queues_swept(3) == [["q0", "q1", "q2"]]
            assert late.swept[0][0] == T0 + 60
        finally:
            late.wakes.stop()
            late.wakes.join(WAIT_S)


class TestStop:
    def test_stop_ends_the_wait(self, rig: Rig) -> None:
        """Stopped while it waits for a wake 20 s off, the thread ends now, unswept."""
        rig.arm("late", 20)
        rig.wakes.start()
        assert rig.waits_for(rig.deadlines.next_wake())
        rig.wakes.stop()
        rig.wakes.join(WAIT_S)
        assert rig.swept == [] and rig.wakes.waiting_for is None

    def test_stopped_it_sweeps_no_more(self) -> None:
        """Stopped before its wake has come, and started after: nothing is swept."""
        clock = Clock(T0)
        stopped = Rig(clock)
        stopped.arm("a", 1)
        stopped.wakes.stop()
        clock.now = T0 + 5
        stopped.wakes.start()
        stopped.wakes.join(WAIT_S)
        assert stopped.swept == []
