"""Every primary the daemon sweeps, each a Member; queues routed to the primary that owns their
slot, and the layout followed through failovers and migrations."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import structlog

from sweeperd.config.settings import QueueSettings
from sweeperd.constants import ExecutorChoice, TopologyMode
from sweeperd.fleet.holds import Holds
from sweeperd.fleet.layoutwatch import LayoutWatch, slot_moves
from sweeperd.fleet.ledger import Ledger
from sweeperd.fleet.listener import SourceState
from sweeperd.fleet.member import Member
from sweeperd.fleet.node import Node
from sweeperd.fleet.outcome import RESTARTED, Outcome
from sweeperd.fleet.primary import Primary
from sweeperd.fleet.routes import Routes, Slots
from sweeperd.keyspace import members_key
from sweeperd.metrics.registry import Metrics
from sweeperd.metrics.state import NodeState
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.connection import UNREACHABLE, Connection
from sweeperd.server.topology import (
    Layout,
    Source,
    check_standalone,
    predecessor,
    slot_of,
    source_of,
)
from sweeperd.verb.sizing import CallSizer

log = structlog.get_logger("sweeperd.fleet")

# A Cluster primary runs WORKERS ticks at once (batches falling due together). Sentinel is asked
# for the primary before every tick, unless asked within SENTINEL_TICK_S. Queues whose slot no
# primary serves are counted on the node UNROUTED. A primary no more keeps its series for
# RETIRED_TTL_S, as a queue no more does.
WORKERS = 4
SENTINEL_TICK_S = 0.1
UNROUTED = "none"
RETIRED_TTL_S = 3600.0


@dataclass
class Tuning:
    """What every member is built with; SIGHUP changes the call target and the drain share in
    place. `at_deadlines`: each queue is swept at its deadline too; `hear_changes`: and woken by
    the server's word of a new lease (CLIENT TRACKING); a restart changes those two."""

    prefix_root: str
    executor: ExecutorChoice
    call_target_s: float
    drain_share: float
    at_deadlines: bool = False
    hear_changes: bool = False


@dataclass(frozen=True)
class Retired:
    """A primary no more: the restarts its series keep showing until RETIRED_TTL_S have passed
    since it stopped being one (monotonic)."""

    restarts: int
    since: float


class Fleet:
    """The primaries and their members, the layout that routes queues to them, and its refresh.

    Standalone and Sentinel have one primary at a time and tick on the scheduler's thread, as
    one server always did. A Cluster's primaries each tick on threads of their own, so a hung
    primary holds its own queues only. The layout is read on a thread of its own too (a hung
    node may hold CLUSTER SLOTS for the socket timeout): ticks route by the last one read.
    What a tick, a drain or a layout read finds that the schedule must answer (a restart, a
    server loading) is handed to `report`, the daemon's.
    """

    def __init__(
        self,
        connection: Connection,
        metrics: Metrics,
        tuning: Tuning,
        *,
        report: Callable[[Outcome], None],
        clock: Callable[[], float] = time.monotonic,
        source: Source | None = None,
    ) -> None:
        self._connection = connection
        self._metrics = metrics
        self._tuning = tuning
        self._answer = report
        self._clock = clock
        self._fan_out = connection.topology.cluster
        self._slots = Slots(tuning.prefix_root)
        self._routes = Routes(None, self._slots, ())
        self._members: dict[str, Member] = {}
        self._started = False
        self._lock = threading.RLock()
        self._watch = LayoutWatch(
            source if source is not None else source_of(connection),
            self.mode,
            self.apply,
            on_moved=lambda: self.report(RESTARTED),
            clock=clock,
        )
        self._holds = Holds(clock)
        metrics.add_collector(self._holds)
        self._nowhere = Ledger(metrics.numbers, UNROUTED, self._holds)
        self._retired: dict[str, Retired] = {}
        self._holders: tuple[Routes, Collection[str], list[Primary] | None] | None = None
        self._owned: dict[str, QueueSettings] = {}

    @property
    def mode(self) -> TopologyMode:
        return self._connection.topology.mode

    # The layout.
    def refresh(self) -> bool:
        """Read the layout now (see LayoutWatch.refresh)."""
        return self._watch.refresh()

    def refresh_soon(self) -> None:
        """Read the layout again soon: something said it moved."""
        self._watch.refresh_soon()

    def follow(self) -> None:
        """Read the layout now, on the caller's thread (see LayoutWatch.follow)."""
        self._watch.follow()

    @property
    def unreachable(self) -> str | None:
        """Why the layout could not be read last time, while it could not."""
        return self._watch.unreachable

    @property
    def wrong(self) -> SweepError | None:
        """Why the servers are not the topology the options name, while they are not."""
        return self._watch.wrong

    def apply(self, layout: Layout) -> bool:
        """Apply a layout read: a member for each primary new to it (inheriting the epoch of the one
        whose slots it took over), the members of the primaries gone dropped, the queues' routes
        given to the numbers; whether slots changed hands."""
        with self._lock:
            old = self._routes.layout
            added = [name for name in layout.primaries if name not in self._members]
            for name in added:
                self._members[name] = member = self._member(name, layout.primaries[name])
                before = predecessor(old, layout, name)
                if before is not None and before in self._members:
                    member.inherit(self._members[before])
            gone = [name for name in self._members if name not in layout.primaries]
            for name in gone:
                self._drop(self._members.pop(name))
            self._routes = Routes(layout, self._slots, self._members.keys())
            if layout != old:
                self._metrics.numbers.route_by(self._routes.owner)
            self._forget_retired(self._clock())
        if old is None or old == layout:
            return False
        # A primary added or gone is a failover or a new node (a warning); slots moved, a reshard.
        log.log(
            logging.WARNING if added or gone else logging.INFO,
            "topology_changed",
            mode=self.mode,
            added=added,
            gone=gone,
            slots_moved=slot_moves(old, layout),
            primaries=list(layout.primaries),
        )
        return True

    # The members.
    def _member(self, name: str, address: tuple[str, int] | None) -> Member:
        """Make the member of a primary new to the layout, started once the fleet is."""
        t = self._tuning
        node = Node(
            name,
            self._connection.client(address),
            t.executor,
            CallSizer(t.call_target_s),
            primary_only=self.mode is not TopologyMode.STANDALONE,
            cluster=self._fan_out,
            restarts=self._retired.pop(name, Retired(0, 0.0)).restarts,
            clock=self._clock,
        )
        self._metrics.numbers.add_node(name)
        made = Member(
            node,
            Ledger(self._metrics.numbers, name, self._holds),
            prefix_root=t.prefix_root,
            share=t.drain_share,
            report=self.report,
            clock=self._clock,
            at_deadlines=t.at_deadlines,
            hear_changes=t.hear_changes,
            brief=not self._metrics.numbers.full,
            workers=WORKERS if self._fan_out else 0,
        )
        if self._started:
            made.start()
        return made

    def _drop(self, member: Member) -> None:
        """Drop a primary no more (failed over, demoted, removed): its threads end, its state's
        series go; its restarts stay, as counters do."""
        member.stop(0)
        self._retired[member.name] = Retired(member.restarts, self._clock())

    def _forget_retired(self, now: float) -> None:
        """Drop the series of a primary gone for RETIRED_TTL_S too (restarts, sweeps, ghosts):
        failovers that name new hosts (new pods, new addresses) would pile them up forever."""
        for name, retired in list(self._retired.items()):
            if now - retired.since > RETIRED_TTL_S:
                del self._retired[name]
                self._metrics.numbers.forget_node(name)

    def home(self) -> Primary | None:
        """Return the primary that holds sweeperd's members key now (in a cluster, its slot's
        owner); None while no primary is known."""
        with self._lock:
            layout = self._routes.layout
            key = members_key(self._tuning.prefix_root)
            owner = layout.owner(slot_of(key)) if layout is not None else None
            member = self._members.get(owner) if owner is not None else None
            return member.primary if member is not None else None

    def primaries(self) -> list[Primary]:
        """Return every primary, as the daemon's jobs may use it (see Primary)."""
        with self._lock:
            return [m.primary for m in self._members.values()]

    def states(self) -> list[NodeState]:
        """Return every primary's state now, and the restarts of those no longer primaries."""
        with self._lock:
            retired = [NodeState(name, r.restarts) for name, r in self._retired.items()]
            return [m.state() for m in self._members.values()] + retired

    def sources(self) -> list[tuple[str, SourceState, str]]:
        """Return each primary's source of deadlines now, and why it is that one."""
        with self._lock:
            members = list(self._members.values())
        return [(m.name, m.source, m.why) for m in members]

    def retune(self, tuning: Tuning) -> None:
        """Apply SIGHUP's new call target and drain share, in place."""
        with self._lock:
            self._tuning = tuning
            for m in self._members.values():
                m.retune(tuning.call_target_s, tuning.drain_share)

    def own(self, queues: Sequence[QueueSettings]) -> None:
        """Keep the queues this replica sweeps now, with their settings, for their wakes; drop
        those it swept until now from every drain, ledger and wake."""
        owned = {q.name: q for q in queues}
        with self._lock:
            lost = self._owned.keys() - owned.keys()
            self._owned = owned
            members = list(self._members.values())
        for queue in lost:
            for m in members:
                m.forget(queue)
            self._nowhere.forget(queue)
            self._holds.forget(queue)

    # The sweep.
    def primaries_of(self, queues: Collection[str]) -> list[Primary] | None:
        """Return the primaries that own some of the queues (every primary when there are none);
        None when a queue has no owner or the servers are not the topology named. The answer
        for the same collection under the same layout is kept: readiness asks twice a second,
        and routing 10,000 queues each time was half the daemon's CPU at idle."""
        with self._lock:
            if self.wrong is not None:
                return None
            kept = self._holders
            if kept is not None and kept[0] is self._routes and kept[1] is queues:
                return kept[2]
            nodes = self._primaries_of(queues)
            self._holders = (self._routes, queues, nodes)
            return nodes

    def _primaries_of(self, queues: Collection[str]) -> list[Primary] | None:
        """Hold the lock."""
        if not queues:
            return [m.primary for m in self._members.values()]
        owners = self._routes.owners(queues)
        if None in owners:
            return None
        return [self._members[name].primary for name in owners if name is not None]

    def sweep(self, batch: Sequence[QueueSettings]) -> None:
        """Tick the batch on every primary that owns some of it; count the queues no primary
        serves failed (a connection failure: nobody to send them to, or the servers are not the
        topology the options name). Behind Sentinel the primary is asked for first: a demoted
        one may go on answering as a primary for seconds, and what it writes then is lost."""
        self._ask_sentinel()
        with self._lock:
            routes, wrong = self._routes, self.wrong
            routed, unrouted = routes.split(batch) if wrong is None else ({}, list(batch))
            members = {name: self._members[name] for name in routed}
        if unrouted:
            why = "no primary is known" if routes.layout is None else "no primary serves its slot"
            error = wrong or SweepError(Reason.CONNECTION, f"{why} now")
            for q in unrouted:
                self._nowhere.fail(q.name, error)
        for name, queues in routed.items():
            members[name].sweep(queues)

    def wake(self, now: float) -> None:
        """Sweep, on each primary, its queues whose wake has come by `now` (monotonic) and that
        it still serves: a queue that moved to another primary, or that this replica no longer
        sweeps, is not woken here; its sweeps where it lives now arm its wakes there. Behind
        Sentinel the epoch is read first, as every tick does; elsewhere the replies' run_id is
        the epoch watch."""
        self._ask_sentinel()
        look = self.mode is TopologyMode.SENTINEL
        with self._lock:
            routes, owned = self._routes, self._owned
            members = list(self._members.values())
        for member in members:
            member.wake(now, owned, routes, look=look)

    def next_wake(self) -> float | None:
        """Return the soonest wake of any primary's queues (monotonic); None when none waits."""
        with self._lock:
            wakes = [m.next_wake() for m in self._members.values()]
        return min((at for at in wakes if at is not None), default=None)

    def _ask_sentinel(self) -> None:
        if self.mode is TopologyMode.SENTINEL and self._watch.asked_before(SENTINEL_TICK_S):
            self.refresh()

    def report(self, outcome: Outcome) -> None:
        """Act on what a tick, a drain call or a layout read found: a node down or queues sent
        elsewhere make the layout read again; what the schedule must answer goes to the daemon."""
        if outcome.moved or outcome.down:
            self.refresh_soon()
        if outcome:
            self._answer(outcome)

    # The lifetime.
    def start(self) -> None:
        """Read the layout now and start the members, and the layout thread when the layout can
        change. Servers that answer but are not the topology the options name are refused here
        (SweepError); servers that do not answer yet are retried by the ticks."""
        self.refresh()
        if self.wrong is not None:
            raise self.wrong
        if self.mode is TopologyMode.STANDALONE:
            with contextlib.suppress(*UNREACHABLE):
                check_standalone(self._connection, self._connection.client())
        with self._lock:
            self._started = True
            for m in self._members.values():
                m.start()
        self._watch.start()

    def stop(self, timeout_s: float) -> None:
        self._watch.stop()
        with self._lock:
            members = list(self._members.values())
        for m in members:
            m.stop(timeout_s / max(1, len(members)))
