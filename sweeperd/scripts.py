"""Lua scripts shipped in the package: their source, their SHA1, loading them on a node."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from importlib import resources

import redis


@dataclass(frozen=True)
class LuaScript:
    """A script file of the package, sent by EVALSHA and loaded when the server lacks it."""

    file: str

    @cached_property
    def source(self) -> str:
        return resources.files("sweeperd").joinpath(self.file).read_text()

    @cached_property
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()

    def load(self, client: redis.Redis) -> None:
        client.script_load(self.source)


STALLED_CHECK = LuaScript("stalled_check.lua")  # the verb's Lua port
QUEUE_STATS = LuaScript("queue_stats.lua")  # a queue's counts after a sweep
