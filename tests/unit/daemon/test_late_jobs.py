"""The daemon's jobs started late by the scheduler still run, on a real server: a heartbeat the
scheduler's thread reached seconds late (a starved host, a takeover of 33,000 queues beside it)
is sent late, never dropped (APScheduler's default grace is a second)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from apscheduler.executors.pool import ThreadPoolExecutor

from sweeperd.daemon.daemon import Daemon
from sweeperd.keyspace import members_key
from tests.support.clock import Clock
from tests.support.daemon_inprocess import in_process, settings_for, stopped
from tests.support.servers import RedisServer

WAITED = timedelta(seconds=30)


@pytest.fixture
def daemon(r: redis.Redis, redis_server: RedisServer) -> Iterator[Daemon]:
    """A sharing replica whose jobs are added, its scheduler paused: the test runs them."""
    settings = settings_for(redis_server.url, shard="on", instance_id="r1", heartbeat="3")
    made = in_process(settings, lambda: settings, Clock(100.0))
    made.fleet.refresh()
    made.scheduler.start(paused=True)
    made.add_jobs()
    yield made
    made.scheduler.shutdown(wait=False)
    stopped(made)


def run_late(daemon: Daemon, job_id: str) -> None:
    """Run the job on a pool of its kind as if started WAITED after its run time."""
    job = daemon.scheduler.get_job(job_id)
    pool = ThreadPoolExecutor(1)
    pool.start(daemon.scheduler, job.executor)
    try:
        pool.submit_job(job, [datetime.now(UTC) - WAITED])
    finally:
        pool.shutdown(wait=True)  # the run handed to it is done


def test_a_late_membership_heartbeat_is_sent(daemon: Daemon, r: redis.Redis) -> None:
    """The membership's job, started 30 s late, sends the heartbeat: the member's entry is on
    the server."""
    assert r.zscore(members_key("emq"), "r1") is None
    run_late(daemon, "members")
    assert r.zscore(members_key("emq"), "r1") is not None


def test_no_job_of_the_daemon_is_dropped_for_starting_late(daemon: Daemon) -> None:
    """Every job the daemon adds runs however late it starts: the heartbeats, the eviction
    watch, the settling (gc.freeze, once: dropped, never again) and, in test_schedule, the
    batches and the takeover."""
    jobs = daemon.scheduler.get_jobs()
    assert {job.id for job in jobs} >= {"heartbeat", "members", "eviction"}
    assert [job.id for job in jobs if job.misfire_grace_time is not None] == []
