"""The audit of one node's queues: every row read by a paced SCAN, the ids of pending and dead (and
the leases of active due too far out) by ZSCAN, each batch observed by one atomic read-only
script; a candidate is reported only if a second read after the grace still finds it so."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
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
# The queues whose sets' first pages are read in one round trip: 60 small reads.
SETS_GROUP = 20


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
    # Row keys read (SCAN may return one twice).
    rows: int = 0
    found: dict[AuditClass, list[bytes]] = field(default_factory=dict)
    error: SweepError | None = None
    candidates: dict[bytes, AuditClass] = field(default_factory=dict, repr=False)

    @property
    def findings(self) -> int:
        return sum(len(ids) for ids in self.found.values())

    def fail(self, exc: redis.RedisError) -> None:
        """End the queue's audit on a refused read, said with its reason."""
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
        # Keys read on the node: the pace's count.
        self.read = 0
        self.started = clocks.clock()
        self.last_candidate = -float("inf")
        self.interrupted = False
        self.queues: dict[str, QueueAudit] = {}
        # Ids to observe, and each queue's rows found until a batch is full.
        self.waiting: list[tuple[QueueAudit, Sequence[bytes], Seen]] = []
        self.waiting_ids = 0
        self.held: dict[str, list[bytes]] = {}

    def audit(self, queues: Collection[str] | None) -> list[QueueAudit]:
        """Return every queue named (None: every queue found on the node), read, then its candidates
        read again after the grace."""
        wanted = None if queues is None else set(queues)
        for name in sorted(wanted or ()):
            self.queue(name)
        self.rows_pass(wanted)
        self.flush()
        if not self.stopped():
            self.sets_pass()
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
        """Yield the node's keys matching `match`, a SCAN call at a time, paced."""
        cursor = 0
        while not self.stopped():
            cursor, keys = self.client.scan(cursor, match=match, count=self.pace.scan_count)
            # Paced by the keys it looked at, matched or not.
            self.paced(max(len(keys), self.pace.scan_count))
            yield cast(list[bytes], keys)
            if cursor == 0:
                return

    def rows_pass(self, wanted: set[str] | None) -> None:
        """Read every row of the queues: one SCAN of the node (of one queue's keys when one is
        named), each queue's ids observed a batch at a time (its last, smaller, batch sharing a
        round trip with others')."""
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
                held = self.held.setdefault(queue, [])
                held += ids
                # A queue's rows are sent a full batch at a time.
                if len(held) >= self.pace.batch:
                    self.look(audit, held, rows_only=True)
                    held.clear()
        for queue, held in self.held.items():
            self.look(self.queues[queue], held, rows_only=True)
        self.held.clear()

    def sets_pass(self) -> None:
        """Observe the ids of pending and dead, and the leases of active due too far out: what
        has no row is found here (the rows pass found the rest). The first page of each of a
        queue's three reads goes in one round trip with SETS_GROUP queues' others; a set longer
        than a page is read on, a page at a time."""
        seconds, micros = self.client.time()
        bound = int(seconds) * 1000 + int(micros) // 1000 + self.pace.max_lease_ms
        audits = [a for a in self.queues.values() if a.error is None]
        for start in range(0, len(audits), SETS_GROUP):
            if self.stopped():
                return
            group = audits[start : start + SETS_GROUP]
            pipe = self.client.pipeline(transaction=False)
            for audit in group:
                keys = QueueKeys(audit.queue, self.root)
                pipe.zscan(keys.pending, 0, count=self.pace.scan_count)
                pipe.zscan(keys.dead, 0, count=self.pace.scan_count)
                pipe.zrangebyscore(keys.active, f"({bound}", "+inf", 0, self.pace.batch)
            replies = pipe.execute(raise_on_error=False)
            for n, audit in enumerate(group):
                self.read_sets(audit, replies[3 * n : 3 * n + 3], bound)

    def read_sets(self, audit: QueueAudit, first: Sequence[object], bound: int) -> None:
        """Read one queue's sets from their first pages on, observing its ids without a row."""
        keys = QueueKeys(audit.queue, self.root)
        try:
            for key, page in zip((keys.pending, keys.dead), first[:2], strict=True):
                for ids in self.zscan(key, page):
                    self.look(audit, ids, rows_only=False)
            for ids in self.far_leases(keys, bound, first[2]):
                self.look(audit, ids, rows_only=False)
        except QUEUE_ERRORS as exc:
            audit.fail(exc)

    def zscan(self, key: str, page: object) -> Iterator[list[bytes]]:
        """Yield the members of a sorted set from its first page (an error raised), a page at a
        time."""
        while True:
            if isinstance(page, redis.RedisError):
                raise page
            cursor, pairs = cast(tuple[int, list[tuple[bytes, float]]], page)
            self.paced(len(pairs) or 1)
            yield [member for member, _score in pairs]
            if cursor == 0 or self.stopped():
                return
            page = self.client.zscan(key, cursor, count=self.pace.scan_count)

    def far_leases(self, keys: QueueKeys, bound: int, page: object) -> Iterator[list[bytes]]:
        """Yield the ids in active due later than `bound`, from the first page, a batch at a
        time."""
        start = 0
        while True:
            if isinstance(page, redis.RedisError):
                raise page
            ids = cast(list[bytes], page)
            self.paced(len(ids) or 1)
            if not ids:
                return
            yield ids
            if len(ids) < self.pace.batch or self.stopped():
                return
            start += len(ids)
            page = self.client.zrangebyscore(
                keys.active, f"({bound}", "+inf", start=start, num=self.pace.batch
            )

    def look(self, audit: QueueAudit, ids: Sequence[bytes], *, rows_only: bool) -> None:
        """Observe `ids` of the queue, kept as candidates when wrong: in the rows pass ids with
        a row, in the sets pass ids without one. Ids wait until a batch is full, so that many
        small queues share a round trip (one pipeline of at most a batch of ids in all)."""
        if audit.error is not None:
            return
        for start in range(0, len(ids), self.pace.batch):
            self.wait(
                audit, ids[start : start + self.pace.batch], partial(keep_candidates, rows_only)
            )

    def wait(self, audit: QueueAudit, ids: Sequence[bytes], then: Seen) -> None:
        """`ids` to observe, sent with those waiting when together they would be a batch."""
        if self.waiting and self.waiting_ids + len(ids) > self.pace.batch:
            self.flush()
        self.waiting.append((audit, ids, then))
        self.waiting_ids += len(ids)

    def flush(self) -> None:
        """Send every call waiting, in one round trip; a queue whose call was refused fails."""
        calls = [(a, ids, then) for a, ids, then in self.waiting if a.error is None]
        self.waiting, self.waiting_ids = [], 0
        if not calls:
            return
        queries = [(QueueKeys(a.queue, self.root), ids) for a, ids, _then in calls]
        replies = scripts.observe_many(self.client, queries)
        for (audit, _ids, then), reply in zip(calls, replies, strict=True):
            if isinstance(reply, QUEUE_ERRORS):
                audit.fail(reply)
            elif isinstance(reply, redis.RedisError):
                raise reply
            elif audit.error is None:
                now, seen = reply
                if then(audit, seen, now, self.pace.max_lease_ms):
                    self.last_candidate = self.clocks.clock()

    def confirm(self) -> None:
        """Read each candidate again, atomically, once the grace has passed since the last was
        found: only what is still so is reported."""
        self.flush()
        if not any(a.candidates for a in self.queues.values()):
            return
        wait = self.last_candidate + self.pace.grace_s - self.clocks.clock()
        if wait > 0:
            self.clocks.sleep(wait)
        for audit in self.queues.values():
            ids = list(audit.candidates)
            for start in range(0, len(ids), self.pace.batch):
                self.wait(audit, ids[start : start + self.pace.batch], confirmed)
                self.paced(len(ids[start : start + self.pace.batch]))
        self.flush()
        for audit in self.queues.values():
            audit.found = {c: sorted(audit.found[c]) for c in CLASSES if c in audit.found}
            audit.candidates.clear()


Seen = Callable[[QueueAudit, Sequence[Observation], int, int], bool]


def keep_candidates(
    rows_only: bool, audit: QueueAudit, seen: Sequence[Observation], now_ms: int, max_lease_ms: int
) -> bool:
    """Keep what is wrong among `seen` as the queue's candidates (of ids with a row, or of ids
    without one), and tell whether anything was."""
    any_found = False
    for one in seen:
        if one.has_row == rows_only:
            verdict = classify(one, now_ms, max_lease_ms)
            if verdict is not None:
                audit.candidates[one.job_id] = verdict
                any_found = True
    return any_found


def confirmed(
    audit: QueueAudit, seen: Sequence[Observation], now_ms: int, max_lease_ms: int
) -> bool:
    """Keep as found the candidates read again that are still of the class first found."""
    for one in seen:
        first = audit.candidates.get(one.job_id)
        if first is not None and classify(one, now_ms, max_lease_ms) is first:
            audit.found.setdefault(first, []).append(one.job_id)
    return False
