"""`sweeperd inspect`: one queue's leases, backlog and server, read without writing."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import redis

from sweeperd.commands.failures import at_node, server_said
from sweeperd.config.settings import QueueSettings, Settings
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.clusternodes import AGAIN, cluster_down
from sweeperd.server.connection import Connection
from sweeperd.server.counts import SORTED_SET, Read, checked, count_reads, counts_of, queue_counts
from sweeperd.server.eviction import read_eviction
from sweeperd.server.serverinfo import has_verb, read_server_info
from sweeperd.server.topology import primary_client


@dataclass(frozen=True)
class Census:
    """What `inspect` shows of one queue. `oldest_overdue_s` is how long the oldest expired lease
    has been overdue; `next_due_s` when the first lease not yet due falls due (None: none ever
    will); `failed` the metrics:failed count (None when not an integer); `exists` whether any of
    the queue's own keys does (see has_keys: false for a typo, a wrong root); `maxmemory_policy`
    the server's (allkeys-* may evict the queue's keys)."""

    queue: str
    active: int
    expired: int
    oldest_overdue_s: float | None
    next_due_s: float | None
    pending: int
    dead: int
    failed: int | None
    run_id: str
    verb_available: bool
    exists: bool
    maxmemory_policy: str = ""


def take_census(client: redis.Redis, keys: QueueKeys) -> Census:
    """Counts read in one round trip, on the server's clock."""
    info = read_server_info(client)
    pipe = client.pipeline(transaction=False)
    pipe.zcount(keys.active, "-inf", info.time_ms)
    pipe.zrangebyscore(keys.active, f"({info.time_ms}", "+inf", start=0, num=1, withscores=True)
    queue_counts(pipe, keys)
    reads = (
        Read("ZCOUNT", keys.active, SORTED_SET),
        Read("ZRANGEBYSCORE", keys.active, SORTED_SET),
        *count_reads(keys),
    )
    expired, upcoming, *replies = checked(pipe.execute(raise_on_error=False), reads)
    counts = counts_of(replies, info.time_ms)
    return Census(
        queue=keys.queue,
        active=counts.active or 0,
        # A ZCOUNT the server did not refuse.
        expired=cast(int, expired),
        oldest_overdue_s=counts.oldest_overdue_s,
        next_due_s=due_in_s(cast(list[tuple[bytes, float]], upcoming), info.time_ms),
        pending=counts.pending or 0,
        dead=counts.dead or 0,
        failed=counts.failed,
        run_id=info.run_id.decode(),
        verb_available=has_verb(client),
        exists=counts.exists,
        maxmemory_policy=read_eviction(client)[0],
    )


def due_in_s(upcoming: list[tuple[bytes, float]], now_ms: int) -> float | None:
    """Return how soon the first lease not due at `now_ms` falls due; None when there is none, or
    its deadline is +inf."""
    if not upcoming or math.isinf(upcoming[0][1]):
        return None
    return (upcoming[0][1] - now_ms) / 1000


def inspect_queue(settings: Settings, queue: QueueSettings) -> Census:
    """Return the census of the queue, read on the primary that holds it now; a Cluster that is down
    is said as `once` says it, naming the primaries whose failure took it down."""
    keys = queue.keys
    connection = settings.connection
    return census_on(connection, primary_client(connection, keys.active), keys)


def census_on(connection: Connection, client: redis.Redis, keys: QueueKeys) -> Census:
    """Return the census read on `client`: a slot that moved since the map was read (MOVED: a
    failover, a reshard) is read where it went, once; a Cluster down is said with the
    primaries whose failure took it down."""
    with at_node(client):
        try:
            return take_census(client, keys)
        except redis.exceptions.MovedError as exc:
            moved = connection.client(exc.node_addr)
        except redis.exceptions.ClusterDownError as exc:
            said = SweepError(Reason.CLUSTER_DOWN, f"CLUSTERDOWN {server_said(exc)}")
            down = cluster_down(said, client)
            raise SweepError(down.reason, f"{down.message}; {AGAIN}") from None
    with at_node(moved):
        return take_census(moved, keys)
