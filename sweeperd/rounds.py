"""Sweeps sent to a node: a round of one call per queue in one round trip, or a drain's call
whose reply is read once the call before it has been counted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.connection import Connection

from sweeperd.acl import refused_command
from sweeperd.executors import Executor
from sweeperd.keyspace import QueueKeys
from sweeperd.model import string2ll
from sweeperd.reasons import REDIRECTS, Reason, SweepError


@dataclass(frozen=True, slots=True)
class Call:
    """One sweep of one queue; `bound_ms` (server clock, 0 = the call's now) bounds `expired`;
    `listed` caps the ids the reply lists (0 = every id; the counts stay whole)."""

    keys: QueueKeys
    max_stalled: int
    limit: int
    bound_ms: int = 0
    listed: int = 0


@dataclass(frozen=True, slots=True)
class SweepReply:
    """What one call did: recovered ids (exempt included) and dead ids in selection order, the
    recovered ids whose lease predates the server's run_id, and ids removed that had no row.
    A call that listed only its first ids (Call.listed) carries the whole counts in `counts`."""

    recovered: tuple[bytes, ...] = ()
    dead: tuple[bytes, ...] = ()
    exempt: tuple[bytes, ...] = ()
    ghosts: int = 0
    counts: tuple[int, int, int] | None = None  # recovered, dead, exempt when the lists are cut
    ghost_ids: tuple[bytes, ...] = ()  # the ghosts among the first `listed` ids the call took

    @property
    def sizes(self) -> tuple[int, int, int]:
        """How many were recovered, dead and exempt, listed or not."""
        if self.counts is not None:
            return self.counts
        return len(self.recovered), len(self.dead), len(self.exempt)

    @property
    def taken(self) -> int:
        """Leases the call removed from active."""
        recovered, dead, _ = self.sizes
        return recovered + dead + self.ghosts

    @classmethod
    def parse(cls, raw: object) -> SweepReply:
        if raw == NOTHING_RAW:  # most calls: nothing was due
            return NOTHING
        if not (isinstance(raw, list) and len(raw) in (5, 8) and isinstance(raw[3], int)):
            raise ValueError(f"the sweep replied {raw!r}, not its five or eight parts")
        recovered, dead, exempt, ghosts, ghost_ids, *counts = raw
        whole = (counts[0], counts[1], counts[2]) if counts else None
        return cls(tuple(recovered), tuple(dead), tuple(exempt), ghosts, whole, tuple(ghost_ids))


NOTHING = SweepReply()
NOTHING_RAW = [[], [], [], 0, []]  # the sweep's reply when it took nothing


@dataclass(frozen=True, slots=True)
class Depths:
    """A queue's numbers right after its sweep, on the server's clock (`now_ms`)."""

    run_id: bytes
    now_ms: int
    expired: int  # leases due by the call's bound
    active: int
    pending: int
    dead: int
    failed: int | None  # the metrics:failed count; None when it is not an integer
    oldest_expired_ms: float | None  # deadline of the oldest lease due now; None when none
    server_us: int = 0  # how long the call ran on the server, in microseconds

    @property
    def oldest_expired_age_s(self) -> float:
        """How long the oldest expired lease has been overdue; a -inf deadline counts from 1970."""
        if self.oldest_expired_ms is None:
            return 0.0
        return (self.now_ms - max(self.oldest_expired_ms, 0.0)) / 1000

    @classmethod
    def parse(cls, raw: object) -> Depths | None:
        if not (isinstance(raw, list) and len(raw) == 9):
            return None
        run_id, now_ms, expired, active, pending, dead, failed, oldest, server_us = raw
        if not (
            isinstance(expired, int)
            and isinstance(active, int)
            and isinstance(pending, int)
            and isinstance(dead, int)
        ):
            return None  # a key of the wrong type: the sweep's own error says which
        return cls(
            run_id,
            now_ms,
            expired,
            active,
            pending,
            dead,
            string2ll(failed) if isinstance(failed, bytes) else 0,
            float(oldest) if isinstance(oldest, bytes) else None,
            server_us,
        )


@dataclass(frozen=True, slots=True)
class CallResult:
    """A call's reply or its error, and the queue's numbers after it."""

    call: Call
    reply: SweepReply | SweepError
    depths: Depths | None = None

    @property
    def redirect(self) -> Reason | None:
        """MOVED: a Cluster node serves the queue's slot elsewhere; MIGRATING: it holds the call
        while the slot migrates (TRYAGAIN, ASK). Either way the call never ran, wrote nothing."""
        reply = self.reply
        return reply.reason if isinstance(reply, SweepError) and reply.reason in REDIRECTS else None

    @property
    def expired_left(self) -> int | None:
        return None if self.depths is None else self.depths.expired

    def seconds(self, round_trip_s: float) -> float:
        """How long the call took on the server; its round trip where the server did not say."""
        if self.depths is None or self.depths.server_us <= 0:
            return round_trip_s
        return self.depths.server_us / 1_000_000


def keeps_draining(result: CallResult) -> bool:
    """A call that took leases and left some due: the queue's next call has work."""
    return (
        isinstance(result.reply, SweepReply)
        and result.reply.taken > 0
        and bool(result.expired_left)
    )


def resp(args: Sequence[object]) -> bytes:
    """A command as RESP puts it on the wire: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


PACKED_MAX = 1 << 17  # commands kept packed: more queues than that are packed anew each round
_packed: dict[tuple[str, QueueKeys], tuple[Call, bytes]] = {}


def packed(executor: Executor, call: Call) -> bytes:
    """The call's command in RESP, packed once per queue until its arguments change."""
    key = (executor.script.sha, call.keys)
    found = _packed.get(key)
    if found is not None and found[0] == call:
        return found[1]
    command = resp(
        executor.args(call.keys, call.max_stalled, call.limit, call.bound_ms, call.listed)
    )
    if len(_packed) >= PACKED_MAX:
        _packed.clear()
    _packed[key] = (call, command)
    return command


# A call's error reply: its result, not a broken connection (redis-py makes -LOADING one).
ERROR_REPLIES = (redis.ResponseError, redis.exceptions.BusyLoadingError)


def _exchange(connection: Connection, commands: bytes, count: int) -> list[object]:
    """Send the packed commands, read their `count` replies; an error reply is its reply."""
    connection.send_packed_command([commands])  # type: ignore[no-untyped-call]
    replies: list[object] = []
    for _ in range(count):
        try:
            replies.append(connection.read_response())
        except ERROR_REPLIES as exc:
            replies.append(exc)
    return replies


def _send(client: redis.Redis, executor: Executor, calls: Sequence[Call]) -> list[object]:
    """Each call's reply, or the error it got, in call order; one round trip.

    A round is what redis-py's pipeline does (one write, the replies read in order, the
    connection's retry policy on a connection failure: none, as connection.connect sets it, so
    a sweep is never sent twice) without its per-command packing and bookkeeping, a third of a
    tick's time: each queue's command is packed once.
    """
    if len(calls) == 1:  # a call on its own: a pipeline costs more than the command itself
        return [InFlight(client, executor, calls[0]).reply()]
    commands = b"".join([packed(executor, call) for call in calls])
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        return connection.retry.call_with_retry(
            lambda: _exchange(connection, commands, len(calls)),
            lambda _error: connection.disconnect(),  # type: ignore[no-untyped-call]
        )
    except BaseException:
        connection.disconnect()  # type: ignore[no-untyped-call]  # replies may be left unread
        raise
    finally:
        pool.release(connection)


def _result(call: Call, raw: object) -> CallResult:
    if isinstance(raw, BaseException):
        return CallResult(call, SweepError.of(raw))
    if not (isinstance(raw, list) and len(raw) == 2):
        return CallResult(call, SweepError.of(ValueError(f"the sweep replied {raw!r}")))
    verdict, stats = raw
    depths = Depths.parse(stats)
    if isinstance(verdict, BaseException):
        return CallResult(call, SweepError.of(verdict), depths)
    try:
        return CallResult(call, SweepReply.parse(verdict), depths)
    except ValueError as exc:
        return CallResult(call, SweepError.of(exc), depths)


def _named(result: CallResult, executor: Executor) -> CallResult:
    """An ACL refusal inside the sweep script says which command the user lacks."""
    error = result.reply
    if not (isinstance(error, SweepError) and error.reason is Reason.NOPERM):
        return result
    command = refused_command(error.message, executor.script.source)
    message = (
        f"the ACL user may not run {command}, which the sweep calls ({error.message}): grant it "
        f"with ACL SETUSER <user> +{command.lower()} (README.md, Security)"
    )
    return CallResult(result.call, SweepError(Reason.NOPERM, message), result.depths)


def _lost(reply: object) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)


def sweep_round(client: redis.Redis, executor: Executor, calls: Sequence[Call]) -> list[CallResult]:
    """Every call in one round trip; a call the server refused with NOSCRIPT (it wrote nothing)
    is sent again once the script is loaded. A connection failure raises (the node is down);
    an error reply is one call's result."""
    if not calls:
        return []
    replies = _send(client, executor, calls)
    again = [i for i, reply in enumerate(replies) if _lost(reply)]
    if again:
        executor.prepare(client)
        for i, reply in zip(again, _send(client, executor, [calls[i] for i in again]), strict=True):
            replies[i] = reply
    return [
        _named(_result(call, reply), executor) for call, reply in zip(calls, replies, strict=True)
    ]


class InFlight:
    """One call sent on a connection of its own, its reply read later: what the caller does
    meanwhile (counting the call before) runs while the server runs this one.

    A send that failed fails when the reply is read, as a read that fails does; the connection
    goes back to the pool either way (closed first when its reply may be left unread).
    """

    def __init__(self, client: redis.Redis, executor: Executor, call: Call) -> None:
        self.client = client
        self.executor = executor
        self.call = call
        self.connection: Connection | None = None
        self.error: Exception | None = None
        args = executor.args(call.keys, call.max_stalled, call.limit, call.bound_ms, call.listed)
        try:
            self.connection = client.connection_pool.get_connection()
            self.connection.send_command(*args)  # type: ignore[no-untyped-call]
        except Exception as exc:  # raised by result(), where a failed call is handled
            self.error = exc

    def result(self) -> CallResult:
        """The call's result; a connection failure raises (the node is down), a NOSCRIPT is
        answered by loading the script and sending the call again (it wrote nothing)."""
        raw = self.reply()
        if _lost(raw):
            self.executor.prepare(self.client)
            return sweep_round(self.client, self.executor, [self.call])[0]
        return _named(_result(self.call, raw), self.executor)

    def reply(self) -> object:
        """The call's reply as read, or the error it got; a connection failure raises."""
        connection = self.connection
        try:
            if self.error is not None or connection is None:
                raise self.error or redis.ConnectionError("the call was never sent")
            try:
                return connection.read_response()
            except ERROR_REPLIES as exc:
                return exc
        except BaseException:
            if connection is not None:
                connection.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            if connection is not None:
                self.client.connection_pool.release(connection)
