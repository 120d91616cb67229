"""Where `sweeperd top` reads: the primaries, the nodes serving as replicas, each one's queues."""

from __future__ import annotations

from dataclasses import dataclass

from sweeperd.constants import ACTIVE, DEAD, PENDING
from sweeperd.server.connection import Connection
from sweeperd.server.topology import ClusterSlots, Layout, SentinelPrimary, name_of, source_of

QUEUE_SETS = (ACTIVE, PENDING, DEAD)  # a queue with any of them is shown


@dataclass(frozen=True)
class Map:
    """The layout, and the nodes that serve as replicas now (a node in neither is gone)."""

    layout: Layout
    replicas: frozenset[str] = frozenset()


class MapSource:
    """The layout read as the daemon reads it (topology.source_of), with the replicas."""

    def __init__(self, connection: Connection) -> None:
        self.source = source_of(connection)

    def read(self) -> Map:
        """The primaries and slot owners now; a failure to read them is a redis.RedisError."""
        return Map(self.source.read(), self._replicas())

    def _replicas(self) -> frozenset[str]:
        if isinstance(self.source, ClusterSlots):
            found = self.source.replicas_of.values()
            return frozenset(name_of(address) for replicas in found for address in replicas)
        if isinstance(self.source, SentinelPrimary):
            found = self.source.sentinel.discover_slaves(self.source.master)  # type: ignore[no-untyped-call]
            return frozenset(name_of((str(host), int(port))) for host, port in found)
        return frozenset()

    def close(self) -> None:
        if isinstance(self.source, ClusterSlots):
            self.source.close()
