"""The background audit of replicas sharing the queues (--shard on): each audits its own share,
so that every queue is audited by one replica and its findings exported once."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import redis
from prometheus_client.parser import text_string_to_metric_families

from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import Job, clean, plant
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import owned_by
from tests.support.servers import RedisServer

QUEUES = [f"q{n}" for n in range(8)]
MEMBERS = ("replica-a", "replica-b")


def stranded_queues(daemon: DaemonProcess) -> set[str]:
    """The queues whose stranded jobs the daemon's last audit exported."""
    return {
        sample.labels["queue"]
        for family in text_string_to_metric_families(daemon.metrics_text())
        for sample in family.samples
        if sample.name == "sweeperd_audit_findings" and sample.labels["class"] == "stranded"
    }


class TestSharedAudit:
    """Two replicas, one key root."""

    def test_each_replica_audits_its_share(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """A stranded job in each of 8 queues: once both replicas are members, each exports
        the findings of the queues it owns (the rendezvous share) and of no other."""
        for queue in QUEUES:
            plant(r, QueueKeys(queue), [Job("lost", {"state": "active"}), *clean()])
        share = {m: set(owned_by(m, QUEUES, MEMBERS)) for m in MEMBERS}
        assert all(share.values()), share  # each owns some: the test divides
        named = [arg for queue in QUEUES for arg in ("--queue", queue)]
        args = ("--redis-url", redis_server.url, "--audit-every", "1", "--heartbeat", "1")
        with ExitStack() as stack:
            daemons = {
                member: stack.enter_context(
                    DaemonProcess(tmp_path, *args, *named, "--instance-id", member)
                )
                for member in MEMBERS
            }
            wait_until(
                lambda: all(stranded_queues(d) == share[m] for m, d in daemons.items()),
                what=f"each replica's audit exporting its share {share}",
            )
