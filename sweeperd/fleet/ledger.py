"""What each call did, counted and logged once: shared by the scheduled ticks and the drains."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from sweeperd.fleet.holds import Holds
from sweeperd.logs import cap_ids
from sweeperd.metrics.numbers import SweepNumbers
from sweeperd.reasons import Reason, SweepError
from sweeperd.verb.replies import NOTHING, CallResult, SweepReply

LOGGER = "sweeperd.sweep"
log = structlog.get_logger(LOGGER)


@dataclass
class Ledger:
    """Counts every call in the sweep's numbers, the one writer of what the calls did (which
    queues and nodes have series is the queue set's and the fleet's); logs a failure once per
    change of reason per queue (`failing` keeps each failing queue's reason), and a call a
    Cluster held once per change (the holds are every node's: a queue held on one primary
    resumes on another)."""

    numbers: SweepNumbers
    node: str
    holds: Holds = field(default_factory=Holds)
    failing: dict[str, Reason] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(
        self, queue: str, result: CallResult, at: float, *, level: int = logging.INFO
    ) -> SweepReply | None:
        """Count one call (its reply or its failure) and the numbers after it, at Unix time
        `at`; the reply when the call succeeded. `level` is the `sweep` event's log level."""
        self.numbers.record(self.node, queue, result, at)
        if isinstance(result.reply, SweepReply):
            self.holds.release(queue, self.node)
        return self._log_call(queue, result, level)

    def record_round(
        self, calls: Sequence[tuple[str, CallResult]], at: float, *, duration_s: float
    ) -> None:
        """Count a tick's calls, one (queue, result) per queue, together (the tick's round trip
        as each queue's duration) and log each as record() logs it."""
        self.numbers.record_round(self.node, calls, at, duration_s=duration_s)
        for queue, result in calls if self.holds.held else ():
            if isinstance(result.reply, SweepReply):
                self.holds.release(queue, self.node)
        for queue, result in calls:
            # A quiet success of a queue that was not failing has nothing to log (`failing` is
            # only read here: a queue failing meanwhile is logged by the call that failed).
            reply = result.reply
            if reply is NOTHING and not self.failing:
                continue
            if isinstance(reply, SweepError) or reply.taken or self.failing:
                self._log_call(queue, result, logging.INFO)

    def _log_call(self, queue: str, result: CallResult, level: int) -> SweepReply | None:
        """Log what a counted call did: its failure, its recovery, what it took (at warning when
        it dropped ghosts: ids in active with no row, a job lost before the call)."""
        reply = result.reply
        if isinstance(reply, SweepError):
            self._log_failure(queue, reply)
            return None
        self._log_recovery(queue)
        if reply.ghosts:
            level = logging.WARNING
        if reply.taken and (level >= logging.INFO or logging.getLogger(LOGGER).isEnabledFor(level)):
            recovered, dead, exempt = reply.sizes
            log.log(
                level,
                "sweep",
                queue=queue,
                recovered=recovered,
                dead=dead,
                exempt=exempt,
                ghosts=reply.ghosts,
                recovered_ids=cap_ids(reply.recovered),
                dead_ids=cap_ids(reply.dead),
                exempt_ids=cap_ids(reply.exempt),
                **({"ghost_ids": cap_ids(reply.ghost_ids)} if reply.ghosts else {}),
            )
        return reply

    def fail(self, queue: str, error: SweepError) -> None:
        """Count a call that failed without a reply; log it when the queue's reason changes."""
        self.numbers.record_failure(self.node, queue, error.reason)
        self._log_failure(queue, error)

    def fail_tick(self, queues: Sequence[str], error: SweepError, *, duration_s: float) -> None:
        """Count a tick of these queues that failed whole (the node down, the tick broken): its
        round trip as each queue's duration, each queue's failure as fail() counts it."""
        self.numbers.record_ticks(self.node, queues, duration_s=duration_s)
        for queue in queues:
            self.fail(queue, error)

    def hold(self, queue: str, reason: Reason) -> None:
        """Count a call this node held or sent elsewhere, unrun, as a hold only: no failure
        (see Holds)."""
        self.holds.hold(queue, self.node, reason)

    def _log_failure(self, queue: str, error: SweepError) -> None:
        """Log a counted failure when the queue's reason changes."""
        with self.lock:
            changed = self.failing.get(queue) != error.reason
            self.failing[queue] = error.reason
        if changed:
            log.warning(
                "sweep_failed",
                queue=queue,
                node=self.node,
                reason=str(error.reason),
                error=error.message,
            )

    def _log_recovery(self, queue: str) -> None:
        """Log once that a queue that was failing succeeded."""
        with self.lock:
            reason = self.failing.pop(queue, None)
        if reason is not None:
            log.info("sweep_recovered", queue=queue, node=self.node, after=str(reason))

    def forget(self, queue: str) -> None:
        with self.lock:
            self.failing.pop(queue, None)
