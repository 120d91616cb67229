"""What the sweeps did, per queue and per node (with --queue-metrics full, per queue on each node
too), kept as plain numbers: the ledger writes them (an event costs a few additions, not a
labelled child per series), a scrape reads them."""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence

from sweeperd.constants import SPARSE_ABOVE, QueueMetrics
from sweeperd.reasons import Reason
from sweeperd.verb.replies import NOTHING, CallResult, SweepReply

# One tick of one queue: a pipelined verb call takes about a millisecond; a drain, seconds. Few
# buckets: full has a histogram per queue on each node.
DURATION_BUCKETS_S = (1e-3, 5e-3, 0.025, 0.1, 0.5, 2.5, 10.0)
# How long after its deadline a lease was taken: a round trip when swept at its deadline, up to
# the interval when swept at its interval, longer while a backlog drains.
DELAY_BUCKETS_S = (5e-3, 0.025, 0.05, 0.25, 1.0, 5.0, 60.0)
# --queue-metrics sparse (docs/metrics.md#how-many-series): a queue's series are exported while
# it has something to say (leases taken, a failure, leases left expired: SAID_FOR_S after the
# last such call; or, owned, no success for STALE_S), its counters at 0 for ZERO_FIRST_S first
# (every Prometheus scraping at least once a minute sees the 0 before the counts), and restarted
# at 0 once it is quiet again (its next appearance starts from 0 too).
SAID_FOR_S = 1800.0
# Half SweeperdQueueNotSwept's 300 s.
STALE_S = 150.0
ZERO_FIRST_S = 60.0


def escaped(value: str) -> str:
    """Return a label value as the exposition formats write it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Durations:
    """A histogram's state: its buckets' upper bounds, a count per bucket (the last one +Inf)
    and the sum."""

    __slots__ = ("bounds", "buckets", "total")

    def __init__(self, bounds: tuple[float, ...] = DURATION_BUCKETS_S) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, bucket: int, seconds: float, times: int = 1) -> None:
        """Count `times` observations of `seconds`, which fall in bucket number `bucket`."""
        self.buckets[bucket] += times
        self.total += seconds * times

    def add(self, seconds: float) -> None:
        """Count one observation of `seconds`."""
        self.observe(bisect_left(self.bounds, seconds), seconds)


class Totals:
    """What a node counts, and with --queue-metrics full a queue on each node: sweeps, ghosts,
    durations and recovery delays, with its samples' labels (escaped once)."""

    __slots__ = ("delays", "durations", "ghosts", "label", "sweeps", "values")

    def __init__(self, label: str, values: tuple[str, ...]) -> None:
        # The sample's labels as the text writes them, and as the library's families take them.
        self.label = label
        self.values = values
        self.sweeps = 0
        self.ghosts = 0
        self.durations = Durations()
        self.delays = Durations(DELAY_BUCKETS_S)


def node_totals(node: str) -> Totals:
    """Return a node's totals, labelled `node`."""
    return Totals(f'node="{escaped(node)}"', (node,))


# Shared by every queue that has no failures, or no totals by node (full): never written.
NO_FAILURES: dict[str, int] = {}
NO_NODES: dict[str, Totals] = {}


class Said:
    """What a queue seldom has a number for: its counts, failures, set sizes, totals by node and
    when it last had something to say (see QueueSeries); made on the queue's first such number."""

    __slots__ = (
        "dead",
        "exempt",
        "failed",
        "failures",
        "jobs",
        "on",
        "recovered",
        "said_at",
        "shown_at",
    )

    def __init__(self) -> None:
        self.recovered = 0
        self.dead = 0
        self.exempt = 0
        # A reason appears when it happens.
        self.failures = NO_FAILURES
        # Read by a whole call (see QueueSeries.expired), kept with full (which exports them).
        self.jobs: tuple[int, int, int] | None = None
        self.failed: int | None = None
        # With full: its totals on each node it was routed to or called on, by node; one
        # routed elsewhere since keeps its own (counters never go backwards).
        self.on = NO_NODES
        # With sparse: when a call last had something to say, and the scrape its series
        # appeared in.
        self.said_at: float | None = None
        self.shown_at: float | None = None


# Shared by every queue that has said nothing yet: never written (QueueSeries.said makes its own).
NOTHING_SAID = Said()


class QueueSeries:
    """One queue's numbers: plain values, rendered as samples only when scraped. At 100,000
    queues each byte here is 100 kB: what an idle queue has (its name, owner, last success and
    the gauges every read sets) is here, the rest in a Said shared empty until the queue has a
    number for it, and its labels are written when a scrape shows it."""

    __slots__ = ("expired", "last_success", "name", "oldest_expired_age", "owned", "seldom")

    def __init__(self, queue: str, *, owned: bool = True) -> None:
        self.name = queue
        # Absent until a call succeeds: 0 reads as 1970.
        self.last_success: float | None = None
        # The gauges of its state: None (absent) until a call of this replica read them, as a
        # 0 would say "nothing expired" of a server never read.
        self.expired: int | None = None
        self.oldest_expired_age: float | None = None
        # False: not this replica's (yet): its state's gauges stay absent.
        self.owned = owned
        self.seldom = NOTHING_SAID

    def said(self) -> Said:
        """Return the queue's own Said, to write; call with the lock held."""
        if self.seldom is NOTHING_SAID:
            self.seldom = Said()
        return self.seldom

    @property
    def recovered(self) -> int:
        return self.seldom.recovered

    @property
    def dead(self) -> int:
        return self.seldom.dead

    @property
    def exempt(self) -> int:
        return self.seldom.exempt

    @property
    def failures(self) -> dict[str, int]:
        return self.seldom.failures

    @property
    def jobs(self) -> tuple[int, int, int] | None:
        return self.seldom.jobs

    @property
    def failed(self) -> int | None:
        return self.seldom.failed

    @property
    def on(self) -> dict[str, Totals]:
        return self.seldom.on

    @property
    def said_at(self) -> float | None:
        return self.seldom.said_at

    @property
    def shown_at(self) -> float | None:
        return self.seldom.shown_at

    @property
    def label(self) -> str:
        """The sample's labels, as the text writes them."""
        return f'queue="{escaped(self.name)}"'

    @property
    def values(self) -> tuple[str]:
        """The labels' values, as the library's families take them."""
        return (self.name,)

    def speaks(self, now: float) -> bool:
        """Tell whether, with sparse, its series are exported at `now` (see SAID_FOR_S)."""
        said_at = self.seldom.said_at
        if said_at is not None and now - said_at < SAID_FOR_S:
            return True
        return self.owned and self.last_success is not None and now - self.last_success > STALE_S

    def show(self, at: float) -> None:
        """Note the scrape its series appeared in; with the lock held. A queue that has said
        nothing keeps none: its counters show 0 either way, and its first number makes its
        Said, not yet shown (its counters show 0 first)."""
        if self.seldom is not NOTHING_SAID:
            self.seldom.shown_at = at

    def quiet(self) -> None:
        """Make its series go, with sparse: its counters restart at 0 (rates stay right across the
        gap: the next appearance shows 0 first, then what it counts from now)."""
        seldom = self.seldom
        if seldom is NOTHING_SAID:
            return
        seldom.recovered = seldom.dead = seldom.exempt = 0
        seldom.failures = NO_FAILURES
        seldom.shown_at = None

    def at(self, node: str) -> Totals:
        """Return the queue's totals on the node (with full), at zero on first use; call with the
        lock held."""
        found = self.seldom.on.get(node)
        if found is None:
            said = self.said()
            if said.on is NO_NODES:
                said.on = {}
            label = f'{self.label},node="{escaped(node)}"'
            found = said.on[node] = Totals(label, (self.name, node))
        return found

    def disown(self) -> None:
        """Forget the numbers of the queue's state: not this replica's queue now, they are
        unknown here."""
        self.owned = False
        self.expired = self.oldest_expired_age = None
        if self.seldom is not NOTHING_SAID:
            self.seldom.jobs = self.seldom.failed = None

    def count(
        self, totals: Sequence[Totals], result: CallResult, at: float, *, sizes: bool = True
    ) -> None:
        """Count one call into the queue's numbers and the totals it counts in (its node's, and with
        full the queue's on that node), the set sizes it read with `sizes` (full exports them);
        call with the lock held."""
        depths = result.depths
        delay_s = None if depths is None or depths.delay_ms is None else depths.delay_ms / 1000
        reply = result.reply
        took, ghosts = False, 0  # NOTHING, most calls: nothing taken
        if isinstance(reply, SweepReply) and reply is not NOTHING:
            took, ghosts = reply.taken > 0, reply.ghosts
        for t in totals:
            t.sweeps += 1
            t.ghosts += ghosts
            # The call took leases.
            if delay_s is not None:
                t.delays.add(delay_s)
        # A call that outlived the ownership: unknown.
        if depths is not None and self.owned:
            self.expired = depths.expired
            self.oldest_expired_age = depths.oldest_expired_age_s
            # A brief reply read none: the last stand.
            if sizes and (jobs := depths.jobs) is not None:
                said = self.said()
                said.jobs = jobs
                said.failed = depths.failed or 0
        if isinstance(reply, SweepReply):
            if took:
                recovered, dead, exempt = reply.sizes
                said = self.said()
                said.recovered += recovered
                said.dead += dead
                said.exempt += exempt
            self.last_success = at
            if took or (depths is not None and depths.expired):
                self.said().said_at = at
        else:
            self.failed_with(reply.reason)
            self.said().said_at = at

    def count_idle(self, at: float) -> None:
        """Count a call that found nothing due, as count() counts it (its node's sweep aside):
        nothing expired, a success; call with the lock held."""
        if self.owned:
            self.expired, self.oldest_expired_age = 0, 0.0
        self.last_success = at

    def failed_with(self, reason: Reason) -> None:
        label = Reason(reason).value
        said = self.said()
        if said.failures is NO_FAILURES:
            said.failures = {}
        said.failures[label] = said.failures.get(label, 0) + 1


def _idle(result: CallResult) -> bool:
    """Tell whether a call found nothing due and took nothing: most calls, counted by
    count_idle."""
    depths = result.depths
    if result.reply is not NOTHING or depths is None:
        return False
    if depths.run_id is None:
        return True  # a brief reply's (Depths.brief): nothing expired, nothing taken late
    return depths.expired == 0 and depths.delay_ms is None and depths.oldest_expired_ms is None


class SweepNumbers:
    """Every queue's and node's numbers; safe to write from any thread."""

    def __init__(self, level: QueueMetrics) -> None:
        self.level = level
        # A queue's totals on each node are kept too.
        self.full = level is QueueMetrics.FULL
        # Only the queues with something to say (auto: above SPARSE_ABOVE queues).
        self.sparse = level is QueueMetrics.SPARSE
        self.sparse_above = SPARSE_ABOVE if level is QueueMetrics.AUTO else None
        # A scrape's now, for sparse.
        self.clock: Callable[[], float] = time.time
        # Held by writers; a scrape holds it only to list them.
        self.lock = threading.Lock()
        self.queues: dict[str, QueueSeries] = {}
        self.nodes: dict[str, Totals] = {}
        # The fleet's routes.
        self.owner: Callable[[str], str | None] = lambda _queue: None

    def series(self, queue: str) -> QueueSeries:
        """Return the queue's numbers; call with the lock held. Only add_queue() makes a queue's
        series: a call still running when its queue was dropped is counted into numbers of
        its own that nobody exports (its node's totals count it), never bringing it back."""
        found = self.queues.get(queue)
        return found if found is not None else QueueSeries(queue)

    def node(self, node: str) -> Totals:
        """Return the node's totals, created at zero on first use; call with the lock held."""
        found = self.nodes.get(node)
        if found is None:
            found = self.nodes[node] = node_totals(node)
        return found

    def totals(self, node: str, queue: QueueSeries) -> tuple[Totals, ...]:
        """Return what a call of the queue on the node counts in: the node's totals, and with full
        the queue's on that node; call with the lock held."""
        return (self.node(node), queue.at(node)) if self.full else (self.node(node),)

    def listed(self) -> tuple[list[QueueSeries], list[Totals]]:
        """Return the queues and nodes as they are now, for a scrape to read without the lock: each
        number is whole, but one that meets a call being counted may show part of it."""
        with self.lock:
            return list(self.queues.values()), list(self.nodes.values())

    def shown(self) -> tuple[list[QueueSeries], list[Totals], set[str]]:
        """Return what a scrape exports now: the queues (at sparse those with something to say, the
        others made quiet), the nodes, and the queues whose counters still show 0."""
        if self.sparse_above is not None:
            self._choose(len(self.queues) > self.sparse_above)
        if not self.sparse:
            queues, nodes = self.listed()
            return queues, nodes, set()
        now = self.clock()
        shown: list[QueueSeries] = []
        zeroed: set[str] = set()
        with self.lock:
            for q in self.queues.values():
                if not q.speaks(now):
                    if q.shown_at is not None:
                        q.quiet()
                    continue
                shown_at = q.shown_at
                if shown_at is None:
                    q.show(shown_at := now)
                if now - shown_at < ZERO_FIRST_S:
                    zeroed.add(q.name)
                shown.append(q)
            return shown, list(self.nodes.values()), zeroed

    def _choose(self, sparse: bool) -> None:
        """Switch auto to sparse, or to basic, keeping every rate right across the change: to
        sparse, the queues shown keep their counts (no 0 first: they were there), the others
        go quiet in this scrape; to basic, a queue hidden until now starts from 0."""
        if sparse is self.sparse:
            return
        long_shown = self.clock() - ZERO_FIRST_S
        with self.lock:
            for q in self.queues.values():
                if sparse:
                    q.show(long_shown)
                elif q.shown_at is None:
                    q.quiet()
            self.sparse = sparse

    # The ledger's: what each call did.
    def record(self, node: str, queue: str, result: CallResult, at: float) -> None:
        """Record one call at Unix time `at`: what it recovered, dead-lettered, exempted and removed
        as ghosts, or its failure, and the queue's numbers right after it."""
        with self.lock:
            q = self.series(queue)
            q.count(self.totals(node, q), result, at, sizes=self.full)

    def record_round(
        self,
        node: str,
        calls: Sequence[tuple[str, CallResult]],
        at: float,
        *,
        duration_s: float,
    ) -> None:
        """Count a tick's calls, one (queue, result) per queue, each as record() counts it, and
        the tick's round trip as each queue's duration."""
        bucket = bisect_left(DURATION_BUCKETS_S, duration_s)
        with self.lock:
            n = self.node(node)
            n.durations.observe(bucket, duration_s, len(calls))
            if self.full:
                for queue, result in calls:
                    q = self.series(queue)
                    on = q.at(node)
                    on.durations.observe(bucket, duration_s)
                    q.count((n, on), result, at)
                return
            alone, kept, idle = (n,), self.queues.get, 0
            for queue, result in calls:
                if _idle(result):
                    idle += 1
                    found = kept(queue)  # a dropped queue's idle call: its node's sweep alone
                    if found is not None:
                        found.count_idle(at)
                else:
                    self.series(queue).count(alone, result, at, sizes=False)
            n.sweeps += idle

    def record_failure(self, node: str, queue: str, reason: Reason) -> None:
        """Record one verb call that failed without a reply (the node was down, or the tick
        broke)."""
        with self.lock:
            q = self.series(queue)
            for t in self.totals(node, q):
                t.sweeps += 1
            q.failed_with(reason)
            q.said().said_at = self.clock()

    def record_ticks(self, node: str, queues: Sequence[str], *, duration_s: float) -> None:
        """Record a tick of these queues that took `duration_s`, there and back."""
        bucket = bisect_left(DURATION_BUCKETS_S, duration_s)
        with self.lock:
            self.node(node).durations.observe(bucket, duration_s, len(queues))
            for queue in queues if self.full else ():
                self.series(queue).at(node).durations.observe(bucket, duration_s)

    # Which queues and nodes have series.
    def add_node(self, node: str) -> None:
        """Export a node's sweeps and ghosts at 0 from the start."""
        with self.lock:
            self.node(node)

    def forget_node(self, node: str) -> None:
        """Remove the totals of a node long gone (see Fleet.forget_retired), and every queue's
        on it."""
        with self.lock:
            self.nodes.pop(node, None)
            for q in self.queues.values():
                if node in q.on:
                    del q.said().on[node]

    def route_by(self, owner: Callable[[str], str | None]) -> None:
        """Say where each queue is swept from now (the fleet's routes: a queue's node, None while
        none serves it). With full, each queue's totals on its node are there at 0 from now;
        those on a node it left stay."""
        with self.lock:
            self.owner = owner
            for q in self.queues.values() if self.full else ():
                self._routed(q)

    def _routed(self, q: QueueSeries) -> None:
        node = self.owner(q.name)
        if node is not None:
            q.at(node)

    def add_queue(self, queue: str, *, owned: bool = True) -> None:
        """Export the queue's counters at 0, so that rate() and increase() work from the start (and,
        summed across replicas, whichever owns it); with full, its totals on its node too, once
        the route is known (route_by). `owned` (this replica sweeps it) lets its state's
        gauges appear with the first call that reads them. A queue already here keeps its
        numbers, and is owned from now when `owned`.

        Left out until then: the last-success timestamp until a call succeeds (0 would read
        as 1970), failures until one happens (eight reasons a queue would be eight series
        per queue nobody reads at ten thousand queues), and the gauges until read.
        """
        with self.lock:
            found = self.queues.get(queue)
            if found is None:
                found = self.queues[queue] = QueueSeries(queue, owned=owned)
            elif owned:
                found.owned = True
            if self.full:
                self._routed(found)

    def disown_queue(self, queue: str) -> None:
        """Mark the queue as another replica's now (or nobody's, while the server is out of reach):
        its counters and last success stay, for sums across replicas to stay whole; the gauges
        of its state (expired leases, oldest age, set sizes) go, as only its owner keeps them
        true (owned again, they start again at 0)."""
        with self.lock:
            found = self.queues.get(queue)
            if found is not None:
                found.disown()

    def keep_queues(self, queues: Collection[str]) -> None:
        """Remove the series of every other queue (one no longer configured nor discovered)."""
        with self.lock:
            for queue in self.queues.keys() - set(queues):
                del self.queues[queue]
