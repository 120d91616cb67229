"""`sweeperd run` hearing its queues change (`--deadline-source tracking`, the default): a lease
taken after a queue's last sweep, due long before its next, is back at its deadline; the same
after the server is restarted and after the listener's subscriber is made again (the sweeps' own
connections then track to the new one); an idle sweep tracks nothing; a renewed one is neither
swept nor counted; a server or ACL that refuses tracking leaves the interval alone, and the log,
the gauge and `/` say so; one that refuses it (or CLIENT CACHING) on the sweeps' connections only
leaves the sweeps going on, said once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import redis

from sweeperd.fleet.listener import OBSERVED
from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import dump_all, lease, server_ms, tracked_keys
from tests.support.servers import RedisServer
from tests.support.targets import Target

Q = QueueKeys("q")
INTERVAL_S = 60.0  # nothing here waits for it: only a heard change brings a lease back sooner
LEASE_S = 0.5  # a lease taken once the queue is tracked falls due this long after
BACK_S = 20.0  # it comes back within this of its deadline (a round trip, on a quiet machine)
BEFORE_INTERVAL_S = 0.8 * INTERVAL_S  # sooner than this after the start, only a wake explains it
# The keys a whole sweep (a round's first call is sent whole) tracks behind CLIENT CACHING yes,
# nothing due: Redis 7.0 the five the script declares, Valkey 9 the four sets it reads.
SWEEP_TRACKS = {"redis": 5, "valkey": 4}


def daemon(workdir: Path, url: str, executor: str, *args: str) -> DaemonProcess:
    return DaemonProcess(
        workdir,
        *("--redis-url", url, "--executor", executor, "--queue", Q.queue),
        *("--interval", f"{INTERVAL_S:g}", "--jitter", "0", "--shard", "off"),
        *("--max-stalled", "5"),  # back to pending: nothing dies
        *args,
    )


def hearing(d: DaemonProcess, c: redis.Redis, node: str) -> None:
    """Wait until the daemon hears the node and the server tracks the queue's active set."""
    d.wait_value("sweeperd_deadline_source", 1, node=node)
    wait_until(lambda: tracked_keys(c) >= 1, what="the queue's active set tracked")


@contextmanager
def listening(
    workdir: Path, server: RedisServer, c: redis.Redis, executor: str, *args: str
) -> Iterator[tuple[DaemonProcess, float]]:
    """The daemon, its empty queue swept once and tracked; with when it started."""
    started = time.monotonic()
    with daemon(workdir, server.url, executor, *args) as d:
        d.wait_swept(Q.queue)
        hearing(d, c, server.node)
        yield d, started


def subscribers(c: redis.Redis) -> list[int]:
    """The ids of the connections subscribed to a channel: the listener's subscriber."""
    return [int(e["id"]) for e in c.client_list() if "P" in e["flags"]]


def sweeps_tracked_to(c: redis.Redis, subscriber: int) -> bool:
    """Every connection that tracks redirects to `subscriber`, a sweep's among them."""
    tracking = [e for e in c.client_list() if "t" in e["flags"]]
    return all(int(e["redir"]) == subscriber for e in tracking) and any(
        e["cmd"] == "evalsha" for e in tracking
    )


def kill_sweeps(c: redis.Redis) -> None:
    """The daemon's connections that last sent a sweep, closed by the server."""
    for e in c.client_list():
        if e["cmd"] == "evalsha":
            c.client_kill_filter(_id=e["id"])


def reads(d: DaemonProcess) -> float:
    """The earliest deadlines the listener read after a change."""
    return d.total("sweeperd_deadline_reads_total")


def read_after(d: DaemonProcess, change: Callable[[], object]) -> None:
    """A change of the queue, then the listener's read of it."""
    read = reads(d)
    change()
    wait_until(lambda: reads(d) > read, what="the change read")


def swept_more(d: DaemonProcess) -> None:
    """Two sweeps more than now."""
    swept = d.total("sweeperd_sweeps_total")
    wait_until(lambda: d.total("sweeperd_sweeps_total") >= swept + 2, what="two sweeps more")


def user_url(r: redis.Redis, server: RedisServer, name: str, *commands: str) -> str:
    """The server's URL as a user `name` may every key and channel, and `commands`."""
    r.acl_setuser(
        name, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"], commands=list(commands)
    )
    return server.url.replace("redis://", f"redis://{name}:pw@")


def learn_long_leases(d: DaemonProcess, c: redis.Redis) -> None:
    """OBSERVED new earliest leases of 30 s, each read: the primary's leases are known to be
    long, and a change of a queue swept every second is left to its sweep from now on."""
    wait_until(lambda: reads(d) >= 1, what="the queue read once, empty")
    for n in range(OBSERVED):
        read_after(d, lambda: lease(c, Q, b"long", server_ms(c) + 30_000, attempts="1"))
        if n < OBSERVED - 1:
            read_after(d, lambda: c.zrem(Q.active, b"long"))


def back(c: redis.Redis, job: bytes) -> bool:
    return c.zscore(Q.pending, job) is not None


def back_at_its_deadline(
    d: DaemonProcess, c: redis.Redis, job: bytes, deadline_ms: int, started: float | None
) -> None:
    """The lease comes back after its deadline, counted once, and, given the daemon's start at
    INTERVAL_S, sooner after it than the interval could have brought it (None at a 1 s
    interval, where the test's own steps on a loaded machine outlast that bound)."""
    wait_until(lambda: back(c, job), LEASE_S + BACK_S, f"{job!r} back in pending")
    assert server_ms(c) >= deadline_ms
    if started is not None:
        assert time.monotonic() - started < BEFORE_INTERVAL_S
    d.wait_value("sweeperd_recovered_total", 1, queue=Q.queue)
    assert d.total("sweeperd_recovery_delay_seconds_count") == 1


def take(c: redis.Redis, job: bytes) -> int:
    """A lease taken now, due LEASE_S from now on the server's clock (ms)."""
    deadline = server_ms(c) + int(LEASE_S * 1000)
    lease(c, Q, job, deadline, attempts="1")
    return deadline


class TestHeard:
    def test_a_lease_taken_after_the_sweep_is_back_at_its_deadline(
        self, on: Target, workdir: Path
    ) -> None:
        """An empty queue swept, then a lease due half a second later: back at its deadline,
        not at the interval a minute later."""
        c = on.client
        with listening(workdir, on.server, c, on.executor.name) as (d, started):
            deadline = take(c, b"j")
            back_at_its_deadline(d, c, b"j", deadline, started)
            assert d.stop() == 0
        assert c.hget(Q.job(b"j"), "stalled") == b"1"

    def test_a_renewed_lease_is_neither_swept_nor_counted(self, on: Target, workdir: Path) -> None:
        """A lease renewed before its deadline: nothing is written at the old deadline, nothing
        counted; it comes back at its new one."""
        c = on.client
        with listening(workdir, on.server, c, on.executor.name) as (d, started):
            deadline = server_ms(c) + 2_000
            lease(c, Q, b"j", deadline, attempts="1")
            renewed = deadline + 2_000
            c.zadd(Q.active, {b"j": renewed}, xx=True)
            assert server_ms(c) < deadline, "renewed after the deadline: a slow machine"
            before = dump_all(c)
            wait_until(lambda: server_ms(c) > deadline + 300, BACK_S, "past the old deadline")
            if server_ms(c) < renewed:  # still before the new one
                assert dump_all(c) == before
                assert d.value("sweeperd_recovered_total", queue=Q.queue) in (None, 0)
            back_at_its_deadline(d, c, b"j", renewed, started)
            assert d.stop() == 0

    def test_heard_again_after_the_server_restarts(self, server_kind: str, workdir: Path) -> None:
        """The server killed and started again: tracking is made anew (every queue read again),
        and a lease taken then is back at its deadline."""
        with RedisServer(workdir / "server", kind=server_kind, appendonly=True) as server:
            c = server.client()
            with listening(workdir, server, c, "native") as (d, started):
                server.restart()
                c = server.client()
                hearing(d, c, server.node)
                deadline = take(c, b"j")
                back_at_its_deadline(d, c, b"j", deadline, started)
                assert d.stop() == 0

    def test_the_sweeps_track_to_a_subscriber_made_again(self, on: Target, workdir: Path) -> None:
        """The listener's subscriber closed by the server: a new one is made, the sweeps' own
        connections (and the reader) track to it, and a lease taken then is back at its
        deadline."""
        c = on.client
        with listening(workdir, on.server, c, on.executor.name, "--interval", "1") as (d, _):
            [first] = subscribers(c)
            wait_until(lambda: sweeps_tracked_to(c, first), what="the sweeps tracked")
            c.client_kill_filter(_id=str(first))
            wait_until(lambda: subscribers(c) not in ([], [first]), what="a new subscriber")
            [again] = subscribers(c)
            wait_until(lambda: sweeps_tracked_to(c, again), what="the sweeps tracked to it")
            hearing(d, c, on.server.node)
            deadline = take(c, b"j")
            back_at_its_deadline(d, c, b"j", deadline, None)
            assert d.stop() == 0

    def test_an_idle_sweep_tracks_nothing(self, on: Target, workdir: Path) -> None:
        """Swept every second with nothing due: the server tracks the queue's active set (the
        listener's read) and nothing more, sweep after sweep (tracked on every sweep, Redis 7.0
        held the sweep script's five keys, and entered them anew at each call)."""
        c = on.client
        with listening(workdir, on.server, c, on.executor.name, "--interval", "1") as (d, _):
            wait_until(lambda: reads(d) >= 1, what="the queue read once, empty")
            for _ in range(3):
                swept_more(d)
                assert tracked_keys(c) == 1
            assert d.stop() == 0

    def test_a_queue_of_long_leases_is_left_to_its_sweeps(self, on: Target, workdir: Path) -> None:
        """Once the primary's leases are known to be long (30 s, the interval 1 s), a change is
        not read: the queue's next sweep, sent behind CLIENT CACHING yes, reads the new earliest
        deadline and tracks it again. The reads stay where they were while the queue keeps
        changing, and a lease taken then is still back, by its next sweep."""
        c = on.client
        with listening(workdir, on.server, c, on.executor.name, "--interval", "1") as (d, _):
            learn_long_leases(d, c)
            read = reads(d)
            c.zrem(Q.active, b"long")
            for n in range(6):
                lease(c, Q, b"more%d" % n, server_ms(c) + 60_000, attempts="1")
                swept_more(d)
                wait_until(
                    lambda: tracked_keys(c) == SWEEP_TRACKS[on.server.kind],
                    what="the queue tracked again by the sweep the change was left to",
                )
            assert reads(d) == read, "a change of a queue of long leases read"
            deadline = take(c, b"j")
            back_at_its_deadline(d, c, b"j", deadline, None)
            assert reads(d) == read
            assert d.stop() == 0


class TestRefused:
    def test_an_acl_without_tracking_leaves_the_interval_alone_and_says_so(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """A user who may not turn tracking on: said once in the log, 0 in the gauge, `refused`
        on `/`; the interval (2 s here) still brings a lease back."""
        url = user_url(r, redis_server, "notrack", "+@all", "-client|tracking")
        with daemon(workdir, url, "native", "--interval", "2") as d:
            d.wait_swept(Q.queue)
            wait_until(lambda: d.events("deadline_source_refused"), what="the refusal logged")
            assert d.value("sweeperd_deadline_source", node=redis_server.node) == 0
            status, page = d.get("/")
            assert status == 200 and "refused" in page and "interval alone" in page
            lease(r, Q, b"j", server_ms(r) + 200, attempts="1")
            wait_until(lambda: back(r, b"j"), BACK_S, "the lease back at the interval")
            assert len(d.events("deadline_source_refused")) == 1
            assert d.stop() == 0

    def test_sweeps_refused_tracking_go_on_and_say_it_once(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """Tracking taken from the user once the listener tracks: the sweeps' connections made
        again are refused it, said once in the log, and the sweeps go on, uncounted as failures;
        a lease still comes back."""
        url = user_url(r, redis_server, "late", "+@all")
        with daemon(workdir, url, "native", "--interval", "1") as d:
            d.wait_swept(Q.queue)
            hearing(d, r, redis_server.node)
            [subscriber] = subscribers(r)
            wait_until(lambda: sweeps_tracked_to(r, subscriber), what="the sweeps tracked")
            r.acl_setuser("late", enabled=True, commands=["-client|tracking"])
            for _ in range(2):
                kill_sweeps(r)
                wait_until(
                    lambda: d.events("deadline_source_sweeps_untracked"), what="the refusal said"
                )
                swept_more(d)
            assert len(d.events("deadline_source_sweeps_untracked")) == 1
            assert d.total("sweeperd_sweep_failures_total") <= 2, "a killed round at most"
            lease(r, Q, b"j", server_ms(r) + 200, attempts="1")
            wait_until(lambda: back(r, b"j"), BACK_S, "the lease back")
            assert d.stop() == 0

    def test_sweeps_refused_caching_leave_changes_to_the_listener(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """A user without +client|caching (an ACL made for an older sweeperd): the listener
        tracks, but the sweep of a queue left to it is refused its CLIENT CACHING yes; said once,
        the sweep goes on uncounted as a failure, and every change is read from then on."""
        url = user_url(r, redis_server, "nocache", "+@all", "-client|caching")
        with daemon(workdir, url, "native", "--interval", "1") as d:
            d.wait_swept(Q.queue)
            hearing(d, r, redis_server.node)
            learn_long_leases(d, r)
            read = reads(d)
            lease(r, Q, b"more", server_ms(r) + 60_000, attempts="1")
            wait_until(
                lambda: d.events("deadline_source_sweeps_untracked"), what="the refusal said"
            )
            wait_until(lambda: reads(d) > read, what="the change read by the listener")
            for job in (b"again1", b"again2", b"again3"):
                read_after(d, partial(lease, r, Q, job, server_ms(r) + 60_000, attempts="1"))
            assert len(d.events("deadline_source_sweeps_untracked")) == 1
            assert d.total("sweeperd_sweep_failures_total") == 0
            assert d.value("sweeperd_deadline_source", node=redis_server.node) == 1
            assert d.stop() == 0

    def test_off_is_said_too(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """--deadline-source off: no tracking asked for, 0 in the gauge, `off` on `/`."""
        with daemon(workdir, redis_server.url, "native", "--deadline-source", "off") as d:
            d.wait_swept(Q.queue)
            assert d.value("sweeperd_deadline_source", node=redis_server.node) == 0
            status, page = d.get("/")
            assert status == 200 and "deadline source on" in page and ": off" in page
            assert tracked_keys(r) == 0
            assert d.stop() == 0
