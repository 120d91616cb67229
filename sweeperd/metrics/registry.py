"""sweeperd's one Prometheus registry (never the global one): every collector in it is read at
scrape time; the sweep's numbers are written by the ledger alone, the rest by the part that
knows them (the schedule its lag, the holds theirs) or read from the parts (stateseries)."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sweeperd.constants import QueueMetrics
from sweeperd.metrics.exposition import SweepCollector, scrape
from sweeperd.metrics.numbers import SweepNumbers
from sweeperd.metrics.state import StateCollector, StateReaders


class BuildInfo(Collector):
    """sweeperd's version and the Python running it."""

    def __init__(self, version: str) -> None:
        self.version = version

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "sweeperd_build_info",
            "sweeperd's version and the Python running it; always 1.",
            labels=["version", "python"],
        )
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
        self.state = StateReaders()
        self.others: tuple[Collector, ...] = ()  # every collector but the sweep's
        for collector in (
            ProcessCollector(registry=None),
            PlatformCollector(registry=None),
            BuildInfo(version),
            StateCollector(self.state),
        ):
            self.add_collector(collector)
        self.sweep = SweepCollector(self.numbers)
        self.registry.register(self.sweep)

    def add_collector(self, collector: Collector) -> None:
        """A collector whose series are read at scrape time."""
        self.registry.register(collector)
        self.others = (*self.others, collector)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """A whole scrape for an Accept header: its body and content type (exposition.scrape)."""
        return scrape(self.others, self.sweep, accept)
