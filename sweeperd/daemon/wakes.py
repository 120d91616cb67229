"""The queues' wakes at their deadlines, on the scheduler: one APScheduler job, re-armed to the
soonest wake of any primary, that sweeps what is due then and waits on for the wakes that follow
closely (a thread's timed wait costs a fraction of a scheduler's run)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

from sweeperd.daemon.schedule import utc_now

JOB = "wake"
WAKES = "wakes"  # the job's executor, a thread of its own: a wake never waits behind batches
IDLE_S = 3600.0  # the job's own period, a backstop: it runs when re-armed, not by it
LINGER_S = 1.0  # a run waits on for a wake due within this; one further off re-arms the job


class Wakes:
    """One job, paused while no queue waits and run at the soonest wake. A run sweeps the
    queues due, then waits for the next wake while it is due within LINGER_S (a sooner one
    told meanwhile ends the wait), and re-arms the job to the one after; two runs never
    overlap and no wake is skipped."""

    def __init__(
        self,
        scheduler: BaseScheduler,
        sweep_due: Callable[[float], None],
        next_wake: Callable[[], float | None],
        *,
        clock: Callable[[], float] = time.monotonic,
        utc: Callable[[], datetime] = utc_now,
        linger_s: float = LINGER_S,
    ) -> None:
        self._scheduler = scheduler
        self._sweep_due = sweep_due  # sweeps what is due by a monotonic time
        self._next_wake = next_wake  # the soonest wake armed now (monotonic), None when none
        self._clock = clock
        self._utc = utc
        self._linger_s = linger_s
        self._at: float | None = None  # when the job runs next (monotonic); None: paused
        self._running = False
        self._stopped = False
        self._changed = threading.Condition()  # a run waits on it; a sooner wake notifies it
        scheduler.add_executor(ThreadPoolExecutor(1), WAKES)

    def add(self) -> None:
        """The job (again after SIGHUP removed every job), armed to the soonest wake."""
        with self._changed:
            self._scheduler.add_job(
                self._run,
                IntervalTrigger(seconds=IDLE_S),
                id=JOB,
                name=JOB,
                executor=WAKES,
                max_instances=2,  # a run re-arms the job before its instance is counted done
                coalesce=True,
                misfire_grace_time=None,  # late (the process was stopped): it still runs
                next_run_time=None,
            )
            if not self._running:
                self._arm(self._next_wake())

    def soon(self, at: float) -> None:
        """A queue falls due at `at` (monotonic): the job runs then, if that is sooner."""
        with self._changed:
            if self._running:
                self._changed.notify()
            elif self._at is None or at < self._at:
                self._arm(at)

    def stop(self) -> None:
        """A run waiting ends; none sweeps again, and the job is not touched again (the
        scheduler shuts down next)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    @property
    def at(self) -> float | None:
        """When the job runs next (monotonic); None while no queue waits or a run waits on."""
        return self._at

    def _run(self) -> None:
        with self._changed:
            if self._running or self._stopped:
                return
            self._running, self._at = True, None
        try:
            while self._sweep_and_wait():
                pass
        finally:
            with self._changed:
                self._running = False
                self._arm(None if self._stopped else self._next_wake())

    def _sweep_and_wait(self) -> bool:
        """Sweep what is due now; then, if the next wake is due within the linger, wait for it
        (or for a sooner one) and say so."""
        self._sweep_due(self._clock())
        with self._changed:
            if self._stopped:
                return False
            at, now = self._next_wake(), self._clock()
            if at is None or at - now > self._linger_s:
                return False
            if at > now:
                self._changed.wait(at - now)
            return not self._stopped

    def _arm(self, at: float | None) -> None:
        """The job runs at `at` (monotonic), or is paused; hold the lock. Once stopped, the
        scheduler is left alone: its shutdown holds its job store's lock while it waits for
        this job's thread, which would wait for that lock."""
        if self._stopped:
            return
        self._at = at
        when = None if at is None else self._utc() + timedelta(seconds=at - self._clock())
        try:
            self._scheduler.modify_job(JOB, next_run_time=when)
        except JobLookupError:  # every job was removed (SIGHUP): add() arms it again
            self._at = None
