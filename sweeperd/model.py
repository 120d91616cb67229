"""The verdict of EMQ.STALLED.CHECK (docs/keyspace.md#what-a-sweep-does) as a pure function on
plain data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from sweeperd.constants import LEASE_EPOCH, LLONG_MAX, LLONG_MIN

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_AN_INTEGER = "ERR hash value is not an integer"
OVERFLOW = "ERR increment or decrement would overflow"
ZSET_OR_NONE = frozenset({"zset", "none"})
HASH_OR_NONE = frozenset({"hash", "none"})


class NotAHash:
    """A job row that exists but is not a hash (its Redis type is kept for messages)."""

    def __init__(self, kind: str = "string") -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"NotAHash({self.kind!r})"


Row = Mapping[bytes, bytes] | NotAHash | None


class Verdict(StrEnum):
    GHOST = "ghost"
    EXEMPT = "exempt"
    RECOVERED = "recovered"
    DEAD = "dead"


@dataclass(frozen=True)
class Lease:
    """One selected member of `active` and its row (None: no row, a ghost)."""

    job_id: bytes
    row: Row


@dataclass(frozen=True)
class Judgement:
    """What the sweep does with one lease; `stalled` is the value it writes, if any."""

    job_id: bytes
    verdict: Verdict
    stalled: int | None = None


@dataclass(frozen=True)
class Refusal:
    """The error reply of a refused call; a refused call writes nothing."""

    message: str


@dataclass(frozen=True)
class Plan:
    """Every judgement of one call, in selection order."""

    judgements: tuple[Judgement, ...] = ()

    def ids(self, *verdicts: Verdict) -> list[bytes]:
        return [j.job_id for j in self.judgements if j.verdict in verdicts]

    @property
    def recovered(self) -> list[bytes]:
        """Return the reply's first array: exempt and counted recoveries, in selection order."""
        return self.ids(Verdict.EXEMPT, Verdict.RECOVERED)

    @property
    def dead(self) -> list[bytes]:
        return self.ids(Verdict.DEAD)

    @property
    def exempt(self) -> list[bytes]:
        return self.ids(Verdict.EXEMPT)

    @property
    def ghosts(self) -> list[bytes]:
        return self.ids(Verdict.GHOST)


@dataclass(frozen=True)
class Snapshot:
    """What the verb reads: key types, the selected leases and the failed-count field."""

    leases: tuple[Lease, ...] = ()
    # active/pending/dead/metrics.
    key_types: Mapping[str, str] = field(default_factory=dict)
    metrics_count: bytes | None = None

    def type_of(self, name: str) -> str:
        return self.key_types.get(name, "none")


def string2ll(raw: bytes) -> int | None:
    """Redis' strict integer parse (HINCRBY's): no sign but '-', no spaces, no leading zero."""
    if not raw or len(raw) >= 21:
        return None
    digits = raw[1:] if raw.startswith(b"-") else raw
    if not digits.isdigit():
        return None
    if digits.startswith(b"0") and raw != b"0":
        return None
    value = int(raw)
    return value if LLONG_MIN <= value <= LLONG_MAX else None


def reply_safe(text: bytes) -> str:
    """Return an error text as a client reads it: cut at a NUL (the server builds it as a C string),
    CR and LF turned into spaces."""
    text = text.split(b"\0", 1)[0]
    return text.decode("utf-8", "replace").replace("\r", " ").replace("\n", " ")


def next_stalled(raw: bytes | None) -> int | Refusal:
    """Return the stall count after one more stall, by HINCRBY's rule (missing is 0)."""
    if raw is None:
        return 1
    value = string2ll(raw)
    if value is None:
        return Refusal(NOT_AN_INTEGER)
    if value == LLONG_MAX:
        return Refusal(OVERFLOW)
    return value + 1


def judge_lease(lease: Lease, epoch: bytes, max_stalled: int) -> Judgement | Refusal:
    """Return one member's verdict, or the refusal of the whole call."""
    row = lease.row
    if row is None:
        return Judgement(lease.job_id, Verdict.GHOST)
    if isinstance(row, NotAHash):
        return Refusal(reply_safe(b"WRONGTYPE job " + lease.job_id + b" is not a hash"))
    if b"group" in row:
        return Refusal(reply_safe(b"EMQLANE job " + lease.job_id + b" is a lane row"))
    lease_epoch = row.get(LEASE_EPOCH.encode())
    if lease_epoch is not None and lease_epoch != epoch:
        return Judgement(lease.job_id, Verdict.EXEMPT)
    stalled = next_stalled(row.get(b"stalled"))
    if isinstance(stalled, Refusal):
        return stalled
    verdict = Verdict.DEAD if stalled >= max_stalled else Verdict.RECOVERED
    return Judgement(lease.job_id, verdict, stalled)


def check_targets(plan: Plan, snapshot: Snapshot) -> Refusal | None:
    """Return the keys the write pass will touch must take the writes: checked before any write."""
    if plan.recovered and snapshot.type_of("pending") not in ZSET_OR_NONE:
        return Refusal(WRONGTYPE)
    if not plan.dead:
        return None
    if snapshot.type_of("dead") not in ZSET_OR_NONE:
        return Refusal(WRONGTYPE)
    if snapshot.type_of("metrics") not in HASH_OR_NONE:
        return Refusal(WRONGTYPE)
    count = 0 if snapshot.metrics_count is None else string2ll(snapshot.metrics_count)
    if count is None:
        return Refusal(NOT_AN_INTEGER)
    if count > LLONG_MAX - len(plan.dead):
        return Refusal(OVERFLOW)
    return None


def decide(snapshot: Snapshot, epoch: bytes, max_stalled: int) -> Plan | Refusal:
    """Return every member judged before anything is written: the whole plan, or one refusal."""
    if snapshot.type_of("active") not in ZSET_OR_NONE:
        return Refusal(WRONGTYPE)
    judgements: list[Judgement] = []
    for lease in snapshot.leases:
        judged = judge_lease(lease, epoch, max_stalled)
        if isinstance(judged, Refusal):
            return judged
        judgements.append(judged)
    plan = Plan(tuple(judgements))
    return check_targets(plan, snapshot) or plan
