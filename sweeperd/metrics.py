"""sweeperd's Prometheus metrics, in a registry of its own (never the global one)."""

from __future__ import annotations

import contextlib
import platform
import threading
from bisect import bisect_left
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sweeperd.constants import ACTIVE, DEAD, PENDING
from sweeperd.reasons import Reason
from sweeperd.rounds import Depths, SweepReply

SETS = (ACTIVE, PENDING, DEAD)  # the `set` label of sweeperd_queue_jobs
# One tick of one queue: a pipelined verb call takes about a millisecond; a drain, seconds.
DURATION_BUCKETS_S = (1e-3, 5e-3, 0.025, 0.1, 0.5, 2.5, 10.0)  # few: there is a set per queue
# How late a sweep started against its schedule.
LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


HELP = {
    "recovered": "Expired leases returned to pending by the sweep (exempt ones included).",
    "dead": "Jobs moved to the dead-letter set because their stall budget ran out.",
    "exempt": "Recovered leases not counted against the stall budget because they predate a "
    "server restart (a subset of sweeperd_recovered_total).",
    "ghosts": "Ids removed from the active set that had no job row (listed nowhere by the verb).",
    "sweeps": "EMQ.STALLED.CHECK calls sent (or their Lua port), failed ones included.",
    "failures": "Sweep calls that failed, by reason (lane, wrongtype, counter, arguments, "
    "no_verb, connection, timeout, reply_lost, oom, noperm, other).",
    "duration": "Wall time of one scheduled tick of one queue (the drain's calls are not in it).",
    "last_success": "Unix time of the queue's last successful call.",
    "expired": "Leases of the queue still expired after its last call (sweeps not keeping up).",
    "oldest": "How long the queue's oldest expired lease had been overdue at its last call: "
    "how late recovery runs (0 when nothing was expired).",
    "jobs": "Jobs in the queue's active, pending and dead sets, read at its last call.",
    "failed": "The queue's own count of jobs that died for any reason (its metrics:failed hash).",
}


@dataclass
class QueueSeries:
    """One queue's numbers: plain values, turned into samples only when scraped."""

    recovered: int = 0
    dead: int = 0
    exempt: int = 0
    ghosts: int = 0
    sweeps: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # a reason appears when it happens
    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS_S) + 1))
    duration_sum: float = 0.0
    last_success: float | None = None  # absent until a tick succeeds: 0 would read as 1970
    expired: int = 0
    oldest_expired_age: float = 0.0
    jobs: tuple[int, int, int] = (0, 0, 0)
    failed: int = 0


class QueueCollector(Collector):
    """Every per-queue series, built at scrape time from plain state (thousands of queues
    cost a dict update per event, not a labelled child per series)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queues: dict[str, QueueSeries] = {}

    def series(self, queue: str) -> QueueSeries:
        """The queue's numbers, created at zero on first use; call with the lock held."""
        found = self.queues.get(queue)
        if found is None:
            found = self.queues[queue] = QueueSeries()
        return found

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            queues = [(name, _copy(q)) for name, q in self.queues.items()]
        yield from _counters(queues)
        failures = CounterMetricFamily(
            "sweeperd_sweep_failures", HELP["failures"], labels=["queue", "reason"]
        )
        for name, q in queues:
            for reason, count in q.failures.items():
                failures.add_metric([name, reason], count)
        yield failures
        yield _durations(queues)
        yield from _gauges(queues)


def _copy(q: QueueSeries) -> QueueSeries:
    return replace(q, failures=dict(q.failures), buckets=list(q.buckets))


COUNTERS = {  # QueueSeries attribute -> counter name (without _total)
    "recovered": "sweeperd_recovered",
    "dead": "sweeperd_dead",
    "exempt": "sweeperd_exempt",
    "ghosts": "sweeperd_ghosts_removed",
    "sweeps": "sweeperd_sweeps",
}


def _counters(queues: list[tuple[str, QueueSeries]]) -> Iterator[Metric]:
    for attr, name in COUNTERS.items():
        family = CounterMetricFamily(name, HELP[attr], labels=["queue"])
        for name, q in queues:
            family.add_metric([name], getattr(q, attr))
        yield family


def _durations(queues: list[tuple[str, QueueSeries]]) -> Metric:
    family = HistogramMetricFamily(
        "sweeperd_sweep_duration_seconds", HELP["duration"], labels=["queue"]
    )
    bounds = [*(str(float(b)) for b in DURATION_BUCKETS_S), "+Inf"]
    for name, q in queues:
        running, cumulative = 0, []
        for bound, count in zip(bounds, q.buckets, strict=True):
            running += count
            cumulative.append((bound, running))
        family.add_metric([name], cumulative, q.duration_sum)
    return family


def _gauges(queues: list[tuple[str, QueueSeries]]) -> Iterator[Metric]:
    last = GaugeMetricFamily(
        "sweeperd_last_success_timestamp_seconds", HELP["last_success"], labels=["queue"]
    )
    expired = GaugeMetricFamily("sweeperd_expired_leases", HELP["expired"], labels=["queue"])
    oldest = GaugeMetricFamily(
        "sweeperd_oldest_expired_age_seconds", HELP["oldest"], labels=["queue"]
    )
    jobs = GaugeMetricFamily("sweeperd_queue_jobs", HELP["jobs"], labels=["queue", "set"])
    failed = GaugeMetricFamily("sweeperd_queue_failed_jobs", HELP["failed"], labels=["queue"])
    for name, q in queues:
        if q.last_success is not None:
            last.add_metric([name], q.last_success)
        expired.add_metric([name], q.expired)
        oldest.add_metric([name], q.oldest_expired_age)
        for set_name, size in zip(SETS, q.jobs, strict=True):
            jobs.add_metric([name, set_name], size)
        failed.add_metric([name], q.failed)
    yield from (last, expired, oldest, jobs, failed)


class Metrics:
    """Every series sweeperd exports; the record methods are safe to call from any thread."""

    def __init__(self, registry: CollectorRegistry | None = None, *, version: str) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self._lock = threading.Lock()
        self._info: dict[str, tuple[str, str]] = {}  # node -> (run_id, executor) exported
        self.queues = QueueCollector()
        r.register(self.queues)
        self.up = Gauge(
            "sweeperd_redis_up",
            "1 if the last call to the Redis/Valkey node succeeded, 0 if it failed.",
            ["node"],
            registry=r,
        )
        self.restarts = Counter(
            "sweeperd_server_restarts",
            "Changes of the node's run_id seen: server restarts and failovers.",
            ["node"],
            registry=r,
        )
        self.info = Gauge(
            "sweeperd_server_info",
            "The node's current run_id (the lease epoch) and the executor sweeping it; always 1.",
            ["node", "run_id", "executor"],
            registry=r,
        )
        self.build = Gauge(
            "sweeperd_build_info",
            "sweeperd's version and the Python running it; always 1.",
            ["version", "python"],
            registry=r,
        )
        self.lag = Histogram(
            "sweeperd_schedule_lag_seconds",
            "How late sweeps started against their schedule.",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        self.overruns = Counter(
            "sweeperd_schedule_overruns",
            "Sweeps skipped because the batch's previous sweep was still running "
            "(the interval is shorter than a tick takes).",
            registry=r,
        )
        self.ready = Gauge(
            "sweeperd_ready",
            "1 when every node answered within the readiness window, else 0.",
            registry=r,
        )
        self.members_seen = Gauge(
            "sweeperd_members",
            "Live members (replicas sharing the queues) this replica sees, itself included; "
            "0 when it is not one (sharing off or refused, or its heartbeat expired).",
            registry=r,
        )
        self.owned_queues = Gauge(
            "sweeperd_owned_queues",
            "Queues this replica sweeps: its share, or every queue when sharing is off.",
            registry=r,
        )
        self.ownership_changes = Counter(
            "sweeperd_ownership_changes",
            "Times the set of queues this replica owns changed with the members it sees.",
            registry=r,
        )
        self.build.labels(version, platform.python_version()).set(1)

    def record_call(self, queue: str, reply: SweepReply) -> None:
        """One verb call that succeeded, with what it recovered, dead-lettered, exempted and
        removed as ghosts."""
        with self.queues.lock:
            q = self.queues.series(queue)
            q.sweeps += 1
            q.recovered += len(reply.recovered)
            q.dead += len(reply.dead)
            q.exempt += len(reply.exempt)
            q.ghosts += reply.ghosts

    def record_failure(self, queue: str, reason: Reason) -> None:
        """One verb call that failed."""
        with self.queues.lock:
            q = self.queues.series(queue)
            q.sweeps += 1
            reason_label = Reason(reason).value
            q.failures[reason_label] = q.failures.get(reason_label, 0) + 1

    def record_tick(self, queue: str, *, duration_s: float) -> None:
        """One tick of a queue: how long its call took, there and back."""
        with self.queues.lock:
            q = self.queues.series(queue)
            q.buckets[bisect_left(DURATION_BUCKETS_S, duration_s)] += 1
            q.duration_sum += duration_s

    def record_success(self, queue: str, at: float) -> None:
        """The queue's call succeeded at Unix time `at`."""
        with self.queues.lock:
            self.queues.series(queue).last_success = at

    def record_depths(self, queue: str, depths: Depths) -> None:
        """The queue's backlog, set sizes and failed count, as read right after a call."""
        with self.queues.lock:
            q = self.queues.series(queue)
            q.expired = depths.expired
            q.oldest_expired_age = depths.oldest_expired_age_s
            q.jobs = (depths.active, depths.pending, depths.dead)
            q.failed = depths.failed or 0

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

    def schedule_overrun(self) -> None:
        self.overruns.inc()

    def set_ready(self, ready: bool) -> None:
        self.ready.set(1 if ready else 0)

    def add_queue(self, queue: str) -> None:
        """Every series of the queue at 0, so that rate() and increase() work from the start.

        Two are left out: the last-success timestamp until a tick succeeds (0 would read as
        1970), and failures until one happens (eight reasons a queue would be eight series
        per queue nobody reads at ten thousand queues).
        """
        with self.queues.lock:
            self.queues.series(queue)

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
