"""`sweeperd once`: one queue's manual counted recovery, or its dry run from the model."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import redis

from sweeperd import model
from sweeperd.census import has_keys
from sweeperd.clusternodes import cluster_down, due_count, migrating_to
from sweeperd.connection import Connection
from sweeperd.constants import DEFAULT_CALL_TARGET_MS, METRICS_FAILED_FIELD
from sweeperd.executors import Executor
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError, reason_of_text
from sweeperd.replies import Call, SweepReply, keeps_draining
from sweeperd.rounds import sweep_round
from sweeperd.serverinfo import read_server_info
from sweeperd.sizing import CallSizer
from sweeperd.topology import node_of, slot_of


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
    ghost_ids: list[bytes] = field(default_factory=list)
    calls: int = 0
    left: int = 0  # leases due (at the start) still in active after the last call
    error: SweepError | None = None
    interrupted: bool = False  # Ctrl-C: what is here was done before it
    max_stalled: int = 0  # the budget and call size it used
    limit: int = 0
    at_ms: int = 0  # the server's clock when it started: `left` counts leases due by then
    left_read: bool = True  # False: a refused call did not say what is left (see refused())
    absent: str | None = None  # nothing was due, and none of the queue's own keys exists

    @property
    def refusal(self) -> str:
        """Which call was refused, and that it wrote nothing (a dry run says it of the call the
        real one would make)."""
        if self.calls <= 1:
            return "refused, nothing written"
        return f"call {self.calls} refused, nothing written by it"

    @property
    def still_due(self) -> str:
        if not self.left_read:
            return "what is due unreadable"
        return f"{self.left} lease{'' if self.left == 1 else 's'} still due"

    @property
    def taken(self) -> int:
        return len(self.recovered) + len(self.dead) + self.ghosts

    def add(self, reply: SweepReply | model.Plan) -> None:
        self.recovered += reply.recovered
        self.dead += reply.dead
        self.exempt += reply.exempt
        self.ghosts += reply.ghosts if isinstance(reply, SweepReply) else len(reply.ghosts)
        self.ghost_ids += reply.ghost_ids if isinstance(reply, SweepReply) else reply.ghosts


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
    the call in flight, which is read and counted, with what was done so far. A refused call
    ends it too; `left` is then what is still due, when the refused call could read it."""
    info = read_server_info(client)
    result = OnceResult(keys.queue, executor.name, info.run_id.decode(), dry_run=False,
                        max_stalled=max_stalled, limit=limit, at_ms=info.time_ms)  # fmt: skip
    sizer = CallSizer(call_target_ms / 1000)
    with interrupts_deferred() as interrupted:
        while not interrupted():
            size = sizer.next(limit) if adaptive else limit
            started = clock()
            [done] = sweep_round(client, executor, [Call(keys, max_stalled, size, info.time_ms)])
            result.calls += 1
            if isinstance(done.reply, SweepError):
                result.error, result.left = done.reply, done.expired_left or 0
                result.left_read = done.expired_left is not None
                break
            result.left = done.expired_left or 0
            sizer.observe(size, done.reply.taken, done.seconds(clock() - started))
            result.add(done.reply)
            if progress is not None:
                progress(result)
            if not (drain and keeps_draining(done)):
                break
        result.interrupted = interrupted()
    return said_absent(result, client, keys)


def said_absent(result: OnceResult, client: redis.Redis, keys: QueueKeys) -> OnceResult:
    """Nothing was due, nothing refused or interrupted: whether the queue has a key at all is
    said too (a typo of its name or of --prefix-root looks like nothing due)."""
    quiet = result.error is None and not result.interrupted and not result.taken
    if quiet and not has_keys(client, keys):
        result.absent = keys.absent()
    return result


@contextmanager
def interrupts_deferred() -> Iterator[Callable[[], bool]]:
    """A first Ctrl-C in the block is noted, not raised, so that the call in flight is read
    and counted (a call interrupted mid-read ran on the server, and its ids would be missing
    from the result); the block asks whether one came. A second Ctrl-C raises as usual."""
    noted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield noted.is_set
        return

    def note(signum: int, frame: object) -> None:
        if noted.is_set():
            raise KeyboardInterrupt
        noted.set()

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield noted.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def refused(
    result: OnceResult, client: redis.Redis, connection: Connection, keys: QueueKeys
) -> SweepError:
    """The refusal that ended `result`, as the operator needs it: what refused (the failed
    nodes of a Cluster that is down, where a migrating slot goes), that the refused call wrote
    nothing, and how many leases are still due."""
    error = result.error
    assert error is not None
    if not result.left_read:
        due = due_count(connection, client, keys.active, result.at_ms)
        taken = result.taken if result.dry_run else 0  # what the real calls before would take
        result.left, result.left_read = max(0, (due or 0) - taken), due is not None
    if error.reason is Reason.CLUSTER_DOWN:
        error = cluster_down(error, client)
    if error.reason is Reason.MIGRATING:
        slot = slot_of(keys.active)
        target = migrating_to(client, slot)
        return SweepError(
            error.reason,
            f"{node_of(client)} holds slot {slot} of {result.queue} while it migrates"
            f"{f' to {target}' if target else ''}: {result.refusal}, {result.still_due}; run it "
            "again once the slot has moved",
        )
    moved = error.message.split() if error.message.startswith("MOVED ") else []
    if len(moved) == 3:  # MOVED <slot> <host:port>: the slot map changed while once ran
        return SweepError(
            error.reason,
            f"{node_of(client)} sent slot {moved[1]} of {result.queue} to {moved[2]} (MOVED: "
            f"the slot moved while once ran): {result.refusal}, {result.still_due}; run it again",
        )
    return SweepError(error.reason, f"{error.message}: {result.refusal}, {result.still_due}")


def read_snapshot(
    client: redis.Redis, keys: QueueKeys, now_ms: int, limit: int | None
) -> model.Snapshot:
    """What the verb would read now: key types, the selected leases' rows, the failed count.
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
    selected: list[bytes] = client.zrangebyscore(  # type: ignore[assignment]
        keys.active, "-inf", now_ms, start=0, num=limit or -1
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
    """The model's verdicts on what is due now, batch by batch as the verb would take them."""
    info = read_server_info(client)
    result = OnceResult(keys.queue, executor.name, info.run_id.decode(), dry_run=True,
                        max_stalled=max_stalled, limit=limit, at_ms=info.time_ms)  # fmt: skip
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
            result.left_read = False  # the whole due count: read when the refusal is said
            break
        result.add(verdict)
        snapshot = _after_deaths(snapshot, len(verdict.dead))
    return said_absent(result, client, keys)


HELD = (redis.exceptions.AskError, redis.exceptions.TryAgainError)  # the slot migrates or moved


def _after_deaths(snapshot: model.Snapshot, dead: int) -> model.Snapshot:
    """The failed count the next batch sees once this batch's dead are counted."""
    if not dead:
        return snapshot
    count = model.string2ll(snapshot.metrics_count or b"0") or 0
    return replace(snapshot, metrics_count=str(count + dead).encode())


def _checked(replies: list[object]) -> list[object]:
    """The replies, once none is a refusal other than WRONGTYPE (what the model judges)."""
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
