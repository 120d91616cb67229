"""What CLUSTER NODES says of a Cluster down: the failed primaries that still hold slots."""

from __future__ import annotations

from sweeperd.server.clusternodes import failed_primaries, why_down

# CLUSTER NODES as a node prints it (id, address@bus, flags, primary, ping, pong, epoch, link,
# slots): A died with no replica to take over; B's replica D took its slots, B is still marked
# failed; E, a replica, failed too; C is well.
NODES = """\
a1 10.0.0.1:6379@16379 master,fail - 1 1 1 disconnected 0-5460
b2 10.0.0.2:6379@16379 master,fail - 1 1 2 disconnected
c3 10.0.0.3:6379@16379 myself,master - 0 0 3 connected 10923-16383
d4 10.0.0.4:6379@16379 master - 0 1 4 connected 5461-10922
e5 10.0.0.5:6379@16379 slave,fail c3 1 1 3 disconnected
f6 10.0.0.6:6379@16379 master,fail? - 1 1 5 connected 100-200
"""


def test_only_a_failed_primary_still_holding_slots_is_named() -> None:
    """A failed replica, a failed primary whose slots moved and one only suspected (fail?)
    took nothing down: the Cluster is down for A alone."""
    nodes = [line.split() for line in NODES.splitlines()]
    assert failed_primaries(nodes) == ["10.0.0.1:6379"]


def with_replicas(*lines: str) -> list[list[str]]:
    """NODES with A's replicas (lines naming a1 as their primary) added."""
    return [line.split() for line in [*NODES.splitlines(), *lines]]


class TestWhyDown:
    def test_its_replica_down_too(self) -> None:
        """A failed and its replica is down too (the case of a page at 3 a.m.): said, and what
        to do, since waiting will not bring the Cluster back."""
        nodes = with_replicas("g7 10.0.0.7:6379@16379 slave,fail a1 1 1 1 disconnected")
        assert why_down(nodes) == (
            ": 10.0.0.1:6379 failed, and its replica 10.0.0.7:6379 is down too: start the "
            "failed nodes again (a replica that is up takes over), or move their slots to a "
            "primary that is up"
        )

    def test_no_replica(self) -> None:
        assert why_down(with_replicas()) == (
            ": 10.0.0.1:6379 failed, and it has no replica: start the failed nodes again (a "
            "replica that is up takes over), or move their slots to a primary that is up"
        )

    def test_a_replica_up_has_not_taken_over_yet(self) -> None:
        """A's replica is up: the failover is under way (it takes about cluster-node-timeout),
        not over; nothing says no replica took over, nor asks for a restart."""
        nodes = with_replicas("g7 10.0.0.7:6379@16379 slave a1 0 1 1 connected")
        assert why_down(nodes) == (
            ": 10.0.0.1:6379 failed, and no replica has taken over yet (10.0.0.7:6379 is up): "
            "a replica takes over within about cluster-node-timeout, and the Cluster is up again"
        )

    def test_a_replica_only_suspected_is_down(self) -> None:
        nodes = with_replicas(
            "g7 10.0.0.7:6379@16379 slave,fail? a1 1 1 1 disconnected",
            "h8 10.0.0.8:6379@16379 slave,fail a1 1 1 1 disconnected",
        )
        assert "its replicas 10.0.0.7:6379, 10.0.0.8:6379 are down too" in why_down(nodes)

    def test_nothing_failed(self) -> None:
        assert why_down([line.split() for line in NODES.splitlines()[2:]]) == ""
