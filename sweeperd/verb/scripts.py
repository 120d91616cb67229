"""Lua scripts shipped in the package: their source, their SHA1, loading them on a node."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from importlib import resources

import redis

from sweeperd.constants import VERB


@dataclass(frozen=True)
class LuaScript:
    """A script sent by EVALSHA and loaded again whenever the server lacks it."""

    source: str

    @cached_property
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()

    def load(self, client: redis.Redis) -> None:
        client.script_load(self.source)


def package_text(file: str) -> str:
    """Return the text of a file shipped in the package (a Lua script)."""
    return resources.files("sweeperd.verb").joinpath(file).read_text()


def as_verb(body: str) -> str:
    """`body`, a chunk that reads KEYS and ARGV, as the local function `verb` of a script."""
    return f"local function verb(KEYS, ARGV)\n{body}\nend\n"


NATIVE_VERB = f"return redis.pcall('{VERB}', KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])"

# The verb's Lua port, on its own.
STALLED_CHECK = LuaScript(package_text("stalled_check.lua"))
# A sweep with its accounting, in one atomic call: by the module's verb, or by the Lua port.
SWEEP_NATIVE = LuaScript(as_verb(NATIVE_VERB) + package_text("sweep.lua"))
SWEEP_SCRIPT = LuaScript(as_verb(STALLED_CHECK.source) + package_text("sweep.lua"))
