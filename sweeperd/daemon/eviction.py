"""What each primary says of eviction: its maxmemory-policy (INFO memory), said aloud when it
may evict a queue's keys (allkeys-*), once per node and change, and its evicted_keys count."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import redis
import structlog
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from sweeperd.fleet.primary import Primary
from sweeperd.metrics.families import FAMILIES
from sweeperd.server.eviction import may_evict, read_eviction

log = structlog.get_logger("sweeperd.daemon")

MAY_EVICT = FAMILIES["sweeperd_server_may_evict"]
EVICTED = FAMILIES["sweeperd_server_evicted_keys"]


class EvictionWatch(Collector):
    """Each primary's policy and evicted keys, read at every look; a policy that may evict
    logged as a warning when first seen on a node, and again whenever it changes; `seen` maps a
    node to its (policy, evicted keys)."""

    def __init__(self, nodes: Callable[[], Sequence[Primary]]) -> None:
        self.nodes = nodes
        self.seen: dict[str, tuple[str, int]] = {}

    def look(self) -> None:
        """Read every primary; one that cannot be read keeps what it said last (the sweeps say
        that it cannot be reached)."""
        for node in self.nodes():
            try:
                policy, evicted = read_eviction(node.client)
            except redis.RedisError:
                continue
            before = self.seen.get(node.name)
            self.seen[node.name] = (policy, evicted)
            if may_evict(policy) and (before is None or before[0] != policy):
                log.warning(
                    "server_may_evict",
                    node=node.name,
                    policy=policy,
                    hint="this server may evict a queue's sets or rows under memory pressure "
                    "(jobs lost without a word): set maxmemory-policy noeviction, or a "
                    "volatile-* policy; run `sweeperd audit` to find what was lost",
                )

    def collect(self) -> Iterator[Metric]:
        evict, evicted = MAY_EVICT.labelled(), EVICTED.labelled()
        for node, (policy, count) in sorted(self.seen.items()):
            evict.add_metric([node, policy], 1 if may_evict(policy) else 0)
            evicted.add_metric([node], count)
        yield evict
        yield evicted
