"""Sweeps sent to a node: a round of one call per queue in one round trip, or a drain's call
whose reply is read once the call before it has been counted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import redis
from redis.connection import Connection

from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import SweepError
from sweeperd.server.calls import disconnect, send
from sweeperd.server.connection import UNREACHABLE
from sweeperd.server.denied import user_of
from sweeperd.server.packed import resp, round_trip
from sweeperd.server.wire import read_reply
from sweeperd.verb.executors import Executor
from sweeperd.verb.replies import Call, CallResult, named, probed, result_of

# Command shapes kept: a name length and a call's numbers each.
SHAPES_MAX = 4096
# A placeholder's character: no root, number or script has it.
NAME_IN_A_SHAPE = "\x00"
# How often a queue's name is in a sweep script's command: five keys and the prefix.
SWEEP_NAMES = 6
# Sent before a call that tracks the keys it reads (Call.tracked).
CACHING = resp((b"CLIENT", b"CACHING", b"yes"))


class Packed:
    """Each call's command in RESP, from the shape of its kind packed once: the same command
    with the queue's name left out (a node's calls differ in the name, seldom in the rest). A
    call is its shape joined by its name's bytes, one C call, so a round of 100,000 queues
    needs a handful of shapes, not 100,000 kept commands (30 MiB). One per node; at most
    SHAPES_MAX shapes kept of the sweeps, and as many of the probes."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[object, ...], list[bytes] | None] = {}
        # The probes' shapes by root and name length (most of an idle round's commands).
        self._probes: dict[tuple[object, ...], list[bytes] | None] = {}

    def sweep(self, executor: Executor, call: Call) -> bytes:
        """Return the call's EVALSHA of `executor`'s sweep script."""
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
        return self._packed(
            self._shapes, shape, call, name, lambda c: c.args(executor), SWEEP_NAMES
        )

    def probe(self, call: Call) -> bytes:
        """Return the call's probe (Call.probe_args)."""
        queue, root = call.keys
        name = queue.encode()
        return self._packed(self._probes, (root, len(name)), call, name, Call.probe_args, 1)

    @staticmethod
    def _packed(
        shapes: dict[tuple[object, ...], list[bytes] | None],
        shape: tuple[object, ...],
        call: Call,
        name: bytes,
        args: Callable[[Call], list[object]],
        names: int,
    ) -> bytes:
        """Return the command `args` makes of `call`, from the shape's chunks where kept: the
        command cut where the queue's name goes, `names` times."""
        try:
            chunks = shapes[shape]
        except KeyError:
            if len(shapes) >= SHAPES_MAX:
                shapes.clear()
            chunks = shapes[shape] = _shape(args, call, len(name), names)
        return resp(args(call)) if chunks is None else name.join(chunks)

    def __len__(self) -> int:
        """How many shapes are kept."""
        return len(self._shapes) + len(self._probes)


def _shape(
    args: Callable[[Call], list[object]], call: Call, length: int, names: int
) -> list[bytes] | None:
    """Return the call's command cut where its queue's name goes; None where the placeholder is
    found elsewhere too (a root holding it)."""
    placeholder = NAME_IN_A_SHAPE * length
    keys = QueueKeys(placeholder, call.keys.root)
    command = resp(args(replace(call, keys=keys)))
    chunks = command.split(placeholder.encode())
    return chunks if len(chunks) == names + 1 else None


def _send(
    client: redis.Redis, calls: Sequence[Call], commands: Sequence[bytes]
) -> tuple[list[object], set[int]]:
    """Return each command's reply, or the error it got, in order, and the indexes of the
    tracked calls whose CLIENT CACHING yes was refused; one round trip.

    A round is what redis-py's pipeline does (one write, the replies read in order, the
    connection's retry policy on a connection failure: none, as connection.connect sets it, so
    a sweep is never sent twice) without its per-command packing and bookkeeping, a third of a
    tick's time: each queue's command is packed once (a call on its own too: a queue woken at
    its deadline, round after round, costs a fifth less than redis-py packing it anew).
    """
    tracked = sum(call.tracked for call in calls)
    if not tracked:
        return round_trip(client, b"".join(commands), len(calls)), set()
    wire = b"".join(
        [CACHING * call.tracked + command for call, command in zip(calls, commands, strict=True)]
    )
    replies = round_trip(client, wire, len(calls) + tracked)
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
    """Return every call's result, in call order: one round trip, and a second only for the
    idle calls whose probe could not say that nothing is due. A connection failure raises (the
    node is down); an error reply is one call's result. `packed` keeps the commands of the
    node's earlier rounds.

    A brief call that may (Call.probes) goes out as a probe: ZRANGE of its active set's first
    lease, a plain read that costs the server a sixth of the script's shortest reply. The
    probes go first and the scripts after them in the round, so that a script's clock, read
    after every probe, judges them (replies.probed): an empty set, or a first deadline after
    that clock, is the whole answer, the brief reply's. A probe that cannot say (a lease due,
    no script in the round, an error reply) is sent again as its script, which judges it on
    the server's own clock (a probe that erred tracks nothing: that script tracks instead).
    Where that second round trip cannot reach the server, its calls fail and the first's
    results stand (their sweeps ran: they are counted).
    """
    if not calls:
        return []
    packed = packed or Packed()
    probing: list[int] = []
    scripted: list[int] = []
    for i, call in enumerate(calls):
        (probing if call.probes else scripted).append(i)
    commands = [packed.probe(calls[i]) for i in probing]
    commands += [packed.sweep(executor, calls[i]) for i in scripted]
    order = probing + scripted
    replies, untracked = _send(client, [calls[i] for i in order], commands)
    swept = _scripts(
        client, executor, [calls[i] for i in scripted], packed, replies[len(probing) :]
    )
    results = dict(zip(scripted, swept, strict=True))
    clocks = [r.depths.now_ms for r in swept if r.depths is not None and r.depths.now_ms > 0]
    clock = max(clocks) if clocks else None
    again: list[tuple[int, object]] = []
    for i, reply in zip(probing, replies, strict=False):
        said = probed(calls[i], reply, clock)
        if said is None:
            again.append((i, reply))
        else:
            results[i] = said
    scripts = [
        replace(calls[i], tracked=calls[i].tracked and isinstance(reply, BaseException))
        for i, reply in again
    ]
    try:
        resent = _scripts(client, executor, scripts, packed)
    except UNREACHABLE as exc:
        # The first round trip's sweeps ran and are counted; the calls sent again failed.
        resent = [CallResult(call, SweepError.of(exc)) for call in scripts]
    results.update(zip([i for i, _ in again], resent, strict=True))
    for n in untracked:
        results[order[n]] = replace(results[order[n]], untracked=True)
    return [results[i] for i in range(len(calls))]


def _scripts(
    client: redis.Redis,
    executor: Executor,
    calls: Sequence[Call],
    packed: Packed,
    replies: list[object] | None = None,
) -> list[CallResult]:
    """Return the results of the sweep scripts of `calls`: sent in one round trip, or read from
    `replies`; a call the server refused with NOSCRIPT (it wrote nothing) is sent again once the
    script is loaded."""
    if not calls:
        return []
    untracked: set[int] = set()
    if replies is None:
        replies, untracked = _send(client, calls, [packed.sweep(executor, c) for c in calls])
    again = [i for i, reply in enumerate(replies) if _lost(reply)]
    if again:
        executor.prepare(client)
        lost = [calls[i] for i in again]
        resent, still = _send(client, lost, [packed.sweep(executor, c) for c in lost])
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
            return read_reply(connection)
        except BaseException:
            if connection is not None:
                disconnect(connection)
            raise
        finally:
            if connection is not None:
                self._client.connection_pool.release(connection)
