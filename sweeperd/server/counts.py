"""A queue's counts as every command reads them (inspect, top, once's "nothing was due"): the
five reads on a pipeline, and their replies as counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.client import Pipeline

from sweeperd.constants import METRICS_FAILED_FIELD
from sweeperd.keyspace import QueueKeys
from sweeperd.model import string2ll

COUNTS = 5  # the reads of a queue's counts (queue_counts): its five commands


def queue_counts(pipe: Pipeline, keys: QueueKeys) -> None:
    """The reads of a queue's counts, on a pipeline: ZCARD active, its oldest lease (ZRANGE 0
    0 WITHSCORES), ZCARD pending, ZCARD dead, and the metrics:failed count (HGET)."""
    pipe.zcard(keys.active)
    pipe.zrange(keys.active, 0, 0, withscores=True)
    pipe.zcard(keys.pending)
    pipe.zcard(keys.dead)
    pipe.hget(keys.metrics_failed, METRICS_FAILED_FIELD)


@dataclass(frozen=True)
class Counts:
    """A queue's counts as read; None where a read was refused (or a count not an integer)."""

    active: int | None
    oldest_overdue_s: float | None  # how long its oldest expired lease has been overdue
    pending: int | None
    dead: int | None
    failed: int | None  # the metrics:failed count: 0 when missing
    exists: bool  # any of the queue's own keys (keys.absent() says what none means)


def counts_of(replies: Sequence[object], now_ms: int) -> Counts:
    """The replies of queue_counts' reads (an error in place of a refused one), at `now_ms` on
    the server's clock."""
    active, oldest, pending, dead, failed = replies
    return Counts(
        _int(active),
        overdue_s(oldest, now_ms),
        _int(pending),
        _int(dead),
        _failed(failed),
        # Redis keeps no empty sorted set: a count of 0 is no key; the failed count, a field
        exists=bool(_int(active) or _int(pending) or _int(dead)) or isinstance(failed, bytes),
    )


def _int(reply: object) -> int | None:
    return reply if isinstance(reply, int) else None


def _failed(reply: object) -> int | None:
    """The metrics:failed count: a missing one is 0; refused, or not an integer, None."""
    if isinstance(reply, bytes):
        return string2ll(reply)
    return None if isinstance(reply, redis.RedisError) else 0


def has_keys(client: redis.Redis, keys: QueueKeys) -> bool:
    """Whether any of the queue's own keys exists, read with the commands the least ACL user
    has (Counts.exists)."""
    pipe = client.pipeline(transaction=False)
    queue_counts(pipe, keys)
    return counts_of(pipe.execute(), 0).exists


def overdue_s(oldest: object, now_ms: int) -> float | None:
    """How long the lease of `ZRANGE active 0 0 WITHSCORES` has been overdue at `now_ms`; None
    when there is none or it is not due. A -inf deadline counts from 1970."""
    if not (isinstance(oldest, list) and oldest and oldest[0][1] <= now_ms):
        return None
    return float(now_ms - max(oldest[0][1], 0)) / 1000
