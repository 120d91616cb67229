"""One server the daemon sweeps: its client, executor, epoch watch, liveness and backoff, and
what its refusals mean where it stands in the topology."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import redis
import structlog

from sweeperd.constants import ExecutorChoice
from sweeperd.metrics.state import NodeState
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.clusternodes import cluster_down
from sweeperd.server.denied import denied, user_of
from sweeperd.server.serverinfo import ServerInfo, read_server_info
from sweeperd.server.topology import clustered_error
from sweeperd.verb.executors import Executor, choose
from sweeperd.verb.replies import CallResult
from sweeperd.verb.rounds import Packed
from sweeperd.verb.sizing import CallSizer

log = structlog.get_logger("sweeperd.node")

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


class NotPrimary(redis.ConnectionError):
    """The server answers but is a replica now: its slots or its name went to another primary."""


@dataclass(frozen=True)
class Epoch:
    """What one look at the server found: its info, and whether it restarted since the last."""

    info: ServerInfo
    executor: Executor
    restarted: bool


@dataclass
class Node:
    """A server and what the daemon knows of it; shared by every batch that sweeps it."""

    name: str
    client: redis.Redis
    choice: ExecutorChoice
    sizer: CallSizer
    run_id: bytes | None = None
    replid: bytes | None = None  # master_replid: a fail-over and back keeps run_id, not this
    primary_only: bool = False  # a replica is refused (Cluster and Sentinel: it was demoted)
    cluster: bool = False  # swept as a Cluster's primary (--cluster), not as one server
    predecessor: str | None = None  # the primary whose epoch this one took over, until looked at
    executor: Executor | None = None
    up: bool | None = None  # None until the first answer or failure
    restarts: int = 0  # run_id (or master_replid) changes seen
    last_answer: float | None = None  # monotonic seconds
    retry_at: float = 0.0
    backoff_s: float = BACKOFF_FIRST_S
    packed: Packed = field(default_factory=Packed, repr=False)  # its rounds' commands, in RESP
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def may_try(self, now: float) -> bool:
        """False while a down server's backoff runs."""
        return self.up is not False or now >= self.retry_at

    def inherit(self, previous: Node) -> None:
        """This new primary took over `previous`'s slots (a failover): its epoch is the one to
        compare with, so that the first look counts the change here."""
        with self.lock:
            self.run_id, self.replid = previous.run_id, previous.replid
            self.predecessor = previous.name

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
        if info.cluster and not self.cluster:
            raise clustered_error(self.name)
        if self.primary_only and info.role != "master":
            raise NotPrimary(f"{self.name} is a {info.role} now, no longer a primary")
        with self.lock:
            restarted = self.run_id is not None and (
                info.run_id != self.run_id
                or (self.replid is not None and info.replid != self.replid)
            )
            if restarted:
                self.changed(info)
            self.run_id, self.replid, self.predecessor = info.run_id, info.replid, None
            self.answered(now)
            if self.executor is None:
                self.executor = self.choose(info)
            return Epoch(info, self.executor, restarted)

    def changed(self, info: ServerInfo) -> None:
        """Another server process, or the same one after a change of role: counted and logged
        once. Hold the lock."""
        failover = self.predecessor is not None or info.run_id == self.run_id
        self.restarts += 1
        log.warning(
            "server_restarted",
            node=self.name,
            reason="failover" if failover else "restart",
            old_run_id=(self.run_id or b"").decode(),
            new_run_id=info.run_id.decode(),
            **({"previous_node": self.predecessor} if self.predecessor else {}),
        )
        self.executor = None  # a module may have been loaded or unloaded; scripts are not copied

    def choose(self, info: ServerInfo) -> Executor:
        """The executor for this run of the server, its scripts loaded; raises for no_verb."""
        executor = choose(self.client, self.choice)
        executor.prepare(self.client)
        log.info("executor_chosen", node=self.name, executor=executor.name, wanted=str(self.choice))
        return executor

    def answered(self, now: float) -> None:
        """The server answered: up, backoff reset; logged once per change. Hold the lock."""
        self.last_answer = now
        self.backoff_s = BACKOFF_FIRST_S
        if self.up is not True:
            log.info("redis_up", node=self.name)
        self.up = True

    def failed(self, now: float, error: BaseException) -> None:
        """A sweep's connection failure: down, retried after a doubling backoff; logged once per
        change. A server loading its dataset is up, not down: no backoff (its callers retry
        soon)."""
        if isinstance(error, redis.exceptions.BusyLoadingError):
            return
        with self.lock:
            self.down(error)
            self.retry_at = now + self.backoff_s
            self.backoff_s = min(self.backoff_s * 2, BACKOFF_MAX_S)

    def unreachable(self, error: BaseException) -> None:
        """Another call (the heartbeat, discovery) could not reach the server: down, logged
        once, but the sweeps' backoff untouched: the next sweep is tried, and its failure
        counted, when it is due (a heartbeat failing every beat held every sweep back)."""
        if isinstance(error, redis.exceptions.BusyLoadingError):
            return
        with self.lock:
            self.down(error)

    def down(self, error: BaseException) -> None:
        """Hold the lock."""
        if self.up is not False:
            log.warning("redis_down", node=self.name, error=str(error))
        self.up = False

    def judged(self, results: list[CallResult]) -> list[CallResult]:
        """The calls' results with CLUSTERDOWN naming the failed nodes (read once for the round).
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
        """What the series say of it now: up, the run_id and executor it is swept with, the
        restarts seen."""
        executor = self.executor
        return NodeState(
            self.name,
            self.restarts,
            self.up,
            self.run_id.decode() if self.run_id is not None and executor is not None else None,
            executor.name if executor is not None else None,
        )

    def answered_within(self, now: float, seconds: float) -> bool:
        return self.last_answer is not None and now - self.last_answer <= seconds
