"""`sweeperd top`'s read of one primary: one pipeline of read-only commands, each reply or
refusal kept for the row it belongs to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    NoPermissionError,
    ReadOnlyError,
    TryAgainError,
)

from sweeperd.constants import VERB
from sweeperd.keyspace import QueueKeys
from sweeperd.server.calls import command
from sweeperd.server.counts import COUNTS, counts_of, queue_counts
from sweeperd.server.denied import USERS_SAVED, denial, user_of
from sweeperd.server.packed import resp, round_trip
from sweeperd.server.serverinfo import parse_info, server_ms, verb_in

# A ZCOUNT's start in RESP: its three arguments follow.
ZCOUNT = b"*4\r\n$6\r\nZCOUNT\r\n"
# A row's state: where its numbers come from (docs/commands.md: sweeperd top, `state`). ok: read
# now; replica: its primary cannot be read, read now on a replica of it (it may lag). The KEPT
# states show the last numbers read: stale (its server cannot be read now, its line says why),
# migrating (its slot is moving: ASK, TRYAGAIN), moved (its slot moved to another primary: the map
# is read again). error: a read of its own keys was refused (WRONGTYPE, NOPERM), what could be
# read is shown.
OK = "ok"
STALE = "stale"
MIGRATING = "migrating"
MOVED = "moved"
ERROR = "error"
REPLICA = "replica"
KEPT = (STALE, MIGRATING, MOVED)
READ = (OK, REPLICA)

# The error codes redis-py takes off the errors it has a class for.
CODES = (
    (MovedError, "MOVED"),
    (AskError, "ASK"),
    (TryAgainError, "TRYAGAIN"),
    (MasterDownError, "MASTERDOWN"),
    (ClusterDownError, "CLUSTERDOWN"),
    (NoPermissionError, "NOPERM"),
    (BusyLoadingError, "LOADING"),
    (ReadOnlyError, "READONLY"),
)


# A server that answered and refused the user's credentials.
LOGIN_REFUSED = "LOGIN REFUSED"


def error_text(exc: redis.RedisError) -> str:
    """Return an error as the server said it, its code in front; a refused login says where to
    look."""
    if isinstance(exc, redis.AuthenticationError):
        return (
            f"{LOGIN_REFUSED}: {' '.join(str(exc).split()).rstrip('.')}: the user may be missing "
            f"on this node ({USERS_SAVED})"
        )
    code = next((code for kind, code in CODES if isinstance(exc, kind)), None)
    return f"{code} {exc}" if code else str(exc)


@dataclass(frozen=True)
class QueueRow:
    """One queue as the last read saw it; None: not read in detail, refused, or no rate yet."""

    queue: str
    node: str
    # Leases whose deadline has passed, on the server's clock.
    expired: int | None
    active: int | None = None
    oldest_overdue_s: float | None = None
    pending: int | None = None
    dead: int | None = None
    failed: int | None = None
    # Growth of pending per second over the rate window, and of metrics:failed's count.
    recovered_per_s: float | None = None
    dead_per_s: float | None = None
    # The replica that sweeps it: the live member rendezvous picks.
    owner: str | None = None
    state: str = OK
    # The row's own error: a refused read, or where its slot is moving.
    error: str | None = None
    as_of: float | None = None


@dataclass(frozen=True)
class ServerRow:
    """One primary's identity as the last read saw it, or why its queues cannot be read (or a
    replica's, read in place of its primary)."""

    node: str
    # "" when not read: the server is unreachable.
    run_id: str = ""
    uptime_s: int = 0
    role: str = ""
    verb_loaded: bool = False
    # The run_id when the view started: another one means a restart.
    first_run_id: str = ""
    error: str | None = None
    # Unreachable and out of the slot map: another primary has its slots.
    replaced: bool = False
    # The primary this replica is read for (it cannot be now); why discovery could not list its
    # queues (SCAN failed); its maxmemory-policy (allkeys-* may evict its queues' keys: shown
    # aloud).
    reads_for: str | None = None
    scan_error: str | None = None
    maxmemory_policy: str = ""

    @property
    def restarted(self) -> bool:
        return bool(self.run_id and self.first_run_id and self.run_id != self.first_run_id)


@dataclass(frozen=True)
class NodeRead:
    """What one pipeline found: the server, its rows and, when asked, the live members."""

    server: ServerRow
    rows: list[QueueRow]
    # None: not asked, or refused (members_error).
    members: tuple[str, ...] | None = None
    members_error: str | None = None
    # Why none of its queues could be read.
    failure: redis.RedisError | None = None


@dataclass
class NodeReader:
    """One primary: a client and the server's clock offset, kept from one refresh to the next."""

    node: str
    client: redis.Redis
    root: str
    first_run_id: str = ""
    # A Cluster replica's reads: READONLY first, or it redirects every read.
    readonly: bool = False
    # the server's clock minus ours, as the last read saw it
    _offset_ms: float | None = field(default=None, init=False)

    def read(
        self, queues: Sequence[str], detail: set[str], now: float, members_key: str | None = None
    ) -> NodeRead:
        """INFO, COMMAND INFO, the counts of the queues in `detail` and the live members in one
        round trip of reads, then a ZCOUNT of expired leases per queue in another (packed once
        as RESP: at 100,000 queues redis-py's pipeline packed them five times slower). An
        unreachable server raises."""
        # Once, at the start: the server's clock bounds "expired".
        if self._offset_ms is None:
            raw = command(self.client, "INFO", "server")
            self._offset_ms = server_ms(parse_info(raw)) - now * 1000
        due = int(now * 1000 + self._offset_ms)
        shown = [q for q in queues if q in detail]
        pipe = self.client.pipeline(transaction=False)
        if self.readonly:
            command(pipe, "READONLY")
        command(pipe, "INFO", "server", "replication", "memory")
        command(pipe, "COMMAND", "INFO", VERB)
        for queue in shown:
            queue_counts(pipe, QueueKeys(queue, self.root))
        if members_key is not None:
            pipe.zrangebyscore(members_key, due, "+inf")
        replies = self._replies(pipe.execute(raise_on_error=False))
        if isinstance(replies[0], redis.RedisError):
            raise replies[0]
        zcounts = self._expired(queues, due)
        info = parse_info(replies[0])
        self._offset_ms = server_ms(info) - now * 1000
        down = next((r for r in [*replies, *zcounts] if isinstance(r, ClusterDownError)), None)
        server = self._server(info, replies[1], None if down is None else error_text(down))
        # Said once, on the server's line.
        if down is not None:
            stale = [QueueRow(q, self.node, None, state=STALE) for q in queues]
            return NodeRead(server, stale, failure=down)
        expired = dict(zip(queues, zcounts, strict=True))
        counts = replies[2:]
        rows = []
        for queue in queues:
            chunk: Sequence[object] = ()
            if queue in detail:
                n = shown.index(queue)
                chunk = counts[n * COUNTS : (n + 1) * COUNTS]
            rows.append(self._row(queue, [expired[queue], *chunk], server_ms(info), now))
        if members_key is None:
            return NodeRead(server, rows)
        members = replies[-1]
        if isinstance(members, redis.RedisError):
            return NodeRead(server, rows, members_error=error_text(members))
        return NodeRead(server, rows, tuple(sorted(m.decode(errors="replace") for m in members)))

    def _replies(self, replies: list[Any]) -> list[Any]:
        """Return the reads' replies; on a replica READONLY's is taken off first, and a READONLY the
        user may not run is said on every read the replica redirected for want of it."""
        if not self.readonly:
            return replies
        refused, replies = replies[0], replies[1:]
        if isinstance(refused, NoPermissionError):
            return [refused if isinstance(r, MovedError) else r for r in replies]
        return replies

    def _expired(self, queues: Sequence[str], due: int) -> list[object]:
        """Return each queue's count of leases due by `due` (server clock, ms), or the error it
        got."""
        if not queues:
            return []
        tail = resp(("-inf", due))[4:]
        commands = [resp(("READONLY",))] if self.readonly else []
        commands += (ZCOUNT + resp((QueueKeys(q, self.root).active,))[4:] + tail for q in queues)
        return self._replies(round_trip(self.client, b"".join(commands), len(commands)))

    def _server(
        self, info: Mapping[str, str], command_info: object, error: str | None
    ) -> ServerRow:
        run_id = info.get("run_id", "")
        self.first_run_id = self.first_run_id or run_id
        return ServerRow(
            node=self.node,
            run_id=run_id,
            uptime_s=int(info.get("uptime_in_seconds", "0")),
            role=info.get("role", "master"),
            verb_loaded=verb_in(command_info),
            first_run_id=self.first_run_id,
            error=error,
            maxmemory_policy=info.get("maxmemory_policy", ""),
        )

    def _said(self, exc: redis.RedisError) -> str:
        """Return a row's refusal: a command the user lacks named with the rule that grants it."""
        if isinstance(exc, NoPermissionError):
            return denial(str(exc), user_of(self.client))
        return error_text(exc)

    def _row(self, queue: str, replies: Sequence[object], server_ms: int, now: float) -> QueueRow:
        """Return one queue's replies: the expired count, then the five counts when it is shown."""
        redirect = next((r for r in replies if isinstance(r, (AskError, TryAgainError))), None)
        # MOVED is an AskError.
        if redirect is not None:
            return QueueRow(queue, self.node, None, state=_moving(redirect), error=_where(redirect))
        refused = next((r for r in replies if isinstance(r, redis.RedisError)), None)
        read = [None if isinstance(r, redis.RedisError) else r for r in replies]
        row = QueueRow(
            queue,
            self.node,
            read[0] if isinstance(read[0], int) else None,
            state=ERROR if refused else OK,
            error=None if refused is None else self._said(refused),
            as_of=now,
        )
        if len(read) == 1:
            return row
        counts = counts_of(replies[1:], server_ms)
        return replace(
            row,
            active=counts.active,
            oldest_overdue_s=counts.oldest_overdue_s,
            pending=counts.pending,
            dead=counts.dead,
            failed=counts.failed,
        )


def _moving(exc: redis.RedisError) -> str:
    return MOVED if isinstance(exc, MovedError) else MIGRATING


def _where(exc: redis.RedisError) -> str:
    """Return where a redirected read would go: `slot 1234 migrating to 10.0.0.2:6379`."""
    if isinstance(exc, AskError):
        host, port = exc.node_addr
        return f"slot {exc.slot_id} {_moving(exc)} to {host}:{port}"
    return error_text(exc)
