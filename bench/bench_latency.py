"""Recovery at the deadline: 1,000 queues of 10 leases falling due over 60 s beside 10,000 idle
queues, swept by `sweeperd run` at the default interval and at --interval 60, on Redis and Valkey,
by each executor and each design (--designs) in turn, in one run.

For each: how long after its deadline each lease came back (p50, p99, max: a sampler woken by
the pending sets' keyspace events reads them with the server's TIME, so on the server's clock),
the daemon's own sweeperd_recovery_delay_seconds p99 beside it, sweep calls per second at idle
(before the first deadline) and while recovering (from the first deadline to the last lease
back), how many of those calls a second took a lease (the recovery delay histogram's count: one
per due batch), the daemon's CPU in each window and its overruns. Every lease is counted
(max_stalled 5: none dies), so each comes back to pending once. Beside the ratios, each design's
calls while recovering against the issue's budget: 1.2 x the baseline's plus one per due batch.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import redis
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fanout import Buckets, cpu_seconds, quantile, sub
from bench.sampler import Sampler
from sweeperd.constants import DEFAULT_INTERVAL_S
from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.servers import MODULE_PATH, SERVER_KINDS, RedisServer, selected_kinds

# The daemon's arguments for each design: sweeps at the interval only (today's), and at each
# queue's deadline; each other design's figures are compared with the baseline's.
DESIGNS = {"interval": ("--sweep-at", "interval"), "deadline": ("--sweep-at", "deadline")}
BASELINE = "interval"
START_S = 20.0  # from the seeding to the idle window: the daemon starts, sweeps every queue once
SETTLE_S = 3.0  # after /readyz, before the idle window opens
MAX_STALLED = 5  # no lease at its budget: every one comes back to pending
HOUR_MS = 3_600_000  # an idle queue's lease falls due this far ahead: a worker holding it
DELAY = "sweeperd_recovery_delay_seconds"
PROBED = ("sweeperd_sweeps_total", "sweeperd_schedule_overruns_total", f"{DELAY}_bucket")
KEPT_LOGS = Path(tempfile.gettempdir()) / "bench_latency"  # the log of a run not all back


@dataclass
class Probe:
    """The daemon's sweeps, overruns and recovery delays so far."""

    sweeps: float
    overruns: float
    delays: Buckets

    @classmethod
    def read(cls, daemon: DaemonProcess) -> Probe:
        status, body = daemon.get(f"/metrics?{urlencode([('name[]', n) for n in PROBED])}", 60)
        assert status == 200, status
        sweeps = overruns = 0.0
        delays: dict[float, float] = {}
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                if s.name == "sweeperd_sweeps_total":
                    sweeps += s.value
                elif s.name == "sweeperd_schedule_overruns_total":
                    overruns += s.value
                elif s.name == f"{DELAY}_bucket":
                    le = float(s.labels["le"])
                    delays[le] = delays.get(le, 0.0) + s.value
        return cls(sweeps, overruns, sorted(delays.items()))


@dataclass
class Window:
    """The daemon between two probes: its CPU and the server's, its sweep calls per second."""

    pids: tuple[int, int]  # the daemon's, the server's
    start: Probe
    cpu0: tuple[float, float]
    t0: float
    end: Probe | None = None
    cpu1: tuple[float, float] = (0.0, 0.0)
    t1: float = 0.0

    @classmethod
    def open(cls, daemon: DaemonProcess, pids: tuple[int, int]) -> Window:
        probe = Probe.read(daemon)
        return cls(pids, probe, cls.cpu(pids), time.monotonic())

    @staticmethod
    def cpu(pids: tuple[int, int]) -> tuple[float, float]:
        return cpu_seconds(pids[0]), cpu_seconds(pids[1])

    def close(self, daemon: DaemonProcess) -> Window:
        self.cpu1, self.t1 = self.cpu(self.pids), time.monotonic()
        self.end = Probe.read(daemon)
        return self

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    def cpu_percent(self, which: int = 0) -> float:
        """The daemon's CPU in the window (`which` 1: the server's), in % of one core."""
        return 100 * (self.cpu1[which] - self.cpu0[which]) / self.seconds

    def calls_per_s(self) -> float:
        assert self.end is not None
        return (self.end.sweeps - self.start.sweeps) / self.seconds


def server_ms(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


def seed(server: RedisServer, opts: argparse.Namespace, first_ms: float) -> dict[bytes, float]:
    """The recovering queues' leases, falling due from `first_ms` over the spread, counted (on
    this run's epoch); an idle queue's one lease an hour ahead. The deadlines, by job id."""
    client = server.client()
    run_id = client.info("server")["run_id"]
    rng = random.Random(27)
    deadlines: dict[bytes, float] = {}
    pipe = client.pipeline(transaction=False)
    for n in range(opts.queues):
        keys = QueueKeys(f"r{n:05}")
        for k in range(opts.leases):
            job = f"r{n:05}-{k}".encode()
            deadlines[job] = float(int(first_ms + rng.uniform(0, opts.spread * 1000)))
            pipe.zadd(keys.active, {job: deadlines[job]})
            pipe.hset(keys.job(job), mapping={"attempts": "1", "lease_epoch": run_id})
    for n in range(opts.idle_queues):
        keys = QueueKeys(f"i{n:05}")
        pipe.zadd(keys.active, {"live": first_ms + HOUR_MS})
        pipe.hset(keys.job("live"), mapping={"attempts": "1", "lease_epoch": run_id})
    pipe.execute()
    client.close()
    return deadlines


def queue_names(opts: argparse.Namespace) -> list[str]:
    return [f"r{n:05}" for n in range(opts.queues)] + [f"i{n:05}" for n in range(opts.idle_queues)]


def daemon_args(config: Path, url: str, executor: str, interval: float, design: str) -> list[str]:
    args = ["--config", str(config), "--redis-url", url, "--executor", executor]
    args += ["--log-level", "warning", "--max-stalled", str(MAX_STALLED)]
    args += [] if interval == DEFAULT_INTERVAL_S else ["--interval", f"{interval:g}"]
    return args + list(DESIGNS[design])


def observed(buckets: Buckets) -> float:
    """How many observations a histogram holds (its +Inf bucket)."""
    return buckets[-1][1] if buckets else 0.0


def within(buckets: Buckets, bound: float) -> float:
    """The share of a histogram's observations at or below one of its bounds."""
    total = observed(buckets)
    return next((n for le, n in buckets if le == bound), float("nan")) / total if total else 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, int(q * len(ranked)))]


def measure(
    workdir: Path, opts: argparse.Namespace, kind: str, executor: str, interval: float, design: str
) -> dict[str, float]:
    module = MODULE_PATH if executor == "native" else None
    idle_s = max(interval, opts.idle)
    with RedisServer(
        workdir / f"{kind}-{executor}-{interval:g}-{design}", kind=kind, module=module
    ) as server:
        with server.client() as client:
            seeded_ms, seeded_s = server_ms(client), time.monotonic()
        first_ms = seeded_ms + (START_S + idle_s) * 1000
        deadlines = seed(server, opts, first_ms)
        last_ms = max(deadlines.values())
        config = workdir / "queues.toml"
        names = ", ".join(f'"{q}"' for q in queue_names(opts))
        config.write_text(f"queues = [{names}]\n")
        args = daemon_args(config, server.url, executor, interval, design)
        sampler = Sampler(server, deadlines).start()
        with DaemonProcess(workdir, *args) as daemon:
            assert daemon.process is not None and server.process is not None
            pids = daemon.process.pid, server.process.pid
            wait_until(lambda: daemon.get("/readyz")[0] == 200, 120, "ready")
            time.sleep(SETTLE_S)
            first_s = seeded_s + (first_ms - seeded_ms) / 1000
            idle = Window.open(daemon, pids)
            time.sleep(max(0.0, first_s - 1 - time.monotonic()))
            idle.close(daemon)
            time.sleep(max(0.0, first_s - time.monotonic()))
            recovering = Window.open(daemon, pids)
            # Every lease is back within an interval of the last deadline, or the run says so.
            given_up = first_s + (last_ms - first_ms) / 1000 + 3 * interval + 60
            while not sampler.all_back() and time.monotonic() < given_up:
                time.sleep(0.05)
            recovering.close(daemon)
            if not sampler.all_back():
                kept = KEPT_LOGS / f"{kind}-{executor}-{interval:g}-{design}.log"
                kept.parent.mkdir(parents=True, exist_ok=True)
                kept.write_text(daemon.log_text())
                print(f"  {len(sampler.seen)} of {len(deadlines)} back; the log: {kept}")
            daemon.stop()
        sampler.stop()
    assert idle.end is not None and recovering.end is not None
    delays = sub(recovering.end.delays, recovering.start.delays)
    latencies = sampler.latencies_ms
    return {
        "lat_p50": percentile(latencies, 0.50),
        "lat_p99": percentile(latencies, 0.99),
        "lat_max": max(latencies),
        "metric_p99": 1000 * quantile(delays, 0.99),
        "metric_50ms": 100 * within(delays, 0.05),
        "calls_idle": idle.calls_per_s(),
        "calls_expected": (opts.queues + opts.idle_queues) / interval,
        "calls_recovering": recovering.calls_per_s(),
        "calls_taking": observed(delays) / recovering.seconds,
        "cpu_idle": idle.cpu_percent(),
        "cpu_recovering": recovering.cpu_percent(),
        "server_recovering": recovering.cpu_percent(1),
        "overruns": recovering.end.overruns,
        "back": len(sampler.seen),
    }


COLUMNS = [  # title, figure, width, decimals
    ("lat p50 ms", "lat_p50", 10, 1),
    ("lat p99 ms", "lat_p99", 10, 1),
    ("lat max ms", "lat_max", 10, 1),
    ("metric p99 ms", "metric_p99", 13, 1),
    ("metric <=50ms %", "metric_50ms", 15, 1),
    ("calls/s idle", "calls_idle", 12, 1),
    ("queues/interval", "calls_expected", 15, 1),
    ("calls/s recovering", "calls_recovering", 18, 1),
    ("calls/s taking", "calls_taking", 14, 1),
    ("cpu % idle", "cpu_idle", 10, 2),
    ("cpu % recovering", "cpu_recovering", 16, 2),
    ("server % recovering", "server_recovering", 19, 2),
    ("overruns", "overruns", 8, 0),
    ("back", "back", 6, 0),
]
RATIOS = ("lat_p99", "lat_max", "calls_idle", "calls_recovering", "cpu_recovering")
CALLS_BUDGET = 1.2  # calls while recovering: at most this times the baseline's, plus one per
# due batch (a call that took a lease)


def budget_share(figures: dict[str, float], baseline: dict[str, float]) -> float:
    """A design's calls while recovering as a share of its budget (at most 1 meets it)."""
    allowed = CALLS_BUDGET * baseline["calls_recovering"] + figures["calls_taking"]
    return figures["calls_recovering"] / allowed


def row(label: str, figures: dict[str, float]) -> str:
    return label + " ".join(f"{figures[key]:>{w}.{d}f}" for _, key, w, d in COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, default=1_000, help="queues with leases falling due")
    parser.add_argument("--leases", type=int, default=10, help="leases per such queue")
    parser.add_argument("--idle-queues", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=60.0, help="s the deadlines spread over")
    parser.add_argument("--idle", type=float, default=15.0, help="s at idle, at least an interval")
    parser.add_argument("--intervals", type=float, nargs="+", default=[DEFAULT_INTERVAL_S, 60.0])
    parser.add_argument("--server", choices=[*SERVER_KINDS, "both"], default="both")
    parser.add_argument(
        "--executors", nargs="+", choices=["native", "script"], default=["native", "script"]
    )
    parser.add_argument("--designs", nargs="+", choices=sorted(DESIGNS), default=sorted(DESIGNS))
    opts = parser.parse_args()
    kinds = selected_kinds(opts.server)
    print(
        f"{opts.queues} queues x {opts.leases} leases due over {opts.spread:g} s, "
        f"{opts.idle_queues} idle queues; designs {', '.join(opts.designs)}"
    )
    label = f"{'server':>6} {'executor':>8} {'interval':>8} {'design':>8} "
    print(label + " ".join(f"{title:>{w}}" for title, _, w, _ in COLUMNS))
    measured: dict[tuple[str, str, float, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for interval in opts.intervals:
            for kind in kinds:
                for executor in opts.executors:
                    for design in opts.designs:  # the designs side by side, in turn
                        f = measure(Path(tmp), opts, kind, executor, interval, design)
                        measured[kind, executor, interval, design] = f
                        print(row(f"{kind:>6} {executor:>8} {interval:>8g} {design:>8} ", f))
    if BASELINE in opts.designs and len(opts.designs) > 1:
        print(
            f"\nratios to {BASELINE}, measured in turn: "
            + ", ".join(RATIOS)
            + f"; calls recovering / ({CALLS_BUDGET:g} x {BASELINE}'s + calls taking)"
        )
        for (kind, executor, interval, design), f in measured.items():
            if design != BASELINE:
                before = measured[kind, executor, interval, BASELINE]
                shown = [f"{f[k] / before[k]:.3f}" if before[k] else "-" for k in RATIOS]
                shown.append(f"{budget_share(f, before):.3f}")
                print(f"{kind:>6} {executor:>8} {interval:>8g} {design:>8} " + " ".join(shown))


if __name__ == "__main__":
    main()
