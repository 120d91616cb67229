"""The audit of one node's queues: every row read by a paced SCAN, the ids of pending and dead (and
the leases of active due too far out) by ZSCAN, each batch observed by one atomic read-only
script; a candidate is reported only if a second read after the grace still finds it so."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import redis

from sweeperd.audit import scripts
from sweeperd.audit.classes import CLASSES, AuditClass, Observation, classify
from sweeperd.constants import (
    ACTIVE,
    AUDIT_BATCH,
    AUDIT_SCAN_COUNT,
    DEAD,
    DEFAULT_AUDIT_GRACE_S,
    DEFAULT_AUDIT_RATE,
    DEFAULT_MAX_LEASE_S,
    JOB,
    PENDING,
)
from sweeperd.keyspace import QueueKeys, is_queue_name
from sweeperd.reasons import SweepError, reason_of_text, server_text
from sweeperd.server.scan import glob_escape
from sweeperd.server.topology import node_of

SETS = (ACTIVE.encode(), PENDING.encode(), DEAD.encode())
ROW = JOB.encode()
# A queue's failure that ends its audit, not the node's: the others go on.
QUEUE_ERRORS = (redis.ResponseError,)


@dataclass(frozen=True)
class Pace:
    """How an audit reads: the grace before a candidate is read again, the longest lease, the
    keys read per second at the most, and the size of each call."""

    grace_s: float = DEFAULT_AUDIT_GRACE_S
    max_lease_s: float = DEFAULT_MAX_LEASE_S
    rate: float = DEFAULT_AUDIT_RATE
    batch: int = AUDIT_BATCH
    scan_count: int = AUDIT_SCAN_COUNT

    @property
    def max_lease_ms(self) -> int:
        return int(self.max_lease_s * 1000)


@dataclass
class QueueAudit:
    """What the audit found in one queue: the ids of each class (in byte order), or the
    error that ended its audit (nothing is reported of a queue whose audit failed)."""

    queue: str
    node: str
    rows: int = 0  # row keys read (SCAN may return one twice)
    found: dict[AuditClass, list[bytes]] = field(default_factory=dict)
    error: SweepError | None = None
    candidates: dict[bytes, AuditClass] = field(default_factory=dict, repr=False)

    @property
    def findings(self) -> int:
        return sum(len(ids) for ids in self.found.values())

    def fail(self, exc: redis.RedisError) -> None:
        """The queue's audit ends on a refused read, said with its reason."""
        text = server_text(exc)
        self.error = SweepError(reason_of_text(text), " ".join(text.split()))
        self.candidates.clear()


@dataclass
class Clocks:
    """The time an audit passes in: the clock, the sleep, whether Ctrl-C came, and what is told
    after each call (keys read so far on the node)."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], object] = time.sleep
    interrupted: Callable[[], bool] = lambda: False
    progress: Callable[[int], None] = lambda read: None


def split_key(key: bytes, root: str) -> tuple[str, bytes] | None:
    """`<root>:{<queue>}:<rest>` as (queue, rest); None for any other key."""
    head = f"{root}:{{".encode()
    if not key.startswith(head):
        return None
    name, brace, rest = key[len(head) :].partition(b"}:")
    try:
        queue = name.decode()
    except UnicodeDecodeError:
        return None
    return (queue, rest) if brace and is_queue_name(queue) else None


class NodeAudit:
    """The audit of the queues one node holds; a connection failure raises (the node is down),
    a refused read ends its queue's audit only."""

    def __init__(self, client: redis.Redis, root: str, pace: Pace, clocks: Clocks) -> None:
        self.client = client
        self.root = root
        self.pace = pace
        self.clocks = clocks
        self.node = node_of(client)
        self.read = 0  # keys read on the node: the pace's count
        self.started = clocks.clock()
        self.last_candidate = -float("inf")
        self.interrupted = False
        self.queues: dict[str, QueueAudit] = {}

    def audit(self, queues: Collection[str] | None) -> list[QueueAudit]:
        """Every queue named (None: every queue found on the node), read, then its candidates
        read again after the grace."""
        wanted = None if queues is None else set(queues)
        for name in sorted(wanted or ()):
            self.queue(name)
        self.rows_pass(wanted)
        for audit in list(self.queues.values()):
            if not self.stopped():
                self.sets_pass(audit)
        self.confirm()
        return sorted(self.queues.values(), key=lambda a: a.queue)

    def queue(self, name: str) -> QueueAudit:
        if name not in self.queues:
            self.queues[name] = QueueAudit(name, self.node)
        return self.queues[name]

    def stopped(self) -> bool:
        self.interrupted = self.interrupted or self.clocks.interrupted()
        return self.interrupted

    def paced(self, keys: int) -> None:
        """`keys` more read: wait as long as the rate asks, and say how far it is."""
        self.read += keys
        ahead = self.read / self.pace.rate - (self.clocks.clock() - self.started)
        if ahead > 0:
            self.clocks.sleep(ahead)
        self.clocks.progress(self.read)

    def scan(self, match: str) -> Iterator[list[bytes]]:
        """The node's keys matching `match`, a SCAN call at a time, paced."""
        cursor = 0
        while not self.stopped():
            cursor, keys = self.client.scan(cursor, match=match, count=self.pace.scan_count)
            self.paced(len(keys) or 1)
            yield cast(list[bytes], keys)
            if cursor == 0:
                return

    def rows_pass(self, wanted: set[str] | None) -> None:
        """Every row of the queues read: one SCAN of the node (of one queue's keys when one is
        named), each batch of a queue's ids observed."""
        if wanted is not None and len(wanted) == 1:
            match = glob_escape(QueueKeys(next(iter(wanted)), self.root).prefix) + "*"
        else:
            match = f"{glob_escape(self.root)}:{{*}}:*"
        for keys in self.scan(match):
            rows: dict[str, list[bytes]] = {}
            for key in keys:
                parts = split_key(key, self.root)
                if parts is None or (wanted is not None and parts[0] not in wanted):
                    continue
                queue, rest = parts
                if rest.startswith(ROW):
                    rows.setdefault(queue, []).append(rest[len(ROW) :])
                elif rest in SETS:
                    self.queue(queue)
            for queue, ids in rows.items():
                audit = self.queue(queue)
                audit.rows += len(ids)
                self.look(audit, ids, rows_only=True)

    def sets_pass(self, audit: QueueAudit) -> None:
        """The ids of pending and dead, and the leases of active due too far out, observed: what
        has no row is found here (the rows pass found the rest)."""
        keys = QueueKeys(audit.queue, self.root)
        try:
            for key in (keys.pending, keys.dead):
                for ids in self.zscan(key):
                    self.look(audit, ids, rows_only=False)
            for ids in self.far_leases(keys):
                self.look(audit, ids, rows_only=False)
        except QUEUE_ERRORS as exc:
            audit.fail(exc)

    def zscan(self, key: str) -> Iterator[list[bytes]]:
        cursor = 0
        while not self.stopped():
            cursor, pairs = self.client.zscan(key, cursor, count=self.pace.scan_count)
            self.paced(len(pairs) or 1)
            yield [cast(bytes, member) for member, _score in pairs]
            if cursor == 0:
                return

    def far_leases(self, keys: QueueKeys) -> Iterator[list[bytes]]:
        """The ids in active due later than now + the longest lease, a batch at a time."""
        seconds, micros = self.client.time()
        bound = int(seconds) * 1000 + int(micros) // 1000 + self.pace.max_lease_ms
        start = 0
        while not self.stopped():
            ids = self.client.zrangebyscore(
                keys.active, f"({bound}", "+inf", start=start, num=self.pace.batch
            )
            self.paced(len(ids) or 1)
            if not ids:
                return
            yield cast(list[bytes], ids)
            start += len(ids)

    def look(self, audit: QueueAudit, ids: Sequence[bytes], *, rows_only: bool) -> None:
        """Observe `ids` of the queue in batches, keep what is wrong as candidates: in the
        rows pass, ids with a row; in the sets pass, ids without one."""
        if audit.error is not None or not ids:
            return
        keys = QueueKeys(audit.queue, self.root)
        for start in range(0, len(ids), self.pace.batch):
            try:
                now, seen = scripts.observe(self.client, keys, ids[start : start + self.pace.batch])
            except QUEUE_ERRORS as exc:
                audit.fail(exc)
                return
            for one in seen:
                if one.has_row != rows_only:
                    continue
                verdict = classify(one, now, self.pace.max_lease_ms)
                if verdict is not None:
                    audit.candidates[one.job_id] = verdict
                    self.last_candidate = self.clocks.clock()

    def confirm(self) -> None:
        """Each candidate read again, atomically, once the grace has passed since the last was
        found: only what is still so is reported."""
        if not any(a.candidates for a in self.queues.values()):
            return
        wait = self.last_candidate + self.pace.grace_s - self.clocks.clock()
        if wait > 0:
            self.clocks.sleep(wait)
        for audit in self.queues.values():
            keys = QueueKeys(audit.queue, self.root)
            ids = list(audit.candidates)
            for start in range(0, len(ids), self.pace.batch):
                try:
                    now, seen = scripts.observe(
                        self.client, keys, ids[start : start + self.pace.batch]
                    )
                except QUEUE_ERRORS as exc:
                    audit.fail(exc)
                    break
                self.paced(len(seen))
                confirmed(audit, seen, now, self.pace.max_lease_ms)
            audit.candidates.clear()


def confirmed(
    audit: QueueAudit, seen: Sequence[Observation], now_ms: int, max_lease_ms: int
) -> None:
    """The candidates read again that are still of the class first found, kept in byte order."""
    for one in seen:
        first = audit.candidates.get(one.job_id)
        if first is not None and classify(one, now_ms, max_lease_ms) is first:
            audit.found.setdefault(first, []).append(one.job_id)
    audit.found = {c: sorted(audit.found[c]) for c in CLASSES if c in audit.found}
