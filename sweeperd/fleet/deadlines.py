"""When each queue of one primary falls due next, on the host's monotonic clock: the earliest
lease deadline its last sweep read (ms, the server's clock) turned into host time through the
server-host clock offset, plus a grace, and never sooner than a floor after that sweep; queues
falling due within a few milliseconds of each other are woken together, each waiting at most a
thousandth of its interval for the others."""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Sequence
from itertools import islice

from sweeperd.config.settings import QueueSettings

# A later clock reading is taken once the kept one, let fall by SLEW a second, is below it
# (1 ms/s: a server clock set back is followed, ten times as fast as NTP slews one).
SLEW = 0.001
# A queue is woken GRACE_S past its deadline (the server's clock is read to the millisecond),
# and at most every FLOOR_S however its deadlines move.
GRACE_S = 0.002
FLOOR_S = 0.01
# A wake waits for the wakes after it at most WINDOW_S, and at most WINDOW_SHARE of its queue's
# interval: those within are one round (a round costs ten times one more call in it); 5 ms at
# the default interval, 30 ms from a 30 s one on.
WINDOW_S = 0.03
WINDOW_SHARE = 0.001
# A scheduled tick leaves to its wake a queue whose wake comes within SOON_S (or its interval).
SOON_S = 1.0
# Wakes are armed at most HORIZON_INTERVALS intervals ahead: beyond, the next interval sweep
# reads the deadline again (so an idle queue's far lease costs nothing).
HORIZON_INTERVALS = 2


def _at(wake: tuple[float, str]) -> float:
    return wake[0]


class Deadlines:
    """The next wake of each queue of one primary, and the server's clock against ours.

    A queue has one wake at most: the one its last sweep armed. `offset_ms` is the server's
    clock minus ours (monotonic) in ms, read or last held at `measured_s`; `wakes` maps a queue
    to when it is woken (monotonic) and how long it may wait for others, `order` holds the same
    (when, queue) soonest first, and `heard` when a read of a queue's change last armed it
    (until a sweep sent after that read arms it). Safe to use from any thread.
    """

    def __init__(
        self, *, grace_s: float = GRACE_S, floor_s: float = FLOOR_S, window_s: float = WINDOW_S
    ) -> None:
        self.grace_s = grace_s
        self.floor_s = floor_s
        self.window_s = window_s
        self.offset_ms: float | None = None
        self.measured_s = 0.0
        self.wakes: dict[str, tuple[float, float]] = {}
        self.order: list[tuple[float, str]] = []
        self.heard: dict[str, float] = {}
        self.lock = threading.Lock()

    def measured(self, server_ms: float, host_s: float) -> None:
        """Keep a reading of the server's clock, `server_ms` (ms since the Unix epoch) in a reply
        read at `host_s` (monotonic seconds). The reading was taken before the reply came, so a
        deadline turned into our time by it comes no earlier than it does on the server; the reply
        read soonest after it is the truest, so the offset kept is the greatest of the readings, let
        fall by SLEW since. A reply read late (its thread waited for the GIL behind a tick's round)
        would otherwise move every wake after it that much later."""
        reading = server_ms - host_s * 1000
        with self.lock:
            kept = self.offset_ms
            if kept is not None:
                reading = max(reading, kept - (host_s - self.measured_s) * 1000 * SLEW)
            self.offset_ms, self.measured_s = reading, host_s

    def host_s(self, server_ms: float) -> float | None:
        """Return a time of the server's clock (ms since the Unix epoch) as ours (monotonic
        seconds); None before the clock was read."""
        offset = self.offset_ms
        return None if offset is None else (server_ms - offset) / 1000

    def arm(self, queue: str, earliest_ms: float | None, swept_s: float, interval_s: float) -> None:
        """Arm the queue's wake: a sweep of `queue` (swept every `interval_s`) at `swept_s`
        (monotonic) read `earliest_ms` as the earliest deadline left in its active set (None: no
        lease left).
        The queue is woken then, plus the grace, and no sooner than the floor after the sweep;
        its earlier wake goes. No lease, a deadline further than HORIZON_INTERVALS intervals
        after the sweep (+inf too), or a clock not yet read: no wake, the queue's interval
        sweeps it (and reads its deadline again)."""
        self.arm_round(swept_s, [(queue, earliest_ms, interval_s)])

    def arm_round(self, swept_s: float, swept: Iterable[tuple[str, float | None, float]]) -> None:
        """Arm a round's queues as arm() arms one (queue, earliest_ms, interval_s), under one
        lock: a tick's round is hundreds of queues, most of them with nothing to wake for."""
        with self.lock:
            heard, wakes = self.heard, self.wakes
            held = len(heard)
            for queue, earliest_ms, interval_s in swept:
                if earliest_ms is None and not heard:
                    # No lease left (most queues of an idle round): no wake, none to keep.
                    if queue in wakes:
                        self._drop(queue)
                    continue
                read_s = heard.pop(queue, None) if heard else None
                if read_s is not None and read_s > swept_s:
                    # Kept for the sweeps still in flight since before the read.
                    heard[queue] = read_s
                    self._keep_sooner(queue, earliest_ms, swept_s, interval_s)
                else:
                    self._rearm(queue, earliest_ms, swept_s, interval_s)
            if held and not heard:
                # A dict keeps its table once emptied: the start-up's reads of every queue.
                self.heard = {}

    def learn(self, read_s: float, read: Iterable[tuple[str, float | None, float]]) -> None:
        """Arm the queues whose change was heard, read at `read_s` (monotonic), as arm_round
        arms them. A sweep that read a queue before this read and ends after it keeps the sooner of
        the two wakes: a lease taken between the two reads is in this one only."""
        with self.lock:
            for queue, earliest_ms, interval_s in read:
                self.heard[queue] = read_s
                self._rearm(queue, earliest_ms, read_s, interval_s)

    def _keep_sooner(
        self, queue: str, earliest_ms: float | None, swept_s: float, interval_s: float
    ) -> None:
        """Hold the lock; a read heard after the sweep armed the queue: the sooner wake stays."""
        kept = self.wakes.get(queue)
        at = self._wake_at(earliest_ms, swept_s, interval_s)
        if at is not None and (kept is None or at < kept[0]):
            self._rearm(queue, earliest_ms, swept_s, interval_s)

    def _wake_at(
        self, earliest_ms: float | None, swept_s: float, interval_s: float
    ) -> float | None:
        """When a queue read at `swept_s` is woken for `earliest_ms`; None: not armed. Hold the
        lock."""
        offset = self.offset_ms
        if earliest_ms is None or offset is None:
            return None
        at = max((earliest_ms - offset) / 1000 + self.grace_s, swept_s + self.floor_s)
        return at if at <= swept_s + HORIZON_INTERVALS * interval_s else None

    def _rearm(
        self, queue: str, earliest_ms: float | None, swept_s: float, interval_s: float
    ) -> None:
        """Hold the lock; the queue's wake replaced by the one its read says (none, maybe)."""
        if queue in self.wakes:
            self._drop(queue)
        at = self._wake_at(earliest_ms, swept_s, interval_s)
        if at is not None:
            self._add(queue, at, min(self.window_s, WINDOW_SHARE * interval_s))

    def deferred(self, queues: Iterable[str], now_s: float) -> None:
        """Wake again the queues woken while a sweep of theirs was in flight (a tick holds them),
        the floor after `now_s` (monotonic), unless that sweep armed them meanwhile, waiting for no
        other wake (they are late already). Their wake may have been the one that sweep armed as it
        ended, and it must not be lost."""
        with self.lock:
            for queue in queues:
                if queue not in self.wakes:
                    self._add(queue, now_s + self.floor_s, 0.0)

    def unwoken(self, queues: Sequence[QueueSettings], now_s: float) -> list[QueueSettings]:
        """Return the queues of a scheduled tick at `now_s` (monotonic) whose wake does not come
        within SOON_S, nor within their interval: a queue whose wake does is left to it, the sweep
        of its interval. A wake that found its queue in a tick's round in flight would wait for the
        whole round (one wake in forty did at a 5 s interval: the slowest recoveries)."""
        with self.lock:
            wakes = self.wakes
            return [
                q
                for q in queues
                if (wake := wakes.get(q.name)) is None or wake[0] - now_s > min(SOON_S, q.interval)
            ]

    def forget(self, queue: str) -> None:
        """Drop the queue's wake: it is no longer swept here (another replica's, another
        primary's, held by a migrating slot)."""
        with self.lock:
            self._drop(queue)
            self.heard.pop(queue, None)

    def next_wake(self) -> float | None:
        """Return when to wake next (monotonic): the soonest wake, or a later one that every wake
        before it may wait for (each waits at most its slack), so that the queues falling due
        together go in one round and none goes before its time; None when no queue waits."""
        with self.lock:
            if not self.order:
                return None
            wake, first = self.order[0]
            until = wake + self.wakes[first][1]
            for at, queue in islice(self.order, 1, None):
                if at > until:
                    break
                wake, until = at, min(until, at + self.wakes[queue][1])
            return wake

    def due(self, now_s: float) -> list[str]:
        """Take the queues whose wake has come by `now_s` (monotonic), soonest first; their
        wakes are spent (the sweep that follows arms the next)."""
        with self.lock:
            come = bisect_right(self.order, now_s, key=_at)
            woken = [queue for _, queue in self.order[:come]]
            del self.order[:come]
            for queue in woken:
                del self.wakes[queue]
            return woken

    def waiting(self) -> int:
        """Count the queues that have a wake armed."""
        with self.lock:
            return len(self.wakes)

    def _add(self, queue: str, at: float, slack: float) -> None:
        """Hold the lock; the queue has no wake."""
        self.wakes[queue] = (at, slack)
        insort(self.order, (at, queue))

    def _drop(self, queue: str) -> None:
        """Hold the lock."""
        found = self.wakes.pop(queue, None)
        if found is not None:
            del self.order[bisect_left(self.order, (found[0], queue))]
