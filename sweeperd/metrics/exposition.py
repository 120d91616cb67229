"""The sweep's numbers as a scrape: one description of its families, written straight to
exposition text for a whole scrape (the library's generic path takes ten times as long at
thousands of queues) and built as the library's metric families for its other paths."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sweeperd.constants import ACTIVE, DEAD, PENDING, QueueMetrics
from sweeperd.metrics.numbers import DURATION_BUCKETS_S, Durations, SweepNumbers, Totals

SETS = (ACTIVE, PENDING, DEAD)  # the `set` label of sweeperd_queue_jobs
BOUNDS = (*(str(float(b)) for b in DURATION_BUCKETS_S), "+Inf")  # the `le` labels
OPENMETRICS_EOF = b"# EOF\n"

HELP = {
    "recovered": "Expired leases returned to pending by the sweep (exempt ones included).",
    "dead": "Jobs moved to the dead-letter set because their stall budget ran out.",
    "exempt": "Recovered leases not counted against the stall budget because they predate a "
    "server restart (a subset of sweeperd_recovered_total).",
    "ghosts": "Ids removed from the active set that had no job row (listed nowhere by the verb); "
    "per node, or per queue with --queue-metrics full.",
    "sweeps": "EMQ.STALLED.CHECK calls sent (or their Lua port), failed ones included; per node, "
    "or per queue with --queue-metrics full.",
    "failures": "Sweep calls that failed, by reason (lane, wrongtype, counter, arguments, "
    "no_verb, connection, timeout, reply_lost, oom, noperm, moved, cluster_down, loading, "
    "topology, other).",
    "duration": "Wall time of one scheduled tick of one queue (the drain's calls are not in it); "
    "per node, or per queue with --queue-metrics full.",
    "last_success": "Unix time of the queue's last successful call.",
    "expired": "Leases of the queue still expired after its last call (sweeps not keeping up).",
    "oldest": "How long the queue's oldest expired lease had been overdue at its last call: "
    "how late recovery runs (0 when nothing was expired).",
    "jobs": "Jobs in the queue's active, pending and dead sets, read at its last call "
    "(--queue-metrics full).",
    "failed": "The queue's own count of jobs that died for any reason (its metrics:failed hash; "
    "--queue-metrics full).",
}

Row = tuple[str, tuple[str, ...], float]  # labels as written, their values, the value
HistogramRow = tuple[str, tuple[str, ...], Durations]


@dataclass(frozen=True)
class Family:
    """One family of the sweep's counters or gauges: its name, type, help, labels and rows."""

    name: str
    kind: str  # counter or gauge
    help: str
    labels: tuple[str, ...]
    rows: Iterable[Row]  # read once, as the family is written


@dataclass(frozen=True)
class HistogramFamily:
    """The sweep's one histogram family, a Durations per row."""

    name: str
    help: str
    labels: tuple[str, ...]
    rows: Iterable[HistogramRow]

    kind = "histogram"


def families(numbers: SweepNumbers) -> Iterator[Family | HistogramFamily]:
    """Every family at the numbers' level, read from them as they are now."""
    queues, nodes = numbers.listed()
    yield Family(
        "sweeperd_recovered",
        "counter",
        HELP["recovered"],
        ("queue",),
        ((q.label, q.values, q.recovered) for q in queues),
    )
    yield Family(
        "sweeperd_dead",
        "counter",
        HELP["dead"],
        ("queue",),
        ((q.label, q.values, q.dead) for q in queues),
    )
    yield Family(
        "sweeperd_exempt",
        "counter",
        HELP["exempt"],
        ("queue",),
        ((q.label, q.values, q.exempt) for q in queues),
    )
    yield Family(
        "sweeperd_sweep_failures",
        "counter",
        HELP["failures"],
        ("queue", "reason"),
        [
            (f'{q.label},reason="{reason}"', (q.name, reason), count)
            for q in queues
            for reason, count in list(q.failures.items())
        ],
    )
    yield Family(
        "sweeperd_last_success_timestamp_seconds",
        "gauge",
        HELP["last_success"],
        ("queue",),
        [(q.label, q.values, at) for q in queues if (at := q.last_success) is not None],
    )
    yield Family(
        "sweeperd_expired_leases",
        "gauge",
        HELP["expired"],
        ("queue",),
        [(q.label, q.values, n) for q in queues if (n := q.expired) is not None],
    )
    yield Family(
        "sweeperd_oldest_expired_age_seconds",
        "gauge",
        HELP["oldest"],
        ("queue",),
        [(q.label, q.values, age) for q in queues if (age := q.oldest_expired_age) is not None],
    )
    # Sweeps, ghosts and durations: the node's totals, or each queue's with full.
    full = numbers.level is QueueMetrics.FULL
    owners: Sequence[Totals] = queues if full else nodes
    by = ("queue",) if full else ("node",)
    yield Family(
        "sweeperd_sweeps",
        "counter",
        HELP["sweeps"],
        by,
        ((o.label, o.values, o.sweeps) for o in owners),
    )
    yield Family(
        "sweeperd_ghosts_removed",
        "counter",
        HELP["ghosts"],
        by,
        ((o.label, o.values, o.ghosts) for o in owners),
    )
    yield HistogramFamily(
        "sweeperd_sweep_duration_seconds",
        HELP["duration"],
        by,
        ((o.label, o.values, o.durations) for o in owners),
    )
    if full:
        yield Family(
            "sweeperd_queue_jobs",
            "gauge",
            HELP["jobs"],
            ("queue", "set"),
            [
                (f'{q.label},set="{name}"', (q.name, name), size)
                for q in queues
                if (jobs := q.jobs) is not None
                for name, size in zip(SETS, jobs, strict=True)
            ],
        )
        yield Family(
            "sweeperd_queue_failed_jobs",
            "gauge",
            HELP["failed"],
            ("queue",),
            [(q.label, q.values, n) for q in queues if (n := q.failed) is not None],
        )


def _number(value: float) -> str:
    return str(value) if type(value) is int else str(floatToGoString(value))  # type: ignore[no-untyped-call]


def cumulative(durations: Durations) -> list[tuple[str, int]]:
    """A histogram's buckets as exposition counts them: each with every one below it."""
    running, out = 0, []
    for bound, count in zip(BOUNDS, list(durations.buckets), strict=True):
        running += count
        out.append((bound, running))
    return out


def text(described: Iterable[Family | HistogramFamily], openmetrics: bool) -> bytes:
    """The families in the text format, or OpenMetrics (without its EOF)."""
    lines: list[str] = []
    for f in described:
        shown = f.name if openmetrics or f.kind != "counter" else f"{f.name}_total"
        lines.append(f"# HELP {shown} {f.help}\n# TYPE {shown} {f.kind}\n")
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
    """A family as the library's metric family."""
    if isinstance(f, HistogramFamily):
        histogram = HistogramMetricFamily(f.name, f.help, labels=f.labels)
        for _, values, durations in f.rows:
            buckets = [(bound, float(n)) for bound, n in cumulative(durations)]
            histogram.add_metric(list(values), buckets, durations.total)
        return histogram
    family = (CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily)(
        f.name, f.help, labels=f.labels
    )
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
        """The family names, so that a ?name[]= scrape of other series skips this collector."""
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
    """A whole scrape for an Accept header, its body and content type: the library encodes
    every other collector (content negotiation included), the sweep's families follow."""
    encoder, content_type = choose_encoder(accept or "")
    head = encoder(Collected(others))
    body = sweep.render(content_type.startswith("application/openmetrics-text"))
    if head.endswith(OPENMETRICS_EOF):
        return head[: -len(OPENMETRICS_EOF)] + body + OPENMETRICS_EOF, content_type
    return head + body, content_type
