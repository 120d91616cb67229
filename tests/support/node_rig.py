"""A node with its ledger, drainer and ticks in-process on a real server, time passed in: the
sweep path without the daemon around it, for the tests of its parts."""

from __future__ import annotations

from collections.abc import Callable

import redis
from prometheus_client import CollectorRegistry

from sweeperd.config.settings import QueueSettings
from sweeperd.constants import ExecutorChoice, QueueMetrics
from sweeperd.fleet.ledger import Ledger
from sweeperd.fleet.member import Member
from sweeperd.fleet.node import Node
from sweeperd.fleet.outcome import Outcome
from sweeperd.keyspace import QueueKeys
from sweeperd.metrics.registry import Metrics
from sweeperd.server.connection import connect
from sweeperd.verb.sizing import FIRST_SIZE, CallSizer
from tests.support.clock import Clock
from tests.support.helpers import PAST_MS

NODE = "n:1"  # the rig's node, as its series name it
ALL_RECOVER = 2**62


def seed(r: redis.Redis, keys: QueueKeys, count: int, **row: object) -> None:
    """`count` expired leases with rows (attempts 1 unless given), deadlines in id order."""
    pipe = r.pipeline(transaction=False)
    for n in range(count):
        job = f"j{n:06}"
        pipe.zadd(keys.active, {job: PAST_MS + n})
        pipe.hset(keys.job(job), mapping={"attempts": 1, **row})  # type: ignore[dict-item]
    pipe.execute()


def queue(name: str, limit: int = 1000, max_stalled: int = ALL_RECOVER) -> QueueSettings:
    return QueueSettings(name, 5.0, max_stalled, limit)


class Rig:
    """A node's member (its ledger, drainer and ticks) on the module server, time passed in (a
    Clock, or time.monotonic where a thread runs); `size` is the node's first call size; with
    `wakes`, its queues' wakes at their deadlines (`deadlines`), and with `hears` its listener
    (not started); with `brief`, idle calls reply briefly (as the daemon's do at
    --queue-metrics basic)."""

    def __init__(
        self,
        url: str,
        *,
        target_s: float = 0.002,
        size: int = FIRST_SIZE,
        clock: Callable[[], float] | None = None,
        wakes: bool = False,
        hears: bool = False,
        brief: bool = False,
    ) -> None:
        self.metrics = Metrics(CollectorRegistry(), version="test", level=QueueMetrics.FULL)
        self.clock = clock or Clock()
        self.node = Node(
            NODE,
            connect(url, socket_timeout=5.0),
            ExecutorChoice.AUTO,
            CallSizer(target_s, size),
            clock=self.clock,
        )
        self.told: list[Outcome] = []  # what the member reported
        self.member = Member(
            self.node,
            Ledger(self.metrics.numbers, NODE),
            prefix_root="emq",
            share=1.0,
            report=self.told.append,
            clock=self.clock,
            at_deadlines=wakes,
            hear_changes=hears,
            brief=brief,
        )
        self.ledger = self.member.ledger
        self.drainer = self.member.drainer
        self.deadlines = self.member.deadlines
        self.node.look(self.clock())

    def tick(self, *queues: QueueSettings, look: bool = True) -> Outcome:
        """One tick of `queues`, their series added first as the daemon's queue set adds them."""
        for q in queues:
            self.metrics.numbers.add_queue(q.name)
        return self.member.ticks.run(queues, self.clock(), look=look)

    def drain(self) -> int:
        """Steps until no queue is backlogged; the number of calls."""
        calls = 0
        while self.drainer.step() is not None:
            calls += 1
        return calls

    def value(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)
