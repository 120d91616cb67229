"""The drain's progress bar, driven by a real drain, rendered to a terminal of our own."""

from __future__ import annotations

import io

import redis
from rich.console import Console

from sweeperd.commands.once import sweep
from sweeperd.commands.outcome import OnceResult
from sweeperd.commands.progress import done_of, drain_bar
from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import connect
from sweeperd.verb.executors import NATIVE
from tests.support.clock import Clock
from tests.support.node_rig import seed
from tests.support.servers import RedisServer


class TestDrainBar:
    def test_the_bar_shows_done_left_and_rate(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Each call moves the bar: the queue, leases done and left, and a rate, on stderr's
        terminal; the drain's own result is unchanged by it."""
        keys = QueueKeys("bar")
        seed(r, keys, 1000)
        client = connect(redis_server.url, socket_timeout=5.0)
        screen = io.StringIO()
        console = Console(file=screen, force_terminal=True, width=120)
        seen: list[tuple[int, int]] = []
        with drain_bar("bar", console, clock=Clock(0.0, step=0.5)) as update:

            def both(result: OnceResult) -> None:
                seen.append((done_of(result), result.left))
                update(result)

            result = sweep(
                client, NATIVE, keys, max_stalled=5, limit=300, drain=True, progress=both
            )
        assert seen == [(300, 700), (600, 400), (900, 100), (1000, 0)]
        assert (len(result.recovered), result.calls) == (1000, 4)
        text = screen.getvalue()
        assert "draining bar" in text
        assert "1,000 done, 0 left" in text
        assert "500/s" in text  # 1,000 leases in the two seconds of four calls' clock readings
