"""What a Cluster node says of the others: which primaries failed (a Cluster down), where a
migrating slot goes, and how many leases are due where a queue's key is now."""

from __future__ import annotations

import redis

from sweeperd.reasons import Reason, SweepError
from sweeperd.server.connection import Connection


def cluster_nodes(client: redis.Redis) -> list[list[str]]:
    """CLUSTER NODES, a list of fields per node (id, address, flags, primary, ..., slots)."""
    raw = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return [line.split() for line in text.splitlines() if line.strip()]


def _address(fields: list[str]) -> str:
    return fields[1].split("@", 1)[0]


def failed_primaries(nodes: list[list[str]]) -> list[str]:
    """The primaries the Cluster marks failed (fail, not fail?) that still hold slots (no
    replica took over), as host:port: a failed replica, or a primary whose replica took its
    slots, took nothing down."""
    return sorted(
        _address(f) for f in nodes if {"master", "fail"} <= set(f[2].split(",")) and f[8:]
    )


def cluster_down(error: SweepError, client: redis.Redis) -> SweepError:
    """CLUSTERDOWN, with the nodes whose failure took the Cluster down when the node says."""
    try:
        failed = failed_primaries(cluster_nodes(client))
    except redis.RedisError:
        failed = []
    which = f": {', '.join(failed)} failed, and no replica took over" if failed else ""
    return SweepError(Reason.CLUSTER_DOWN, f"the cluster is down ({error.message}){which}")


def migrating_to(client: redis.Redis, slot: int) -> str | None:
    """Where the node `client` speaks to is migrating `slot` (its `[slot->-id]`), or None (not
    migrating, or not said)."""
    try:
        nodes = cluster_nodes(client)
    except redis.RedisError:
        return None
    mine = next((f for f in nodes if "myself" in f[2].split(",")), None)
    marker = f"[{slot}->-"
    target = next((s[len(marker) : -1] for s in (mine or [])[8:] if s.startswith(marker)), None)
    return next((_address(f) for f in nodes if f[0] == target), None)


def due_count(connection: Connection, client: redis.Redis, key: str, bound_ms: int) -> int | None:
    """How many leases of the active set `key` are due by `bound_ms`, read where the key is
    now (a migrating slot's ASK followed once, with ASKING); None when it cannot be read."""
    try:
        try:
            return int(client.zcount(key, "-inf", bound_ms))
        except redis.exceptions.AskError as exc:  # MovedError is one too
            with connection.client(exc.node_addr) as there:
                pipe = there.pipeline(transaction=False)
                if not isinstance(exc, redis.exceptions.MovedError):
                    pipe.execute_command("ASKING")
                pipe.zcount(key, "-inf", bound_ms)
                return int(pipe.execute()[-1])
    except redis.RedisError:
        return None
