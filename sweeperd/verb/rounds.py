"""Sweeps sent to a node: a round of one call per queue in one round trip, or a drain's call
whose reply is read once the call before it has been counted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import redis
from redis.connection import Connection

from sweeperd.keyspace import QueueKeys
from sweeperd.server.calls import disconnect, send
from sweeperd.server.denied import user_of
from sweeperd.server.packed import ERROR_REPLIES, resp, round_trip
from sweeperd.verb.executors import Executor
from sweeperd.verb.replies import Call, CallResult, named, result_of

# Command shapes kept: a name length and a call's numbers each.
SHAPES_MAX = 4096
# A placeholder's character: no root, number or script has it.
NAME_IN_A_SHAPE = "\x00"
# Sent before a call that tracks the keys it reads (Call.tracked).
CACHING = resp((b"CLIENT", b"CACHING", b"yes"))


class Packed:
    """Each call's command in RESP, from the shape of its kind packed once: the same command
    with the queue's name left out (a node's calls differ in the name, seldom in the rest). A
    call is its shape joined by its name's bytes, one C call, so a round of 100,000 queues
    needs a handful of shapes, not 100,000 kept commands (30 MiB). One per node; at most
    SHAPES_MAX shapes kept."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[object, ...], list[bytes] | None] = {}

    def __call__(self, executor: Executor, call: Call) -> bytes:
        name = call.keys.queue.encode()
        shape = (
            executor.script.sha,
            call.keys.root,
            len(name),
            call.max_stalled,
            call.limit,
            call.bound_ms,
            call.listed,
            call.brief,
        )
        try:
            chunks = self._shapes[shape]
        except KeyError:
            if len(self._shapes) >= SHAPES_MAX:
                self._shapes.clear()
            chunks = self._shapes[shape] = _shape(executor, call, len(name))
        return resp(call.args(executor)) if chunks is None else name.join(chunks)

    def __len__(self) -> int:
        """How many shapes are kept."""
        return len(self._shapes)


def _shape(executor: Executor, call: Call, length: int) -> list[bytes] | None:
    """Return the call's command cut where its queue's name goes (six times: five keys and the
    prefix); None where the placeholder is found elsewhere too (a root holding it)."""
    placeholder = NAME_IN_A_SHAPE * length
    keys = QueueKeys(placeholder, call.keys.root)
    command = resp(replace(call, keys=keys).args(executor))
    chunks = command.split(placeholder.encode())
    return chunks if len(chunks) == 7 else None


def _send(
    client: redis.Redis, executor: Executor, calls: Sequence[Call], packed: Packed
) -> tuple[list[object], set[int]]:
    """Return each call's reply, or the error it got, in call order, and the indexes of the
    tracked calls whose CLIENT CACHING yes was refused; one round trip.

    A round is what redis-py's pipeline does (one write, the replies read in order, the
    connection's retry policy on a connection failure: none, as connection.connect sets it, so
    a sweep is never sent twice) without its per-command packing and bookkeeping, a third of a
    tick's time: each queue's command is packed once (a call on its own too: a queue woken at
    its deadline, round after round, costs a fifth less than redis-py packing it anew).
    """
    commands = b"".join([CACHING * call.tracked + packed(executor, call) for call in calls])
    tracked = sum(call.tracked for call in calls)
    replies = round_trip(client, commands, len(calls) + tracked)
    if not tracked:
        return replies, set()
    answers: list[object] = []
    untracked: set[int] = set()
    read = iter(replies)
    for i, call in enumerate(calls):
        if call.tracked and isinstance(next(read), BaseException):
            untracked.add(i)
        answers.append(next(read))
    return answers, untracked


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
    replies, untracked = _send(client, executor, calls, packed)
    again = [i for i, reply in enumerate(replies) if _lost(reply)]
    if again:
        executor.prepare(client)
        resent, still = _send(client, executor, [calls[i] for i in again], packed)
        for i, reply in zip(again, resent, strict=True):
            replies[i] = reply
        untracked.update(again[i] for i in still)
    user = user_of(client)
    results = [
        named(result_of(call, reply), executor, user)
        for call, reply in zip(calls, replies, strict=True)
    ]
    for i in untracked:
        results[i] = replace(results[i], untracked=True)
    return results


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
