"""What the sweeps did, per queue and per node, kept as plain numbers: the ledger writes them
(an event costs a few additions, not a labelled child per series), a scrape reads them."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Collection, Sequence

from sweeperd.constants import QueueMetrics
from sweeperd.reasons import Reason
from sweeperd.verb.replies import CallResult, SweepReply

# One tick of one queue: a pipelined verb call takes about a millisecond; a drain, seconds.
DURATION_BUCKETS_S = (1e-3, 5e-3, 0.025, 0.1, 0.5, 2.5, 10.0)  # few: full has a set per queue
# How long after its deadline a lease was taken: a round trip when swept at its deadline, up to
# the interval when swept at its interval, longer while a backlog drains.
DELAY_BUCKETS_S = (5e-3, 0.025, 0.05, 0.25, 1.0, 5.0, 60.0)


def escaped(value: str) -> str:
    """A label value as the exposition formats write it."""
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
        """`times` observations of `seconds`, which fall in bucket number `bucket`."""
        self.buckets[bucket] += times
        self.total += seconds * times

    def add(self, seconds: float) -> None:
        """One observation of `seconds`."""
        self.observe(bisect_left(self.bounds, seconds), seconds)


class Totals:
    """What a node and a queue both count (sweeps, ghosts, durations, recovery delays: per node
    at basic, per queue at full), and how their samples are labelled."""

    __slots__ = ("delays", "durations", "ghosts", "label", "name", "sweeps", "values")

    def __init__(self, label: str, name: str) -> None:
        self.name = name
        self.label = f'{label}="{escaped(name)}"'  # the sample's labels, escaped once
        self.values = (name,)  # and as the library's families take them
        self.sweeps = 0
        self.ghosts = 0
        self.durations = Durations()
        self.delays = Durations(DELAY_BUCKETS_S)


class NodeSeries(Totals):
    """A node's totals of what is per queue only with --queue-metrics full."""

    __slots__ = ()

    def __init__(self, node: str) -> None:
        super().__init__("node", node)


class QueueSeries(Totals):
    """One queue's numbers: plain values, rendered as samples only when scraped."""

    __slots__ = (
        "dead",
        "exempt",
        "expired",
        "failed",
        "failures",
        "jobs",
        "last_success",
        "oldest_expired_age",
        "owned",
        "recovered",
    )

    def __init__(self, queue: str, *, owned: bool = True) -> None:
        super().__init__("queue", queue)
        self.recovered = 0
        self.dead = 0
        self.exempt = 0
        self.failures: dict[str, int] = {}  # a reason appears when it happens
        self.last_success: float | None = None  # absent until a call succeeds: 0 reads as 1970
        # The gauges of its state: None (absent) until a call of this replica read them, as a
        # 0 would say "nothing expired" of a server never read.
        self.expired: int | None = None
        self.oldest_expired_age: float | None = None
        self.jobs: tuple[int, int, int] | None = None
        self.failed: int | None = None
        self.owned = owned  # False: not this replica's (yet): its state's gauges stay absent

    def disown(self) -> None:
        """Not this replica's queue now: the numbers of its state are unknown here."""
        self.owned = False
        self.expired = self.oldest_expired_age = self.jobs = self.failed = None

    def count(self, node: NodeSeries, result: CallResult, at: float) -> None:
        """One call into the queue's and its node's numbers; call with the lock held."""
        self.sweeps += 1
        node.sweeps += 1
        depths = result.depths
        if depths is not None and depths.delay_ms is not None:  # the call took leases
            delay_s = depths.delay_ms / 1000
            self.delays.add(delay_s)
            node.delays.add(delay_s)
        if depths is not None and self.owned:  # a call that outlived the ownership: unknown
            self.expired = depths.expired
            self.oldest_expired_age = depths.oldest_expired_age_s
            self.jobs = (depths.active, depths.pending, depths.dead)
            self.failed = depths.failed or 0
        reply = result.reply
        if isinstance(reply, SweepReply):
            if reply.taken:
                recovered, dead, exempt = reply.sizes
                self.recovered += recovered
                self.dead += dead
                self.exempt += exempt
                self.ghosts += reply.ghosts
                node.ghosts += reply.ghosts
            self.last_success = at
        else:
            self.failed_with(reply.reason)

    def failed_with(self, reason: Reason) -> None:
        label = Reason(reason).value
        self.failures[label] = self.failures.get(label, 0) + 1


class SweepNumbers:
    """Every queue's and node's numbers; safe to write from any thread."""

    def __init__(self, level: QueueMetrics) -> None:
        self.level = level
        self.lock = threading.Lock()  # held by writers; a scrape holds it only to list them
        self.queues: dict[str, QueueSeries] = {}
        self.nodes: dict[str, NodeSeries] = {}

    def series(self, queue: str) -> QueueSeries:
        """The queue's numbers; call with the lock held. Only add_queue() makes a queue's
        series: a call still running when its queue was dropped is counted into numbers of
        its own that nobody exports (its node's totals count it), never bringing it back."""
        found = self.queues.get(queue)
        return found if found is not None else QueueSeries(queue)

    def node(self, node: str) -> NodeSeries:
        """The node's totals, created at zero on first use; call with the lock held."""
        found = self.nodes.get(node)
        if found is None:
            found = self.nodes[node] = NodeSeries(node)
        return found

    def listed(self) -> tuple[list[QueueSeries], list[NodeSeries]]:
        """The queues and nodes as they are now, for a scrape to read without the lock: each
        number is whole, but one that meets a call being counted may show part of it."""
        with self.lock:
            return list(self.queues.values()), list(self.nodes.values())

    # The ledger's: what each call did.
    def record(self, node: str, queue: str, result: CallResult, at: float) -> None:
        """One call at Unix time `at`: what it recovered, dead-lettered, exempted and removed
        as ghosts, or its failure, and the queue's numbers right after it."""
        with self.lock:
            self.series(queue).count(self.node(node), result, at)

    def record_round(
        self,
        node: str,
        queues: Sequence[str],
        results: Sequence[CallResult],
        at: float,
        *,
        duration_s: float,
    ) -> None:
        """A tick's calls, one per queue, each as record() counts it, and the tick's round
        trip as each queue's duration."""
        bucket = bisect_left(DURATION_BUCKETS_S, duration_s)
        with self.lock:
            n = self.node(node)
            n.durations.observe(bucket, duration_s, len(results))
            series = self.series
            for queue, result in zip(queues, results, strict=True):
                q = series(queue)
                q.durations.observe(bucket, duration_s)
                q.count(n, result, at)

    def record_failure(self, node: str, queue: str, reason: Reason) -> None:
        """One verb call that failed without a reply (the node was down, or the tick broke)."""
        with self.lock:
            q = self.series(queue)
            q.sweeps += 1
            self.node(node).sweeps += 1
            q.failed_with(reason)

    def record_ticks(self, node: str, queues: Sequence[str], *, duration_s: float) -> None:
        """A tick of these queues that took `duration_s`, there and back."""
        bucket = bisect_left(DURATION_BUCKETS_S, duration_s)
        with self.lock:
            self.node(node).durations.observe(bucket, duration_s, len(queues))
            for queue in queues:
                self.series(queue).durations.observe(bucket, duration_s)

    # Which queues and nodes have series.
    def add_node(self, node: str) -> None:
        """A node's sweeps and ghosts at 0 from the start."""
        with self.lock:
            self.nodes.setdefault(node, NodeSeries(node))

    def forget_node(self, node: str) -> None:
        """Remove the totals of a node long gone (see Fleet.forget_retired)."""
        with self.lock:
            self.nodes.pop(node, None)

    def add_queue(self, queue: str, *, owned: bool = True) -> None:
        """The queue's counters at 0, so that rate() and increase() work from the start (and,
        summed across replicas, whichever owns it); `owned` (this replica sweeps it) lets
        its state's gauges appear with the first call that reads them. A queue already here
        keeps its numbers, and is owned from now when `owned`.

        Left out until then: the last-success timestamp until a call succeeds (0 would read
        as 1970), failures until one happens (eight reasons a queue would be eight series
        per queue nobody reads at ten thousand queues), and the gauges until read.
        """
        with self.lock:
            found = self.queues.get(queue)
            if found is None:
                self.queues[queue] = QueueSeries(queue, owned=owned)
            elif owned:
                found.owned = True

    def disown_queue(self, queue: str) -> None:
        """The queue is another replica's now (or nobody's, while the server is out of reach):
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
