"""The daemon's fan-out: 1,000 and 10,000 queues at a 1 s interval — CPU %, schedule lag, RSS."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sweeperd.keyspace import QueueKeys
from tests.daemon_process import DaemonProcess, wait_until
from tests.server import RedisServer

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SCRAPE_TIMEOUT_S = 60.0  # ten thousand queues are 190,000 series: seconds to render


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def histogram(text: str, name: str) -> list[tuple[float, float]]:
    """Cumulative (upper bound, count) pairs of a histogram without labels."""
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return [
                (float(s.labels["le"]), s.value)
                for s in family.samples
                if s.name == f"{name}_bucket"
            ]
    return []


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
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


def sub(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(le, ca - cb) for (le, ca), (_, cb) in zip(a, b, strict=True)]


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


def measure(workdir: Path, queues: int, seconds: float, executor: str) -> dict[str, float]:
    module = None if executor == "script" else RedisServer(workdir).module
    with RedisServer(workdir / f"redis-{queues}", module=module) as server:
        seed(server, queues)
        config = workdir / f"queues-{queues}.toml"
        names = ", ".join(f'"q{n:05}"' for n in range(queues))
        config.write_text(f"queues = [{names}]\n")
        args = [
            "--config",
            str(config),
            "--redis-url",
            server.url,
            "--interval",
            "1",
            "--executor",
            executor,
            "--log-level",
            "warning",
        ]
        with DaemonProcess(workdir, *args) as daemon:
            assert daemon.process is not None
            pid = daemon.process.pid
            wait_until(lambda: daemon.get("/readyz")[0] == 200, 60, "ready")
            time.sleep(3)  # past the start-up sweep of every queue
            # The window holds exactly one scrape: the one taken at its start.
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            before = daemon.metrics_text(SCRAPE_TIMEOUT_S)
            lag0 = histogram(before, "sweeperd_schedule_lag_seconds")
            sweeps0 = total(before, "sweeperd_sweeps_total")
            overruns0 = total(before, "sweeperd_schedule_overruns_total")
            time.sleep(seconds)
            cpu1, t1 = cpu_seconds(pid), time.monotonic()
            scrape_started = time.monotonic()
            text = daemon.metrics_text(SCRAPE_TIMEOUT_S)
            scrape_s = time.monotonic() - scrape_started
            lag = sub(histogram(text, "sweeperd_schedule_lag_seconds"), lag0)
            figures = {
                "queues": queues,
                "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
                "lag_p50_ms": 1000 * quantile(lag, 0.50),
                "lag_p99_ms": 1000 * quantile(lag, 0.99),
                "rss_mib": rss_mib(pid),
                "sweeps_per_s": (total(text, "sweeperd_sweeps_total") - sweeps0) / (t1 - t0),
                "overruns": total(text, "sweeperd_schedule_overruns_total") - overruns0,
                "scrape_s": scrape_s,
                "scrape_mib": len(text.encode()) / 2**20,
            }
            daemon.stop()
    return figures


COLUMNS = [  # title, figure, width, decimals
    ("queues", "queues", 8, 0),
    ("cpu %", "cpu_percent", 7, 1),
    ("lag p50 ms", "lag_p50_ms", 11, 1),
    ("lag p99 ms", "lag_p99_ms", 11, 1),
    ("RSS MiB", "rss_mib", 8, 1),
    ("sweeps/s", "sweeps_per_s", 9, 0),
    ("overruns", "overruns", 9, 0),
    ("scrape s", "scrape_s", 9, 2),
    ("scrape MiB", "scrape_mib", 11, 1),
]


def total(text: str, name: str) -> float:
    return sum(
        s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--executor", choices=["native", "script"], default="native")
    opts = parser.parse_args()
    print(f"fan-out at a 1 s interval, {opts.seconds:g} s measured, executor {opts.executor}")
    print(" ".join(f"{title:>{width}}" for title, _, width, _ in COLUMNS))
    with tempfile.TemporaryDirectory() as tmp:
        for queues in opts.queues:
            f = measure(Path(tmp), queues, opts.seconds, opts.executor)
            print(" ".join(f"{f[key]:>{width}.{digits}f}" for _, key, width, digits in COLUMNS))


if __name__ == "__main__":
    main()
