"""`sweeperd once`: one queue's manual counted recovery, from finding its primary to saying
what a refusal means; the dry run is dryrun.py's."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from sweeperd.commands.dryrun import dry_run
from sweeperd.commands.failures import at_node, loading
from sweeperd.commands.outcome import OnceResult, OnProgress, said_absent
from sweeperd.config.settings import QueueSettings, Settings
from sweeperd.constants import DEFAULT_CALL_TARGET_MS
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.clusternodes import AGAIN, cluster_down, due_count, migrating_to
from sweeperd.server.connection import Connection
from sweeperd.server.serverinfo import read_server_info
from sweeperd.server.topology import node_of, primary_client, slot_of
from sweeperd.verb.executors import Executor, choose
from sweeperd.verb.replies import Call, keeps_draining
from sweeperd.verb.rounds import sweep_round
from sweeperd.verb.sizing import CallSizer


def recover(
    settings: Settings,
    queue: QueueSettings,
    *,
    dry: bool,
    drain: bool,
    adaptive: bool,
    progress: OnProgress | None = None,
) -> OnceResult:
    """Run the whole of `once`: find the queue's primary, choose its executor, make the sweep (or
    its dry run), and say a refusal that ended it as the operator needs it. A server that cannot
    be reached, or refuses before the first call, raises (redis.RedisError, SweepError)."""
    connection = settings.connection
    keys = queue.keys
    client = primary_client(connection, keys.active)
    with at_node(client):  # a failure from here on is the primary's, named so
        chosen = choose(client, settings.executor)
        if dry:
            result = dry_run(
                client, chosen, keys, max_stalled=queue.max_stalled, limit=queue.limit, drain=drain
            )
        else:
            result = counted_sweep(
                settings, queue, client, chosen, drain=drain, adaptive=adaptive, progress=progress
            )
        result.max_stalled_default = not queue.budget_given
        if result.error is not None:
            result.error = refused(result, client, connection, keys)
        return result


def counted_sweep(
    settings: Settings,
    queue: QueueSettings,
    client: redis.Redis,
    executor: Executor,
    *,
    drain: bool,
    adaptive: bool,
    progress: OnProgress | None = None,
) -> OnceResult:
    """Sweep the queue on `client`, counted, as its settings say: its max_stalled and limit, the
    call target; `once` and `audit --repair` sweep so."""
    return sweep(
        client,
        executor,
        queue.keys,
        max_stalled=queue.max_stalled,
        limit=queue.limit,
        drain=drain,
        adaptive=adaptive,
        call_target_ms=settings.call_target_ms,
        progress=progress,
    )


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
    progress: OnProgress | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> OnceResult:
    """Send the verb once, `limit` leases at most; with `drain`, again until no lease due when
    it started is left. Calls take `limit` leases each (what a dry run predicts) or, `adaptive`,
    as many as keep a call under `call_target_ms`, never more than `limit`. Ctrl-C ends it after
    the call in flight, which is read and counted, with what was done so far. A refused call
    ends it too; `left` is then what is still due, when the refused call could read it."""
    info = read_server_info(client)
    result = OnceResult.begun(
        keys, executor, info, dry_run=False, max_stalled=max_stalled, limit=limit
    )
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


@contextmanager
def interrupts_deferred() -> Iterator[Callable[[], bool]]:
    """Note a first Ctrl-C in the block instead of raising it, so that the call in flight is read
    and counted (a call interrupted mid-read ran on the server, and its ids would be missing from
    the result); the block asks whether one came. A second Ctrl-C raises as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    noted = [False]  # not an Event: a handler that takes a lock can deadlock (see signals.py)

    def note(signum: int, frame: object) -> None:
        if noted[0]:
            raise KeyboardInterrupt
        noted[0] = True

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield lambda: noted[0]
    finally:
        signal.signal(signal.SIGINT, previous)


def refused(
    result: OnceResult, client: redis.Redis, connection: Connection, keys: QueueKeys
) -> SweepError:
    """Say the refusal that ended `result` as the operator needs it: what refused (the failed
    nodes of a Cluster that is down, where a migrating slot goes), that the refused call wrote
    nothing, and how many leases are still due."""
    error = result.error
    assert error is not None
    if not result.left_read:
        due = due_count(connection, client, keys.active, result.at_ms)
        taken = result.taken if result.dry_run else 0  # what the real calls before would take
        result.left, result.left_read = max(0, (due or 0) - taken), due is not None
    if error.reason is Reason.CLUSTER_DOWN:
        said = cluster_down(error, client).message
        return SweepError(error.reason, f"{said}: {result.refusal}, {result.still_due}; {AGAIN}")
    if error.reason is Reason.LOADING:
        said = f"{result.refusal}, {result.still_due}"
        return SweepError(error.reason, loading(node_of(client), error.message, said))
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
    if error.reason is Reason.NOPERM and node_of(client) != connection.node:  # users are per node
        error = SweepError(error.reason, f"{node_of(client)}: {error.message}")
    return SweepError(error.reason, f"{error.message}: {result.refusal}, {result.still_due}")
