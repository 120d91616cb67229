"""Server connections that tell a reply lost after the call was sent from a call never sent."""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection
from redis.retry import Retry

from sweeperd.reasons import ReplyLost
from sweeperd.server.calls import typed


def no_retry() -> Retry:
    """Return a retry policy that never resends: redis-py's default resends a call whose connection
    broke; a sweep is never resent."""
    return Retry(NoBackoff(), 0)


class _TellsLostReplies(AbstractConnection):
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
            if self._handshaking or isinstance(exc, redis.AuthenticationError | ReplyLost):
                raise
            # An error reply: it never ran.
            if isinstance(exc, redis.exceptions.BusyLoadingError):
                raise
            raise ReplyLost(f"the connection broke before the reply came: {exc}") from exc


class TcpConnection(_TellsLostReplies, redis.Connection):
    """redis://"""


class TlsConnection(_TellsLostReplies, redis.SSLConnection):
    """rediss://"""


class UnixConnection(_TellsLostReplies, redis.UnixDomainSocketConnection):
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
