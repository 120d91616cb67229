"""A simulated keyspace for the oracle: read from a server, judged by the model, written back."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from sweeperd import model
from sweeperd.constants import METRICS_FAILED_FIELD
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import server_text

Reply = tuple[tuple[bytes, ...], tuple[bytes, ...]] | str  # (recovered, dead), or an error text


ARITY = "ERR wrong number of arguments for 'emq.stalled.check' command"


def parse_positive(name: str, raw: bytes) -> int | model.Refusal:
    """`max_stalled` and `limit`: a positive 64-bit integer, or a refusal naming the argument."""
    value = model.string2ll(raw)
    if value is None or value < 1:
        return model.Refusal(f"ERR {name} must be a positive integer")
    return value


def parse_arguments(argv: Sequence[bytes]) -> tuple[int, int] | model.Refusal:
    """The six arguments after the verb's name: arity, then max_stalled, then limit."""
    if len(argv) != 6:
        return model.Refusal(ARITY)
    max_stalled = parse_positive("max_stalled", argv[4])
    if isinstance(max_stalled, model.Refusal):
        return max_stalled
    limit = parse_positive("limit", argv[5])
    if isinstance(limit, model.Refusal):
        return limit
    return max_stalled, limit


def select(active: Iterable[tuple[bytes, float]], now_ms: int, limit: int) -> list[bytes]:
    """ZRANGEBYSCORE active -inf now LIMIT 0 limit: by score, then by member bytes."""
    due = sorted((score, member) for member, score in active if score <= now_ms)
    return [member for _, member in due[:limit]]


Write = tuple[bytes, ...]


def writes(plan: model.Plan, keys: QueueKeys) -> list[Write]:
    """The write pass of a plan, as the commands it amounts to, in selection order."""
    active, pending, dead = (k.encode() for k in (keys.active, keys.pending, keys.dead))
    ops: list[Write] = []
    for j in plan.judgements:
        row = keys.job(j.job_id)
        ops.append((b"ZREM", active, j.job_id))
        if j.verdict is model.Verdict.EXEMPT:
            ops.append((b"HSET", row, b"state", b"pending"))
            ops.append((b"ZADD", pending, b"0", j.job_id))
        elif j.verdict is model.Verdict.RECOVERED:
            ops.append((b"HSET", row, b"stalled", str(j.stalled).encode(), b"state", b"pending"))
            ops.append((b"ZADD", pending, b"0", j.job_id))
        elif j.verdict is model.Verdict.DEAD:
            ops.append(
                (
                    b"HSET",
                    row,
                    b"stalled",
                    str(j.stalled).encode(),
                    b"state",
                    b"dead",
                    b"last_error",
                    b"stalled",
                )
            )
            ops.append((b"ZADD", dead, b"0", j.job_id))
            ops.append(
                (b"HINCRBY", keys.metrics_failed.encode(), METRICS_FAILED_FIELD.encode(), b"1")
            )
    return ops


@dataclass
class Keyspace:
    """Every key of a server, by type, as plain values (zset scores as floats)."""

    zsets: dict[bytes, dict[bytes, float]] = field(default_factory=dict)
    hashes: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)
    strings: dict[bytes, bytes] = field(default_factory=dict)
    lists: dict[bytes, list[bytes]] = field(default_factory=dict)
    sets: dict[bytes, set[bytes]] = field(default_factory=dict)

    def type_of(self, key: bytes) -> str:
        held: tuple[tuple[str, Container[bytes]], ...] = (
            ("zset", self.zsets),
            ("hash", self.hashes),
            ("string", self.strings),
            ("list", self.lists),
            ("set", self.sets),
        )
        return next((kind for kind, keys in held if key in keys), "none")

    def copy(self) -> Keyspace:
        return Keyspace(
            {k: dict(v) for k, v in self.zsets.items()},
            {k: dict(v) for k, v in self.hashes.items()},
            dict(self.strings),
            {k: list(v) for k, v in self.lists.items()},
            {k: set(v) for k, v in self.sets.items()},
        )

    def row(self, key: bytes) -> model.Row:
        """A job row as the model sees it: a hash's fields, NotAHash, or None (no row)."""
        kind = self.type_of(key)
        if kind == "none":
            return None
        return dict(self.hashes[key]) if kind == "hash" else model.NotAHash(kind)

    def replace(self, r: redis.Redis) -> None:
        """Make this the whole keyspace of `r`: flushed, then every key created."""
        pipe = r.pipeline(transaction=False)
        pipe.flushall()
        for key, members in self.zsets.items():
            pipe.zadd(key, members)
        for key, fields in self.hashes.items():
            pipe.hset(key, mapping=fields)  # type: ignore[arg-type]
        for key, value in self.strings.items():
            pipe.set(key, value)
        for key, items in self.lists.items():
            pipe.rpush(key, *items)
        for key, members_ in self.sets.items():
            pipe.sadd(key, *members_)
        pipe.execute()


def all_keys(r: redis.Redis) -> list[bytes]:
    return cast(list[bytes], r.keys("*"))


def observe(r: redis.Redis) -> tuple[Keyspace, dict[bytes, bytes]]:
    """The whole keyspace of `r`, read logically and as every key's DUMP (three round trips)."""
    keys = all_keys(r)
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.dump(key)
    typed = pipe.execute()
    kinds = [k.decode() if isinstance(k, bytes) else str(k) for k in typed[::2]]
    readers = {
        "zset": lambda key: pipe.zrange(key, 0, -1, withscores=True),
        "hash": pipe.hgetall,
        "string": pipe.get,
        "list": lambda key: pipe.lrange(key, 0, -1),
        "set": pipe.smembers,
    }
    for key, kind in zip(keys, kinds, strict=True):
        readers[kind](key)
    space = Keyspace()
    for key, kind, value in zip(keys, kinds, pipe.execute(), strict=True):
        if kind == "zset":
            space.zsets[key] = dict(value)
        elif kind == "hash":
            space.hashes[key] = dict(value)
        elif kind == "string":
            space.strings[key] = value
        elif kind == "list":
            space.lists[key] = list(value)
        else:
            space.sets[key] = set(value)
    return space, dict(zip(keys, typed[1::2], strict=True))


def dump_keyspace(r: redis.Redis) -> dict[bytes, bytes]:
    """Every key's DUMP in one pipeline: equal dumps mean a byte-for-byte equal keyspace."""
    keys = all_keys(r)
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.dump(key)
    return dict(zip(keys, pipe.execute(), strict=True))


def restore_keyspace(r: redis.Redis, dumps: dict[bytes, bytes]) -> None:
    """Empty `r` and put back exactly the keys of `dumps`."""
    pipe = r.pipeline(transaction=False)
    pipe.flushall()
    for key, dumped in dumps.items():
        pipe.restore(key, 0, dumped)
    pipe.execute()


def snapshot(space: Keyspace, keys: QueueKeys, now_ms: int, limit: int) -> model.Snapshot:
    """What the verb reads from `space`: key types, the selected leases, the failed count."""
    named = {
        "active": keys.active.encode(),
        "pending": keys.pending.encode(),
        "dead": keys.dead.encode(),
        "metrics": keys.metrics_failed.encode(),
    }
    types = {name: space.type_of(key) for name, key in named.items()}
    active = space.zsets.get(named["active"], {})
    chosen = select(active.items(), now_ms, limit)
    leases = tuple(model.Lease(job_id, space.row(keys.job(job_id))) for job_id in chosen)
    metrics = space.hashes.get(named["metrics"], {})
    return model.Snapshot(leases, types, metrics.get(b"count"))


def apply(space: Keyspace, writes: Sequence[Write]) -> Keyspace:
    """The keyspace after the write pass: ZREM drops an emptied zset; HSET, ZADD create."""
    after = space.copy()
    for command, key, *args in writes:
        if command == b"ZREM":
            members = after.zsets.get(key, {})
            for member in args:
                members.pop(member, None)
            if not members:
                after.zsets.pop(key, None)
        elif command == b"ZADD":
            pairs = after.zsets.setdefault(key, {})
            for score, member in zip(args[::2], args[1::2], strict=True):
                pairs[member] = float(score)
        elif command == b"HSET":
            after.hashes.setdefault(key, {}).update(zip(args[::2], args[1::2], strict=True))
        elif command == b"HINCRBY":
            fields = after.hashes.setdefault(key, {})
            fields[args[0]] = str(int(fields.get(args[0], b"0")) + int(args[1])).encode()
        else:
            raise ValueError(f"the write pass has no {command!r}")
    return after


def expected(
    before: Keyspace, argv: Sequence[bytes], keys: QueueKeys, epoch: bytes, now_ms: int
) -> tuple[Reply, Keyspace]:
    """The model's reply and keyspace after one call with the verb's arguments `argv`."""
    parsed = parse_arguments(argv)
    if isinstance(parsed, model.Refusal):
        return parsed.message, before
    max_stalled, limit = parsed
    plan = model.decide(snapshot(before, keys, now_ms, limit), epoch, max_stalled)
    if isinstance(plan, model.Refusal):
        return plan.message, before
    return (tuple(plan.recovered), tuple(plan.dead)), apply(before, writes(plan, keys))


def error_text(exc: redis.ResponseError) -> str:
    """The error reply as the server sent it (redis-py keeps a stripped code apart)."""
    code = getattr(exc, "status_code", None)
    return f"{code} {exc}" if isinstance(code, str) else server_text(exc)


def call(r: redis.Redis, *command: bytes | str | int) -> Reply:
    """Send one command; its two-array reply, or the error text as the server sent it."""
    try:
        send: Callable[..., Any] = r.execute_command
        raw = send(*command)
    except redis.ResponseError as exc:
        return error_text(exc)
    recovered, dead = raw
    return tuple(recovered), tuple(dead)
