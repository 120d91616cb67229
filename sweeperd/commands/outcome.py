"""What one `once` did, or its dry run would do: the ids, the calls, what is still due, and
whether the queue has a key at all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from sweeperd import model
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import SweepError
from sweeperd.server.counts import has_keys
from sweeperd.server.serverinfo import ServerInfo
from sweeperd.verb.executors import Executor
from sweeperd.verb.replies import SweepReply


@dataclass
class OnceResult:
    """What one `once` did (or, dry, would do); `error` ends it early, after `calls` calls.

    `ghosts` counts the ids removed from active that had no row; `left` the leases due at the
    start (`at_ms`, the server's clock) still in active after the last call, unless `left_read`
    is False (a refused call did not say: see refused()); `interrupted` means Ctrl-C came, after
    what is here; `max_stalled` and `limit` are the budget and call size it used, and
    `max_stalled_default` says nobody set the budget; `absent` says nothing was due and none of
    the queue's own keys exists."""

    queue: str
    executor: str
    run_id: str
    dry_run: bool
    recovered: list[bytes] = field(default_factory=list)
    dead: list[bytes] = field(default_factory=list)
    exempt: list[bytes] = field(default_factory=list)
    ghosts: int = 0
    ghost_ids: list[bytes] = field(default_factory=list)
    calls: int = 0
    left: int = 0
    error: SweepError | None = None
    interrupted: bool = False
    max_stalled: int = 0
    limit: int = 0
    max_stalled_default: bool = False
    at_ms: int = 0
    left_read: bool = True
    absent: str | None = None

    @classmethod
    def begun(
        cls,
        keys: QueueKeys,
        executor: Executor,
        info: ServerInfo,
        *,
        dry_run: bool,
        max_stalled: int,
        limit: int,
    ) -> OnceResult:
        """Return the result of a sweep with nothing done yet, on the server `info` was read
        from: `left` counts what is due by its clock now."""
        return cls(
            keys.queue,
            executor.name,
            info.run_id.decode(),
            dry_run=dry_run,
            max_stalled=max_stalled,
            limit=limit,
            at_ms=info.time_ms,
        )

    @property
    def refusal(self) -> str:
        """Return which call was refused, and that it wrote nothing (a dry run says it of the call
        the real one would make)."""
        if self.calls <= 1:
            return "refused, nothing written"
        return f"call {self.calls} refused, nothing written by it"

    @property
    def still_due(self) -> str:
        if not self.left_read:
            return "what is due unreadable"
        return f"{self.left} lease{'' if self.left == 1 else 's'} still due"

    @property
    def taken(self) -> int:
        return len(self.recovered) + len(self.dead) + self.ghosts

    def add(self, reply: SweepReply | model.Plan) -> None:
        self.recovered += reply.recovered
        self.dead += reply.dead
        self.exempt += reply.exempt
        self.ghosts += reply.ghosts if isinstance(reply, SweepReply) else len(reply.ghosts)
        self.ghost_ids += reply.ghost_ids if isinstance(reply, SweepReply) else reply.ghosts


# Told after each call of a drain.
OnProgress = Callable[[OnceResult], None]


def said_absent(result: OnceResult, client: redis.Redis, keys: QueueKeys) -> OnceResult:
    """Say whether the queue has a key at all when nothing was due, refused or interrupted (a
    typo of its name or of --prefix-root looks like nothing due)."""
    quiet = result.error is None and not result.interrupted and not result.taken
    if quiet and not has_keys(client, keys):
        result.absent = keys.absent()
    return result
