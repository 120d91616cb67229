"""`sweeperd once --dry-run`: what the verb would read now, judged by the model, batch by batch
as the verb would take them. It writes nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import redis

from sweeperd import model
from sweeperd.commands.outcome import OnceResult, said_absent
from sweeperd.constants import METRICS_FAILED_FIELD
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import SweepError, reason_of_text
from sweeperd.server.serverinfo import read_server_info
from sweeperd.verb.executors import Executor

# The slot migrates or moved.
HELD = (redis.exceptions.AskError, redis.exceptions.TryAgainError)


def read_snapshot(
    client: redis.Redis, keys: QueueKeys, now_ms: int, limit: int | None
) -> model.Snapshot:
    """Return what the verb would read now: key types, the selected leases' rows, the failed count.
    A Cluster slot that is migrating refuses the first read as it refuses the sweep (see
    constants.SWEEP_GUARD); any refusal but a key's type (a command the user lacks) raises."""
    client.exists(keys.active, keys.guard)
    pipe = client.pipeline(transaction=False)
    for key in (keys.active, keys.pending, keys.dead, keys.metrics_failed):
        pipe.type(key)
    pipe.hget(keys.metrics_failed, METRICS_FAILED_FIELD)
    *types, count = _checked(pipe.execute(raise_on_error=False))
    key_types = dict(zip(("active", "pending", "dead", "metrics"), map(_text, types), strict=True))
    snapshot = model.Snapshot(key_types=key_types, metrics_count=_bytes_or_none(count))
    if key_types["active"] != "zset":
        return snapshot
    selected = cast(
        list[bytes], client.zrangebyscore(keys.active, "-inf", now_ms, start=0, num=limit or -1)
    )
    pipe = client.pipeline(transaction=False)
    for job_id in selected:
        pipe.type(keys.job(job_id))
        pipe.hgetall(keys.job(job_id))
    rows = _checked(pipe.execute(raise_on_error=False))
    leases = tuple(
        model.Lease(job_id, _row(_text(rows[2 * n]), rows[2 * n + 1]))
        for n, job_id in enumerate(selected)
    )
    return replace(snapshot, leases=leases)


def dry_run(
    client: redis.Redis,
    executor: Executor,
    keys: QueueKeys,
    *,
    max_stalled: int,
    limit: int,
    drain: bool,
) -> OnceResult:
    """Return the model's verdicts on what is due now, batch by batch as the verb would take
    them."""
    info = read_server_info(client)
    result = OnceResult.begun(
        keys, executor, info, dry_run=True, max_stalled=max_stalled, limit=limit
    )
    try:
        snapshot = read_snapshot(client, keys, info.time_ms, None if drain else limit)
    except (*HELD, redis.exceptions.ClusterDownError) as exc:
        result.error, result.left_read = SweepError.of(exc), False
        return result
    batches = [snapshot.leases[i : i + limit] for i in range(0, len(snapshot.leases), limit)]
    for batch in batches or [()]:
        verdict = model.decide(replace(snapshot, leases=batch), info.run_id, max_stalled)
        result.calls += 1
        if isinstance(verdict, model.Refusal):
            result.error = SweepError(reason_of_text(verdict.message), verdict.message)
            # The whole due count: read when the refusal is said.
            result.left_read = False
            break
        result.add(verdict)
        snapshot = _after_deaths(snapshot, len(verdict.dead))
    return said_absent(result, client, keys)


def _after_deaths(snapshot: model.Snapshot, dead: int) -> model.Snapshot:
    """Return the failed count the next batch sees once this batch's dead are counted."""
    if not dead:
        return snapshot
    count = model.string2ll(snapshot.metrics_count or b"0") or 0
    return replace(snapshot, metrics_count=str(count + dead).encode())


def _checked(replies: list[object]) -> list[object]:
    """Return the replies, once none is a refusal other than WRONGTYPE (what the model judges)."""
    for reply in replies:
        if isinstance(reply, redis.ResponseError) and not str(reply).startswith("WRONGTYPE"):
            raise reply
    return replies


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes_or_none(value: object) -> bytes | None:
    return value if isinstance(value, bytes) else None


def _row(kind: str, fields: object) -> model.Row:
    if kind == "none":
        return None
    if kind != "hash" or not isinstance(fields, dict):
        return model.NotAHash(kind)
    return {bytes(k): bytes(v) for k, v in fields.items()}
