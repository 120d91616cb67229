"""Where `sweeperd top` reads: the primaries, the nodes serving as replicas, each one's queues."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from sweeperd.connection import Connection
from sweeperd.constants import ACTIVE, DEAD, PENDING
from sweeperd.discovery import SCAN_COUNT, glob_escape
from sweeperd.keyspace import is_queue_name
from sweeperd.topology import ClusterSlots, Layout, SentinelPrimary, name_of, source_of

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
        if isinstance(self.source, ClusterSlots) and self.source.cluster is not None:
            nodes = self.source.cluster.nodes_manager.get_nodes_by_server_type("replica")
            return frozenset(name_of((n.host, int(n.port))) for n in nodes)
        if isinstance(self.source, SentinelPrimary):
            found = self.source.sentinel.discover_slaves(self.source.master)  # type: ignore[no-untyped-call]
            return frozenset(name_of((str(host), int(port))) for host, port in found)
        return frozenset()

    def close(self) -> None:
        if isinstance(self.source, ClusterSlots):
            self.source.close()


def find_queues(client: redis.Redis, root: str) -> set[str]:
    """The queues with an active, pending or dead set on the node (one SCAN); sweeperd's own
    keys, under `<root>:sweeperd:`, never match `<root>:{*}:`."""
    head = f"{root}:{{".encode()
    pattern = f"{glob_escape(root)}:{{*}}:*"
    keys = client.scan_iter(match=pattern, count=SCAN_COUNT, _type="zset")
    return {queue for key in keys if (queue := _queue_of(key, head)) is not None}


def _queue_of(key: bytes, head: bytes) -> str | None:
    """`q` of `<root>:{q}:active`, `:pending` or `:dead`; None for any other key."""
    name, _, kind = key.removeprefix(head).rpartition(b"}:")
    try:
        queue, kind_text = name.decode(), kind.decode()
    except UnicodeDecodeError:
        return None
    if key.startswith(head) and kind_text in QUEUE_SETS and is_queue_name(queue):
        return queue
    return None
