"""The daemon's eviction watch across a change of policy, on a real server: a policy that may
evict keys is said once per node and change, and the gauge follows the policy the server has."""

from __future__ import annotations

from pathlib import Path

import redis

from tests.support.daemon_process import DaemonProcess
from tests.support.servers import RedisServer

CHANGES = ("allkeys-lru", "allkeys-lfu", "noeviction", "allkeys-lru")


class TestPolicyChange:
    """CONFIG SET maxmemory-policy while the daemon runs."""

    def test_said_once_per_change(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """Each change to an allkeys-* policy is one warning (none for the same policy read
        again at every look, each 0.2 s; none for noeviction); sweeperd_server_may_evict is 1
        under the allkeys-* policy and 0 under noeviction, the series of the policy before
        gone."""
        node = redis_server.node
        was = str(r.config_get("maxmemory-policy")["maxmemory-policy"])
        args = ("--redis-url", redis_server.url, "--queue", "q", "--interval", "0.2")
        try:
            with DaemonProcess(tmp_path, *args) as daemon:
                before = None
                for policy in CHANGES:
                    r.config_set("maxmemory-policy", policy)
                    evicts = 1 if policy.startswith("allkeys-") else 0
                    daemon.wait_value("sweeperd_server_may_evict", evicts, node=node, policy=policy)
                    if before not in (None, policy):
                        assert daemon.value("sweeperd_server_may_evict", policy=before) is None
                    before = policy
                warned = [(e["node"], e["policy"]) for e in daemon.events("server_may_evict")]
        finally:
            r.config_set("maxmemory-policy", was)
        assert warned == [(node, "allkeys-lru"), (node, "allkeys-lfu"), (node, "allkeys-lru")]
