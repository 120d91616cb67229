"""Time passed in: a clock the test moves by hand, or by a step at each reading."""

from __future__ import annotations


class Clock:
    """Seconds from `start`; each reading moves it on by `step` first, and a test sets `now`."""

    def __init__(self, start: float = 1000.0, step: float = 0.0) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now
