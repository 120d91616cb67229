"""sweeperd's one Prometheus registry (never the global one): every collector in it is read at
scrape time. What each call did is counted in the sweep's numbers by the ledger alone (which
queues and nodes have series, by the queue set and the fleet); the schedule and the holds
count their own; the state's series are read from the parts (metrics/state.py)."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from sweeperd.constants import QueueMetrics
from sweeperd.metrics.exposition import SweepCollector, scrape
from sweeperd.metrics.families import FAMILIES
from sweeperd.metrics.numbers import SweepNumbers
from sweeperd.metrics.state import StateCollector, StateReaders


class BuildInfo(Collector):
    """sweeperd's version and the Python running it."""

    def __init__(self, version: str) -> None:
        self.version = version

    def collect(self) -> Iterator[Metric]:
        info = FAMILIES["sweeperd_build_info"].labelled()
        info.add_metric([self.version, platform.python_version()], 1)
        yield info


class Metrics:
    """The registry, the sweep's numbers in it, and the readers of the daemon's state."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        version: str,
        level: QueueMetrics = QueueMetrics.BASIC,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.numbers = SweepNumbers(level)
        # Until read_state: a daemon knowing nothing.
        self._state = StateCollector(StateReaders())
        # Every collector but the sweep's.
        self.others: tuple[Collector, ...] = ()
        for collector in (
            ProcessCollector(registry=None),
            PlatformCollector(registry=None),
            BuildInfo(version),
            self._state,
        ):
            self.add_collector(collector)
        self.sweep = SweepCollector(self.numbers)
        self.registry.register(self.sweep)

    def read_state(self, readers: StateReaders) -> None:
        """Set where the state's series are read from at every scrape from now on."""
        self._state.read = readers

    def add_collector(self, collector: Collector) -> None:
        """Register a collector whose series are read at scrape time."""
        self.registry.register(collector)
        self.others = (*self.others, collector)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """Return a whole scrape for an Accept header: its body and content type
        (exposition.scrape)."""
        return scrape(self.others, self.sweep, accept)
