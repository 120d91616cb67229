"""Whether the daemon lives and is ready: the scheduler's heartbeat for /healthz, the primaries
that own swept queues answering for /readyz, and what systemd's status says."""

from __future__ import annotations

import time
from collections.abc import Callable

from apscheduler.schedulers.base import BaseScheduler

from sweeperd.config.settings import Settings
from sweeperd.daemon.schedule import Schedule
from sweeperd.fleet.fleet import Fleet
from sweeperd.fleet.listener import SourceState

HEARTBEAT_S = 1.0  # the scheduler proves it is alive this often
READY_INTERVALS = 3  # ready while every node answered within this many intervals


class Health:
    """Liveness and readiness, read from the scheduler, the schedule and the fleet."""

    def __init__(
        self,
        scheduler: BaseScheduler,
        schedule: Schedule,
        fleet: Fleet,
        settings: Callable[[], Settings],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._scheduler = scheduler
        self._schedule = schedule
        self._fleet = fleet
        self._settings = settings  # the running ones: a SIGHUP may change the intervals
        self._clock = clock
        self._heartbeat = clock()

    def beat(self) -> None:
        """The heartbeat job: the scheduler runs jobs."""
        self._heartbeat = self._clock()

    def healthy(self) -> bool:
        """The scheduler is alive: its heartbeat job ran lately."""
        return self._scheduler.running and self._clock() - self._heartbeat <= 5 * HEARTBEAT_S

    def ready(self) -> bool:
        """Every primary that owns a swept queue (every primary, while none is swept) answered
        within the last three intervals, and the servers are the topology the options name."""
        s = self._settings()
        interval = self._schedule.shortest_interval() or max(s.interval, s.daemon.discover)
        now, nodes = self._clock(), self._fleet.holding(self._schedule.queue_names())
        return bool(nodes) and all(
            n.answered_within(now, READY_INTERVALS * interval) for n in nodes or ()
        )

    def status_text(self, ready: bool) -> str:
        """What systemctl status shows: what the daemon sweeps, or what it waits for."""
        if ready:
            return f"sweeping {len(self._schedule.queue_names())} queues on {self.node_names()}"
        return f"waiting for {self.node_names()} to answer"

    def sources(self) -> str:
        """Where each primary's deadlines come from, for the landing page: a lease taken since
        its queue's last sweep is back at its deadline only where the server tells of it."""
        lines = [
            f"deadline source on {name}: {source}"
            + ("" if source is SourceState.TRACKING else f" (the interval alone: {why})")
            for name, source, why in self._fleet.sources()
        ]
        return "\n".join(lines)

    def node_names(self) -> str:
        """The primaries swept now, or where they are asked for while none is known."""
        names = [n.name for n in self._fleet.nodes()]
        if names:
            return ", ".join(names)
        return self._settings().connection.node
