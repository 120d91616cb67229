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
from sweeperd.server.connection import UNREACHABLE, Connection
from sweeperd.server.scan import find_queues
from sweeperd.server.topology import Address, slot_of
from sweeperd.top.layout import QUEUE_SETS, Map, MapSource
from sweeperd.top.rates import RateWindow, Sample
from sweeperd.top.read import (
    KEPT,
    MOVED,
    READ,
    STALE,
    NodeRead,
    NodeReader,
    QueueRow,
    ServerRow,
    error_text,
)
from sweeperd.top.standins import Standins

# Seconds since the epoch: time.time, or a test's own.
Clock = Callable[[], float]
# The queues a refresh reads on one primary beyond those it shows (the busiest, read in detail):
# the rest in turn, so that a refresh's cost to the server stays bounded at any number of
# queues; each is read at least once every ceil(queues / READS_PER_REFRESH) refreshes.
READS_PER_REFRESH = 2_000
__all__ = ["Clock", "QueueRow", "Screen", "ServerRow", "Top", "Unread", "wall_clock"]


@dataclass(frozen=True)
class Unread:
    """Why a server's queues could not be read: its address (None: the URL's) and the error."""

    address: Address | None
    error: redis.RedisError


@dataclass(frozen=True)
class Screen:
    """What one refresh shows: the servers, the live members, the rows with the most expired
    leases."""

    at: float
    servers: tuple[ServerRow, ...]
    rows: tuple[QueueRow, ...]
    # The queues the view knows, of which `rows` shows the most backlogged.
    queues: int
    failures: tuple[Unread, ...] = ()
    # The replicas' live members, by id ((): no sharing).
    members: tuple[str, ...] = ()
    members_error: str | None = None
    # The rates are over the reads of this long.
    window_s: float = DEFAULT_TOP_RATE_WINDOW_S
    # Of the queues known, those whose numbers are not read now.
    unread: int = 0
    # Each member's place in the order the view first saw them (its letter: kept when another member
    # leaves).
    seen: Mapping[str, int] = field(default_factory=dict)

    @property
    def answered(self) -> bool:
        """Tell whether a server of the view answered (its identity read), if only to refuse its
        queues."""
        return any(server.run_id for server in self.servers)


class Top:
    """The readers of every primary (and of a replica in place of one that cannot be read), the
    last row of every queue, and the rows a refresh shows (capped to `rows`)."""

    def __init__(
        self,
        connection: Connection,
        root: str,
        queues: Sequence[str],
        rows: int,
        clock: Clock,
        window: float = DEFAULT_TOP_RATE_WINDOW_S,
        reads: int = READS_PER_REFRESH,
    ) -> None:
        self._connection = connection
        # Queues read per primary per refresh beyond those shown, and where each primary's next
        # refresh's reads start.
        self._reads = reads
        self._turns: dict[str, int] = {}
        self._root = root
        # No queue given: those found on each primary; every queue the view has known stays.
        self._discover = not queues
        self._queues: set[str] = set(queues)
        self._rows = rows
        self._clock = clock
        self._rates = RateWindow(window)
        self._source: MapSource | None = None
        self._map: Map | None = None
        # Read the layout before the next read: it may have changed.
        self._remap = True
        # Primary -> its queues; None: no primary.
        self._routes: dict[str | None, list[str]] = {}
        self._readers: dict[str, NodeReader] = {}
        self._standins = Standins(connection, root)
        # The primaries discovery has looked at, and why it could not list a primary's queues.
        self._searched: set[str] = set()
        self._unlisted: dict[str, str] = {}
        # Every server shown, in the order first seen.
        self._servers: dict[str, ServerRow] = {}
        self._first_run_ids: dict[str, str] = {}
        self._last: dict[str, QueueRow] = {}
        self._members: tuple[str, ...] = ()
        # Member -> its place in the order first seen.
        self._seen: dict[str, int] = {}
        # The queues shown last time: read in detail now.
        self._detail: set[str] | None = None

    def resize(self, rows: int) -> None:
        """Show at most `rows` queues from the next refresh on (the terminal was resized)."""
        self._rows = rows

    def refresh(self) -> Screen:
        """Return one read of every primary: one round trip each (two on the first refresh, whose
        first pass reads every queue's expired count to find which to show), and the layout
        first when it may have changed. After the first pass a refresh reads the queues shown,
        any never read, and `reads` more per primary in turn: the rest keep their last numbers."""
        if self._detail is None:
            self._detail = {row.queue for row in self._read_all(set(), every=True).rows}
        screen = self._read_all(self._detail)
        self._detail = {row.queue for row in screen.rows}
        return screen

    def _read_all(self, detail: set[str], *, every: bool = False) -> Screen:
        now = self._clock()
        failures: list[Unread] = []
        members_error = None
        rows: list[QueueRow] = []
        if self._remap:
            try:
                self._find()
            except redis.RedisError as exc:
                failures.append(Unread(None, exc))
                self._unreadable(error_text(exc))
        members_at = self._members_node()
        standins: list[ServerRow] = []
        for node, reader in self._readers.items():
            wanted = members_key(self._root) if node == members_at else None
            queues = self._routes.get(node, [])
            chosen = queues if every else self._chosen(node, queues, detail)
            read, standin = self._read(node, reader, chosen, detail, now, wanted)
            if read.failure is not None:
                failures.append(Unread(self._address(node), read.failure))
            self._servers[node] = replace(read.server, scan_error=self._unlisted.get(node))
            if standin is not None:
                standins.append(standin.server)
                read = standin
            if wanted is not None and read.failure is None:
                self._members = read.members or ()
                members_error = read.members_error
            rows += (self._row(row, read.server.run_id, now) for row in read.rows)
            if len(chosen) < len(queues):
                rows += self._unread(node, queues, chosen, down=read.failure is not None)
        self._stand_in(standins)
        rows += self._orphans()
        self._remap = bool(failures) or self._layout_may_have_changed(rows)
        top = tuple(replace(r, owner=owner(r.queue, self._members)) for r in self._top(rows))
        for member in self._members:
            self._seen.setdefault(member, len(self._seen))
        return Screen(
            now,
            tuple(self._servers.values()),
            top,
            len(rows),
            tuple(failures),
            self._members,
            members_error,
            self._rates.window_s,
            sum(1 for row in rows if row.state not in READ),
            dict(self._seen),
        )

    def _chosen(self, node: str, queues: Sequence[str], detail: set[str]) -> list[str]:
        """Return the primary's queues this refresh reads: those shown (the busiest), those never
        read, and the next `reads` of the others in turn."""
        if len(queues) <= self._reads:
            return list(queues)
        start = self._turns.get(node, 0) % len(queues)
        turn = [
            *queues[start : start + self._reads],
            *queues[: max(0, start + self._reads - len(queues))],
        ]
        self._turns[node] = start + self._reads
        taken = set(turn)
        extra = [q for q in queues if q not in taken and (q in detail or q not in self._last)]
        return turn + extra

    def _unread(
        self, node: str, queues: Sequence[str], chosen: Sequence[str], *, down: bool
    ) -> list[QueueRow]:
        """Return the rows of the queues not read this refresh: as last read, or stale when their
        server could not be read."""
        read_now = set(chosen)
        return [
            self._kept(q, node, STALE, None) if down or q not in self._last else self._last[q]
            for q in queues
            if q not in read_now
        ]

    def _read(
        self,
        node: str,
        reader: NodeReader,
        queues: Sequence[str],
        detail: set[str],
        now: float,
        wanted: str | None,
    ) -> tuple[NodeRead, NodeRead | None]:
        """Return a primary's read of `queues`, and a replica's in its place when it cannot be
        reached (or is loading, or hangs)."""
        try:
            read = reader.read(queues, detail, now, wanted)
        except redis.RedisError as exc:
            read = self._down(reader, queues, exc)
        if not isinstance(read.failure, UNREACHABLE):
            return read, None
        replicas = self._map.replicas_of.get(node, ()) if self._map is not None else ()
        return read, self._standins.read(node, replicas, queues, detail, now, wanted)

    def _stand_in(self, standins: Iterable[ServerRow]) -> None:
        """Return the lines of the replicas read in place of their primary, after the primaries'
        (the numbers of those stay when a replica is no longer read); the others' dropped."""
        lines = {server.node: server for server in standins}
        for name, server in list(self._servers.items()):
            if server.reads_for is not None and name not in lines:
                del self._servers[name]
        self._servers.update(lines)
        self._standins.release()

    def _address(self, node: str) -> Address | None:
        """Return where a primary is (None: the URL's own server)."""
        return None if self._map is None else self._map.layout.primaries.get(node)

    def _row(self, read: QueueRow, run_id: str, now: float) -> QueueRow:
        """Return a read row with its rates, or the last numbers when it could not be read now."""
        if read.state in KEPT:
            return self._kept(read.queue, read.node, read.state, read.error)
        row = read
        if read.pending is not None:
            sample = Sample(now, read.pending, read.failed)
            recovered, dead = self._rates.add(read.queue, (read.node, run_id), sample)
            row = replace(read, recovered_per_s=recovered, dead_per_s=dead)
        self._last[read.queue] = row
        return row

    def _kept(self, queue: str, node: str | None, state: str, error: str | None) -> QueueRow:
        before = self._last.get(queue) or QueueRow(queue, node or "", None)
        return replace(before, node=node or before.node, state=state, error=error)

    def _down(self, reader: NodeReader, queues: Sequence[str], exc: redis.RedisError) -> NodeRead:
        """Return a server that cannot be read: its line says why, its queues keep their last
        rows."""
        server = ServerRow(reader.node, first_run_id=reader.first_run_id, error=error_text(exc))
        stale = [QueueRow(q, reader.node, None, state=STALE) for q in queues]
        return NodeRead(server, stale, failure=exc)

    def _unreadable(self, error: str) -> None:
        """Say why there is no layout to read by: the URL's server (or each one known) says why."""
        if not self._readers:
            for node in self._servers or [self._connection.node]:
                self._servers[node] = ServerRow(node, error=error)

    def _orphans(self) -> list[QueueRow]:
        """Return the queues no primary serves: their slot's owner is being chosen, or no layout was
        ever read (the URL's server says why)."""
        if self._map is None:
            return [self._kept(q, None, STALE, None) for q in sorted(self._queues)]
        return [
            self._kept(q, None, STALE, "no primary serves its slot")
            for q in self._routes.get(None, [])
        ]

    def _layout_may_have_changed(self, rows: Iterable[QueueRow]) -> bool:
        """Tell whether the layout may have changed: a slot moved, a primary demoted, or a gone
        server's line shown; then it is read again."""
        standalone = self._connection.topology.mode is TopologyMode.STANDALONE
        return (
            any(row.state == MOVED for row in rows)
            or (
                not standalone and any(s.role not in ("", "master") for s in self._servers.values())
            )
            or any(s.replaced for s in self._servers.values())
            or bool(self._routes.get(None))
        )

    def _top(self, rows: Iterable[QueueRow]) -> tuple[QueueRow, ...]:
        """Most expired first; a row whose expired count is unknown first of all."""
        ranked = sorted(rows, key=lambda r: (r.expired is not None, -(r.expired or 0), r.queue))
        return tuple(ranked[: self._rows])

    def _members_node(self) -> str | None:
        """Return the primary that holds the replicas' members key."""
        if self._map is None:
            return None
        return self._map.layout.owner(slot_of(members_key(self._root)))

    def _find(self) -> None:
        """Read the layout now: a reader per primary, the queues each one serves, the lines of the
        servers that left it."""
        if self._source is None:
            self._source = MapSource(self._connection)
        found = self._source.read()
        self._add_readers(found)
        self._forget(found)
        self._routes = {}
        for queue in sorted(self._queues):
            at = found.layout.owner(slot_of(QueueKeys(queue, self._root).active))
            self._routes.setdefault(at, []).append(queue)
        self._map = found
        self._remap = False

    def _add_readers(self, found: Map) -> None:
        """Add a reader for each primary new to the view, and discover its queues."""
        for name, address in found.layout.primaries.items():
            if name not in self._readers:
                client, was = self._connection.client(address), self._first_run_ids.get(name, "")
                self._readers[name] = NodeReader(name, client, self._root, first_run_id=was)
            if self._discover and name not in self._searched:
                self._search(name, found.replicas_of.get(name, ()))

    def _search(self, name: str, replicas: Iterable[Address]) -> None:
        """Find a primary's queues by SCAN there, or on a replica of it when it cannot be
        scanned; why neither could be is said on its line (tried again at the next layout)."""
        try:
            found = find_queues(self._readers[name].client, self._root, QUEUE_SETS)
        except redis.RedisError as exc:
            replicated = self._standins.scan(replicas)
            if replicated is None:
                self._unlisted[name] = error_text(exc)
                return
            found = replicated
        self._queues |= found
        self._searched.add(name)
        self._unlisted.pop(name, None)

    def _forget(self, found: Map) -> None:
        """Forget the servers that are primaries no more: their readers closed, their lines dropped,
        but for one unreachable and nowhere in the layout (replaced), until it is back."""
        primaries = found.layout.primaries
        for name in [n for n in self._readers if n not in primaries]:
            reader = self._readers.pop(name)
            reader.client.close()
            self._first_run_ids[name] = reader.first_run_id
            self._unlisted.pop(name, None)
        for name, server in list(self._servers.items()):
            if name in primaries or server.reads_for is not None:
                continue
            if server.error is not None and name not in found.replicas:
                self._servers[name] = replace(server, replaced=True, scan_error=None)
            else:
                del self._servers[name]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.client.close()
        self._readers = {}
        self._standins.close()
        if self._source is not None:
            self._source.close()


def wall_clock() -> float:
    return time.time()
