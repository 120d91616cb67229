"""The daemon's fan-out: 1,000 to 30,000 queues at a 1 s interval, scraped every 15 s as
Prometheus would: CPU %, schedule lag (all, and during scrapes), overruns, RSS, scrape cost;
on Redis and on Valkey (--server, both by default), side by side."""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.servers import SERVER_KINDS, RedisServer, selected_kinds

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SCRAPE_TIMEOUT_S = 60.0  # a full scrape of tens of thousands of queues may take seconds
SCRAPE_EVERY_S = 15.0  # Prometheus' usual scrape interval; sweeps/s is read from the scrapes
SETTLE_S = 0.2  # after a scrape: the ticks it held up are submitted (and observed) by then
LAG = "sweeperd_schedule_lag_seconds"
PROBED = (f"{LAG}_bucket", "sweeperd_schedule_overruns_total")
# What Prometheus asks for: OpenMetrics first, gzipped.
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
Buckets = list[tuple[float, float]]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime + stime


def memory_mib(pid: int, field_name: str) -> float:
    """VmRSS (now) or VmHWM (the peak) of the process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Probe:
    """The few series the bench follows between scrapes: the lag histogram and overruns."""

    lag: Buckets
    overruns: float

    @classmethod
    def parse(cls, text: str) -> Probe:
        lag: Buckets = []
        overruns = 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == f"{LAG}_bucket":
                    lag.append((float(s.labels["le"]), s.value))
                elif s.name == "sweeperd_schedule_overruns_total":
                    overruns += s.value
        return cls(lag, overruns)


def scrape(daemon: DaemonProcess) -> str:
    """/metrics as Prometheus scrapes it, the body unzipped."""
    url = f"http://127.0.0.1:{daemon.port}/metrics"
    request = urllib.request.Request(url, headers=PROMETHEUS_HEADERS)
    with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_S) as response:
        body = response.read()
        gzipped = response.headers.get("Content-Encoding") == "gzip"
    return (gzip.decompress(body) if gzipped else body).decode()


def sweeps(text: str) -> float:
    """sweeperd_sweeps_total summed over its series (per node, or per queue and node)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sweeperd_sweeps_total{")
    )


def probe(daemon: DaemonProcess) -> Probe:
    """The followed series alone (`?name[]=`): cheap where the collectors describe themselves."""
    query = urlencode([("name[]", name) for name in PROBED])
    status, body = daemon.get(f"/metrics?{query}", SCRAPE_TIMEOUT_S)
    assert status == 200, status
    return Probe.parse(body)


def quantile(buckets: Buckets, q: float) -> float:
    """histogram_quantile: linear within the bucket that holds the q-th observation."""
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank, lower, below = q * buckets[-1][1], 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return lower


def sub(a: Buckets, b: Buckets) -> Buckets:
    return [(le, ca - cb) for (le, ca), (_, cb) in zip(a, b, strict=True)]


def add(a: Buckets, b: Buckets) -> Buckets:
    return [(le, ca + cb) for (le, ca), (_, cb) in zip(a, b, strict=True)] if a else b


def seed(server: RedisServer, queues: int) -> None:
    """A live lease per queue (not due) and, every tenth queue, an expired one."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    far = int(time.time() * 1000) + 3_600_000
    for n in range(queues):
        keys = QueueKeys(f"q{n:05}")
        pipe.zadd(keys.active, {"live": far})
        if n % 10 == 0:
            pipe.zadd(keys.active, {"stalled": 1000})
            pipe.hset(keys.job("stalled"), mapping={"attempts": "1"})
    pipe.execute()
    client.close()


@dataclass
class Scrapes:
    """The window's full scrapes: how long each took, what it weighed, the lag during them."""

    seconds: list[float] = field(default_factory=list)
    mib: float = 0.0
    series: int = 0
    lag: Buckets = field(default_factory=list)
    sweeps: list[tuple[float, float]] = field(default_factory=list)  # (when, sweeps so far)

    def take(self, daemon: DaemonProcess) -> None:
        before = probe(daemon)
        started = time.monotonic()
        text = scrape(daemon)
        self.seconds.append(time.monotonic() - started)
        self.sweeps.append((started, sweeps(text)))
        time.sleep(SETTLE_S)
        self.lag = add(self.lag, sub(probe(daemon).lag, before.lag))
        self.mib = len(text.encode()) / 2**20
        self.series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def rate(points: list[tuple[float, float]]) -> float:
    """Per second between the first point and the last."""
    (t0, v0), (t1, v1) = points[0], points[-1]
    return (v1 - v0) / (t1 - t0) if t1 > t0 else float("nan")


def daemon_args(config: Path, url: str, executor: str, level: str | None) -> list[str]:
    args = ["--config", str(config), "--redis-url", url, "--interval", "1"]
    args += ["--executor", executor, "--log-level", "warning"]
    return args + (["--queue-metrics", level] if level else [])


def measure(
    workdir: Path, kind: str, queues: int, seconds: float, executor: str, level: str | None
) -> dict[str, float]:
    module = None if executor == "script" else RedisServer(workdir).module
    with RedisServer(workdir / f"{kind}-{queues}", kind=kind, module=module) as server:
        seed(server, queues)
        config = workdir / f"queues-{queues}.toml"
        names = ", ".join(f'"q{n:05}"' for n in range(queues))
        config.write_text(f"queues = [{names}]\n")
        with DaemonProcess(workdir, *daemon_args(config, server.url, executor, level)) as daemon:
            assert daemon.process is not None
            pid = daemon.process.pid
            assert server.process is not None
            server_pid = server.process.pid
            wait_until(lambda: daemon.get("/readyz")[0] == 200, 120, "ready")
            time.sleep(3)  # past the start-up sweep of every queue
            start = probe(daemon)
            cpu0, server0, t0 = cpu_seconds(pid), cpu_seconds(server_pid), time.monotonic()
            scrapes = Scrapes()
            for n in range(int(seconds // SCRAPE_EVERY_S) + 1):
                if (due := t0 + n * SCRAPE_EVERY_S) >= t0 + seconds:
                    break
                time.sleep(max(0.0, due - time.monotonic()))
                scrapes.take(daemon)
            time.sleep(max(0.0, t0 + seconds - time.monotonic()))
            cpu1, server1, t1 = cpu_seconds(pid), cpu_seconds(server_pid), time.monotonic()
            end = probe(daemon)
            lag = sub(end.lag, start.lag)
            figures = {
                "queues": queues,
                "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
                "server_cpu_percent": 100 * (server1 - server0) / (t1 - t0),
                "lag_p50_ms": 1000 * quantile(lag, 0.50),
                "lag_p99_ms": 1000 * quantile(lag, 0.99),
                "scrape_lag_p99_ms": 1000 * quantile(scrapes.lag, 0.99),
                "rss_mib": memory_mib(pid, "VmRSS"),
                "hwm_mib": memory_mib(pid, "VmHWM"),
                "sweeps_per_s": rate(scrapes.sweeps),
                "overruns": end.overruns - start.overruns,
                "scrape_s": max(scrapes.seconds),
                "scrape_mib": scrapes.mib,
                "series": scrapes.series,
            }
            daemon.stop()
    return figures


COLUMNS = [  # title, figure, width, decimals
    ("queues", "queues", 7, 0),
    ("cpu %", "cpu_percent", 6, 1),
    ("server %", "server_cpu_percent", 8, 1),
    ("lag p50 ms", "lag_p50_ms", 10, 1),
    ("lag p99 ms", "lag_p99_ms", 10, 1),
    ("p99 in scrape", "scrape_lag_p99_ms", 13, 1),
    ("RSS MiB", "rss_mib", 7, 1),
    ("peak MiB", "hwm_mib", 8, 1),
    ("sweeps/s", "sweeps_per_s", 8, 0),
    ("overruns", "overruns", 8, 0),
    ("scrape s", "scrape_s", 8, 2),
    ("scrape MiB", "scrape_mib", 10, 1),
    ("series", "series", 8, 0),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, nargs="+", default=[1_000, 10_000, 30_000])
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--executor", choices=["native", "script"], default="native")
    parser.add_argument("--queue-metrics", choices=["basic", "full"], default=None)
    parser.add_argument("--server", choices=[*SERVER_KINDS, "both"], default="both")
    opts = parser.parse_args()
    kinds = selected_kinds(opts.server)
    level = opts.queue_metrics or "the default"
    print(
        f"fan-out at a 1 s interval, {opts.seconds:g} s measured, a scrape every "
        f"{SCRAPE_EVERY_S:g} s (the slowest shown), executor {opts.executor}, {level} level"
    )
    print(f"{'server':>6} " + " ".join(f"{title:>{width}}" for title, _, width, _ in COLUMNS))
    with tempfile.TemporaryDirectory() as tmp:
        for queues in opts.queues:
            for kind in kinds:  # each count on each server in turn, the rows side by side
                f = measure(
                    Path(tmp), kind, queues, opts.seconds, opts.executor, opts.queue_metrics
                )
                shown = (f"{f[key]:>{width}.{digits}f}" for _, key, width, digits in COLUMNS)
                print(f"{kind:>6} " + " ".join(shown))


if __name__ == "__main__":
    main()
