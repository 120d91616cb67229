"""`sweeperd inspect`: one queue's leases, backlog and server, read without writing."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from sweeperd.constants import METRICS_FAILED_FIELD
from sweeperd.keyspace import QueueKeys
from sweeperd.model import string2ll
from sweeperd.serverinfo import has_verb, read_server_info


@dataclass(frozen=True)
class Census:
    queue: str
    active: int
    expired: int
    oldest_overdue_s: float | None  # how long the oldest expired lease has been overdue
    pending: int
    dead: int
    failed: int | None  # the queue's metrics:failed count; None when it is not an integer
    run_id: str
    verb_available: bool
    exists: bool  # any of the queue's own keys (see has_keys): false for a typo, a wrong root


def take_census(client: redis.Redis, keys: QueueKeys) -> Census:
    """Counts read in one round trip, on the server's clock."""
    info = read_server_info(client)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.active)
    pipe.zcount(keys.active, "-inf", info.time_ms)
    pipe.zrange(keys.active, 0, 0, withscores=True)
    pipe.zcard(keys.pending)
    pipe.zcard(keys.dead)
    pipe.hget(keys.metrics_failed, METRICS_FAILED_FIELD)
    active, expired, oldest, pending, dead, failed = pipe.execute()
    return Census(
        queue=keys.queue,
        active=active,
        expired=expired,
        oldest_overdue_s=overdue_s(oldest, info.time_ms),
        pending=pending,
        dead=dead,
        failed=string2ll(failed) if failed is not None else 0,
        run_id=info.run_id.decode(),
        verb_available=has_verb(client),
        exists=bool(active or pending or dead) or failed is not None,
    )


def has_keys(client: redis.Redis, keys: QueueKeys) -> bool:
    """Whether any of the queue's own keys exists (keys.absent() says what none means), read
    with the commands the least ACL user has: Redis keeps no empty sorted set, so a ZCARD of 0
    is no key; the failed count is one hash field."""
    pipe = client.pipeline(transaction=False)
    for key in (keys.active, keys.pending, keys.dead):
        pipe.zcard(key)
    pipe.hget(keys.metrics_failed, METRICS_FAILED_FIELD)
    *sizes, failed = pipe.execute()
    return any(sizes) or failed is not None


def overdue_s(oldest: object, now_ms: int) -> float | None:
    """How long the lease of `ZRANGE active 0 0 WITHSCORES` has been overdue at `now_ms`; None
    when there is none or it is not due. A -inf deadline counts from 1970."""
    if not (isinstance(oldest, list) and oldest and oldest[0][1] <= now_ms):
        return None
    return float(now_ms - max(oldest[0][1], 0)) / 1000
