"""sweeperd behind Sentinel (a primary, its replica, three Sentinels): it follows the primary
Sentinel names, and a failover is an epoch change: counted, logged, its leases exempt."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess
from tests.support.helpers import FUTURE_OFFSET_MS, PAST_MS, now_ms
from tests.support.invoke import sweeperd
from tests.support.servers import RedisServer
from tests.support.topologies import MASTER, SentinelGroup, write_leases

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
        within seconds, every lease back once and exempt."""
        with daemon(tmp_path, fresh, executor) as d:
            d.wait_swept(QUEUE)
            victim = fresh.current()
            ids = seed(victim, 6, now_ms() + 300, run_id_of(victim))
            killed_at = time.monotonic()
            fresh.kill()
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


class TestTop:
    def test_top_reads_the_primary_sentinel_names(self, fresh: SentinelGroup) -> None:
        """top --sentinel shows the primary Sentinel names, its role and the queue's backlog;
        the URL's host is not used."""
        primary = fresh.current()
        seed(primary, 3, PAST_MS, None)
        shown = sweeperd(
            "top",
            "--sentinel",
            fresh.addresses,
            "--sentinel-master",
            MASTER,
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "--json",
            "--interval",
            "0.1",
        )
        assert shown.code == 0, shown.err
        body = shown.json()
        [server] = body["servers"]
        assert (server["node"], server["role"]) == (primary.node, "master")
        assert [(r["queue"], r["expired"]) for r in body["rows"]] == [(QUEUE, 3)]
