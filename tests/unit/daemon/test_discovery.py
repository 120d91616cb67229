"""Discovery on a real server: the queues a SCAN finds, and a refused scan said with its rule."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from structlog.testing import capture_logs

from sweeperd.constants import ExecutorChoice
from sweeperd.daemon.discovery import Discovery
from sweeperd.fleet.node import Node
from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import connect
from sweeperd.verb.sizing import CallSizer
from tests.support.helpers import PAST_MS, acl_line, lease
from tests.support.servers import RedisServer

USER, PASSWORD = "scout", "scout-pw"


@pytest.fixture
def scout(r: redis.Redis, redis_server: RedisServer) -> Iterator[Node]:
    """A node reached as the user `sweeperd acl --for run --discover 1` prints, less SCAN."""
    line = acl_line("--for", "run", "--discover", "1", user=USER, password=PASSWORD)
    r.execute_command(*line.replace(" +scan", "").split())  # type: ignore[no-untyped-call]
    url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
    node = Node("n:1", connect(url, socket_timeout=2.0), ExecutorChoice.AUTO, CallSizer(0.002))
    yield node
    node.client.close()
    r.acl_deluser(USER)


class TestDiscovery:
    def test_a_refused_scan_keeps_the_last_list_and_names_its_rule(
        self, r: redis.Redis, scout: Node
    ) -> None:
        """A user without SCAN: the scan finds nothing new, the node stays up, and the warning
        names SCAN and the rule that grants it."""
        lease(r, QueueKeys("before"), b"a", PAST_MS, attempts=1)
        discovery = Discovery(lambda: [scout], "emq", refresh_layout=lambda: None)
        r.execute_command("ACL", "SETUSER", USER, "+scan")  # type: ignore[no-untyped-call]
        assert discovery.scan() == {"before"}
        r.execute_command("ACL", "SETUSER", USER, "-scan")  # type: ignore[no-untyped-call]
        r.delete(QueueKeys("before").active)
        lease(r, QueueKeys("found"), b"a", PAST_MS, attempts=1)
        with capture_logs() as logs:
            assert discovery.scan() == {"before"}
        [failed] = logs
        assert failed["event"] == "discovery_failed"
        assert failed["error"].startswith(f"the ACL user {USER} may not run SCAN (")
        assert failed["error"].endswith(
            f"grant it with ACL SETUSER {USER} +scan (docs/security.md#the-acl-user)"
        )
        assert scout.up is not False
