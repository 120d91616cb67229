"""The audit's two scripts: a read-only look at a batch of ids (each row's type and state and
the three sets' scores, on the server's clock, in one atomic call), and the repair that puts
stranded rows back in active as expired leases, re-checked in the same call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import redis

from sweeperd.audit.classes import Observation
from sweeperd.constants import JOB
from sweeperd.keyspace import QueueKeys
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
    """The keys both scripts declare: the three sets and the sweep guard."""
    return [keys.active, keys.pending, keys.dead, keys.guard]


def row_prefix(keys: QueueKeys) -> str:
    return keys.prefix + JOB


def run(client: redis.Redis, script: LuaScript, keys: QueueKeys, ids: Sequence[bytes]) -> object:
    """One call of `script` on the queue's ids, the script loaded again when the server lacks
    it (NOSCRIPT: nothing ran). OBSERVE goes by EVALSHA_RO, whose keys a read-only ACL user
    (%R~) may name; EVALSHA would need them writable."""
    args: list[str | bytes] = [*keys_of(keys), row_prefix(keys), *ids]
    send = client.evalsha_ro if script is OBSERVE else client.evalsha
    try:
        return send(script.sha, 4, *args)
    except redis.exceptions.NoScriptError:
        script.load(client)
        return send(script.sha, 4, *args)


def score(raw: object) -> float | None:
    """A ZSCORE as the script returned it (a string, nil when not a member)."""
    return None if raw is None else float(cast(bytes, raw))


def observe(
    client: redis.Redis, keys: QueueKeys, ids: Sequence[bytes]
) -> tuple[int, list[Observation]]:
    """The server's clock (ms) and what one atomic read sees of each id."""
    now, *seen = cast(list[object], run(client, OBSERVE, keys, ids))
    observations = []
    for job_id, raw in zip(ids, seen, strict=True):
        kind, state, active, pending, dead = cast(list[object], raw)
        observations.append(
            Observation(
                job_id,
                cast(bytes, kind).decode(),
                cast(bytes | None, state),
                score(active),
                score(pending),
                score(dead),
            )
        )
    return cast(int, now), observations


def repair(client: redis.Redis, keys: QueueKeys, ids: Sequence[bytes]) -> list[bytes]:
    """The stranded ids put back in active as expired leases (those still stranded)."""
    return list(cast(list[bytes], run(client, REPAIR, keys, ids)))
