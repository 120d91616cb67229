"""Recovery of leases taken while `sweeperd run` runs: a worker fleet, a process of its own,
claims jobs by a Lua script that takes the lease on the server's clock, completes most of them
within 200 ms and dies on a share, with leases of chosen lengths; the daemon hears its queues
change (--deadline-source tracking) or does not (off), in one run, on each server kind.

For each: how long after its deadline each dead worker's lease came back (p50, p99, max, on the
server's clock: a sampler woken by the pending sets' keyspace events reads them with TIME), how
many came back, the daemon's CPU while the fleet claims (after --warmup s of claims, a steady
state: the listener learns the leases' length from its first reads), and its calls (sweeps
plus the earliest deadlines it read after a change) per second and per claim. The loads (--loads):

- short: 50 queues x 400 claims/s, leases 0.3-8 s, 5 % dying;
- long: 1,000 queues x 3,000 claims/s, 30 s leases, 1 % dying (--scale shrinks the claims and
  the queues alike on a small machine: say so with the figures).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fanout import cpu_seconds
from bench.bench_latency import percentile
from bench.sampler import Sampler
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.servers import MODULE_PATH, RedisServer
from tests.support.worker_fleet import Load, fleet

MAX_STALLED = 5  # nothing dies: every dead worker's lease comes back to pending once
PROBED = ("sweeperd_sweeps_total", "sweeperd_deadline_reads_total")
SETTLE_S = 3.0


LOADS = {
    "short": Load(50, 400, (0.3, 8.0), 0.05, 30.0),
    "long": Load(1_000, 3_000, (30.0, 30.0), 0.01, 40.0),
}


def calls(daemon: DaemonProcess) -> tuple[float, float]:
    """The daemon's sweep calls and deadline reads so far."""
    status, body = daemon.get(f"/metrics?{urlencode([('name[]', n) for n in PROBED])}", 60)
    assert status == 200, status
    found = dict.fromkeys(PROBED, 0.0)
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name in found:
                found[s.name] += s.value
    return found[PROBED[0]], found[PROBED[1]]


def measure(
    workdir: Path,
    server: RedisServer,
    load: Load,
    executor: str,
    interval: float,
    source: str,
    warmup: float,
) -> dict[str, float]:
    """One daemon under the fleet: its figures, the CPU and calls over the fleet's claims after
    `warmup` s of them (the latencies over every claim)."""
    with server.client() as client:
        client.flushall()
    config = workdir / "queues.toml"
    names = ", ".join(f'"l{n:04}"' for n in range(load.queues))
    config.write_text(f"queues = [{names}]\n")
    args = ["--config", str(config), "--redis-url", server.url, "--executor", executor]
    args += ["--log-level", "warning", "--max-stalled", str(MAX_STALLED), "--shard", "off"]
    args += ["--interval", f"{interval:g}", "--deadline-source", source]
    sampler = Sampler(server).start()
    with DaemonProcess(workdir, *args) as daemon:
        assert daemon.process is not None
        pid = daemon.process.pid
        wait_until(lambda: daemon.get("/readyz")[0] == 200, 120, "ready")
        time.sleep(SETTLE_S)
        assert server.process is not None
        shape = {**load.__dict__, "seconds": load.seconds + warmup}
        worker = subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps([server.port, shape])],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(warmup)
        calls0, cpu0, t0 = calls(daemon), cpu_seconds(pid), time.monotonic()
        out, _ = worker.communicate()
        assert worker.returncode == 0, worker.returncode
        calls1, cpu1, t1 = calls(daemon), cpu_seconds(pid), time.monotonic()
        told = json.loads(out)
        given_up = t1 + load.lease_s[1] + interval + 10
        while len(sampler.seen) < told["dying"] and time.monotonic() < given_up:
            time.sleep(0.05)
        daemon.stop()
    sampler.stop()
    lat = sampler.latencies_ms
    claims_s = told["claims"] / told["seconds"]
    return {
        "p50": percentile(lat, 0.50),
        "p99": percentile(lat, 0.99),
        "max": max(lat, default=float("nan")),
        "over_1s": sum(1 for x in lat if x > 1000),
        "back": len(lat),
        "dying": told["dying"],
        "claims_s": claims_s,
        "cpu": 100 * (cpu1 - cpu0) / (t1 - t0),
        "sweeps_s": (calls1[0] - calls0[0]) / (t1 - t0),
        "reads_s": (calls1[1] - calls0[1]) / (t1 - t0),
        "calls_s": (sum(calls1) - sum(calls0)) / (t1 - t0),
        "per_claim": (sum(calls1) - sum(calls0)) / (t1 - t0) / max(1e-9, claims_s),
    }


COLUMNS = [  # title, figure, width, decimals
    ("p50 ms", "p50", 8, 1),
    ("p99 ms", "p99", 9, 1),
    ("max ms", "max", 9, 1),
    (">1 s", "over_1s", 5, 0),
    ("back", "back", 6, 0),
    ("of", "dying", 6, 0),
    ("claims/s", "claims_s", 9, 0),
    ("cpu %", "cpu", 7, 2),
    ("sweeps/s", "sweeps_s", 8, 1),
    ("reads/s", "reads_s", 8, 1),
    ("calls/s", "calls_s", 8, 1),
    ("calls/claim", "per_claim", 11, 3),
]


def row(label: str, figures: dict[str, float]) -> str:
    return f"{label:<34}" + " ".join(f"{figures[k]:>{w}.{d}f}" for _, k, w, d in COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--loads", default="short,long")
    parser.add_argument("--kinds", default="redis,valkey")
    parser.add_argument("--executors", default="native")
    parser.add_argument("--intervals", default="5,60", help="the second: tracking on only")
    parser.add_argument("--scale", type=float, default=1.0, help="the long load's size, 0-1")
    parser.add_argument("--seconds", type=float, default=0.0, help="the fleet claims this long")
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="claims before the CPU and calls are read"
    )
    opts = parser.parse_args()
    if opts.worker:
        port, shape = json.loads(opts.worker)
        shape["lease_s"] = tuple(shape["lease_s"])
        print(json.dumps(fleet(port, Load(**shape), seed=38)))
        return
    intervals = [float(x) for x in opts.intervals.split(",")]
    header = f"{'':<34}" + " ".join(f"{t:>{w}}" for t, _, w, _ in COLUMNS)
    for name in opts.loads.split(","):
        load = LOADS[name]
        if name == "long" and opts.scale != 1.0:
            q, c = int(load.queues * opts.scale), load.claims_per_s * opts.scale
            load = Load(q, c, load.lease_s, load.dying, load.seconds)
        if opts.seconds:
            load = Load(load.queues, load.claims_per_s, load.lease_s, load.dying, opts.seconds)
        print(f"\n{name}: {load}")
        for kind in opts.kinds.split(","):
            for executor in opts.executors.split(","):
                module = MODULE_PATH if executor == "native" else None
                with (
                    tempfile.TemporaryDirectory() as tmp,
                    RedisServer(Path(tmp) / "server", kind=kind, module=module) as server,
                ):
                    print(header)
                    runs = [(intervals[0], "tracking"), (intervals[0], "off")]
                    runs += [(i, "tracking") for i in intervals[1:]]
                    got: dict[tuple[float, str], dict[str, float]] = {}
                    for interval, source in runs:
                        got[interval, source] = figures = measure(
                            Path(tmp), server, load, executor, interval, source, opts.warmup
                        )
                        label = f"{kind} {executor} --interval {interval:g} {source}"
                        print(row(label, figures), flush=True)
                    on, off = got[intervals[0], "tracking"], got[intervals[0], "off"]
                    print(
                        f"  tracking/off at --interval {intervals[0]:g}: "
                        f"cpu {on['cpu'] / max(off['cpu'], 1e-9):.2f} x, "
                        f"calls {on['calls_s'] / max(off['calls_s'], 1e-9):.2f} x, "
                        f"p99 {on['p99'] / max(off['p99'], 1e-9):.3f} x"
                    )


if __name__ == "__main__":
    main()
