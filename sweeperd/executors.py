"""The two ways to send the verb: the module's native command, or the package's Lua port."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

import redis
from redis.client import Pipeline

from sweeperd.constants import VERB
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError
from sweeperd.scripts import STALLED_CHECK
from sweeperd.serverinfo import has_verb


def script_source() -> str:
    """The Lua port of the verb, shipped in the package."""
    return STALLED_CHECK.source


def script_sha() -> str:
    return STALLED_CHECK.sha


class ExecutorChoice(StrEnum):
    AUTO = "auto"
    NATIVE = "native"
    SCRIPT = "script"


def verb_args(keys: QueueKeys, max_stalled: int, limit: int) -> list[str]:
    """The verb's six arguments: three keys, the prefix, the budget, the batch size."""
    return [keys.active, keys.pending, keys.dead, keys.prefix, str(max_stalled), str(limit)]


class Executor(Protocol):
    name: str

    def queue(self, pipe: Pipeline, keys: QueueKeys, max_stalled: int, limit: int) -> None:
        """Append one sweep of `keys` to the pipeline."""

    def prepare(self, client: redis.Redis) -> None:
        """Make the node ready to take `queue`'s command (a no-op for the native verb)."""


class NativeExecutor:
    """EMQ.STALLED.CHECK itself, answered by the module."""

    name = "native"

    def queue(self, pipe: Pipeline, keys: QueueKeys, max_stalled: int, limit: int) -> None:
        pipe.execute_command(VERB, *verb_args(keys, max_stalled, limit))  # type: ignore[no-untyped-call]

    def prepare(self, client: redis.Redis) -> None:
        return None


class ScriptExecutor:
    """The Lua port of the verb, by EVALSHA; loaded again whenever the server lost it."""

    name = "script"

    def queue(self, pipe: Pipeline, keys: QueueKeys, max_stalled: int, limit: int) -> None:
        args = verb_args(keys, max_stalled, limit)
        pipe.execute_command("EVALSHA", script_sha(), 3, *args)  # type: ignore[no-untyped-call]

    def prepare(self, client: redis.Redis) -> None:
        STALLED_CHECK.load(client)


NATIVE = NativeExecutor()
SCRIPT = ScriptExecutor()
NO_VERB_HINT = (
    "the server does not know EMQ.STALLED.CHECK: load the module "
    "(loadmodule emq_stalled.so) or use --executor script (or auto)"
)


def choose(client: redis.Redis, wanted: ExecutorChoice) -> Executor:
    """The executor for one node: `auto` asks the server whether it knows the verb."""
    if wanted is ExecutorChoice.SCRIPT:
        return SCRIPT
    available = has_verb(client)
    if wanted is ExecutorChoice.NATIVE and not available:
        raise SweepError(Reason.NO_VERB, NO_VERB_HINT)
    return NATIVE if available else SCRIPT
