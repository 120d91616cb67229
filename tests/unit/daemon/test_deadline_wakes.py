"""`sweeperd run` as a process sweeping each queue at its deadline, with an interval of a minute
that could explain none of it: a lease back within moments of its deadline, a renewed one left
alone until its new deadline, one taken earlier than the deadline known found by the interval;
through a server restart, a SIGSTOP and a drain; two replicas, each queue woken by its owner
alone. Each lease is seeded once the daemon runs, and read by the sweep of every queue a SIGHUP
makes (so no test waits on how fast the daemon starts, and each passes through a reload)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import dump_all, lease, owned_by, run_id, server_ms
from tests.support.node_rig import seed
from tests.support.servers import RedisServer
from tests.support.targets import Target

Q = QueueKeys("q")
INTERVAL_S = 60.0  # the longest a queue goes unswept: nothing here waits for it
DUE_S = 3.0  # a lease falls due this long after it is seeded (and read by the next sweep)
BACK_S = 20.0  # it comes back within this of its deadline (a round trip, on a quiet machine)
BEFORE_INTERVAL_S = 0.8 * INTERVAL_S  # sooner than this after the start, only a wake explains it


def daemon(workdir: Path, url: str, executor: str, *args: str) -> DaemonProcess:
    return DaemonProcess(
        workdir,
        *("--redis-url", url, "--executor", executor, "--queue", Q.queue),
        *("--interval", f"{INTERVAL_S:g}", "--jitter", "0", "--shard", "off"),
        *("--max-stalled", "5"),  # back to pending: nothing dies
        *args,
    )


@contextmanager
def sweeping(
    workdir: Path, url: str, executor: str, *args: str
) -> Iterator[tuple[DaemonProcess, float]]:
    """The daemon, its queue swept once; with when it started (monotonic)."""
    started = time.monotonic()
    with daemon(workdir, url, executor, *args) as d:
        d.wait_swept(Q.queue)
        yield d, started


def due_in(c: redis.Redis, seconds: float) -> int:
    """A deadline `seconds` from now on the server's clock (ms)."""
    return server_ms(c) + int(seconds * 1000)


def back(c: redis.Redis, job: bytes) -> bool:
    return c.zscore(Q.pending, job) is not None


def sweeps(d: DaemonProcess) -> float:
    return d.total("sweeperd_sweeps_total")


def read_now(d: DaemonProcess, c: redis.Redis, deadline_ms: int) -> None:
    """SIGHUP: every queue swept at once, before `deadline_ms`, so that the daemon knows the
    leases seeded since its start."""
    before = sweeps(d)
    assert d.process is not None
    d.process.send_signal(signal.SIGHUP)
    wait_until(lambda: sweeps(d) > before, what="every queue swept after the SIGHUP")
    assert server_ms(c) < deadline_ms, "swept after the deadline: a slow machine"


def back_by_its_deadline(c: redis.Redis, job: bytes, deadline_ms: int, started: float) -> None:
    """The lease comes back after its deadline, within BACK_S of it, and sooner after the start
    than the interval could have brought it."""
    wait_until(lambda: back(c, job), DUE_S + BACK_S, f"{job!r} back in pending")
    assert server_ms(c) >= deadline_ms
    assert time.monotonic() - started < BEFORE_INTERVAL_S


class TestAtTheDeadline:
    def test_a_lease_comes_back_at_its_deadline(self, on: Target, workdir: Path) -> None:
        """A lease due seconds from now on a queue swept every minute comes back at its
        deadline, counted once, its delay observed in the daemon's histogram."""
        c = on.client
        with sweeping(workdir, on.server.url, on.executor.name) as (d, started):
            deadline = due_in(c, DUE_S)
            lease(c, Q, b"j", deadline, attempts="1")
            read_now(d, c, deadline)
            back_by_its_deadline(c, b"j", deadline, started)
            d.wait_value("sweeperd_recovered_total", 1, queue=Q.queue)
            assert d.total("sweeperd_recovery_delay_seconds_count") == 1
            assert d.total("sweeperd_schedule_overruns_total") == 0
            assert d.stop() == 0
        assert c.hget(Q.job(b"j"), "stalled") == b"1"

    def test_a_renewed_lease_waits_for_its_new_deadline(self, on: Target, workdir: Path) -> None:
        """A lease renewed before its deadline, unheard (--deadline-source off): the wake at the
        old one finds nothing and writes nothing (neither swept nor counted); the lease comes
        back at its new one. Heard, the renewal re-arms the wake: test_deadline_source."""
        c = on.client
        off = ("--deadline-source", "off")
        with sweeping(workdir, on.server.url, on.executor.name, *off) as (d, started):
            deadline = due_in(c, DUE_S)
            lease(c, Q, b"j", deadline, attempts="1")
            read_now(d, c, deadline)
            renewed = deadline + 3_000
            c.zadd(Q.active, {b"j": renewed}, xx=True)
            assert server_ms(c) < deadline, "renewed after the deadline: a slow machine"
            before, swept = dump_all(c), sweeps(d)
            wait_until(lambda: sweeps(d) > swept, DUE_S + BACK_S, "the wake at the old deadline")
            if server_ms(c) < renewed:  # the wake came before the new deadline, as it should
                assert dump_all(c) == before
            assert d.value("sweeperd_recovered_total", queue=Q.queue) == 0
            back_by_its_deadline(c, b"j", renewed, started)
            d.wait_value("sweeperd_recovered_total", 1, queue=Q.queue)
            assert d.stop() == 0

    def test_a_lease_earlier_than_the_deadline_known_comes_at_the_interval(
        self, on: Target, workdir: Path
    ) -> None:
        """A lease taken after the last sweep, due before the deadline that sweep read, unheard
        (--deadline-source off), is not waited for until then: the interval (2 s here) brings
        it back."""
        c = on.client
        known = due_in(c, 600)
        lease(c, Q, b"known", known, attempts="1")
        args = ("--interval", "2", "--deadline-source", "off")
        with sweeping(workdir, on.server.url, on.executor.name, *args) as (d, _):
            added = time.monotonic()
            lease(c, Q, b"earlier", due_in(c, 0.2), attempts="1")
            wait_until(lambda: back(c, b"earlier"), BACK_S, "the earlier lease back")
            assert time.monotonic() - added < BACK_S
            assert c.zscore(Q.active, b"known") == known
            assert d.stop() == 0


class TestKept:
    def test_a_restart_brings_leases_back_exempt_at_their_deadline(
        self, server_kind: str, workdir: Path
    ) -> None:
        """A server restarted before a lease falls due: the wake's reply says another run,
        the restart is counted and the lease comes back at its deadline, exempt."""
        with RedisServer(workdir / "server", kind=server_kind, appendonly=True) as server:
            c = server.client()
            with sweeping(workdir, server.url, "native") as (d, started):
                deadline = due_in(c, DUE_S + 1)
                lease(c, Q, b"j", deadline, attempts="1", lease_epoch=run_id(c).decode())
                read_now(d, c, deadline)
                server.restart()
                c = server.client()
                back_by_its_deadline(c, b"j", deadline, started)
                d.wait_value("sweeperd_exempt_total", 1, queue=Q.queue)
                d.wait_value("sweeperd_server_restarts_total", 1, node=server.node)
                assert d.stop() == 0
            assert c.hget(Q.job(b"j"), "stalled") is None

    def test_a_stopped_daemon_wakes_late_once(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """Stopped (SIGSTOP) across a deadline: continued, it sweeps the lease at once, not at
        the interval."""
        with sweeping(workdir, redis_server.url, "native") as (d, started):
            deadline = due_in(r, DUE_S)
            lease(r, Q, b"j", deadline, attempts="1")
            read_now(d, r, deadline)
            assert d.process is not None
            d.process.send_signal(signal.SIGSTOP)
            wait_until(lambda: server_ms(r) > deadline + 500, BACK_S, "past the deadline")
            assert not back(r, b"j")
            d.process.send_signal(signal.SIGCONT)
            back_by_its_deadline(r, b"j", deadline, started)
            assert d.stop() == 0

    def test_a_drained_queue_is_woken_at_its_next_deadline(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """A backlog drained at once; the lease left, due later, comes back at its deadline."""
        with sweeping(workdir, redis_server.url, "native") as (d, started):
            seed(r, Q, 3_000)
            deadline = due_in(r, DUE_S + 2)
            lease(r, Q, b"live", deadline, attempts="1")
            read_now(d, r, deadline)
            d.wait_value("sweeperd_recovered_total", 3_000, queue=Q.queue)
            assert not back(r, b"live")
            back_by_its_deadline(r, b"live", deadline, started)
            d.wait_value("sweeperd_recovered_total", 3_001, queue=Q.queue)
            assert d.stop() == 0


class TestReplicas:
    def test_each_queue_is_woken_by_its_owner_alone(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """Two replicas share twenty queues, each with a lease falling due within seconds of
        the two settling: every lease comes back at its deadline once, recovered by its queue's
        owner (its wake), never by the other (which owned every queue for a moment, alone)."""
        queues = [f"w{n:02}" for n in range(20)]
        common = ["--redis-url", redis_server.url, "--executor", "native", "--max-stalled", "5"]
        common += ["--interval", f"{INTERVAL_S:g}", "--heartbeat", "1", "--queue", ",".join(queues)]
        started = time.monotonic()
        with (
            DaemonProcess(workdir, *common, "--instance-id", "a") as a,
            DaemonProcess(workdir, *common, "--instance-id", "b") as b,
        ):
            wait_until(
                lambda: (
                    all(d.value("sweeperd_members") == 2 for d in (a, b))
                    and sum(d.value("sweeperd_owned_queues") or 0 for d in (a, b)) == len(queues)
                ),
                what="the two sharing the queues",
            )
            deadlines = {q: due_in(r, DUE_S + n % 4) for n, q in enumerate(queues)}
            for q, deadline in deadlines.items():
                lease(r, QueueKeys(q), b"j", deadline, attempts="1")
            for d in (a, b):
                read_now(d, r, min(deadlines.values()))
            wait_until(
                lambda: all(r.zscore(QueueKeys(q).pending, b"j") is not None for q in queues),
                DUE_S + 4 + BACK_S,
                "every lease back",
            )
            assert time.monotonic() - started < BEFORE_INTERVAL_S
            assert server_ms(r) >= max(deadlines.values())
            owners = {m: set(owned_by(m, queues, {"a", "b"})) for m in ("a", "b")}
            assert owners["a"] and owners["b"]
            for member, d in (("a", a), ("b", b)):
                for q in queues:
                    got = d.value("sweeperd_recovered_total", queue=q) or 0
                    assert got == (1 if q in owners[member] else 0), (member, q)
            assert a.stop() == 0 and b.stop() == 0
