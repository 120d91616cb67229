"""A node: the epoch watch against a real server, backoff and liveness with time passed in."""

from __future__ import annotations

import pytest
import redis
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sweeperd.constants import ExecutorChoice
from sweeperd.fleet.node import BACKOFF_FIRST_S, BACKOFF_MAX_S, Node
from sweeperd.metrics.registry import Metrics
from sweeperd.metrics.state import StateReaders
from sweeperd.reasons import Reason, SweepError
from sweeperd.server.connection import connect
from sweeperd.verb.scripts import SWEEP_SCRIPT
from sweeperd.verb.sizing import CallSizer
from tests.support.helpers import acl_line, run_id
from tests.support.servers import RedisServer


def make_node(url: str, choice: ExecutorChoice = ExecutorChoice.AUTO) -> Node:
    return Node("n:1", connect(url, socket_timeout=2.0), choice, CallSizer(0.002))


def sample(of: Node, name: str, **labels: str) -> float | None:
    """One series of the node's state, as a scrape reads it from the node."""
    metrics = Metrics(CollectorRegistry(), version="test")
    metrics.read_state(StateReaders(nodes=lambda: [of.state()]))
    return metrics.registry.get_sample_value(name, labels)


class TestBackoff:
    def test_a_down_node_waits_its_backoff(self) -> None:
        """After a failure the node is not tried again until the backoff has passed."""
        node = make_node("redis://127.0.0.1:1/0")
        assert node.may_try(100.0)
        node.failed(100.0, ConnectionError("refused"))
        assert not node.may_try(100.0 + BACKOFF_FIRST_S / 2)
        assert node.may_try(100.0 + BACKOFF_FIRST_S)

    def test_the_backoff_doubles_up_to_its_cap(self) -> None:
        """Each failure doubles the wait, never past the cap."""
        node = make_node("redis://127.0.0.1:1/0")
        waits = []
        for n in range(10):
            node.failed(float(n), ConnectionError("refused"))
            waits.append(node.retry_at - n)
        assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
        assert max(waits) == BACKOFF_MAX_S

    def test_down_and_up_are_logged_once_per_change(self) -> None:
        """Three failures log one redis_down; an answer logs one redis_up and resets backoff."""
        node = make_node("redis://127.0.0.1:1/0")
        with capture_logs() as logs:
            for n in range(3):
                node.failed(float(n), ConnectionError("refused"))
            node.answered(10.0)
            node.answered(11.0)
        assert [e["event"] for e in logs] == ["redis_down", "redis_up"]
        assert node.backoff_s == BACKOFF_FIRST_S
        assert sample(node, "sweeperd_redis_up", node="n:1") == 1

    def test_answered_within(self) -> None:
        """Readiness: an answer counts for the window after it, and none before any answer."""
        node = make_node("redis://127.0.0.1:1/0")
        assert not node.answered_within(5.0, 15.0)
        node.answered(5.0)
        assert node.answered_within(20.0, 15.0)
        assert not node.answered_within(20.1, 15.0)


class TestEpochWatch:
    def test_first_look_chooses_the_executor(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """The first look is no restart; auto picks native on the module server and exports it."""
        node = make_node(redis_server.url)
        epoch = node.look(1.0)
        assert not epoch.restarted
        assert epoch.executor.name == "native"
        assert epoch.info.run_id == run_id(r)
        assert (
            sample(
                node,
                "sweeperd_server_info",
                node="n:1",
                run_id=run_id(r).decode(),
                executor="native",
            )
            == 1
        )

    def test_a_new_run_id_is_one_restart(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A run_id unlike the last one seen is counted and logged once, old and new named."""
        node = make_node(redis_server.url)
        node.look(1.0)
        node.run_id = b"an-earlier-process"
        with capture_logs() as logs:
            assert node.look(2.0).restarted
            assert not node.look(3.0).restarted
        assert sample(node, "sweeperd_server_restarts_total", node="n:1") == 1
        restarted = [e for e in logs if e["event"] == "server_restarted"]
        assert restarted == [
            {
                "event": "server_restarted",
                "log_level": "warning",
                "node": "n:1",
                "reason": "restart",
                "old_run_id": "an-earlier-process",
                "new_run_id": run_id(r).decode(),
            }
        ]

    def test_auto_picks_the_script_without_the_module(
        self, r_plain: redis.Redis, plain_server: RedisServer
    ) -> None:
        """On a server without the verb, auto chooses the Lua port and loads its sweep script."""
        node = make_node(plain_server.url)
        assert node.look(1.0).executor.name == "script"
        assert r_plain.script_exists(SWEEP_SCRIPT.sha) == [True]

    def test_a_restart_without_the_verb_is_counted_once(
        self, r_plain: redis.Redis, plain_server: RedisServer
    ) -> None:
        """native on a server that lost its module: no_verb on every look, one restart."""
        node = make_node(plain_server.url, ExecutorChoice.NATIVE)
        node.run_id = b"a-run-that-had-the-module"
        for now in (1.0, 2.0):
            with pytest.raises(SweepError) as refused:
                node.look(now)
            assert refused.value.reason is Reason.NO_VERB
        assert sample(node, "sweeperd_server_restarts_total", node="n:1") == 1
        assert node.up is True

    @pytest.mark.parametrize(
        ("lacked", "shown"), [("info", "INFO"), ("command|info", "COMMAND INFO")]
    )
    def test_a_look_the_user_may_not_make_is_noperm_with_its_rule(
        self, r: redis.Redis, redis_server: RedisServer, lacked: str, shown: str
    ) -> None:
        """A user without INFO (the epoch) or COMMAND INFO (auto's choice): every look fails
        with reason noperm, naming the node, the command and the rule that grants it."""
        line = acl_line("--for", "run", user="lookout", password="pw")
        r.execute_command(*line.replace(f" +{lacked} ", " ").split())  # type: ignore[no-untyped-call]
        try:
            url = f"redis://lookout:pw@127.0.0.1:{redis_server.port}/0"
            with pytest.raises(SweepError) as refused:
                make_node(url).look(1.0)
        finally:
            r.acl_deluser("lookout")
        assert refused.value.reason is Reason.NOPERM
        assert refused.value.message.startswith(
            f"n:1: the ACL user lookout may not run {shown} ("
        ), refused.value.message
        assert refused.value.message.endswith(
            f"grant it with ACL SETUSER lookout +{lacked} (docs/security.md#the-acl-user)"
        )
