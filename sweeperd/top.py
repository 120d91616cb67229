"""`sweeperd top`: every queue's backlog and drain rates, read from the servers without writing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import redis

from sweeperd.census import overdue_s
from sweeperd.connection import Connection
from sweeperd.constants import METRICS_FAILED_FIELD, VERB
from sweeperd.discovery import discover_queues
from sweeperd.keyspace import QueueKeys
from sweeperd.model import string2ll
from sweeperd.serverinfo import parse_info, verb_in
from sweeperd.topology import Layout, slot_of, source_of

Clock = Callable[[], float]  # seconds since the epoch: time.time, or a test's own
DETAIL_COMMANDS = 5  # per row shown: ZCARD, ZRANGE 0 0 WITHSCORES, ZCARD, ZCARD, HGET


@dataclass(frozen=True)
class QueueRow:
    """One queue as the last read saw it; None: not read in detail this time, or no rate yet."""

    queue: str
    node: str
    expired: int  # leases whose deadline has passed, on the server's clock
    active: int | None = None
    oldest_overdue_s: float | None = None
    pending: int | None = None
    dead: int | None = None
    failed: int | None = None  # metrics:failed count
    recovered_per_s: float | None = None  # growth of pending per second since the last read
    dead_per_s: float | None = None  # growth of metrics:failed count per second


@dataclass(frozen=True)
class ServerRow:
    """One primary's identity as the last read saw it, or why it could not be read."""

    node: str
    run_id: str = ""
    uptime_s: int = 0
    role: str = ""
    verb_loaded: bool = False
    first_run_id: str = ""  # the run_id when the view started: another one means a restart
    error: str | None = None

    @property
    def restarted(self) -> bool:
        return bool(self.run_id and self.first_run_id and self.run_id != self.first_run_id)


@dataclass(frozen=True)
class Screen:
    """What one refresh shows: the servers, and the rows with the most expired leases."""

    at: float
    servers: tuple[ServerRow, ...]
    rows: tuple[QueueRow, ...]
    queues: int  # queues read, of which `rows` shows the most backlogged
    failures: tuple[redis.RedisError, ...] = ()


@dataclass
class _Seen:
    at: float
    run_id: str
    pending: int
    failed: int | None


@dataclass
class NodeReader:
    """One primary: its queues, read in one pipeline per refresh."""

    node: str
    client: redis.Redis
    queues: list[str]
    root: str
    first_run_id: str = ""
    offset_ms: float | None = None  # the server's clock minus ours, as the last read saw it
    seen: dict[str, _Seen] = field(default_factory=dict)

    def read(self, detail: set[str], now: float) -> tuple[ServerRow, list[QueueRow]]:
        """INFO, COMMAND INFO, a ZCOUNT of expired leases per queue and the counts of the
        queues in `detail`: one round trip, read-only commands only."""
        if self.offset_ms is None:  # once, at the start: the server's clock bounds "expired"
            self.offset_ms = _server_ms(self._info()) - now * 1000
        due = int(now * 1000 + self.offset_ms)
        shown = [q for q in self.queues if q in detail]
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("INFO", "server", "replication")  # type: ignore[no-untyped-call]
        pipe.execute_command("COMMAND", "INFO", VERB)  # type: ignore[no-untyped-call]
        for queue in self.queues:
            pipe.zcount(QueueKeys(queue, self.root).active, "-inf", due)
        for queue in shown:
            keys = QueueKeys(queue, self.root)
            pipe.zcard(keys.active)
            pipe.zrange(keys.active, 0, 0, withscores=True)
            pipe.zcard(keys.pending)
            pipe.zcard(keys.dead)
            pipe.hget(keys.metrics_failed, METRICS_FAILED_FIELD)
        replies = pipe.execute()
        info = parse_info(replies[0])
        self.offset_ms = _server_ms(info) - now * 1000
        server = self._server(info, replies[1])
        expired = dict(zip(self.queues, replies[2 : 2 + len(self.queues)], strict=True))
        rows = {q: QueueRow(q, self.node, int(n)) for q, n in expired.items()}
        counts = replies[2 + len(self.queues) :]
        for n, queue in enumerate(shown):
            chunk = counts[n * DETAIL_COMMANDS : (n + 1) * DETAIL_COMMANDS]
            rows[queue] = self._detailed(rows[queue], chunk, _server_ms(info), server.run_id, now)
        return server, list(rows.values())

    def _info(self) -> Mapping[str, str]:
        return parse_info(self.client.execute_command("INFO", "server"))  # type: ignore[no-untyped-call]

    def _server(self, info: Mapping[str, str], command_info: object) -> ServerRow:
        run_id = info.get("run_id", "")
        self.first_run_id = self.first_run_id or run_id
        loaded = verb_in(command_info)
        return ServerRow(
            node=self.node,
            run_id=run_id,
            uptime_s=int(info.get("uptime_in_seconds", "0")),
            role=info.get("role", "master"),
            verb_loaded=loaded,
            first_run_id=self.first_run_id,
        )

    def _detailed(
        self, row: QueueRow, counts: Sequence[object], server_ms: int, run_id: str, now: float
    ) -> QueueRow:
        active, oldest, pending, dead, raw_failed = counts
        assert isinstance(active, int) and isinstance(pending, int) and isinstance(dead, int)
        failed = string2ll(raw_failed) if isinstance(raw_failed, bytes) else 0
        overdue = overdue_s(oldest, server_ms)
        before = self.seen.get(row.queue)
        self.seen[row.queue] = _Seen(now, run_id, pending, failed)
        recovered = dead_rate = None
        if before is not None and before.run_id == run_id and now > before.at:
            elapsed = now - before.at
            recovered = (pending - before.pending) / elapsed
            if failed is not None and before.failed is not None:
                dead_rate = (failed - before.failed) / elapsed
        return QueueRow(
            row.queue, row.node, row.expired, active, overdue, pending, dead, failed,
            recovered, dead_rate,
        )  # fmt: skip


def _server_ms(info: Mapping[str, str]) -> int:
    return int(info.get("server_time_usec", "0")) // 1000


class Top:
    """The readers of every primary, and the rows a refresh shows (capped to `rows`)."""

    def __init__(
        self, connection: Connection, root: str, queues: Sequence[str], rows: int, clock: Clock
    ) -> None:
        self.connection = connection
        self.root = root
        self.given = list(queues)  # empty: every queue discovery finds on each primary
        self.rows = rows
        self.clock = clock
        self.readers: dict[str, NodeReader] = {}
        self.first_run_ids: dict[str, str] = {}
        self.detail: set[str] | None = None  # the queues shown last time: read in detail now

    def refresh(self) -> Screen:
        """One read of every primary: one round trip each (two on the first refresh, whose
        first pass finds which queues to show)."""
        if not self.readers:
            try:
                self._find()
            except redis.RedisError as exc:
                down = ServerRow(self.connection.node, error=str(exc))
                return Screen(self.clock(), (down,), (), 0, (exc,))
        if self.detail is None:
            self.detail = {row.queue for row in self._read_all(set()).rows}
        screen = self._read_all(self.detail)
        self.detail = {row.queue for row in screen.rows}
        return screen

    def _read_all(self, detail: set[str]) -> Screen:
        now = self.clock()
        servers: list[ServerRow] = []
        rows: list[QueueRow] = []
        failures: list[redis.RedisError] = []
        for node, reader in self.readers.items():
            try:
                server, read = reader.read(detail, now)
            except redis.RedisError as exc:
                failures.append(exc)
                servers.append(ServerRow(node, first_run_id=reader.first_run_id, error=str(exc)))
                continue
            self.first_run_ids.setdefault(node, server.run_id)
            servers.append(server)
            rows += read
        demoted = self.connection.topology.mode != "standalone" and any(
            s.role not in ("", "master") for s in servers
        )
        if failures or demoted:  # a failover or a reshard: find the primaries again next time
            self._forget()
        return Screen(now, tuple(servers), self._top(rows), len(rows), tuple(failures))

    def _top(self, rows: Iterable[QueueRow]) -> tuple[QueueRow, ...]:
        return tuple(sorted(rows, key=lambda r: (-r.expired, r.queue))[: self.rows])

    def _find(self) -> None:
        """The primaries and their queues: those given, routed by slot, or those discovered."""
        layout = source_of(self.connection).read()
        for name, address in layout.primaries.items():
            client = self.connection.client(address)
            queues = (
                self._routed(layout, name) if self.given else discover_queues(client, self.root)
            )
            reader = NodeReader(name, client, sorted(queues), self.root)
            reader.first_run_id = self.first_run_ids.get(name, "")
            self.readers[name] = reader

    def _routed(self, layout: Layout, name: str) -> list[str]:
        return [
            q for q in self.given if layout.owner(slot_of(QueueKeys(q, self.root).active)) == name
        ]

    def _forget(self) -> None:
        for reader in self.readers.values():
            reader.client.close()
        self.readers = {}

    def close(self) -> None:
        self._forget()


def wall_clock() -> float:
    return time.time()
