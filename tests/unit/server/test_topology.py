"""Topology settings and layouts: cluster and Sentinel options checked once, failovers told
from migrations, a primary's change of role counted as a failover."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs

from sweeperd.config.settings import QueueSettings
from sweeperd.constants import ExecutorChoice, QueueMetrics
from sweeperd.fleet.ledger import Ledger
from sweeperd.fleet.member import Member
from sweeperd.fleet.node import Node, NotPrimary
from sweeperd.fleet.outcome import Outcome
from sweeperd.metrics.numbers import SweepNumbers
from sweeperd.server.connection import connect
from sweeperd.server.topology import Layout, predecessor
from sweeperd.server.urls import url_at
from sweeperd.verb.sizing import CallSizer
from tests.support.built_settings import build, refusal
from tests.support.servers import RedisServer

A, B, C, D = "10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379"


def layout(*owners: str) -> Layout:
    """A cluster layout: the slots shared out in equal runs, one per owner given."""
    run = 16384 // len(owners) + 1
    slots = tuple(owners[slot // run] for slot in range(16384))
    return Layout(dict.fromkeys(owners), slots)


class TestPredecessor:
    def test_a_new_primary_on_a_gone_ones_slots_is_a_failover(self) -> None:
        """A primary that appears on the slots of one that is no primary any more took over."""
        assert predecessor(layout(A, B, C), layout(D, B, C), D) == A

    def test_a_slot_moved_between_primaries_is_no_failover(self) -> None:
        """Slots that move to a primary that already was one are a migration."""
        before = layout(A, B, C)
        assert before.owners is not None
        after = Layout(before.primaries, (B, *before.owners[1:]))
        assert predecessor(before, after, B) is None

    def test_a_new_primary_beside_the_old_is_no_failover(self) -> None:
        """A primary added while every old one stays took nothing over; one in a gone one's
        place did."""
        assert predecessor(layout(A, B, C), layout(A, B, D), D) == C
        assert predecessor(layout(A, B), layout(A, B, D), D) is None

    def test_sentinel_names_another_primary(self) -> None:
        """Behind Sentinel the one primary's successor is the next one named."""
        assert predecessor(Layout({A: None}), Layout({B: None}), B) == A
        assert predecessor(None, Layout({B: None}), B) is None


class TestSettings:
    def test_cluster_from_the_file_and_the_env(self, tmp_path: Path) -> None:
        """cluster = true in the file, or the switch given, is a cluster connection."""
        assert build(tmp_path, "cluster = true\n", queues=["q"]).connection.topology.cluster
        assert build(tmp_path, queues=["q"], cluster="yes").connection.topology.mode == "cluster"

    def test_sentinels_split_on_commas_and_spaces(self, tmp_path: Path) -> None:
        """Sentinel addresses are split like queue names, IPv6 in brackets."""
        s = build(
            tmp_path,
            queues=["q"],
            sentinels=["h1:26379, h2:26380 [::1]:26381"],
            sentinel_master="mymaster",
        )
        assert s.connection.topology.sentinels == (("h1", 26379), ("h2", 26380), ("::1", 26381))
        assert s.describe()["sentinels"] == ["h1:26379", "h2:26380", "::1:26381"]

    def test_sentinel_password_file_beside_the_config(self, tmp_path: Path) -> None:
        """The Sentinels' password file, relative in the config file, is its neighbour."""
        (tmp_path / "sentinel-pass").write_text("s3cret\n")
        toml = 'sentinels = ["h:26379"]\nsentinel_master = "m"\n'
        toml += 'sentinel_password_file = "sentinel-pass"\n'
        s = build(tmp_path, toml, queues=["q"])
        assert s.connection.topology.sentinel_password == "s3cret"
        assert "s3cret" not in repr(s)

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            (
                {"cluster": True, "sentinels": ["h:1"], "sentinel_master": "m"},
                "--cluster and --sentinel exclude each other: give one",
            ),
            ({"sentinels": ["h:1"]}, "--sentinel and --sentinel-master go together: give both"),
            ({"sentinel_master": "m"}, "--sentinel and --sentinel-master go together: give both"),
            (
                {"cluster": True, "redis_url": "unix:///run/r.sock"},
                "a cluster is reached over TCP: use a redis:// or rediss:// URL",
            ),
            (
                {"cluster": True, "redis_url": "redis://h:7000/3"},
                "a cluster has database 0 only: drop the db from the URL",
            ),
            (
                {"sentinels": ["h"], "sentinel_master": "m"},
                "--sentinel (SWEEPERD_SENTINELS): a Sentinel's address must be HOST:PORT with a "
                "port from 1 to 65535, not 'h'",
            ),
            (
                {"cluster": "maybe"},
                "--cluster (SWEEPERD_CLUSTER) must be true or false, not 'maybe'",
            ),
        ],
    )
    def test_refusals(self, tmp_path: Path, overrides: dict[str, object], message: str) -> None:
        """A topology that cannot work is one line naming the options and the fix."""
        assert refusal(tmp_path, None, queues=["q"], **overrides) == message

    def test_url_at_keeps_credentials_and_db(self) -> None:
        """A primary's URL is the seed's with only host and port replaced."""
        assert url_at("rediss://u:p@seed:7000/0?ssl_cert_reqs=none", "10.0.0.9", 7001) == (
            "rediss://u:p@10.0.0.9:7001/0?ssl_cert_reqs=none"
        )


class TestRoleChange:
    def node(self, server: RedisServer) -> Node:
        client = connect(server.url, socket_timeout=2.0)
        return Node("n:1", client, ExecutorChoice.AUTO, CallSizer(0.002), primary_only=True)

    def test_same_run_id_new_replid_is_a_failover(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A fail-over and back keeps run_id but not master_replid: counted, as a failover."""
        node = self.node(redis_server)
        node.look(1.0)
        node.replid = b"the-replid-before"
        with capture_logs() as logs:
            assert node.look(2.0).restarted
        [event] = [e for e in logs if e["event"] == "server_restarted"]
        assert event["reason"] == "failover" and event["old_run_id"] == event["new_run_id"]

    def test_a_replica_is_refused_where_primaries_are_swept(
        self, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """A node that answers as a replica is no primary: the tick routes its queues again,
        each call counted as held (moved)."""
        replica = RedisServer(
            tmp_path / "replica", kind=redis_server.kind, replicaof=("127.0.0.1", redis_server.port)
        )
        with replica:
            with pytest.raises(NotPrimary, match="is a slave now"):
                self.node(replica).look(1.0)
            node = self.node(replica)
            numbers = SweepNumbers(QueueMetrics.BASIC)
            ledger = Ledger(numbers, node.name)
            member = Member(node, ledger, prefix_root="emq", share=1.0)
            batch = [QueueSettings("a", 5.0, 1, 100), QueueSettings("b", 5.0, 1, 100)]
            with capture_logs() as logs:
                outcome = member.ticks.run(batch, 1.0)
                assert outcome == Outcome(moved=("a", "b"))
        # Its ticks are held (moved), not lost from the counts, and say so once a queue.
        assert ledger.holds.calls == {(node.name, "moved"): 2}
        assert [(e["event"], e["queue"], e["reason"]) for e in logs] == [
            ("sweep_held", "a", "moved"),
            ("sweep_held", "b", "moved"),
        ]
        assert numbers.nodes == {} and numbers.queues == {}
