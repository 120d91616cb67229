"""What the daemon's parts know now, as series read at scrape time: each primary's state, the
readiness, the replicas' membership and the queues this one knows and owns. Nothing writes
them: the parts bind their readers, and a scrape asks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class NodeState:
    """A primary as the daemon knows it; a primary dropped keeps only its restarts."""

    name: str
    restarts: int  # run_id (or master_replid) changes seen
    up: bool | None = None  # None until it answered or failed once
    run_id: str | None = None  # with the executor: what sweeps it now
    executor: str | None = None


@dataclass
class StateReaders:
    """Where each series is read from; until bound, what a daemon that knows nothing says."""

    nodes: Callable[[], Sequence[NodeState]] = lambda: ()
    ready: Callable[[], bool] = lambda: False
    members: Callable[[], int] = lambda: 0
    owned: Callable[[], int] = lambda: 0
    known: Callable[[], int] = lambda: 0
    ownership_changes: Callable[[], int] = lambda: 0


class StateCollector(Collector):
    """The readers' answers as series, at every scrape."""

    def __init__(self, read: StateReaders) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        nodes = self.read.nodes()
        up = GaugeMetricFamily(
            "sweeperd_redis_up",
            "1 if the last call to the Redis/Valkey node succeeded, 0 if it failed.",
            labels=["node"],
        )
        restarts = CounterMetricFamily(
            "sweeperd_server_restarts",
            "Changes of the node's run_id seen: server restarts and failovers.",
            labels=["node"],
        )
        info = GaugeMetricFamily(
            "sweeperd_server_info",
            "The node's current run_id (the lease epoch) and the executor sweeping it; always 1.",
            labels=["node", "run_id", "executor"],
        )
        for node in nodes:
            restarts.add_metric([node.name], node.restarts)
            if node.up is not None:
                up.add_metric([node.name], 1 if node.up else 0)
            if node.run_id is not None and node.executor is not None:
                info.add_metric([node.name, node.run_id, node.executor], 1)
        yield from (up, restarts, info)
        yield GaugeMetricFamily(
            "sweeperd_ready",
            "1 when every node answered within the readiness window, else 0.",
            value=1 if self.read.ready() else 0,
        )
        yield GaugeMetricFamily(
            "sweeperd_members",
            "Live members (replicas sharing the queues) this replica sees, itself included; "
            "0 when it is not one (sharing off or refused, or its heartbeat expired).",
            value=self.read.members(),
        )
        yield GaugeMetricFamily(
            "sweeperd_owned_queues",
            "Queues this replica sweeps: its share, or every queue when sharing is off.",
            value=self.read.owned(),
        )
        yield GaugeMetricFamily(
            "sweeperd_known_queues",
            "Queues this replica knows: configured, or found by a scan within the last hour; "
            "every one of them should have an owner among the replicas.",
            value=self.read.known(),
        )
        yield CounterMetricFamily(
            "sweeperd_ownership_changes",
            "Times the set of queues this replica owns changed with the members it sees.",
            value=self.read.ownership_changes(),
        )

    def describe(self) -> Iterator[Metric]:
        for name, kind in NAMES.items():
            yield Metric(name, "", kind)


NAMES = {
    "sweeperd_redis_up": "gauge",
    "sweeperd_server_restarts": "counter",
    "sweeperd_server_info": "gauge",
    "sweeperd_ready": "gauge",
    "sweeperd_members": "gauge",
    "sweeperd_owned_queues": "gauge",
    "sweeperd_known_queues": "gauge",
    "sweeperd_ownership_changes": "counter",
}
