"""Sweeps sent to a node: a round of one call per queue in one round trip, or a drain's call
whose reply is read once the call before it has been counted."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from redis.connection import Connection

from sweeperd.server.calls import disconnect, send
from sweeperd.server.denied import user_of
from sweeperd.server.packed import ERROR_REPLIES, resp, round_trip
from sweeperd.verb.executors import Executor
from sweeperd.verb.replies import Call, CallResult, named, result_of

# Commands kept packed: more queues than that are packed anew each round.
PACKED_MAX = 1 << 17


class Packed:
    """Each call's command in RESP, packed once: a tick's calls are the same round after round,
    and a queue woken at its deadline has one call for each size of the rounds it goes in. One
    per node; at most PACKED_MAX commands kept."""

    def __init__(self) -> None:
        self._commands: dict[tuple[str, Call], bytes] = {}

    def __call__(self, executor: Executor, call: Call) -> bytes:
        key = (executor.script.sha, call)
        found = self._commands.get(key)
        if found is not None:
            return found
        command = resp(call.args(executor))
        if len(self._commands) >= PACKED_MAX:
            self._commands.clear()
        self._commands[key] = command
        return command


def _send(
    client: redis.Redis, executor: Executor, calls: Sequence[Call], packed: Packed
) -> list[object]:
    """Return each call's reply, or the error it got, in call order; one round trip.

    A round is what redis-py's pipeline does (one write, the replies read in order, the
    connection's retry policy on a connection failure: none, as connection.connect sets it, so
    a sweep is never sent twice) without its per-command packing and bookkeeping, a third of a
    tick's time: each queue's command is packed once (a call on its own too: a queue woken at
    its deadline, round after round, costs a fifth less than redis-py packing it anew).
    """
    commands = b"".join([packed(executor, call) for call in calls])
    return round_trip(client, commands, len(calls))


def _lost(reply: object) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)


def sweep_round(
    client: redis.Redis, executor: Executor, calls: Sequence[Call], packed: Packed | None = None
) -> list[CallResult]:
    """Return every call in one round trip; a call the server refused with NOSCRIPT (it wrote
    nothing) is sent again once the script is loaded. A connection failure raises (the node is
    down); an error reply is one call's result. `packed` keeps the commands of the node's earlier
    rounds."""
    if not calls:
        return []
    packed = packed or Packed()
    replies = _send(client, executor, calls, packed)
    again = [i for i, reply in enumerate(replies) if _lost(reply)]
    if again:
        executor.prepare(client)
        resent = _send(client, executor, [calls[i] for i in again], packed)
        for i, reply in zip(again, resent, strict=True):
            replies[i] = reply
    user = user_of(client)
    return [
        named(result_of(call, reply), executor, user)
        for call, reply in zip(calls, replies, strict=True)
    ]


class InFlight:
    """One call sent on a connection of its own, its reply read later: what the caller does
    meanwhile (counting the call before) runs while the server runs this one.

    A send that failed fails when the reply is read, as a read that fails does; the connection
    goes back to the pool either way (closed first when its reply may be left unread).
    """

    def __init__(self, client: redis.Redis, executor: Executor, call: Call) -> None:
        self._client = client
        self._executor = executor
        self.call = call
        self._connection: Connection | None = None
        self._error: Exception | None = None
        args = call.args(executor)
        try:
            self._connection = client.connection_pool.get_connection()
            send(self._connection, *args)
        except Exception as exc:
            # Raised by result(), where a failed call is handled.
            self._error = exc

    def result(self) -> CallResult:
        """Return the call's result; a connection failure raises (the node is down), a NOSCRIPT is
        answered by loading the script and sending the call again (it wrote nothing)."""
        raw = self.reply()
        if _lost(raw):
            self._executor.prepare(self._client)
            return sweep_round(self._client, self._executor, [self.call])[0]
        return named(result_of(self.call, raw), self._executor, user_of(self._client))

    def reply(self) -> object:
        """Return the call's reply as read, or the error it got; a connection failure raises."""
        connection = self._connection
        try:
            if self._error is not None or connection is None:
                raise self._error or redis.ConnectionError("the call was never sent")
            try:
                return connection.read_response()
            except ERROR_REPLIES as exc:
                return exc
        except BaseException:
            if connection is not None:
                disconnect(connection)
            raise
        finally:
            if connection is not None:
                self._client.connection_pool.release(connection)
