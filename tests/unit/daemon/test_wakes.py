"""The wakes' job on a real APScheduler: paused while no queue waits, armed to the soonest wake
told, a run sweeping what is due and re-arming the job, lingering for the wakes close behind;
clocks passed in where nothing waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from sweeperd.daemon.wakes import JOB, Wakes
from sweeperd.fleet.deadlines import Deadlines
from tests.support.clock import Clock

T0 = 1_000.0  # the monotonic clock's reading
UTC0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the scheduler's clock then
SERVER_MS = 1_700_000_000_000.0  # the server's clock then


class Rig:
    """A scheduler (never started: its jobs are read, and run by hand), the wakes on it and
    the deadlines they wake for; each run's sweep pops the queues due and records them."""

    def __init__(self, clock: Clock | None = None, linger_s: float = 0.0) -> None:
        self.clock = clock
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.deadlines = Deadlines(grace_s=0.0, floor_s=0.0, window_s=0.0)
        self.deadlines.measured(SERVER_MS, clock() if clock else time.monotonic())
        self.swept: list[tuple[float, list[str]]] = []
        self.running = threading.Event()  # a run swept once (and waits on, lingering)
        self.woken = threading.Event()  # a run swept a queue
        self.wakes = Wakes(
            self.scheduler,
            self.sweep,
            self.deadlines.next_wake,
            clock=clock or time.monotonic,
            utc=lambda: UTC0 + timedelta(seconds=(clock or time.monotonic)() - T0),
            linger_s=linger_s,
        )

    def sweep(self, now: float) -> None:
        due = self.deadlines.due(now)
        self.swept.append((now, due))
        self.running.set()
        if due:
            self.woken.set()

    def arm(self, queue: str, in_s: float) -> float:
        """A queue due `in_s` from now; its wake (monotonic)."""
        now = self.clock() if self.clock else time.monotonic()
        host = self.deadlines.host_s(SERVER_MS)
        assert host is not None
        self.deadlines.arm(queue, SERVER_MS + (now - host + in_s) * 1000, now, 3600)
        at = self.deadlines.next_wake()
        assert at is not None
        return at

    def next_run(self) -> datetime | None:
        job = self.scheduler.get_job(JOB)
        assert job is not None
        run: datetime | None = job.next_run_time
        return run

    def run(self) -> None:
        """The job run as the scheduler runs it, on this thread."""
        job = self.scheduler.get_job(JOB)
        assert job is not None
        job.func()


@pytest.fixture
def rig() -> Rig:
    made = Rig(Clock(T0))
    made.wakes.add()
    return made


class TestArming:
    def test_paused_while_no_queue_waits(self, rig: Rig) -> None:
        """Added with nothing armed, the job is paused."""
        assert (rig.next_run(), rig.wakes.at) == (None, None)

    def test_armed_to_the_soonest_wake_told(self, rig: Rig) -> None:
        """A wake told runs the job then, on the scheduler's clock; a later one changes
        nothing, a sooner one moves it."""
        rig.wakes.soon(T0 + 5)
        assert rig.next_run() == UTC0 + timedelta(seconds=5)
        rig.wakes.soon(T0 + 9)
        assert rig.next_run() == UTC0 + timedelta(seconds=5)
        rig.wakes.soon(T0 + 2)
        assert (rig.next_run(), rig.wakes.at) == (UTC0 + timedelta(seconds=2), T0 + 2)

    def test_added_again_it_is_armed_to_the_soonest(self, rig: Rig) -> None:
        """SIGHUP removes every job: a wake told meanwhile arms nothing; added again, the job
        runs at the soonest wake armed."""
        rig.arm("q", 3)
        rig.scheduler.remove_all_jobs()
        rig.wakes.soon(T0 + 1)
        assert rig.wakes.at is None
        rig.wakes.add()
        assert rig.next_run() == UTC0 + timedelta(seconds=3)

    def test_stopped_it_leaves_the_scheduler_alone(self, rig: Rig) -> None:
        """Once stopped (the scheduler shuts down next, holding its job store while it waits
        for the jobs' threads), neither a wake told nor a run's end changes the job."""
        assert rig.clock is not None
        rig.wakes.soon(T0 + 5)
        rig.wakes.stop()
        rig.wakes.soon(T0 + 1)
        rig.arm("q", 1)
        rig.clock.now = T0 + 2
        rig.run()
        assert (rig.next_run(), rig.swept) == (UTC0 + timedelta(seconds=5), [])


class TestRun:
    def test_a_run_sweeps_what_is_due_and_re_arms_to_the_next(self, rig: Rig) -> None:
        """Run at the soonest wake: the queues due then are swept, and the job is armed to the
        next wake, or paused when none is left."""
        assert rig.clock is not None
        rig.arm("a", 1)
        rig.arm("b", 4)
        rig.clock.now = T0 + 1
        rig.run()
        assert rig.swept == [(T0 + 1, ["a"])]
        assert rig.next_run() == UTC0 + timedelta(seconds=4)
        rig.clock.now = T0 + 4
        rig.run()
        assert rig.swept[-1] == (T0 + 4, ["b"])
        assert rig.next_run() is None

    def test_a_run_late_sweeps_everything_due(self, rig: Rig) -> None:
        """A run long after its time (the process was stopped) sweeps every queue due by now
        at once."""
        assert rig.clock is not None
        for n in range(3):
            rig.arm(f"q{n}", n + 1)
        rig.clock.now = T0 + 60
        rig.run()
        assert rig.swept == [(T0 + 60, ["q0", "q1", "q2"])]


class TestLinger:
    """The run waits on for the wakes close behind: real time, waited on an event."""

    @pytest.fixture
    def lingering(self) -> Iterator[Rig]:
        made = Rig(linger_s=30.0)
        made.wakes.add()
        yield made
        made.wakes.stop()

    def test_wakes_close_behind_are_swept_in_the_same_run(self, lingering: Rig) -> None:
        """Two wakes 50 ms apart: one run sweeps both, each no sooner than its time, then the
        job is paused."""
        first, second = lingering.arm("a", 0.05), lingering.arm("b", 0.10)
        lingering.run()
        assert [queues for _, queues in lingering.swept if queues] == [["a"], ["b"]]
        [(at_a, _)] = [s for s in lingering.swept if s[1] == ["a"]]
        [(at_b, _)] = [s for s in lingering.swept if s[1] == ["b"]]
        assert (at_a >= first, at_b >= second, lingering.next_run()) == (True, True, None)

    def test_a_sooner_wake_ends_the_wait(self, lingering: Rig) -> None:
        """A run waiting 20 s for its next wake is told of one due now: it sweeps it at once."""
        lingering.arm("late", 20)
        running = threading.Thread(target=lingering.run)
        running.start()
        assert lingering.running.wait(10)
        lingering.wakes.soon(lingering.arm("now", 0))
        found = lingering.woken.wait(10)  # far sooner than the 20 s wait
        lingering.wakes.stop()
        running.join(10)
        assert (found, [q for _, q in lingering.swept if q]) == (True, [["now"]])
        assert not running.is_alive()

    def test_stop_ends_a_waiting_run(self, lingering: Rig) -> None:
        """Stopped while it waits for a wake 20 s off, the run ends now and the job is
        paused."""
        lingering.arm("late", 20)
        running = threading.Thread(target=lingering.run)
        running.start()
        assert lingering.running.wait(10)  # its first sweep: it waits from then on
        lingering.wakes.stop()
        running.join(10)
        assert not running.is_alive() and lingering.next_run() is None
