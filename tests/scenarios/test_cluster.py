"""sweeperd on a real Redis Cluster (3 primaries, 3 replicas, the module on every node): routing
by slot, failovers seen as epoch changes, a slot migrated, a hung primary, discovery, once."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import redis

from sweeperd.commands.inspect import census_on
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason
from sweeperd.server.connection import Connection, Topology
from sweeperd.verb.executors import NATIVE
from sweeperd.verb.replies import Call, SweepReply
from sweeperd.verb.rounds import sweep_round
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import FUTURE_OFFSET_MS, PAST_MS, lease, now_ms, tracked_keys
from tests.support.invoke import sweeperd
from tests.support.servers import RedisServer
from tests.support.topologies import Cluster, write_leases

EXECUTORS = ["native", "script"]
FAST = ("--interval", "0.3", "--jitter", "0", "--max-stalled", "1000", "--socket-timeout", "1")
AFTER_MOVE_MS = 600_000  # leases due after the move: brought forward on the slot's new owner
BULK = 20_000  # keys that only lengthen a slot's migration, so that sweeps overlap it
MINUTE = ("--interval", "60")  # after FAST's: the interval explains no recovery in a test
DEADLINE_IN_MS = 8_000  # leases made due once swept: the primary changes before this
WOKEN_WITHIN_S = 45.0  # back sooner than this after the start: a wake, not the interval
HOUR_MS = 3_600_000  # leases due this far on: only the test's ZADD makes them due


def spread(cluster: Cluster, per_primary: int) -> dict[int, list[str]]:
    """Queue names, `per_primary` on each primary, by the primary's port."""
    found: dict[int, list[str]] = {s.port: [] for s in cluster.primaries()}
    slots = cluster.slots()
    n = 0
    while any(len(names) < per_primary for names in found.values()):
        queue = f"q{n}"
        n += 1
        slot = redis.crc.key_slot(QueueKeys(queue).active.encode())
        port = next(p for first, last, p in slots if first <= slot <= last)
        if len(found[port]) < per_primary:
            found[port].append(queue)
    return found


def seed(
    cluster: Cluster,
    queue: str,
    count: int,
    deadline_ms: int,
    epoch: bytes | None = None,
    owner: RedisServer | None = None,
) -> list[bytes]:
    """`count` leases with rows on the queue's primary, replicated before it returns."""
    keys = QueueKeys(queue)
    ids = [f"{queue}-job-{n}".encode() for n in range(count)]
    with (owner or cluster.owner(keys.active)).client() as c:
        write_leases(c, keys, ids, deadline_ms, epoch)
    return ids


def due_soon(owner: RedisServer, queue: str, ids: list[bytes]) -> int:
    """The queue's leases made due DEADLINE_IN_MS from now on `owner`'s clock, once the daemon
    has swept it (a deadline set before the daemon started was spent by a loaded machine's start
    in some runs, and the old primary then recovered the leases before the change); the
    deadline (ms)."""
    with owner.client() as c:
        seconds, micros = c.time()
        deadline = seconds * 1000 + micros // 1000 + DEADLINE_IN_MS
        c.zadd(QueueKeys(queue).active, dict.fromkeys(ids, deadline), xx=True)
    return int(deadline)


def changed_in_time(due_ms: int, change: str) -> None:
    """The change of primary ended before the leases fell due, which the test is about."""
    assert now_ms() < due_ms, f"{change} ended {now_ms() - due_ms} ms after the deadline"


def expire(cluster: Cluster, queue: str) -> None:
    """Every lease of the queue due now (on whichever primary holds it now)."""
    keys = QueueKeys(queue)
    with cluster.owner(keys.active).client() as c:
        jobs = c.zrange(keys.active, 0, -1)
        if jobs:
            c.zadd(keys.active, dict.fromkeys(jobs, PAST_MS), xx=True)


def keyspace(cluster: Cluster, queue: str) -> dict[str, object]:
    """The queue's sets and rows as its primary holds them now."""
    keys = QueueKeys(queue)
    with cluster.owner(keys.active).client() as c:
        pending = sorted(c.zrange(keys.pending, 0, -1))
        return {
            "active": c.zcard(keys.active),
            "pending": pending,
            "dead": c.zcard(keys.dead),
            "rows": {job: c.hgetall(keys.job(job)) for job in pending},
        }


def daemon(tmp_path: Path, cluster: Cluster, *args: str) -> DaemonProcess:
    return DaemonProcess(
        tmp_path, "--cluster", "--redis-url", cluster.seed_url(cluster.live()[0]), *FAST, *args
    )


def restarts(d: DaemonProcess, node: str) -> float:
    return d.value("sweeperd_server_restarts_total", node=node) or 0.0


class TestRouting:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_every_primary_sweeps_its_own_queues(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """Queues on all three primaries are each swept on their primary, counters exact."""
        by_primary = spread(fresh, 3)
        queues = [q for names in by_primary.values() for q in names]
        for n, queue in enumerate(queues):
            seed(fresh, queue, n + 1, PAST_MS)
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", ",".join(queues)) as d:
            for n, queue in enumerate(queues):
                d.wait_value("sweeperd_recovered_total", n + 1, queue=queue)
            for port in by_primary:
                assert d.value("sweeperd_redis_up", node=f"127.0.0.1:{port}") == 1
                assert (
                    d.value("sweeperd_server_info", node=f"127.0.0.1:{port}", executor=executor)
                    == 1
                )
            wait_until(lambda: d.get("/readyz")[0] == 200, what="ready")
            for queue in queues:
                assert d.value("sweeperd_dead_total", queue=queue) == 0
                assert d.value("sweeperd_exempt_total", queue=queue) == 0
                assert d.value("sweeperd_sweep_failures_total", queue=queue) is None
            assert d.stop() == 0
        for n, queue in enumerate(queues):
            seen = keyspace(fresh, queue)
            assert (seen["active"], len(seen["pending"]), seen["dead"]) == (0, n + 1, 0)  # type: ignore[arg-type]
            assert all(row[b"stalled"] == b"1" for row in seen["rows"].values())  # type: ignore[attr-defined]


class TestFailover:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_cluster_failover_exempts_the_old_primarys_leases(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """CLUSTER FAILOVER on a replica: its slots' leases come back exempt, the restart is
        counted on the new primary only, the other primaries' leases are counted as ever."""
        by_primary = spread(fresh, 2)
        queues = [q for names in by_primary.values() for q in names]
        failing = fresh.owner(QueueKeys(queues[0]).active)
        old_run_id = fresh.run_id(failing)
        granted = {}
        for queue in queues:
            owner = fresh.owner(QueueKeys(queue).active)
            granted[queue] = seed(fresh, queue, 5, now_ms() + FUTURE_OFFSET_MS, fresh.run_id(owner))
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", ",".join(queues)) as d:
            for queue in queues:
                d.wait_swept(queue)
            replica = fresh.replica_of(failing)
            fresh.failover(replica)
            d.wait_value("sweeperd_server_restarts_total", 1, node=replica.node)
            for queue in queues:
                expire(fresh, queue)
            for queue in queues:
                d.wait_value("sweeperd_recovered_total", 5, queue=queue)
            moved = set(by_primary[failing.port])
            for queue in queues:
                assert d.value("sweeperd_exempt_total", queue=queue) == (5 if queue in moved else 0)
            for server in fresh.primaries():
                if server is not replica:
                    assert restarts(d, server.node) == 0
            [event] = d.events("server_restarted")
            assert d.stop() == 0
        assert (event["reason"], event["node"], event["previous_node"]) == (
            "failover",
            replica.node,
            failing.node,
        )
        assert event["old_run_id"] == old_run_id.decode()
        assert event["new_run_id"] == fresh.run_id(replica).decode()
        for queue in queues:
            seen = keyspace(fresh, queue)
            assert seen["pending"] == sorted(granted[queue]) and seen["active"] == seen["dead"] == 0
            for row in seen["rows"].values():  # type: ignore[attr-defined]
                assert row.get(b"stalled") == (None if queue in moved else b"1")
                assert row[b"state"] == b"pending" and row[b"attempts"] == b"1"

    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_kill_9_of_a_primary(self, fresh: Cluster, tmp_path: Path, executor: str) -> None:
        """kill -9 of a primary: its replica takes over and sweeps its queues within seconds,
        every lease the dead primary granted back in pending exactly once, exempt. The leases
        are due an hour on (the dead primary never sweeps them, however late the kill comes)
        and fall due on its replica once it has taken over."""
        by_primary = spread(fresh, 2)
        queues = [q for names in by_primary.values() for q in names]
        victim = fresh.owner(QueueKeys(queues[0]).active)
        replica = fresh.replica_of(victim)
        victims = by_primary[victim.port]
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", ",".join(queues)) as d:
            for queue in queues:
                d.wait_swept(queue)
            epoch = fresh.run_id(victim)
            granted = {q: seed(fresh, q, 6, now_ms() + HOUR_MS, epoch) for q in victims}
            with replica.client() as c:  # WAIT gives up after 2 s on a loaded machine
                c.execute_command("READONLY")  # a replica's reads, not a MOVED
                wait_until(
                    lambda: all(c.zcard(QueueKeys(q).active) == 6 for q in victims),
                    what="leases replicated",
                )
            killed_at = time.time()
            fresh.kill(victim)
            wait_until(
                lambda: all(fresh.owner(QueueKeys(q).active) is replica for q in victims),
                what="the replica to take over",
            )
            for queue in victims:
                expire(fresh, queue)
            for queue in victims:
                d.wait_value("sweeperd_recovered_total", 6, queue=queue)
            first = min(
                datetime.fromisoformat(str(e["timestamp"])).timestamp()
                for e in d.events("sweep")
                if e["queue"] in victims
            )
            print(
                f"\nkill -9 to the first sweep on the new primary ({executor}): "
                f"{first - killed_at:.2f} s"
            )
            d.wait_value("sweeperd_server_restarts_total", 1, node=replica.node)
            for queue in victims:
                assert d.value("sweeperd_exempt_total", queue=queue) == 6
                assert d.value("sweeperd_dead_total", queue=queue) == 0
            assert d.events("server_restarted")[0]["reason"] == "failover"
            assert d.stop() == 0
        fresh.revive(victim)
        for queue in victims:
            seen = keyspace(fresh, queue)
            assert seen["pending"] == sorted(granted[queue])
            assert seen["active"] == seen["dead"] == 0
            assert all(b"stalled" not in row for row in seen["rows"].values())  # type: ignore[attr-defined]

    def test_a_hung_primary_holds_only_its_own_queues(self, fresh: Cluster, tmp_path: Path) -> None:
        """SIGSTOP of one primary: the other primaries' queues go on being swept meanwhile."""
        by_primary = spread(fresh, 2)
        queues = [q for names in by_primary.values() for q in names]
        hung = fresh.owner(QueueKeys(queues[0]).active)
        others = [q for port, names in by_primary.items() if port != hung.port for q in names]
        owners = {q: fresh.owner(QueueKeys(q).active) for q in others}
        with daemon(tmp_path, fresh, "--queue", ",".join(queues)) as d:
            for queue in queues:
                d.wait_swept(queue)
            with fresh.hung(hung):
                time.sleep(0.5)  # the hung primary's calls are in flight now
                for queue in others:
                    seed(fresh, queue, 3, PAST_MS, owner=owners[queue])
                for queue in others:
                    d.wait_value("sweeperd_recovered_total", 3, queue=queue)
            assert d.stop() == 0


class TestMigration:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_a_slot_migrated_under_the_daemon(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """A queue's slot moved to another primary: swept there next, no failure and no
        restart counted, and the old primary's leases come back exempt by the epoch rule."""
        by_primary = spread(fresh, 1)
        [source_port, target_port, *_] = by_primary
        [queue] = by_primary[source_port]
        source = next(s for s in fresh.servers if s.port == source_port)
        target = next(s for s in fresh.servers if s.port == target_port)
        granted = seed(fresh, queue, 4, now_ms() + FUTURE_OFFSET_MS, fresh.run_id(source))
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", queue) as d:
            d.wait_swept(queue)
            fresh.migrate(redis.crc.key_slot(QueueKeys(queue).active.encode()), source, target)
            expire(fresh, queue)
            d.wait_value("sweeperd_recovered_total", 4, queue=queue)
            assert d.value("sweeperd_exempt_total", queue=queue) == 4
            assert d.value("sweeperd_sweep_failures_total", queue=queue) is None
            for server in fresh.primaries():
                assert restarts(d, server.node) == 0
            assert d.stop() == 0
        assert fresh.owner(QueueKeys(queue).active) is target
        seen = keyspace(fresh, queue)
        assert seen["pending"] == sorted(granted) and seen["active"] == 0


class TestAtTheDeadline:
    """Leases due within seconds on queues swept every minute, across a change of primary."""

    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_a_failover_brings_leases_back_at_their_deadline(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """CLUSTER FAILOVER before the leases fall due: the new primary wakes for them at their
        deadline (not a minute later), and they come back exempt."""
        [queue, *_] = spread(fresh, 1)[fresh.primaries()[0].port]
        primary = fresh.owner(QueueKeys(queue).active)
        ids = seed(fresh, queue, 3, now_ms() + HOUR_MS, fresh.run_id(primary))
        started = time.monotonic()
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", queue, *MINUTE) as d:
            d.wait_swept(queue)
            due_ms = due_soon(primary, queue, ids)
            replica = fresh.replica_of(primary)
            fresh.failover(replica)
            changed_in_time(due_ms, "the failover")
            d.wait_value("sweeperd_exempt_total", 3, queue=queue)
            assert now_ms() >= due_ms and time.monotonic() - started < WOKEN_WITHIN_S
            assert restarts(d, replica.node) == 1
            assert d.stop() == 0

    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_a_migrated_slot_brings_leases_back_at_their_deadline(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """A queue's slot migrated before its leases fall due: its target wakes for them at
        their deadline, exempt; the source's wake for it sweeps nothing, and nothing fails."""
        by_primary = spread(fresh, 1)
        [source_port, target_port, *_] = by_primary
        [queue] = by_primary[source_port]
        source = next(s for s in fresh.servers if s.port == source_port)
        target = next(s for s in fresh.servers if s.port == target_port)
        ids = seed(fresh, queue, 3, now_ms() + HOUR_MS, fresh.run_id(source))
        started = time.monotonic()
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", queue, *MINUTE) as d:
            d.wait_swept(queue)
            due_ms = due_soon(source, queue, ids)
            fresh.migrate(redis.crc.key_slot(QueueKeys(queue).active.encode()), source, target)
            changed_in_time(due_ms, "the migration")
            d.wait_value("sweeperd_exempt_total", 3, queue=queue)
            assert now_ms() >= due_ms and time.monotonic() - started < WOKEN_WITHIN_S
            assert d.value("sweeperd_sweep_failures_total", queue=queue) is None
            assert d.stop() == 0
        assert (
            keyspace(fresh, queue)["active"] == 0 and fresh.owner(QueueKeys(queue).active) is target
        )


MOVE_EVENTS = frozenset(  # what a daemon says of a slot that moved, or of a node that failed
    {"sweep_held", "sweep_resumed", "topology_changed", "topology_unreachable", "sweep_failed",
     "redis_down", "redis_up", "server_restarted", "drain_stopped", "sweep_overrun"}
)  # fmt: skip


@contextlib.contextmanager
def said_on_timeout(
    d: DaemonProcess, trip: int, source: RedisServer, target: RedisServer, queue: str
) -> Iterator[None]:
    """A wait that times out says what the daemon logged of the move, where each node says
    the slot is and what each holds of the queue (leases still due, or all back in pending and
    a count short), and the failures and ghosts counted: the one failure of this test in a
    full run (1 in 2,234) said only the count when its wait began, 599 of 800."""
    try:
        yield
    except AssertionError as exc:
        keys = QueueKeys(queue)
        slot = redis.crc.key_slot(keys.active.encode())
        lines = [line for line in d.log_text().splitlines() if any(
            f'"event": "{event}"' in line for event in MOVE_EVENTS)]  # fmt: skip
        failures = d.value("sweeperd_sweep_failures_total", queue=queue)
        views = [f"failures: {failures}, ghosts: {d.total('sweeperd_ghosts_removed_total')}"]
        for server in [source, target]:
            with server.client() as c:
                owners = [nodes[0][1] for first, last, *nodes in c.execute_command(
                    "CLUSTER", "SLOTS") if first <= slot <= last]  # fmt: skip
                held = {"keys": c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)}
                with contextlib.suppress(redis.ResponseError):  # MOVED: not its slot
                    held.update(active=c.zcard(keys.active), pending=c.zcard(keys.pending))
            views.append(f"{server.port} says slot {slot} is on {owners}; it holds {held}")
        said = "\n".join([f"trip {trip}: {source.port} to {target.port}", *views, *lines[-40:]])
        raise AssertionError(f"{exc}\n{said}") from None


def heard(d: DaemonProcess, server: RedisServer) -> None:
    """Wait until the daemon hears `server`'s queues change (1 in sweeperd_deadline_source)
    and the server tracks a key for it."""
    d.wait_value("sweeperd_deadline_source", 1, node=server.node)
    with server.client() as c:
        wait_until(lambda: tracked_keys(c) >= 1, what="tracked")


def take_now(owner: RedisServer, queue: str, job: bytes, in_ms: int) -> int:
    """A lease taken now on `owner`, due `in_ms` later on its clock; its deadline (ms)."""
    keys = QueueKeys(queue)
    with owner.client() as c:
        seconds, micros = c.time()
        deadline = seconds * 1000 + micros // 1000 + in_ms
        write_leases(c, keys, [job], deadline, None)
    return int(deadline)


class TestHeard:
    """Leases taken after the queue's last sweep, due long before its next (a minute), heard of
    on a primary that changed: a failover, a slot migration."""

    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_a_lease_taken_after_a_failover_is_back_at_its_deadline(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """The queue's primary fails over; once its replica is heard, a lease taken there half a
        second from its deadline comes back at it, not a minute later."""
        [queue, *_] = spread(fresh, 1)[fresh.primaries()[0].port]
        primary = fresh.owner(QueueKeys(queue).active)
        started = time.monotonic()
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", queue, *MINUTE) as d:
            d.wait_swept(queue)
            heard(d, primary)
            replica = fresh.replica_of(primary)
            fresh.failover(replica)
            heard(d, replica)
            due_ms = take_now(replica, queue, b"late", 500)
            d.wait_value("sweeperd_recovered_total", 1, queue=queue)
            assert now_ms() >= due_ms and time.monotonic() - started < WOKEN_WITHIN_S
            assert d.stop() == 0
        assert keyspace(fresh, queue)["pending"] == [b"late"]

    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_a_lease_taken_after_a_slot_migration_is_back_at_its_deadline(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """The queue's slot moves to another primary; once its first sweep there tracks it, a
        lease taken on the target half a second from its deadline comes back at it."""
        by_primary = spread(fresh, 1)
        [source_port, target_port, *_] = by_primary
        [queue] = by_primary[source_port]
        source = next(s for s in fresh.servers if s.port == source_port)
        target = next(s for s in fresh.servers if s.port == target_port)
        started = time.monotonic()
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", queue, *MINUTE) as d:
            d.wait_swept(queue)
            heard(d, source)
            fresh.migrate(redis.crc.key_slot(QueueKeys(queue).active.encode()), source, target)
            swept = d.value("sweeperd_sweeps_total", node=target.node) or 0
            wait_until(
                lambda: (d.value("sweeperd_sweeps_total", node=target.node) or 0) > swept,
                what="the queue swept on its new primary",
            )
            heard(d, target)
            due_ms = take_now(target, queue, b"late", 500)
            d.wait_value("sweeperd_recovered_total", 1, queue=queue)
            assert now_ms() >= due_ms and time.monotonic() - started < WOKEN_WITHIN_S
            assert d.stop() == 0
        assert keyspace(fresh, queue)["pending"] == [b"late"]


def lease_over(
    owner: RedisServer, keys: QueueKeys, ids: list[bytes], first_ms: int, span_ms: int, epoch: bytes
) -> None:
    """Leases granted under `epoch` (stalled 0), falling due one after another over `span_ms`
    from `first_ms`, and keys of the slot that only make its snapshot longer; replicated before
    it returns."""
    with owner.client() as c:
        pipe = c.pipeline(transaction=False)
        leases_over(pipe, keys, ids, first_ms, span_ms, epoch)
        for n in range(BULK):
            pipe.set(f"{keys.prefix}bulk:{n}", "x" * 100)
        pipe.execute()
        c.execute_command("WAIT", 1, 2000)


def leases_over(
    pipe: redis.Redis, keys: QueueKeys, ids: list[bytes], first_ms: int, span_ms: int, epoch: bytes
) -> None:
    """lease_over's leases, written into `pipe` each row before its lease (see helpers.lease).
    The other way round, as they were, a sweep the server ran between a lease and its row
    removed the lease as a ghost (never recovered: the count never reached the leases seeded),
    the likely cause of the migration test's one failure in a full run: on a loaded machine
    the first leases were due before the pipeline was sent (`first_ms` is read before it is
    built), and the server reads a pipeline in chunks, running other clients' calls between."""
    row = {"attempts": "1", "state": "active", "lease_epoch": epoch, "stalled": "0"}
    for n, job in enumerate(ids):
        lease(pipe, keys, job, first_ms + span_ms * n // len(ids), **row)


@pytest.mark.only_on(
    "valkey",
    reason="CLUSTER MIGRATESLOTS (atomic slot migration) is Valkey 9's; Redis 7.0 has none",
)
class TestAtomicSlotMigration:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_a_slot_moved_there_and_back_under_the_daemon(
        self, fresh: Cluster, tmp_path: Path, executor: str
    ) -> None:
        """CLUSTER MIGRATESLOTS of a queue's slot from A to B, then back, while `run --cluster`
        sweeps leases falling due throughout: every seeded id ends in pending alone, on the
        slot's owner, with stalled counted at most once; the leases granted on the source and
        due after the move come back exempt on the target; no failure, no restart counted, no
        hold left."""
        by_primary = spread(fresh, 1)
        [a_port, b_port, *_] = by_primary
        [queue] = by_primary[a_port]
        keys = QueueKeys(queue)
        slot = redis.crc.key_slot(keys.active.encode())
        a, b = (next(s for s in fresh.servers if s.port == port) for port in (a_port, b_port))
        seeded: list[bytes] = []
        after_moves: list[bytes] = []
        with daemon(tmp_path, fresh, "--executor", executor, "--queue", queue) as d:
            for trip, (source, target) in enumerate([(a, b), (b, a)]):
                during = [f"{queue}-{trip}-during-{n}".encode() for n in range(600)]
                after = [f"{queue}-{trip}-after-{n}".encode() for n in range(200)]
                start = now_ms()
                epoch = fresh.run_id(source)
                lease_over(source, keys, during, start, 1500, epoch)
                lease_over(source, keys, after, start + AFTER_MOVE_MS, 200, epoch)
                fresh.migrate_atomically(slot, source, target)
                with source.client() as c:
                    assert c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
                with target.client() as c:  # moved unswept, now due on the target
                    assert (
                        c.zadd(keys.active, dict.fromkeys(after, now_ms()), xx=True, ch=True) == 200
                    )
                seeded += during + after
                after_moves += after
                with said_on_timeout(d, trip, source, target, queue):
                    d.wait_value("sweeperd_recovered_total", len(seeded), queue=queue)
            d.wait_value("sweeperd_held_queues", 0)  # no hold left once it was swept again
            exempt = d.value("sweeperd_exempt_total", queue=queue)
            assert d.value("sweeperd_dead_total", queue=queue) == 0
            assert d.value("sweeperd_sweep_failures_total", queue=queue) is None
            for server in fresh.primaries():
                assert restarts(d, server.node) == 0
            assert d.stop() == 0
        assert fresh.owner(keys.active) is a
        seen = keyspace(fresh, queue)
        assert (seen["active"], seen["pending"], seen["dead"]) == (0, sorted(seeded), 0)
        rows: dict[bytes, dict[bytes, bytes]] = seen["rows"]  # type: ignore[assignment]
        assert {row[b"state"] for row in rows.values()} == {b"pending"}
        stalled = {job: row[b"stalled"] for job, row in rows.items()}
        assert set(stalled.values()) <= {b"0", b"1"}  # counted once at the most
        assert all(stalled[job] == b"0" for job in after_moves)  # exempt on the target
        assert exempt == sum(value == b"0" for value in stalled.values())


class TestLeaseWriters:
    def test_a_sweep_between_any_two_writes_of_the_leases_removes_no_ghost(
        self, fresh: Cluster
    ) -> None:
        """The atomic migration's leases, due when written (as they were on a loaded machine)
        and swept between every two of their writes, the worst moment for each: every lease
        is recovered, none removed as a ghost (an id in active with no row yet)."""
        [queue, *_] = spread(fresh, 1)[fresh.primaries()[0].port]
        keys = QueueKeys(queue)
        owner = fresh.owner(keys.active)
        ids = [f"{queue}-during-{n}".encode() for n in range(3)]
        ghosts: list[bytes] = []
        with owner.client() as c:
            writes = c.pipeline(transaction=False)
            leases_over(writes, keys, ids, PAST_MS, 3, fresh.run_id(owner))
            for args, _options in writes.command_stack:
                c.execute_command(*args)
                [swept] = sweep_round(c, NATIVE, [Call(keys, 1000, 1000)])
                assert isinstance(swept.reply, SweepReply), swept.reply
                ghosts += swept.reply.ghost_ids
        assert ghosts == []
        assert keyspace(fresh, queue)["pending"] == sorted(ids)


class TestProbes:
    def test_a_probe_sent_to_the_wrong_primary_is_moved(self, fresh: Cluster) -> None:
        """A round on one primary holding an idle call for a queue another primary serves (the
        map read before a reshard): the probe's MOVED sends it as its script, whose MOVED is
        the call's redirect; the round's own queue is swept, nothing of the other written."""
        by_primary = spread(fresh, 1)
        [here_port, there_port, *_] = by_primary
        [here], [there] = by_primary[here_port], by_primary[there_port]
        seed(fresh, here, 1, PAST_MS)
        seed(fresh, there, 1, now_ms() + FUTURE_OFFSET_MS)
        before = keyspace(fresh, there)
        here_node = next(s for s in fresh.servers if s.port == here_port)
        with here_node.client() as c:
            NATIVE.prepare(c)
            swept, moved = sweep_round(
                c,
                NATIVE,
                [Call(QueueKeys(here), 5, 100), Call(QueueKeys(there), 5, 100, brief=True)],
            )
        assert isinstance(swept.reply, SweepReply) and len(swept.reply.recovered) == 1
        assert moved.redirect is Reason.MOVED
        assert keyspace(fresh, there) == before


class TestDiscovery:
    def test_queues_found_on_every_primary(self, fresh: Cluster, tmp_path: Path) -> None:
        """--discover scans every primary: queues on all three are found and swept."""
        queues = [q for names in spread(fresh, 2).values() for q in names]
        for queue in queues:
            seed(fresh, queue, 2, PAST_MS)
        with daemon(tmp_path, fresh, "--discover", "0.5") as d:
            for queue in queues:
                d.wait_value("sweeperd_recovered_total", 2, queue=queue)
            assert d.stop(signal.SIGINT) == 0


class TestOnce:
    def test_once_and_inspect_go_to_the_queues_primary(self, fresh: Cluster) -> None:
        """once --cluster and inspect --cluster, given a node that does not hold the queue,
        read and sweep it on the primary that does."""
        by_primary = spread(fresh, 1)
        [holder_port, other_port, *_] = by_primary
        [queue] = by_primary[holder_port]
        ids = seed(fresh, queue, 3, PAST_MS)
        seed_url = f"redis://127.0.0.1:{other_port}/0"
        args = ["--cluster", "--redis-url", seed_url, "--queue", queue, "--json"]
        seen = sweeperd("inspect", *args)
        assert (seen.code, seen.json()["expired"]) == (0, 3), seen.err
        done = sweeperd("once", *args, "--max-stalled", "5")
        assert done.code == 0, done.err
        assert sorted(done.json()["recovered"]) == sorted(i.decode() for i in ids)
        assert keyspace(fresh, queue)["active"] == 0

    def test_inspect_reads_a_slot_where_its_move_points(self, fresh: Cluster) -> None:
        """A read sent to a primary the slot has left (MOVED: a failover or a reshard since the
        map was read) is read where the MOVED points, once: the counts, not the library's
        MOVED text."""
        by_primary = spread(fresh, 1)
        [holder_port, other_port, *_] = by_primary
        [queue] = by_primary[holder_port]
        seed(fresh, queue, 3, PAST_MS)
        connection = Connection.checked(
            f"redis://127.0.0.1:{other_port}/0", None, 2.0, topology=Topology(cluster=True)
        )
        with connection.client(("127.0.0.1", other_port)) as elsewhere:
            seen = census_on(connection, elsewhere, QueueKeys(queue))
        assert (seen.active, seen.expired, seen.pending) == (3, 3, 0)

    def test_top_reads_every_primary(self, fresh: Cluster) -> None:
        """top --cluster, given one node, shows a server row per primary and each queue's
        backlog read on the primary that owns its slot; discovery finds them all."""
        by_primary = spread(fresh, 1)
        for n, queues in enumerate(by_primary.values()):
            seed(fresh, queues[0], n + 1, PAST_MS)
        any_node = f"redis://127.0.0.1:{next(iter(by_primary))}/0"
        shown = sweeperd("top", "--cluster", "--redis-url", any_node, "--json", "--interval", "0.1")
        assert shown.code == 0, shown.err
        body = shown.json()
        assert {s["node"] for s in body["servers"]} == {f"127.0.0.1:{p}" for p in by_primary}
        rows = {row["queue"]: (row["node"], row["expired"]) for row in body["rows"]}
        assert rows == {
            queues[0]: (f"127.0.0.1:{port}", n + 1)
            for n, (port, queues) in enumerate(by_primary.items())
        }
