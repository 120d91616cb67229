"""sweeperd's Prometheus metrics, in a registry of its own (never the global one)."""

from __future__ import annotations

import platform
import threading

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from sweeperd.constants import ACTIVE, DEAD, PENDING
from sweeperd.reasons import Reason

SETS = (ACTIVE, PENDING, DEAD)  # the `set` label of sweeperd_queue_jobs
# One tick of one queue: a pipelined verb call takes about a millisecond; a drain, seconds.
DURATION_BUCKETS_S = (5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# How late a sweep started against its schedule.
LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """Every series sweeperd exports; the record methods are safe to call from any thread."""

    def __init__(self, registry: CollectorRegistry | None = None, *, version: str) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self._lock = threading.Lock()
        self._info: dict[str, tuple[str, str]] = {}  # node -> (run_id, executor) exported

        self.recovered = Counter(
            "sweeperd_recovered",
            "Expired leases returned to pending by the sweep (exempt ones included).",
            ["queue"],
            registry=r,
        )
        self.dead = Counter(
            "sweeperd_dead",
            "Jobs moved to the dead-letter set because their stall budget ran out.",
            ["queue"],
            registry=r,
        )
        self.exempt = Counter(
            "sweeperd_exempt",
            "Recovered leases not counted against the stall budget because they predate a "
            "server restart (a subset of sweeperd_recovered_total).",
            ["queue"],
            registry=r,
        )
        self.sweeps = Counter(
            "sweeperd_sweeps",
            "EMQ.STALLED.CHECK calls sent (or their Lua port), failed ones included.",
            ["queue"],
            registry=r,
        )
        self.failures = Counter(
            "sweeperd_sweep_failures",
            "Sweep calls that failed, by reason (lane, wrongtype, counter, arguments, no_verb, "
            "connection, timeout, other).",
            ["queue", "reason"],
            registry=r,
        )
        self.duration = Histogram(
            "sweeperd_sweep_duration_seconds",
            "Wall time of one tick of one queue: every verb call it sent, drain included.",
            ["queue"],
            buckets=DURATION_BUCKETS_S,
            registry=r,
        )
        self.last_success = Gauge(
            "sweeperd_last_success_timestamp_seconds",
            "Unix time of the queue's last tick whose calls all succeeded.",
            ["queue"],
            registry=r,
        )
        self.expired = Gauge(
            "sweeperd_expired_leases",
            "Leases of the queue still expired after its last tick (sweeps not keeping up).",
            ["queue"],
            registry=r,
        )
        self.jobs = Gauge(
            "sweeperd_queue_jobs",
            "Jobs in the queue's active, pending and dead sets, read at the last tick.",
            ["queue", "set"],
            registry=r,
        )
        self.failed = Gauge(
            "sweeperd_queue_failed_jobs",
            "The queue's own count of jobs that died for any reason (its metrics:failed hash).",
            ["queue"],
            registry=r,
        )
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
        self.ready = Gauge(
            "sweeperd_ready",
            "1 when every node answered within the readiness window, else 0.",
            registry=r,
        )
        self.build.labels(version, platform.python_version()).set(1)

    def record_call(self, queue: str, *, recovered: int, dead: int, exempt: int) -> None:
        """One verb call that succeeded, with what it recovered, dead-lettered and exempted."""
        self.sweeps.labels(queue).inc()
        self.recovered.labels(queue).inc(recovered)
        self.dead.labels(queue).inc(dead)
        self.exempt.labels(queue).inc(exempt)

    def record_failure(self, queue: str, reason: Reason) -> None:
        """One verb call that failed."""
        self.sweeps.labels(queue).inc()
        self.failures.labels(queue, Reason(reason).value).inc()

    def record_tick(
        self,
        queue: str,
        *,
        duration_s: float,
        expired_left: int | None,
        succeeded_at: float | None,
    ) -> None:
        """One tick of a queue: its duration, the leases left expired, when it last succeeded."""
        self.duration.labels(queue).observe(duration_s)
        if expired_left is not None:
            self.expired.labels(queue).set(expired_left)
        if succeeded_at is not None:
            self.last_success.labels(queue).set(succeeded_at)

    def record_depths(
        self, queue: str, *, active: int, pending: int, dead: int, failed: int
    ) -> None:
        """The queue's set sizes and its failed count, as read at the tick."""
        for name, size in zip(SETS, (active, pending, dead), strict=True):
            self.jobs.labels(queue, name).set(size)
        self.failed.labels(queue).set(failed)

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

    def schedule_lag(self, seconds: float) -> None:
        self.lag.observe(max(seconds, 0.0))

    def set_ready(self, ready: bool) -> None:
        self.ready.set(1 if ready else 0)

    def add_queue(self, queue: str) -> None:
        """Every series of the queue at 0, so that rate() and increase() work from the start.

        The last-success timestamp is left out until a tick succeeds: 0 would read as 1970.
        """
        for counter in (self.sweeps, self.recovered, self.dead, self.exempt):
            counter.labels(queue)
        for reason in Reason:
            self.failures.labels(queue, reason.value)
        self.duration.labels(queue)
        self.expired.labels(queue)
        for name in SETS:
            self.jobs.labels(queue, name)
        self.failed.labels(queue)

    def forget_queue(self, queue: str) -> None:
        """Remove every series of a queue that is no longer swept."""
        for metric in (
            self.sweeps, self.recovered, self.dead, self.exempt,
            self.duration, self.expired, self.last_success, self.failed,
        ):  # fmt: skip
            metric.remove(queue)
        for reason in Reason:
            self.failures.remove(queue, reason.value)
        for name in SETS:
            self.jobs.remove(queue, name)
