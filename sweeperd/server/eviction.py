"""What a server says of eviction: its maxmemory-policy and how many keys it evicted, and
whether the policy may evict a queue's keys."""

from __future__ import annotations

import redis

from sweeperd.server.calls import command
from sweeperd.server.serverinfo import parse_info


def may_evict(policy: str) -> bool:
    """Tell whether a policy may evict any key, a queue's sets and rows included: allkeys-*. The
    volatile-* policies evict keys with a TTL only, and EchoMQ's keys have none."""
    return policy.startswith("allkeys-")


def read_eviction(client: redis.Redis) -> tuple[str, int]:
    """Return the node's maxmemory-policy and evicted_keys, in one INFO call."""
    raw = command(client, "INFO", "memory", "stats")
    fields = parse_info(raw)
    return fields.get("maxmemory_policy", ""), int(fields.get("evicted_keys", "0") or 0)


def eviction_note(node: str, policy: str) -> str:
    """Return what an operator is told of a server whose policy may evict a queue's keys."""
    return (
        f"{node} has maxmemory-policy {policy}: under memory pressure it may evict a queue's "
        "sets or rows, losing jobs without a word; set noeviction (docs/operations.md#alerts)"
    )
