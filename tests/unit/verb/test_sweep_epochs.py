"""The sweep script's exempt accounting: epochs read by one SORT_RO, paired by rank, where a call
took only recovered ids, and per id elsewhere; the same exempt ids either way. Which path a call
took is read from INFO commandstats (commands a script calls are counted there)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from sweeperd.constants import VERB
from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import connect
from sweeperd.verb.executors import NATIVE, SCRIPT, Executor
from sweeperd.verb.replies import Call, SweepReply
from sweeperd.verb.rounds import sweep_round
from sweeperd.verb.scripts import STALLED_CHECK
from tests.support.helpers import FUTURE_OFFSET_MS, PAST_MS, acl_line, dump_all, now_ms, run_id
from tests.support.servers import RedisServer
from tests.support.targets import Target
from tests.support.topologies import free_bus_port, wait_for

A = QueueKeys("a")
MAX_STALLED = 5  # a row with stalled 4 and the current epoch dies; exempt rows never do
PAGE = 1000  # sweep.lua's EPOCHS_PAGE
USER, PASSWORD = "epochs", "epochs-secret-4417"
WRONG_LIMITS = ["0", "-1", "abc", "9223372036854775808"]  # the last is 2^63


@dataclass
class Backlog:
    """Leases written in rank order and the reply a call taking the first `taken` must give."""

    ids: list[bytes] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    def reply(self, taken: int) -> SweepReply:
        chosen = list(zip(self.ids[:taken], self.kinds[:taken], strict=True))
        return SweepReply(
            tuple(i for i, kind in chosen if kind in ("exempt", "counted")),
            tuple(i for i, kind in chosen if kind == "dead"),
            tuple(i for i, kind in chosen if kind == "exempt"),
            sum(kind == "ghost" for _, kind in chosen),
            ghost_ids=tuple(i for i, kind in chosen if kind == "ghost"),
        )

    def ranks(self, kind: str) -> list[int]:
        return [rank for rank, k in enumerate(self.kinds) if k == kind]

    def recovered_from(self, rank: int, taken: int) -> int:
        """How many ids at ranks rank … taken-1 the call lists as recovered."""
        return sum(kind in ("exempt", "counted") for kind in self.kinds[rank:taken])


CURRENT = "<the server's run_id>"  # a lease_epoch written as the server's own
COUNTED = ("counted", {"attempts": "1"})  # no lease_epoch: counted
COUNTED_NOW = ("counted", {"attempts": "1", "lease_epoch": CURRENT})
EXEMPT = ("exempt", {"attempts": "1", "lease_epoch": "an-earlier-run"})
EXEMPT_SPENT = ("exempt", {"attempts": "1", "stalled": "4", "lease_epoch": "an-earlier-run"})
GHOST: tuple[str, dict[str, str] | None] = ("ghost", None)
DEAD = ("dead", {"attempts": "1", "stalled": "4", "lease_epoch": CURRENT})  # 5th stall: dies
Kinds = list[tuple[str, dict[str, str] | None]]  # the leases' kinds and rows, in turn
# A backlog that all comes back (an exempt row out of stall budget is not judged) ...
RECOVERING: Kinds = [COUNTED, EXEMPT, COUNTED_NOW, EXEMPT_SPENT]
# ... and one of every kind.
MIXED: Kinds = [COUNTED, EXEMPT, COUNTED_NOW, GHOST, COUNTED, DEAD, EXEMPT_SPENT]


def backlog(
    c: redis.Redis, keys: QueueKeys, due: int, later: int = 0, kinds: Kinds = RECOVERING
) -> Backlog:
    """`due` expired leases of the kinds in turn, then `later` leases not due for an hour."""
    made, current = Backlog(), run_id(c)
    pipe = c.pipeline(transaction=False)
    for n in range(due):
        job = f"j{n:05d}".encode()
        kind, fields = kinds[n % len(kinds)]
        if fields is not None and fields.get("lease_epoch") == CURRENT:
            fields = {**fields, "lease_epoch": current.decode()}
        pipe.zadd(keys.active, {job: PAST_MS + n})
        if fields is not None:
            pipe.hset(keys.job(job), mapping=fields)  # type: ignore[arg-type]
        made.ids.append(job)
        made.kinds.append(kind)
    for n in range(later):
        job = f"later{n:05d}".encode()
        pipe.zadd(keys.active, {job: now_ms() + FUTURE_OFFSET_MS})
        pipe.hset(keys.job(job), mapping={"attempts": "1"})
    pipe.execute()
    return made


def calls(c: redis.Redis, command: str, stat: str = "calls") -> int:
    found = c.info("commandstats").get(f"cmdstat_{command}", {})
    return int(found.get(stat, 0)) if isinstance(found, dict) else 0


def row_reads(c: redis.Redis, executor: Executor, reply: SweepReply) -> int:
    """HGETs of job rows: every HGET less the sweep's read of metrics:failed, and the Lua
    port's when a job died."""
    others = 1 + (executor is SCRIPT and bool(reply.dead))
    return calls(c, "hget") - others


def sweep(
    c: redis.Redis,
    executor: Executor,
    limit: int,
    by: redis.Redis | None = None,
    max_stalled: int = MAX_STALLED,
) -> SweepReply:
    """One sweep of A, sent by `by` (default `c`), the script loaded and the command counts reset
    before it."""
    executor.prepare(c)
    c.config_resetstat()
    [result] = sweep_round(by or c, executor, [Call(A, max_stalled, limit)])
    assert isinstance(result.reply, SweepReply), result.reply
    return result.reply


class TestEpochsBySort:
    def test_a_call_reads_its_epochs_in_one_sort(self, on: Target) -> None:
        """500 due leases that all come back (and 50 not due): one SORT_RO, no HGET of a row,
        exempt exactly the rows of another epoch."""
        c, executor = on.client, on.executor
        made = backlog(c, A, 500, later=50)
        reply = sweep(c, executor, 1000)
        assert reply == made.reply(500)
        assert len(reply.exempt) == 250 and len(reply.recovered) == 500
        assert calls(c, "sort_ro") == 1
        assert row_reads(c, executor, reply) == 0

    def test_a_limit_below_the_due_is_what_the_sort_reads(self, on: Target) -> None:
        """A call of limit 200 over 500 due leases: one SORT_RO covers the 200, no HGET."""
        c, executor = on.client, on.executor
        made = backlog(c, A, 500)
        reply = sweep(c, executor, 200)
        assert reply == made.reply(200)
        assert (calls(c, "sort_ro"), row_reads(c, executor, reply)) == (1, 0)

    def test_ghosts_or_deaths_read_each_recovered_id(self, on: Target) -> None:
        """500 due leases of every kind: the verb took ghosts and deaths, so its recovered list
        is not the ranks read, and each recovered id's epoch is read by HGET; exempt exact."""
        c, executor = on.client, on.executor
        made = backlog(c, A, 500, kinds=MIXED)
        reply = sweep(c, executor, 1000)
        assert reply == made.reply(500)
        assert len(reply.exempt) == 143 and reply.ghosts == 71 and len(reply.dead) == 71
        assert calls(c, "sort_ro") == 1
        assert row_reads(c, executor, reply) == len(reply.recovered)

    def test_past_the_page_each_id_is_read_alone(self, on: Target) -> None:
        """A call of limit 1500 over 1500 due leases takes more than the SORT_RO's 1000 ranks:
        every recovered id is read by HGET, exempt exact on both sides of rank 1000."""
        c, executor = on.client, on.executor
        made = backlog(c, A, 1500)
        exempt = made.ranks("exempt")
        assert min(exempt) < PAGE < max(exempt)
        reply = sweep(c, executor, 1500)
        assert reply == made.reply(1500)
        assert calls(c, "sort_ro") == 1
        assert row_reads(c, executor, reply) == 1500

    def test_a_budget_of_one_reads_each_id(self, on: Target) -> None:
        """At max_stalled 1 every counted lease dies, so the recovered ids are the exempt ones
        only: no SORT_RO, an HGET per recovered id."""
        c, executor = on.client, on.executor
        backlog(c, A, 500)
        reply = sweep(c, executor, 1000, max_stalled=1)
        assert len(reply.recovered) == len(reply.exempt) == 250 and len(reply.dead) == 250
        assert calls(c, "sort_ro") == 0
        assert row_reads(c, executor, reply) == 250

    def test_a_small_active_is_not_sorted(self, on: Target) -> None:
        """An active small enough to be a listpack is read per id: SORT would turn it into a
        skiplist for good."""
        c, executor = on.client, on.executor
        made = backlog(c, A, 20, later=10)
        assert c.object("encoding", A.active) == b"listpack"
        reply = sweep(c, executor, 15)
        assert reply == made.reply(15)
        assert calls(c, "sort_ro") == 0
        assert row_reads(c, executor, reply) == len(reply.recovered)
        assert c.object("encoding", A.active) == b"listpack"

    @pytest.mark.parametrize("limit", WRONG_LIMITS)
    def test_a_wrong_limit_is_the_verbs_refusal_and_sorts_nothing(
        self, on: Target, limit: str
    ) -> None:
        """A limit the verb refuses: the verb's own error, every key's DUMP unchanged, no SORT."""
        c, executor = on.client, on.executor
        backlog(c, A, 300)
        own = verb_refusal(c, executor, limit)
        before = dump_all(c)
        executor.prepare(c)
        c.config_resetstat()
        verdict, _stats = c.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA",
            executor.script.sha,
            4,
            A.active,
            A.pending,
            A.dead,
            A.metrics_failed,
            A.prefix,
            MAX_STALLED,
            limit,
            0,
            0,
        )
        assert type(verdict) is type(own) and str(verdict) == str(own)
        assert dump_all(c) == before
        assert calls(c, "sort_ro") == 0


def verb_refusal(c: redis.Redis, executor: Executor, limit: str) -> redis.ResponseError:
    """The error the verb itself (the module's, or the Lua port alone) gives `limit`."""
    args: list[str | int] = [A.active, A.pending, A.dead, A.prefix, MAX_STALLED, limit]
    try:
        if executor is NATIVE:
            c.execute_command(VERB, *args)  # type: ignore[no-untyped-call]
        else:
            STALLED_CHECK.load(c)
            c.evalsha(STALLED_CHECK.sha, 3, *args)
    except redis.ResponseError as error:
        return error
    raise AssertionError(f"the verb took limit {limit!r}")


@pytest.fixture
def as_user(on: Target) -> Iterator[Callable[[str], redis.Redis]]:
    """Makes the ACL user from a SETUSER line and gives a client of it, connected as sweeperd
    connects; deleted after the test."""
    made: list[redis.Redis] = []

    def make(line: str) -> redis.Redis:
        on.client.execute_command(*line.split())  # type: ignore[no-untyped-call]
        on.client.acl_log_reset()
        url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{on.server.port}/0"
        made.append(connect(url, socket_timeout=10))
        return made[-1]

    yield make
    for client in made:
        client.close()
    on.client.acl_deluser(USER)


def least_privilege(executor: Executor) -> str:
    return acl_line("--executor", executor.name, user=USER, password=PASSWORD)


class TestEpochsPerId:
    def test_the_least_privilege_user_reads_each_id(
        self, on: Target, as_user: Callable[[str], redis.Redis]
    ) -> None:
        """The documented user (no +sort_ro): each recovered id's epoch by HGET, exempt exact, no
        SORT sent and the ACL LOG empty."""
        c, executor = on.client, on.executor
        user = as_user(least_privilege(executor))
        made = backlog(c, A, 500)
        reply = sweep(c, executor, 1000, by=user)
        assert reply == made.reply(500)
        assert calls(c, "sort_ro") == 0
        assert row_reads(c, executor, reply) == len(reply.recovered)
        assert c.acl_log() == []

    def test_a_user_that_may_not_read_every_key_is_refused_quietly(
        self, on: Target, as_user: Callable[[str], redis.Redis]
    ) -> None:
        """A user with +sort_ro but keys limited to the root: SORT refuses its GET (which
        redis.acl_check_cmd allows), each id is read by HGET, exempt exact, the ACL LOG empty."""
        c, executor = on.client, on.executor
        user = as_user(least_privilege(executor) + " +sort_ro +object|encoding")
        made = backlog(c, A, 500)
        reply = sweep(c, executor, 1000, by=user)
        assert reply == made.reply(500)
        assert calls(c, "sort_ro", "failed_calls") == 1
        assert row_reads(c, executor, reply) == len(reply.recovered)
        assert c.acl_log() == []

    def test_a_user_that_may_read_every_key_sorts(
        self, on: Target, as_user: Callable[[str], redis.Redis]
    ) -> None:
        """The least-privilege user given %R~*, +sort_ro and +object|encoding: one SORT_RO, no
        HGET of a row, exempt exact."""
        c, executor = on.client, on.executor
        user = as_user(least_privilege(executor) + " %R~* +sort_ro +object|encoding")
        made = backlog(c, A, 500)
        reply = sweep(c, executor, 1000, by=user)
        assert reply == made.reply(500)
        assert (calls(c, "sort_ro"), calls(c, "sort_ro", "failed_calls")) == (1, 0)
        assert row_reads(c, executor, reply) == 0
        assert c.acl_log() == []


@pytest.fixture(scope="module")
def cluster_node(
    server_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """A one-node Cluster (every slot its own) with the module loaded."""
    workdir: Path = tmp_path_factory.mktemp(f"{server_kind}-cluster-node")
    extra = {"cluster-enabled": "yes", "cluster-config-file": str(workdir / "nodes.conf")}
    with RedisServer(workdir, kind=server_kind, port=free_bus_port(), extra=extra) as server:
        with server.client() as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            wait_for(lambda: b"cluster_state:ok" in cluster_info(client), "cluster_state:ok")
        yield server


def cluster_info(client: redis.Redis) -> bytes:
    raw = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
    return raw if isinstance(raw, bytes) else str(raw).encode()


class TestEpochsOnACluster:
    @pytest.mark.parametrize("executor", [NATIVE, SCRIPT], ids=["native", "script"])
    def test_a_cluster_node_reads_each_id(
        self, cluster_node: RedisServer, executor: Executor
    ) -> None:
        """On a Redis 7.0 Cluster node SORT refuses GET: each id is read by HGET; Valkey 9 lets
        a GET pattern of the sorted key's own slot through: one SORT_RO. Exempt exact on both."""
        with cluster_node.client() as c:
            c.flushall()
            made = backlog(c, A, 500)
            reply = sweep(c, executor, 1000)
            assert reply == made.reply(500)
            sorts = (calls(c, "sort_ro"), calls(c, "sort_ro", "failed_calls"))
            read_by_hget = row_reads(c, executor, reply)
        assert (sorts, read_by_hget) == {
            "redis": ((1, 1), len(reply.recovered)),
            "valkey": ((1, 0), 0),
        }[cluster_node.kind]
