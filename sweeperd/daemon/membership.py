"""The members' heartbeats in the server: one sorted set, id -> deadline on the server clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import redis

from sweeperd.keyspace import members_key

# KEYS[1]: the members sorted set (member id -> deadline, ms since the epoch, server clock)
# ARGV[1]: this member's id
# ARGV[2]: its time to live, ms
# Reply: {now in ms, {id, deadline, id, deadline, ...}} of the members still live, itself too.
HEARTBEAT_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {now, redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}
"""


@dataclass(frozen=True)
class View:
    """The live members as one heartbeat found them, on the server's clock: each member's id
    and when its heartbeat expires."""

    now_ms: int
    deadlines_ms: dict[str, int]

    @property
    def members(self) -> frozenset[str]:
        return frozenset(self.deadlines_ms)


class MembershipStore:
    """One member's heartbeat and leave, in the server that holds the members key.

    It takes a plain client: in a cluster, the client of the primary owning the key's slot.
    """

    def __init__(self, client: redis.Redis, root: str, member_id: str, ttl_s: float) -> None:
        self._client = client
        self._key = members_key(root)
        self._member_id = member_id
        self._ttl_ms = max(1, round(ttl_s * 1000))
        self._script = client.register_script(HEARTBEAT_LUA)

    def beat(self) -> View:
        """Renew this member's deadline, drop the expired members, read the live ones."""
        now, flat = cast(
            list[object], self._script(keys=[self._key], args=[self._member_id, self._ttl_ms])
        )
        pairs = cast(list[bytes], flat)
        deadlines = {
            pairs[n].decode("utf-8", "backslashreplace"): int(float(pairs[n + 1]))
            for n in range(0, len(pairs), 2)
        }
        return View(int(cast(int, now)), deadlines)

    def leave(self) -> None:
        """Remove this member at once, so its queues move without waiting for its deadline."""
        self._client.zrem(self._key, self._member_id)
