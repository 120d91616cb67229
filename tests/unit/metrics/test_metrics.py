"""The daemon's metrics: what each record method counts, at each level, and the exposition."""

from __future__ import annotations

import platform
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.events import EVENT_JOB_SUBMITTED, JobSubmissionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from sweeperd.config.settings import QueueSettings
from sweeperd.constants import SPARSE_ABOVE, QueueMetrics
from sweeperd.daemon.schedule import SWEEPS, Schedule
from sweeperd.keyspace import QueueKeys
from sweeperd.metrics.numbers import NOTHING_SAID
from sweeperd.metrics.registry import Metrics
from sweeperd.metrics.state import NodeState, StateReaders
from sweeperd.reasons import Reason, SweepError
from sweeperd.verb.replies import NOTHING, Call, CallResult, Depths, SweepReply

NODE = "h:6379"
OTHER = "h:6380"  # a second primary, where a queue goes after a failover or a migration
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
Samples = set[tuple[str, tuple[tuple[str, str], ...], float]]


def reply(recovered: int = 0, dead: int = 0, exempt: int = 0, ghosts: int = 0) -> SweepReply:
    """A reply with that many ids in each list (exempt ones among the recovered)."""
    ids = [f"j{n}".encode() for n in range(recovered + dead)]
    return SweepReply(tuple(ids[:recovered]), tuple(ids[recovered:]), tuple(ids[:exempt]), ghosts)


def depths(
    active: int = 0,
    pending: int = 0,
    dead: int = 0,
    failed: int = 0,
    expired: int = 0,
    oldest_ms: float | None = None,
    now_ms: int = 10_000,
    delay_ms: float | None = None,
) -> Depths:
    return Depths(b"r", now_ms, expired, active, pending, dead, failed, oldest_ms, 0, delay_ms)


def result(answer: SweepReply | Reason, after: Depths | None = None) -> CallResult:
    """A call's result: its reply, or a failure for that reason."""
    got = SweepError(answer, "refused") if isinstance(answer, Reason) else answer
    return CallResult(Call(QueueKeys("any"), 1, 10), got, after)


@pytest.fixture
def m() -> Metrics:
    return Metrics(CollectorRegistry(), version="9.9.9")


@pytest.fixture
def full() -> Metrics:
    return Metrics(CollectorRegistry(), version="9.9.9", level=QueueMetrics.FULL)


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def names(m: Metrics) -> set[str]:
    return {s.name for metric in m.registry.collect() for s in metric.samples}


def samples(families: object) -> Samples:
    """sweeperd's samples of parsed families, as comparable tuples."""
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in families  # type: ignore[attr-defined]
        for s in family.samples
        if s.name.startswith("sweeperd_")
    }


def without_created(found: Samples) -> Samples:
    """The samples but the _created ones (the formats write those differently)."""
    return {s for s in found if not s[0].endswith("_created")}


def swept(m: Metrics, queue: str = "q") -> None:
    """Every kind of event once for the queue: a reply, a failure, a tick, its numbers."""
    m.numbers.add_queue(queue)
    after = depths(active=1, pending=2, dead=3, failed=4, expired=5, oldest_ms=2_500, delay_ms=40)
    m.numbers.record(
        NODE, queue, result(reply(recovered=2, dead=1, exempt=1, ghosts=3), after), 1.7e9
    )
    m.numbers.record(NODE, queue, result(Reason.LANE), 1.0)
    m.numbers.record_ticks(NODE, [queue], duration_s=0.002)


# The families per node at basic, per queue and node at full.
SPLIT = (
    "sweeperd_sweeps_total",
    "sweeperd_ghosts_removed_total",
    "sweeperd_sweep_duration_seconds",
    "sweeperd_recovery_delay_seconds",
)


def by_node(m: Metrics) -> dict[tuple[str, str, str], float]:
    """The SPLIT samples summed by node (and bucket): what `sum by (node, le)` reads."""
    sums: dict[tuple[str, str, str], float] = {}
    for name, labels, number in samples(m.registry.collect()):
        if name.startswith(SPLIT):
            found = dict(labels)
            key = (name, found["node"], found.get("le", ""))
            sums[key] = sums.get(key, 0) + number
    return sums


def per_queue(m: Metrics, queue: str = "q") -> int:
    """How many series carry the queue's label."""
    return sum(1 for _, labels, _ in samples(m.registry.collect()) if ("queue", queue) in labels)


class TestConstruction:
    def test_own_registry(self) -> None:
        """Without a registry a new one is made; the global registry is never touched."""
        before = set(REGISTRY._names_to_collectors)
        metrics = Metrics(version="1.0")
        assert metrics.registry is not REGISTRY
        assert set(REGISTRY._names_to_collectors) == before

    def test_basic_is_the_default(self) -> None:
        """Without a level the per-queue series are the basic ones (the daemon passes its
        --queue-metrics, auto by default)."""
        assert Metrics(version="1.0").numbers.level is QueueMetrics.BASIC

    def test_build_info(self, m: Metrics) -> None:
        """Build info carries the version and the Python version."""
        assert value(m, "sweeperd_build_info", version="9.9.9", python=platform.python_version())

    def test_process_and_platform(self, m: Metrics) -> None:
        """The process and platform collectors report into the same registry."""
        assert "process_cpu_seconds_total" in names(m)
        assert "python_info" in names(m)

    def test_two_instances_count_apart(self) -> None:
        """Two Metrics, each with a registry of its own (two registering the same names in one
        would raise): what one counts, the other does not show."""
        one, two = Metrics(version="1"), Metrics(version="2")
        one.numbers.add_queue("q")
        one.numbers.record(NODE, "q", result(reply(recovered=2)), 1.0)
        two.numbers.add_queue("q")
        assert value(one, "sweeperd_recovered_total", queue="q") == 2
        assert value(two, "sweeperd_recovered_total", queue="q") == 0
        assert value(two, "sweeperd_build_info", version="2", python=platform.python_version())
        assert (
            value(one, "sweeperd_build_info", version="2", python=platform.python_version()) is None
        )


class TestRecord:
    @pytest.fixture(autouse=True)
    def queues(self, m: Metrics, full: Metrics) -> None:
        """The queues these tests count into, added as the daemon adds a queue it sweeps."""
        for metrics in (m, full):
            for queue in ("q", "a", "b"):
                metrics.numbers.add_queue(queue)

    def test_record_reply(self, m: Metrics) -> None:
        """A reply adds its recovered, dead and exempt counts to the queue, a sweep and its
        ghosts to the node."""
        m.numbers.record(NODE, "q", result(reply(recovered=3, dead=1, exempt=2, ghosts=5)), 1.0)
        m.numbers.record(NODE, "q", result(reply(recovered=1)), 2.0)
        assert value(m, "sweeperd_recovered_total", queue="q") == 4
        assert value(m, "sweeperd_dead_total", queue="q") == 1
        assert value(m, "sweeperd_exempt_total", queue="q") == 2
        assert value(m, "sweeperd_sweeps_total", node=NODE) == 2
        assert value(m, "sweeperd_ghosts_removed_total", node=NODE) == 5

    def test_record_reply_full(self, full: Metrics) -> None:
        """With full metrics the sweeps and ghosts are the queue's on the node that took the
        call, labelled with both (no series has the queue or the node alone)."""
        full.numbers.record(NODE, "q", result(reply(ghosts=5)), 1.0)
        assert value(full, "sweeperd_sweeps_total", queue="q", node=NODE) == 1
        assert value(full, "sweeperd_ghosts_removed_total", queue="q", node=NODE) == 5
        assert value(full, "sweeperd_sweeps_total", queue="q") is None
        assert value(full, "sweeperd_sweeps_total", node=NODE) is None

    def test_record_failed_call(self, m: Metrics) -> None:
        """A call's error reply adds a sweep and a failure of its reason; no success time."""
        m.numbers.record(NODE, "q", result(Reason.LANE), 1.0)
        m.numbers.record(NODE, "q", result(Reason.TIMEOUT), 2.0)
        m.numbers.record(NODE, "q", result(Reason.TIMEOUT), 3.0)
        assert value(m, "sweeperd_sweeps_total", node=NODE) == 3
        assert value(m, "sweeperd_sweep_failures_total", queue="q", reason="lane") == 1
        assert value(m, "sweeperd_sweep_failures_total", queue="q", reason="timeout") == 2
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="q") is None

    def test_record_failure(self, m: Metrics) -> None:
        """A failure without a reply adds one sweep and one failure of its reason."""
        m.numbers.record_failure(NODE, "q", Reason.CONNECTION)
        assert value(m, "sweeperd_sweeps_total", node=NODE) == 1
        assert value(m, "sweeperd_sweep_failures_total", queue="q", reason="connection") == 1

    def test_record_success(self, m: Metrics) -> None:
        """The last success is the time of the last call that succeeded, absent until then."""
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="q") is None
        m.numbers.record(NODE, "q", result(reply()), 1_700_000_000.5)
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="q") == 1_700_000_000.5

    def test_record_depths(self, full: Metrics) -> None:
        """Depths set one gauge per set, the failed count, the backlog and its oldest age."""
        after = depths(active=1, pending=2, dead=3, failed=4, expired=7, oldest_ms=2_500)
        full.numbers.record(NODE, "q", result(reply(), after), 1.0)
        assert value(full, "sweeperd_queue_jobs", queue="q", set="active") == 1
        assert value(full, "sweeperd_queue_jobs", queue="q", set="pending") == 2
        assert value(full, "sweeperd_queue_jobs", queue="q", set="dead") == 3
        assert value(full, "sweeperd_queue_failed_jobs", queue="q") == 4
        assert value(full, "sweeperd_expired_leases", queue="q") == 7
        assert value(full, "sweeperd_oldest_expired_age_seconds", queue="q") == 7.5
        full.numbers.record(NODE, "q", result(Reason.LANE, depths(oldest_ms=None)), 2.0)
        assert value(full, "sweeperd_oldest_expired_age_seconds", queue="q") == 0
        assert value(full, "sweeperd_expired_leases", queue="q") == 0

    def test_record_depths_basic(self, m: Metrics) -> None:
        """The basic level keeps the backlog and its age, not the set sizes."""
        m.numbers.record(
            NODE, "q", result(reply(), depths(active=1, expired=7, oldest_ms=2_500)), 1.0
        )
        assert value(m, "sweeperd_expired_leases", queue="q") == 7
        assert value(m, "sweeperd_oldest_expired_age_seconds", queue="q") == 7.5
        assert value(m, "sweeperd_queue_jobs", queue="q", set="active") is None
        assert value(m, "sweeperd_queue_failed_jobs", queue="q") is None

    def test_record_round(self, full: Metrics) -> None:
        """A tick's calls are each counted, and the round trip is each queue's duration."""
        calls = [result(reply(recovered=1)), result(Reason.LANE)]
        full.numbers.record_round(
            NODE, list(zip(["a", "b"], calls, strict=True)), 1.0, duration_s=0.002
        )
        assert value(full, "sweeperd_recovered_total", queue="a") == 1
        assert value(full, "sweeperd_sweep_failures_total", queue="b", reason="lane") == 1
        for queue in ("a", "b"):
            on = {"queue": queue, "node": NODE}
            assert value(full, "sweeperd_sweeps_total", **on) == 1
            assert value(full, "sweeperd_sweep_duration_seconds_count", **on) == 1
            assert value(full, "sweeperd_sweep_duration_seconds_sum", **on) == 0.002

    def test_record_ticks_basic(self, m: Metrics) -> None:
        """At the basic level a tick of n queues is n observations of the node's histogram."""
        m.numbers.record_ticks(NODE, ["a", "b"], duration_s=0.002)
        m.numbers.record_round(NODE, [("a", result(reply()))], 1.0, duration_s=0.001)
        assert value(m, "sweeperd_sweep_duration_seconds_count", node=NODE) == 3
        assert value(m, "sweeperd_sweep_duration_seconds_bucket", node=NODE, le="0.001") == 1
        assert value(m, "sweeperd_sweep_duration_seconds_bucket", node=NODE, le="0.005") == 3
        assert value(m, "sweeperd_sweep_duration_seconds_bucket", node=NODE, le="+Inf") == 3
        assert value(m, "sweeperd_sweep_duration_seconds_sum", node=NODE) == pytest.approx(0.005)
        assert value(m, "sweeperd_sweep_duration_seconds_count", queue="a") is None

    def test_an_idle_call_counts_as_any_call_that_took_nothing(self) -> None:
        """A round's idle calls (a probe's brief reply: nothing due, the set empty or not) are
        counted as a lone call that took nothing is: a sweep of the node, nothing expired, a
        success, nothing said; the same exposition either way."""
        m, lone = (
            Metrics(CollectorRegistry(), version="9.9.9", level=QueueMetrics.BASIC)
            for _ in range(2)
        )
        idle = [Depths.brief(0, None), Depths.brief(1_000, b"2000"), depths()]
        for metrics in (m, lone):
            for queue in ("i0", "i1", "i2"):
                metrics.numbers.add_queue(queue)
        m.numbers.record_round(
            NODE, [(f"i{n}", result(NOTHING, d)) for n, d in enumerate(idle)], 5.0, duration_s=0.0
        )
        lone.numbers.record_ticks(NODE, ["i0", "i1", "i2"], duration_s=0.0)
        for n, d in enumerate(idle):
            lone.numbers.record(NODE, f"i{n}", result(NOTHING, d), 5.0)
        ours = [line for line in generate_latest(m.registry).splitlines() if b"sweeperd_" in line]
        assert ours == [
            line for line in generate_latest(lone.registry).splitlines() if b"sweeperd_" in line
        ]
        assert value(m, "sweeperd_sweeps_total", node=NODE) == 3
        assert value(m, "sweeperd_expired_leases", queue="i1") == 0
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="i0") == 5.0

    def test_recovery_delay_basic(self, m: Metrics) -> None:
        """At the basic level each call that took leases is one observation of its delay in
        the node's histogram, ticks and lone calls alike; a call that took none is none."""
        m.numbers.record(NODE, "a", result(reply(recovered=1), depths(delay_ms=30)), 1.0)
        calls = [
            result(reply(recovered=1), depths(delay_ms=2)),
            result(reply(), depths()),
            result(Reason.LANE, depths()),
        ]
        m.numbers.record_round(
            NODE, list(zip(["b", "c", "d"], calls, strict=True)), 1.0, duration_s=0.001
        )
        delay = "sweeperd_recovery_delay_seconds"
        assert value(m, f"{delay}_count", node=NODE) == 2
        assert value(m, f"{delay}_bucket", node=NODE, le="0.005") == 1
        assert value(m, f"{delay}_bucket", node=NODE, le="0.025") == 1
        assert value(m, f"{delay}_bucket", node=NODE, le="0.05") == 2
        assert value(m, f"{delay}_bucket", node=NODE, le="+Inf") == 2
        assert value(m, f"{delay}_sum", node=NODE) == pytest.approx(0.032)
        assert value(m, f"{delay}_count", queue="a") is None

    def test_recovery_delay_full(self, full: Metrics) -> None:
        """At the full level each queue has its own delays; an hour late is past every bucket."""
        full.numbers.add_queue("a")
        full.numbers.record(NODE, "a", result(reply(recovered=1), depths(delay_ms=3.6e6)), 1.0)
        delay = "sweeperd_recovery_delay_seconds"
        assert value(full, f"{delay}_bucket", queue="a", node=NODE, le="60.0") == 0
        assert value(full, f"{delay}_bucket", queue="a", node=NODE, le="+Inf") == 1
        assert value(full, f"{delay}_sum", queue="a", node=NODE) == 3600
        assert value(full, f"{delay}_count", node=NODE) is None

    def test_state_of_the_nodes(self, m: Metrics) -> None:
        """Each node's up, restarts and run_id with its executor are read from the nodes at
        scrape time; a node not yet answered has no up, one retired keeps its restarts."""
        nodes = [
            NodeState("h:6379", 2, True, "r1", "native"),
            NodeState("/run/r.sock", 0, False),
            NodeState("gone:1", 3),
        ]
        m.read_state(StateReaders(nodes=lambda: nodes))
        assert value(m, "sweeperd_redis_up", node="h:6379") == 1
        assert value(m, "sweeperd_redis_up", node="/run/r.sock") == 0
        assert value(m, "sweeperd_redis_up", node="gone:1") is None
        assert value(m, "sweeperd_server_restarts_total", node="h:6379") == 2
        assert value(m, "sweeperd_server_restarts_total", node="gone:1") == 3
        series = [
            s.labels
            for metric in m.registry.collect()
            if metric.name == "sweeperd_server_info"
            for s in metric.samples
        ]
        assert series == [{"node": "h:6379", "run_id": "r1", "executor": "native"}]

    def test_ready(self, m: Metrics) -> None:
        """Readiness is read when scraped: 1 or 0."""
        assert value(m, "sweeperd_ready") == 0
        m.read_state(StateReaders(ready=lambda: True))
        assert value(m, "sweeperd_ready") == 1


class TestSharingSeries:
    def test_members_owned_queues_and_changes_start_at_zero(self, m: Metrics) -> None:
        """The four series of sharing exist from the start, unlabelled, at 0."""
        assert value(m, "sweeperd_members") == 0
        assert value(m, "sweeperd_owned_queues") == 0
        assert value(m, "sweeperd_known_queues") == 0
        assert value(m, "sweeperd_ownership_changes_total") == 0


class TestLevels:
    def test_basic_series_per_queue(self, m: Metrics) -> None:
        """basic: 6 series per queue once a call read it, one more per failure reason seen;
        3 before (the counters: no last success, no gauge of a queue never read)."""
        m.numbers.add_queue("q")
        assert per_queue(m) == 3
        m.numbers.record(NODE, "q", result(reply(), depths()), 1.0)
        assert per_queue(m) == 6
        m.numbers.record(NODE, "q", result(Reason.LANE), 2.0)
        assert per_queue(m) == 7

    def test_full_series_per_queue(self, full: Metrics) -> None:
        """full: 32 series per queue on one node once a call read it, one more per failure
        reason seen, 22 more per other node it was on; 25 before, from when its node is known
        (the counters, sweeps, ghosts and the two histograms), basic's 3 counters until then."""
        full.numbers.add_queue("q")
        assert per_queue(full) == 3
        full.numbers.route_by(lambda _queue: NODE)
        assert per_queue(full) == 25
        full.numbers.record(NODE, "q", result(reply(), depths()), 1.0)
        assert per_queue(full) == 32
        full.numbers.record(NODE, "q", result(Reason.LANE), 2.0)
        assert per_queue(full) == 33
        full.numbers.route_by(lambda _queue: OTHER)  # failed over, or its slot migrated
        assert per_queue(full) == 33 + 22

    def test_basic_series_per_node(self, m: Metrics) -> None:
        """basic: the node has 22 series for what full keeps per queue (sweeps, ghosts, the
        duration and the recovery delay histograms), however many queues it has."""
        for queue in ("a", "b", "c"):
            swept(m, queue)
        by_node = [s for s in samples(m.registry.collect()) if ("node", NODE) in s[1]]
        assert {name for name, _, _ in by_node} >= {
            "sweeperd_sweeps_total",
            "sweeperd_ghosts_removed_total",
            "sweeperd_sweep_duration_seconds_count",
            "sweeperd_recovery_delay_seconds_count",
        }
        assert len([s for s in by_node if not s[0].startswith("sweeperd_redis_")]) == 22

    def test_full_splits_by_queue_and_node(self, full: Metrics) -> None:
        """full: every sample of sweeps, ghosts, durations and delays carries the queue and the
        node, and summed by node they are basic's node totals of the same calls."""
        basic = Metrics(CollectorRegistry(), version="1")
        for metrics in (basic, full):
            for queue in ("a", "b"):
                swept(metrics, queue)
            metrics.numbers.record(OTHER, "b", result(reply(ghosts=1), depths(delay_ms=7)), 2.0)
        split = [s for s in samples(full.registry.collect()) if s[0].startswith(SPLIT)]
        assert len(split) == 3 * 22  # a and b on NODE, b on OTHER
        assert all({"queue", "node"} <= dict(labels).keys() for _, labels, _ in split)
        assert by_node(full) == by_node(basic)
        assert by_node(full)[("sweeperd_sweeps_total", NODE, "")] == 4
        assert by_node(full)[("sweeperd_ghosts_removed_total", OTHER, "")] == 1


class TestQueueLifecycle:
    def test_add_queue_precreates(self, full: Metrics) -> None:
        """add_queue makes every per-queue counter exist at 0 before anything happens; the
        gauges of its state are absent until a call reads them (a 0 would say nothing is
        expired on a server never read)."""
        full.numbers.route_by(lambda _queue: NODE)
        full.numbers.add_queue("q")
        for name in ("recovered", "dead", "exempt"):
            assert value(full, f"sweeperd_{name}_total", queue="q") == 0
        for name in ("ghosts_removed", "sweeps"):
            assert value(full, f"sweeperd_{name}_total", queue="q", node=NODE) == 0
        for reason in Reason:  # a reason's series appears when it first happens
            assert value(full, "sweeperd_sweep_failures_total", queue="q", reason=reason) is None
        assert value(full, "sweeperd_sweep_duration_seconds_count", queue="q", node=NODE) == 0
        assert value(full, "sweeperd_recovery_delay_seconds_count", queue="q", node=NODE) == 0
        assert value(full, "sweeperd_expired_leases", queue="q") is None
        assert value(full, "sweeperd_oldest_expired_age_seconds", queue="q") is None
        for name in ("active", "pending", "dead"):
            assert value(full, "sweeperd_queue_jobs", queue="q", set=name) is None
        assert value(full, "sweeperd_queue_failed_jobs", queue="q") is None
        assert value(full, "sweeperd_last_success_timestamp_seconds", queue="q") is None
        full.numbers.record(NODE, "q", result(Reason.CONNECTION), 1.0)  # nothing read
        assert value(full, "sweeperd_expired_leases", queue="q") is None
        full.numbers.record(NODE, "q", result(reply(), depths()), 2.0)
        assert value(full, "sweeperd_expired_leases", queue="q") == 0
        assert value(full, "sweeperd_queue_jobs", queue="q", set="pending") == 0

    def test_a_queue_not_owned_has_its_counters_only(self, m: Metrics) -> None:
        """A queue added as not owned (another replica's, or nobody's yet) has its counters at
        0 and no gauge, even after a late call of this replica read it."""
        m.numbers.add_queue("q", owned=False)
        assert value(m, "sweeperd_recovered_total", queue="q") == 0
        m.numbers.record(NODE, "q", result(reply(recovered=1), depths(expired=3)), 1.0)
        assert value(m, "sweeperd_recovered_total", queue="q") == 1
        assert value(m, "sweeperd_expired_leases", queue="q") is None
        m.numbers.add_queue("q", owned=False)  # configured, still not owned: nothing changes
        m.numbers.add_queue("q")
        m.numbers.record(NODE, "q", result(reply(), depths(expired=3)), 2.0)
        assert value(m, "sweeperd_expired_leases", queue="q") == 3

    def test_add_queue_keeps_counts(self, m: Metrics) -> None:
        """Adding a queue again does not reset what it counted."""
        m.numbers.add_queue("q")
        m.numbers.record(NODE, "q", result(reply(recovered=2)), 1.0)
        m.numbers.add_queue("q")
        assert value(m, "sweeperd_recovered_total", queue="q") == 2

    @pytest.mark.parametrize("level", list(QueueMetrics))
    def test_keep_queues_removes_every_series_of_the_others(self, level: QueueMetrics) -> None:
        """keep_queues removes every series of a queue not named, and no other queue's; a name
        kept that has no series gets none."""
        m = Metrics(CollectorRegistry(), version="1", level=level)
        for queue in ("gone", "kept"):
            swept(m, queue)
        m.numbers.keep_queues({"kept", "never-seen"})
        text = generate_latest(m.registry).decode()
        assert 'queue="gone"' not in text
        assert 'queue="kept"' in text
        assert 'queue="never-seen"' not in text  # keeping a name makes no series of it
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="kept") == 1.7e9

    @pytest.mark.parametrize("level", list(QueueMetrics))
    def test_a_call_that_outlives_its_queue_brings_no_series_back(
        self, level: QueueMetrics
    ) -> None:
        """Calls counted after their queue was dropped (every way the ledger counts) leave no
        series of it: only their node's totals count them."""
        m = Metrics(CollectorRegistry(), version="1", level=level)
        m.numbers.add_node(NODE)
        swept(m, "gone")
        m.numbers.keep_queues(set())
        late = result(reply(recovered=1, ghosts=1), depths(active=9, expired=9))
        m.numbers.record(NODE, "gone", late, 2.0)
        m.numbers.record_round(NODE, [("gone", late)], 2.0, duration_s=0.001)
        m.numbers.record_failure(NODE, "gone", Reason.LANE)
        m.numbers.record_ticks(NODE, ["gone"], duration_s=0.001)
        assert 'queue="gone"' not in generate_latest(m.registry).decode()
        totals = m.numbers.nodes[NODE]  # exported at basic; at full, summed from the queues'
        assert (totals.sweeps, totals.ghosts) == (2 + 3, 3 + 2)  # swept()'s two calls, then 3
        if level is QueueMetrics.BASIC:
            assert value(m, "sweeperd_sweeps_total", node=NODE) == 2 + 3
            assert value(m, "sweeperd_ghosts_removed_total", node=NODE) == 3 + 2

    @pytest.mark.parametrize("level", [QueueMetrics.BASIC, QueueMetrics.FULL])  # sparse: TestSparse
    def test_disown_keeps_counters_and_last_success(self, level: QueueMetrics) -> None:
        """A queue owned by another replica now keeps its counters and last success (sums over
        replicas stay whole) and loses the gauges of its state; owned again, it has them back."""
        m = Metrics(CollectorRegistry(), version="1", level=level)
        swept(m, "moved")
        m.numbers.record(NODE, "moved", result(reply(recovered=2)), 2.0)
        m.numbers.disown_queue("moved")
        assert value(m, "sweeperd_recovered_total", queue="moved") == 4
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="moved") == 2.0
        assert value(m, "sweeperd_expired_leases", queue="moved") is None
        assert value(m, "sweeperd_oldest_expired_age_seconds", queue="moved") is None
        assert value(m, "sweeperd_queue_jobs", queue="moved", set="active") is None
        late = depths(active=7, expired=7, oldest_ms=1_000)  # a call that outlived the ownership
        m.numbers.record(NODE, "moved", result(reply(recovered=1), late), 3.0)
        assert value(m, "sweeperd_expired_leases", queue="moved") is None
        m.numbers.add_queue("moved")  # owned again: its gauges come back with its next read
        assert value(m, "sweeperd_expired_leases", queue="moved") is None
        m.numbers.record(NODE, "moved", result(reply(), depths(expired=2, oldest_ms=9_000)), 4.0)
        assert value(m, "sweeperd_expired_leases", queue="moved") == 2
        assert value(m, "sweeperd_oldest_expired_age_seconds", queue="moved") == 1
        assert value(m, "sweeperd_recovered_total", queue="moved") == 5

    def test_full_series_appear_with_the_route(self, full: Metrics) -> None:
        """full: a queue's series on its node are there at 0 from when its node is known,
        whether the queue or the route comes first; a queue no node serves has none yet."""
        full.numbers.add_queue("early")
        routes = {"early": NODE, "late": OTHER}
        full.numbers.route_by(routes.get)
        full.numbers.add_queue("late")
        full.numbers.add_queue("nowhere")  # its slot unserved, mid-failover
        zero = {"sweeps_total": 0.0, "ghosts_removed_total": 0.0}
        for queue, node in routes.items():
            for name, expected in zero.items():
                assert value(full, f"sweeperd_{name}", queue=queue, node=node) == expected
            for name in ("sweep_duration_seconds", "recovery_delay_seconds"):
                assert value(full, f"sweeperd_{name}_count", queue=queue, node=node) == 0
                assert (
                    value(full, f"sweeperd_{name}_bucket", queue=queue, node=node, le="+Inf") == 0
                )
        assert per_queue(full, "nowhere") == 3  # recovered, dead, exempt
        full.numbers.route_by({**routes, "nowhere": OTHER}.get)
        assert value(full, "sweeperd_sweeps_total", queue="nowhere", node=OTHER) == 0

    def test_a_queue_moved_keeps_its_series_on_each_node(self, full: Metrics) -> None:
        """full: a queue swept on one node, then on another (a failover, a migration), has a
        series on each with its own counts, in the text as the library reads them; the old
        one stays (counters never go backwards) until its node is forgotten."""
        full.numbers.route_by(lambda _queue: NODE)
        full.numbers.add_queue("q")
        full.numbers.record(
            NODE, "q", result(reply(recovered=1, ghosts=2), depths(delay_ms=3)), 1.0
        )
        full.numbers.route_by(lambda _queue: OTHER)
        calls = [result(reply(ghosts=1)), result(Reason.LANE)]
        full.numbers.record_round(
            OTHER, list(zip(["q", "q"], calls, strict=True)), 2.0, duration_s=0.002
        )
        text = full.exposition(None)[0].decode()
        expected = [
            'sweeperd_sweeps_total{queue="q",node="h:6379"} 1',
            'sweeperd_sweeps_total{queue="q",node="h:6380"} 2',
            'sweeperd_ghosts_removed_total{queue="q",node="h:6379"} 2',
            'sweeperd_ghosts_removed_total{queue="q",node="h:6380"} 1',
            'sweeperd_sweep_duration_seconds_count{queue="q",node="h:6379"} 0',
            'sweeperd_sweep_duration_seconds_count{queue="q",node="h:6380"} 2',
            'sweeperd_recovery_delay_seconds_count{queue="q",node="h:6379"} 1',
            'sweeperd_recovery_delay_seconds_count{queue="q",node="h:6380"} 0',
        ]
        shown = {line.partition("{")[0] for line in expected}
        assert [line for line in text.splitlines() if line.partition("{")[0] in shown] == expected
        for line in expected:
            name, labels, number = parsed(line)
            assert value(full, name, **labels) == number
        assert value(full, "sweeperd_recovered_total", queue="q") == 1
        assert per_queue(full) == 32 + 1 + 22  # read on NODE, a failure, and on OTHER
        full.numbers.forget_node(NODE)
        assert per_queue(full) == 32 + 1
        assert value(full, "sweeperd_sweeps_total", queue="q", node=OTHER) == 2
        assert value(full, "sweeperd_sweeps_total", queue="q", node=NODE) is None

    def test_add_node_precreates(self, m: Metrics) -> None:
        """add_node makes a node's sweeps and ghosts exist at 0."""
        m.numbers.add_node("n:9")
        for name in ("sweeps", "ghosts_removed"):
            assert value(m, f"sweeperd_{name}_total", node="n:9") == 0


def parsed(line: str) -> tuple[str, dict[str, str], float]:
    """One sample line of the text format: its name, labels and value."""
    [family] = text_string_to_metric_families(line + "\n")
    [sample] = family.samples
    return sample.name, sample.labels, sample.value


def every_kind(m: Metrics) -> Metrics:
    """Every series present: two queues swept (one with a name to escape), one of them on a
    second node since, a node's events."""
    swept(m)
    swept(m, 'odd"\\name')
    m.numbers.route_by(lambda _queue: OTHER)
    m.numbers.record(OTHER, "q", result(reply(ghosts=1), depths(delay_ms=3)), 2.0)
    nodes = [NodeState(NODE, 1, True, "abc", "native")]
    m.read_state(StateReaders(nodes=lambda: nodes, ready=lambda: True))
    scheduler = BackgroundScheduler(timezone=UTC)
    schedule = Schedule(
        scheduler, lambda _batch: None, workers=1, jitter=0.0, on_overrun=lambda: None
    )
    for series in schedule.series:
        m.add_collector(series)
    schedule.sync([QueueSettings("q", 1.0, 1, 100)])
    [job] = scheduler.get_jobs()
    late = datetime.now(UTC) - timedelta(seconds=0.01)
    schedule.submitted(JobSubmissionEvent(EVENT_JOB_SUBMITTED, job.id, SWEEPS, [late]))
    return m


class TestExposition:
    @pytest.mark.parametrize("level", list(QueueMetrics))
    def test_promtool_check_metrics(self, level: QueueMetrics) -> None:
        """A scrape's text, every series present, passes `promtool check metrics`."""
        promtool = shutil.which("promtool")
        assert promtool, "promtool is missing: install Debian's prometheus package"
        body, content_type = every_kind(Metrics(version="1", level=level)).exposition(None)
        assert content_type.startswith("text/plain; version=0.0.4")
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=body, capture_output=True, timeout=30
        )
        assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
        assert checked.stdout.decode() + checked.stderr.decode() == ""

    @pytest.mark.parametrize("level", list(QueueMetrics))
    def test_same_as_the_library(self, level: QueueMetrics) -> None:
        """A scrape holds exactly the samples prometheus_client renders from the registry."""
        m = every_kind(Metrics(version="1", level=level))
        body, _ = m.exposition(None)
        library = generate_latest(m.registry).decode()
        assert samples(text_string_to_metric_families(body.decode())) == samples(
            text_string_to_metric_families(library)
        )

    def test_openmetrics(self) -> None:
        """Asked for OpenMetrics, a scrape parses as OpenMetrics with the same samples."""
        m = every_kind(Metrics(version="1", level=QueueMetrics.FULL))
        body, content_type = m.exposition(OPENMETRICS)
        assert content_type.startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n") and body.count(b"# EOF") == 1
        text, _ = m.exposition(None)
        parsed = samples(openmetrics_families(body.decode()))  # type: ignore[no-untyped-call]
        plain = samples(text_string_to_metric_families(text.decode()))
        assert without_created(parsed) == without_created(plain)

    def test_escaped_queue_names(self, m: Metrics) -> None:
        """A queue name with a quote and a backslash comes back as it was."""
        every_kind(m)
        assert value(m, "sweeperd_recovered_total", queue='odd"\\name') == 2

    def test_help_texts(self, full: Metrics) -> None:
        """Every sweeperd metric has a HELP text."""
        helps = {
            metric.name: metric.documentation
            for metric in every_kind(full).registry.collect()
            if metric.name.startswith("sweeperd_")
        }
        assert len(helps) == 27
        assert all(len(text) > 20 for text in helps.values())


class TestSparse:
    """sparse: a queue's series while it has something to say, its counters at 0 first."""

    @pytest.fixture
    def sparse(self) -> Metrics:
        m = Metrics(CollectorRegistry(), version="9.9.9", level=QueueMetrics.SPARSE)
        m.numbers.clock = lambda: self.now
        self.now = 1_000.0
        return m

    def queue_series(self, m: Metrics) -> set[str]:
        return {
            f"{s.name}{sorted(s.labels.items())}"
            for metric in m.registry.collect()
            for s in metric.samples
            if "queue" in s.labels
        }

    def test_idle_queues_export_nothing_the_node_counts_every_call(self, sparse: Metrics) -> None:
        """1,000 queues swept with nothing to say: no queue's series; the node's sweeps whole."""
        for n in range(1000):
            sparse.numbers.add_queue(f"q{n}")
            sparse.numbers.record(NODE, f"q{n}", result(reply(), depths()), 999.0)
        assert self.queue_series(sparse) == set()
        assert value(sparse, "sweeperd_sweeps_total", node=NODE) == 1000

    def test_a_recovery_appears_at_zero_then_counts(self, sparse: Metrics) -> None:
        """Its counters show 0 for their first minute (a rate sees the whole increase), then
        what it counted; the gauges what they are from the start."""
        sparse.numbers.add_queue("q")
        sparse.numbers.record(NODE, "q", result(reply(recovered=2, exempt=1), depths()), 999.0)
        assert value(sparse, "sweeperd_recovered_total", queue="q") == 0
        assert value(sparse, "sweeperd_exempt_total", queue="q") == 0
        assert value(sparse, "sweeperd_last_success_timestamp_seconds", queue="q") == 999.0
        assert value(sparse, "sweeperd_expired_leases", queue="q") == 0
        self.now += 59
        assert value(sparse, "sweeperd_recovered_total", queue="q") == 0
        self.now += 1
        assert value(sparse, "sweeperd_recovered_total", queue="q") == 2
        assert value(sparse, "sweeperd_exempt_total", queue="q") == 1

    def test_a_quiet_queue_goes_and_comes_back_from_zero(self, sparse: Metrics) -> None:
        """Half an hour after its last word its series go and its counters restart: its next
        recovery shows 0, then 1 (never its old 2 plus 1, which a rate would miss)."""
        sparse.numbers.add_queue("q")
        sparse.numbers.record(NODE, "q", result(reply(recovered=2), depths()), 1_000.0)
        assert value(sparse, "sweeperd_recovered_total", queue="q") == 0
        self.now = 1_000.0 + 1_799
        sparse.numbers.record(NODE, "q", result(reply(), depths()), self.now)
        assert value(sparse, "sweeperd_recovered_total", queue="q") == 2
        self.now = 1_000.0 + 1_800
        assert self.queue_series(sparse) == set()
        sparse.numbers.record(NODE, "q", result(reply(recovered=1), depths()), self.now)
        assert value(sparse, "sweeperd_recovered_total", queue="q") == 0
        self.now += 60
        assert value(sparse, "sweeperd_recovered_total", queue="q") == 1

    def test_a_backlog_and_a_failure_are_something_to_say(self, sparse: Metrics) -> None:
        """Leases left expired show the gauges; a failure its reason's counter, at 0 first."""
        sparse.numbers.add_queue("late")
        sparse.numbers.add_queue("refused")
        sparse.numbers.record(
            NODE, "late", result(reply(), depths(expired=4, oldest_ms=4_000)), 999.0
        )
        sparse.numbers.record(NODE, "refused", result(Reason.LANE), 999.0)
        assert value(sparse, "sweeperd_expired_leases", queue="late") == 4
        assert value(sparse, "sweeperd_oldest_expired_age_seconds", queue="late") == 6.0
        assert value(sparse, "sweeperd_sweep_failures_total", queue="refused", reason="lane") == 0
        self.now += 60
        assert value(sparse, "sweeperd_sweep_failures_total", queue="refused", reason="lane") == 1

    def test_an_owned_queue_not_swept_says_its_last_success(self, sparse: Metrics) -> None:
        """No success for 150 s: its last success is exported (SweeperdQueueNotSwept reads it at
        300 s); another replica's queue never says it (its owner does)."""
        sparse.numbers.add_queue("mine")
        sparse.numbers.add_queue("theirs")
        for queue in ("mine", "theirs"):
            sparse.numbers.record(NODE, queue, result(reply(), depths()), 1_000.0)
        sparse.numbers.disown_queue("theirs")
        self.now = 1_000.0 + 150
        assert self.queue_series(sparse) == set()
        self.now += 1
        assert value(sparse, "sweeperd_last_success_timestamp_seconds", queue="mine") == 1_000.0
        assert value(sparse, "sweeperd_last_success_timestamp_seconds", queue="theirs") is None


class TestAuto:
    """auto (the default): basic up to SPARSE_ABOVE queues known, sparse above, every rate
    right across the change."""

    @pytest.fixture
    def auto(self) -> Metrics:
        m = Metrics(CollectorRegistry(), version="9.9.9", level=QueueMetrics.AUTO)
        self.now = 1_000.0
        m.numbers.clock = lambda: self.now
        return m

    def counted(self, m: Metrics) -> int:
        """How many queues' recovered counters a whole scrape writes."""
        body, _ = m.exposition(None)
        return body.count(b"\nsweeperd_recovered_total{")

    def test_basic_up_to_ten_thousand_queues_sparse_above(self, auto: Metrics) -> None:
        """10,000 idle queues: each one's counters at 0; one more: none of them."""
        assert SPARSE_ABOVE == 10_000
        for n in range(SPARSE_ABOVE):
            auto.numbers.add_queue(f"q{n}")
        assert self.counted(auto) == SPARSE_ABOVE
        auto.numbers.add_queue("one-more")
        assert self.counted(auto) == 0
        auto.numbers.keep_queues({f"q{n}" for n in range(SPARSE_ABOVE)})
        assert self.counted(auto) == SPARSE_ABOVE

    def test_idle_queues_keep_nothing_of_their_own(self, auto: Metrics) -> None:
        """1,000 idle queues swept in a round (its first call whole, the others brief) and
        scraped as auto goes sparse: none has seldom numbers of its own (100,000 queues' were
        most of 17.4 MiB); the first with something to say has."""
        auto.numbers.sparse_above = 100
        names = [f"q{n}" for n in range(1000)]
        for name in names:
            auto.numbers.add_queue(name)
        whole = result(reply(), depths(active=1))
        brief = result(NOTHING, Depths.brief(10_000, None))
        calls = [(name, whole if name == "q0" else brief) for name in names]
        auto.numbers.record_round(NODE, calls, self.now, duration_s=0.01)
        auto.exposition(None)
        assert value(auto, "sweeperd_sweeps_total", node=NODE) == 1000
        assert [q for q in auto.numbers.queues.values() if q.seldom is not NOTHING_SAID] == []
        auto.numbers.record(NODE, "q7", result(reply(recovered=1), depths()), self.now)
        said = [q.name for q in auto.numbers.queues.values() if q.seldom is not NOTHING_SAID]
        assert said == ["q7"]

    def test_going_sparse_keeps_the_counts_shown(self, auto: Metrics) -> None:
        """A queue with something to say keeps its series and count when auto goes sparse (a
        0 there would count its 2 again); an idle queue's series go."""
        auto.numbers.sparse_above = 2
        for queue in ("busy", "idle"):
            auto.numbers.add_queue(queue)
        auto.numbers.record(NODE, "busy", result(reply(recovered=2), depths()), self.now)
        assert value(auto, "sweeperd_recovered_total", queue="busy") == 2
        assert value(auto, "sweeperd_recovered_total", queue="idle") == 0
        auto.numbers.add_queue("third")
        assert value(auto, "sweeperd_recovered_total", queue="busy") == 2
        assert value(auto, "sweeperd_recovered_total", queue="idle") is None
        auto.numbers.record(NODE, "busy", result(reply(recovered=1), depths()), self.now)
        assert value(auto, "sweeperd_recovered_total", queue="busy") == 3

    def test_going_basic_shows_a_hidden_queue_from_zero(self, auto: Metrics) -> None:
        """A queue hidden at sparse (its counts never scraped) appears at 0 when auto goes
        basic, then counts from there."""
        auto.numbers.sparse_above = 2
        for queue in ("a", "b", "c"):
            auto.numbers.add_queue(queue)
        assert value(auto, "sweeperd_recovered_total", queue="a") is None
        auto.numbers.record(NODE, "a", result(reply(recovered=2), depths()), self.now)
        self.now += 1_800  # quiet again before any scrape saw it
        auto.numbers.keep_queues({"a", "b"})
        assert value(auto, "sweeperd_recovered_total", queue="a") == 0
        auto.numbers.record(NODE, "a", result(reply(recovered=1), depths()), self.now)
        assert value(auto, "sweeperd_recovered_total", queue="a") == 1
