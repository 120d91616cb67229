"""`sweeperd top`'s rates: how fast a queue's pending set and failed count grew over a window."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    # Seconds since the epoch, the view's clock.
    at: float
    pending: int
    # metrics:failed count; None when it is not an integer.
    failed: int | None


class RateWindow:
    """Each queue's reads of the last `window_s` seconds and the one just before them: a rate
    is the growth since the newest read at least the window old (or the oldest one kept), so a
    daemon that sweeps in bursts reads as a steady rate, not as bursts and zeros."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._reads: dict[str, tuple[object, deque[Sample]]] = {}

    def add(self, queue: str, source: object, sample: Sample) -> tuple[float | None, float | None]:
        """Record a read of `queue` from `source` (a server process: another one starts the
        rates again); its recovered and dead rates per second, None for the first read."""
        kept = self._reads.get(queue)
        if kept is None or kept[0] != source:
            kept = (source, deque())
            self._reads[queue] = kept
        reads = kept[1]
        while len(reads) > 1 and reads[1].at <= sample.at - self.window_s:
            reads.popleft()
        base = reads[0] if reads else None
        reads.append(sample)
        if base is None or sample.at <= base.at:
            return None, None
        elapsed = sample.at - base.at
        recovered = (sample.pending - base.pending) / elapsed
        if sample.failed is None or base.failed is None:
            return recovered, None
        return recovered, (sample.failed - base.failed) / elapsed
