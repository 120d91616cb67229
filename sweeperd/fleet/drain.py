"""Backlogs drained at server speed: one short call at a time, round-robin between queues."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis
import structlog

from sweeperd.config.settings import QueueSettings
from sweeperd.fleet.outcome import RESTARTED, Outcome
from sweeperd.keyspace import QueueKeys
from sweeperd.logs import ID_CAP
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.connection import UNREACHABLE
from sweeperd.verb.replies import Call, CallResult, SweepReply, keeps_draining
from sweeperd.verb.rounds import InFlight

if TYPE_CHECKING:
    from sweeperd.fleet.member import Member

log = structlog.get_logger("sweeperd.drain")

# A drain_progress event per queue at most every PROGRESS_LOG_S; the drain thread sleeps
# IDLE_WAIT_S at a time while no queue is backlogged.
PROGRESS_LOG_S = 5.0
IDLE_WAIT_S = 0.5


@dataclass
class Backlog:
    """One queue's drain: when it started and last logged its progress (monotonic), the leases
    it has taken from active and those due after its last call."""

    queue: QueueSettings
    keys: QueueKeys
    started: float
    logged: float
    done: int = 0
    left: int = 0

    def progress(self, now: float) -> dict[str, object]:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        eta = self.left / rate if rate > 0 else None
        return {
            "queue": self.queue.name,
            "done": self.done,
            "left": self.left,
            "rate": round(rate, 1),
            "eta_s": None if eta is None else round(eta, 1),
            "elapsed_s": round(elapsed, 1),
        }


@dataclass(frozen=True)
class Sent:
    """A drain call on its way: its queue, when it went (monotonic seconds), its reply to come."""

    backlog: Backlog
    started: float
    flight: InFlight


class Drainer:
    """Takes the queues a tick left with leases due and sweeps them until nothing is due.

    One call on the node at a time, each sized to the call target, so other clients (and the
    scheduled ticks of the other queues) get the server between two calls; queues with a
    backlog take turns. The next call is sent as soon as a reply is read, and the reply counted
    while the server runs it. `share` below 1 pauses between calls to leave the server that much
    (and then the next call waits for the pause). Its node, ledger, wakes, clocks and report
    are its member's.
    """

    def __init__(self, member: Member, *, share: float) -> None:
        self.member = member
        self.share = share
        self._backlogs: OrderedDict[str, Backlog] = OrderedDict()
        self._wake = threading.Condition()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight: Sent | None = None

    def add(self, queue: QueueSettings, keys: QueueKeys, left: int) -> None:
        """Add a queue with `left` leases still due to the turns (once)."""
        now = self.member.clock()
        with self._wake:
            if queue.name in self._backlogs:
                return
            self._backlogs[queue.name] = Backlog(queue, keys, now, now, left=left)
            self._wake.notify()
        log.info("drain_started", queue=queue.name, left=left)

    def is_draining(self, name: str) -> bool:
        """Tell whether the queue is being drained."""
        with self._wake:
            return name in self._backlogs

    def not_draining(self, queues: Sequence[QueueSettings]) -> list[QueueSettings]:
        """Return the queues not being drained (a scheduled tick has nothing to add to a drain),
        under one lock."""
        with self._wake:
            backlogs = self._backlogs
            return [q for q in queues if q.name not in backlogs] if backlogs else list(queues)

    @property
    def sending(self) -> bool:
        """A call is in flight: sent while the one before it was counted."""
        return self._in_flight is not None

    @property
    def running(self) -> bool:
        """The drain thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def forget(self, name: str) -> None:
        """Drop a queue no longer swept from the turns."""
        with self._wake:
            self._backlogs.pop(name, None)

    def step(self) -> float | None:
        """Read the reply of the call in flight (sending one first when none is) and count it.
        Unless a pause is owed, the next call goes out before the counting, so the server runs
        it meanwhile: still one call at a time. The pause owed, or None when nothing is due."""
        sent, self._in_flight = self._in_flight or self.send(skip=None), None
        if sent is None:
            return None
        name = sent.backlog.queue.name
        try:
            result = self.member.node.result(sent.flight)
        except UNREACHABLE as exc:
            error = SweepError.of(exc)
            self.member.node.failed(self.member.clock(), exc)
            self.member.ledger.fail(name, error)
            self.drop_all("loading" if error.reason is Reason.LOADING else "redis_down")
            return None
        except redis.RedisError as exc:
            self.forget(name)
            self.member.ledger.fail(name, SweepError.of(exc))
            return 0.0
        again = keeps_draining(result)
        pause = 0.0
        if isinstance(result.reply, SweepReply):
            spent = result.seconds(self.member.clock() - sent.started)
            self.member.node.observe(sent.flight.call.limit, result.reply.taken, spent)
            pause = spent * (1 / self.share - 1)
        if again:
            self.to_the_back(name)
        if pause <= 0 and not self._stopped.is_set():
            self._in_flight = self.send(skip=None if again else name)
        self.count(sent, result, again)
        return pause

    def send(self, skip: str | None) -> Sent | None:
        """Send a call for the first backlogged queue but `skip`; None when there is none."""
        with self._wake:
            backlog = next((b for n, b in self._backlogs.items() if n != skip), None)
        if backlog is None:
            return None
        size = self.member.node.call_size(backlog.queue.limit)
        flight = self.member.node.send(
            Call(backlog.keys, backlog.queue.max_stalled, size, listed=ID_CAP)
        )
        if flight is None:
            # The node restarted and has not been looked at yet: the tick will.
            self.forget(backlog.queue.name)
            return None
        return Sent(backlog, self.member.clock(), flight)

    def to_the_back(self, name: str) -> None:
        with self._wake:
            if name in self._backlogs:
                self._backlogs.move_to_end(name)

    def count(self, sent: Sent, result: CallResult, again: bool) -> None:
        """Count and log a drain call; its queue leaves the turns when nothing is due."""
        backlog = sent.backlog
        name = backlog.queue.name
        if result.redirect is not None:
            # Unrun: the queue's ticks go on, held or routed anew.
            self.forget(name)
            self.member.ledger.hold(name, result.redirect)
            if self.member.deadlines is not None:
                self.member.deadlines.forget(name)
            if result.redirect is Reason.MOVED:
                self.member.report(Outcome(moved=(name,)))
            return
        reply = self.member.ledger.record(
            name, result, self.member.wall_clock(), level=logging.DEBUG
        )
        run_id = None if result.depths is None else result.depths.run_id
        if run_id is not None and self.member.node.is_new_run(run_id):
            self.member.report(RESTARTED)
        if reply is None:
            self.forget(name)
            return
        self.member.node.answered(self.member.clock())
        backlog.done += reply.taken
        backlog.left = result.expired_left or 0
        now = self.member.clock()
        if again:
            if now - backlog.logged >= PROGRESS_LOG_S:
                backlog.logged = now
                log.info("drain_progress", **backlog.progress(now))
            return
        self.forget(name)
        log.info("drain_finished", **backlog.progress(now))
        deadlines = self.member.deadlines
        if deadlines is not None:
            deadlines.arm(name, result.due_next_ms, sent.started, backlog.queue.interval)
            self.member.report(Outcome(wake=deadlines.next_wake()))

    def drop_all(self, why: str) -> None:
        with self._wake:
            names = list(self._backlogs)
            self._backlogs.clear()
        if names:
            log.info("drain_stopped", queues=len(names), reason=why)

    def broke(self, exc: Exception) -> None:
        """Fail every held queue with reason `other` after an unexpected error in a drain step,
        and give each back to its ticks."""
        log.exception("drain_failed", node=self.member.name)
        with self._wake:
            names = list(self._backlogs)
        error = SweepError(Reason.OTHER, f"{type(exc).__name__}: {exc}")
        for name in names:
            self.member.ledger.fail(name, error)
        self.drop_all("error")

    def run_forever(self) -> None:
        """Run the drain thread: a call whenever a queue is backlogged, until stopped; a call
        in flight then is still read and counted."""
        while not self._stopped.is_set() or self._in_flight is not None:
            try:
                pause = self.step()
            except Exception as exc:
                # A bug must not leave held queues unswept (ticks retake them), nor spin.
                self.broke(exc)
                self._stopped.wait(IDLE_WAIT_S)
                continue
            if pause is None:
                with self._wake:
                    if not self._backlogs and not self._stopped.is_set():
                        self._wake.wait(IDLE_WAIT_S)
            elif pause > 0:
                self._stopped.wait(pause)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.run_forever, name=f"drain-{self.member.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Stop after the call in flight; wait for it at most `timeout_s`."""
        self._stopped.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
