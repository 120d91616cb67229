"""What the daemon's parts know now, as series read at scrape time: each primary's state, the
readiness, the replicas' membership and the queues this one knows and owns. Nothing writes
them: the parts bind their readers, and a scrape asks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from sweeperd.metrics.families import FAMILIES


@dataclass(frozen=True)
class NodeState:
    """A primary as the daemon knows it; a primary dropped keeps only its restarts."""

    name: str
    # run_id (or master_replid) changes seen.
    restarts: int
    # None until it answered or failed once.
    up: bool | None = None
    # With the executor: what sweeps it now.
    run_id: str | None = None
    executor: str | None = None
    # The server tells it of its queues' new leases (CLIENT TRACKING)
    hearing: bool = False
    # Earliest deadlines read after a change was heard.
    reads: int = 0


@dataclass
class StateReaders:
    """Where each series is read from; until bound, what a daemon that knows nothing says."""

    nodes: Callable[[], Sequence[NodeState]] = lambda: ()
    ready: Callable[[], bool] = lambda: False
    members: Callable[[], int] = lambda: 0
    owned: Callable[[], int] = lambda: 0
    known: Callable[[], int] = lambda: 0
    ownership_changes: Callable[[], int] = lambda: 0


STATE = (
    "sweeperd_redis_up",
    "sweeperd_server_restarts",
    "sweeperd_server_info",
    "sweeperd_deadline_source",
    "sweeperd_deadline_reads",
    "sweeperd_ready",
    "sweeperd_members",
    "sweeperd_owned_queues",
    "sweeperd_known_queues",
    "sweeperd_ownership_changes",
    # The families it exports (metrics/families.py)
)


class StateCollector(Collector):
    """The readers' answers as series, at every scrape."""

    def __init__(self, read: StateReaders) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        up, restarts, info, source, reads = (
            FAMILIES[name].labelled()
            for name in (
                "sweeperd_redis_up",
                "sweeperd_server_restarts",
                "sweeperd_server_info",
                "sweeperd_deadline_source",
                "sweeperd_deadline_reads",
            )
        )
        for node in self.read.nodes():
            restarts.add_metric([node.name], node.restarts)
            if node.up is not None:
                up.add_metric([node.name], 1 if node.up else 0)
            if node.run_id is not None and node.executor is not None:
                info.add_metric([node.name, node.run_id, node.executor], 1)
            if node.up is not None:
                source.add_metric([node.name], 1 if node.hearing else 0)
                reads.add_metric([node.name], node.reads)
        yield from (up, restarts, info, source, reads)
        read = self.read
        values = {
            "sweeperd_ready": 1 if read.ready() else 0,
            "sweeperd_members": read.members(),
            "sweeperd_owned_queues": read.owned(),
            "sweeperd_known_queues": read.known(),
            "sweeperd_ownership_changes": read.ownership_changes(),
        }
        for name, value in values.items():
            yield FAMILIES[name].value(value)

    def describe(self) -> Iterator[Metric]:
        for name in STATE:
            yield FAMILIES[name].bare()
