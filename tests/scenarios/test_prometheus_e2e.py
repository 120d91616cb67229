"""A real Prometheus scrapes a running `sweeperd run`, reads its counters and raises its alerts."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import PAST_MS
from tests.support.prometheus_server import Process, Stack, poll, prometheus_binary
from tests.support.servers import PROMETHEUS_ONLY, RedisServer, free_port
from tests.support.shipped import RULES, dashboard_exprs, metric_names, with_grafana_values

SHORT_FOR = "5s"  # `for:` in the test copy of the rules; the shipped rules wait minutes
RECOVERED_JOBS = ("r1", "r2", "r3")  # no stalled field: stalled 1 < max_stalled 3
DEAD_JOB = "d1"  # stalled 2: 3 >= max_stalled 3
MAX_STALLED = 3
# The families a sweep of one good queue and one failing queue must bring into being (at the
# default --queue-metrics auto, basic at two queues: sweeps and durations per node, no set sizes).
EXPECTED_FAMILIES = frozenset(
    {
        "sweeperd_recovered_total",
        "sweeperd_dead_total",
        "sweeperd_sweeps_total",
        "sweeperd_sweep_failures_total",
        "sweeperd_sweep_duration_seconds_bucket",
        "sweeperd_last_success_timestamp_seconds",
        "sweeperd_expired_leases",
        "sweeperd_redis_up",
        "sweeperd_ready",
        "sweeperd_build_info",
        "sweeperd_server_info",
        "sweeperd_schedule_lag_seconds_bucket",
    }
)


def rules_with_short_for(target: Path) -> Path:
    """A copy of the shipped rules whose `for:` waits are seconds: only `for:` is rewritten."""
    document = yaml.safe_load(RULES.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = SHORT_FOR
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


def prometheus_config(metrics_port: int, rules: Path) -> str:
    """Scrape and evaluate every second, with the short-`for:` copy of the rules."""
    every_second = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    scrape = {
        "job_name": "sweeperd",
        "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
    }
    return yaml.safe_dump(
        {
            "global": every_second,
            "rule_files": [str(rules_with_short_for(rules))],
            "scrape_configs": [scrape],
        }
    )


def seed(server: RedisServer, good: QueueKeys, lane: QueueKeys) -> None:
    """Expired leases: three to recover and one to dead-letter in good, a lane row in lane."""
    with server.client() as client:
        for job in RECOVERED_JOBS:
            client.hset(good.job(job), mapping={"state": "active", "attempts": 1})
            client.zadd(good.active, {job: PAST_MS})
        client.hset(good.job(DEAD_JOB), mapping={"state": "active", "attempts": 1, "stalled": 2})
        client.zadd(good.active, {DEAD_JOB: PAST_MS})
        client.hset(lane.job("g1"), mapping={"state": "active", "attempts": 1, "group": "g"})
        client.zadd(lane.active, {"g1": PAST_MS})


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Seeded queues, `sweeperd run` sweeping them every second, Prometheus scraping it."""
    workdir = tmp_path_factory.mktemp("prometheus-e2e")
    suffix = uuid.uuid4().hex[:8]
    good, lane = QueueKeys(f"e2e-good-{suffix}"), QueueKeys(f"e2e-lane-{suffix}")
    seed(redis_server, good, lane)

    metrics_port, prometheus_port = free_port(), free_port()
    config = workdir / "prometheus.yml"
    config.write_text(prometheus_config(metrics_port, workdir / "sweeperd-rules.yml"))
    sweeperd = [sys.executable, "-m", "sweeperd", "run", "--redis-url", redis_server.url]
    sweeperd += ["--queue", good.queue, "--queue", lane.queue, "--interval", "1"]
    sweeperd += ["--max-stalled", str(MAX_STALLED), "--log-format", "json"]
    sweeperd += ["--metrics-addr", f"127.0.0.1:{metrics_port}"]
    prometheus = [
        prometheus_binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prometheus_port}",
    ]
    processes: list[Process] = []
    try:
        processes.append(Process.start("sweeperd", sweeperd, workdir / "sweeperd.log"))
        processes.append(Process.start("prometheus", prometheus, workdir / "prometheus.log"))
        yield Stack(f"http://127.0.0.1:{prometheus_port}", good.queue, lane.queue, processes)
    finally:
        for process in reversed(processes):
            process.stop()


@pytest.mark.only_on("redis", reason=PROMETHEUS_ONLY)
class TestPrometheusEndToEnd:
    def test_prometheus_scrapes_sweeperd(self, stack: Stack) -> None:
        """The sweeperd target turns up in Prometheus, and every shipped rule is loaded."""

        def target_up() -> bool | None:
            data = stack.api("/api/v1/targets")
            targets = data["activeTargets"] if data else []
            return True if [t["health"] for t in targets] == ["up"] else None

        stack.wait_for("the sweeperd target to be up", target_up)
        groups = stack.api("/api/v1/rules")["groups"]
        loaded = {rule["name"] for group in groups for rule in group["rules"]}
        assert loaded == {
            rule["alert"] for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
        }

    def test_recovered_and_dead_counters_are_read_back(self, stack: Stack) -> None:
        """After a sweep, Prometheus holds the recovered and dead-lettered counts of the queue."""
        recovered = f'sweeperd_recovered_total{{job="sweeperd", queue="{stack.good_queue}"}}'
        dead = f'sweeperd_dead_total{{job="sweeperd", queue="{stack.good_queue}"}}'
        assert stack.wait_for("recovered jobs", lambda: stack.value(recovered) or None) == len(
            RECOVERED_JOBS
        )
        assert stack.wait_for("a dead job", lambda: stack.value(dead) or None) == 1

    def test_failing_sweeps_raise_sweeps_failing(self, stack: Stack) -> None:
        """A lane row fails its queue's sweeps: SweeperdSweepsFailing goes pending, then fires."""

        def states() -> list[dict[str, Any]]:
            alerts = (stack.api("/api/v1/alerts") or {"alerts": []})["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "SweeperdSweepsFailing"]

        def state(wanted: str) -> dict[str, Any] | None:
            return next((a for a in states() if a["state"] == wanted), None)

        pending = stack.wait_for("SweeperdSweepsFailing to go pending", lambda: state("pending"))
        assert pending["labels"]["queue"] == stack.lane_queue
        assert pending["labels"]["reason"] == "lane"
        firing = stack.wait_for("SweeperdSweepsFailing to fire", lambda: state("firing"))
        assert (firing["labels"]["queue"], firing["labels"]["reason"]) == (stack.lane_queue, "lane")
        assert {a["labels"]["queue"] for a in states()} == {stack.lane_queue}

    def test_exported_names_match_what_rules_and_dashboard_use(self, stack: Stack) -> None:
        """The families a sweep brings exist in Prometheus, and every dashboard query evaluates."""

        seen: set[str] = set()

        def families() -> bool | None:
            seen.update(stack.api("/api/v1/label/__name__/values") or [])
            return True if seen >= EXPECTED_FAMILIES else None

        poll(families, stack.processes)
        assert EXPECTED_FAMILIES - seen == set()
        for expr in dashboard_exprs():
            assert metric_names(expr)
            assert stack.api("/api/v1/query", query=with_grafana_values(expr)) is not None, expr
