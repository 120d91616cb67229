"""The two ways to send the verb: the module's native command, or the package's Lua port."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from sweeperd.constants import ExecutorChoice
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.serverinfo import has_verb
from sweeperd.verb.scripts import SWEEP_NATIVE, SWEEP_SCRIPT, LuaScript


@dataclass(frozen=True)
class Executor:
    """A way to run the verb: the sweep script (see sweep.lua) that wraps it with its accounting."""

    name: str
    script: LuaScript

    def args(
        self,
        keys: QueueKeys,
        max_stalled: int,
        limit: int,
        bound_ms: int,
        listed: int = 0,
        *,
        brief: bool = False,
    ) -> list[object]:
        """EVALSHA of the sweep script for `keys`; `bound_ms` bounds the expired count, `listed`
        the ids the reply lists (0: all); `brief` lets a call that finds nothing due reply with
        its clock and earliest deadline alone."""
        return [
            "EVALSHA",
            self.script.sha,
            5,
            keys.active,
            keys.pending,
            keys.dead,
            keys.metrics_failed,
            keys.guard,
            keys.prefix,
            max_stalled,
            limit,
            bound_ms,
            listed,
            int(brief),
        ]

    def prepare(self, client: redis.Redis) -> None:
        """Load the sweep script on the node (again after a restart or SCRIPT FLUSH)."""
        self.script.load(client)


# EMQ.STALLED.CHECK itself, answered by the module.
NATIVE = Executor("native", SWEEP_NATIVE)
# The verb's Lua port, for servers without it.
SCRIPT = Executor("script", SWEEP_SCRIPT)
NO_VERB_HINT = (
    "the server does not know EMQ.STALLED.CHECK: load the module "
    "(loadmodule emq_stalled.so) or use --executor script (or auto)"
)


def choose(client: redis.Redis, wanted: ExecutorChoice) -> Executor:
    """Return the executor for one node: `auto` asks the server whether it knows the verb."""
    if wanted is ExecutorChoice.SCRIPT:
        return SCRIPT
    available = has_verb(client)
    if wanted is ExecutorChoice.NATIVE and not available:
        raise SweepError(Reason.NO_VERB, NO_VERB_HINT)
    return NATIVE if available else SCRIPT
