"""Where the primaries are, followed: the layout read at the start, again every few seconds on
a thread of its own (a hung node may hold CLUSTER SLOTS for the socket timeout) and soon after
any sign it moved; a failure to read it, or servers that are not the topology named, said once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import structlog
from redis.crc import REDIS_CLUSTER_HASH_SLOTS

from sweeperd.constants import TopologyMode
from sweeperd.reasons import SweepError
from sweeperd.server.connection import UNREACHABLE
from sweeperd.server.topology import Layout, Source

log = structlog.get_logger("sweeperd.fleet")

# The slot map is read every CLUSTER_REFRESH_S, Sentinel asked for the primary every
# SENTINEL_REFRESH_S, and either SOON_REFRESH_S after any sign of a change (a MOVED, a demoted
# primary or a dead one). At stop, a read in flight is waited for STOP_WAIT_S before the source
# closes.
CLUSTER_REFRESH_S = 5.0
SENTINEL_REFRESH_S = 1.0
SOON_REFRESH_S = 0.25
STOP_WAIT_S = 3.0
REFRESH_S = {TopologyMode.CLUSTER: CLUSTER_REFRESH_S, TopologyMode.SENTINEL: SENTINEL_REFRESH_S}


class LayoutWatch:
    """Reads the layout and hands each one read to `apply`, which says whether slots changed
    hands; `on_moved` follows when they did on the watch's own thread (every queue's next tick
    at once). Read every `every_s` (None: one server, whose layout never changes), one read at
    a time; `unreachable` keeps the last failure to read it (logged once), `wrong` why the
    servers are not the topology the options say (`said_wrong` once logged)."""

    def __init__(
        self,
        source: Source,
        mode: TopologyMode,
        apply: Callable[[Layout], bool],
        *,
        on_moved: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.mode = mode
        self.apply = apply
        self.on_moved = on_moved
        self.clock = clock
        self.every_s = REFRESH_S.get(mode)
        self.read_at: float | None = None
        self.soon = threading.Event()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.unreachable: str | None = None
        self.wrong: SweepError | None = None
        self.said_wrong = False
        self.reading = threading.Lock()

    def refresh(self) -> bool:
        """Read the layout and apply it; whether slots changed hands. One read at a time: a
        slow read must not undo a newer one, and none once stopped (the source is closed)."""
        with self.reading:
            return not self.stopped.is_set() and self.read()

    def read(self) -> bool:
        self.soon.clear()
        self.read_at = self.clock()
        try:
            layout = self.source.read()
        except SweepError as exc:  # what answers is not the topology the options name
            said = self.wrong is not None and self.wrong.message == exc.message
            if self.said_wrong and not said:
                log.error(
                    "topology_wrong", mode=self.mode, reason=str(exc.reason), error=exc.message
                )
            self.wrong = exc
            return False
        except UNREACHABLE as exc:
            if self.unreachable != str(exc):
                log.warning("topology_unreachable", mode=self.mode, error=str(exc))
            self.unreachable = str(exc)
            return False
        if self.unreachable is not None or self.wrong is not None:
            log.info("topology_reachable", mode=self.mode)
        self.unreachable = self.wrong = None
        return self.apply(layout)

    def watch(self) -> None:
        """Run the layout thread: read the layout every `every_s`, and soon after refresh_soon()."""
        while not self.stopped.is_set():
            if self.soon.wait(self.every_s):
                self.stopped.wait(SOON_REFRESH_S)  # let the cluster settle a moment
            if self.stopped.is_set():
                return
            self.follow()

    def follow(self) -> None:
        """Read the layout now, on the caller's thread (a heartbeat sent elsewhere needs its
        new place at once); slots that changed hands are said as the watch thread says them."""
        if self.refresh():
            self.on_moved()

    def asked_before(self, seconds: float) -> bool:
        return self.read_at is None or self.clock() - self.read_at >= seconds

    def refresh_soon(self) -> None:
        """Read the layout again soon: something said it moved."""
        self.soon.set()

    def start(self) -> None:
        """Start the watch thread, where the layout can change; wrong topologies are logged
        from now."""
        self.said_wrong = True
        if self.every_s is not None:
            self.thread = threading.Thread(target=self.watch, name="topology", daemon=True)
            self.thread.start()

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Stop reading: the read in flight finishes before the source is closed under it (waited
        for `wait_s` at most: a read hung on a dead node is left to end with the process, its
        source open), and the watch thread ends."""
        self.stopped.set()
        self.soon.set()
        if not self.reading.acquire(timeout=wait_s):
            return
        try:
            self.source.close()
        finally:
            self.reading.release()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(wait_s)  # it reads no more: it ends at its next look at `stopped`


def slot_moves(old: Layout, new: Layout) -> dict[str, int]:
    """Count the slots that changed hands between two layouts by "from to to" ("none" for no
    primary: a slot uncovered mid-failover), for the log to say what changed."""
    moves: Counter[str] = Counter()
    for slot in range(REDIS_CLUSTER_HASH_SLOTS):
        before, after = old.owner(slot), new.owner(slot)
        if before != after:
            moves[f"{before or 'none'} to {after or 'none'}"] += 1
    return dict(sorted(moves.items()))
