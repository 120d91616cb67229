"""`sweeperd once`: one queue's manual counted recovery, or its dry run from the model."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import redis

from sweeperd import model
from sweeperd.constants import DEFAULT_CALL_TARGET_MS, METRICS_FAILED_FIELD
from sweeperd.executors import Executor
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import SweepError, reason_of_text
from sweeperd.rounds import Call, SweepReply, keeps_draining, sweep_round
from sweeperd.serverinfo import read_server_info
from sweeperd.sizing import CallSizer


@dataclass
class OnceResult:
    """What one `once` did (or, dry, would do); `error` ends it early, after `calls` calls."""

    queue: str
    executor: str
    run_id: str
    dry_run: bool
    recovered: list[bytes] = field(default_factory=list)
    dead: list[bytes] = field(default_factory=list)
    exempt: list[bytes] = field(default_factory=list)
    ghosts: int = 0  # ids removed from active that had no row
    calls: int = 0
    left: int = 0  # leases due (at the start) still in active after the last call
    error: SweepError | None = None
    interrupted: bool = False  # Ctrl-C: what is here was done before it

    def add(self, reply: SweepReply | model.Plan) -> None:
        self.recovered += reply.recovered
        self.dead += reply.dead
        self.exempt += reply.exempt
        self.ghosts += reply.ghosts if isinstance(reply, SweepReply) else len(reply.ghosts)


Progress = Callable[[OnceResult], None]


def sweep(
    client: redis.Redis,
    executor: Executor,
    keys: QueueKeys,
    *,
    max_stalled: int,
    limit: int,
    drain: bool,
    adaptive: bool = False,
    call_target_ms: float = DEFAULT_CALL_TARGET_MS,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> OnceResult:
    """Send the verb once, `limit` leases at most; with `drain`, again until no lease due when
    it started is left. Calls take `limit` leases each (what a dry run predicts) or, `adaptive`,
    as many as keep a call under `call_target_ms`, never more than `limit`. Ctrl-C ends it after
    the call in flight with what was done so far."""
    info = read_server_info(client)
    result = OnceResult(keys.queue, executor.name, info.run_id.decode(), dry_run=False)
    sizer = CallSizer(call_target_ms / 1000)
    try:
        while True:
            size = sizer.next(limit) if adaptive else limit
            started = clock()
            [done] = sweep_round(client, executor, [Call(keys, max_stalled, size, info.time_ms)])
            result.calls += 1
            if isinstance(done.reply, SweepError):
                result.error = done.reply
                break
            sizer.observe(size, done.reply.taken, done.seconds(clock() - started))
            result.add(done.reply)
            result.left = done.expired_left or 0
            if progress is not None:
                progress(result)
            if not (drain and keeps_draining(done)):
                break
    except KeyboardInterrupt:
        result.interrupted = True
    return result


def read_snapshot(
    client: redis.Redis, keys: QueueKeys, now_ms: int, limit: int | None
) -> model.Snapshot:
    """What the verb would read now: key types, the selected leases' rows, the failed count."""
    pipe = client.pipeline(transaction=False)
    for key in (keys.active, keys.pending, keys.dead, keys.metrics_failed):
        pipe.type(key)
    pipe.hget(keys.metrics_failed, METRICS_FAILED_FIELD)
    *types, count = pipe.execute(raise_on_error=False)
    key_types = dict(zip(("active", "pending", "dead", "metrics"), map(_text, types), strict=True))
    snapshot = model.Snapshot(key_types=key_types, metrics_count=_bytes_or_none(count))
    if key_types["active"] != "zset":
        return snapshot
    selected: list[bytes] = client.zrangebyscore(  # type: ignore[assignment]
        keys.active, "-inf", now_ms, start=0, num=limit or -1
    )
    pipe = client.pipeline(transaction=False)
    for job_id in selected:
        pipe.type(keys.job(job_id))
        pipe.hgetall(keys.job(job_id))
    rows = pipe.execute(raise_on_error=False)
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
    """The model's verdicts on what is due now, batch by batch as the verb would take them."""
    info = read_server_info(client)
    result = OnceResult(keys.queue, executor.name, info.run_id.decode(), dry_run=True)
    snapshot = read_snapshot(client, keys, info.time_ms, None if drain else limit)
    batches = [snapshot.leases[i : i + limit] for i in range(0, len(snapshot.leases), limit)]
    for batch in batches or [()]:
        verdict = model.decide(replace(snapshot, leases=batch), info.run_id, max_stalled)
        result.calls += 1
        if isinstance(verdict, model.Refusal):
            result.error = SweepError(reason_of_text(verdict.message), verdict.message)
            break
        result.add(verdict)
        snapshot = _after_deaths(snapshot, len(verdict.dead))
    return result


def _after_deaths(snapshot: model.Snapshot, dead: int) -> model.Snapshot:
    """The failed count the next batch sees once this batch's dead are counted."""
    if not dead:
        return snapshot
    count = model.string2ll(snapshot.metrics_count or b"0") or 0
    return replace(snapshot, metrics_count=str(count + dead).encode())


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
