"""What the demo and the README tour write into their throwaway server: leases and waiting jobs
as EchoMQ leaves them (docs/keyspace.md), and how many of each queue's leases fall due."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import redis
from redis.client import Pipeline

from sweeperd.constants import LEASE_EPOCH
from sweeperd.keyspace import QueueKeys
from sweeperd.server.calls import command
from sweeperd.server.serverinfo import ServerInfo

# The demo: three queues, every kind of lease the sweep knows, a mass stall.
DEMO_QUEUES = ("emails", "reports", "billing")
# `reports` holds the BACKLOG of expired leases a dead worker fleet leaves; `billing` the BILLING
# leases taken as the demo starts watching, due two to six seconds on; a lease of ANOTHER_RUN's
# epoch was granted before a restart; DEMO_DUE is the leases each queue has due; RESTART_LEASES
# `emails` leases are taken just before the demo restarts the server.
BACKLOG = 50_000
BILLING = 5
DEMO_MAX_STALLED = 3
ANOTHER_RUN = "a-run-before-a-restart"
DEMO_DUE = {"emails": 5, "reports": BACKLOG, "billing": BILLING}
RESTART_LEASES = 3

# The README tour: its captures were taken on exactly this.
TOUR_QUEUES = ("emails", "reports")
# `reports` holds the FLEET expired leases of a worker fleet that died; the `emails` lease still
# running has RUNNING_MS (an hour) to go.
FLEET = 2_000
RUNNING_MS = 3_600_000
MINUTE_MS = 60_000

# Many leases in a few calls, written by the server: a pipeline of a hundred thousand commands
# takes Python seconds to write. Standalone only (the rows' keys are not declared).
# KEYS[1]  active
# ARGV[1]  the rows' key prefix (<prefix>job:); ARGV[2], ARGV[3] the first and last n
# ARGV[4]  lease n's deadline is ARGV[4] - n ms; ARGV[5] the ids, a string.format with %d
# ARGV[6]  stalled cycle: 0 for no `stalled` field, else lease n has stalled n % cycle
# ARGV[7…] field, value pairs every row has besides state active
MANY_LEASES = """
local prefix, deadline = ARGV[1], tonumber(ARGV[4])
local first, last, cycle = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[6])
for n = first, last do
  local id = string.format(ARGV[5], n)
  redis.call('ZADD', KEYS[1], deadline - n, id)
  redis.call('HSET', prefix .. id, 'state', 'active', unpack(ARGV, 7))
  if cycle > 0 then redis.call('HSET', prefix .. id, 'stalled', n % cycle) end
end
"""
# A few milliseconds of the server's time each on a quiet machine; a seeding call's timeout on a
# loaded machine, longer than any sweep waits.
LEASES_PER_CALL = 5_000
SEED_TIMEOUT_S = 60.0


def lease(pipe: Pipeline, keys: QueueKeys, job_id: str, deadline_ms: int, **row: str) -> None:
    """Write a job held by a worker until `deadline_ms` (server clock): its id in `active`, and its
    row (state active and `row`) unless none is given: an id with no row, a ghost."""
    pipe.zadd(keys.active, {job_id: deadline_ms})
    if row:
        fields = {"state": "active", **row}
        pipe.hset(keys.job(job_id), items=[x for pair in fields.items() for x in pair])


def many_leases(
    pipe: Pipeline,
    keys: QueueKeys,
    ids: str,
    count: int,
    first_ms: int,
    row: Mapping[str, str],
    stalled_cycle: int = 0,
) -> None:
    """`count` leases, LEASES_PER_CALL a call (MANY_LEASES), ids `ids % n`, deadlines a
    millisecond apart from `first_ms` down, each row `row` (and `stalled` n % `stalled_cycle`,
    when not 0)."""
    fields = [x for pair in row.items() for x in pair]
    prefix = keys.job("").decode()
    for first in range(0, count, LEASES_PER_CALL):
        last = min(first + LEASES_PER_CALL, count) - 1
        args: list[str | int] = [prefix, first, last, first_ms, ids, stalled_cycle, *fields]
        pipe.eval(MANY_LEASES, 1, keys.active, *args)


def waiting(pipe: Pipeline, keys: QueueKeys, job_id: str, since_ms: int) -> None:
    """Write a job in `pending`, claimed by nobody yet."""
    pipe.zadd(keys.pending, {job_id: since_ms})
    pipe.hset(keys.job(job_id), items=["state", "pending", "attempts", "0"])


def seed_demo(client: redis.Redis, run_id: bytes, now_ms: int) -> None:
    """Write the demo's expired leases: exempt, counted, at the budget, a ghost; a mass stall."""
    emails, reports = QueueKeys("emails"), QueueKeys("reports")
    epoch, past = run_id.decode(), now_ms - MINUTE_MS
    pipe = client.pipeline(transaction=False)
    # welcome-1 and -2 are exempt (another run's leases), digest-1 counted (stalled 1), poison-1
    # dead at 3, ghost-1 has no row (removed from active, listed nowhere).
    lease(pipe, emails, "welcome-1", past, **{LEASE_EPOCH: ANOTHER_RUN})
    lease(pipe, emails, "welcome-2", past, **{LEASE_EPOCH: ANOTHER_RUN})
    lease(pipe, emails, "digest-1", past, **{LEASE_EPOCH: epoch})
    lease(pipe, emails, "poison-1", past, stalled="2", **{LEASE_EPOCH: epoch})
    lease(pipe, emails, "ghost-1", past)
    # drained call after call, each about 2 ms: stalled 0 or 1 before, none at the budget
    many_leases(pipe, reports, "report-%05d", BACKLOG, past, {}, stalled_cycle=2)
    pipe.execute()


def lease_billing(client: redis.Redis, info: ServerInfo) -> None:
    """BILLING leases of `billing` taken now, falling due two to six seconds on: swept while
    you watch, and never before the demo's wait has lasted six seconds."""
    keys, pipe = QueueKeys("billing"), client.pipeline(transaction=False)
    for n in range(BILLING):
        due = info.time_ms + 2_000 + 1_000 * n
        lease(pipe, keys, f"invoice-{n}", due, **{LEASE_EPOCH: info.run_id.decode()})
    pipe.execute()


def lease_then_shut_down(client: redis.Redis, info: ServerInfo) -> None:
    """RESTART_LEASES leases of `emails` taken on this run, due half a second on, and the
    server's SHUTDOWN, in one round trip: no sweep can take them before the server stops (it
    runs one client's commands in a row), so they expire on the next run, from an earlier one."""
    keys = QueueKeys("emails")
    pipe = client.pipeline(transaction=False)
    for n in range(RESTART_LEASES):
        row = {"attempts": "1", LEASE_EPOCH: info.run_id.decode()}
        lease(pipe, keys, f"restart-{n}", info.time_ms + 500, **row)
    command(pipe, "SHUTDOWN")
    # Closed by the server: it has shut down.
    with contextlib.suppress(redis.ConnectionError):
        pipe.execute()


def seed_tour(client: redis.Redis, run_id: bytes, now_ms: int) -> None:
    """Write the README tour's queues, as its captures show them: `emails` with three leases
    expired a minute apart, one at its second stall, one still running and a job waiting;
    `reports` with the FLEET expired leases of a worker fleet that died."""
    emails, reports = (QueueKeys(q) for q in TOUR_QUEUES)
    held = {"attempts": "1", LEASE_EPOCH: run_id.decode()}
    pipe = client.pipeline(transaction=False)
    # welcome-3 the oldest, three minutes overdue.
    for n in (1, 2, 3):
        lease(pipe, emails, f"welcome-{n}", now_ms - n * MINUTE_MS, **held)
    lease(pipe, emails, "poison-1", now_ms - MINUTE_MS // 2, **held, stalled="2")
    lease(pipe, emails, "digest-1", now_ms + RUNNING_MS, **held)
    waiting(pipe, emails, "welcome-4", now_ms)
    many_leases(pipe, reports, "report-%04d", FLEET, now_ms - 2 * MINUTE_MS, held)
    pipe.execute()
