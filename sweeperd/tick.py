"""One tick of a batch of queues on one node: look at the epoch, drain, count, report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
import structlog

from sweeperd.keyspace import QueueKeys
from sweeperd.logs import cap_ids
from sweeperd.metrics import Metrics
from sweeperd.node import Epoch, Node
from sweeperd.reasons import SweepError
from sweeperd.rounds import Call, CallResult, Depths, SweepReply, read_exempt, sweep_round
from sweeperd.settings import QueueSettings

log = structlog.get_logger("sweeperd.tick")

UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)


@dataclass
class QueueTick:
    """One queue's share of a tick."""

    queue: QueueSettings
    keys: QueueKeys
    failed: bool = False
    depths: Depths | None = None
    finished_at: float = 0.0


@dataclass
class Tick:
    """A batch of queues swept together: every round is one pipelined round trip."""

    node: Node
    metrics: Metrics
    prefix_root: str
    drain_budget: int
    stopping: Callable[[], bool] = lambda: False
    on_restart: Callable[[Node], None] = lambda node: None
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    queues: list[QueueTick] = field(default_factory=list)

    def run(self, batch: Sequence[QueueSettings]) -> None:
        """Sweep the batch: drain while full batches come back, within the budget."""
        started = self.clock()
        if not self.node.may_try(started):
            return
        self.queues = [QueueTick(q, QueueKeys(q.name, self.prefix_root)) for q in batch]
        try:
            epoch = self.node.look(started)
            if epoch.restarted:
                self.on_restart(self.node)
            self.drain(epoch)
        except UNREACHABLE as exc:
            self.node.failed(self.clock(), exc)
            for q in self.queues:
                if not q.failed:
                    self.fail(q, SweepError.of(exc))
        except (SweepError, redis.RedisError) as exc:  # no verb, or INFO refused (an ACL)
            for q in self.queues:
                if not q.failed:
                    self.fail(q, SweepError.of(exc))
        self.report(started)

    def drain(self, epoch: Epoch) -> None:
        going = list(self.queues)
        for _ in range(self.drain_budget):
            if not going or self.stopping():
                return
            calls = [
                Call(q.keys, q.queue.max_stalled, q.queue.limit, epoch.info.time_ms) for q in going
            ]
            results = sweep_round(self.node.client, epoch.executor, calls)
            exempt = self.exempt_of(results, epoch.info.run_id)
            now = self.clock()
            for q, result in zip(going, results, strict=True):
                self.account(q, result, exempt, now)
            going = [q for q in going if not q.failed and q.depths and q.depths.expired]

    def exempt_of(self, results: Sequence[CallResult], epoch: bytes) -> set[tuple[str, bytes]]:
        recovered = [
            (r.call.keys, job_id)
            for r in results
            if isinstance(r.reply, SweepReply)
            for job_id in r.reply.recovered
        ]
        return read_exempt(self.node.client, recovered, epoch)

    def account(
        self, q: QueueTick, result: CallResult, exempt: set[tuple[str, bytes]], now: float
    ) -> None:
        q.finished_at = now
        q.depths = result.depths or q.depths
        if isinstance(result.reply, SweepError):
            self.fail(q, result.reply)
            return
        reply = result.reply
        exempt_ids = [i for i in reply.recovered if (q.queue.name, i) in exempt]
        self.metrics.record_call(
            q.queue.name,
            recovered=len(reply.recovered),
            dead=len(reply.dead),
            exempt=len(exempt_ids),
        )
        if reply.recovered or reply.dead:
            log.info(
                "sweep",
                queue=q.queue.name,
                recovered=len(reply.recovered),
                dead=len(reply.dead),
                exempt=len(exempt_ids),
                recovered_ids=cap_ids(reply.recovered),
                dead_ids=cap_ids(reply.dead),
                exempt_ids=cap_ids(exempt_ids),
            )

    def fail(self, q: QueueTick, error: SweepError) -> None:
        q.failed = True
        q.finished_at = q.finished_at or self.clock()
        self.metrics.record_failure(q.queue.name, error.reason)
        log.warning(
            "sweep_failed",
            queue=q.queue.name,
            node=self.node.name,
            reason=str(error.reason),
            error=error.message,
        )

    def report(self, started: float) -> None:
        succeeded_at = self.wall_clock()
        for q in self.queues:
            d = q.depths
            self.metrics.record_tick(
                q.queue.name,
                duration_s=max(0.0, (q.finished_at or self.clock()) - started),
                expired_left=None if d is None else d.expired,
                succeeded_at=None if q.failed else succeeded_at,
            )
            if d is not None:
                self.metrics.record_depths(
                    q.queue.name,
                    active=d.active,
                    pending=d.pending,
                    dead=d.dead,
                    failed=d.failed or 0,
                )
