"""How many leases one call takes: as many as keep the call under its target time."""

from __future__ import annotations

from dataclasses import dataclass

# Leases in a node's first call, before any call was timed.
FIRST_SIZE = 100
# A call is at most MOST_GROWTH times the size of the last, and at least MOST_SHRINK of it.
MOST_GROWTH = 2.0
MOST_SHRINK = 0.25
# Calls aim at this fraction of the target: a call's time strays by a fifth or so around its
# size's usual time (the server's caches, other clients), and the target is a ceiling.
AIM = 0.75


@dataclass
class CallSizer:
    """The size of the next call on one node, moved by each full call timed towards a call time
    of AIM times `target_s`, so that calls stay under the target.

    A call's time is the server's own (the sweep script times itself), or its round trip where
    the server cannot say. Only a call that took all it was allowed says how long that many
    leases take; a short one cannot say the size was too small, and one that took none says
    nothing of a lease's cost (its time is the server's own pace: a loaded host, not the size).
    """

    target_s: float
    size: int = FIRST_SIZE

    def next(self, limit: int) -> int:
        """Return the next call's size: the learned size, never above the queue's `limit`."""
        return max(1, min(self.size, limit))

    def observe(self, asked: int, taken: int, seconds: float) -> None:
        """Size the next call from one that asked for `asked` leases, took `taken`, and ran
        `seconds`."""
        if seconds <= 0 or taken == 0:
            return
        ratio = self.target_s * AIM / seconds
        if ratio < 1:
            self.size = max(1, round(asked * max(MOST_SHRINK, ratio)))
        elif taken >= asked:
            self.size = max(self.size, round(asked * min(MOST_GROWTH, ratio)))
