"""The layout and the replicas' membership followed on a real Cluster (3 primaries, 3 replicas),
the daemon in-process: the members key's primary failed over, the Cluster down, a slot moved,
a stop while the slot map is being read."""

from __future__ import annotations

import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot
from structlog.testing import capture_logs

from sweeperd.constants import TopologyMode
from sweeperd.daemon.daemon import Daemon
from sweeperd.fleet.layoutwatch import LayoutWatch
from sweeperd.keyspace import members_key
from sweeperd.server.connection import Connection, Topology
from sweeperd.server.topology import ClusterSlots
from tests.support.clock import Clock
from tests.support.daemon_inprocess import in_process, settings_for, stopped
from tests.support.servers import RedisServer
from tests.support.topologies import Cluster, wait_for

MEMBERS = members_key("emq")


@pytest.fixture
def daemon(fresh: Cluster) -> Iterator[Daemon]:
    """One replica sharing the queues (sharing on), in-process, its layout read once."""
    settings = settings_for(
        fresh.seed_url(fresh.live()[0]), cluster="true", shard="on", socket_timeout="2"
    )
    made = in_process(settings, lambda: settings, Clock(100.0))
    made.fleet.refresh()
    yield made
    stopped(made)


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    """The captured log events of one name."""
    return [e for e in logs if e["event"] == name]


def cluster_down_at(server: RedisServer) -> bool:
    with server.client() as c:
        return b"cluster_state:fail" in c.execute_command("CLUSTER", "INFO")


class TestMembersKey:
    def test_its_primary_failed_over(self, fresh: Cluster, daemon: Daemon) -> None:
        """The primary holding the members key fails over: the heartbeat's MOVED reads the slot
        map again and goes to the new primary at once; no refusal, the share kept."""
        member = daemon.sharing.member_id
        daemon.share()
        old = fresh.owner(MEMBERS)
        fresh.failover(fresh.replica_of(old))
        new = fresh.owner(MEMBERS)
        with capture_logs() as logs:
            daemon.share()
        assert events(logs, "membership_refused") == events(logs, "membership_unanswered") == []
        [changed] = events(logs, "topology_changed")
        assert (changed["added"], changed["gone"]) == ([new.node], [old.node])
        assert daemon.sharing.members == frozenset({member})
        assert daemon.sharing.node is not None and daemon.sharing.node.name == new.node
        with new.client() as c:
            assert c.zscore(MEMBERS, member) is not None

    def test_the_cluster_down(self, fresh: Cluster, daemon: Daemon) -> None:
        """A primary dead with its replica held takes the Cluster down: the heartbeat is
        unanswered (said once, with why), not refused, and the share is kept; once the replica
        took over, the heartbeat is answered again."""
        member = daemon.sharing.member_id
        daemon.share()
        home = fresh.owner(MEMBERS)
        victim = next(p for p in fresh.primaries() if p is not home)
        replica = fresh.replica_of(victim)
        with capture_logs() as logs:
            fresh.pause(replica)
            try:
                fresh.kill(victim)
                wait_for(lambda: cluster_down_at(home), "the cluster to fail")
                daemon.share()
                daemon.share()
                kept = daemon.sharing.members
            finally:
                fresh.resume(replica)
            wait_for(lambda: fresh.role(replica) == "master", "the replica to take over")
            fresh.revive(victim)
            daemon.share()
        assert events(logs, "membership_refused") == []
        [unanswered] = events(logs, "membership_unanswered")
        assert (unanswered["reason"], unanswered["log_level"]) == ("cluster_down", "warning")
        assert "ACL" not in str(unanswered["hint"])
        assert kept == frozenset({member})
        assert len(events(logs, "membership_restored")) == 1


class TestSlotsMoved:
    def test_a_reshard_is_said_at_info(self, fresh: Cluster, daemon: Daemon) -> None:
        """A slot moved between two primaries (nothing added or gone): topology_changed says
        which slots moved where, at info."""
        slot = key_slot(b"{moved}")
        source = next(p for p in fresh.primaries() if fresh.owner_port(slot) == p.port)
        target = next(p for p in fresh.primaries() if p is not source)
        fresh.migrate(slot, source, target)
        with capture_logs() as logs:
            assert daemon.fleet.refresh() is True
        [changed] = events(logs, "topology_changed")
        assert changed["log_level"] == "info"
        assert (changed["added"], changed["gone"]) == ([], [])
        assert changed["slots_moved"] == {f"{source.node} to {target.node}": 1}


class TestStop:
    def test_a_read_in_flight_ends_before_the_source_closes(self, fresh: Cluster) -> None:
        """stop() while the slot map is being read (every node stopped, so the read waits on
        one): the read ends as it would have, no error raised in it, and only then is the
        library's cluster client closed."""
        connection = Connection.checked(
            fresh.seed_url(), None, 2.0, topology=Topology(cluster=True)
        )
        source = ClusterSlots(connection)
        watch = LayoutWatch(source, TopologyMode.CLUSTER, lambda _: False, on_moved=lambda: None)
        watch.refresh()
        raised: list[BaseException] = []

        def read() -> None:
            try:
                watch.refresh()
            except BaseException as exc:
                raised.append(exc)

        reader = threading.Thread(target=read)
        stopper = threading.Thread(target=watch.stop)
        nodes = fresh.live()
        for node in nodes:
            fresh.pause(node)
        try:
            reader.start()
            wait_for(watch.reading.locked, "a read in flight")
            stopper.start()
            wait_for(watch.stopped.is_set, "the stop to begin")
            stopper.join(0.3)  # a stop that does not wait has closed the source by now
        finally:
            for node in nodes:
                fresh.resume(node)
        reader.join(10)
        stopper.join(10)
        assert not (reader.is_alive() or stopper.is_alive())
        assert raised == []
        with pytest.raises(redis.ConnectionError, match="the slot map's source is closed"):
            source.read()


class TestNodesAsked:
    def test_a_node_removed_from_the_cluster_is_asked_no_more(
        self, server_kind: str, tmp_path: Path
    ) -> None:
        """A replica removed from a Cluster of its own (CLUSTER RESET on it, CLUSTER FORGET on
        every other node) and still running, answering an empty map: the next read of the
        layout reads it whole and drops the node from those asked; the seed named stays."""
        with Cluster(tmp_path, kind=server_kind) as cluster:
            seed = cluster.servers[0]
            connection = Connection.checked(
                cluster.seed_url(seed), None, 2.0, topology=Topology(cluster=True)
            )
            source = ClusterSlots(connection)
            removed = next(
                s for s in cluster.live() if s is not seed and cluster.role(s) == "slave"
            )
            address = ("127.0.0.1", removed.port)
            wait_for(
                lambda: source.read() and address in list(source._candidates()),
                "the replica named in the map",
            )
            layout = source.read()
            with removed.client() as c:
                gone = c.execute_command("CLUSTER", "MYID").decode()
                c.execute_command("CLUSTER", "RESET", "HARD")
            for server in cluster.live():
                if server is not removed:
                    with server.client() as c:
                        c.execute_command("CLUSTER", "FORGET", gone)
            try:
                assert source.read() == layout
                asked = list(source._candidates())
            finally:
                source.close()
        assert address not in asked
        assert ("127.0.0.1", seed.port) in asked
