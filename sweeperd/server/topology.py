"""Where the primaries are: the URL's one server, a Cluster's slot owners, or Sentinel's answer;
and what to say when the servers are not the topology the options name."""

from __future__ import annotations

import ipaddress
import itertools
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.sentinel import MasterNotFoundError, Sentinel

from sweeperd.constants import TopologyMode
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.calls import command, primary_of, replicas_of
from sweeperd.server.connection import UNREACHABLE, Connection
from sweeperd.server.denied import DEFAULT_USER, denied, user_of
from sweeperd.server.serverinfo import read_server_info
from sweeperd.server.tls import mismatch
from sweeperd.server.urls import name_at

Address = tuple[str, int]
CLUSTER_FLAG = "--cluster (SWEEPERD_CLUSTER=true)"
SEEDS_FLAG = "--redis-url (repeat it: one node each; SWEEPERD_REDIS_URL: commas between)"
# A server that is no Cluster node, of CLUSTER SLOTS.
CLUSTER_DISABLED = "cluster support disabled"


class NoPrimary(redis.ConnectionError):
    """No Sentinel named the primary; the message says what each one answered, in a few words."""


def clustered_error(node: str) -> SweepError:
    """Return what a Cluster node swept as one server is: every call a failure, reason moved."""
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
    # Per slot; None: the one primary owns all.
    owners: tuple[str | None, ...] | None = None

    def owner(self, slot: int) -> str | None:
        """Return the primary that serves `slot` now; None while no primary does (mid-failover)."""
        if self.owners is None:
            return next(iter(self.primaries), None)
        return self.owners[slot]

    def slots_of(self, name: str) -> list[int]:
        if self.owners is None:
            return list(range(REDIS_CLUSTER_HASH_SLOTS)) if name in self.primaries else []
        return [slot for slot, owner in enumerate(self.owners) if owner == name]


def predecessor(old: Layout | None, new: Layout, name: str) -> str | None:
    """Return the primary whose slots the new primary `name` took over and that is no primary any
    more: a failover. A slot that moved to a primary that already was one is a migration."""
    if old is None or name in old.primaries:
        return None
    for slot in new.slots_of(name):
        before = old.owner(slot)
        if before is not None and before != name and before not in new.primaries:
            return before
    return None


def slot_of(key: str) -> int:
    """Return the cluster slot of a key (its {hash tag}'s)."""
    return int(key_slot(key.encode()))


def name_of(address: Address) -> str:
    """Return a primary's `node` label: host:port."""
    return name_at(address)


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
        """Close nothing: it holds nothing open."""


class NoSeedAnswered(redis.ConnectionError):
    """No node of a Cluster answered CLUSTER SLOTS: each node asked, with what it did."""

    def __init__(self, tried: list[tuple[str, BaseException]], scheme: str = "redis") -> None:
        said = "; ".join(f"{node}: {_short(exc)}{_hinted(scheme, exc)}" for node, exc in tried)
        super().__init__(
            f"no node of the Cluster answered CLUSTER SLOTS ({len(tried)} tried: {said}); "
            f"name other nodes with {SEEDS_FLAG}"
        )
        self.tried = tried

    @property
    def refused_auth(self) -> list[str]:
        """Return the nodes that refused the user's credentials."""
        return [node for node, exc in self.tried if isinstance(exc, redis.AuthenticationError)]


def _hinted(scheme: str, exc: BaseException) -> str:
    """ ", " and what a TLS mismatch would explain of `exc`, when it may."""
    hint = mismatch(scheme, exc)
    return f", {hint}" if hint else ""


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def resolved(seed: Address, *, by_name: bool = False) -> list[Address]:
    """Return a seed's addresses: a host name stands for every address it resolves to now (a
    Kubernetes headless Service's pods); an address, a name that does not resolve now, or a
    name a TLS certificate must match (`by_name`) stands for itself."""
    host, port = seed
    if by_name or is_ip(host):
        return [seed]
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return [seed]
    return list(dict.fromkeys((str(info[4][0]), port) for info in found)) or [seed]


class ClusterSlots:
    """The slot map as the Cluster's nodes say it, by CLUSTER SLOTS: the node that answered
    last asked first, then every other node the last map named, then the seeds named (each
    host name as every address it resolves to). The reply names each slot's primary and its
    replicas; no other command is sent (no COMMAND, as a cluster client's start sends: the least
    ACL user has CLUSTER SLOTS only)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._seeds = connection.seeds
        # The certificate names the host.
        self._by_name = connection.url.startswith("rediss://")
        # Every node seen, the last to answer first.
        self._known: list[Address] = []
        # The last map's, by primary.
        self._replicas_of: dict[str, tuple[Address, ...]] = {}
        self._clients: dict[Address, redis.Redis] = {}
        # The clients: a read on the watch's thread, close() on stop.
        self._lock = threading.Lock()
        self._closed = False

    def read(self) -> Layout:
        """Return the primaries and slot owners now; a node that refuses CLUSTER SLOTS to the user
        raises noperm, one that is no Cluster node a wrong topology; when none answers,
        NoSeedAnswered says what each one did."""
        tried: list[tuple[str, BaseException]] = []
        found: SlotMap | None = None
        answered: Address | None = None
        for address in self._candidates():
            try:
                reply = command(self._client(address), "CLUSTER", "SLOTS")
            except redis.exceptions.NoPermissionError as exc:
                raise denied(exc, user_of(self._client(address)), where=name_of(address)) from None
            except redis.ResponseError as exc:
                if CLUSTER_DISABLED not in str(exc):
                    tried.append((name_of(address), exc))
                    continue
                raise unclustered_error(name_of(address)) from None
            except UNREACHABLE as exc:
                tried.append((name_of(address), exc))
                continue
            found = SlotMap.parsed(reply, address[0], found)
            answered = answered or address
            if found.covered:
                break
        if found is None or answered is None:
            raise NoSeedAnswered(tried, self._connection.url.partition("://")[0])
        self._known = found.nodes_from(answered)
        self._replicas_of = found.replicas_of
        return found.layout()

    @property
    def replicas_of(self) -> dict[str, tuple[Address, ...]]:
        """Return each primary's replicas, as the last map read lists them."""
        return self._replicas_of

    def _candidates(self) -> Iterator[Address]:
        """Yield the nodes to ask, in turn, each once; the seeds' names resolved only when reached
        (a lookup has no timeout of its own)."""
        asked: set[Address] = set()
        named = (a for seed in self._seeds for a in resolved(seed, by_name=self._by_name))
        for address in itertools.chain(list(self._known), named):
            if address not in asked:
                asked.add(address)
                yield address

    def _client(self, address: Address) -> redis.Redis:
        with self._lock:
            if self._closed:
                raise redis.ConnectionError("the slot map's source is closed")
            if address not in self._clients:
                self._clients[address] = self._connection.client(address)
            return self._clients[address]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


@dataclass
class SlotMap:
    """One or more CLUSTER SLOTS replies merged: each slot's nodes, primary first, as the first
    reply that named the slot said them."""

    slots: dict[int, tuple[Address, ...]]

    @classmethod
    def parsed(cls, reply: object, host: str, before: SlotMap | None = None) -> SlotMap:
        """Return a reply (read from a node at `host`: an empty host is that node's), merged into
        the slots `before` left uncovered."""
        slots = dict(before.slots) if before is not None else {}
        for first, last, *nodes in reply if isinstance(reply, list) else []:
            owners = tuple(_node_address(node, host) for node in nodes)
            for slot in range(int(first), int(last) + 1):
                slots.setdefault(slot, owners)
        return cls(slots)

    @property
    def covered(self) -> bool:
        return len(self.slots) == REDIS_CLUSTER_HASH_SLOTS

    @property
    def nodes(self) -> list[Address]:
        """Return every node named, primaries first."""
        primaries = [owners[0] for owners in self.slots.values()]
        replicas = [n for owners in self.slots.values() for n in owners[1:]]
        return list(dict.fromkeys([*primaries, *replicas]))

    def nodes_from(self, answered: Address) -> list[Address]:
        """Return the nodes to ask next time: the one that `answered` first when the map names
        it, then every node named. A node the map no longer names (forgotten, removed) is
        dropped: one removed but still running answers an empty map, and kept, it was asked first
        at every read; the seeds named are asked after these anyway."""
        named = self.nodes
        return [answered, *(n for n in named if n != answered)] if answered in named else named

    @property
    def replicas_of(self) -> dict[str, tuple[Address, ...]]:
        """Return each primary's replicas, as listed after it (a failed primary's until one takes
        over; a failed replica is not listed)."""
        return {name_of(owners[0]): tuple(owners[1:]) for owners in self.slots.values()}

    def layout(self) -> Layout:
        owners: list[str | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
        primaries: dict[str, Address | None] = {}
        for slot, nodes in self.slots.items():
            name = name_of(nodes[0])
            owners[slot] = name
            primaries[name] = nodes[0]
        return Layout(dict(sorted(primaries.items())), tuple(owners))


def _node_address(node: object, host: str) -> Address:
    """Return a node of a CLUSTER SLOTS entry ([ip, port, id, ...]) as (host, port)."""
    assert isinstance(node, list), node
    ip = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    return (ip or host, int(node[1]))


class SentinelPrimary:
    """The primary Sentinel names now (asked again at every read)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._master = connection.topology.sentinel_master or ""
        self._sentinel: Sentinel = connection.sentinel()

    def read(self) -> Layout:
        try:
            address = primary_of(self._sentinel, self._master)
        except redis.exceptions.NoPermissionError as exc:
            # The Sentinels' own ACL: their user.
            sentinels = ", ".join(name_of(a) for a in self._connection.topology.sentinels)
            raise denied(exc, DEFAULT_USER, where=sentinels) from None
        except (MasterNotFoundError, redis.ResponseError):
            raise self.diagnosis() from None
        return Layout({name_of(address): address})

    def replicas(self) -> tuple[Address, ...]:
        """Return the primary's replicas, as the Sentinels name them now."""
        return replicas_of(self._sentinel, self._master)

    def close(self) -> None:
        for client in self._sentinel.sentinels:
            client.close()

    def diagnosis(self) -> Exception:
        """Return why no Sentinel named the primary, one short clause per Sentinel: a server that is
        no Sentinel is a wrong topology; otherwise the Sentinels cannot be reached or do not know
        the primary (a connection failure)."""
        said, plain = [], []
        for address in self._connection.topology.sentinels:
            name = name_of(address)
            try:
                with self._connection.sentinel_client(address) as client:
                    mode = client.info("server").get("redis_mode")
                    if mode != "sentinel":
                        plain.append(name)
                        continue
                    known = client.execute_command(
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self._master
                    )
                said.append(
                    f"{name} does not know {self._master!r}"
                    if known is None
                    else f"{name} sees {self._master!r} down"
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
        return NoPrimary(f"no Sentinel named a primary for {self._master!r}: {'; '.join(said)}")


def _short(exc: BaseException) -> str:
    """Return an error in a few words: redis-py's connection errors carry the address and a repr."""
    text = " ".join(str(exc).split())
    cause = text.rsplit(". ", 1)[-1] if text.startswith("Error ") else text
    return cause.rstrip(".").lower() or type(exc).__name__


def node_of(client: redis.Redis) -> str:
    """Return the `node` name of the server a client speaks to: host:port, or the socket's path."""
    options = client.connection_pool.connection_kwargs
    if "path" in options:
        return str(options["path"])
    return name_of((str(options.get("host", "localhost")), int(options.get("port", 6379))))


def check_standalone(connection: Connection, client: redis.Redis) -> None:
    """Check that a server named by the URL alone is no Cluster node: refused, naming the fix."""
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
    """Return a client of the primary that holds `key` now: for once and inspect."""
    source = source_of(connection)
    try:
        layout = source.read()
    finally:
        source.close()
    name = layout.owner(slot_of(key))
    if name is None:
        raise redis.ConnectionError(f"no primary serves the slot of {key} now: try again")
    address = layout.primaries[name]
    client = connection.client(address)
    if connection.topology.mode is TopologyMode.STANDALONE:
        check_standalone(connection, client)
    return client
