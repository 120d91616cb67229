"""One pipelined round trip to a node: a sweep per queue, and what is still expired after it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from sweeperd.executors import Executor
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import SweepError


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
class CallResult:
    """A call's reply or its error, and how many leases due by `now_ms` are still active."""

    call: Call
    reply: SweepReply | SweepError
    expired_left: int | None = None

    @property
    def ok(self) -> bool:
        return isinstance(self.reply, SweepReply)


def _send(client: redis.Redis, executor: Executor, calls: Sequence[Call]) -> list[object]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        executor.queue(pipe, call.keys, call.max_stalled, call.limit)
        pipe.zcount(call.keys.active, "-inf", call.now_ms)
    return list(pipe.execute(raise_on_error=False))


def _result(call: Call, raw: object, left: object) -> CallResult:
    expired_left = left if isinstance(left, int) else None
    if isinstance(raw, BaseException):
        return CallResult(call, SweepError.of(raw), expired_left)
    try:
        return CallResult(call, SweepReply.parse(raw), expired_left)
    except ValueError as exc:
        return CallResult(call, SweepError.of(exc), expired_left)


def sweep_round(client: redis.Redis, executor: Executor, calls: Sequence[Call]) -> list[CallResult]:
    """Every call in one round trip; a script the server lost is loaded and its calls re-sent.

    A connection failure raises (the whole node is down); an error reply is one call's result.
    """
    if not calls:
        return []
    raw = _send(client, executor, calls)
    results = [_result(c, raw[2 * i], raw[2 * i + 1]) for i, c in enumerate(calls)]
    lost = [i for i in range(len(calls)) if isinstance(raw[2 * i], redis.exceptions.NoScriptError)]
    if lost:
        executor.prepare(client)
        again = _send(client, executor, [calls[i] for i in lost])
        for n, i in enumerate(lost):
            results[i] = _result(calls[i], again[2 * n], again[2 * n + 1])
    return results


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
