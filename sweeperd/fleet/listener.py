"""One primary's source of deadlines: the server tells when a swept queue's active set changes
(CLIENT TRACKING, redirected to a connection subscribed to `__redis__:invalidate`), and the
changed queues' earliest deadlines are read in one round and their wakes re-armed.

redis-py 8 speaks RESP3 by default, where an invalidation is a push its parser keeps for its
own cache: both connections here speak RESP2, where it is a pub/sub message read as any reply.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import redis
import structlog
from redis.connection import AbstractConnection

from sweeperd.config.settings import QueueSettings
from sweeperd.fleet.deadlines import Deadlines
from sweeperd.keyspace import QueueKeys
from sweeperd.server.packed import resp

log = structlog.get_logger("sweeperd.listener")

CHANNEL = b"__redis__:invalidate"
ROUND_S = 0.005  # one round of reads per primary at most this often
POLL_S = 0.05  # a queue new to the listener is read this soon at the latest
PING_S = 5.0  # both connections are checked this often: a dead peer is found by a ping
RETRY_FIRST_S = 0.5  # a lost connection is made again after this, doubling
RETRY_MAX_S = 30.0
REFUSED_RETRY_S = 60.0  # a refusal is asked again this often (an ACL may be granted meanwhile)
SHARE = 0.2  # a changed queue is read again within this share of the shortest lease seen on
OBSERVED = 64  # the primary, once this many new earliest leases were seen (till then, at once)


class SourceState(StrEnum):
    """Where a primary's queues' deadlines come from now."""

    TRACKING = "tracking"  # the server says when a queue changes: a new lease is heard
    CONNECTING = "connecting"  # not yet, or lost: the interval alone until it is back
    REFUSED = "refused"  # the server or the ACL refuses tracking: the interval alone
    OFF = "off"  # --deadline-source off: the interval alone


@dataclass
class Watched:
    """A queue the listener tracks: its settings, its earliest lease and when it was read."""

    queue: QueueSettings
    head: tuple[bytes, float] | None = None  # the earliest lease last read: id, deadline (ms)
    read_s: float = float("-inf")  # when it was last read (monotonic)


class Refused(Exception):
    """The server or the ACL refused tracking or the subscription: the interval alone."""


class Listener:
    """Hears one primary's swept queues change and re-arms their wakes, on a thread of its own.

    A queue is tracked once a tick swept it here (`track`), and left when it is no longer swept
    here (`forget`, or a read the Cluster sends elsewhere). Invalidations are coalesced: the
    queues changed since the last round are read in one pipelined round, at most one round per
    ROUND_S, and a queue is read again no sooner than SHARE of the shortest lease seen on the
    primary (a busy queue costs a read per a few of its claims, not one per claim). Tracking is
    lost with either connection: both are made again and every queue read again at once.
    """

    def __init__(
        self,
        name: str,
        client: redis.Redis,
        prefix_root: str,
        deadlines: Deadlines,
        *,
        armed: Callable[[float | None], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.source = SourceState.CONNECTING
        self.why = "not connected yet"  # what the source's state is owed to, for `/`
        self._client = client
        self._root = prefix_root
        self._deadlines = deadlines
        self._armed = armed  # told the primary's next wake after a round armed some
        self._clock = clock
        self._watched: dict[bytes, Watched] = {}
        self._changed: set[bytes] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said_refused = False
        self._shortest_s = float("inf")  # the least time a new earliest lease had left, read
        self._observed = 0  # how many new earliest leases the reads found
        self.reads = 0  # ZRANGE reads sent, for the bench and the tests

    # What the fleet tells it.
    def track(self, queues: Sequence[QueueSettings]) -> None:
        """Queues swept here: each new one is read (and so tracked) within POLL_S."""
        with self._lock:
            for q in queues:
                key = QueueKeys(q.name, self._root).active.encode()
                found = self._watched.get(key)
                if found is None:
                    self._watched[key] = Watched(q)
                    self._changed.add(key)
                elif found.queue is not q:
                    found.queue = q

    def forget(self, queue: str) -> None:
        """The queue is no longer swept here: no read, no wake from here."""
        key = QueueKeys(queue, self._root).active.encode()
        with self._lock:
            self._watched.pop(key, None)
            self._changed.discard(key)

    def tracked(self) -> int:
        with self._lock:
            return len(self._watched)

    # The lifetime.
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"listen-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        """Connect, listen until a connection fails, then again after a backoff; a refusal is
        said once and asked again every REFUSED_RETRY_S."""
        backoff = RETRY_FIRST_S
        while not self._stop.is_set():
            try:
                self._listen()
            except Refused as exc:
                self._set(SourceState.REFUSED, str(exc))
                if not self._said_refused:
                    self._said_refused = True
                    log.warning(
                        "deadline_source_refused",
                        node=self.name,
                        error=str(exc),
                        hint="leases taken since a queue's last sweep wait for its interval: "
                        "grant +client|id +client|tracking +subscribe &__redis__:invalidate "
                        "(sweeperd acl prints the line)",
                    )
                self._stop.wait(REFUSED_RETRY_S)
                continue
            except (redis.RedisError, OSError) as exc:
                if self.source is SourceState.TRACKING:
                    log.info("deadline_source_lost", node=self.name, error=str(exc))
                self._set(SourceState.CONNECTING, f"lost: {exc}")
            except Exception as exc:  # a bug: said, and the interval carries on meanwhile
                log.exception("deadline_source_failed", node=self.name)
                self._set(SourceState.CONNECTING, f"failed: {type(exc).__name__}: {exc}")
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, RETRY_MAX_S)
            if self.source is SourceState.TRACKING:
                backoff = RETRY_FIRST_S

    def _set(self, source: SourceState, why: str) -> None:
        self.source, self.why = source, why

    def _listen(self) -> None:
        """One life of the two connections: made, every queue read, then changes heard."""
        subscriber, reader = self._connection(), self._connection()
        try:
            self._subscribe(subscriber, reader)
            with self._lock:
                self._changed.update(self._watched)  # tracking was lost with the last ones
            self._set(SourceState.TRACKING, "the server says when a queue changes")
            self._said_refused = False
            log.info("deadline_source_tracking", node=self.name)
            self._hear(subscriber, reader)
        finally:
            subscriber.disconnect()
            reader.disconnect()

    def _connection(self) -> Wire:
        """A connection of the node's with its credentials, TLS and db, speaking RESP2."""
        pool = self._client.connection_pool
        return Wire(pool.connection_class(**{**pool.connection_kwargs, "protocol": 2}))

    def _subscribe(self, subscriber: Wire, reader: Wire) -> None:
        """The subscriber on the invalidation channel, the reader's keys tracked to it."""
        try:
            subscriber.send_command("CLIENT", "ID")
            own_id = subscriber.read_response()
            subscriber.send_command("SUBSCRIBE", CHANNEL)
            subscriber.read_response()
            reader.send_command("CLIENT", "TRACKING", "on", "REDIRECT", own_id)
            reader.read_response()
        except redis.ResponseError as exc:
            raise Refused(str(exc)) from None

    def _hear(self, subscriber: Wire, reader: Wire) -> None:
        """Read the queues changed, at most a round per ROUND_S, until stopped or broken."""
        last_round = pinged = self._clock()
        while not self._stop.is_set():
            now = self._clock()
            if now - pinged >= PING_S:
                self._ping(subscriber, reader)
                pinged = now
            due = self._due(now)
            if due and now - last_round >= ROUND_S:
                self._read(reader, due)
                last_round = now
                continue
            wait = self._next_read(now, last_round)
            if subscriber.can_read(timeout=wait):
                self._take(subscriber)

    def _ping(self, subscriber: Wire, reader: Wire) -> None:
        """Both connections answer, or the failure raises (a peer gone without a word): the
        subscription asked again, the reader's id, both already granted (no PING in the ACL)."""
        subscriber.send_command("SUBSCRIBE", CHANNEL)
        reader.send_command("CLIENT", "ID")
        reader.read_response()  # the subscriber's answer is read with the messages

    def _take(self, subscriber: Wire) -> None:
        """Every message waiting: the keys changed (all of them when the server flushed)."""
        while True:
            message = subscriber.read_response()
            if isinstance(message, list) and message[:2] == [b"message", CHANNEL]:
                keys = message[2]
                with self._lock:
                    self._changed.update(
                        self._watched if keys is None else (k for k in keys if k in self._watched)
                    )
            if not subscriber.can_read(timeout=0):
                return

    def _gap(self) -> float:
        """How long after its last read a changed queue is read again: at once until enough
        leases were seen, then a share of the shortest (the queues of one primary usually take
        leases alike): a lease is learned well before its deadline, and a busy queue of long
        leases is read every few seconds, not at each claim."""
        if self._observed < OBSERVED:
            return 0.0
        return SHARE * self._shortest_s

    def _due(self, now: float) -> list[bytes]:
        """The changed queues whose gap since their last read has passed."""
        gap = self._gap()
        with self._lock:
            return [key for key in self._changed if now - self._watched[key].read_s >= gap]

    def _next_read(self, now: float, last_round: float) -> float:
        """How long to wait for messages before the next round may read a changed queue."""
        gap = self._gap()
        with self._lock:
            soonest = min(
                (self._watched[k].read_s + gap for k in self._changed),
                default=now + POLL_S,
            )
        return min(POLL_S, max(soonest - now, last_round + ROUND_S - now, 0.0))

    def _read(self, reader: Wire, keys: list[bytes]) -> None:
        """One pipelined round of the queues' earliest lease (which tracks each key again), their
        wakes re-armed, the primary's next wake told."""
        with self._lock:
            self._changed.difference_update(keys)
        reader.send_packed_command(
            [b"".join(resp((b"ZRANGE", key, b"0", b"0", b"WITHSCORES")) for key in keys)]
        )
        replies: list[object] = []
        for _ in keys:
            try:
                replies.append(reader.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
        self.reads += len(keys)
        now = self._clock()
        armed: list[tuple[str, float | None, float]] = []
        with self._lock:
            for key, reply in zip(keys, replies, strict=True):
                watched = self._watched.get(key)
                if watched is None:
                    continue
                if isinstance(reply, redis.ResponseError):
                    if str(reply).startswith(("MOVED", "ASK")):  # its slot is served elsewhere
                        del self._watched[key]
                    continue
                head = _head(reply)
                self._learn(watched, head, now)
                earliest = None if head is None else head[1]
                armed.append((watched.queue.name, earliest, watched.queue.interval))
        if armed:
            self._deadlines.learn(now, armed)
            self._armed(self._deadlines.next_wake())

    def _learn(self, watched: Watched, head: tuple[bytes, float] | None, now: float) -> None:
        """A new earliest lease (another id, due sooner than the last one read) had at least
        this long left: the shortest such time on the primary is how soon a queue is read
        again."""
        before, first = watched.head, watched.read_s == float("-inf")
        watched.head, watched.read_s = head, now
        if first or head is None:
            return
        if before is not None and (head[0] == before[0] or head[1] >= before[1]):
            return
        at = self._deadlines.host_s(head[1])
        if at is None:
            return
        self._observed += 1
        self._shortest_s = min(self._shortest_s, max(0.0, at - now))


class Wire:
    """One connection of the listener's, connected when made: commands sent, replies read."""

    def __init__(self, connection: AbstractConnection) -> None:
        self._connection = connection
        connection.connect()  # type: ignore[no-untyped-call]

    def send_command(self, *args: object) -> None:
        self._connection.send_command(*args)  # type: ignore[no-untyped-call]

    def send_packed_command(self, commands: list[bytes]) -> None:
        self._connection.send_packed_command(commands)  # type: ignore[no-untyped-call]

    def read_response(self) -> object:
        return self._connection.read_response()

    def can_read(self, timeout: float) -> bool:
        """A reply or message waits, within `timeout` s (a read that times out would close the
        connection: redis-py drops a connection whose read timed out)."""
        return bool(self._connection.can_read(timeout=timeout))

    def disconnect(self) -> None:
        self._connection.disconnect()  # type: ignore[no-untyped-call]


def _head(reply: object) -> tuple[bytes, float] | None:
    """ZRANGE 0 0 WITHSCORES's reply as (id, deadline ms); None for an empty active set."""
    if not isinstance(reply, list) or len(reply) < 2:
        return None
    member, score = reply[0], reply[1]
    return bytes(member), float(score)
