"""A takeover whose batches the sweeps' pool starts late, on a real server: the replica left
sweeps every queue it gained and brings back the leases of the one that died (kill -9: its
entry left to expire), each once, however long its batches waited behind one another."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from sweeperd.config.settings import build_settings
from sweeperd.daemon.daemon import Daemon
from sweeperd.daemon.membership import MembershipStore
from sweeperd.daemon.schedule import SWEEPS, TAKEOVER, RunOnce
from sweeperd.keyspace import QueueKeys
from tests.support.clock import Clock
from tests.support.daemon_inprocess import in_process, stopped
from tests.support.daemon_process import wait_until
from tests.support.helpers import hash_of, lease, owned_by, server_ms
from tests.support.servers import RedisServer

QUEUES = [f"t{n:03}" for n in range(600)]  # about 300 gained: two takeover batches
IDS = frozenset({"r1", "r2"})
TTL_S = 3.0
DEAD_TTL_S = 0.3  # the dead replica's last heartbeat: its entry expires this soon after
DUE_AFTER_MS = 100  # its queues' leases fall due this long after its last heartbeat
LATER_MS = 4_000  # or this long: after the takeover's sweep, on a loaded machine too
# A takeover of 33,000 queues is 167 batches on the pool's 4 threads: the last ones start
# tens of seconds after they were added.
WAITED = timedelta(seconds=30)


@pytest.fixture
def clock() -> Clock:
    return Clock(100.0)


@pytest.fixture
def daemon(r: redis.Redis, redis_server: RedisServer, clock: Clock) -> Iterator[Daemon]:
    """r1 on its own thread-less schedule (the scheduler paused: the test hands the batches
    to the pool), its primary known, the heartbeat's time to live TTL_S."""
    settings = build_settings(
        {
            "redis_url": redis_server.url,
            "queues": QUEUES,
            "interval": "60",
            "heartbeat": str(TTL_S),
            "instance_id": "r1",
            "max_stalled": "5",  # a budget no lease reaches: each row ends pending, stalled 1
            "queue_metrics": "basic",
        },
        None,
        logs_to_tty=False,
    )
    made = in_process(settings, lambda: settings, clock)
    made.fleet.refresh()
    made.scheduler.start(paused=True)
    yield made
    made.scheduler.shutdown(wait=False)
    stopped(made)


def sweep_late(daemon: Daemon) -> int:
    """Run the daemon's takeover batches on a pool of its kind, each started WAITED after it
    was due; return how many there were."""
    jobs = [job for job in daemon.scheduler.get_jobs() if job.name == TAKEOVER]
    pool = RunOnce(2)
    pool.start(daemon.scheduler, SWEEPS)
    try:
        for job in jobs:
            pool.submit_job(job, [datetime.now(UTC) - WAITED])
    finally:
        pool.shutdown(wait=True)
    return len(jobs)


def kill_r2(daemon: Daemon, r: redis.Redis, due_in_ms: int) -> tuple[list[str], int]:
    """r1 and r2 share QUEUES; r2 dies (kill -9: its last heartbeat left to expire) with a
    lease in each of its queues due `due_in_ms` after that beat; r1 sees it gone and chooses,
    its takeover batches added. Return r2's queues and when their leases fall due (server ms)."""
    MembershipStore(r, "emq", "r2", TTL_S).beat()
    assert daemon.sharing.refresh(daemon.clock())
    daemon.choose()
    assert daemon.queues.sweeping() == set(owned_by("r1", QUEUES, IDS))
    theirs = owned_by("r2", QUEUES, IDS)
    MembershipStore(r, "emq", "r2", DEAD_TTL_S).beat()
    due_ms = server_ms(r) + due_in_ms
    pipe = r.pipeline(transaction=False)
    for queue in theirs:
        lease(pipe, QueueKeys(queue), b"j", deadline_ms=due_ms, attempts="1", state="active")
    pipe.execute()
    wait_until(lambda: daemon.sharing.refresh(daemon.clock()), what="r2's entry expired")
    return theirs, due_ms


def back_once(daemon: Daemon, r: redis.Redis, queues: list[str]) -> None:
    """Every lease of `queues` is back once: no lease left, the row pending with stalled 1,
    the queue's sweeperd_recovered_total at 1."""
    rows = [hash_of(r, QueueKeys(queue).job(b"j")) for queue in queues]
    assert [r.zcard(QueueKeys(queue).active) for queue in queues] == [0] * len(queues)
    assert all(row[b"state"] == b"pending" and row[b"stalled"] == b"1" for row in rows)
    recovered = daemon.metrics.registry.get_sample_value
    assert [recovered("sweeperd_recovered_total", {"queue": q}) for q in queues] == [1.0] * len(
        queues
    )


def test_a_dead_replicas_leases_come_back_from_a_late_takeover(
    daemon: Daemon, r: redis.Redis
) -> None:
    """r2 dies with a lease in each of its queues falling due just after: r1's takeover,
    its batches started late, brings every one back once, not an interval later at their
    grid turn."""
    theirs, due_ms = kill_r2(daemon, r, DUE_AFTER_MS)
    wait_until(lambda: server_ms(r) > due_ms, what="the leases due")
    daemon.choose()
    assert daemon.queues.sweeping() == set(QUEUES)
    assert sweep_late(daemon) == 2
    back_once(daemon, r, theirs)


def test_leases_due_after_the_takeover_are_woken_at_their_deadline(
    daemon: Daemon, r: redis.Redis, clock: Clock
) -> None:
    """The takeover's sweep finds r2's leases not due yet: each gained queue's wake is armed
    at its lease's deadline (a brief idle reply says it), and that wake brings every one back
    once."""
    theirs, due_ms = kill_r2(daemon, r, LATER_MS)
    daemon.choose()
    assert sweep_late(daemon) == 2
    assert [r.zcard(QueueKeys(queue).active) for queue in theirs] == [1] * len(theirs)
    at, latest = daemon.fleet.next_wake(), clock.now + LATER_MS / 1000
    assert at is not None and clock.now < at <= latest
    wait_until(lambda: server_ms(r) > due_ms, what="the leases due")
    # Every wake by the deadline's bound: the clock stood still while the server's moved, so
    # the rounds' readings of the server's clock put the same deadline a little apart.
    clock.now = latest
    daemon.fleet.wake(latest)
    back_once(daemon, r, theirs)
    assert daemon.fleet.next_wake() is None
