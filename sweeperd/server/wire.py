"""Server connections that tell a reply lost after the call was sent from a call never sent."""

from __future__ import annotations

from typing import Any

import redis
from redis._parsers import _HiredisParser
from redis._parsers import hiredis as hiredis_parser
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection
from redis.retry import Retry

from sweeperd.reasons import ReplyLost
from sweeperd.server.calls import typed

# What hiredis' reader gives for a reply not whole in its buffer yet (redis-py < 5.1: False).
INCOMPLETE: object = getattr(hiredis_parser, "NOT_ENOUGH_DATA", False)
# A command's error reply: its reply, not a broken connection (redis-py makes -LOADING one).
ERROR_REPLIES = (redis.ResponseError, redis.exceptions.BusyLoadingError)


def read_reply(connection: AbstractConnection) -> object:
    """Read one reply; an error reply is returned, not raised."""
    try:
        return typed(connection.read_response)()
    except ERROR_REPLIES as exc:
        return exc


def no_retry() -> Retry:
    """Return a retry policy that never resends: redis-py's default resends a call whose connection
    broke; a sweep is never resent."""
    return Retry(NoBackoff(), 0)


class TellsLostReplies(AbstractConnection):
    """Raises ReplyLost for a connection that breaks while a command's reply is awaited.

    A command is read for only once it was written whole (redis-py writes, then reads), so a
    ConnectionError while reading is a reply lost; the handshake's own replies (AUTH, HELLO,
    SELECT) are a connection failure as before."""

    _handshaking = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # No CLIENT SETINFO in the handshake: Valkey and Redis >= 7.2 know it, and the
        # least-privilege ACL user may not run it, so each connection would leave two denials
        # in the ACL LOG (redis-py ignores the refusal). redis-py 8 reads driver_info, 5 to 7
        # lib_name and lib_version.
        for field in ("driver_info", "lib_name", "lib_version"):
            setattr(self, field, None)

    def on_connect(self, *args: Any, **kwargs: Any) -> None:
        before, self._handshaking = self._handshaking, True
        try:
            typed(super().on_connect)(*args, **kwargs)
        finally:
            self._handshaking = before

    def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        """Run the handshake as redis-py >= 6 does, its replies a connection failure."""
        before, self._handshaking = self._handshaking, True
        try:
            super().on_connect_check_health(*args, **kwargs)
        finally:
            self._handshaking = before

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.ConnectionError as exc:
            lost = self._lost(exc)
            if lost is exc:
                raise
            raise lost from exc

    def _lost(self, exc: redis.ConnectionError) -> redis.ConnectionError:
        """Return what a ConnectionError met while reading a reply raises: a reply lost, but in
        the handshake, for an AUTH refused, and for an error reply (-LOADING: it never ran)."""
        if self._handshaking or isinstance(
            exc, redis.AuthenticationError | ReplyLost | redis.exceptions.BusyLoadingError
        ):
            return exc
        return ReplyLost(f"the connection broke before the reply came: {exc}")

    def read_replies(self, count: int) -> list[object]:
        """Return the replies of `count` commands sent together, in order, an error reply in place
        of a refused one. Those already in the C parser's buffer are taken from it directly (about
        a quarter of read_response's cost each: a round of 1,000 idle calls is 1,000 replies); the
        socket is read by read_response, with its timeouts and failures."""
        parser = self._parser
        if not isinstance(parser, _HiredisParser):
            return [read_reply(self) for _ in range(count)]
        push = getattr(parser, "_hiredis_PushNotificationType", None)
        replies: list[object] = []
        while len(replies) < count:
            reader = parser._reader
            reply = INCOMPLETE if reader is None else reader.gets()
            if reply is INCOMPLETE:
                replies.append(read_reply(self))
            elif push is not None and isinstance(reply, push):
                typed(parser.handle_push_response)(reply)
            elif isinstance(reply, ERROR_REPLIES):
                replies.append(reply)
            elif isinstance(reply, redis.ConnectionError):
                typed(self.disconnect)()
                lost = self._lost(reply)
                raise lost from (None if lost is reply else reply)
            else:
                replies.append(reply)
        return replies


class TcpConnection(TellsLostReplies, redis.Connection):
    """redis://"""


class TlsConnection(TellsLostReplies, redis.SSLConnection):
    """rediss://"""


class UnixConnection(TellsLostReplies, redis.UnixDomainSocketConnection):
    """unix://"""


CONNECTION_CLASSES: dict[str, type[redis.Connection] | type[redis.UnixDomainSocketConnection]] = {
    "redis": TcpConnection,
    "rediss": TlsConnection,
    "unix": UnixConnection,
}


def scheme_of(client: redis.Redis) -> str:
    """Return the URL scheme a client's connections speak: redis, rediss or unix."""
    kind = client.connection_pool.connection_class
    found = (scheme for scheme, made in CONNECTION_CLASSES.items() if issubclass(kind, made))
    return next(found, "redis")
