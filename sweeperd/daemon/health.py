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

# The scheduler proves it is alive every HEARTBEAT_S; the daemon is ready while every node
# answered within READY_INTERVALS intervals.
HEARTBEAT_S = 1.0
READY_INTERVALS = 3


class Health:
    """Liveness and readiness, read from the scheduler, the schedule and the fleet (`settings`
    gives the running settings: a SIGHUP may change the intervals)."""

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
        self._settings = settings
        self._clock = clock
        self._heartbeat = clock()

    def beat(self) -> None:
        """Record the heartbeat job's run: the scheduler runs jobs."""
        self._heartbeat = self._clock()

    def healthy(self) -> bool:
        """Tell whether the scheduler is alive: its heartbeat job ran lately."""
        return self._scheduler.running and self._clock() - self._heartbeat <= 5 * HEARTBEAT_S

    def _window(self) -> float:
        """Return how lately a primary must have answered: three of the shortest interval."""
        s = self._settings()
        interval = self._schedule.shortest_interval() or max(s.interval, s.daemon.discover)
        return READY_INTERVALS * interval

    def ready(self) -> bool:
        """Tell whether the daemon is ready: every primary that owns a swept queue (every
        primary, while none is swept) answered within the last three intervals and does not
        refuse every sweep (no verb, a command the user lacks), and the servers are the topology
        the options name."""
        now, nodes = self._clock(), self._fleet.primaries_of(self._schedule.queue_names())
        window = self._window()
        return bool(nodes) and all(
            n.answered_within(now, window) and n.refusal is None for n in nodes or ()
        )

    def status_text(self, ready: bool) -> str:
        """Return what systemctl status shows: what the daemon sweeps, or what it waits for."""
        if ready:
            return f"sweeping {len(self._schedule.queue_names())} queues on {self.node_names()}"
        return self.waiting()

    def waiting(self) -> str:
        """Say what readiness waits for: servers that are the topology named; the layout (each
        seed and its error); the primaries of the swept queues that have not answered lately,
        each with its error, and those that have."""
        wrong, known = self._fleet.wrong, self._fleet.primaries()
        if wrong is not None:
            return wrong.message
        if not known:
            said = self._fleet.unreachable
            where = self._settings().connection.shown_seeds
            return f"waiting for {where} to answer" + (f": {said}" if said else "")
        holders = self._fleet.primaries_of(self._schedule.queue_names())
        if holders is None:
            return "waiting for a primary to serve the slot of every queue swept"
        refused = [(n.name, n.refusal) for n in holders if n.refusal is not None]
        if refused:
            return "; ".join(f"{name} refuses every sweep ({e.reason}): {e}" for name, e in refused)
        now, window = self._clock(), self._window()
        late = [n for n in holders if not n.answered_within(now, window)]
        answer = [n.name for n in known if n.answered_within(now, window)]
        said = ", ".join(f"{n.name} ({n.error or 'no answer yet'})" for n in late) or "them"
        return f"waiting for {said} to answer" + (f"; {', '.join(answer)} answer" if answer else "")

    def sources(self) -> str:
        """Say where each primary's deadlines come from, for the landing page: a lease taken
        since its queue's last sweep is back at its deadline only where the server tells of it."""
        lines = [
            f"deadline source on {name}: {source}"
            + ("" if source is SourceState.TRACKING else f" (the interval alone: {why})")
            for name, source, why in self._fleet.sources()
        ]
        return "\n".join(lines)

    def node_names(self) -> str:
        """Name the primaries swept now, or where they are asked for while none is known."""
        names = [n.name for n in self._fleet.primaries()]
        if names:
            return ", ".join(names)
        return self._settings().connection.node
