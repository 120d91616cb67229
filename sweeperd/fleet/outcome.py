"""What a tick, a drain call or a read of the layout found that the schedule must answer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """What the daemon answers: `restarted`, a server restarted or failed over, or slots changed
    hands (every queue now); `loading`, a server is loading its dataset (its queues again soon);
    `wake`, a node's next queue due at its deadline (monotonic). The fleet reads the layout
    again for `moved`, the queues a node sent elsewhere, and `down`, a node that did not
    answer."""

    restarted: bool = False
    loading: bool = False
    moved: tuple[str, ...] = ()
    wake: float | None = None
    down: bool = False

    def __bool__(self) -> bool:
        return self.restarted or self.loading or bool(self.moved) or self.wake is not None


NOTHING = Outcome()
RESTARTED = Outcome(restarted=True)
LOADING = Outcome(loading=True)
