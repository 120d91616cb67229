"""What CLUSTER NODES says of a Cluster down: the failed primaries that still hold slots."""

from __future__ import annotations

from sweeperd.server.clusternodes import failed_primaries

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
