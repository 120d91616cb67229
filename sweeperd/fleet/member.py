"""One primary's sweeping: its node, ledger, ticks, drain, wakes and listener, in one object."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from sweeperd.config.settings import QueueSettings
from sweeperd.fleet.deadlines import Deadlines
from sweeperd.fleet.drain import Drainer
from sweeperd.fleet.ledger import Ledger
from sweeperd.fleet.listener import Listener, SourceState
from sweeperd.fleet.node import Node
from sweeperd.fleet.outcome import Outcome
from sweeperd.fleet.primary import Primary
from sweeperd.fleet.routes import Routes
from sweeperd.fleet.tick import Tick
from sweeperd.metrics.state import NodeState

OFF_WHY = "--deadline-source off"


class Member:
    """Sweeps the queues one primary owns: runs their ticks (on the caller's thread, or on
    `workers` threads of its own), drains their backlogs, wakes them at their deadlines and
    hears their new leases, and reports what the schedule must answer to `report`.

    It owns its parts: the fleet asks it, never them. Every part reads time from its `clock`,
    the fleet's.
    """

    def __init__(
        self,
        node: Node,
        ledger: Ledger,
        *,
        prefix_root: str,
        share: float,
        report: Callable[[Outcome], None] = lambda _outcome: None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        at_deadlines: bool = False,
        hear_changes: bool = False,
        brief: bool = False,
        workers: int = 0,
    ) -> None:
        self.node = node
        self.ledger = ledger
        self.report = report
        self.clock = clock
        self.wall_clock = wall_clock
        self.deadlines = Deadlines() if at_deadlines else None
        self.drainer = Drainer(self, share=share)
        self.ticks = Tick(self, brief=brief)
        self.pool = (
            ThreadPoolExecutor(workers, thread_name_prefix=f"sweep-{node.name}")
            if workers
            else None
        )
        self.listener = (
            Listener(
                node.name,
                node.client,
                prefix_root,
                self.deadlines,
                armed=lambda at: report(Outcome(wake=at)),
                clock=clock,
            )
            if self.deadlines is not None and hear_changes
            else None
        )
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def primary(self) -> Primary:
        """Its primary, as the daemon's jobs may use it: name, client, how it answers."""
        return self.node

    @property
    def restarts(self) -> int:
        """How many times its server restarted or failed over while it was a primary."""
        return self.node.restarts

    def inherit(self, before: Member) -> None:
        """Take over the epoch of the primary whose slots it took over."""
        self.node.inherit(before.node)

    def retune(self, call_target_s: float, drain_share: float) -> None:
        """Apply SIGHUP's call target and drain share in place."""
        self.node.retune(call_target_s)
        self.drainer.share = drain_share

    # The sweep.
    def sweep(self, queues: Sequence[QueueSettings], *, look: bool = True) -> None:
        """Run a scheduled tick of the queues, on this thread or on one of its own."""
        self._submit(queues, look=look, woken=False)

    def wake(
        self, now: float, owned: Mapping[str, QueueSettings], routes: Routes, *, look: bool
    ) -> None:
        """Sweep the queues whose wake has come by `now` (monotonic) and that it still serves:
        those this replica owns (`owned`, with their settings) and `routes` sends here. A
        queue swept elsewhere now (another primary's, another replica's) is not woken here:
        its sweeps there arm its wakes there. Without `look`, the replies' run_id is the epoch
        watch (see Node.sweep)."""
        if self.deadlines is None:
            return
        due = [
            q
            for queue in self.deadlines.due(now)
            if routes.owner(queue) == self.name and (q := owned.get(queue)) is not None
        ]
        if due:
            self._submit(due, look=look, woken=True)

    def next_wake(self) -> float | None:
        """Return when its next queue falls due at its deadline (monotonic); None when none
        waits."""
        return None if self.deadlines is None else self.deadlines.next_wake()

    def forget(self, queue: str) -> None:
        """Drop the queue from its drain, ledger, wakes and listener."""
        self.drainer.forget(queue)
        self.ledger.forget(queue)
        if self.deadlines is not None:
            self.deadlines.forget(queue)
        if self.listener is not None:
            self.listener.forget(queue)

    def _submit(self, queues: Sequence[QueueSettings], *, look: bool, woken: bool) -> None:
        """Run the queues' tick on this thread, or on its pool (unless it was dropped
        meanwhile)."""
        if self.pool is None:
            self.run(queues, look=look, woken=woken)
            return
        with contextlib.suppress(RuntimeError):
            self.pool.submit(self.run, queues, look=look, woken=woken)

    def run(self, queues: Sequence[QueueSettings], *, look: bool, woken: bool) -> None:
        """Tick the queues no other tick of its holds, and report the outcome. Queues `woken`
        at their deadline that another tick holds are woken again a floor later: that tick may
        have armed the very wake that woke them."""
        held = self._claim(queues)
        if woken and self.deadlines is not None and len(held) < len(queues):
            names = {q.name for q in held}
            self.deadlines.deferred([q.name for q in queues if q.name not in names], self.clock())
            self.report(Outcome(wake=self.deadlines.next_wake()))
        if not held:
            return
        now = self.clock()
        # A tick a second after another on the node sweeps without a look (10 % of the idle
        # CPU at 100,000 queues: a look per batch of 200).
        look = look and not self.node.looked_lately(now)
        try:
            outcome = self.ticks.run(held, now, look=look, woken=woken)
        finally:
            self._release(held)
        if self.listener is not None:
            self.listener.track(held)
        if self.node.up is False:
            outcome = replace(outcome, down=True)
        self.report(outcome)

    def _claim(self, queues: Sequence[QueueSettings]) -> list[QueueSettings]:
        """Mark as held, and return, the queues no tick of its holds: one call per queue at a
        time."""
        with self._lock:
            free = [q for q in queues if q.name not in self._busy]
            self._busy.update(q.name for q in free)
            return free

    def _release(self, queues: Sequence[QueueSettings]) -> None:
        with self._lock:
            self._busy.difference_update(q.name for q in queues)

    # What it says.
    @property
    def source(self) -> SourceState:
        """Where its queues' deadlines come from now (the interval's sweeps, at the least)."""
        return SourceState.OFF if self.listener is None else self.listener.source

    @property
    def why(self) -> str:
        """Why its deadlines come from that source."""
        return OFF_WHY if self.listener is None else self.listener.why

    def state(self) -> NodeState:
        """Return its node's state, and whether the server tells it of its queues' new leases."""
        listener = self.listener
        return replace(
            self.node.state(),
            hearing=listener is not None and listener.source is SourceState.TRACKING,
            reads=0 if listener is None else listener.reads,
        )

    # The lifetime.
    def start(self) -> None:
        """Start its threads: the drainer's and the listener's."""
        self.drainer.start()
        if self.listener is not None:
            self.listener.start()

    def stop(self, timeout_s: float) -> None:
        """End its threads, the drainer's and the listener's, within `timeout_s` together (what
        they log comes before the stop returns), and let its ticks' pool go."""
        until = time.monotonic() + timeout_s
        if self.listener is not None:
            self.listener.stop(0)  # told first: it ends while the drainer does
        self.drainer.stop(timeout_s)
        if self.listener is not None:
            self.listener.stop(max(0.0, until - time.monotonic()))
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
