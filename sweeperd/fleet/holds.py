"""Queues a Cluster holds back (their slot migrating, or served elsewhere now): since when, where
and why; logged once per change, counted by node and reason, exported at scrape time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from sweeperd.metrics.families import FAMILIES
from sweeperd.reasons import Reason

log = structlog.get_logger("sweeperd.sweep")

HOLDS = ("sweeperd_sweeps_held", "sweeperd_held_queues", "sweeperd_oldest_hold_age_seconds")

HINTS = {
    Reason.MIGRATING: "the queue's slot is migrating to another primary: its sweep is held, "
    "nothing written, until the slot has moved",
    Reason.MOVED: "another primary serves the queue now (its slot moved, or this one was "
    "demoted): where each queue lives is read again",
}


@dataclass(frozen=True)
class Hold:
    """Where a queue is held, why, and since when it is held whatever the reason since
    (monotonic)."""

    node: str
    reason: Reason
    since: float


class Holds(Collector):
    """Every queue held now, and how many calls each node held, by (node, reason)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.held: dict[str, Hold] = {}
        self.calls: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()

    def hold(self, queue: str, node: str, reason: Reason) -> None:
        """Count a call of `queue` that `node` held or sent elsewhere, unrun; log it when the
        queue's hold begins or changes node or reason."""
        now = self.clock()
        with self.lock:
            key = (node, str(reason))
            self.calls[key] = self.calls.get(key, 0) + 1
            was = self.held.get(queue)
            if was is not None and (was.node, was.reason) == (node, reason):
                return
            self.held[queue] = Hold(node, reason, now if was is None else was.since)
        log.warning("sweep_held", queue=queue, node=node, reason=str(reason), hint=HINTS[reason])

    def release(self, queue: str, node: str) -> None:
        """End the queue's hold: its call ran on `node`; log how long it was held (a failure ends
        none: the queue is still unswept, and its failure is counted as well)."""
        if queue not in self.held:
            return
        with self.lock:
            was = self.held.pop(queue, None)
        if was is not None:
            log.info(
                "sweep_resumed",
                queue=queue,
                node=node,
                after=str(was.reason),
                held_s=round(self.clock() - was.since, 1),
            )

    def forget(self, queue: str) -> None:
        """Drop the hold of a queue no longer swept."""
        with self.lock:
            self.held.pop(queue, None)

    def oldest_s(self) -> float:
        """Return how long the queue held the longest has been held; 0 when none is."""
        with self.lock:
            since = min((h.since for h in self.held.values()), default=None)
        return 0.0 if since is None else self.clock() - since

    def collect(self) -> Iterator[Metric]:
        calls = FAMILIES["sweeperd_sweeps_held"].labelled()
        with self.lock:
            counted = sorted(self.calls.items())
            held = len(self.held)
        for (node, reason), n in counted:
            calls.add_metric([node, reason], n)
        yield calls
        yield FAMILIES["sweeperd_held_queues"].value(held)
        yield FAMILIES["sweeperd_oldest_hold_age_seconds"].value(self.oldest_s())

    def describe(self) -> Iterator[Metric]:
        for name in HOLDS:
            yield FAMILIES[name].bare()
