"""Commands packed as RESP once and sent in one write, their replies read in order: a round
trip without redis-py's per-command packing and bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from redis.connection import Connection

from sweeperd.server.calls import disconnect, send_packed
from sweeperd.server.wire import TellsLostReplies, read_reply


def resp(args: Sequence[object]) -> bytes:
    """Return a command as RESP puts it on the wire: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _exchange(connection: Connection, commands: bytes, count: int) -> list[object]:
    """Send the packed commands, read their `count` replies; an error reply is its reply."""
    send_packed(connection, [commands])
    if isinstance(connection, TellsLostReplies):
        return connection.read_replies(count)
    return [read_reply(connection) for _ in range(count)]


def round_trip(client: redis.Redis, commands: bytes, count: int) -> list[object]:
    """Return the `count` packed commands' replies (an error reply in place of a refused one), in
    order; one round trip, on a pooled connection under its retry policy (none, as
    connection.connect sets it: nothing is sent twice). A connection failure raises, the
    connection closed (replies may be left unread)."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        return connection.retry.call_with_retry(
            lambda: _exchange(connection, commands, count),
            lambda _error: disconnect(connection),
        )
    except BaseException:
        disconnect(connection)
        raise
    finally:
        pool.release(connection)
