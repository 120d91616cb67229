"""The listener at rest: what it keeps once a start-up's changes are read."""

from __future__ import annotations

import sys
import time

import pytest

from sweeperd.fleet.listener import CHECK_S, OBSERVED, PING_S, POLL_S, SourceState
from tests.support.daemon_process import wait_until
from tests.support.node_rig import Rig, queue
from tests.support.servers import RedisServer

# A start-up's queues, each changed (new to the listener) until read.
STARTED = 20_000


class TestAtRest:
    def test_the_changes_read_leave_no_table_to_walk(self, redis_server: RedisServer) -> None:
        """The loop walks the changed queues at every turn (20 a second); a set emptied keeps
        the table it grew to, so once every change is read the set must be a new one: the table
        of 100,000 changes, walked empty, was 13 % of a core at rest."""
        rig = Rig(redis_server.url, wakes=True, hears=True, clock=time.monotonic)
        listener = rig.member.listener
        assert listener is not None
        rig.member.run([queue(f"q{n:05}") for n in range(STARTED)], look=True, woken=False)
        assert listener.tracked() == STARTED
        listener.start()
        try:
            wait_until(lambda: listener.reads >= STARTED, 60, "every queue read once")
            assert listener.source is SourceState.TRACKING
            wait_until(lambda: not listener._changed, 10, "no change left to read")
            with listener._lock:
                assert sys.getsizeof(listener._changed) == sys.getsizeof(set())
        finally:
            listener.stop()

    def test_at_rest_it_sleeps_till_its_ping(self, redis_server: RedisServer) -> None:
        """With no change to read, the loop waits till its next ping (PING_S), or its next look
        at the pool while a connection of the pool does not track; a change waiting waits
        POLL_S at most."""
        rig = Rig(redis_server.url, wakes=True, hears=True)
        listener = rig.member.listener
        assert listener is not None
        listener._sweeps_tracked, listener._checked_s = True, 99.95
        assert listener._next_read(100.0, 90.0, pinged=98.0) == pytest.approx(PING_S - 2.0)
        listener._sweeps_tracked = False
        assert listener._next_read(100.0, 90.0, pinged=98.0) == pytest.approx(CHECK_S - 0.05)
        listener.track([queue("a")])
        assert listener._next_read(100.0, 90.0, pinged=98.0) == 0.0
        listener._watched["a"].read_s = 100.0
        listener._observed, listener._shortest_s = OBSERVED, 10.0
        assert listener._next_read(100.0, 90.0, pinged=98.0) == POLL_S

    def test_a_queue_new_to_it_ends_its_sleep(self, redis_server: RedisServer) -> None:
        """At rest the loop sleeps till its ping, 5 s on; a queue a tick swept for the first
        time wakes it, and is read (so tracked) at once, not at the ping."""
        rig = Rig(redis_server.url, wakes=True, hears=True, clock=time.monotonic)
        listener = rig.member.listener
        assert listener is not None
        rig.member.run([queue("a")], look=True, woken=False)
        listener.start()
        try:
            wait_until(lambda: listener.reads == 1 and not listener._changed, 10, "a read")
            # The pool's connection, made before the subscriber, is made again tracking to it.
            rig.member.run([queue("a")], look=True, woken=False)
            wait_until(lambda: listener._sweeps_tracked, 10, "the pool tracking")
            started = time.monotonic()
            rig.member.run([queue("b")], look=True, woken=False)
            wait_until(lambda: listener.reads == 2, PING_S / 2, "b read long before the ping")
            assert time.monotonic() - started < PING_S / 2
        finally:
            listener.stop()
