"""A server and the executor that sweeps it: the module's native verb, or the Lua port."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from sweeperd.executors import Executor
from tests.server import RedisServer


@dataclass(frozen=True)
class Target:
    server: RedisServer
    client: redis.Redis
    executor: Executor
