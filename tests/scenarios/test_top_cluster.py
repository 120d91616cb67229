"""`sweeperd top` on a real Cluster in an incident: a dead primary, the cluster down, a slot
migrating; the last known rows stay, said to be so, and the layout is found again."""

from __future__ import annotations

import redis
from redis.crc import key_slot

from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import Connection, Topology
from sweeperd.top.refresh import Screen, Top
from sweeperd.top.screen import plain_text
from tests.support.clock import Clock
from tests.support.helpers import PAST_MS
from tests.support.servers import RedisServer
from tests.support.top_rows import rows_of
from tests.support.topologies import Cluster, wait_for, write_leases


def queues_on(cluster: Cluster, primary: RedisServer, count: int = 1) -> list[str]:
    """`count` queue names whose slots `primary` serves now."""
    ranges = [(first, last) for first, last, port in cluster.slots() if port == primary.port]
    found: list[str] = []
    n = 0
    while len(found) < count:
        slot = key_slot(QueueKeys(f"q{n}").active.encode())
        if any(first <= slot <= last for first, last in ranges):
            found.append(f"q{n}")
        n += 1
    return found


def seed(primary: RedisServer, queue: str, expired: int) -> None:
    """`expired` expired leases and 2 pending jobs, replicated before it returns."""
    keys = QueueKeys(queue)
    with primary.client() as c:
        c.zadd(keys.pending, {"p0": 0, "p1": 0})
        write_leases(c, keys, [f"j{n}".encode() for n in range(expired)], PAST_MS, None)


def viewer(seed_node: RedisServer) -> Top:
    connection = Connection.checked(seed_node.url, None, 2.0, topology=Topology(cluster=True))
    return Top(connection, "emq", (), 10, Clock(1_000_000.0))


def servers_of(screen: Screen) -> dict[str, tuple[str | None, bool]]:
    """Each server line's error and whether it left the slot map, by node."""
    return {s.node: (s.error, s.replaced) for s in screen.servers}


def listed_everywhere(cluster: Cluster, server: RedisServer) -> bool:
    """Every live node's CLUSTER SLOTS lists `server` (a revived node is no longer FAIL)."""
    for node in cluster.live():
        with node.client() as c:
            slots = c.execute_command("CLUSTER", "SLOTS")
        if server.port not in {int(n[1]) for entry in slots for n in entry[2:]}:
            return False
    return True


def cluster_down(server: RedisServer) -> bool:
    with server.client() as c:
        try:
            c.zcard("emq:{any}:active")
        except redis.exceptions.ClusterDownError:
            return True
    return False


class TestTopDeadPrimary:
    """A primary killed: its line and its rows stay through the cluster's outage and after."""

    def test_dead_primary_cluster_down_and_failover(self, fresh: Cluster) -> None:
        """With its replica held, a killed primary is UNREACHABLE by name while the others say
        the cluster is down once each, and every row keeps its last numbers, marked stale; once
        the replica takes over, the rows are read there and the dead node's line stays until it
        is back as a replica."""
        victim, *others = fresh.primaries()
        queues = {p.port: queues_on(fresh, p)[0] for p in (victim, *others)}
        for n, (port, queue) in enumerate(queues.items()):
            seed(next(p for p in fresh.servers if p.port == port), queue, n + 1)
        expected = {q: ("ok", n + 1, n + 1, 2, 0, 0) for n, q in enumerate(queues.values())}
        replica = fresh.replica_of(victim)
        view = viewer(others[0])
        try:
            assert rows_of(view.refresh()) == expected
            fresh.pause(replica)
            try:
                fresh.kill(victim)
                wait_for(lambda: cluster_down(others[0]) and cluster_down(others[1]), "CLUSTERDOWN")
                screen = view.refresh()
            finally:
                fresh.resume(replica)
            servers = servers_of(screen)
            error, _ = servers[victim.node]
            assert error is not None and "refused" in error.lower(), servers
            for other in others:
                assert servers[other.node] == ("CLUSTERDOWN The cluster is down", False)
            assert rows_of(screen) == {q: ("stale", *row[1:]) for q, row in expected.items()}
            assert all(row.error is None for row in screen.rows)  # said once, on the node's line
            text = plain_text(screen, 1.0, 100)
            assert f"{victim.node}  UNREACHABLE: " in text
            assert text.count("CLUSTERDOWN The cluster is down") == 2, text

            wait_for(lambda: fresh.role(replica) == "master", "the replica to take over")
            fresh.settle()
            screen = view.refresh()
            assert rows_of(screen) == expected
            assert {row.queue: row.node for row in screen.rows}[queues[victim.port]] == replica.node
            servers = servers_of(screen)
            error, replaced = servers[victim.node]
            assert error is not None and replaced, servers
            assert servers[replica.node] == (None, False)
            assert f"{victim.node}  UNREACHABLE (replaced): " in plain_text(screen, 1.0, 100)

            fresh.revive(victim)
            wait_for(lambda: listed_everywhere(fresh, victim), "the revived node to be listed")
            assert victim.node not in servers_of(view.refresh())
        finally:
            if victim not in fresh.live():  # the module's cluster is shared: whole again
                fresh.revive(victim)
            view.close()


class TestTopMigration:
    """A slot moved while top reads it (CLUSTER SETSLOT, keys moved by MIGRATE in batches)."""

    def test_migrating_then_moved(self, fresh: Cluster) -> None:
        """Mid-migration the queue's row keeps its last numbers, marked migrating (the source
        still read, not failed); after the move the source's MOVED is said, then the layout is
        read again and the row is read on the target."""
        source, target, _ = fresh.primaries()
        moving, staying = queues_on(fresh, source, 2)
        seed(source, moving, 5)
        seed(source, staying, 3)
        keys = QueueKeys(moving)
        slot = key_slot(keys.active.encode())
        assert slot != key_slot(QueueKeys(staying).active.encode())
        view = viewer(source)
        before = rows_of(view.refresh())
        assert before[moving] == ("ok", 5, 5, 2, 0, 0)
        with source.client() as s, target.client() as t:
            source_id = s.execute_command("CLUSTER", "MYID").decode()
            target_id = t.execute_command("CLUSTER", "MYID").decode()
            t.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            s.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", keys.active)
            screen = view.refresh()
            assert rows_of(screen) == {**before, moving: ("migrating", *before[moving][1:])}
            row = next(r for r in screen.rows if r.queue == moving)
            assert row.error is not None and target.node in row.error, row.error
            assert servers_of(screen)[source.node] == (None, False)
            assert f"»{moving}" in plain_text(screen, 1.0, 100)

            rest = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
            s.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *rest)
            for server in fresh.primaries():
                with server.client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        fresh.settle()
        screen = view.refresh()
        assert rows_of(screen) == {**before, moving: ("moved", *before[moving][1:])}
        screen = view.refresh()
        assert rows_of(screen) == before
        assert {row.queue: row.node for row in screen.rows}[moving] == target.node
        view.close()
