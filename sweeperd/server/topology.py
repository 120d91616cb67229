"""Where the primaries are: the URL's one server, a Cluster's slot owners, or Sentinel's answer;
and what to say when the servers are not the topology the options name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import redis
from redis.cluster import RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import RedisClusterException
from redis.sentinel import MasterNotFoundError, Sentinel

from sweeperd.constants import TopologyMode
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.connection import UNREACHABLE, Connection
from sweeperd.server.serverinfo import read_server_info

Address = tuple[str, int]
CLUSTER_FLAG = "--cluster (SWEEPERD_CLUSTER=true)"
NOT_CLUSTER_ENABLED = "Cluster mode is not enabled"  # redis-py, of a seed that is no Cluster node


class NoPrimary(redis.ConnectionError):
    """No Sentinel named the primary; the message says what each one answered, in a few words."""


def clustered_error(node: str) -> SweepError:
    """What a Cluster node swept as one server is: every call a failure, reason moved."""
    return SweepError(
        Reason.MOVED,
        f"{node} is a Cluster node: this is a Cluster, add {CLUSTER_FLAG} so that each queue "
        "is swept on the primary that owns its slot",
    )


def unclustered_error(node: str) -> SweepError:
    return SweepError(
        Reason.TOPOLOGY,
        f"{node} is not a Cluster node (cluster_enabled:0): drop --cluster, or give the URL of "
        "a node of the Cluster",
    )


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

    def close(self) -> None: ...


@dataclass
class Standalone:
    """The URL's server, always."""

    connection: Connection

    def read(self) -> Layout:
        return Layout({self.connection.node: None})

    def close(self) -> None:
        """Nothing held open."""


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
            if NOT_CLUSTER_ENABLED in str(exc):
                raise unclustered_error(self.connection.node) from None
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
            self.cluster = None


class SentinelPrimary:
    """The primary Sentinel names now (asked again at every read)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.master = connection.topology.sentinel_master or ""
        self.sentinel: Sentinel = connection.sentinel()

    def read(self) -> Layout:
        try:
            host, port = self.sentinel.discover_master(self.master)  # type: ignore[no-untyped-call]
        except (MasterNotFoundError, redis.ResponseError):
            raise self.diagnosis() from None
        address = (str(host), int(port))
        return Layout({name_of(address): address})

    def close(self) -> None:
        for client in self.sentinel.sentinels:
            client.close()

    def diagnosis(self) -> Exception:
        """Why no Sentinel named the primary, one short clause per Sentinel: a server that is no
        Sentinel is a wrong topology; otherwise the Sentinels cannot be reached or do not know
        the primary (a connection failure)."""
        said, plain = [], []
        for address in self.connection.topology.sentinels:
            name = name_of(address)
            try:
                with self.connection.sentinel_client(address) as client:
                    mode = client.info("server").get("redis_mode")
                    if mode != "sentinel":
                        plain.append(name)
                        continue
                    known = client.execute_command(
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master
                    )
                said.append(
                    f"{name} does not know {self.master!r}"
                    if known is None
                    else f"{name} sees {self.master!r} down"
                )
            except UNREACHABLE as exc:
                said.append(f"{name}: {_short(exc)}")
            except redis.RedisError as exc:
                said.append(f"{name}: {_short(exc)}")
        if plain:
            return SweepError(
                Reason.TOPOLOGY,
                f"{', '.join(plain)} {'is' if len(plain) == 1 else 'are'} not a Sentinel (a "
                "Redis server answers there): give Sentinel addresses in --sentinel, or drop it",
            )
        return NoPrimary(f"no Sentinel named a primary for {self.master!r}: {'; '.join(said)}")


def _short(exc: BaseException) -> str:
    """An error in a few words: redis-py's connection errors carry the address and a repr."""
    text = " ".join(str(exc).split())
    cause = text.rsplit(". ", 1)[-1] if text.startswith("Error ") else text
    return cause.rstrip(".").lower() or type(exc).__name__


def node_of(client: redis.Redis) -> str:
    """The `node` name of the server a client speaks to: host:port, or the socket's path."""
    options = client.connection_pool.connection_kwargs
    if "path" in options:
        return str(options["path"])
    return name_of((str(options.get("host", "localhost")), int(options.get("port", 6379))))


def check_standalone(connection: Connection, client: redis.Redis) -> None:
    """A server named by the URL alone must not be a Cluster node: refused, naming the fix."""
    if read_server_info(client).cluster:
        raise clustered_error(connection.node)


def source_of(connection: Connection) -> Source:
    mode = connection.topology.mode
    if mode is TopologyMode.CLUSTER:
        return ClusterSlots(connection)
    if mode is TopologyMode.SENTINEL:
        return SentinelPrimary(connection)
    return Standalone(connection)


def primary_client(connection: Connection, key: str) -> redis.Redis:
    """A client of the primary that holds `key` now: for once and inspect."""
    layout = source_of(connection).read()
    name = layout.owner(slot_of(key))
    if name is None:
        raise redis.ConnectionError(f"no primary serves the slot of {key} now: try again")
    address = layout.primaries[name]
    client = connection.client(address)
    if connection.topology.mode is TopologyMode.STANDALONE:
        check_standalone(connection, client)
    return client
