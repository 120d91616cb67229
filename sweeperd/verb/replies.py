"""What one sweep call is and what it did: the call, its reply or refusal, and the queue's
numbers right after it, read from the sweep script's reply."""

from __future__ import annotations

from dataclasses import dataclass

from sweeperd.constants import LLONG_MAX
from sweeperd.keyspace import QueueKeys
from sweeperd.model import string2ll
from sweeperd.reasons import REDIRECTS, Reason, SweepError
from sweeperd.server.denied import may_not_run
from sweeperd.verb.acl import refused_command
from sweeperd.verb.executors import Executor


@dataclass(slots=True)  # not frozen, as Depths: one is made per queue and tick
class Call:
    """One sweep of one queue; `bound_ms` (server clock, 0 = the call's now) bounds `expired`;
    `listed` caps the ids the reply lists (0 = every id; the counts stay whole); `brief` lets
    a call that finds nothing due reply with its clock and earliest deadline alone (no run_id,
    no counts: see Depths); `tracked` sends it behind CLIENT CACHING yes (the keys it reads are
    tracked, on a connection that tracks on request: see fleet/listener.py)."""

    keys: QueueKeys
    max_stalled: int
    limit: int
    bound_ms: int = 0
    listed: int = 0
    brief: bool = False
    tracked: bool = False

    def args(self, executor: Executor) -> list[object]:
        """Return the call as `executor` sends it."""
        return executor.args(
            self.keys, self.max_stalled, self.limit, self.bound_ms, self.listed, brief=self.brief
        )

    @property
    def probes(self) -> bool:
        """Tell whether the call goes out as a probe first (see rounds.sweep_round): brief,
        bounded by its own clock, and with a budget and a limit the verb takes (any other is
        the script's to judge and refuse)."""
        return (
            self.brief
            and self.bound_ms == 0
            and 0 < self.max_stalled <= LLONG_MAX
            and 0 < self.limit <= LLONG_MAX
        )

    def probe_args(self) -> list[object]:
        """Return the call's probe: its active set's first lease and deadline."""
        return ["ZRANGE", self.keys.active, 0, 0, "WITHSCORES"]


@dataclass(frozen=True, slots=True)
class SweepReply:
    """What one call did: recovered ids (exempt included) and dead ids in selection order, the
    recovered ids whose lease predates the server's run_id, and ids removed that had no row.
    A call that listed only its first ids (Call.listed) carries the whole counts in `counts`."""

    recovered: tuple[bytes, ...] = ()
    dead: tuple[bytes, ...] = ()
    exempt: tuple[bytes, ...] = ()
    ghosts: int = 0
    # recovered, dead, exempt when the lists are cut.
    counts: tuple[int, int, int] | None = None
    # The ghosts among the first `listed` ids the call took.
    ghost_ids: tuple[bytes, ...] = ()

    @property
    def sizes(self) -> tuple[int, int, int]:
        """Return how many were recovered, dead and exempt, listed or not."""
        if self.counts is not None:
            return self.counts
        return len(self.recovered), len(self.dead), len(self.exempt)

    @property
    def taken(self) -> int:
        """Leases the call removed from active."""
        if (counts := self.counts) is not None:
            return counts[0] + counts[1] + self.ghosts
        return len(self.recovered) + len(self.dead) + self.ghosts

    @classmethod
    def parse(cls, raw: object) -> SweepReply:
        # Most calls: nothing was due.
        if raw == NOTHING_RAW:
            return NOTHING
        if not (isinstance(raw, list) and len(raw) in (5, 8) and isinstance(raw[3], int)):
            raise ValueError(f"the sweep replied {raw!r}, not its five or eight parts")
        recovered, dead, exempt, ghosts, ghost_ids, *counts = raw
        whole = (counts[0], counts[1], counts[2]) if counts else None
        return cls(tuple(recovered), tuple(dead), tuple(exempt), ghosts, whole, tuple(ghost_ids))


NOTHING = SweepReply()
# The sweep's reply when it took nothing.
NOTHING_RAW = [[], [], [], 0, []]


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 0.2 µs a field to make
class Depths:
    """A queue's numbers right after its sweep, on the server's clock (`now_ms`). A brief
    reply (a call that found nothing due, Call.brief) says only the clock and the earliest
    deadline: its run_id and set sizes are None, nothing is expired. Never changed once made."""

    run_id: bytes | None
    now_ms: int
    # Leases due by the call's bound.
    expired: int
    active: int | None
    pending: int | None
    dead: int | None
    # The metrics:failed count; None when it is not an integer.
    failed: int | None
    # The earliest deadline left in active, due or not; None: none.
    earliest_ms: float | None
    # How long the call ran on the server, in microseconds.
    server_us: int = 0
    # How long after its deadline the call took its oldest lease.
    delay_ms: float | None = None

    @property
    def oldest_expired_ms(self) -> float | None:
        """Return the deadline of the oldest lease due now; None when none is."""
        earliest = self.earliest_ms
        return earliest if earliest is not None and earliest <= self.now_ms else None

    @property
    def oldest_expired_age_s(self) -> float:
        """Return how long the oldest expired lease has been overdue; a -inf deadline counts from
        1970."""
        oldest = self.oldest_expired_ms
        if oldest is None:
            return 0.0
        return (self.now_ms - max(oldest, 0.0)) / 1000

    @property
    def jobs(self) -> tuple[int, int, int] | None:
        """Return the active, pending and dead sets' sizes; None when the reply was brief."""
        if self.active is None or self.pending is None or self.dead is None:
            return None
        return self.active, self.pending, self.dead

    @classmethod
    def brief(cls, now_ms: int, earliest: object) -> Depths:
        """Return a brief reply's: the server's clock and the earliest deadline, nothing expired."""
        return cls(None, now_ms, 0, None, None, None, None, _score(earliest))

    @classmethod
    def parse(cls, raw: object) -> Depths | None:
        if not (isinstance(raw, list) and len(raw) == 10):
            return None
        run_id, now_ms, expired, active, pending, dead, failed, earliest, server_us, delay = raw
        if not (
            isinstance(expired, int)
            and isinstance(active, int)
            and isinstance(pending, int)
            and isinstance(dead, int)
        ):
            # A key of the wrong type: the sweep's own error says which.
            return None
        return cls(
            run_id,
            now_ms,
            expired,
            active,
            pending,
            dead,
            string2ll(failed) if isinstance(failed, bytes) else 0,
            _score(earliest),
            server_us,
            _score(delay),
        )


def _score(raw: object) -> float | None:
    """Return a number the sweep writes as text (a score as the server gives it: -inf, inf too),
    or a score RESP3 gives as a double."""
    if isinstance(raw, float):
        return raw
    return float(raw) if isinstance(raw, bytes) else None


# A brief reply's depths for an empty active set: nothing to compare, the clock unread.
EMPTY = Depths.brief(0, None)


@dataclass(slots=True)  # not frozen, as Depths: one is made per call
class CallResult:
    """A call's reply or its error, and the queue's numbers after it; `untracked`: the server
    refused the CLIENT CACHING yes the call was sent behind. Never changed once made."""

    call: Call
    reply: SweepReply | SweepError
    depths: Depths | None = None
    untracked: bool = False

    @property
    def redirect(self) -> Reason | None:
        """MOVED: a Cluster node serves the queue's slot elsewhere; MIGRATING: it holds the call
        while the slot migrates (TRYAGAIN, ASK). Either way the call never ran, wrote nothing."""
        reply = self.reply
        return reply.reason if isinstance(reply, SweepError) and reply.reason in REDIRECTS else None

    @property
    def expired_left(self) -> int | None:
        return None if self.depths is None else self.depths.expired

    @property
    def due_next_ms(self) -> float | None:
        """Return when the queue falls due next (the server's clock, ms), after a call that
        succeeded and left nothing due; None after any other (a backlog's drain, a refusal)."""
        depths = self.depths
        if not isinstance(self.reply, SweepReply) or depths is None or depths.expired:
            return None
        return depths.earliest_ms

    def seconds(self, round_trip_s: float) -> float:
        """Return how long the call took on the server; its round trip where the server did not
        say."""
        if self.depths is None or self.depths.server_us <= 0:
            return round_trip_s
        return self.depths.server_us / 1_000_000


def keeps_draining(result: CallResult) -> bool:
    """Tell whether a call took leases and left some due: the queue's next call has work."""
    return (
        isinstance(result.reply, SweepReply)
        and result.reply.taken > 0
        and bool(result.expired_left)
    )


def result_of(call: Call, raw: object) -> CallResult:
    """Return a call's raw reply (or the error it got) as its result."""
    if isinstance(raw, BaseException):
        return CallResult(call, SweepError.of(raw))
    if not (isinstance(raw, list) and len(raw) == 2):
        return CallResult(call, SweepError.of(ValueError(f"the sweep replied {raw!r}")))
    # brief: nothing was due, {now, earliest deadline}.
    if isinstance(raw[0], int):
        return CallResult(call, NOTHING, Depths.brief(*raw))
    verdict, stats = raw
    depths = Depths.parse(stats)
    if isinstance(verdict, BaseException):
        return CallResult(call, SweepError.of(verdict), depths)
    try:
        return CallResult(call, SweepReply.parse(verdict), depths)
    except ValueError as exc:
        return CallResult(call, SweepError.of(exc), depths)


def probed(call: Call, raw: object, clock_ms: int | None) -> CallResult | None:
    """Return what a probe says of its call where that is the verb's whole answer: nothing due,
    as a brief reply says it. An empty active set has nothing due on any clock; a first deadline
    after `clock_ms` (the server's clock, read after the probe) was not due when probed. None
    where the call must go as its script: a lease due, no clock to judge by, an error reply."""
    if raw == []:
        return CallResult(call, NOTHING, EMPTY)
    if not isinstance(raw, list) or clock_ms is None:
        return None
    if len(raw) == 1 and isinstance(raw[0], list):  # RESP3: [[id, score]]
        raw = raw[0]
    deadline = _score(raw[1]) if len(raw) == 2 else None
    if deadline is None or deadline <= clock_ms:
        return None
    return CallResult(call, NOTHING, Depths.brief(clock_ms, deadline))


def named(result: CallResult, executor: Executor, user: str) -> CallResult:
    """Return an ACL refusal of the sweep, or inside it, says which command `user` lacks and how to
    grant it."""
    error = result.reply
    if not (isinstance(error, SweepError) and error.reason is Reason.NOPERM):
        return result
    command = refused_command(error.message, executor.script.source)
    message = may_not_run(user, command, error.message, why=", which the sweep calls")
    return CallResult(result.call, SweepError(Reason.NOPERM, message), result.depths)
