"""The listener's wait: a message, a poke from another thread, or the time given, whichever
comes first; a connection that fails raises."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from sweeperd.fleet.waiter import Waiter
from sweeperd.server.calls import typed
from tests.support.servers import RedisServer

CHANNEL = b"sweeperd-test"
# Far longer than any test waits: a wait that returns did not run out.
LONG_S = 60.0


@pytest.fixture
def subscriber(redis_server: RedisServer) -> Iterator[redis.Connection]:
    connection: redis.Connection = typed(redis.Connection)(port=redis_server.port, protocol=2)
    typed(connection.connect)()
    typed(connection.send_command)("SUBSCRIBE", CHANNEL)
    assert connection.read_response() == [b"subscribe", CHANNEL, 1]
    yield connection
    typed(connection.disconnect)()


@pytest.fixture
def waiter() -> Iterator[Waiter]:
    made = Waiter()
    made.open()
    yield made
    made.close()


class TestWaiter:
    def test_a_message_ends_the_wait(
        self, r: redis.Redis, subscriber: redis.Connection, waiter: Waiter
    ) -> None:
        r.publish(CHANNEL, b"changed")
        assert waiter.wait(subscriber, LONG_S)
        assert subscriber.read_response() == [b"message", CHANNEL, b"changed"]

    def test_a_poke_ends_the_wait_and_is_spent(
        self, subscriber: redis.Connection, waiter: Waiter
    ) -> None:
        """A poke from another thread ends the wait under way without a message; the next wait
        waits again (here the time given, 10 ms)."""
        poked = threading.Timer(0.05, waiter.poke)
        poked.start()
        assert not waiter.wait(subscriber, LONG_S)
        poked.join()
        waiter.poke()
        waiter.poke()
        assert not waiter.wait(subscriber, LONG_S)
        assert not waiter.wait(subscriber, 0.01)

    def test_a_message_already_read_off_the_socket_is_seen(
        self, r: redis.Redis, subscriber: redis.Connection, waiter: Waiter
    ) -> None:
        """Two messages in one read: the second is in the parser's buffer, which a select does
        not see; the wait does."""
        with r.pipeline(transaction=False) as pipe:
            pipe.publish(CHANNEL, b"one")
            pipe.publish(CHANNEL, b"two")
            pipe.execute()
        assert waiter.wait(subscriber, LONG_S)
        assert subscriber.read_response() == [b"message", CHANNEL, b"one"]
        assert waiter.wait(subscriber, LONG_S)
        assert subscriber.read_response() == [b"message", CHANNEL, b"two"]

    def test_a_connection_killed_raises(
        self, r: redis.Redis, subscriber: redis.Connection, waiter: Waiter
    ) -> None:
        sock = subscriber._sock
        assert sock is not None
        host, port = sock.getsockname()[:2]
        assert r.client_kill_filter(addr=f"{host}:{port}") == 1
        with pytest.raises(redis.ConnectionError):
            waiter.wait(subscriber, LONG_S)

    def test_closed_it_waits_on_the_connection_alone(
        self, subscriber: redis.Connection, waiter: Waiter
    ) -> None:
        """Once closed a poke is lost, and a wait is the connection's own."""
        waiter.close()
        waiter.poke()
        assert not waiter.wait(subscriber, 0.01)
