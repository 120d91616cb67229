"""Typed doors to the redis-py calls it leaves untyped: a command by name, a URL's parts, a
connection's send, connect and disconnect, and Sentinel's answers."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import redis
from redis.connection import AbstractConnection
from redis.sentinel import Sentinel


def typed(untyped: Callable[..., Any]) -> Callable[..., Any]:
    """Return an untyped function or method of redis-py's as one typed code may call."""
    return untyped


def command(client: redis.Redis, *args: object) -> Any:
    """Send one command by name on a client or a pipeline, and return its reply (a pipeline
    returns itself, its reply read at `execute`)."""
    return typed(client.execute_command)(*args)


def url_parts(url: str) -> dict[str, Any]:
    """Return the options redis-py reads from a URL (host, port, db, username, password …);
    a URL it cannot read raises ValueError."""
    return cast(dict[str, Any], typed(redis.connection.parse_url)(url))


def connect(connection: AbstractConnection) -> None:
    """Open a connection and run its handshake (AUTH, HELLO, SELECT)."""
    typed(connection.connect)()


def send(connection: AbstractConnection, *args: object) -> None:
    """Write one command on a connection; its reply is read with `read_response`."""
    typed(connection.send_command)(*args)


def send_packed(connection: AbstractConnection, packed: list[bytes]) -> None:
    """Write commands already packed as RESP on a connection, in one write."""
    typed(connection.send_packed_command)(packed)


def disconnect(connection: AbstractConnection) -> None:
    """Close a connection (a pool opens it again when it is next taken)."""
    typed(connection.disconnect)()


def detached(client: redis.Redis) -> redis.Redis:
    """Return a client of the same server, with the same options, whose connections skip the
    connect hook (the listener's tracking: see fleet/listener.py) and open on first use; close
    it with `close_detached`. For a reader of many keys nothing needs to hear of (the audit)."""
    pool = client.connection_pool
    options = {**pool.connection_kwargs, "redis_connect_func": None}
    made = typed(redis.ConnectionPool)(connection_class=pool.connection_class, **options)
    return redis.Redis(connection_pool=made)


def close_detached(client: redis.Redis) -> None:
    """Close a detached client's connections."""
    typed(client.connection_pool.disconnect)()


def sentinel(addresses: Iterable[tuple[str, int]], sentinel_kwargs: dict[str, Any]) -> Sentinel:
    """Make the library's Sentinel client of these Sentinels, connecting to none yet."""
    return cast(Sentinel, typed(Sentinel)(list(addresses), sentinel_kwargs=sentinel_kwargs))


def primary_of(sentinel: Sentinel, name: str) -> tuple[str, int]:
    """Ask the Sentinels for the address of the primary they know as `name`."""
    host, port = typed(sentinel.discover_master)(name)
    return str(host), int(port)


def replicas_of(sentinel: Sentinel, name: str) -> tuple[tuple[str, int], ...]:
    """Ask the Sentinels for the addresses of the replicas of the primary known as `name`."""
    named = typed(sentinel.discover_slaves)(name)
    return tuple((str(host), int(port)) for host, port in named)
