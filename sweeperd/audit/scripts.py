"""The audit's two scripts: a read-only look at a batch of ids (each row's type and state and
the three sets' scores, on the server's clock, in one atomic call), and the repair that puts
stranded rows back in active as expired leases, re-checked in the same call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import redis
from redis.exceptions import NoScriptError

from sweeperd.audit.classes import Observation
from sweeperd.constants import JOB
from sweeperd.keyspace import QueueKeys
from sweeperd.server.calls import command
from sweeperd.verb.scripts import LuaScript

# KEYS: active, pending, dead, the sweep guard (never written: a migrating slot refuses the call,
# so that half-moved keys are never read as missing ones). ARGV: the rows' prefix, then the ids.
# Reply: the server's clock (ms), then per id {row type, state or nil, and the three scores}.
OBSERVE = LuaScript(
    """#!lua flags=no-writes
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 2, #ARGV do
  local row = ARGV[1] .. ARGV[i]
  local kind = redis.call('TYPE', row)['ok']
  local state = false
  if kind == 'hash' then state = redis.call('HGET', row, 'state') end
  out[i] = {kind, state, redis.call('ZSCORE', KEYS[1], ARGV[i]),
    redis.call('ZSCORE', KEYS[2], ARGV[i]), redis.call('ZSCORE', KEYS[3], ARGV[i])}
end
return out
"""
)

# KEYS as OBSERVE's. ARGV: the rows' prefix, then the ids. Each id whose row is still a hash in
# state active and that no set holds is added to active with the server's now as its deadline
# (an expired lease, for the counted verb to judge); nothing else is written. Reply: those ids.
REPAIR = LuaScript(
    """local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local put = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local row = ARGV[1] .. id
  if redis.call('TYPE', row)['ok'] == 'hash' and redis.call('HGET', row, 'state') == 'active'
    and not redis.call('ZSCORE', KEYS[1], id) and not redis.call('ZSCORE', KEYS[2], id)
    and not redis.call('ZSCORE', KEYS[3], id) then
    redis.call('ZADD', KEYS[1], now, id)
    put[#put + 1] = id
  end
end
return put
"""
)


def keys_of(keys: QueueKeys) -> list[str]:
    """Return the keys both scripts declare: the three sets and the sweep guard."""
    return [keys.active, keys.pending, keys.dead, keys.guard]


def row_prefix(keys: QueueKeys) -> str:
    return keys.prefix + JOB


def run(client: redis.Redis, script: LuaScript, keys: QueueKeys, ids: Sequence[bytes]) -> object:
    """Return one call of `script` on the queue's ids, the script loaded again when the server lacks
    it (NOSCRIPT: nothing ran)."""
    [reply] = run_many(client, script, [(keys, ids)])
    if isinstance(reply, redis.RedisError):
        raise reply
    return reply


def run_many(
    client: redis.Redis, script: LuaScript, calls: Sequence[tuple[QueueKeys, Sequence[bytes]]]
) -> list[object]:
    """Calls of `script` in one round trip, each reply or its error in place; those the server
    refused with NOSCRIPT (nothing ran) sent again once the script is loaded. OBSERVE goes by
    EVALSHA_RO, whose keys a read-only ACL user (%R~) may name; EVALSHA needs them writable. A
    connection failure raises."""
    replies = _send(client, script, calls)
    lost = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if lost:
        script.load(client)
        for n, reply in zip(lost, _send(client, script, [calls[n] for n in lost]), strict=True):
            replies[n] = reply
    return replies


def _send(
    client: redis.Redis, script: LuaScript, calls: Sequence[tuple[QueueKeys, Sequence[bytes]]]
) -> list[object]:
    name = "EVALSHA_RO" if script is OBSERVE else "EVALSHA"
    pipe = client.pipeline(transaction=False)
    for keys, ids in calls:
        command(pipe, name, script.sha, 4, *keys_of(keys), row_prefix(keys), *ids)
    return list(pipe.execute(raise_on_error=False))


def score(raw: object) -> float | None:
    """Return a ZSCORE as the script returned it (a string, nil when not a member)."""
    return None if raw is None else float(cast(bytes, raw))


def observations(ids: Sequence[bytes], reply: object) -> tuple[int, list[Observation]]:
    """Return the server's clock (ms) and what one OBSERVE call saw of each of `ids`."""
    now, *seen = cast(list[object], reply)
    found = []
    for job_id, raw in zip(ids, seen, strict=True):
        kind, state, active, pending, dead = cast(list[object], raw)
        found.append(
            Observation(
                job_id,
                cast(bytes, kind).decode(),
                cast(bytes | None, state),
                score(active),
                score(pending),
                score(dead),
            )
        )
    return cast(int, now), found


def observe_many(
    client: redis.Redis, calls: Sequence[tuple[QueueKeys, Sequence[bytes]]]
) -> list[tuple[int, list[Observation]] | redis.RedisError]:
    """Return what one atomic read of each call's ids sees, all in one round trip; a call refused (a
    slot migrating, a key of the wrong type) is its error, in place."""
    return [
        reply if isinstance(reply, redis.RedisError) else observations(ids, reply)
        for (_keys, ids), reply in zip(calls, run_many(client, OBSERVE, calls), strict=True)
    ]


def observe(
    client: redis.Redis, keys: QueueKeys, ids: Sequence[bytes]
) -> tuple[int, list[Observation]]:
    """Return the server's clock (ms) and what one atomic read sees of each id."""
    [seen] = observe_many(client, [(keys, ids)])
    if isinstance(seen, redis.RedisError):
        raise seen
    return seen


def repair(client: redis.Redis, keys: QueueKeys, ids: Sequence[bytes]) -> list[bytes]:
    """Return the stranded ids put back in active as expired leases (those still stranded)."""
    return list(cast(list[bytes], run(client, REPAIR, keys, ids)))
