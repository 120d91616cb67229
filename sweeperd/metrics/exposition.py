"""The sweep's numbers as a scrape: one description of its families, written straight to
exposition text for a whole scrape (the library's generic path takes ten times as long at
thousands of queues) and built as the library's metric families for its other paths."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sweeperd.constants import ACTIVE, DEAD, PENDING
from sweeperd.metrics.families import COUNTER, FAMILIES, Described
from sweeperd.metrics.numbers import Durations, SweepNumbers, Totals

# The `set` label of sweeperd_queue_jobs.
SETS = (ACTIVE, PENDING, DEAD)
OPENMETRICS_EOF = b"# EOF\n"

# Labels as written, their values, the value.
Row = tuple[str, tuple[str, ...], float]
HistogramRow = tuple[str, tuple[str, ...], Durations]


@dataclass(frozen=True)
class SweepFamily:
    """What every family of the sweep's has: the table's description, and the labels it has at
    the numbers' level."""

    about: Described
    labels: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.about.name

    @property
    def kind(self) -> str:
        return self.about.kind


@dataclass(frozen=True)
class Family(SweepFamily):
    """One family of the sweep's counters or gauges, and its rows."""

    # Read once, as the family is written.
    rows: Iterable[Row]


@dataclass(frozen=True)
class HistogramFamily(SweepFamily):
    """One histogram family of the sweep's, a Durations per row."""

    rows: Iterable[HistogramRow]


def _family(name: str, rows: Iterable[Row], labels: tuple[str, ...] | None = None) -> Family:
    about = FAMILIES[name]
    return Family(about, about.labels if labels is None else labels, rows)


def families(numbers: SweepNumbers) -> Iterator[Family | HistogramFamily]:
    """Yield every family at the numbers' level, read from them as they are now."""
    queues, nodes, zeroed = numbers.shown()
    # sparse: a queue's counters show 0 in the scrapes of its first minute (numbers.shown)
    yield _family(
        "sweeperd_recovered",
        ((q.label, q.values, 0 if q.name in zeroed else q.recovered) for q in queues),
    )
    yield _family(
        "sweeperd_dead", ((q.label, q.values, 0 if q.name in zeroed else q.dead) for q in queues)
    )
    yield _family(
        "sweeperd_exempt",
        ((q.label, q.values, 0 if q.name in zeroed else q.exempt) for q in queues),
    )
    failures = [
        (f'{q.label},reason="{reason}"', (q.name, reason), 0 if q.name in zeroed else count)
        for q in queues
        for reason, count in list(q.failures.items())
    ]
    yield _family("sweeperd_sweep_failures", failures)
    successes = [
        (q.label, q.values, at)
        for q in queues
        if (at := q.last_success) is not None and (q.owned or not numbers.sparse)
    ]
    yield _family("sweeperd_last_success_timestamp_seconds", successes)
    expired = [(q.label, q.values, n) for q in queues if (n := q.expired) is not None]
    yield _family("sweeperd_expired_leases", expired)
    yield _family(
        "sweeperd_oldest_expired_age_seconds",
        [(q.label, q.values, age) for q in queues if (age := q.oldest_expired_age) is not None],
    )
    # Sweeps, ghosts, durations and delays: the node's totals, or with full each queue's on
    # each node (sum by node or by queue reads the same at either level).
    full = numbers.full
    owners: Sequence[Totals] = [t for q in queues for t in list(q.on.values())] if full else nodes
    by = ("queue", "node") if full else ("node",)
    yield _family("sweeperd_sweeps", ((o.label, o.values, o.sweeps) for o in owners), by)
    yield _family("sweeperd_ghosts_removed", ((o.label, o.values, o.ghosts) for o in owners), by)
    yield HistogramFamily(
        FAMILIES["sweeperd_sweep_duration_seconds"],
        by,
        ((o.label, o.values, o.durations) for o in owners),
    )
    yield HistogramFamily(
        FAMILIES["sweeperd_recovery_delay_seconds"],
        by,
        ((o.label, o.values, o.delays) for o in owners),
    )
    if not full:
        return
    sizes = [
        (f'{q.label},set="{name}"', (q.name, name), size)
        for q in queues
        if (jobs := q.jobs) is not None
        for name, size in zip(SETS, jobs, strict=True)
    ]
    yield _family("sweeperd_queue_jobs", sizes)
    failed = [(q.label, q.values, n) for q in queues if (n := q.failed) is not None]
    yield _family("sweeperd_queue_failed_jobs", failed)


def _number(value: float) -> str:
    if type(value) is int:
        return str(value)
    return cast(Callable[[float], str], floatToGoString)(value)


@cache
def le_labels(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """Return a histogram's `le` label values, +Inf last."""
    return (*(str(float(b)) for b in bounds), "+Inf")


def cumulative(durations: Durations) -> list[tuple[str, int]]:
    """Return a histogram's buckets as exposition counts them: each with every one below it."""
    running, out = 0, []
    for bound, count in zip(le_labels(durations.bounds), list(durations.buckets), strict=True):
        running += count
        out.append((bound, running))
    return out


def text(described: Iterable[Family | HistogramFamily], openmetrics: bool) -> bytes:
    """Return the families in the text format, or OpenMetrics (without its EOF)."""
    lines: list[str] = []
    for f in described:
        shown = f.name if openmetrics or f.kind != "counter" else f"{f.name}_total"
        lines.append(f"# HELP {shown} {f.about.help}\n# TYPE {shown} {f.kind}\n")
        if isinstance(f, HistogramFamily):
            for labels, _, durations in f.rows:
                buckets = cumulative(durations)
                lines.extend(
                    f'{f.name}_bucket{{{labels},le="{bound}"}} {n}\n' for bound, n in buckets
                )
                lines.append(f"{f.name}_count{{{labels}}} {buckets[-1][1]}\n")
                lines.append(f"{f.name}_sum{{{labels}}} {_number(durations.total)}\n")
            continue
        sample = f"{f.name}_total" if f.kind == "counter" else f.name
        lines.extend(f"{sample}{{{labels}}} {_number(value)}\n" for labels, _, value in f.rows)
    return "".join(lines).encode()


def metric(f: Family | HistogramFamily) -> Metric:
    """Return a family as the library's metric family."""
    if isinstance(f, HistogramFamily):
        histogram = HistogramMetricFamily(f.name, f.about.help, labels=f.labels)
        for _, values, durations in f.rows:
            buckets = [(bound, float(n)) for bound, n in cumulative(durations)]
            histogram.add_metric(list(values), buckets, durations.total)
        return histogram
    made = CounterMetricFamily if f.kind == COUNTER else GaugeMetricFamily
    family = made(f.name, f.about.help, labels=f.labels)
    for _, values, value in f.rows:
        family.add_metric(list(values), value)
    return family


class SweepCollector(Collector):
    """The sweep's numbers at scrape time: rendered straight to text for a whole scrape, built
    as metric families for the library (?name[]=, get_sample_value)."""

    def __init__(self, numbers: SweepNumbers) -> None:
        self.numbers = numbers

    def render(self, openmetrics: bool) -> bytes:
        return text(families(self.numbers), openmetrics)

    def collect(self) -> Iterator[Metric]:
        for family in families(self.numbers):
            yield metric(family)

    def describe(self) -> Iterator[Metric]:
        """Yield the family names, so that a ?name[]= scrape of other series skips this
        collector."""
        for family in families(self.numbers):
            yield Metric(family.name, "", family.kind)


@dataclass(frozen=True)
class Collected:
    """Collectors seen as one, for the library's encoders (which call collect())."""

    collectors: tuple[Collector, ...]

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


def scrape(
    others: tuple[Collector, ...], sweep: SweepCollector, accept: str | None
) -> tuple[bytes, str]:
    """Return a whole scrape for an Accept header, its body and content type: the library encodes
    every other collector (content negotiation included), the sweep's families follow."""
    encoder, content_type = choose_encoder(accept or "")
    head = encoder(Collected(others))
    body = sweep.render(content_type.startswith("application/openmetrics-text"))
    if head.endswith(OPENMETRICS_EOF):
        return head[: -len(OPENMETRICS_EOF)] + body + OPENMETRICS_EOF, content_type
    return head + body, content_type
