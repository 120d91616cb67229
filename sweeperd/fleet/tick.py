"""One scheduled tick of a batch of queues on one node: the epoch, one call each, the backlogs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis
import structlog

from sweeperd.config.settings import QueueSettings
from sweeperd.fleet.drain import Drainer
from sweeperd.fleet.ledger import Ledger
from sweeperd.fleet.node import Node, NotPrimary
from sweeperd.keyspace import QueueKeys
from sweeperd.logs import ID_CAP
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.connection import UNREACHABLE
from sweeperd.verb.replies import Call, CallResult, SweepReply
from sweeperd.verb.rounds import sweep_round

log = structlog.get_logger("sweeperd.tick")


@dataclass
class Tick:
    """A batch of queues swept in one pipelined round trip; what is left goes to the drainer."""

    node: Node
    ledger: Ledger
    drainer: Drainer
    prefix_root: str
    on_restart: Callable[[Node], None] = lambda node: None
    on_retry: Callable[[], None] = lambda: None  # the node asks to be tried again soon (loading)
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time

    def run(self, batch: Sequence[QueueSettings]) -> list[QueueSettings]:
        """The epoch, then one call per queue not already draining; a queue left with leases
        due drains on. A call a Cluster held (its slot migrating) or sent elsewhere is counted
        as held, not as a failure; the queues sent elsewhere (MOVED, or a primary demoted) are
        returned, for the topology to route again."""
        started = self.clock()
        if not self.node.may_try(started):
            return []
        queues = [q for q in batch if not self.drainer.holds(q.name)]
        try:
            results = self.node.judged(self.send(self.calls(queues), started))
        except NotPrimary:  # demoted: its queues' calls are held, to go to the new primary
            for q in queues:
                self.ledger.hold(q.name, Reason.MOVED)
            return queues
        except Exception as exc:  # whatever it was, every queue of the batch failed
            self.fail_all(queues, exc, started)
            return []
        took = self.clock() - started
        if len(results) == 1 and isinstance(results[0].reply, SweepReply):
            self.node.sizer.observe(
                results[0].call.limit, results[0].reply.taken, results[0].seconds(took)
            )
        at = self.wall_clock()
        held = [(q, r.redirect) for q, r in zip(queues, results, strict=True) if r.redirect]
        swept = [(q, r) for q, r in zip(queues, results, strict=True) if not r.redirect]
        self.ledger.record_round(
            [q.name for q, _ in swept], [r for _, r in swept], at, duration_s=took
        )
        for q, reason in held:
            self.ledger.hold(q.name, reason)
        for q, result in swept:
            if isinstance(result.reply, SweepReply) and result.expired_left:
                self.drainer.add(q, result.call.keys, result.expired_left)
        return [q for q, reason in held if reason is Reason.MOVED]

    def calls(self, queues: Sequence[QueueSettings]) -> list[Call]:
        """The node's call size shared out: the round stays about one call's target long."""
        share = max(1, self.node.sizer.size // max(1, len(queues)))
        return [
            Call(
                QueueKeys(q.name, self.prefix_root),
                q.max_stalled,
                min(q.limit, share),
                listed=ID_CAP,  # the log's ids: the counts are whole
            )
            for q in queues
        ]

    def send(self, calls: list[Call], now: float) -> list[CallResult]:
        epoch = self.node.look(now)
        if epoch.restarted:
            self.on_restart(self.node)
        return sweep_round(self.node.client, epoch.executor, calls, self.node.packed)

    def fail_all(self, queues: Sequence[QueueSettings], exc: Exception, started: float) -> None:
        """The node is down or loading, refused INFO or the verb's choice, is no primary of the
        kind the options say, or the tick itself broke."""
        error = SweepError.of(exc)
        if error.reason is Reason.LOADING:  # up, but not yet: again soon, not after a backoff
            self.on_retry()
        if isinstance(exc, UNREACHABLE):
            self.node.failed(self.clock(), exc)
        if not isinstance(exc, SweepError | redis.RedisError):
            log.exception("tick_failed", node=self.node.name)
            error = SweepError(Reason.OTHER, f"{type(exc).__name__}: {exc}")
        names = [q.name for q in queues]
        self.ledger.fail_tick(names, error, duration_s=self.clock() - started)
