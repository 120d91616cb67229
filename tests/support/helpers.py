"""Test helpers: write leases and rows, read the whole keyspace back."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import cast

import redis

from sweeperd.keyspace import QueueKeys
from sweeperd.ownership import owner
from sweeperd.server.calls import connect, disconnect, send, typed
from sweeperd.verb.acl import INVALIDATION_CHANNEL
from tests.support.invoke import sweeperd

PAST_MS = 1_000_000  # a deadline long gone: 1970, a thousand seconds in
FUTURE_OFFSET_MS = 3_600_000  # an hour ahead: not expired during any test
# max_stalled or limit values the verb refuses, the module and the Lua port alike
BAD_NUMBERS = ["0", "-1", "x", "+1", "01", "-0", " 1", "", "1.0", "9223372036854775808"]
# The user property a differential test records its count of Hypothesis examples in (conftest.py
# sums it over the run for the terminal summary).
EXAMPLES = "differential_examples"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def server_ms(r: redis.Redis) -> int:
    """The server's clock (TIME), in milliseconds."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def tracked_keys(r: redis.Redis) -> int:
    """The keys the server tracks for some client now (INFO stats)."""
    return int(r.info("stats").get("tracking_total_keys", 0))


@contextmanager
def invalidations(port: int) -> Iterator[tuple[redis.Connection, int]]:
    """A RESP2 connection subscribed to the invalidation channel, and its id: the REDIRECT of
    a connection that tracks (a push in RESP3 is kept by redis-py's parser, never seen)."""
    sub: redis.Connection = typed(redis.Connection)(port=port, protocol=2)
    connect(sub)
    try:
        send(sub, "CLIENT", "ID")
        own_id = sub.read_response()
        send(sub, "SUBSCRIBE", INVALIDATION_CHANNEL)
        sub.read_response()
        assert isinstance(own_id, int)
        yield sub, own_id
    finally:
        disconnect(sub)


def run_id(r: redis.Redis) -> bytes:
    """The server's run_id, the lease epoch."""
    info = r.execute_command("INFO", "server")  # type: ignore[no-untyped-call]
    value = info["run_id"] if isinstance(info, dict) else None
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def dump_all(r: redis.Redis) -> dict[bytes, bytes]:
    """Every key's DUMP: equal dumps mean a byte-for-byte equal keyspace."""
    dumps: dict[bytes, bytes] = {}
    for key in r.scan_iter(count=1000):
        dumped = r.dump(key)
        assert isinstance(dumped, bytes)
        dumps[key] = dumped
    return dumps


def lease(
    r: redis.Redis, keys: QueueKeys, job_id: bytes, deadline_ms: int = PAST_MS, **row: object
) -> None:
    """An active lease with its row, the row first: a daemon sweeping between the two then
    finds a row with no lease, where the other way round it would see an id without a row and
    remove it as a ghost. No row fields means a ghost. `r` may be a caller's pipeline."""
    if row:
        r.hset(keys.job(job_id), mapping=row)  # type: ignore[arg-type]
    r.zadd(keys.active, {job_id: deadline_ms})


def hash_of(r: redis.Redis, key: str | bytes) -> dict[bytes, bytes]:
    """A hash's fields and values, bytes for bytes."""
    return cast(dict[bytes, bytes], r.hgetall(key))


def members(r: redis.Redis, key: str) -> list[bytes]:
    """A sorted set's members in score order."""
    return cast(list[bytes], r.zrange(key, 0, -1))


def owned_by(member: str, queues: Iterable[str], members: Collection[str]) -> list[str]:
    """The queues, in their order, that `member` owns among `members` (nothing if not one)."""
    if member not in members:
        return []
    return [queue for queue in queues if owner(queue, members) == member]


def acl_line(*args: str, user: str = "sweeperd", password: str = "<password>") -> str:
    """The ACL SETUSER line `sweeperd acl --user USER ARGS` prints, `password` in it."""
    ran = sweeperd("acl", "--user", user, *args)
    assert ran.code == 0, ran.err
    [line] = ran.out.splitlines()
    return line.replace(" ><password> ", f" >{password} ", 1)
