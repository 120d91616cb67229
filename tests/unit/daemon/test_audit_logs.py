"""What the daemon's background audit logs, on a real server: a long audit's progress, the
findings of each queue with any, and its completion."""

from __future__ import annotations

import threading

import pytest
import redis
from structlog.testing import capture_logs

from sweeperd.audit.reader import Pace
from sweeperd.constants import ExecutorChoice
from sweeperd.daemon import audit as background
from sweeperd.daemon.audit import BackgroundAudit
from sweeperd.fleet.node import Node
from sweeperd.keyspace import QueueKeys
from sweeperd.verb.sizing import CallSizer
from tests.support.audit_plant import Job, clean, plant
from tests.support.servers import RedisServer

ROWS = 300


class TestAuditLogs:
    def test_progress_findings_and_completion(
        self, r: redis.Redis, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With the progress interval at 0 every call of the audit says how far it is (the
        node, its queues, the keys read so far, growing); the queue with findings is logged
        with its counts and first ids, the clean one not; the completion says the queues, rows
        and findings, and the findings are exported."""
        plant(r, QueueKeys("q"), [Job(f"s{n:03}", {"state": "active"}) for n in range(ROWS)])
        plant(r, QueueKeys("fine"), clean())
        monkeypatch.setattr(background, "PROGRESS_LOG_S", 0.0)
        name = redis_server.node
        node = Node(name, r, ExecutorChoice.AUTO, CallSizer(0.002))
        audit = BackgroundAudit(
            "emq", lambda: ["q", "fine"], lambda _q: [node], threading.Event(), Pace(grace_s=0)
        )
        with capture_logs() as logs:
            audit.run()
        progress = [e for e in logs if e["event"] == "audit_progress"]
        assert progress and {(e["node"], e["queues"]) for e in progress} == {(name, 2)}
        read = [e["keys_read"] for e in progress]
        assert read == sorted(read) and read[-1] >= ROWS
        [found] = [e for e in logs if e["event"] == "audit_findings"]
        assert (found["queue"], found["node"], found["counts"]) == ("q", name, {"stranded": ROWS})
        assert found["first"] == {"stranded": [f"s{n:03}" for n in range(5)]}
        [done] = [e for e in logs if e["event"] == "audit_completed"]
        assert (done["queues"], done["rows"], done["findings"]) == (2, ROWS + 3, ROWS)
        [family, _completed] = audit.collect()
        assert [(s.labels, s.value) for s in family.samples] == [
            ({"queue": "q", "class": "stranded"}, ROWS)
        ]
