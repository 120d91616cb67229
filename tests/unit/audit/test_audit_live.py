"""The audit under live traffic: workers claiming and completing jobs in two steps, both ways
round, are never a finding, while a job stranded among them is."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from sweeperd.audit.classes import AuditClass
from sweeperd.audit.reader import Clocks, NodeAudit, Pace
from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import Job, clean, plant
from tests.support.helpers import FUTURE_OFFSET_MS, now_ms
from tests.support.invoke import sweeperd
from tests.support.servers import RedisServer
from tests.support.topologies import wait_for

Q = QueueKeys("live")
IN_FLIGHT = 20  # leases each worker holds at once
ROUNDS = 3  # audits while the workers run, at least
GRACE_S = 1.0  # longer than a worker's pause between two steps on a loaded machine
MAX_ROUNDS = 2000  # until the first read has caught a job mid-claim


def work(client: redis.Redis, order: str, stop: threading.Event, done: list[int]) -> None:
    """A worker as EchoMQ clients are: each step one command, so that the keyspace is briefly
    inconsistent between two. `row-first` writes the row before the sets (and deletes it
    before its lease); `set-first` the other way round."""
    held: deque[str] = deque()
    n = 0
    while not stop.is_set():
        job = f"{order}-{n}"
        n += 1
        row = Q.job(job)
        client.hset(row, "state", "pending")
        client.zadd(Q.pending, {job: 0})
        deadline = now_ms() + FUTURE_OFFSET_MS
        if order == "row-first":
            client.hset(row, mapping={"state": "active", "attempts": "1"})
            client.zrem(Q.pending, job)
            client.zadd(Q.active, {job: deadline})
        else:
            client.zrem(Q.pending, job)
            client.zadd(Q.active, {job: deadline})
            client.hset(row, mapping={"state": "active", "attempts": "1"})
        held.append(job)
        if len(held) > IN_FLIGHT:
            old = held.popleft()
            if order == "row-first":
                client.delete(Q.job(old))
                client.zrem(Q.active, old)
            else:
                client.zrem(Q.active, old)
                client.delete(Q.job(old))
        done[0] += 1


@contextmanager
def workers(server: RedisServer) -> Iterator[list[list[int]]]:
    """Two workers, one of each order, on their own connections, until the block ends."""
    stop = threading.Event()
    counts = [[0], [0]]
    clients = [server.client(), server.client()]
    threads = [
        threading.Thread(target=work, args=(c, order, stop, n), daemon=True)
        for c, order, n in zip(clients, ("row-first", "set-first"), counts, strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        yield counts
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for c in clients:
            c.close()


class Recording(NodeAudit):
    """The audit, counting the candidates its first read found before they are read again."""

    seen = 0

    def confirm(self) -> None:
        Recording.seen += sum(len(a.candidates) for a in self.queues.values())
        super().confirm()


class TestLive:
    """No false alarm while jobs are claimed and completed."""

    def test_no_finding_under_live_traffic(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Audits while two workers claim and complete jobs find nothing in their queue, and
        exactly the stranded job planted in another, though the first reads did catch jobs
        mid-claim: the second read after the grace clears them."""
        plant(r, QueueKeys("still"), [*clean(), Job("lost", {"state": "active"})])
        pace = Pace(grace_s=GRACE_S, rate=1e6)
        Recording.seen = 0
        rounds = 0
        with workers(redis_server) as counts:
            wait_for(lambda: min(c[0] for c in counts) > IN_FLIGHT, "the workers to hold leases")
            while rounds < ROUNDS or (Recording.seen == 0 and rounds < MAX_ROUNDS):
                rounds += 1
                found = Recording(r, "emq", pace, Clocks()).audit(None)
                assert {a.queue: a.found for a in found} == {
                    "live": {},
                    "still": {AuditClass.STRANDED: [b"lost"]},
                }
            moved = [c[0] for c in counts]
        assert min(moved) > 100, moved  # both workers ran through the audits
        assert Recording.seen > 0, rounds  # the first reads saw jobs mid-claim

    def test_the_command_under_live_traffic(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """`sweeperd audit` with its grace finds nothing in the workers' queue."""
        with workers(redis_server) as counts:
            wait_for(lambda: min(c[0] for c in counts) > IN_FLIGHT, "the workers to hold leases")
            ran = sweeperd(
                "audit", "--redis-url", redis_server.url, "--grace", str(GRACE_S), "--json"
            )
        assert (ran.code, ran.json()["findings"]) == (0, 0), ran.out
