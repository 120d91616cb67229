"""`sweeperd top`: every queue's backlog and drain rates, read from the servers without writing;
what cannot be read now keeps its last numbers, said to be so."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import redis

from sweeperd.constants import DEFAULT_TOP_RATE_WINDOW_S, TopologyMode
from sweeperd.keyspace import QueueKeys, members_key
from sweeperd.ownership import owner
from sweeperd.server.connection import Connection
from sweeperd.server.scan import find_queues
from sweeperd.server.topology import Layout, slot_of
from sweeperd.top.layout import QUEUE_SETS, Map, MapSource
from sweeperd.top.rates import RateWindow, Sample
from sweeperd.top.read import (
    KEPT,
    MOVED,
    STALE,
    NodeRead,
    NodeReader,
    QueueRow,
    ServerRow,
    said,
)

Clock = Callable[[], float]  # seconds since the epoch: time.time, or a test's own
__all__ = ["Clock", "QueueRow", "Screen", "ServerRow", "Top", "wall_clock"]


@dataclass(frozen=True)
class Screen:
    """What one refresh shows: the servers, the live members, the rows with the most expired
    leases."""

    at: float
    servers: tuple[ServerRow, ...]
    rows: tuple[QueueRow, ...]
    queues: int  # queues the view knows, of which `rows` shows the most backlogged
    failures: tuple[redis.RedisError, ...] = ()  # why a server's queues could not be read
    members: tuple[str, ...] = ()  # the replicas' live members, by id; (): no sharing
    members_error: str | None = None  # why the members could not be read
    window_s: float = DEFAULT_TOP_RATE_WINDOW_S  # the rates are over the reads of this long
    seen: Mapping[str, int] = field(default_factory=dict)  # each member's place in the order
    # the view first saw them (its letter: kept when another member leaves)


class Top:
    """The readers of every primary, the last row of every queue, and the rows a refresh shows
    (capped to `rows`)."""

    def __init__(
        self,
        connection: Connection,
        root: str,
        queues: Sequence[str],
        rows: int,
        clock: Clock,
        window: float = DEFAULT_TOP_RATE_WINDOW_S,
    ) -> None:
        self.connection = connection
        self.root = root
        self.discover = not queues  # no queue given: those found on each primary
        self.queues: set[str] = set(queues)  # every queue the view has known: they stay
        self.rows = rows
        self.clock = clock
        self.rates = RateWindow(window)
        self.source: MapSource | None = None
        self.map: Map | None = None  # the layout as last read
        self.remap = True  # read the layout before the next read: it may have changed
        self.routes: dict[str | None, list[str]] = {}  # primary -> its queues; None: no primary
        self.readers: dict[str, NodeReader] = {}
        self.searched: set[str] = set()  # the primaries discovery has looked at
        self.servers: dict[str, ServerRow] = {}  # every server shown, in the order first seen
        self.first_run_ids: dict[str, str] = {}
        self.last: dict[str, QueueRow] = {}
        self.members: tuple[str, ...] = ()
        self.seen: dict[str, int] = {}  # member -> its place in the order first seen
        self.detail: set[str] | None = None  # the queues shown last time: read in detail now

    def refresh(self) -> Screen:
        """One read of every primary: one round trip each (two on the first refresh, whose
        first pass finds which queues to show), and the layout first when it may have changed."""
        if self.detail is None:
            self.detail = {row.queue for row in self._read_all(set()).rows}
        screen = self._read_all(self.detail)
        self.detail = {row.queue for row in screen.rows}
        return screen

    def _read_all(self, detail: set[str]) -> Screen:
        now = self.clock()
        failures: list[redis.RedisError] = []
        members_error = None
        rows: list[QueueRow] = []
        if self.remap:
            try:
                self._find()
            except redis.RedisError as exc:
                failures.append(exc)
                self._unreadable(said(exc))
        members_at = self._members_node()
        for node, reader in self.readers.items():
            wanted = members_key(self.root) if node == members_at else None
            try:
                read = reader.read(self.routes.get(node, []), detail, now, wanted)
            except redis.RedisError as exc:
                read = self._down(reader, exc)
            if read.failure is not None:
                failures.append(read.failure)
            if wanted is not None and read.failure is None:
                self.members = read.members or ()
                members_error = read.members_error
            self.servers[node] = read.server
            rows += (self._row(row, read.server.run_id, now) for row in read.rows)
        rows += self._orphans()
        self.remap = bool(failures) or self._layout_may_have_changed(rows)
        shown = tuple(replace(r, owner=owner(r.queue, self.members)) for r in rows)
        for member in self.members:
            self.seen.setdefault(member, len(self.seen))
        return Screen(
            now,
            tuple(self.servers.values()),
            self._top(shown),
            len(shown),
            tuple(failures),
            self.members,
            members_error,
            self.rates.window_s,
            dict(self.seen),
        )

    def _row(self, read: QueueRow, run_id: str, now: float) -> QueueRow:
        """A read row with its rates, or the last numbers when it could not be read now."""
        if read.state in KEPT:
            return self._kept(read.queue, read.node, read.state, read.error)
        row = read
        if read.pending is not None:
            sample = Sample(now, read.pending, read.failed)
            recovered, dead = self.rates.add(read.queue, (read.node, run_id), sample)
            row = replace(read, recovered_per_s=recovered, dead_per_s=dead)
        self.last[read.queue] = row
        return row

    def _kept(self, queue: str, node: str | None, state: str, error: str | None) -> QueueRow:
        before = self.last.get(queue) or QueueRow(queue, node or "", None)
        return replace(before, node=node or before.node, state=state, error=error)

    def _down(self, reader: NodeReader, exc: redis.RedisError) -> NodeRead:
        """A server that cannot be read: its line says why, its queues keep their last rows."""
        server = ServerRow(reader.node, first_run_id=reader.first_run_id, error=said(exc))
        stale = [
            QueueRow(q, reader.node, None, state=STALE) for q in self.routes.get(reader.node, [])
        ]
        return NodeRead(server, stale, failure=exc)

    def _unreadable(self, error: str) -> None:
        """No layout to read by: the URL's server (or each one known) says why."""
        if not self.readers:
            for node in self.servers or [self.connection.node]:
                self.servers[node] = ServerRow(node, error=error)

    def _orphans(self) -> list[QueueRow]:
        """The queues no primary serves: their slot's owner is being chosen, or no layout was
        ever read (the URL's server says why)."""
        if self.map is None:
            return [self._kept(q, None, STALE, None) for q in sorted(self.queues)]
        return [
            self._kept(q, None, STALE, "no primary serves its slot")
            for q in self.routes.get(None, [])
        ]

    def _layout_may_have_changed(self, rows: Iterable[QueueRow]) -> bool:
        """A slot moved, a primary demoted, or a gone server's line shown: read the layout."""
        standalone = self.connection.topology.mode is TopologyMode.STANDALONE
        return (
            any(row.state == MOVED for row in rows)
            or (not standalone and any(s.role not in ("", "master") for s in self.servers.values()))
            or any(s.replaced for s in self.servers.values())
            or bool(self.routes.get(None))
        )

    def _top(self, rows: Iterable[QueueRow]) -> tuple[QueueRow, ...]:
        """Most expired first; a row whose expired count is unknown first of all."""
        ranked = sorted(rows, key=lambda r: (r.expired is not None, -(r.expired or 0), r.queue))
        return tuple(ranked[: self.rows])

    def _members_node(self) -> str | None:
        """The primary that holds the replicas' members key."""
        if self.map is None:
            return None
        return self.map.layout.owner(slot_of(members_key(self.root)))

    def _find(self) -> None:
        """The layout now: a reader per primary, the queues each one serves, the lines of the
        servers that left it."""
        if self.source is None:
            self.source = MapSource(self.connection)
        found = self.source.read()
        self._readers(found.layout)
        self._forget(found)
        self.routes = {}
        for queue in sorted(self.queues):
            at = found.layout.owner(slot_of(QueueKeys(queue, self.root).active))
            self.routes.setdefault(at, []).append(queue)
        self.map = found
        self.remap = False

    def _readers(self, layout: Layout) -> None:
        """A reader for each primary new to the view, and its queues discovered."""
        for name, address in layout.primaries.items():
            if name not in self.readers:
                self.readers[name] = NodeReader(name, self.connection.client(address), self.root)
                self.readers[name].first_run_id = self.first_run_ids.get(name, "")
            if self.discover and name not in self.searched:
                try:
                    self.queues |= find_queues(self.readers[name].client, self.root, QUEUE_SETS)
                    self.searched.add(name)
                except redis.RedisError:
                    pass  # its read says why; discovery is tried again at the next layout

    def _forget(self, found: Map) -> None:
        """The servers that are primaries no more: their readers closed, their lines dropped,
        but for one unreachable and nowhere in the layout (replaced), until it is back."""
        primaries = found.layout.primaries
        for name in [n for n in self.readers if n not in primaries]:
            reader = self.readers.pop(name)
            reader.client.close()
            self.first_run_ids[name] = reader.first_run_id
        for name, server in list(self.servers.items()):
            if name in primaries:
                continue
            if server.error is not None and name not in found.replicas:
                self.servers[name] = replace(server, replaced=True)
            else:
                del self.servers[name]

    def close(self) -> None:
        for reader in self.readers.values():
            reader.client.close()
        self.readers = {}
        if self.source is not None:
            self.source.close()


def wall_clock() -> float:
    return time.time()
