"""What a tick, a drain call or a read of the layout found that the schedule must answer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """Told to the daemon, which answers it: nothing, every queue now, or every queue soon."""

    restarted: bool = False  # a server restarted or failed over, or slots changed hands
    loading: bool = False  # a server is loading its dataset: its queues again soon
    moved: tuple[str, ...] = ()  # queues a node sent elsewhere: the layout is read again
    wake: float | None = None  # a node's next queue due at its deadline (monotonic seconds)
    down: bool = False  # a node did not answer: the layout is read again, nothing scheduled

    def __bool__(self) -> bool:
        return self.restarted or self.loading or bool(self.moved) or self.wake is not None


NOTHING = Outcome()
RESTARTED = Outcome(restarted=True)
LOADING = Outcome(loading=True)
