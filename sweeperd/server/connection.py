"""How sweeperd reaches a server: the checked connection and the clients it makes.

Every connection option is checked in `Connection.checked` before anything is sent (the URL's
rules are in urls.py, the TLS files' in tls.py). A new one is a field of `Connection`, its
check there and its use in `Connection.client`, read from the settings in connsettings.py
beside a row in options.OPTIONS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.sentinel import Sentinel

from sweeperd.constants import MAX_SOCKET_TIMEOUT_S, TopologyMode
from sweeperd.logs import redact
from sweeperd.server.calls import sentinel, url_parts
from sweeperd.server.denied import DEFAULT_USER
from sweeperd.server.tls import NO_TLS, TlsFiles
from sweeperd.server.urls import BadConnection, check_url, name_at, node_name, url_at
from sweeperd.server.wire import CONNECTION_CLASSES, no_retry

UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)


def _raw(response: Any, **_options: Any) -> Any:
    return response


def connect(
    url: str, *, socket_timeout: float, password: str | None = None, tls: TlsFiles | None = None
) -> redis.Redis:
    """Return a client whose replies are bytes and whose INFO and COMMAND replies are left unparsed.

    It never resends a call by itself (a sweep sent twice would be counted wrong), and a
    connection that breaks after a call was written raises reasons.ReplyLost."""
    scheme = url.partition("://")[0]
    client = redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        decode_responses=False,
        retry=no_retry(),
        connection_class=CONNECTION_CLASSES.get(scheme, CONNECTION_CLASSES["redis"]),
        **({"password": password} if password is not None else {}),
        **((tls or NO_TLS).client_options() if scheme == "rediss" else {}),
    )
    # redis-py turns an all-digit run_id into an int and fails on COMMAND INFO of an
    # unknown verb; sweeperd parses both itself.
    client.set_response_callback("INFO", _raw)
    client.set_response_callback("COMMAND INFO", _raw)
    client.set_response_callback("COMMAND", _raw)
    return client


def check_timeout(value: float) -> float:
    """Return a socket timeout a socket takes: positive, finite and at most an hour."""
    if not (math.isfinite(value) and 0 < value <= MAX_SOCKET_TIMEOUT_S):
        raise BadConnection(
            f"must be a positive number of seconds up to {MAX_SOCKET_TIMEOUT_S:g}, not {value:g}"
        )
    return value


class TopologyRefused(BadConnection):
    """The topology options do not go together, or with the URL: the message says which."""


@dataclass(frozen=True)
class Topology:
    """How the primaries are found: the URL's server, a Cluster seeded by it, or Sentinel's
    answer. The URL's credentials, db and TLS options apply to every primary."""

    cluster: bool = False
    # Sentinel's addresses; () = no Sentinel.
    sentinels: tuple[tuple[str, int], ...] = ()
    # The name Sentinel knows the primary by.
    sentinel_master: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    # A Cluster's nodes named beside the URL's.
    seeds: tuple[tuple[str, int], ...] = ()

    @property
    def mode(self) -> TopologyMode:
        if self.cluster:
            return TopologyMode.CLUSTER
        return TopologyMode.SENTINEL if self.sentinels else TopologyMode.STANDALONE

    def check(self, url: str) -> None:
        if self.seeds and not self.cluster:
            raise TopologyRefused(
                "several --redis-url are a Cluster's seeds: add --cluster, or give one URL"
            )
        if self.cluster and self.sentinels:
            raise TopologyRefused("--cluster and --sentinel exclude each other: give one")
        if bool(self.sentinels) != bool(self.sentinel_master):
            raise TopologyRefused("--sentinel and --sentinel-master go together: give both")
        if self.mode is TopologyMode.STANDALONE:
            return
        if url.startswith("unix://"):
            raise TopologyRefused(
                f"a {self.mode} is reached over TCP: use a redis:// or rediss:// URL"
            )
        if self.cluster and int(url_parts(url).get("db") or 0) != 0:
            raise TopologyRefused("a cluster has database 0 only: drop the db from the URL")


STANDALONE = Topology()


@dataclass(frozen=True)
class Connection:
    """Where the server is and how to talk to it, checked; `client()` sends nothing."""

    url: str
    password: str | None = field(repr=False)
    # seconds, connect and read.
    socket_timeout: float
    tls: TlsFiles = NO_TLS
    topology: Topology = STANDALONE

    @classmethod
    def checked(
        cls,
        url: str,
        password: str | None,
        socket_timeout: float,
        tls: TlsFiles | None = None,
        topology: Topology = STANDALONE,
    ) -> Connection:
        """Check every part now, and build one connection object without connecting."""
        url = check_url(url)
        files = (tls or NO_TLS).checked(url.partition("://")[0])
        made = cls(url, password, check_timeout(socket_timeout), files, topology)
        topology.check(made.url)
        try:
            made.client().connection_pool.make_connection()
        except (TypeError, ValueError, redis.RedisError) as exc:
            raise BadConnection(str(exc).rstrip(".")) from None
        return made

    @cached_property
    def _url_parts(self) -> dict[str, Any]:
        """Parse the URL once, for the password, db and user read from it."""
        return url_parts(self.url)

    @property
    def has_password(self) -> bool:
        """Tell whether a password is given, by its file or in the URL."""
        return self.password is not None or bool(self._url_parts.get("password"))

    @property
    def db(self) -> int:
        """Return the db the URL selects (0 unless it names one)."""
        return int(self._url_parts.get("db") or 0)

    @property
    def user(self) -> str:
        """Return the ACL user the URL names, or the default user."""
        return str(self._url_parts.get("username") or DEFAULT_USER)

    @property
    def shown_url(self) -> str:
        return redact(self.url)

    @property
    def node(self) -> str:
        return node_name(self.url)

    @property
    def seeds(self) -> tuple[tuple[str, int], ...]:
        """Return where a Cluster is first asked for its layout: the URL's node, then the others
        named."""
        parts = urlsplit(self.url)
        first = (parts.hostname or "localhost", parts.port or 6379)
        return tuple(dict.fromkeys([first, *self.topology.seeds]))

    @property
    def shown_seeds(self) -> str:
        """Return the seeds as a line names them: host:port, commas between."""
        return ", ".join(name_at(address) for address in self.seeds)

    def client(self, address: tuple[str, int] | None = None) -> redis.Redis:
        """Return a client of the URL's server, or of the primary at `address` with the URL's
        credentials, db and TLS options: every client sweeperd sweeps with is made here."""
        url = self.url if address is None else url_at(self.url, *address)
        return connect(
            url, socket_timeout=self.socket_timeout, password=self.password, tls=self.tls
        )

    def sentinel(self) -> Sentinel:
        """Return the library's Sentinel client: asked for the primary's address, nothing else."""
        return sentinel(self.topology.sentinels, self._sentinel_options())

    def sentinel_client(self, address: tuple[str, int]) -> redis.Redis:
        """Return a plain client of one Sentinel (or of what answers at its address)."""
        host, port = address
        return redis.Redis(host=host, port=port, retry=no_retry(), **self._sentinel_options())

    def _sentinel_options(self) -> dict[str, Any]:
        own = self.topology.sentinel_password
        return {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            **({"password": own} if own is not None else {}),
        }
