"""The audit's verdict on one job id, a pure function on what one atomic read saw of it: its row's
state and whether each of the three sets holds it (docs/commands.md#what-each-class-means)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from sweeperd.constants import ACTIVE, DEAD, PENDING

# A state names the set holding it.
STATES = (ACTIVE.encode(), PENDING.encode(), DEAD.encode())


class AuditClass(StrEnum):
    """What is wrong with one job id: a fixed vocabulary (metric labels, --json keys)."""

    STRANDED = "stranded"
    UNREACHABLE_DEADLINE = "unreachable_deadline"
    TWO_SETS = "two_sets"
    STATE_MISMATCH = "state_mismatch"
    ROWLESS = "rowless"
    SETLESS = "setless"


CLASSES = tuple(AuditClass)

MEANING = {
    AuditClass.STRANDED: (
        "row in state active that no set holds: no sweep will ever recover it",
        "sweeperd audit --repair puts it back in active as an expired lease, and the counted "
        "verb judges it (counted, or exempt by its lease_epoch)",
    ),
    AuditClass.UNREACHABLE_DEADLINE: (
        "a lease due further out than --max-lease (a deadline written in seconds or "
        "microseconds, or +inf): nobody will recover it in time",
        "find the client that wrote it (its deadline must be ms since the epoch); ZADD the id "
        "with a right deadline, or with 0 to have it swept now",
    ),
    AuditClass.TWO_SETS: (
        "an id in more than one of active, pending and dead: the job may run twice",
        "decide which set is right from the row (state, attempts, last_error) and ZREM it "
        "from the others",
    ),
    AuditClass.STATE_MISMATCH: (
        "a row whose state is not the state of the set that holds it, a state sweeperd does "
        "not know (or none), or a row that is not a hash",
        "set the row's state to its set's (HSET <prefix>job:<id> state ...), or move the id to "
        "the set its state names; a row that is not a hash makes the verb refuse its queue",
    ),
    AuditClass.ROWLESS: (
        "an id in pending or dead with no row: a worker that claims it finds no job",
        "ZREM it from the set, or restore the row from where the job came from; a server "
        "that evicts keys (maxmemory-policy allkeys-*) is the usual cause",
    ),
    AuditClass.SETLESS: (
        "a row in state pending or dead that no set holds: nobody will claim it, nor see it "
        "dead-lettered",
        "ZADD the id to the set its state names (score 0), or delete the row if the job is "
        "finished",
    ),
}


@dataclass(frozen=True)
class Observation:
    """What one atomic read saw of a job id: its row (`row_type` "none" when there is none, its
    `state` None when missing or not a hash) and each set's score for it (None: not in it)."""

    job_id: bytes
    row_type: str
    state: bytes | None
    active: float | None
    pending: float | None
    dead: float | None

    @property
    def has_row(self) -> bool:
        return self.row_type != "none"

    def held_by(self) -> tuple[bytes, ...]:
        """Return the sets holding the id, as the states that name them."""
        scores = (self.active, self.pending, self.dead)
        return tuple(
            state for state, score in zip(STATES, scores, strict=True) if score is not None
        )


def is_unreachable(deadline: float, now_ms: int, max_lease_ms: int) -> bool:
    """Tell whether a lease deadline is further out than the longest lease: +inf, or past now + max
    lease."""
    return deadline == math.inf or deadline > now_ms + max_lease_ms


def classify(seen: Observation, now_ms: int, max_lease_ms: int) -> AuditClass | None:
    """Return the class of what is wrong with one id, on the server's clock `now_ms`; None when its
    row and its sets agree (an id in active alone with no row is a ghost: the verb removes it)."""
    held = seen.held_by()
    if len(held) > 1:
        return AuditClass.TWO_SETS
    far = seen.active is not None and is_unreachable(seen.active, now_ms, max_lease_ms)
    if not seen.has_row:
        if held and held[0] != STATES[0]:
            return AuditClass.ROWLESS
        return AuditClass.UNREACHABLE_DEADLINE if far else None
    if not held:
        if seen.state == STATES[0]:
            return AuditClass.STRANDED
        return AuditClass.SETLESS if seen.state in STATES else AuditClass.STATE_MISMATCH
    if seen.row_type != "hash" or seen.state != held[0]:
        return AuditClass.STATE_MISMATCH
    return AuditClass.UNREACHABLE_DEADLINE if far else None
