"""The server's run_id (the lease epoch), its role, its clock, whether it is a Cluster node or
still loading its dataset, and whether it knows the verb."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import redis

from sweeperd.constants import VERB
from sweeperd.server.calls import command

INFO_SECTIONS = ("server", "replication", "cluster", "persistence")


@dataclass(frozen=True)
class ServerInfo:
    run_id: bytes
    # The server's clock when it answered.
    time_ms: int
    version: str
    # Master or slave, as INFO replication says.
    role: str = "master"
    # master_replid: changes when a server takes or leaves the primary role.
    replid: bytes = b""
    # cluster_enabled: a Cluster node.
    cluster: bool = False
    # Loading its dataset (an RDB or the AOF): keyed calls are refused.
    loading: bool = False


def parse_info(raw: bytes | str) -> dict[str, str]:
    """Return the `field:value` lines of an INFO reply."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            name, value = line.split(":", 1)
            fields[name] = value
    return fields


def server_ms(fields: Mapping[str, str]) -> int:
    """Return the server's clock when it answered INFO server, in ms since the Unix epoch."""
    return int(fields.get("server_time_usec", "0")) // 1000


def server_info_of(raw: bytes | str) -> ServerInfo:
    fields = parse_info(raw)
    return ServerInfo(
        run_id=fields["run_id"].encode(),
        time_ms=server_ms(fields),
        version=fields.get("valkey_version") or fields.get("redis_version", "unknown"),
        role=fields.get("role", "master"),
        replid=fields.get("master_replid", "").encode(),
        cluster=fields.get("cluster_enabled") == "1",
        loading=fields.get("loading") == "1",
    )


def read_server_info(client: redis.Redis) -> ServerInfo:
    """INFO server, replication, cluster and persistence in one reply, read raw (see
    connection.connect)."""
    raw = command(client, "INFO", *INFO_SECTIONS)
    return server_info_of(raw)


def has_verb(client: redis.Redis) -> bool:
    """Tell whether the server knows EMQ.STALLED.CHECK (COMMAND INFO answers nil when not)."""
    return verb_in(command(client, "COMMAND", "INFO", VERB))


def verb_in(command_info: object) -> bool:
    """Tell whether a raw `COMMAND INFO EMQ.STALLED.CHECK` reply describes the verb (nil:
    unknown)."""
    return isinstance(command_info, list) and bool(command_info) and command_info[0] is not None
