"""One pipelined round trip to a node: a sweep per queue, and the queue's counts after it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from sweeperd.executors import Executor
from sweeperd.keyspace import QueueKeys
from sweeperd.model import string2ll
from sweeperd.reasons import SweepError
from sweeperd.scripts import QUEUE_STATS


@dataclass(frozen=True)
class Call:
    """One sweep of one queue; `now_ms` (server clock) bounds the count of what is left."""

    keys: QueueKeys
    max_stalled: int
    limit: int
    now_ms: int


@dataclass(frozen=True)
class SweepReply:
    """The verb's reply: recovered ids (exempt included), then dead ids, in selection order."""

    recovered: tuple[bytes, ...] = ()
    dead: tuple[bytes, ...] = ()

    @classmethod
    def parse(cls, raw: object) -> SweepReply:
        if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(a, list) for a in raw)):
            raise ValueError(f"EMQ.STALLED.CHECK replied {raw!r}, not two arrays")
        recovered, dead = raw
        return cls(tuple(recovered), tuple(dead))


@dataclass(frozen=True)
class Depths:
    """A queue's counts right after its sweep; `expired` counts leases due by the call's now."""

    expired: int
    active: int
    pending: int
    dead: int
    failed: int | None  # the metrics:failed count; None when it is not an integer

    @classmethod
    def parse(cls, raw: object) -> Depths | None:
        if not (isinstance(raw, list) and len(raw) == 5):
            return None  # a key of the wrong type: the sweep's own error says which
        expired, active, pending, dead, failed = raw
        count = string2ll(failed) if isinstance(failed, bytes) else 0
        return cls(expired, active, pending, dead, count)


@dataclass(frozen=True)
class CallResult:
    """A call's reply or its error, and the queue's counts after it."""

    call: Call
    reply: SweepReply | SweepError
    depths: Depths | None = None

    @property
    def expired_left(self) -> int | None:
        return None if self.depths is None else self.depths.expired


def _send(
    client: redis.Redis, executor: Executor, calls: Sequence[Call], *, sweep: Sequence[bool]
) -> list[object]:
    """Each call's stats, after its sweep where `sweep` says so: replies in that order."""
    pipe = client.pipeline(transaction=False)
    for call, with_sweep in zip(calls, sweep, strict=True):
        k = call.keys
        if with_sweep:
            executor.queue(pipe, k, call.max_stalled, call.limit)
        pipe.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA", QUEUE_STATS.sha, 4, k.active, k.pending, k.dead, k.metrics_failed,
            call.now_ms,
        )  # fmt: skip
    return list(pipe.execute(raise_on_error=False))


def _result(call: Call, raw: object, stats: object) -> CallResult:
    depths = Depths.parse(stats)
    if isinstance(raw, BaseException):
        return CallResult(call, SweepError.of(raw), depths)
    try:
        return CallResult(call, SweepReply.parse(raw), depths)
    except ValueError as exc:
        return CallResult(call, SweepError.of(exc), depths)


def _lost(reply: object) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)


def sweep_round(client: redis.Redis, executor: Executor, calls: Sequence[Call]) -> list[CallResult]:
    """Every call in one round trip; scripts the server lost are loaded and sent again.

    A sweep refused with NOSCRIPT wrote nothing and is sent again; a sweep that ran is never
    repeated, only its stats are. A connection failure raises (the whole node is down); an
    error reply is one call's result.
    """
    if not calls:
        return []
    raw = _send(client, executor, calls, sweep=[True] * len(calls))
    replies, stats = raw[0::2], raw[1::2]
    again = [i for i in range(len(calls)) if _lost(replies[i]) or _lost(stats[i])]
    if again:
        executor.prepare(client)
        QUEUE_STATS.load(client)
        resend = [_lost(replies[i]) for i in again]
        fresh = iter(_send(client, executor, [calls[i] for i in again], sweep=resend))
        for i, with_sweep in zip(again, resend, strict=True):
            if with_sweep:
                replies[i] = next(fresh)
            stats[i] = next(fresh)
    return [_result(c, replies[i], stats[i]) for i, c in enumerate(calls)]


def read_exempt(
    client: redis.Redis, recovered: Sequence[tuple[QueueKeys, bytes]], epoch: bytes
) -> set[tuple[str, bytes]]:
    """Which recovered rows carry a lease_epoch other than `epoch`: best effort, read after."""
    if not recovered:
        return set()
    pipe = client.pipeline(transaction=False)
    for keys, job_id in recovered:
        pipe.hget(keys.job(job_id), "lease_epoch")
    epochs = pipe.execute(raise_on_error=False)
    return {
        (keys.queue, job_id)
        for (keys, job_id), seen in zip(recovered, epochs, strict=True)
        if isinstance(seen, bytes) and seen != epoch
    }
