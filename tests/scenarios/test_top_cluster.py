"""`sweeperd top` on a real Cluster in an incident: a dead or hung primary, the cluster down, a
failover, a slot migrating; the view degrades and never aborts: each server's line says what
failed, the queues stay as rows marked with why they are not read (or read on a replica)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import redis
from redis.crc import key_slot

from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import Connection, Topology
from sweeperd.top.refresh import Screen, Top
from sweeperd.top.screen import NEVER_NOTE, REPLICA_NOTE, plain_text
from tests.support.clock import Clock
from tests.support.helpers import PAST_MS
from tests.support.invoke import Ran, sweeperd
from tests.support.pty_view import LiveView, restored
from tests.support.servers import RedisServer
from tests.support.top_rows import rows_of
from tests.support.topologies import SETTLE_S, Cluster, wait_for, write_leases

WIDE = {"COLUMNS": "300"}  # no line of the view wraps
SEEDED = (3, 4)  # expired leases of each primary's two queues
HUNG_TIMEOUT_S = "2"  # --socket-timeout while a primary hangs: long enough for the others


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


def seed_every_primary(cluster: Cluster) -> dict[str, tuple[str, int]]:
    """Two queues on each primary, SEEDED expired leases each: queue -> (its primary, expired)."""
    seeded = {}
    for primary in cluster.primaries():
        for queue, expired in zip(queues_on(cluster, primary, 2), SEEDED, strict=True):
            seed(primary, queue, expired)
            seeded[queue] = (primary.node, expired)
    return seeded


def top_once(seed_node: RedisServer, *args: str, env: dict[str, str] | None = None) -> Ran:
    """`sweeperd top --once --cluster` given one node, two reads 0.1 s apart."""
    return sweeperd(
        "top",
        "--once",
        "--cluster",
        "--redis-url",
        seed_node.url,
        "--interval",
        "0.1",
        *args,
        env=env,
    )


def read_on_replica(
    ran: Ran, seeded: dict[str, tuple[str, int]], victim: RedisServer, replica: RedisServer
) -> dict[str, dict[str, Any]]:
    """`top --once --json` with `victim` unreadable: exit 0, its line unread, `replica` read in
    its place, its queues read there, marked, the others' on their primaries; the servers."""
    assert (ran.code, ran.err) == (0, "")
    view = ran.json()
    servers = {s["node"]: s for s in view["servers"]}
    assert servers.keys() == {*(node for node, _ in seeded.values()), replica.node}
    dead, standin = servers[victim.node], servers[replica.node]
    assert (dead["run_id"], dead["reads_for"]) == ("", None)
    assert (standin["role"], standin["error"], standin["reads_for"]) == ("slave", None, victim.node)
    rows = {row["queue"]: (row["node"], row["state"], row["expired"]) for row in view["rows"]}
    assert rows == {
        queue: (replica.node, "replica", n) if node == victim.node else (node, "ok", n)
        for queue, (node, n) in seeded.items()
    }
    assert (view["queues"], view["read"]) == (6, 6)
    return servers


def line_of(text: str, node: str) -> str:
    """The server line of `node` in the view's text."""
    [line] = [line for line in text.splitlines() if line.split()[1:2] == [node]]
    return line


@contextlib.contextmanager
def before_takeover(
    cluster: Cluster, hang: bool = False
) -> Iterator[tuple[RedisServer, RedisServer, RedisServer]]:
    """A primary killed (or hung: SIGSTOP) in the seconds before its replica takes over, held
    open: the replica may not take over, the other primaries go on serving their slots
    (cluster-require-full-coverage no). Yields the primary, its replica and another primary;
    afterwards the primary is back and the cluster as it was."""
    victim, *others = cluster.primaries()
    replica = cluster.replica_of(victim)
    with replica.client() as c:
        c.config_set("cluster-replica-no-failover", "yes")
    for node in cluster.live():
        with node.client() as c:
            c.config_set("cluster-require-full-coverage", "no")
    try:
        (cluster.pause if hang else cluster.kill)(victim)
        try:
            yield victim, replica, others[0]
        finally:
            if hang:
                cluster.resume(victim)
                cluster.settle()
            else:
                cluster.revive(victim)
    finally:
        for node in cluster.live():
            with node.client() as c:
                c.config_set("cluster-require-full-coverage", "yes")
                c.config_set("cluster-replica-no-failover", "no")


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


class TestTopPartialOutage:
    """`top --once`, `--json` and the live view in a partial outage: exit 0, a line per server
    naming the one that failed, the queues it held kept as rows, the count of those read."""

    def test_dead_primary_and_its_replica_stopped(self, fresh: Cluster) -> None:
        """A primary killed and its replica stopped, the cluster down: the dead node's line
        says it cannot be reached, the others' that the cluster is down, every queue named is
        a row (stale, on the node that holds it) and none is read; found by SCAN, the dead
        node's queues are said to be unknown, in the text, the JSON and the live view."""
        seeded = seed_every_primary(fresh)
        victim, *others = fresh.primaries()
        replica = fresh.replica_of(victim)
        named = [f"--queue={queue}" for queue in seeded]
        replica.stop()
        try:
            fresh.kill(victim)
            wait_for(lambda: all(cluster_down(other) for other in others), "CLUSTERDOWN")
            body = top_once(others[0], "--json", *named)
            found = top_once(others[0], env=WIDE)
            label = line_of(found.out, victim.node).split()[0]
            count = f"4 of 4 queues shown, most expired first; 0 of 4 queues read; server {label} "
            live = LiveView(["--cluster", "--redis-url", others[0].url, "--interval", "0.2"])
            with live:
                text = live.read_until([f"{count}not listed"])
                code, err = live.stop(signal.SIGTERM)
        finally:
            replica.start()
            fresh.revive(victim)
        assert (body.code, body.err, found.code, found.err, code, err) == (0, "", 0, "", 0, "")
        view = body.json()
        servers = {s["node"]: (bool(s["run_id"]), s["error"]) for s in view["servers"]}
        assert servers == {
            victim.node: (False, f"Error 111 connecting to {victim.node}. Connection refused."),
            **{other.node: (True, "CLUSTERDOWN The cluster is down") for other in others},
        }
        rows = {row["queue"]: (row["node"], row["state"], row["expired"]) for row in view["rows"]}
        assert rows == {queue: (node, "stale", None) for queue, (node, _) in seeded.items()}
        assert (view["queues"], view["read"]) == (6, 0)

        assert line_of(found.out, victim.node) == (
            f"{label} {victim.node}  UNREACHABLE: Error 111: Connection refused.  its queues not "
            "listed (give them with --queue)"
        )
        lines = found.out.splitlines()
        assert lines[-2:] == [f"{count}not listed", NEVER_NOTE], found.out  # none ever read
        assert {
            line.split()[0] for line in lines if line.startswith("?") and not line.startswith("? ")
        } == {f"?{queue}" for queue, (node, _) in seeded.items() if node != victim.node}
        assert all(
            line_of(found.out, other.node).endswith(
                "CLUSTERDOWN The cluster is down (its queues never read)"
            )
            for other in others
        ), found.out
        assert f"{count}not listed" in text and "UNREACHABLE" in text, text
        assert restored(live.received)

    def test_dead_primary_read_on_its_replica(self, fresh: Cluster) -> None:
        """A primary killed in the seconds before its replica takes over: its line says it
        cannot be reached and where its queues are read; found and counted on the replica
        (read-only), they are rows marked so, and the replica's line, after the primaries',
        says whose it is. Every queue is read; exit 0."""
        seeded = seed_every_primary(fresh)
        with before_takeover(fresh) as (victim, replica, seed_node):
            body = top_once(seed_node, "--json")
            text = top_once(seed_node, env=WIDE)
        assert (text.code, text.err) == (0, "")
        servers = read_on_replica(body, seeded, victim, replica)
        assert "Connection refused" in (servers[victim.node]["error"] or "")
        labels = {node: line_of(text.out, node).split()[0] for node in servers}
        assert line_of(text.out, victim.node).endswith(
            f"  queues read on {labels[replica.node]}"
        ), text.out
        assert line_of(text.out, replica.node).endswith(
            f"  replica of {labels[victim.node]}  verb loaded"
        ), text.out
        assert list(labels.values())[-1] == labels[replica.node]  # the primaries keep theirs
        lines = text.out.splitlines()
        assert {
            line.split()[0] for line in lines if line.startswith("≈") and not line.startswith("≈ ")
        } == {f"≈{queue}" for queue, (node, _) in seeded.items() if node == victim.node}
        assert lines[-2:] == ["6 of 6 queues shown, most expired first", REPLICA_NOTE], text.out

    def test_hung_primary_read_on_its_replica(self, fresh: Cluster) -> None:
        """A primary that hangs (SIGSTOP: it takes connections and never answers) is read on
        its replica once its reads time out, its line saying so; exit 0."""
        seeded = seed_every_primary(fresh)
        with before_takeover(fresh, hang=True) as (victim, replica, seed_node):
            body = top_once(seed_node, "--json", "--socket-timeout", HUNG_TIMEOUT_S)
        servers = read_on_replica(body, seeded, victim, replica)
        assert "Timeout" in (servers[victim.node]["error"] or ""), servers[victim.node]

    def test_failover_in_progress(self, fresh: Cluster) -> None:
        """Through a CLUSTER FAILOVER every refresh shows every queue, read now or kept as last
        read (moved), and no server in error; `--once` run meanwhile exits 0 with every queue;
        once it is over (and a MOVED seen) each queue is read on its new primary and the old
        one's line is gone."""
        seeded = seed_every_primary(fresh)
        victim, *others = fresh.primaries()
        replica = fresh.replica_of(victim)
        view = viewer(others[0])
        try:
            assert rows_of(view.refresh()).keys() == seeded.keys()
            with replica.client() as c:
                c.execute_command("CLUSTER", "FAILOVER")
            once = top_once(others[0], "--json")
            screens = []
            deadline = time.monotonic() + SETTLE_S
            while not fresh.settled() or fresh.role(replica) != "master":
                screens.append(view.refresh())
                assert time.monotonic() < deadline, "the failover did not end"
            screens += [view.refresh(), view.refresh()]  # a MOVED seen, then the map read again
        finally:
            view.close()
        assert once.code == 0, once.err
        assert {row["queue"] for row in once.json()["rows"]} == seeded.keys()
        for screen in screens:
            assert rows_of(screen).keys() == seeded.keys()
            assert {row.state for row in screen.rows} <= {"ok", "moved"}, screen.rows
            assert all(server.error is None for server in screen.servers), screen.servers
        last = screens[-1]
        assert {row.queue: (row.node, row.state) for row in last.rows} == {
            queue: (replica.node if node == victim.node else node, "ok")
            for queue, (node, _) in seeded.items()
        }
        assert victim.node not in {server.node for server in last.servers}
