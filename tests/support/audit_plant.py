"""Keyspaces for the audit's tests: a queue planted with every class of finding beside clean
jobs, clean queues, and an independent model of what the audit must find."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import FUTURE_OFFSET_MS, PAST_MS, now_ms

MICROSECONDS_DEADLINE = 1_767_225_660_000_000.0  # a deadline written in microseconds: year 57969
DAY_MS = 86_400_000
Client = redis.Redis | redis.RedisCluster  # a Cluster's client routes each queue's keys


@dataclass
class Job:
    """One id as planted: its row (None: none; a str: a key of that other type) and the sets
    holding it, with the score in each."""

    job_id: str
    row: Mapping[str, str] | str | None = None
    sets: dict[str, float] = field(default_factory=dict)

    def write(self, r: Client, keys: QueueKeys) -> None:
        """The row, then the sets."""
        if isinstance(self.row, str):
            r.set(keys.job(self.job_id), self.row)
        elif self.row is not None:
            r.hset(keys.job(self.job_id), mapping=dict(self.row))  # type: ignore[arg-type]
        for name, score in self.sets.items():
            r.zadd(keys.prefix + name, {self.job_id: score})


def expected_class(job: Job, now: int, max_lease_ms: int = DAY_MS) -> str | None:
    """What the audit must say of `job`, as docs/commands.md's table says it, written apart from
    sweeperd.audit.classes: the first row of the table that applies."""
    names = set(job.sets)
    active = job.sets.get("active")
    far = active is not None and active > now + max_lease_ms
    state = job.row.get("state") if isinstance(job.row, Mapping) else None
    rules = [
        ("two_sets", len(names) > 1),
        ("rowless", job.row is None and bool(names & {"pending", "dead"})),
        ("unreachable_deadline", job.row is None and far),
        (None, job.row is None),
        ("stranded", not names and state == "active"),
        ("setless", not names and state in ("pending", "dead")),
        ("state_mismatch", not names or state != next(iter(names))),
        ("unreachable_deadline", far),
    ]
    return next((name for name, applies in rules if applies), None)


def planted() -> list[Job]:
    """Every class, each twice or more where its forms differ, beside jobs that are right."""
    now = now_ms()
    future = now + FUTURE_OFFSET_MS
    return [
        Job("leased", {"state": "active", "attempts": "1"}, {"active": future}),
        Job("expired", {"state": "active", "attempts": "1"}, {"active": PAST_MS}),
        Job("waiting", {"state": "pending"}, {"pending": 0}),
        Job("buried", {"state": "dead"}, {"dead": 0}),
        Job("ghost", None, {"active": PAST_MS}),
        Job("stranded-1", {"state": "active", "attempts": "1"}),
        Job("stranded-2", {"state": "active", "attempts": "2", "lease_epoch": "earlier"}),
        Job("micros", {"state": "active"}, {"active": MICROSECONDS_DEADLINE}),
        Job("forever", {"state": "active"}, {"active": float("inf")}),
        Job("ghost-forever", None, {"active": float("inf")}),
        Job("twice", {"state": "pending"}, {"pending": 0, "dead": 0}),
        Job("thrice", {"state": "active"}, {"active": future, "pending": 0, "dead": 0}),
        Job("pending-in-dead", {"state": "pending"}, {"dead": 0}),
        Job("unknown-state", {"state": "completed"}, {"pending": 0}),
        Job("no-state", {"attempts": "1"}, {"active": future}),
        Job("not-a-hash", "a string", {"pending": 0}),
        Job("lost-pending", None, {"pending": 0}),
        Job("lost-dead", None, {"dead": 0}),
        Job("setless-pending", {"state": "pending"}),
        Job("setless-dead", {"state": "dead", "last_error": "boom"}),
    ]


def clean() -> list[Job]:
    """A queue where every job is accounted for."""
    future = now_ms() + FUTURE_OFFSET_MS
    return [
        Job("a", {"state": "active", "attempts": "1"}, {"active": future}),
        Job("b", {"state": "pending"}, {"pending": 0}),
        Job("c", {"state": "dead"}, {"dead": 0}),
    ]


def plant(r: Client, keys: QueueKeys, jobs: list[Job]) -> dict[str, list[str]]:
    """The jobs written; what the model says the audit finds, class -> ids in byte order."""
    now = now_ms()
    found: dict[str, list[str]] = {}
    for job in jobs:
        job.write(r, keys)
        verdict = expected_class(job, now)
        if verdict is not None:
            found.setdefault(verdict, []).append(job.job_id)
    return {c: sorted(ids, key=str.encode) for c, ids in found.items()}
