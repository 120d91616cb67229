"""One primary's source of deadlines: the server tells when a swept queue's active set changes
(CLIENT TRACKING, redirected to a connection subscribed to `__redis__:invalidate`), and a changed
queue's earliest deadline is read and its wake re-armed, unless its next sweep comes first.

The sweeps' own connections track to the same subscriber, but only on request (each sends
CLIENT TRACKING with NOLOOP and OPTIN when it connects): an idle sweep tracks nothing, and the
sweep of a queue left to it after a change is sent behind CLIENT CACHING yes, so that it tracks
the queue again without a read of the listener's.
redis-py 8 speaks RESP3 by default, where an invalidation is a push its parser keeps for its
own cache: the listener's two connections speak RESP2, where it is a pub/sub message.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol
from weakref import WeakKeyDictionary

import redis
import structlog

from sweeperd.config.settings import QueueSettings
from sweeperd.fleet.deadlines import Deadlines
from sweeperd.fleet.waiter import Waiter
from sweeperd.keyspace import active_key, queue_of_key
from sweeperd.reasons import ReplyLost
from sweeperd.server.packed import resp

log = structlog.get_logger("sweeperd.listener")

CHANNEL = b"__redis__:invalidate"
# One round of reads per primary at most every ROUND_S; while a changed queue waits to be read
# the loop looks again every POLL_S at most (with none, it sleeps till a message, a queue new to
# it, a ping or a check); the pool's connections not yet tracked to the subscriber are looked for
# every CHECK_S; both connections are pinged every PING_S (a peer gone without a word); a lost
# connection is made again after RETRY_FIRST_S, doubling to RETRY_MAX_S; a refusal is asked
# again every REFUSED_RETRY_S (an ACL may be granted meanwhile).
ROUND_S = 0.005
POLL_S = 0.05
CHECK_S = 0.1
PING_S = 5.0
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
REFUSED_RETRY_S = 60.0
# Once OBSERVED new earliest leases were seen on the primary (till then a changed queue is read
# at once), a changed queue is read again no sooner than SHARE of the shortest time one had
# left, and not at all when its next sweep comes first with SPARE_S at least to spare (a late
# sweep), but for a sample read every SAMPLE_S, whose next change is read at once: a shorter
# lease than any seen, taken then, is seen so.
SHARE = 0.2
OBSERVED = 64
SAMPLE_S = 120.0
SPARE_S = 1.0
# Once the shortest lease is known, the messages are taken in batches, at most one every
# HEARD_SHARE of it and HEARD_MAX_S: a busy primary's invalidations cost a loop per batch, not
# one each, and a lease is still heard long before its deadline.
HEARD_SHARE = 0.01
HEARD_MAX_S = 0.25


class SourceState(StrEnum):
    """Where a primary's queues' deadlines come from now: TRACKING, the server says when a queue
    changes; the interval alone while CONNECTING (not yet, or lost), REFUSED (by the server or
    the ACL) or OFF (--deadline-source off)."""

    TRACKING = "tracking"
    CONNECTING = "connecting"
    REFUSED = "refused"
    OFF = "off"


@dataclass(slots=True)
class Watched:
    """A queue the listener tracks: its settings, the earliest lease last read (id, deadline ms),
    when it was last read and last swept (monotonic), whether its read to come is a sample, and
    whether its next change is read at once (the probe after a sample)."""

    queue: QueueSettings
    head: tuple[bytes, float] | None = None
    read_s: float = float("-inf")
    swept_s: float = float("-inf")
    sampling: bool = False
    probing: bool = False


class Link(Protocol):
    """What the listener uses of a redis-py connection."""

    def connect(self) -> None: ...
    def on_connect(self) -> None: ...
    def send_command(self, *args: object) -> None: ...
    def send_packed_command(self, command: list[bytes]) -> None: ...
    def read_response(self) -> object: ...
    def can_read(self, timeout: float) -> bool: ...
    def disconnect(self) -> None: ...


class Refused(Exception):
    """The server or the ACL refused tracking or the subscription: the interval alone."""


class Listener:
    """Hears one primary's swept queues change and re-arms their wakes, on a thread of its own.

    A queue is tracked once a tick swept it here (`track`), and left when it is no longer swept
    here (`forget`, or a read the Cluster sends elsewhere). Every connection of the primary's
    pool tracks its reads to the listener's subscriber (see `_tracked`): a sweep leaves its
    queue tracked. A changed queue whose next sweep comes before a lease taken now could fall
    due is left to that sweep; any other is read, the queues changed since the last round in
    one pipelined round, at most one round per ROUND_S, a queue again no sooner than SHARE of
    the shortest lease seen on the primary (a busy queue costs a read per a few of its claims,
    not one per claim). Tracking is lost with either connection: both are made again, every
    queue read again at once, and the pool's connections tracked to the new subscriber.
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
        self.why = "not connected yet"
        self._client = client
        self._root = prefix_root
        self._deadlines = deadlines
        self._armed = armed
        self._clock = clock
        # By queue name: a key per queue kept was 5.6 MiB at 100,000 queues, and making one per
        # queue swept half of what track() cost.
        self._watched: dict[str, Watched] = {}
        self._changed: set[str] = set()
        self._left: dict[str, int] = {}
        self._leaving = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._waiter = Waiter()
        self._thread: threading.Thread | None = None
        self._said_refused = False
        self._shortest_s = float("inf")
        self._observed = 0
        self._redirect: int | None = None
        self._pool: WeakKeyDictionary[Link, int | None] = WeakKeyDictionary()
        self._sweeps_tracked = self._pool_refused = self._said_untracked = False
        self._checked_s = float("-inf")
        self.reads = 0
        client.connection_pool.connection_kwargs["redis_connect_func"] = self._tracked

    # What the fleet tells it.
    def track(self, queues: Sequence[QueueSettings]) -> None:
        """Note the queues a tick just swept here: each new one is read (and so tracked) within
        POLL_S, and one left to this sweep that it did not track again (see `retracked`) is
        changed again."""
        now = self._clock()
        with self._lock:
            watched, left, changed = self._watched, self._left, self._changed
            before = len(changed)
            for q in queues:
                name = q.name
                found = watched.get(name)
                if found is None:
                    watched[name] = found = Watched(q)
                    changed.add(name)
                elif left and left.pop(name, None) is not None:
                    changed.add(name)
                found.queue, found.swept_s = q, now
            poke = len(changed) > before
        if poke:
            self._waiter.poke()

    def to_retrack(self, queues: Sequence[QueueSettings]) -> dict[str, int]:
        """Return the queues among `queues` left to their next sweep since a change, each with
        the token `retracked` takes back: their sweeps go out behind CLIENT CACHING yes."""
        if not self._left:
            return {}
        with self._lock:
            tokens = ((q.name, self._left.get(q.name)) for q in queues)
            return {name: token for name, token in tokens if token is not None}

    def retracked(self, tokens: Mapping[str, int], refused: Collection[str] = ()) -> None:
        """Take back the tokens of sweeps sent behind CLIENT CACHING yes: each queue whose token
        is still its own (not left again since: its later sweep tracks it) is tracked again. A
        CACHING refused (`refused`: an ACL without +client|caching) leaves those queues to be
        read, and no queue is left to its sweep any more until the connections are made again
        (said once)."""
        with self._lock:
            for name, token in tokens.items():
                if name not in refused and self._left.get(name) == token:
                    del self._left[name]
        if refused and self._redirect is not None:
            self._refused_on_pool(self._redirect, "CLIENT CACHING refused")

    def forget(self, queue: str) -> None:
        """Stop hearing a queue no longer swept here: no read, no wake from here."""
        with self._lock:
            self._drop(queue)

    def _drop(self, queue: str) -> None:
        """Drop a queue from every set of the listener's. Hold the lock."""
        self._watched.pop(queue, None)
        self._changed.discard(queue)
        self._left.pop(queue, None)

    def tracked(self) -> int:
        with self._lock:
            return len(self._watched)

    # The sweeps' connections.
    def _tracked(self, connection: Link) -> None:
        """Set up a connection of the primary's pool just made: its handshake, then its reads
        tracked to the subscriber on request (OPTIN: a command behind CLIENT CACHING yes) with
        NOLOOP (the sweep's own writes are not told back). A sweep sent so tracks its queue again at
        no cost. A refusal never fails the connection: every changed queue is read (said once)."""
        connection.on_connect()
        redirect = self._redirect
        if redirect is not None:
            try:
                connection.send_command(
                    "CLIENT", "TRACKING", "on", "REDIRECT", redirect, "NOLOOP", "OPTIN"
                )
                connection.read_response()
            except ReplyLost as exc:
                raise redis.ConnectionError(str(exc.__cause__ or exc)) from None
            except redis.ResponseError as exc:
                self._refused_on_pool(redirect, str(exc))
                redirect = None
        with self._lock:
            self._pool[connection] = redirect
            untracked = redirect != self._redirect
            if untracked:
                self._sweeps_tracked = False
        if untracked:
            self._waiter.poke()

    def _refused_on_pool(self, redirect: int, error: str) -> None:
        """Note that a pool connection refused tracking to the subscriber (or a sweep its CLIENT
        CACHING yes): unless that subscriber is gone meanwhile, changed queues are read, no
        longer left to the sweeps, until it is made again; said once."""
        with self._lock:
            if redirect != self._redirect:
                return
            self._pool_refused, self._sweeps_tracked = True, False
            self._changed.update(self._left)
            self._left.clear()
        self._waiter.poke()
        if not self._said_untracked:
            self._said_untracked = True
            log.warning(
                "deadline_source_sweeps_untracked",
                node=self.name,
                error=error,
                hint="every changed queue is read again, none left to its next sweep",
            )

    def _check_pool(self, now: float) -> None:
        """Check whether every connected connection of the pool tracks to the subscriber; while one
        does not (made before it, or in use when it was made), the pool's idle connections are
        dropped every CHECK_S: they connect again, tracked, when next used."""
        with self._lock:
            if self._sweeps_tracked or self._pool_refused or now - self._checked_s < CHECK_S:
                return
            self._checked_s = now
            redirect = self._redirect
            stale = any(to != redirect and _connected(c) for c, to in self._pool.items())
            self._sweeps_tracked = not stale
            if stale:
                self._changed.update(self._left)
                self._left.clear()
        if stale:
            self._client.connection_pool.disconnect(inuse_connections=False)

    # The lifetime.
    def start(self) -> None:
        self._waiter.open()
        self._thread = threading.Thread(target=self._run, name=f"listen-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        self._waiter.poke()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        """Listen till stopped (see _live), the waiter's sockets closed at the end."""
        try:
            self._live()
        finally:
            self._waiter.close()

    def _live(self) -> None:
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
                        "grant +client|id +client|tracking +client|caching +subscribe "
                        "&__redis__:invalidate (sweeperd acl prints the line)",
                    )
                self._stop.wait(REFUSED_RETRY_S)
                continue
            except (redis.RedisError, OSError) as exc:
                if self.source is SourceState.TRACKING:
                    log.info("deadline_source_lost", node=self.name, error=str(exc))
                self._set(SourceState.CONNECTING, f"lost: {exc}")
            except Exception as exc:
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
        """Live one life of the two connections: made, every queue read, the pool's connections
        tracked to the new subscriber, then changes heard."""
        subscriber, reader = self._connection(), self._connection()
        try:
            redirect = self._subscribe(subscriber, reader)
            with self._lock:
                self._redirect, self._checked_s = redirect, float("-inf")
                self._sweeps_tracked = self._pool_refused = False
                self._changed.update(self._watched)
                self._left.clear()
            self._set(SourceState.TRACKING, "the server says when a queue changes")
            self._said_refused = False
            log.info("deadline_source_tracking", node=self.name)
            self._hear(subscriber, reader)
        finally:
            with self._lock:
                self._redirect, self._sweeps_tracked = None, False
            subscriber.disconnect()
            reader.disconnect()

    def _connection(self) -> Link:
        """Make a connection to the node with its credentials, TLS and db, speaking RESP2."""
        pool = self._client.connection_pool
        options = {**pool.connection_kwargs, "protocol": 2, "redis_connect_func": None}
        connection: Link = pool.connection_class(**options)
        connection.connect()
        return connection

    def _subscribe(self, subscriber: Link, reader: Link) -> int:
        """Subscribe to the invalidation channel, track the reader's keys to it; return its id."""
        try:
            subscriber.send_command("CLIENT", "ID")
            own_id = subscriber.read_response()
            subscriber.send_command("SUBSCRIBE", CHANNEL)
            subscriber.read_response()
            reader.send_command("CLIENT", "TRACKING", "on", "REDIRECT", own_id)
            reader.read_response()
        except redis.ResponseError as exc:
            raise Refused(str(exc)) from None
        assert isinstance(own_id, int)
        return own_id

    def _hear(self, subscriber: Link, reader: Link) -> None:
        """Read the queues changed, at most a round per ROUND_S, until stopped or broken."""
        last_round = pinged = self._clock()
        while not self._stop.is_set():
            now = self._clock()
            if now - pinged >= PING_S:
                self._ping(subscriber, reader)
                pinged = now
            self._check_pool(now)
            due = self._due(now)
            if due and now - last_round >= ROUND_S:
                self._read(reader, due)
                last_round = now
                continue
            wait = self._next_read(now, last_round, pinged)
            if self._waiter.wait(subscriber, wait):
                self._take(subscriber)
                self._stop.wait(self._batch_s())

    def _ping(self, subscriber: Link, reader: Link) -> None:
        """Both connections answer, or the failure raises (a peer gone without a word): the
        subscription asked again, the reader's id, both already granted (no PING in the ACL).
        The subscriber's answer is read with the messages."""
        subscriber.send_command("SUBSCRIBE", CHANNEL)
        reader.send_command("CLIENT", "ID")
        reader.read_response()

    def _take(self, subscriber: Link) -> None:
        """Take every message waiting: the keys changed (all of them when the server flushed)."""
        while True:
            message = subscriber.read_response()
            if isinstance(message, list) and message[:2] == [b"message", CHANNEL]:
                keys = message[2]
                with self._lock:
                    if keys is None:
                        self._changed.update(self._watched)
                    else:
                        named = (queue_of_key(key, self._root) for key in keys)
                        self._changed.update(
                            q for q in named if q is not None and q in self._watched
                        )
            if not subscriber.can_read(timeout=0):
                return

    def _gap(self) -> float:
        """Return how long after its last read a changed queue is read again: at once until enough
        leases were seen, then a share of the shortest (the queues of one primary usually take
        leases alike): a lease is learned well before its deadline, and a busy queue of long
        leases is read every few seconds, not at each claim."""
        if self._observed < OBSERVED:
            return 0.0
        return SHARE * self._shortest_s

    def _batch_s(self) -> float:
        """Return how long messages are left to gather after a batch was taken."""
        if self._observed < OBSERVED:
            return 0.0
        return min(HEARD_SHARE * self._shortest_s, HEARD_MAX_S)

    def _due(self, now: float) -> list[str]:
        """Return the changed queues whose gap since their last read has passed (or probed after a
        sample); those whose next sweep comes first are left to it."""
        gap = self._gap()
        with self._lock:
            left = [q for q in self._changed if self._swept_first(self._watched[q], now)]
            self._unchange(left)
            self._left.update((q, next(self._leaving)) for q in left)
            watched = [(q, self._watched[q]) for q in self._changed]
            return [q for q, w in watched if w.probing or now - w.read_s >= gap]

    def _unchange(self, queues: Collection[str]) -> None:
        """Take the queues out of the changed ones, hold the lock. Once none is left the set is
        made anew: an emptied set keeps its table, and the loop walks it at every turn (the table
        of a start-up's 100,000 changes, walked 60 times a second, was 13 % of a core)."""
        self._changed.difference_update(queues)
        if not self._changed:
            self._changed = set()

    def _swept_first(self, watched: Watched, now: float) -> bool:
        """Tell whether the queue's next sweep that starts after the change (its wake still to come,
        or two intervals after the end of its last sweep: a sweep in flight now may have read before
        the change) comes before a lease taken now could fall due, with SHARE of the shortest lease
        (and SPARE_S at least) to spare: that sweep reads the new earliest deadline and, sent behind
        CLIENT CACHING yes, tracks the queue again. Only while every connection of the pool tracks,
        once the shortest lease is known, and for SAMPLE_S after a read. Hold the lock."""
        if not self._sweeps_tracked or self._observed < OBSERVED:
            return False
        if watched.probing:
            return False
        if now - watched.read_s >= SAMPLE_S:
            watched.sampling = True
            return False
        sweep = watched.swept_s + 2 * watched.queue.interval
        wake = self._deadlines.wakes.get(watched.queue.name)
        if wake is not None and wake[0] > now:
            sweep = min(sweep, wake[0])
        return sweep <= now + self._shortest_s - max(SHARE * self._shortest_s, SPARE_S)

    def _next_read(self, now: float, last_round: float, pinged: float) -> float:
        """Return how long to wait for messages before the next round may read a changed queue;
        with none changed, till the next ping, or the next check of the pool while one of its
        connections does not track (a queue new to the listener ends the wait: see track)."""
        gap = self._gap()
        with self._lock:
            waiting = [self._watched[k] for k in self._changed]
            checking = not (self._sweeps_tracked or self._pool_refused)
            checked = self._checked_s
        if not waiting:
            until = pinged + PING_S
            if checking:
                until = min(until, checked + CHECK_S)
            return max(until - now, 0.0)
        soonest = min(now if w.probing else w.read_s + gap for w in waiting)
        return min(POLL_S, max(soonest - now, last_round + ROUND_S - now, 0.0))

    def _read(self, reader: Link, queues: list[str]) -> None:
        """Read the queues' earliest lease in one pipelined round (which tracks each key again),
        their wakes re-armed, the primary's next wake told."""
        with self._lock:
            self._unchange(queues)
        root = self._root
        reader.send_packed_command(
            [
                b"".join(
                    resp((b"ZRANGE", active_key(q, root), b"0", b"0", b"WITHSCORES"))
                    for q in queues
                )
            ]
        )
        replies: list[object] = []
        for _ in queues:
            try:
                replies.append(reader.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
        now = self._clock()
        armed: list[tuple[str, float | None, float]] = []
        with self._lock:
            for queue, reply in zip(queues, replies, strict=True):
                watched = self._watched.get(queue)
                if watched is None:
                    continue
                if isinstance(reply, redis.ResponseError):
                    if str(reply).startswith(("MOVED", "ASK")):
                        self._drop(queue)
                    continue
                head = _head(reply)
                self._learn(watched, head, now)
                earliest = None if head is None else head[1]
                armed.append((watched.queue.name, earliest, watched.queue.interval))
            self.reads += len(queues)
        if armed:
            self._deadlines.learn(now, armed)
            self._armed(self._deadlines.next_wake())

    def _learn(self, watched: Watched, head: tuple[bytes, float] | None, now: float) -> None:
        """Learn from a read how long a new earliest lease (another id, due sooner than the last
        one read) taken since the last read has left: the shortest such time on the primary is
        how soon a queue is read again. Only where the last read is more recent than that time
        (a read after a long while, of a queue left to its sweeps, finds an old lease there,
        taken when nobody read: its time left says nothing of its length)."""
        before, last = watched.head, watched.read_s
        watched.head, watched.read_s = head, now
        watched.probing, watched.sampling = watched.sampling, False
        if last == float("-inf") or head is None:
            return
        if before is not None and (head[0] == before[0] or head[1] >= before[1]):
            return
        at = self._deadlines.host_s(head[1])
        if at is None or now - last > at - now:
            return
        self._observed += 1
        self._shortest_s = min(self._shortest_s, max(0.0, at - now))


def _connected(connection: Link) -> bool:
    """Tell whether the connection has a socket (redis-py drops it on disconnect)."""
    return getattr(connection, "_sock", None) is not None


def _head(reply: object) -> tuple[bytes, float] | None:
    """ZRANGE 0 0 WITHSCORES's reply as (id, deadline ms); None for an empty active set."""
    if not isinstance(reply, list) or len(reply) < 2:
        return None
    member, score = reply[0], reply[1]
    return bytes(member), float(score)
