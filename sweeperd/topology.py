"""Where the primaries are: the URL's one server, a Cluster's slot owners, or Sentinel's answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import redis
from redis.cluster import RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from sweeperd.connection import Connection

Address = tuple[str, int]


@dataclass(frozen=True)
class Layout:
    """The primaries (name -> address; None: the URL's own server) and who owns each slot."""

    primaries: Mapping[str, Address | None]
    owners: tuple[str | None, ...] | None = None  # per slot; None: the one primary owns all

    def owner(self, slot: int) -> str | None:
        """The primary that serves `slot` now; None while no primary does (mid-failover)."""
        if self.owners is None:
            return next(iter(self.primaries), None)
        return self.owners[slot]

    def slots_of(self, name: str) -> list[int]:
        if self.owners is None:
            return list(range(REDIS_CLUSTER_HASH_SLOTS)) if name in self.primaries else []
        return [slot for slot, owner in enumerate(self.owners) if owner == name]


def predecessor(old: Layout | None, new: Layout, name: str) -> str | None:
    """The primary whose slots the new primary `name` took over and that is no primary any
    more: a failover. A slot that moved to a primary that already was one is a migration."""
    if old is None or name in old.primaries:
        return None
    for slot in new.slots_of(name):
        before = old.owner(slot)
        if before is not None and before != name and before not in new.primaries:
            return before
    return None


def slot_of(key: str) -> int:
    """The cluster slot of a key (its {hash tag}'s)."""
    return int(key_slot(key.encode()))


def name_of(address: Address) -> str:
    """A primary's `node` label: host:port."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Source(Protocol):
    """A way to read the layout; a failure to read it is a redis.ConnectionError."""

    def read(self) -> Layout: ...


@dataclass
class Standalone:
    """The URL's server, always."""

    connection: Connection

    def read(self) -> Layout:
        return Layout({self.connection.node: None})


class ClusterSlots:
    """The slot map as the library's cluster client reads it (CLUSTER SLOTS, any node it knows)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.cluster: RedisCluster | None = None

    def read(self) -> Layout:
        try:
            if self.cluster is None:
                self.cluster = self.connection.cluster_client()
            else:
                self.cluster.nodes_manager.initialize()
        except RedisClusterException as exc:
            raise redis.ConnectionError(f"no cluster node answered CLUSTER SLOTS: {exc}") from None
        owners: list[str | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
        primaries: dict[str, Address | None] = {}
        for slot, nodes in self.cluster.nodes_manager.slots_cache.items():
            primary = nodes[0]
            name = name_of((primary.host, int(primary.port)))
            owners[slot] = name
            primaries[name] = (primary.host, int(primary.port))
        return Layout(dict(sorted(primaries.items())), tuple(owners))

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()


class SentinelPrimary:
    """The primary Sentinel names now (asked again at every read)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.master = connection.topology.sentinel_master or ""
        self.sentinel: Sentinel = connection.sentinel()

    def read(self) -> Layout:
        host, port = self.sentinel.discover_master(self.master)  # type: ignore[no-untyped-call]
        address = (str(host), int(port))
        return Layout({name_of(address): address})


def source_of(connection: Connection) -> Source:
    mode = connection.topology.mode
    if mode == "cluster":
        return ClusterSlots(connection)
    if mode == "sentinel":
        return SentinelPrimary(connection)
    return Standalone(connection)


def primary_client(connection: Connection, key: str) -> redis.Redis:
    """A client of the primary that holds `key` now: for once and inspect."""
    layout = source_of(connection).read()
    name = layout.owner(slot_of(key))
    if name is None:
        raise redis.ConnectionError(f"no primary serves the slot of {key} now: try again")
    address = layout.primaries[name]
    return connection.client(address)
