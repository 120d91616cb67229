"""What the daemon's jobs may use of a primary: its name, a client to read with, how it answers."""

from __future__ import annotations

from typing import Protocol

import redis

from sweeperd.reasons import SweepError


class Primary(Protocol):
    """A primary as discovery, the eviction watch, the audit, readiness and the heartbeat see it:
    its name and a client for their own reads, whether and when it answered, and what it refuses.
    They tell it how their reads went (`answered`, `unreachable`); its sweeps, epoch, executor
    and call sizes stay its member's."""

    @property
    def name(self) -> str: ...

    @property
    def client(self) -> redis.Redis: ...

    @property
    def up(self) -> bool | None:
        """True once it answered, False while it is down, None before either."""

    @property
    def error(self) -> str | None:
        """Why it is down, while it is."""

    @property
    def refusal(self) -> SweepError | None:
        """Why it refuses every sweep, while it does."""

    def answered_within(self, now: float, seconds: float) -> bool:
        """Tell whether it answered within `seconds` of `now` (monotonic)."""

    def answered(self, now: float) -> None:
        """Mark it up: a read of it was answered at `now` (monotonic)."""

    def unreachable(self, error: BaseException) -> None:
        """Mark it down: a read of it could not reach the server."""
