"""The daemon's background audit (--audit-every) and its eviction watch, on real servers: the
findings exported per queue and class, and a server that may evict keys said aloud."""

from __future__ import annotations

from pathlib import Path

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import Job, clean, plant, planted
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import tracked_keys
from tests.support.invoke import sweeperd
from tests.support.servers import RedisServer

Q = QueueKeys("q")


class TestBackgroundAudit:
    """--audit-every: the owned queues audited, the findings exported."""

    def test_findings_exported_per_queue_and_class(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """Each class found in the owned queue is a series with its count; a clean queue has
        none; the completion time is exported, and the findings logged."""
        expected = plant(r, Q, [j for j in planted() if j.job_id not in ("expired", "ghost")])
        plant(r, QueueKeys("fine"), clean())
        args = ("--queue", "q", "--queue", "fine", "--audit-every", "1", "--interval", "3600")
        with DaemonProcess(tmp_path, "--redis-url", redis_server.url, *args) as daemon:
            wait_until(
                lambda: daemon.value("sweeperd_audit_last_completed_timestamp_seconds") is not None,
                what="an audit completed",
            )
            text = daemon.metrics_text()
            [found] = daemon.events("audit_findings")
            assert daemon.events("audit_completed")
        series = {
            line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("sweeperd_audit_findings{")
        }
        assert series == {f'class="{c}",queue="q"': len(ids) for c, ids in expected.items()}
        assert found["queue"] == "q"
        assert found["counts"] == {c: len(ids) for c, ids in expected.items()}

    def test_the_rows_it_reads_are_not_tracked(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """The audit reads every row on connections of its own, outside the source of
        deadlines' tracking: the server tracks the sweeps' keys (a handful), not 300 rows."""
        plant(r, Q, [Job(f"j{n}", {"state": "pending"}, {"pending": n}) for n in range(300)])
        args = ("--queue", "q", "--audit-every", "1", "--interval", "3600")
        with DaemonProcess(tmp_path, "--redis-url", redis_server.url, *args) as daemon:
            wait_until(
                lambda: daemon.value("sweeperd_audit_last_completed_timestamp_seconds") is not None,
                what="an audit completed",
            )
            daemon.wait_value("sweeperd_deadline_source", 1, node=redis_server.node)
            tracked = tracked_keys(r)
        assert 1 <= tracked < 20

    def test_off_by_default(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """Without --audit-every no audit runs: no finding series, no completion time."""
        plant(r, Q, [Job("lost", {"state": "active"})])
        with DaemonProcess(tmp_path, "--redis-url", redis_server.url, "--queue", "q") as daemon:
            daemon.wait_swept("q")
            assert daemon.value("sweeperd_audit_last_completed_timestamp_seconds") is None
            assert "sweeperd_audit_findings{" not in daemon.metrics_text()
            assert daemon.events("audit_completed") == []


class TestEvictionWatch:
    """A server whose maxmemory-policy may evict a queue's keys is said aloud."""

    def test_allkeys_lru_is_warned_and_exported(self, server_kind: str, tmp_path: Path) -> None:
        """On a server started with allkeys-lru: one warning naming the node and the policy,
        sweeperd_server_may_evict 1, and evicted_keys counted once memory runs out."""
        extra = {"maxmemory-policy": "allkeys-lru", "maxmemory": "8mb"}
        with RedisServer(tmp_path / "server", kind=server_kind, extra=extra) as server:
            client = server.client()
            labels = {"node": server.node, "policy": "allkeys-lru"}
            args = ("--queue", "q", "--interval", "0.5")
            with DaemonProcess(tmp_path, "--redis-url", server.url, *args) as daemon:
                daemon.wait_value("sweeperd_server_may_evict", 1, **labels)
                for n in range(40):  # 40 MB into 8: keys are evicted
                    client.set(f"filler:{n}", b"x" * 1_000_000)
                wait_until(
                    lambda: (
                        (daemon.value("sweeperd_server_evicted_keys_total", node=server.node) or 0)
                        > 0
                    ),
                    what="evicted keys counted",
                )
                warned = daemon.events("server_may_evict")
            client.close()
        assert [(e["node"], e["policy"]) for e in warned] == [(server.node, "allkeys-lru")]

    def test_inspect_top_and_audit_say_it(self, server_kind: str, tmp_path: Path) -> None:
        """inspect ends with a warning line and says the policy in --json; top marks the
        server's line; audit says it under its table and in --json."""
        extra = {"maxmemory-policy": "allkeys-lru"}
        with RedisServer(tmp_path / "server", kind=server_kind, extra=extra) as server:
            text = sweeperd("inspect", "-q", "q", "--redis-url", server.url)
            body = sweeperd("inspect", "-q", "q", "--redis-url", server.url, "--json").json()
            audited = sweeperd("audit", "--redis-url", server.url, "--json").json()
            said = sweeperd("audit", "--redis-url", server.url).out
            top = ("top", "-q", "q", "--redis-url", server.url, "--once", "--interval", "0.1")
            viewed = sweeperd(*top, env={"COLUMNS": "200"}).out
            [seen] = sweeperd(*top, "--json").json()["servers"]
        assert "MAY EVICT queue keys (allkeys-lru)" in viewed
        assert seen["maxmemory_policy"] == "allkeys-lru"
        assert text.out.splitlines()[-1] == (
            "warning    the server has maxmemory-policy allkeys-lru: under memory pressure it "
            "may evict a queue's sets or rows, losing jobs without a word; set noeviction "
            "(docs/operations.md#alerts)"
        )
        assert body["maxmemory_policy"] == "allkeys-lru"
        assert audited["may_evict"] == {server.node: "allkeys-lru"}
        assert f"warning: {server.node} has maxmemory-policy allkeys-lru" in said

    def test_noeviction_is_quiet(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """The default policy: may_evict 0 under its own policy label, no warning."""
        policy = r.config_get("maxmemory-policy")["maxmemory-policy"]
        with DaemonProcess(tmp_path, "--redis-url", redis_server.url, "--queue", "q") as daemon:
            daemon.wait_value(
                "sweeperd_server_may_evict", 0, node=redis_server.node, policy=str(policy)
            )
            assert daemon.events("server_may_evict") == []
