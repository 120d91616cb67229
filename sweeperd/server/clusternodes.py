"""What a Cluster node says of the others: which primaries failed (a Cluster down), where a
migrating slot goes, and how many leases are due where a queue's key is now."""

from __future__ import annotations

import redis

from sweeperd.reasons import Reason, SweepError
from sweeperd.server.calls import command
from sweeperd.server.connection import Connection


def cluster_nodes(client: redis.Redis) -> list[list[str]]:
    """CLUSTER NODES, a list of fields per node (id, address, flags, primary, ..., slots)."""
    raw = command(client, "CLUSTER", "NODES")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return [line.split() for line in text.splitlines() if line.strip()]


def _address(fields: list[str]) -> str:
    return fields[1].split("@", 1)[0]


# The ending of a one-off command's refusal.
AGAIN = "run it again once the cluster is up"
# A node the Cluster cannot reach.
DOWN_FLAGS = frozenset({"fail", "fail?", "noaddr"})


def failed_primaries(nodes: list[list[str]]) -> list[str]:
    """Return the primaries the Cluster marks failed (fail, not fail?) that still hold slots (no
    replica took over), as host:port: a failed replica, or a primary whose replica took its
    slots, took nothing down."""
    return sorted(_address(f) for f in _failed(nodes))


def _failed(nodes: list[list[str]]) -> list[list[str]]:
    return [f for f in nodes if {"master", "fail"} <= set(f[2].split(",")) and f[8:]]


def _replicas(nodes: list[list[str]], primary: list[str]) -> tuple[list[str], list[str]]:
    """Return a primary's replicas as CLUSTER NODES lists them: those up, and those down too."""
    up: list[str] = []
    down: list[str] = []
    for f in nodes:
        if f[3] == primary[0]:
            (down if DOWN_FLAGS & set(f[2].split(",")) else up).append(_address(f))
    return sorted(up), sorted(down)


def why_down(nodes: list[list[str]]) -> str:
    """Return which primaries took the Cluster down and why no replica has taken their slots: it is
    down too, there is none, or one is up and has not yet (a failover takes about
    cluster-node-timeout); what to do, when waiting will not do."""
    said, stuck = [], False
    for primary in sorted(_failed(nodes), key=_address):
        up, down = _replicas(nodes, primary)
        name = _address(primary)
        if up:
            said.append(f"{name} failed, and no replica has taken over yet ({', '.join(up)} is up)")
            continue
        stuck = True
        if down:
            which = (
                f"its replica {down[0]} is"
                if len(down) == 1
                else f"its replicas {', '.join(down)} are"
            )
            said.append(f"{name} failed, and {which} down too")
        else:
            said.append(f"{name} failed, and it has no replica")
    if not said:
        return ""
    advice = (
        "start the failed nodes again (a replica that is up takes over), or move their slots "
        "to a primary that is up"
        if stuck
        else "a replica takes over within about cluster-node-timeout, and the Cluster is up again"
    )
    return f": {'; '.join(said)}: {advice}"


def cluster_down(error: SweepError, client: redis.Redis) -> SweepError:
    """CLUSTERDOWN, with the nodes whose failure took the Cluster down when the node says, why
    no replica took over and what to do."""
    try:
        which = why_down(cluster_nodes(client))
    except redis.RedisError:
        which = ""
    return SweepError(Reason.CLUSTER_DOWN, f"the cluster is down ({error.message}){which}")


def migrating_to(client: redis.Redis, slot: int) -> str | None:
    """Return where the node `client` speaks to is migrating `slot` (its `[slot->-id]`), or None
    (not migrating, or not said)."""
    try:
        nodes = cluster_nodes(client)
    except redis.RedisError:
        return None
    mine = next((f for f in nodes if "myself" in f[2].split(",")), None)
    marker = f"[{slot}->-"
    target = next((s[len(marker) : -1] for s in (mine or [])[8:] if s.startswith(marker)), None)
    return next((_address(f) for f in nodes if f[0] == target), None)


def due_count(connection: Connection, client: redis.Redis, key: str, bound_ms: int) -> int | None:
    """Return how many leases of the active set `key` are due by `bound_ms`, read where the key is
    now (a migrating slot's ASK followed once, with ASKING); None when it cannot be read."""
    try:
        try:
            return int(client.zcount(key, "-inf", bound_ms))
        except redis.exceptions.AskError as exc:
            # MovedError is one too.
            with connection.client(exc.node_addr) as there:
                pipe = there.pipeline(transaction=False)
                if not isinstance(exc, redis.exceptions.MovedError):
                    pipe.execute_command("ASKING")
                pipe.zcount(key, "-inf", bound_ms)
                return int(pipe.execute()[-1])
    except redis.RedisError:
        return None
