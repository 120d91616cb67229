"""The queues' wakes at their deadlines: one thread that waits for the soonest wake of any primary,
sweeps the queues due then and waits again. APScheduler keeps the interval grid; this thread keeps
the deadlines, on the monotonic clock they are armed on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

THREAD = "wakes"


class Wakes:
    """Sweeps the queues due at their deadlines, on a thread of its own: it waits on a condition
    until the soonest wake (`next_wake`, monotonic; None while no queue waits), sweeps what is due
    then (`sweep_due`), and waits for the next one. A sooner wake told meanwhile (`soon`) ends the
    wait; two sweeps never overlap and no wake is skipped."""

    def __init__(
        self,
        sweep_due: Callable[[float], None],
        next_wake: Callable[[], float | None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sweep_due = sweep_due
        self._next_wake = next_wake
        self._clock = clock
        self._waiting_for: float | None = None
        self._stopped = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread, which waits for the soonest wake armed."""
        self._thread = threading.Thread(target=self._run, name=THREAD, daemon=True)
        self._thread.start()

    def soon(self, at: float) -> None:
        """Wake the thread when `at` (monotonic) comes before the wake it waits for."""
        with self._changed:
            waiting_for = self._waiting_for
            if waiting_for is None or at < waiting_for:
                self._changed.notify()

    def stop(self) -> None:
        """End the wait now; the thread sweeps no more."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def join(self, timeout_s: float) -> None:
        """Wait at most `timeout_s` for a sweep in flight to end."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def waiting_for(self) -> float | None:
        """The wake the thread waits for (monotonic); None while it sweeps or no queue waits."""
        return self._waiting_for

    def _run(self) -> None:
        while self._wait():
            self._sweep_due(self._clock())

    def _wait(self) -> bool:
        """Wait until the soonest wake has come, and return True; False once stopped."""
        with self._changed:
            while not self._stopped:
                at, now = self._next_wake(), self._clock()
                if at is not None and at <= now:
                    self._waiting_for = None
                    return True
                self._waiting_for = at
                self._changed.wait(None if at is None else at - now)
            self._waiting_for = None
            return False
