"""Where `sweeperd top` reads: the primaries, each one's replicas, each one's queues."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sweeperd.constants import ACTIVE, DEAD, PENDING
from sweeperd.server.connection import Connection
from sweeperd.server.topology import (
    Address,
    ClusterSlots,
    Layout,
    SentinelPrimary,
    name_of,
    source_of,
)

# A queue with any of them is shown.
QUEUE_SETS = (ACTIVE, PENDING, DEAD)


@dataclass(frozen=True)
class Map:
    """The layout, and each primary's replicas as the map lists them now (a node that is in
    neither is gone)."""

    layout: Layout
    replicas_of: Mapping[str, tuple[Address, ...]] = field(default_factory=dict)

    @property
    def replicas(self) -> frozenset[str]:
        """Return the nodes that serve as replicas now."""
        return frozenset(name_of(a) for found in self.replicas_of.values() for a in found)


class MapSource:
    """The layout read as the daemon reads it (topology.source_of), with the replicas."""

    def __init__(self, connection: Connection) -> None:
        self._source = source_of(connection)

    def read(self) -> Map:
        """Return the primaries and slot owners now; a failure to read them is a
        redis.RedisError."""
        layout = self._source.read()
        return Map(layout, self._replicas(layout))

    def _replicas(self, layout: Layout) -> dict[str, tuple[Address, ...]]:
        """Return each primary's replicas: the Cluster's slot map lists them after their primary (a
        primary that died is listed until one takes over), Sentinel names the primary's."""
        if isinstance(self._source, ClusterSlots):
            return dict(self._source.replicas_of)
        if isinstance(self._source, SentinelPrimary):
            replicas = self._source.replicas()
            return {name: replicas for name in layout.primaries}
        return {}

    def close(self) -> None:
        if isinstance(self._source, ClusterSlots):
            self._source.close()
