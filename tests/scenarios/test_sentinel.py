"""sweeperd behind Sentinel (a primary, its replica, three Sentinels): it follows the primary
Sentinel names, and a failover is an epoch change: counted, logged, its leases exempt."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import clean, plant, planted
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import (
    FUTURE_OFFSET_MS,
    PAST_MS,
    lease,
    now_ms,
    server_ms,
    tracked_keys,
)
from tests.support.invoke import Ran, sweeperd
from tests.support.servers import RedisServer
from tests.support.topologies import (
    DOWN_AFTER_MS,
    MASTER,
    SentinelGroup,
    wait_for,
    write_leases,
)

EXECUTORS = ["native", "script"]
FAST = ("--interval", "0.3", "--jitter", "0", "--max-stalled", "1000", "--socket-timeout", "1")
QUEUE = "follow"
KEYS = QueueKeys(QUEUE)


@pytest.fixture(scope="module")
def group(server_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    """One primary, replica and Sentinels for the module's tests."""
    workdir = tmp_path_factory.mktemp(f"{server_kind}-sentinel")
    with SentinelGroup(workdir, kind=server_kind) as made:
        yield made


@pytest.fixture
def fresh(group: SentinelGroup) -> SentinelGroup:
    """The group settled, its keyspace and script caches empty."""
    group.settle()
    with group.current().client() as c:
        c.flushall()
        c.script_flush()
        c.execute_command("WAIT", 1, 2000)
    with group.other().client() as c:
        c.script_flush()
    return group


def run_id_of(server: RedisServer) -> bytes:
    with server.client() as c:
        return str(c.info("server")["run_id"]).encode()


def seed(server: RedisServer, count: int, deadline_ms: int, epoch: bytes | None) -> list[bytes]:
    """`count` leases with rows on the primary, replicated before it returns."""
    ids = [f"job-{n}".encode() for n in range(count)]
    with server.client() as c:
        write_leases(c, KEYS, ids, deadline_ms, epoch)
    return ids


def daemon(tmp_path: Path, group: SentinelGroup, executor: str) -> DaemonProcess:
    return DaemonProcess(
        tmp_path,
        "--sentinel",
        group.addresses,
        "--sentinel-master",
        MASTER,
        "--queue",
        QUEUE,
        "--executor",
        executor,
        *FAST,
    )


def settled_keyspace(server: RedisServer) -> tuple[int, list[bytes], int, list[dict[bytes, bytes]]]:
    with server.client() as c:
        pending = sorted(c.zrange(KEYS.pending, 0, -1))
        rows = [c.hgetall(KEYS.job(job)) for job in pending]
        return c.zcard(KEYS.active), pending, c.zcard(KEYS.dead), rows


class TestSentinel:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_sweeps_the_primary_sentinel_names(
        self, fresh: SentinelGroup, tmp_path: Path, executor: str
    ) -> None:
        """The daemon sweeps the primary Sentinel names; its URL's host is not used."""
        primary = fresh.current()
        ids = seed(primary, 4, PAST_MS, None)
        with daemon(tmp_path, fresh, executor) as d:
            d.wait_value("sweeperd_recovered_total", 4, queue=QUEUE)
            assert d.value("sweeperd_redis_up", node=primary.node) == 1
            assert d.value("sweeperd_server_info", node=primary.node, executor=executor) == 1
            assert d.stop() == 0
        active, pending, dead, rows = settled_keyspace(primary)
        assert (active, pending, dead) == (0, sorted(ids), 0)
        assert all(row[b"stalled"] == b"1" for row in rows)

    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_sentinel_failover(self, fresh: SentinelGroup, tmp_path: Path, executor: str) -> None:
        """SENTINEL FAILOVER: the daemon moves to the new primary, counts the failover there
        once, and the old primary's leases come back exempt, each once."""
        old = fresh.current()
        old_run_id = run_id_of(old)
        ids = seed(old, 5, now_ms() + FUTURE_OFFSET_MS, old_run_id)
        with daemon(tmp_path, fresh, executor) as d:
            d.wait_swept(QUEUE)
            fresh.failover()
            new = fresh.current()
            d.wait_value("sweeperd_server_restarts_total", 1, node=new.node)
            with new.client() as c:
                c.zadd(KEYS.active, dict.fromkeys(ids, PAST_MS), xx=True)
            d.wait_value("sweeperd_recovered_total", 5, queue=QUEUE)
            assert d.value("sweeperd_exempt_total", queue=QUEUE) == 5
            [event] = d.events("server_restarted")
            assert d.stop() == 0
        assert (event["reason"], event["previous_node"]) == ("failover", old.node)
        assert event["old_run_id"] == old_run_id.decode()
        active, pending, dead, rows = settled_keyspace(new)
        assert (active, pending, dead) == (0, sorted(ids), 0)
        assert all(b"stalled" not in row and row[b"state"] == b"pending" for row in rows)

    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_kill_9_of_the_primary(
        self, fresh: SentinelGroup, tmp_path: Path, executor: str
    ) -> None:
        """kill -9 of the primary: Sentinel promotes the replica, the daemon sweeps there
        within seconds, every lease back once and exempt. The leases fall due only on the new
        primary (the dead one never sweeps them, however late the kill comes)."""
        with daemon(tmp_path, fresh, executor) as d:
            d.wait_swept(QUEUE)
            victim = fresh.current()
            ids = seed(victim, 6, now_ms() + FUTURE_OFFSET_MS, run_id_of(victim))
            with fresh.other().client() as c:  # WAIT gives up after 2 s on a loaded machine
                wait_until(lambda: c.zcard(KEYS.active) == len(ids), what="leases replicated")
            killed_at = time.monotonic()
            fresh.kill()
            wait_until(
                lambda: fresh.current() is not victim and fresh.role(fresh.current()) == "master",
                what="the replica promoted",
            )
            with fresh.current().client() as c:
                c.zadd(KEYS.active, dict.fromkeys(ids, PAST_MS), xx=True)
            d.wait_value("sweeperd_recovered_total", 6, queue=QUEUE)
            print(
                f"\nSentinel: kill -9 to the leases swept on the new primary ({executor}): "
                f"{time.monotonic() - killed_at:.2f} s"
            )
            assert d.value("sweeperd_exempt_total", queue=QUEUE) == 6
            new = fresh.current()
            assert new is not victim
            assert d.value("sweeperd_server_restarts_total", node=new.node) == 1
            assert d.stop() == 0
        active, pending, dead, rows = settled_keyspace(new)
        assert (active, pending, dead) == (0, sorted(ids), 0)
        assert all(b"stalled" not in row for row in rows)


class TestHeard:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_a_new_lease_is_heard_on_the_new_primary(
        self, fresh: SentinelGroup, tmp_path: Path, executor: str
    ) -> None:
        """At --interval 60, after a Sentinel failover: the source of deadlines listens to the
        new primary, and a lease taken there, due half a second later, is back at its deadline,
        long before the interval."""
        started = time.monotonic()
        args = ("--interval", "60", "--jitter", "0", "--max-stalled", "5", "--socket-timeout", "1")
        with DaemonProcess(
            tmp_path,
            *("--sentinel", fresh.addresses, "--sentinel-master", MASTER, "--queue", QUEUE),
            *("--executor", executor, *args),
        ) as d:
            d.wait_swept(QUEUE)
            d.wait_value("sweeperd_deadline_source", 1, node=fresh.current().node)
            fresh.failover()
            new = fresh.current()
            d.wait_value("sweeperd_deadline_source", 1, node=new.node)
            with new.client() as c:
                wait_until(
                    lambda: tracked_keys(c) >= 1,
                    what="the queue's active set tracked on the new primary",
                )
                deadline = server_ms(c) + 500
                lease(c, KEYS, b"j", deadline, attempts="1")
                wait_until(lambda: c.zscore(KEYS.pending, b"j") is not None, what="j back")
                assert server_ms(c) >= deadline
                assert c.hget(KEYS.job(b"j"), "stalled") == b"1"
            assert time.monotonic() - started < 48, "back only at the interval"
            d.wait_value("sweeperd_recovered_total", 1, queue=QUEUE)
            assert d.stop() == 0


def top_once(group: SentinelGroup, *args: str) -> Ran:
    """`sweeperd top --once --sentinel` with a URL whose host is not used (port 1)."""
    return sweeperd(
        "top",
        "--once",
        "--sentinel",
        group.addresses,
        "--sentinel-master",
        MASTER,
        "--redis-url",
        "redis://127.0.0.1:1/0",
        "--interval",
        "0.1",
        *args,
    )


@contextlib.contextmanager
def primary_killed(group: SentinelGroup, replica_too: bool) -> Iterator[RedisServer]:
    """The primary Sentinel names killed, and still named: the Sentinels give it a minute
    before they call it down, so they neither say so nor promote its replica (or the replica
    is stopped too); afterwards both run again, the Sentinels as they were, the group settled."""
    primary, replica = group.current(), group.other()
    wait_for(lambda: listed_up(group, replica), "every Sentinel to list the replica up")
    down_after(group, 60_000)
    try:
        if replica_too:
            replica.stop()
        group.kill()
        yield primary
    finally:
        primary.replicaof, primary.process = None, None
        primary.start()  # the one the Sentinels name still
        down_after(group, DOWN_AFTER_MS)
        group.settle()  # a stopped replica is started again, following it


def down_after(group: SentinelGroup, ms: int) -> None:
    """Every Sentinel's down-after-milliseconds for the primary."""
    for n in range(len(group.sentinel_ports)):
        with group.sentinel_client(n) as c:
            c.execute_command("SENTINEL", "SET", MASTER, "down-after-milliseconds", ms)


def listed_up(group: SentinelGroup, replica: RedisServer) -> bool:
    """Every Sentinel lists `replica` as a replica of the primary, not down (a replica
    restarted by an earlier test is listed down until a Sentinel's next ping gets an answer)."""
    for n in range(len(group.sentinel_ports)):
        with group.sentinel_client(n) as c:
            listed = c.sentinel_slaves(MASTER)
        if not any(
            int(r["port"]) == replica.port and not (r["is_sdown"] or r["is_odown"]) for r in listed
        ):
            return False
    return True


class TestTop:
    def test_top_reads_the_primary_sentinel_names(self, fresh: SentinelGroup) -> None:
        """top --sentinel shows the primary Sentinel names, its role and the queue's backlog;
        the URL's host is not used."""
        primary = fresh.current()
        seed(primary, 3, PAST_MS, None)
        shown = top_once(fresh, "--json")
        assert shown.code == 0, shown.err
        body = shown.json()
        [server] = body["servers"]
        assert (server["node"], server["role"]) == (primary.node, "master")
        assert [(r["queue"], r["expired"]) for r in body["rows"]] == [(QUEUE, 3)]

    def test_dead_primary_read_on_its_replica(self, fresh: SentinelGroup) -> None:
        """The primary Sentinel names is dead and not yet replaced: its line says it cannot be
        reached, and its queue is read on the replica Sentinel lists, marked so; exit 0."""
        primary, replica = fresh.current(), fresh.other()
        seed(primary, 3, PAST_MS, None)
        with primary_killed(fresh, replica_too=False):
            shown = top_once(fresh, "--json")
        assert (shown.code, shown.err) == (0, "")
        body = shown.json()
        servers = {
            s["node"]: (s["run_id"] != "", s["error"], s["reads_for"]) for s in body["servers"]
        }
        refused = f"Error 111 connecting to {primary.node}. Connection refused."
        assert servers == {
            primary.node: (False, refused, None),
            replica.node: (True, None, primary.node),
        }
        rows = [(r["queue"], r["node"], r["state"], r["expired"]) for r in body["rows"]]
        assert rows == [(QUEUE, replica.node, "replica", 3)]

    def test_nothing_answers(self, fresh: SentinelGroup) -> None:
        """The named primary and its replica both down: nothing to show, exit 3, one line that
        names the primary Sentinel named, not the URL's host."""
        primary = fresh.current()
        with primary_killed(fresh, replica_too=True):
            shown = top_once(fresh)
        assert (shown.code, shown.out, shown.err_lines) == (
            3,
            "",
            [
                f"sweeperd: cannot reach redis://{primary.node}/0: Error 111 connecting to "
                f"{primary.node}. Connection refused"
            ],
        )


def named_by_all(group: SentinelGroup) -> set[int]:
    """The primary's port as each Sentinel names it."""
    named = set()
    for n in range(len(group.sentinel_ports)):
        with group.sentinel_client(n) as c:
            named.add(int(c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)[1]))
    return named


def audit(group: SentinelGroup, *args: str) -> Ran:
    """`sweeperd audit --sentinel --json` with a URL whose host is not used (port 1)."""
    sentinel = ("--sentinel", group.addresses, "--sentinel-master", MASTER)
    url = ("--redis-url", "redis://127.0.0.1:1/0", "--grace", "0", "--json")
    return sweeperd("audit", *sentinel, *url, *args)


def failed_over(group: SentinelGroup) -> bool:
    """SENTINEL FAILOVER, done (a refusal raises: INPROG, NOGOODSLAVE)."""
    group.failover()
    return True


def assert_found_on(group: SentinelGroup, server: RedisServer, expected: object) -> None:
    """The audit reads the queues on `server`: `expected` in the planted queue, none in the
    clean one."""
    ran = audit(group)
    assert ran.code == 1, ran.err
    found = {q["queue"]: (q["node"], q["findings"]) for q in ran.json()["queues"]}
    assert found == {QUEUE: (server.node, expected), "fine": (server.node, {})}


class TestAudit:
    def test_every_class_on_the_primary_sentinel_names(self, fresh: SentinelGroup) -> None:
        """The planted classes found exactly on the primary Sentinel names, the clean queue
        clean; after a failover the same on the promoted replica, where --repair puts the
        stranded jobs back and the verb judges them by its own run_id (exempt for an earlier
        lease_epoch, counted for none)."""
        primary = fresh.current()
        with primary.client() as c:
            planted_ids = plant(c, KEYS, planted())
            plant(c, QueueKeys("fine"), clean())
        fresh.caught_up()
        expected = {c: {"count": len(ids), "ids": ids} for c, ids in planted_ids.items()}
        assert_found_on(fresh, primary, expected)
        wait_for(lambda: listed_up(fresh, fresh.other()), "every Sentinel to list the replica up")
        wait_for(partial(failed_over, fresh), "a failover (refused while one is under way)")
        promoted = fresh.current()
        assert promoted is not primary
        wait_for(lambda: named_by_all(fresh) == {promoted.port}, "every Sentinel to agree")
        assert_found_on(fresh, promoted, expected)
        ran = audit(fresh, "-q", QUEUE, "--repair", "--yes", "--max-stalled", "2")
        [done] = ran.json()["repaired"]
        assert (done["put"], done["exempt"], done["error"]) == (
            ["stranded-1", "stranded-2"],
            ["stranded-2"],
            None,
        )
        assert sorted(done["recovered"]) == ["stranded-1", "stranded-2"]
        with promoted.client() as c:
            assert c.zscore(KEYS.pending, "stranded-1") == c.zscore(KEYS.pending, "stranded-2") == 0
