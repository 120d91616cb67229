"""One server the daemon sweeps: its calls (sized, sent after a look at the epoch, judged), its
epoch watch, liveness and backoff, and what its refusals mean where it stands in the topology."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import redis
import structlog

from sweeperd.constants import ExecutorChoice
from sweeperd.metrics.state import NodeState
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.clusternodes import cluster_down
from sweeperd.server.denied import denied, user_of
from sweeperd.server.serverinfo import ServerInfo, read_server_info
from sweeperd.server.tls import mismatch
from sweeperd.server.topology import clustered_error
from sweeperd.server.wire import scheme_of
from sweeperd.verb.executors import Executor, choose
from sweeperd.verb.replies import Call, CallResult, SweepReply
from sweeperd.verb.rounds import InFlight, Packed, sweep_round
from sweeperd.verb.sizing import CallSizer

log = structlog.get_logger("sweeperd.node")

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
# A scheduled tick looks at the epoch at most once a LOOK_EVERY_S per node (see looked_lately).
LOOK_EVERY_S = 1.0
# The refusals that last until an operator acts.
STANDING = (Reason.NO_VERB, Reason.NOPERM)


class NotPrimary(redis.ConnectionError):
    """The server answers but is a replica now: its slots or its name went to another primary."""


@dataclass(frozen=True)
class Epoch:
    """What one look at the server found: its info, and whether it restarted since the last."""

    info: ServerInfo
    executor: Executor
    restarted: bool


@dataclass(frozen=True)
class Swept:
    """A round's results (CLUSTERDOWN naming the failed nodes), whether the server was another
    run of it than the last look saw, how long the round took, and a reading of the server's
    clock (ms since the Unix epoch) with when its reply came (our monotonic seconds): None
    when no reply said."""

    results: list[CallResult]
    restarted: bool
    took_s: float
    clock: tuple[int, float] | None = None


class Node:
    """A server and what the daemon knows of it; shared by every batch that sweeps it. Its
    calls go through sweep() (a tick's round) and send()/result() (a drain's call in flight),
    which size them, look at the epoch first and judge what came back.

    `client` is what it talks to (discovery and the heartbeat use it too). With `primary_only`
    a replica is refused (Cluster, Sentinel: demoted); with `cluster` it is swept as a
    Cluster's primary (--cluster), not as one server; `clustered` is set when a Cluster node is
    swept as one server (refused, so never ready). `replid` is the master_replid (a fail-over
    and back keeps the run_id); `restarts` counts the changes of either. `up` is None until the
    first answer or failure, `error` says why it is down while it is, `refusal` why it refuses
    every sweep while it does, `last_answer` when it last answered (monotonic).
    """

    def __init__(
        self,
        name: str,
        client: redis.Redis,
        choice: ExecutorChoice,
        sizer: CallSizer,
        *,
        primary_only: bool = False,
        cluster: bool = False,
        restarts: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.client = client
        self.primary_only = primary_only
        self.cluster = cluster
        self.clustered = False
        self.run_id: bytes | None = None
        self.replid: bytes | None = None
        self.up: bool | None = None
        self.error: str | None = None
        self.refusal: SweepError | None = None
        self.restarts = restarts
        self.last_answer: float | None = None
        self.looked_at = float("-inf")
        self.retry_at = 0.0
        self.backoff_s = BACKOFF_FIRST_S
        self._choice = choice
        self._sizer = sizer
        self._clock = clock
        self._predecessor: str | None = None
        self._executor: Executor | None = None
        self._packed = Packed()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Node({self.name!r}, up={self.up}, run_id={self.run_id!r})"

    # The calls.
    def sweep(self, calls: Sequence[Call], now: float, *, look: bool = True) -> Swept:
        """Sweep one round: the epoch looked at (a change of run_id is a restart, counted), then
        every call in one round trip; a call alone times the node's next sizes. Raises what the look
        raises (the node down, loading, demoted, no verb) and a connection failure.

        Without `look` (a queue woken at its deadline: one round trip, not two) the round goes out
        on the executor of the last look, and the epoch a reply carries is the watch: a reply from
        another run of the server is looked at then (see is_new_run). A round of brief calls (an
        idle queue's is a probe, a plain read: see sweep_round) sends its first call whole: it
        carries the run_id, its clock judges the probes, and an ACL user without a command the
        sweep needs is refused there every round, not only once a lease falls due. Where no
        whole reply came back (the first call refused) the node is looked at.
        """
        epoch = self.look(now) if look or self._executor is None else None
        read = self._clock()
        executor = epoch.executor if epoch is not None else self._executor
        assert executor is not None
        if calls and calls[0].brief:
            calls = [replace(calls[0], brief=False), *calls[1:]]
        results = self.with_failed_nodes(sweep_round(self.client, executor, calls, self._packed))
        end = self._clock()
        took = end - now
        if len(results) == 1 and isinstance(results[0].reply, SweepReply) and _timed(results[0]):
            self.observe(results[0].call.limit, results[0].reply.taken, results[0].seconds(took))
        if epoch is not None:
            return Swept(results, epoch.restarted, took, (epoch.info.time_ms, read))
        depths = next((r.depths for r in results if r.depths and r.depths.run_id), None)
        if depths is None or depths.run_id is None:
            if any(r.depths is not None for r in results):
                # Every reply brief: the epoch is unread.
                epoch = self.look(end)
                return Swept(results, epoch.restarted, took, (epoch.info.time_ms, self._clock()))
            return Swept(results, False, took)
        self.answered(end)
        return Swept(results, self.is_new_run(depths.run_id), took, (depths.now_ms, end))

    def send(self, call: Call) -> InFlight | None:
        """Send one call on a connection of its own, its reply read by result(); None while the
        node has not been looked at since it restarted (its next tick looks)."""
        executor = self._executor
        return None if executor is None else InFlight(self.client, executor, call)

    def result(self, flight: InFlight) -> CallResult:
        """Read the reply of a call send() sent, CLUSTERDOWN naming the failed nodes; a
        connection failure raises."""
        [result] = self.with_failed_nodes([flight.result()])
        return result

    def share(self, queues: int) -> int:
        """Return the node's call size shared out between `queues` calls of one round."""
        return max(1, self._sizer.size // max(1, queues))

    def call_size(self, limit: int) -> int:
        """Return the next call's size on its own: the learned size, never above `limit`."""
        return self._sizer.next(limit)

    def observe(self, asked: int, taken: int, seconds: float) -> None:
        """Learn from a call that asked for `asked` leases, took `taken` and ran `seconds`."""
        self._sizer.observe(asked, taken, seconds)

    def retune(self, call_target_s: float) -> None:
        """Apply SIGHUP's call target, in place."""
        self._sizer.target_s = call_target_s

    # The epoch watch.
    def may_try(self, now: float) -> bool:
        """Return False while a down server's backoff runs."""
        return self.up is not False or now >= self.retry_at

    def inherit(self, previous: Node) -> None:
        """Take over the epoch of `previous`, whose slots this new primary took over (a
        failover): the first look compares with it, so that the change is counted here."""
        with self._lock:
            self.run_id, self.replid = previous.run_id, previous.replid
            self._predecessor = previous.name

    def looked_lately(self, now: float) -> bool:
        """Tell whether a tick at `now` may go without a look: the node, up, was looked at less
        than LOOK_EVERY_S before. The replies' run_id still watch restarts (see sweep); a primary
        demoted meanwhile is seen by the next look, within the second."""
        return (
            self.up is True and self._executor is not None and now - self.looked_at < LOOK_EVERY_S
        )

    def is_new_run(self, run_id: bytes) -> bool:
        """Return whether the run_id a reply said is a new run of the server: another run than
        the last look saw is looked at (the restart counted there, the executor chosen again).
        A look that fails leaves it to the next tick."""
        if run_id == self.run_id:
            return False
        try:
            return self.look(self._clock()).restarted
        except (redis.RedisError, SweepError):
            return False

    def look(self, now: float) -> Epoch:
        """Read run_id, master_replid and the clock; a change of either is a restart or a
        failover, counted once, executor rechosen. A server still loading its dataset is not
        looked at yet (its calls would be refused): the restart is seen once it has loaded.
        A command the ACL user lacks (INFO, COMMAND INFO, SCRIPT LOAD) is said as noperm."""
        try:
            return self._look(now)
        except redis.exceptions.NoPermissionError as exc:
            raise denied(exc, user_of(self.client), where=self.name) from None

    def _look(self, now: float) -> Epoch:
        info = read_server_info(self.client)
        if info.loading:
            raise SweepError(
                Reason.LOADING, f"{self.name} is loading its dataset: its calls wait until it has"
            )
        self.clustered = info.cluster and not self.cluster
        if self.clustered:
            raise clustered_error(self.name)
        if self.primary_only and info.role != "master":
            raise NotPrimary(f"{self.name} is a {info.role} now, no longer a primary")
        with self._lock:
            restarted = self.run_id is not None and (
                info.run_id != self.run_id
                or (self.replid is not None and info.replid != self.replid)
            )
            if restarted:
                self._changed(info)
            self.run_id, self.replid, self._predecessor = info.run_id, info.replid, None
            self._answered(now)
            if self._executor is None:
                self._executor = self._choose()
            self.looked_at = now
            return Epoch(info, self._executor, restarted)

    def _changed(self, info: ServerInfo) -> None:
        """Count and log, once, another server process, or the same one after a change of role.
        Hold the lock."""
        failover = self._predecessor is not None or info.run_id == self.run_id
        self.restarts += 1
        log.warning(
            "server_restarted",
            node=self.name,
            reason="failover" if failover else "restart",
            old_run_id=(self.run_id or b"").decode(),
            new_run_id=info.run_id.decode(),
            **({"previous_node": self._predecessor} if self._predecessor else {}),
        )
        # A module may have been loaded or unloaded, and no script is copied over.
        self._executor = None

    def _choose(self) -> Executor:
        """Choose the executor for this run of the server and load its scripts; raises for
        no_verb."""
        executor = choose(self.client, self._choice)
        executor.prepare(self.client)
        log.info(
            "executor_chosen", node=self.name, executor=executor.name, wanted=str(self._choice)
        )
        return executor

    # Liveness.
    def answered(self, now: float) -> None:
        """Mark the server up after an answer, its backoff reset; logged once per change."""
        with self._lock:
            self._answered(now)

    def _answered(self, now: float) -> None:
        self.last_answer = now
        self.backoff_s = BACKOFF_FIRST_S
        if self.up is not True:
            log.info("redis_up", node=self.name)
        self.up, self.error = True, None

    def failed(self, now: float, error: BaseException) -> None:
        """Mark the server down after a sweep's connection failure, retried after a doubling
        backoff; logged once per change. A server loading its dataset is up, not down: no backoff
        (its callers retry soon)."""
        if isinstance(error, redis.exceptions.BusyLoadingError):
            return
        with self._lock:
            self._down(error)
            self.retry_at = now + self.backoff_s
            self.backoff_s = min(self.backoff_s * 2, BACKOFF_MAX_S)

    def unreachable(self, error: BaseException) -> None:
        """Mark the server down when another call (the heartbeat, discovery) could not reach it,
        logged once, but the sweeps' backoff untouched: the next sweep is tried, and its failure
        counted, when it is due (a heartbeat failing every beat held every sweep back)."""
        if isinstance(error, redis.exceptions.BusyLoadingError):
            return
        with self._lock:
            self._down(error)

    def _down(self, error: BaseException) -> None:
        """Mark the server down, logged when it goes down and again when the error changes (a
        refused connection, then a refused authentication). Hold the lock."""
        said = str(error) or type(error).__name__
        hint = mismatch(scheme_of(self.client), error)
        said += f"; {hint}" if hint else ""
        if self.up is not False or said != self.error:
            log.warning("redis_down", node=self.name, error=said)
        self.up, self.error = False, said

    def refusing(self, error: SweepError | None) -> None:
        """Mark the server as refusing every sweep (a tick's every call was refused for a reason
        that will not pass by itself: the verb unknown to the server, a command the ACL user
        lacks): not ready until a call goes through (None)."""
        if error is not None and error.reason not in STANDING:
            return
        self.refusal = error

    def with_failed_nodes(self, results: list[CallResult]) -> list[CallResult]:
        """Return the calls' results with CLUSTERDOWN naming the failed nodes (read once for the
        round).
        No redirect reaches here outside --cluster: look() refuses a Cluster node first."""
        down: SweepError | None = None
        judged = []
        for result in results:
            error = result.reply
            if isinstance(error, SweepError) and error.reason is Reason.CLUSTER_DOWN:
                down = down or cluster_down(error, self.client)
                result = CallResult(result.call, down, result.depths)
            judged.append(result)
        return judged

    def state(self) -> NodeState:
        """Return what the series say of it now: up, the run_id and executor it is swept with,
        the restarts seen."""
        executor = self._executor
        return NodeState(
            self.name,
            self.restarts,
            self.up,
            self.run_id.decode() if self.run_id is not None and executor is not None else None,
            executor.name if executor is not None else None,
        )

    def answered_within(self, now: float, seconds: float) -> bool:
        """Tell whether it answered lately, and not as a Cluster node its sweeps refuse (a
        heartbeat it answers does not make it one to sweep)."""
        if self.clustered or self.last_answer is None:
            return False
        return now - self.last_answer <= seconds


def _timed(result: CallResult) -> bool:
    """Tell whether a call says how long it ran: not a brief reply, which found nothing due and
    is timed by nothing but its round trip (no measure of what a call of that size costs)."""
    return result.depths is None or result.depths.run_id is not None
