"""One scheduled tick of a batch of queues on one node: one call each in one round (the node
looks at the epoch first), each counted, the backlogs left to the drainer."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis
import structlog

from sweeperd.config.settings import QueueSettings
from sweeperd.fleet.node import NotPrimary, Swept
from sweeperd.fleet.outcome import LOADING, NOTHING, Outcome
from sweeperd.logs import ID_CAP
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.connection import UNREACHABLE
from sweeperd.verb.replies import NOTHING as NOTHING_DUE
from sweeperd.verb.replies import Call, CallResult, SweepReply

if TYPE_CHECKING:
    from sweeperd.fleet.member import Member

log = structlog.get_logger("sweeperd.tick")


@dataclass
class Tick:
    """A primary's ticks: a batch of queues swept in one pipelined round trip, what is left due
    handed to its drainer; each tick says what the schedule must answer (its Outcome). Its
    node, ledger, drainer, wakes and clocks are its member's. With `brief`, an idle call replies
    without its counts (the set sizes are not exported)."""

    member: Member
    brief: bool = False

    def run(
        self, batch: Sequence[QueueSettings], now: float, *, look: bool = True, woken: bool = False
    ) -> Outcome:
        """Sweep the batch: look at the epoch, then send one call per queue not already draining, in
        one round; a queue left with leases due drains on. A call a Cluster held (its slot
        migrating) or sent elsewhere is counted as held, not as a failure; the queues sent elsewhere
        (MOVED, or a primary demoted) are the outcome's `moved`, for the topology to route again;
        each queue swept is woken again at the earliest deadline its call read (the outcome's
        `wake`: the node's next). Without `look`, the replies' run_id is the epoch watch (see
        Node.sweep). A tick not `woken` at the queues' deadlines leaves a queue whose wake comes
        soon to it."""
        m = self.member
        if not m.node.may_try(now):
            return NOTHING
        queues = m.drainer.not_draining(batch)
        if m.deadlines is not None and not woken:
            queues = m.deadlines.unwoken(queues, now)
        retrack = m.listener.to_retrack(queues) if m.listener is not None else {}
        try:
            swept = m.node.sweep(self.calls(queues, retrack), now, look=look)
        except NotPrimary:
            # Demoted: its queues' calls are held, to go to the new primary.
            for q in queues:
                m.ledger.hold(q.name, Reason.MOVED)
            return Outcome(moved=tuple(q.name for q in queues))
        except Exception as exc:
            return self.fail_all(queues, exc, now)
        done: list[tuple[QueueSettings, CallResult]] = []
        counted: list[tuple[str, CallResult]] = []
        held: list[tuple[QueueSettings, Reason]] = []
        loading = False
        for q, result in zip(queues, swept.results, strict=True):
            if result.reply is not NOTHING_DUE:  # most calls of an idle round: no redirect
                redirect = result.redirect
                if redirect is not None:
                    held.append((q, redirect))
                    continue
                loading = loading or _loading(result)
            done.append((q, result))
            counted.append((q.name, result))
        m.ledger.record_round(counted, m.wall_clock(), duration_s=swept.took_s)
        for q, reason in held:
            m.ledger.hold(q.name, reason)
        for q, result in done:
            if result.expired_left and isinstance(result.reply, SweepReply):
                m.drainer.add(q, result.call.keys, result.expired_left)
        self.update_refusal(done)
        if retrack:
            self.retracked(retrack, done)
        moved = tuple(q.name for q, reason in held if reason is Reason.MOVED)
        wake = self.arm(swept, done, [q for q, _ in held], now)
        return Outcome(restarted=swept.restarted, loading=loading, moved=moved, wake=wake)

    def update_refusal(self, done: Sequence[tuple[QueueSettings, CallResult]]) -> None:
        """Clear the node's standing refusal when a call went through; set it when every call
        was refused for one (see Node.refusing)."""
        replies = [r.reply for _, r in done]
        if any(isinstance(reply, SweepReply) for reply in replies):
            self.member.node.refusing(None)
        elif replies and all(isinstance(reply, SweepError) for reply in replies):
            first = replies[0]
            assert isinstance(first, SweepError)
            self.member.node.refusing(first)

    def retracked(
        self, tokens: dict[str, int], done: Sequence[tuple[QueueSettings, CallResult]]
    ) -> None:
        """Tell the listener which queues left to this tick's sweeps were tracked again: those
        whose call ran behind its CLIENT CACHING yes."""
        listener = self.member.listener
        assert listener is not None
        ran = {q.name for q, r in done if isinstance(r.reply, SweepReply) and q.name in tokens}
        refused = {q.name for q, r in done if r.untracked}
        listener.retracked({name: tokens[name] for name in ran | refused}, refused)

    def arm(
        self,
        swept: Swept,
        done: Sequence[tuple[QueueSettings, CallResult]],
        held: Sequence[QueueSettings],
        now: float,
    ) -> float | None:
        """Measure the server's clock against ours, then arm each queue's next wake at the deadline
        its call read: none for a queue left draining (its drain arms it when done), refused, or
        held by a migrating slot (it waits for its hold). Return the node's next wake; None when
        off."""
        deadlines = self.member.deadlines
        if deadlines is None:
            return None
        if swept.clock is not None:
            deadlines.measured(*swept.clock)
        deadlines.arm_round(now, [(q.name, r.due_next_ms, q.interval) for q, r in done])
        for q in held:
            deadlines.forget(q.name)
        return deadlines.next_wake()

    def calls(self, queues: Sequence[QueueSettings], retrack: Collection[str] = ()) -> list[Call]:
        """Build the queues' calls, the node's call size shared out between them: the round
        stays about one call's target long; those of `retrack` track what they read."""
        share, brief = self.member.node.share(len(queues)), self.brief
        return [
            Call(
                q.keys,
                q.max_stalled,
                q.limit if q.limit < share else share,
                0,
                ID_CAP,
                brief,
                bool(retrack) and q.name in retrack,
            )
            for q in queues
        ]

    def fail_all(self, queues: Sequence[QueueSettings], exc: Exception, started: float) -> Outcome:
        """Count every queue's call failed: the node is down or loading, refused INFO or the
        verb's choice, is no primary of the kind the options say, or the tick itself broke."""
        m = self.member
        error = SweepError.of(exc)
        if isinstance(exc, UNREACHABLE):
            m.node.failed(m.clock(), exc)
        if not isinstance(exc, SweepError | redis.RedisError):
            log.exception("tick_failed", node=m.name)
            error = SweepError(Reason.OTHER, f"{type(exc).__name__}: {exc}")
        names = [q.name for q in queues]
        m.node.refusing(error)
        m.ledger.fail_tick(names, error, duration_s=m.clock() - started)
        # Up, but not yet: its queues again soon, not after a backoff.
        return LOADING if error.reason is Reason.LOADING else NOTHING


def _loading(result: CallResult) -> bool:
    return isinstance(result.reply, SweepError) and result.reply.reason is Reason.LOADING
