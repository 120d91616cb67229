"""The daemon's metrics: each record method's series, queue lifecycle, a valid exposition."""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from sweeperd.metrics import Metrics
from sweeperd.reasons import Reason
from sweeperd.rounds import Depths, SweepReply


def reply(recovered: int = 0, dead: int = 0, exempt: int = 0, ghosts: int = 0) -> SweepReply:
    """A reply with that many ids in each list (exempt ones among the recovered)."""
    ids = [f"j{n}".encode() for n in range(recovered + dead)]
    return SweepReply(tuple(ids[:recovered]), tuple(ids[recovered:]), tuple(ids[:exempt]), ghosts)


def depths(
    active: int = 0, pending: int = 0, dead: int = 0, failed: int = 0, expired: int = 0,
    oldest_ms: float | None = None, now_ms: int = 10_000,
) -> Depths:  # fmt: skip
    return Depths(b"r", now_ms, expired, active, pending, dead, failed, oldest_ms)


@pytest.fixture
def m() -> Metrics:
    return Metrics(CollectorRegistry(), version="9.9.9")


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def names(m: Metrics) -> set[str]:
    return {s.name for metric in m.registry.collect() for s in metric.samples}


class TestConstruction:
    def test_own_registry(self) -> None:
        """Without a registry a new one is made; the global registry is never touched."""
        before = set(REGISTRY._names_to_collectors)
        metrics = Metrics(version="1.0")
        assert metrics.registry is not REGISTRY
        assert set(REGISTRY._names_to_collectors) == before

    def test_build_info(self, m: Metrics) -> None:
        """Build info carries the version and the Python version."""
        assert value(m, "sweeperd_build_info", version="9.9.9", python=platform.python_version())

    def test_process_and_platform(self, m: Metrics) -> None:
        """The process and platform collectors report into the same registry."""
        assert "process_cpu_seconds_total" in names(m)
        assert "python_info" in names(m)

    def test_two_instances(self) -> None:
        """Two Metrics with their own registries do not collide."""
        Metrics(version="1")
        Metrics(version="2")


class TestRecord:
    def test_record_call(self, m: Metrics) -> None:
        """A call adds one sweep and its recovered, dead, exempt and ghost counts."""
        m.record_call("q", reply(recovered=3, dead=1, exempt=2, ghosts=5))
        m.record_call("q", reply(recovered=1))
        assert value(m, "sweeperd_sweeps_total", queue="q") == 2
        assert value(m, "sweeperd_recovered_total", queue="q") == 4
        assert value(m, "sweeperd_dead_total", queue="q") == 1
        assert value(m, "sweeperd_exempt_total", queue="q") == 2
        assert value(m, "sweeperd_ghosts_removed_total", queue="q") == 5

    def test_record_failure(self, m: Metrics) -> None:
        """A failure adds one sweep and one failure of its reason."""
        m.record_failure("q", Reason.LANE)
        m.record_failure("q", Reason.TIMEOUT)
        m.record_failure("q", Reason.TIMEOUT)
        assert value(m, "sweeperd_sweeps_total", queue="q") == 3
        assert value(m, "sweeperd_sweep_failures_total", queue="q", reason="lane") == 1
        assert value(m, "sweeperd_sweep_failures_total", queue="q", reason="timeout") == 2

    def test_record_tick(self, m: Metrics) -> None:
        """A tick observes its duration in the histogram."""
        m.record_tick("q", duration_s=0.002)
        assert value(m, "sweeperd_sweep_duration_seconds_count", queue="q") == 1
        assert value(m, "sweeperd_sweep_duration_seconds_sum", queue="q") == 0.002
        assert value(m, "sweeperd_sweep_duration_seconds_bucket", queue="q", le="0.005") == 1
        assert value(m, "sweeperd_sweep_duration_seconds_bucket", queue="q", le="0.001") == 0
        m.record_tick("q", duration_s=0.001)
        assert value(m, "sweeperd_sweep_duration_seconds_bucket", queue="q", le="0.001") == 1
        assert value(m, "sweeperd_sweep_duration_seconds_bucket", queue="q", le="+Inf") == 2

    def test_record_success(self, m: Metrics) -> None:
        """The last success is the time given, absent until then."""
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="q") is None
        m.record_success("q", 1_700_000_000.5)
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="q") == 1_700_000_000.5

    def test_record_depths(self, m: Metrics) -> None:
        """Depths set one gauge per set, the failed count, the backlog and its oldest age."""
        m.record_depths(
            "q", depths(active=1, pending=2, dead=3, failed=4, expired=7, oldest_ms=2_500)
        )
        assert value(m, "sweeperd_queue_jobs", queue="q", set="active") == 1
        assert value(m, "sweeperd_queue_jobs", queue="q", set="pending") == 2
        assert value(m, "sweeperd_queue_jobs", queue="q", set="dead") == 3
        assert value(m, "sweeperd_queue_failed_jobs", queue="q") == 4
        assert value(m, "sweeperd_expired_leases", queue="q") == 7
        assert value(m, "sweeperd_oldest_expired_age_seconds", queue="q") == 7.5
        m.record_depths("q", depths(oldest_ms=None))
        assert value(m, "sweeperd_oldest_expired_age_seconds", queue="q") == 0
        assert value(m, "sweeperd_expired_leases", queue="q") == 0

    def test_node_up(self, m: Metrics) -> None:
        """node_up sets 1 or 0 per node."""
        m.node_up("h:6379", True)
        m.node_up("/run/r.sock", False)
        assert value(m, "sweeperd_redis_up", node="h:6379") == 1
        assert value(m, "sweeperd_redis_up", node="/run/r.sock") == 0
        m.node_up("h:6379", False)
        assert value(m, "sweeperd_redis_up", node="h:6379") == 0

    def test_server_restarted(self, m: Metrics) -> None:
        """Each restart seen counts once."""
        m.server_restarted("h:6379")
        m.server_restarted("h:6379")
        assert value(m, "sweeperd_server_restarts_total", node="h:6379") == 2

    def test_server_info_one_series_per_node(self, m: Metrics) -> None:
        """A new run_id or executor replaces the node's series; other nodes keep theirs."""
        m.server_info("a:1", "r1", "native")
        m.server_info("b:2", "r9", "script")
        m.server_info("a:1", "r1", "native")
        m.server_info("a:1", "r2", "native")
        m.server_info("a:1", "r2", "script")
        series = [
            s.labels
            for metric in m.registry.collect()
            if metric.name == "sweeperd_server_info"
            for s in metric.samples
        ]
        assert sorted(series, key=lambda labels: labels["node"]) == [
            {"node": "a:1", "run_id": "r2", "executor": "script"},
            {"node": "b:2", "run_id": "r9", "executor": "script"},
        ]

    def test_schedule_lag(self, m: Metrics) -> None:
        """Lag is observed; a negative lag (early) counts as 0."""
        m.schedule_lag(0.3)
        m.schedule_lag(-0.01)
        assert value(m, "sweeperd_schedule_lag_seconds_count") == 2
        assert value(m, "sweeperd_schedule_lag_seconds_sum") == 0.3

    def test_set_ready(self, m: Metrics) -> None:
        """Readiness is 1 or 0."""
        assert value(m, "sweeperd_ready") == 0
        m.set_ready(True)
        assert value(m, "sweeperd_ready") == 1
        m.set_ready(False)
        assert value(m, "sweeperd_ready") == 0


class TestSharingSeries:
    def test_members_owned_queues_and_changes_start_at_zero(self, m: Metrics) -> None:
        """The three series of sharing exist from the start, unlabelled, at 0."""
        assert value(m, "sweeperd_members") == 0
        assert value(m, "sweeperd_owned_queues") == 0
        assert value(m, "sweeperd_ownership_changes_total") == 0


class TestQueueLifecycle:
    def test_add_queue_precreates(self, m: Metrics) -> None:
        """add_queue makes every per-queue series exist at 0 before anything happens."""
        m.add_queue("q")
        for name in ("recovered", "dead", "exempt", "ghosts_removed", "sweeps"):
            assert value(m, f"sweeperd_{name}_total", queue="q") == 0
        for reason in Reason:  # a reason's series appears when it first happens
            assert value(m, "sweeperd_sweep_failures_total", queue="q", reason=reason) is None
        assert value(m, "sweeperd_sweep_duration_seconds_count", queue="q") == 0
        assert value(m, "sweeperd_expired_leases", queue="q") == 0
        assert value(m, "sweeperd_oldest_expired_age_seconds", queue="q") == 0
        for name in ("active", "pending", "dead"):
            assert value(m, "sweeperd_queue_jobs", queue="q", set=name) == 0
        assert value(m, "sweeperd_queue_failed_jobs", queue="q") == 0
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="q") is None

    def test_add_queue_keeps_counts(self, m: Metrics) -> None:
        """Adding a queue again does not reset what it counted."""
        m.record_call("q", reply(recovered=2))
        m.add_queue("q")
        assert value(m, "sweeperd_recovered_total", queue="q") == 2

    def test_forget_queue(self, m: Metrics) -> None:
        """forget_queue removes every series of the queue and no other queue's."""
        for queue in ("gone", "kept"):
            m.add_queue(queue)
            m.record_call(queue, reply(recovered=1, dead=1, exempt=1, ghosts=1))
            m.record_failure(queue, Reason.OTHER)
            m.record_tick(queue, duration_s=0.01)
            m.record_success(queue, 5.0)
            m.record_depths(queue, depths(active=1, pending=1, dead=1, failed=1, expired=1))
        m.forget_queue("gone")
        text = generate_latest(m.registry).decode()
        assert 'queue="gone"' not in text
        assert 'queue="kept"' in text
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="kept") == 5.0

    def test_keep_queues_drops_every_other(self, m: Metrics) -> None:
        """keep_queues removes the series of queues not named, as a late call left them."""
        for queue in ("kept", "given-away"):
            m.add_queue(queue)
            m.record_success(queue, 5.0)
        m.keep_queues({"kept", "never-seen"})
        text = generate_latest(m.registry).decode()
        assert 'queue="given-away"' not in text
        assert value(m, "sweeperd_last_success_timestamp_seconds", queue="kept") == 5.0
        assert 'queue="never-seen"' not in text

    def test_forget_unknown_queue(self, m: Metrics) -> None:
        """Forgetting a queue that has no series is harmless."""
        m.forget_queue("never")


class TestExposition:
    def test_promtool_check_metrics(self, m: Metrics) -> None:
        """The exposition, every series present, passes `promtool check metrics`."""
        promtool = shutil.which("promtool")
        assert promtool, "promtool is missing: install Debian's prometheus package"
        m.add_queue("q")
        m.record_call("q", reply(recovered=1, dead=1, ghosts=1))
        m.record_failure("q", Reason.CONNECTION)
        m.record_tick("q", duration_s=0.004)
        m.record_success("q", 1.0)
        m.record_depths("q", depths(pending=1, dead=1, failed=1, expired=2, oldest_ms=5))
        m.node_up("h:6379", True)
        m.server_restarted("h:6379")
        m.server_info("h:6379", "abc", "native")
        m.schedule_lag(0.01)
        m.set_ready(True)
        exposition = generate_latest(m.registry)
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=exposition, capture_output=True, timeout=30
        )
        assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
        assert checked.stdout.decode() + checked.stderr.decode() == ""

    def test_help_texts(self, m: Metrics) -> None:
        """Every sweeperd metric has a HELP text."""
        helps = {
            metric.name: metric.documentation
            for metric in m.registry.collect()
            if metric.name.startswith("sweeperd_")
        }
        assert len(helps) == 22
        assert all(len(text) > 20 for text in helps.values())
