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
from sweeperd.reasons import Reason, SweepError

# The reads of a queue's counts (queue_counts): its five commands.
COUNTS = 5
# The types of a queue's keys (docs/keyspace.md)
SORTED_SET, HASH = "sorted set", "hash"
KEYSPACE_PAGE = "docs/keyspace.md#a-queues-keys"


@dataclass(frozen=True)
class Read:
    """One read of a queue's key: the command, the key, and the type the key must hold."""

    command: str
    key: str
    kind: str


def count_reads(keys: QueueKeys) -> tuple[Read, ...]:
    """Return what queue_counts reads, in its order."""
    return (
        Read("ZCARD", keys.active, SORTED_SET),
        Read("ZRANGE", keys.active, SORTED_SET),
        Read("ZCARD", keys.pending, SORTED_SET),
        Read("ZCARD", keys.dead, SORTED_SET),
        Read("HGET", keys.metrics_failed, HASH),
    )


def queue_counts(pipe: Pipeline, keys: QueueKeys) -> None:
    """Queue the reads of a queue's counts on a pipeline: ZCARD active, its oldest lease (ZRANGE 0
    0 WITHSCORES), ZCARD pending, ZCARD dead, and the metrics:failed count (HGET)."""
    pipe.zcard(keys.active)
    pipe.zrange(keys.active, 0, 0, withscores=True)
    pipe.zcard(keys.pending)
    pipe.zcard(keys.dead)
    pipe.hget(keys.metrics_failed, METRICS_FAILED_FIELD)


def checked(replies: Sequence[object], reads: Sequence[Read]) -> Sequence[object]:
    """Return the replies of a pipeline run without raising, once none is a refusal: the first one
    raises, a key of the wrong type said by its name and the type it must hold, any other
    refusal with the command and key it was (a NOPERM's key is said from there)."""
    for number, (reply, read) in enumerate(zip(replies, reads, strict=True), start=1):
        if isinstance(reply, redis.ResponseError):
            if str(reply).startswith("WRONGTYPE"):
                raise SweepError(
                    Reason.WRONGTYPE,
                    f"{read.key} is not a {read.kind} ({read.command}: {reply}); see "
                    f"{KEYSPACE_PAGE}",
                )
            # Named as redis-py names a pipelined command that failed when it raises: what
            # says a refusal (a NOPERM's key) reads the command and its key from there.
            reply.args = (
                f"Command # {number} ({read.command} {read.key}) of pipeline caused error: "
                f"{reply.args[0] if reply.args else reply}",
                *reply.args[1:],
            )
            raise reply
    return replies


@dataclass(frozen=True)
class Counts:
    """A queue's counts as read; None where a read was refused (or a count not an integer)."""

    active: int | None
    # How long its oldest expired lease has been overdue.
    oldest_overdue_s: float | None
    pending: int | None
    dead: int | None
    # The metrics:failed count: 0 when missing.
    failed: int | None
    # Any of the queue's own keys (keys.absent() says what none means)
    exists: bool


def counts_of(replies: Sequence[object], now_ms: int) -> Counts:
    """Return the replies of queue_counts' reads (an error in place of a refused one), at `now_ms`
    on the server's clock."""
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
    """Return the metrics:failed count: a missing one is 0; refused, or not an integer, None."""
    if isinstance(reply, bytes):
        return string2ll(reply)
    return None if isinstance(reply, redis.RedisError) else 0


def has_keys(client: redis.Redis, keys: QueueKeys) -> bool:
    """Tell whether any of the queue's own keys exists, read with the commands the least ACL user
    has (Counts.exists)."""
    pipe = client.pipeline(transaction=False)
    queue_counts(pipe, keys)
    return counts_of(checked(pipe.execute(raise_on_error=False), count_reads(keys)), 0).exists


def overdue_s(oldest: object, now_ms: int) -> float | None:
    """Return how long the lease of `ZRANGE active 0 0 WITHSCORES` has been overdue at `now_ms`;
    None when there is none or it is not due. A -inf deadline counts from 1970."""
    if not (isinstance(oldest, list) and oldest and oldest[0][1] <= now_ms):
        return None
    return float(now_ms - max(oldest[0][1], 0)) / 1000
