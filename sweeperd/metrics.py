"""sweeperd's Prometheus metrics, in a registry of its own (never the global one)."""

from __future__ import annotations

import contextlib
import platform
import threading
from bisect import bisect_left
from collections.abc import Collection, Iterator, Sequence
from enum import StrEnum
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sweeperd.constants import ACTIVE, DEAD, PENDING
from sweeperd.reasons import Reason
from sweeperd.replies import CallResult, SweepReply

SETS = (ACTIVE, PENDING, DEAD)  # the `set` label of sweeperd_queue_jobs
# One tick of one queue: a pipelined verb call takes about a millisecond; a drain, seconds.
DURATION_BUCKETS_S = (1e-3, 5e-3, 0.025, 0.1, 0.5, 2.5, 10.0)  # few: full has a set per queue
BOUNDS = (*(str(float(b)) for b in DURATION_BUCKETS_S), "+Inf")  # the `le` labels
# How late a sweep started against its schedule.
LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
OPENMETRICS_EOF = b"# EOF\n"
C = TypeVar("C", bound=Collector)


class QueueMetrics(StrEnum):
    """How much is exported per queue (--queue-metrics): what an operator needs, or all."""

    BASIC = "basic"
    FULL = "full"


HELP = {
    "recovered": "Expired leases returned to pending by the sweep (exempt ones included).",
    "dead": "Jobs moved to the dead-letter set because their stall budget ran out.",
    "exempt": "Recovered leases not counted against the stall budget because they predate a "
    "server restart (a subset of sweeperd_recovered_total).",
    "ghosts": "Ids removed from the active set that had no job row (listed nowhere by the verb); "
    "per node, or per queue with --queue-metrics full.",
    "sweeps": "EMQ.STALLED.CHECK calls sent (or their Lua port), failed ones included; per node, "
    "or per queue with --queue-metrics full.",
    "failures": "Sweep calls that failed, by reason (lane, wrongtype, counter, arguments, "
    "no_verb, connection, timeout, reply_lost, oom, noperm, moved, cluster_down, loading, "
    "topology, other).",
    "duration": "Wall time of one scheduled tick of one queue (the drain's calls are not in it); "
    "per node, or per queue with --queue-metrics full.",
    "last_success": "Unix time of the queue's last successful call.",
    "expired": "Leases of the queue still expired after its last call (sweeps not keeping up).",
    "oldest": "How long the queue's oldest expired lease had been overdue at its last call: "
    "how late recovery runs (0 when nothing was expired).",
    "jobs": "Jobs in the queue's active, pending and dead sets, read at its last call "
    "(--queue-metrics full).",
    "failed": "The queue's own count of jobs that died for any reason (its metrics:failed hash; "
    "--queue-metrics full).",
}


class Durations:
    """A histogram's state: a count per bucket (the last one +Inf) and the sum."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets = [0] * len(BOUNDS)
        self.total = 0.0

    def observe(self, bucket: int, seconds: float, times: int = 1) -> None:
        """`times` observations of `seconds`, which fall in bucket number `bucket`."""
        self.buckets[bucket] += times
        self.total += seconds * times


class NodeSeries:
    """A node's totals of what is per queue only with --queue-metrics full."""

    __slots__ = ("durations", "ghosts", "label", "sweeps")

    def __init__(self, node: str) -> None:
        self.label = f'node="{_escaped(node)}"'
        self.sweeps = 0
        self.ghosts = 0
        self.durations = Durations()


class QueueSeries:
    """One queue's numbers: plain values, rendered as samples only when scraped."""

    __slots__ = ("dead", "durations", "exempt", "expired", "failed", "failures", "ghosts", "jobs",
                 "label", "last_success", "oldest_expired_age", "owned", "recovered",
                 "sweeps")  # fmt: skip

    def __init__(self, queue: str) -> None:
        self.label = f'queue="{_escaped(queue)}"'  # the sample's labels, escaped once
        self.recovered = 0
        self.dead = 0
        self.exempt = 0
        self.ghosts = 0
        self.sweeps = 0
        self.failures: dict[str, int] = {}  # a reason appears when it happens
        self.durations = Durations()
        self.last_success: float | None = None  # absent until a call succeeds: 0 reads as 1970
        self.expired = 0
        self.oldest_expired_age = 0.0
        self.jobs = (0, 0, 0)
        self.failed = 0
        self.owned = True  # False: another replica's now; its state's gauges are not exported

    def disown(self) -> None:
        """Not this replica's queue now: the numbers of its state are unknown here."""
        self.owned = False
        self.expired, self.oldest_expired_age, self.jobs, self.failed = 0, 0.0, (0, 0, 0), 0


def _escaped(value: str) -> str:
    """A label value as the exposition formats write it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    return str(value) if type(value) is int else str(floatToGoString(value))  # type: ignore[no-untyped-call]


class _Text:
    """The exposition text of the sweep's families, in the text format or OpenMetrics."""

    def __init__(self, openmetrics: bool) -> None:
        self.openmetrics = openmetrics
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        shown = name if self.openmetrics or kind != "counter" else f"{name}_total"
        self.lines.append(f"# HELP {shown} {help_text}\n# TYPE {shown} {kind}\n")

    def samples(self, name: str, labelled: Iterator[tuple[str, float]]) -> None:
        self.lines.extend(f"{name}{{{labels}}} {_number(value)}\n" for labels, value in labelled)

    def counter(self, name: str, help_text: str, labelled: Iterator[tuple[str, float]]) -> None:
        self.family(name, "counter", help_text)
        self.samples(f"{name}_total", labelled)

    def gauge(self, name: str, help_text: str, labelled: Iterator[tuple[str, float]]) -> None:
        self.family(name, "gauge", help_text)
        self.samples(name, labelled)

    def histogram(self, name: str, help_text: str, labelled: list[tuple[str, Durations]]) -> None:
        self.family(name, "histogram", help_text)
        for labels, durations in labelled:
            running = 0
            for bound, count in zip(BOUNDS, list(durations.buckets), strict=True):
                running += count
                self.lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}\n')
            self.lines.append(f"{name}_count{{{labels}}} {running}\n")
            self.lines.append(f"{name}_sum{{{labels}}} {_number(durations.total)}\n")

    def encoded(self) -> bytes:
        return "".join(self.lines).encode()


SWEEP_FAMILIES = {  # family name -> its type, as describe() announces them
    "sweeperd_recovered": "counter",
    "sweeperd_dead": "counter",
    "sweeperd_exempt": "counter",
    "sweeperd_sweep_failures": "counter",
    "sweeperd_last_success_timestamp_seconds": "gauge",
    "sweeperd_expired_leases": "gauge",
    "sweeperd_oldest_expired_age_seconds": "gauge",
    "sweeperd_sweeps": "counter",
    "sweeperd_ghosts_removed": "counter",
    "sweeperd_sweep_duration_seconds": "histogram",
    "sweeperd_queue_jobs": "gauge",
    "sweeperd_queue_failed_jobs": "gauge",
}


class SweepCollector(Collector):
    """Every series of what the sweeps did, per queue and per node, kept as plain numbers (an
    event costs a few additions, not a labelled child per series) and rendered straight to
    exposition text at scrape time."""

    def __init__(self, level: QueueMetrics) -> None:
        self.level = level
        self.lock = threading.Lock()  # held by writers; a scrape holds it only to list the queues
        self.queues: dict[str, QueueSeries] = {}
        self.nodes: dict[str, NodeSeries] = {}

    def series(self, queue: str) -> QueueSeries:
        """The queue's numbers, created at zero on first use; call with the lock held."""
        found = self.queues.get(queue)
        if found is None:
            found = self.queues[queue] = QueueSeries(queue)
        return found

    def node(self, node: str) -> NodeSeries:
        """The node's totals, created at zero on first use; call with the lock held."""
        found = self.nodes.get(node)
        if found is None:
            found = self.nodes[node] = NodeSeries(node)
        return found

    def render(self, openmetrics: bool) -> bytes:
        """The exposition text of every family at the level, without the OpenMetrics EOF.

        Values are read without the lock: each number is whole, but a scrape that meets a
        call being counted may show some of that call's numbers and not yet the others.
        """
        with self.lock:
            queues = list(self.queues.values())
            nodes = list(self.nodes.values())
        text = _Text(openmetrics)
        text.counter(
            "sweeperd_recovered", HELP["recovered"], ((q.label, q.recovered) for q in queues)
        )
        text.counter("sweeperd_dead", HELP["dead"], ((q.label, q.dead) for q in queues))
        text.counter("sweeperd_exempt", HELP["exempt"], ((q.label, q.exempt) for q in queues))
        text.counter("sweeperd_sweep_failures", HELP["failures"], (
            (f'{q.label},reason="{reason}"', count)
            for q in queues for reason, count in list(q.failures.items())
        ))  # fmt: skip
        text.gauge("sweeperd_last_success_timestamp_seconds", HELP["last_success"], (
            (q.label, at) for q in queues if (at := q.last_success) is not None
        ))  # fmt: skip
        owned = [q for q in queues if q.owned]
        text.gauge(
            "sweeperd_expired_leases", HELP["expired"], ((q.label, q.expired) for q in owned)
        )
        text.gauge("sweeperd_oldest_expired_age_seconds", HELP["oldest"],
                   ((q.label, q.oldest_expired_age) for q in owned))  # fmt: skip
        # Sweeps, ghosts and durations: the node's totals, or each queue's with full.
        full = self.level is QueueMetrics.FULL
        owners: list[QueueSeries] | list[NodeSeries] = queues if full else nodes
        text.counter("sweeperd_sweeps", HELP["sweeps"], ((o.label, o.sweeps) for o in owners))
        text.counter(
            "sweeperd_ghosts_removed", HELP["ghosts"], ((o.label, o.ghosts) for o in owners)
        )
        text.histogram("sweeperd_sweep_duration_seconds", HELP["duration"],
                       [(o.label, o.durations) for o in owners])  # fmt: skip
        if full:
            text.gauge("sweeperd_queue_jobs", HELP["jobs"], (
                (f'{q.label},set="{name}"', size)
                for q in owned for name, size in zip(SETS, q.jobs, strict=True)
            ))  # fmt: skip
            text.gauge("sweeperd_queue_failed_jobs", HELP["failed"],
                       ((q.label, q.failed) for q in owned))  # fmt: skip
        return text.encoded()

    def collect(self) -> Iterator[Metric]:
        """The library's view of the same text (for ?name[]= and get_sample_value): parsed from
        the rendering, so the two never differ."""
        yield from text_string_to_metric_families(self.render(openmetrics=False).decode())

    def describe(self) -> Iterator[Metric]:
        """The family names, so that a ?name[]= scrape of other series skips this collector."""
        for name, kind in SWEEP_FAMILIES.items():
            yield Metric(name, "", kind)


def _count(q: QueueSeries, n: NodeSeries, result: CallResult, at: float) -> None:
    """One call into its queue's and its node's numbers; call with the lock held."""
    q.sweeps += 1
    n.sweeps += 1
    depths = result.depths
    if depths is not None:
        q.expired = depths.expired
        q.oldest_expired_age = depths.oldest_expired_age_s
        q.jobs = (depths.active, depths.pending, depths.dead)
        q.failed = depths.failed or 0
    reply = result.reply
    if isinstance(reply, SweepReply):
        if reply.taken:
            recovered, dead, exempt = reply.sizes
            q.recovered += recovered
            q.dead += dead
            q.exempt += exempt
            q.ghosts += reply.ghosts
            n.ghosts += reply.ghosts
        q.last_success = at
    else:
        reason = reply.reason.value
        q.failures[reason] = q.failures.get(reason, 0) + 1


class Metrics:
    """Every series sweeperd exports; the record methods are safe to call from any thread."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        version: str,
        level: QueueMetrics = QueueMetrics.BASIC,
    ) -> None:
        # `registry` holds every series; `library` every series but the sweep's, which
        # prometheus_client renders itself for a scrape (see exposition()).
        self.registry = registry if registry is not None else CollectorRegistry()
        self.library = CollectorRegistry()
        self._lock = threading.Lock()
        self._info: dict[str, tuple[str, str]] = {}  # node -> (run_id, executor) exported
        self.queues = SweepCollector(level)
        for collector in (ProcessCollector(registry=None), PlatformCollector(registry=None)):
            self._register(collector)
        self.up = self._register(Gauge(
            "sweeperd_redis_up",
            "1 if the last call to the Redis/Valkey node succeeded, 0 if it failed.",
            ["node"], registry=None,
        ))  # fmt: skip
        self.restarts = self._register(Counter(
            "sweeperd_server_restarts",
            "Changes of the node's run_id seen: server restarts and failovers.",
            ["node"], registry=None,
        ))  # fmt: skip
        self.info = self._register(Gauge(
            "sweeperd_server_info",
            "The node's current run_id (the lease epoch) and the executor sweeping it; always 1.",
            ["node", "run_id", "executor"], registry=None,
        ))  # fmt: skip
        self.build = self._register(Gauge(
            "sweeperd_build_info",
            "sweeperd's version and the Python running it; always 1.",
            ["version", "python"], registry=None,
        ))  # fmt: skip
        self.lag = self._register(Histogram(
            "sweeperd_schedule_lag_seconds",
            "How late sweeps started against their schedule.",
            buckets=LAG_BUCKETS_S, registry=None,
        ))  # fmt: skip
        self.missed = self._register(Counter(
            "sweeperd_schedule_missed_runs",
            "Scheduled sweeps of a batch that never ran: the scheduler woke too late for them "
            "(the process stopped, a VM paused) and swept the batch once for all of them.",
            registry=None,
        ))  # fmt: skip
        self.overruns = self._register(Counter(
            "sweeperd_schedule_overruns",
            "Sweeps skipped because the batch's previous sweep was still running "
            "(the interval is shorter than a tick takes).",
            registry=None,
        ))  # fmt: skip
        self.ready = self._register(Gauge(
            "sweeperd_ready",
            "1 when every node answered within the readiness window, else 0.",
            registry=None,
        ))  # fmt: skip
        self.registry.register(self.queues)
        self.members_seen = self._register(Gauge(
            "sweeperd_members",
            "Live members (replicas sharing the queues) this replica sees, itself included; "
            "0 when it is not one (sharing off or refused, or its heartbeat expired).",
            registry=None,
        ))  # fmt: skip
        self.owned_queues = self._register(Gauge(
            "sweeperd_owned_queues",
            "Queues this replica sweeps: its share, or every queue when sharing is off.",
            registry=None,
        ))  # fmt: skip
        self.ownership_changes = self._register(Counter(
            "sweeperd_ownership_changes",
            "Times the set of queues this replica owns changed with the members it sees.",
            registry=None,
        ))  # fmt: skip
        self.build.labels(version, platform.python_version()).set(1)

    def add_collector(self, collector: Collector) -> None:
        """A collector whose series are read at scrape time (exported by the library)."""
        self._register(collector)

    def _register(self, collector: C) -> C:
        self.registry.register(collector)
        self.library.register(collector)
        return collector

    @property
    def level(self) -> QueueMetrics:
        return self.queues.level

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """A whole scrape for an Accept header: its body and content type. prometheus_client
        renders its own series; the sweep's, thousands of queues, are rendered from plain
        numbers (the library's generic path takes ten times as long for them)."""
        encoder, content_type = choose_encoder(accept or "")
        head = encoder(self.library)
        sweep = self.queues.render(content_type.startswith("application/openmetrics-text"))
        if head.endswith(OPENMETRICS_EOF):
            return head[: -len(OPENMETRICS_EOF)] + sweep + OPENMETRICS_EOF, content_type
        return head + sweep, content_type

    def record(self, node: str, queue: str, result: CallResult, at: float) -> None:
        """One call at Unix time `at`: what it recovered, dead-lettered, exempted and removed
        as ghosts, or its failure, and the queue's numbers right after it."""
        with self.queues.lock:
            _count(self.queues.series(queue), self.queues.node(node), result, at)

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
        with self.queues.lock:
            n = self.queues.node(node)
            n.durations.observe(bucket, duration_s, len(results))
            series = self.queues.series
            for queue, result in zip(queues, results, strict=True):
                q = series(queue)
                q.durations.observe(bucket, duration_s)
                _count(q, n, result, at)

    def record_failure(self, node: str, queue: str, reason: Reason) -> None:
        """One verb call that failed without a reply (the node was down, or the tick broke)."""
        with self.queues.lock:
            q = self.queues.series(queue)
            q.sweeps += 1
            self.queues.node(node).sweeps += 1
            reason_label = Reason(reason).value
            q.failures[reason_label] = q.failures.get(reason_label, 0) + 1

    def record_ticks(self, node: str, queues: Sequence[str], *, duration_s: float) -> None:
        """A tick of these queues that took `duration_s`, there and back."""
        bucket = bisect_left(DURATION_BUCKETS_S, duration_s)
        with self.queues.lock:
            self.queues.node(node).durations.observe(bucket, duration_s, len(queues))
            for queue in queues:
                self.queues.series(queue).durations.observe(bucket, duration_s)

    def add_node(self, node: str) -> None:
        """A node's series at 0 from the start (its restarts, and its sweeps and ghosts at
        basic), so that an alert on their increase sees the first one."""
        self.restarts.labels(node)
        with self.queues.lock:
            self.queues.node(node)

    def node_up(self, node: str, up: bool) -> None:
        self.up.labels(node).set(1 if up else 0)

    def server_restarted(self, node: str) -> None:
        self.restarts.labels(node).inc()

    def server_info(self, node: str, run_id: str, executor: str) -> None:
        """The node's run_id and executor; the node's previous series is dropped."""
        with self._lock:
            previous = self._info.get(node)
            if previous == (run_id, executor):
                return
            if previous is not None:
                self.info.remove(node, *previous)
            self.info.labels(node, run_id, executor).set(1)
            self._info[node] = (run_id, executor)

    def forget_node(self, node: str) -> None:
        """A node no longer swept (a primary failed over or removed): its up and info series
        go; its restart count stays, as counters do."""
        with self._lock:
            previous = self._info.pop(node, None)
            if previous is not None:
                self.info.remove(node, *previous)
        with contextlib.suppress(KeyError):
            self.up.remove(node)

    def schedule_lag(self, seconds: float) -> None:
        self.lag.observe(max(seconds, 0.0))

    def schedule_missed(self, runs: int) -> None:
        self.missed.inc(runs)

    def schedule_overrun(self) -> None:
        self.overruns.inc()

    def set_ready(self, ready: bool) -> None:
        self.ready.set(1 if ready else 0)

    def add_queue(self, queue: str) -> None:
        """Every series of the queue at 0, so that rate() and increase() work from the start.

        Two are left out: the last-success timestamp until a call succeeds (0 would read as
        1970), and failures until one happens (eight reasons a queue would be eight series
        per queue nobody reads at ten thousand queues).
        """
        with self.queues.lock:
            self.queues.series(queue).owned = True

    def disown_queue(self, queue: str) -> None:
        """The queue is another replica's now (or nobody's, while the server is out of reach):
        its counters and last success stay, for sums across replicas to stay whole; the gauges
        of its state (expired leases, oldest age, set sizes) go, as only its owner keeps them
        true (owned again, they start again at 0)."""
        with self.queues.lock:
            found = self.queues.queues.get(queue)
            if found is not None:
                found.disown()

    def forget_queue(self, queue: str) -> None:
        """Remove every series of a queue that is no longer swept."""
        with self.queues.lock:
            self.queues.queues.pop(queue, None)

    def keep_queues(self, queues: Collection[str]) -> None:
        """Remove the series of every other queue: a call in flight when its queue was given
        away records after forget_queue, and would leave a series that never updates."""
        with self.queues.lock:
            for queue in self.queues.queues.keys() - set(queues):
                del self.queues.queues[queue]
