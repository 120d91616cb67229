"""A round's replies read together: taken whole from the C parser's buffer, an error reply in its
place, a push left to redis-py, a connection that breaks mid-round a reply lost; the pure-Python
parser reads alike."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis._parsers import _RESP2Parser, _RESP3Parser

from sweeperd.reasons import ReplyLost
from sweeperd.server.calls import command, disconnect, send, send_packed
from sweeperd.server.calls import connect as open_connection
from sweeperd.server.connection import connect
from sweeperd.server.packed import resp, round_trip
from sweeperd.server.wire import TcpConnection
from tests.support.servers import RedisServer

# More replies than one read of the socket holds (redis-py reads 64 KiB at a time).
MANY = 20_000


def gets(*keys: str) -> bytes:
    return b"".join(resp(("GET", key)) for key in keys)


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    made = connect(redis_server.url, socket_timeout=10.0)
    made.flushall()
    yield made
    made.close()


class TestReadReplies:
    def test_a_round_longer_than_a_socket_read_is_read_whole(self, client: redis.Redis) -> None:
        client.mset({f"k{n}": f"v{n}" for n in range(0, MANY, 7)})
        keys = [f"k{n}" for n in range(MANY)]
        replies = round_trip(client, gets(*keys), MANY)
        assert replies == [f"v{n}".encode() if n % 7 == 0 else None for n in range(MANY)]
        # The connection is left clean: the next round reads its own replies.
        assert round_trip(client, gets("k0", "k7"), 2) == [b"v0", b"v7"]

    def test_an_error_reply_stands_in_its_place(self, client: redis.Redis) -> None:
        client.set("s", "x")
        client.zadd("z", {"a": 1})
        wire = resp(("ZRANGE", "s", 0, 0)) + gets("s") + resp(("ZRANGE", "z", 0, 0))
        first, second, third = round_trip(client, wire, 3)
        assert isinstance(first, redis.ResponseError)
        assert str(first).startswith("WRONGTYPE")
        assert (second, third) == (b"x", [b"a"])

    def test_a_push_between_the_replies_is_not_one_of_them(self, redis_server: RedisServer) -> None:
        connection = TcpConnection(port=redis_server.port, protocol=3, socket_timeout=10.0)
        open_connection(connection)
        try:
            send(connection, "CLIENT", "TRACKING", "on")
            assert connection.read_response() == b"OK"
            # The GET tracks the key, the SET's invalidation push comes among the replies.
            wire = gets("watched") + resp(("SET", "watched", "new")) + gets("watched")
            send_packed(connection, [wire])
            assert connection.read_replies(3) == [None, b"OK", b"new"]
            send_packed(connection, [gets("watched")])
            assert connection.read_replies(1) == [b"new"]
        finally:
            disconnect(connection)

    def test_a_connection_closed_mid_round_is_a_reply_lost(self, client: redis.Redis) -> None:
        client.set("a", "1")
        own = command(client, "CLIENT", "ID")
        wire = gets("a") + resp(("CLIENT", "KILL", "ID", own, "SKIPME", "no")) + gets("a", "a")
        with pytest.raises(ReplyLost, match="the connection broke before the reply came"):
            round_trip(client, wire, 4)
        # The pool's next connection is a new one.
        assert round_trip(client, gets("a"), 1) == [b"1"]

    def test_an_error_reply_redis_py_takes_for_a_broken_connection(
        self, client: redis.Redis
    ) -> None:
        """redis-py reads "-ERR max number of clients reached" as a ConnectionError: among a
        round's replies it is a reply lost and the connection closed, as read one by one."""
        client.set("a", "1")
        full = resp(("EVAL", "return redis.error_reply('ERR max number of clients reached')", 0))
        with pytest.raises(ReplyLost, match="max number of clients reached"):
            round_trip(client, gets("a") + full + gets("a"), 3)
        assert round_trip(client, gets("a"), 1) == [b"1"]

    @pytest.mark.parametrize("parser", [_RESP2Parser, _RESP3Parser])
    def test_the_python_parser_reads_alike(
        self, redis_server: RedisServer, parser: type[_RESP2Parser | _RESP3Parser]
    ) -> None:
        protocol = 3 if parser is _RESP3Parser else 2
        connection = TcpConnection(
            port=redis_server.port, protocol=protocol, parser_class=parser, socket_timeout=10.0
        )
        open_connection(connection)
        try:
            send(connection, "SET", "s", "x")
            connection.read_response()
            send_packed(connection, [gets("s") + resp(("ZRANGE", "s", 0, 0)) + gets("none")])
            got, refused, none = connection.read_replies(3)
            assert (got, none) == (b"x", None)
            assert isinstance(refused, redis.ResponseError)
        finally:
            disconnect(connection)
