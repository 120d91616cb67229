"""A server and the executor that sweeps it: the module's native verb, or the Lua port."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from sweeperd.verb.executors import Executor
from tests.support.servers import RedisServer


@dataclass(frozen=True)
class Target:
    server: RedisServer
    client: redis.Redis
    executor: Executor
