"""Every primary the daemon sweeps, each with its node, ledger, drainer and threads; queues routed
to the primary that owns their slot, and the layout followed through failovers and migrations."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import structlog

from sweeperd.config.settings import QueueSettings
from sweeperd.constants import ExecutorChoice, TopologyMode
from sweeperd.fleet.drain import Drainer
from sweeperd.fleet.holds import Holds
from sweeperd.fleet.layoutwatch import LayoutWatch, slot_moves
from sweeperd.fleet.ledger import Ledger
from sweeperd.fleet.node import Node
from sweeperd.fleet.tick import Tick
from sweeperd.keyspace import QueueKeys, members_key
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

WORKERS = 4  # ticks one primary runs at once (batches falling due together)
SENTINEL_TICK_S = 0.1  # Sentinel is asked for the primary before every tick, unless within this
UNROUTED = "none"  # the ledger's node for queues whose slot no primary serves
RETIRED_TTL_S = 3600.0  # a primary no more keeps its series this long, as a queue no more does


@dataclass
class Member:
    """One primary: its node, its ledger, its drainer, and the queues its ticks hold now."""

    node: Node
    ledger: Ledger
    drainer: Drainer
    pool: ThreadPoolExecutor | None  # None: the scheduler's thread runs the tick
    busy: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def claim(self, queues: Sequence[QueueSettings]) -> list[QueueSettings]:
        """The queues no tick of this primary holds, now held: one call per queue at a time."""
        with self.lock:
            free = [q for q in queues if q.name not in self.busy]
            self.busy.update(q.name for q in free)
            return free

    def release(self, queues: Sequence[QueueSettings]) -> None:
        with self.lock:
            self.busy.difference_update(q.name for q in queues)


@dataclass
class Tuning:
    """The settings a SIGHUP may change in place, and what every member is built with."""

    prefix_root: str
    executor: ExecutorChoice
    call_target_s: float
    drain_share: float


@dataclass(frozen=True)
class Retired:
    """A primary no more: what its series keep showing until RETIRED_TTL_S have passed."""

    restarts: int  # run_id changes seen while it was a primary
    since: float  # monotonic: when it stopped being one


class Fleet:
    """The primaries and their members, the layout that routes queues to them, and its refresh.

    Standalone and Sentinel have one primary at a time and tick on the scheduler's thread, as
    one server always did. A Cluster's primaries each tick on threads of their own, so a hung
    primary holds its own queues only. The layout is read on a thread of its own too (a hung
    node may hold CLUSTER SLOTS for the socket timeout): ticks route by the last one read.
    """

    def __init__(
        self,
        connection: Connection,
        metrics: Metrics,
        tuning: Tuning,
        *,
        on_restart: Callable[[Node], None],
        on_moved: Callable[[], None] = lambda: None,
        on_retry: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        source: Source | None = None,
    ) -> None:
        self.connection = connection
        self.metrics = metrics
        self.tuning = tuning
        self.on_restart = on_restart
        self.on_retry = on_retry  # a primary asks to be swept again soon (it was loading)
        self.clock = clock
        self.fan_out = connection.topology.cluster
        self.layout: Layout | None = None
        self.members: dict[str, Member] = {}
        self.started = False
        self.lock = threading.RLock()  # the members and the layout
        self.watch = LayoutWatch(
            source if source is not None else source_of(connection),
            self.mode,
            self.applied,
            on_moved=on_moved,
            clock=clock,
        )
        self.slots: dict[str, int] = {}
        self.holds = Holds(clock)  # every primary's: a queue held on one resumes on another
        metrics.add_collector(self.holds)
        self.nowhere = Ledger(metrics.numbers, UNROUTED, self.holds)
        self.retired: dict[str, Retired] = {}  # a primary no more: its counters stay a while

    # The layout.
    def refresh(self) -> bool:
        """Read the layout now (see LayoutWatch.refresh)."""
        return self.watch.refresh()

    def doubt(self) -> None:
        """Something said the layout moved: read it again soon."""
        self.watch.doubt()

    @property
    def wrong(self) -> SweepError | None:
        """Why the servers are not the topology the options name, while they are not."""
        return self.watch.wrong

    def applied(self, layout: Layout) -> bool:
        with self.lock:
            return self.apply(layout)

    def apply(self, layout: Layout) -> bool:
        old, self.layout = self.layout, layout
        added = [name for name in layout.primaries if name not in self.members]
        for name in added:
            self.members[name] = member = self.member(name, layout.primaries[name])
            before = predecessor(old, layout, name)
            if before is not None and before in self.members:
                member.node.inherit(self.members[before].node)
        gone = [name for name in self.members if name not in layout.primaries]
        for name in gone:
            self.drop(self.members.pop(name))
        self.forget_retired(self.clock())
        if old is None or old == layout:
            return False
        log.log(  # a primary added or gone is a failover or a new node; slots moved, a reshard
            logging.WARNING if added or gone else logging.INFO,
            "topology_changed",
            mode=self.mode,
            added=added,
            gone=gone,
            slots_moved=slot_moves(old, layout),
            primaries=list(layout.primaries),
        )
        return True

    @property
    def mode(self) -> TopologyMode:
        return self.connection.topology.mode

    # The members.
    def member(self, name: str, address: tuple[str, int] | None) -> Member:
        t = self.tuning
        node = Node(
            name,
            self.connection.client(address),
            t.executor,
            CallSizer(t.call_target_s),
            primary_only=self.mode is not TopologyMode.STANDALONE,
            cluster=self.fan_out,
            restarts=self.retired.pop(name, Retired(0, 0.0)).restarts,
        )
        ledger = Ledger(self.metrics.numbers, name, self.holds)
        self.metrics.numbers.add_node(name)
        drainer = Drainer(
            node, ledger, share=t.drain_share, on_restart=self.on_restart, on_redirect=self.doubt
        )
        pool = (
            ThreadPoolExecutor(WORKERS, thread_name_prefix=f"sweep-{name}")
            if self.fan_out
            else None
        )
        made = Member(node, ledger, drainer, pool)
        if self.started:
            drainer.start()
        return made

    def drop(self, member: Member) -> None:
        """A primary no more (failed over, demoted, removed): its threads end, its state's
        series go; its restarts stay, as counters do."""
        member.drainer.stop(0)
        if member.pool is not None:
            member.pool.shutdown(wait=False, cancel_futures=True)
        self.retired[member.node.name] = Retired(member.node.restarts, self.clock())

    def forget_retired(self, now: float) -> None:
        """A primary gone for RETIRED_TTL_S loses its series too (restarts, sweeps, ghosts):
        failovers that name new hosts (new pods, new addresses) would pile them up forever."""
        for name, retired in list(self.retired.items()):
            if now - retired.since > RETIRED_TTL_S:
                del self.retired[name]
                self.metrics.numbers.forget_node(name)

    def home(self) -> Node | None:
        """The primary that holds sweeperd's members key now (in a cluster, its slot's owner);
        None while no primary is known."""
        with self.lock:
            layout = self.layout
            owner = layout.owner(slot_of(members_key(self.tuning.prefix_root))) if layout else None
            member = self.members.get(owner) if owner is not None else None
            return member.node if member is not None else None

    def nodes(self) -> list[Node]:
        with self.lock:
            return [m.node for m in self.members.values()]

    def states(self) -> list[NodeState]:
        """Every primary's state now, and the restarts of those no longer primaries."""
        with self.lock:
            retired = [NodeState(name, r.restarts) for name, r in self.retired.items()]
            return [m.node.state() for m in self.members.values()] + retired

    def retune(self, tuning: Tuning) -> None:
        """SIGHUP's new call target and drain share, in place."""
        with self.lock:
            self.tuning = tuning
            for m in self.members.values():
                m.node.sizer.target_s = tuning.call_target_s
                m.drainer.share = tuning.drain_share

    def forget(self, queue: str) -> None:
        """A queue no longer swept leaves every drain and ledger."""
        with self.lock:
            members = list(self.members.values())
        for m in members:
            m.drainer.forget(queue)
            m.ledger.forget(queue)
        self.nowhere.forget(queue)
        self.holds.forget(queue)

    # The sweep.
    def route(self, queues: Sequence[QueueSettings]) -> dict[str, list[QueueSettings]]:
        """The queues by the primary that owns their slot; those no primary serves are
        counted as failed (a connection failure: nobody to send them to, or the servers are
        not the topology the options name)."""
        groups: dict[str, list[QueueSettings]] = {}
        with self.lock:
            layout, wrong = self.layout, self.wrong
            for q in queues:
                owner = self.owner(q.name)
                if wrong is not None or owner is None:
                    why = "no primary is known" if layout is None else "no primary serves its slot"
                    self.nowhere.fail(q.name, wrong or SweepError(Reason.CONNECTION, f"{why} now"))
                    continue
                groups.setdefault(owner, []).append(q)
        return groups

    def owner(self, queue: str) -> str | None:
        """The primary that owns the queue's slot now, when it is one of the members."""
        layout = self.layout
        owner = layout.owner(self.slot(queue)) if layout is not None else None
        return owner if owner in self.members else None

    def holding(self, queues: Collection[str]) -> list[Node] | None:
        """The primaries that own some of the queues (every primary when there are none);
        None when a queue has no owner or the servers are not the topology named."""
        with self.lock:
            if self.wrong is not None:
                return None
            if not queues:
                return [m.node for m in self.members.values()]
            owners = {self.owner(q) for q in queues}
            if None in owners:
                return None
            return [self.members[name].node for name in owners if name is not None]

    def slot(self, queue: str) -> int:
        found = self.slots.get(queue)
        if found is None:
            found = self.slots[queue] = slot_of(QueueKeys(queue, self.tuning.prefix_root).active)
        return found

    def sweep(self, batch: Sequence[QueueSettings]) -> None:
        """One tick of the batch on every primary that owns some of it. Behind Sentinel the
        primary is asked for first: a demoted one may go on answering as a primary for seconds,
        and what it writes then is lost."""
        if self.mode is TopologyMode.SENTINEL and self.watch.asked_before(SENTINEL_TICK_S):
            self.refresh()
        for name, queues in self.route(batch).items():
            member = self.members.get(name)
            if member is None:
                continue
            if member.pool is None:
                self.tick(member, queues)
            else:
                try:
                    member.pool.submit(self.tick, member, queues)
                except RuntimeError:  # the primary was dropped meanwhile
                    continue

    def tick(self, member: Member, queues: Sequence[QueueSettings]) -> None:
        """The member's tick of the queues it holds no call for; queues sent elsewhere make
        the layout read again, and go there at their next tick."""
        held = member.claim(queues)
        if not held:
            return
        try:
            redirected = Tick(
                member.node,
                member.ledger,
                member.drainer,
                self.tuning.prefix_root,
                on_restart=self.on_restart,
                on_retry=self.on_retry,
            ).run(held)
        finally:
            member.release(held)
        if member.node.up is False or redirected:
            self.doubt()

    # The lifetime.
    def start(self) -> None:
        """The first layout read now; the layout thread, when the layout can change. Servers
        that answer but are not the topology the options name are refused here (SweepError);
        servers that do not answer yet are retried by the ticks."""
        self.refresh()
        if self.wrong is not None:
            raise self.wrong
        if self.mode is TopologyMode.STANDALONE:
            with contextlib.suppress(*UNREACHABLE):
                check_standalone(self.connection, self.connection.client())
        with self.lock:
            self.started = True
            for m in self.members.values():
                m.drainer.start()
        self.watch.start()

    def stop(self, timeout_s: float) -> None:
        self.watch.stop()
        with self.lock:
            members = list(self.members.values())
        for m in members:
            m.drainer.stop(timeout_s / max(1, len(members)))
            if m.pool is not None:
                m.pool.shutdown(wait=False, cancel_futures=True)
