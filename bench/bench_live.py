"""Recovery of leases taken while `sweeperd run` runs: a worker fleet, a process of its own,
claims jobs by a Lua script that takes the lease on the server's clock, completes most of them
within 200 ms and dies on a share, with leases of chosen lengths; the daemon hears its queues
change (--deadline-source tracking) or does not (off), in one run, on each server kind.

For each: how long after its deadline each dead worker's lease came back (p50, p99, max, on the
server's clock: a sampler woken by the pending sets' keyspace events reads them with TIME), how
many came back, the daemon's CPU while the fleet claims, and its calls (sweeps plus the earliest
deadlines it read after a change) per second and per claim. The loads (--loads):

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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import redis
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fanout import cpu_seconds
from bench.bench_latency import percentile
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.servers import MODULE_PATH, RedisServer
from tests.support.worker_fleet import Load, fleet

MAX_STALLED = 5  # nothing dies: every dead worker's lease comes back to pending once
EVENTS = "__keyspace@0__:emq:{*}:pending"
PROBED = ("sweeperd_sweeps_total", "sweeperd_deadline_reads_total")
SETTLE_S = 3.0


LOADS = {
    "short": Load(50, 400, (0.3, 8.0), 0.05, 30.0),
    "long": Load(1_000, 3_000, (30.0, 30.0), 0.01, 40.0),
}


@dataclass
class Sampler:
    """Reads the pending sets a keyspace event names, with the server's TIME: each lease's
    latency after its deadline (the row's `deadline`), on the server's clock."""

    server: RedisServer
    latencies_ms: list[float] = field(default_factory=list)
    seen: set[bytes] = field(default_factory=set)
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Sampler:
        with self.server.client() as client:
            client.config_set("notify-keyspace-events", "Kz")
        events = self.server.client().pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        events.psubscribe(EVENTS)
        self.thread = threading.Thread(target=self.run, args=(events,), daemon=True)
        self.thread.start()
        return self

    def run(self, events: redis.client.PubSub) -> None:
        reader = self.server.client()
        while not self.stopped.is_set():
            message = events.get_message(timeout=0.1)
            sets = set()
            while message is not None:
                sets.add(message["channel"].decode().removeprefix("__keyspace@0__:"))
                message = events.get_message(timeout=0)
            if not sets:
                continue
            pipe = reader.pipeline(transaction=False)
            pipe.time()
            for pending in sorted(sets):
                pipe.zrange(pending, 0, -1)
            (seconds, micros), *read = pipe.execute()
            now_ms = seconds * 1000 + micros / 1000
            new = [
                (pending, job)
                for pending, ids in zip(sorted(sets), read, strict=True)
                for job in ids
                if job not in self.seen
            ]
            pipe = reader.pipeline(transaction=False)
            for pending, job in new:
                pipe.hget(pending.removesuffix("pending") + f"job:{job.decode()}", "deadline")
            for (_, job), deadline in zip(new, pipe.execute(), strict=True):
                self.seen.add(job)
                if deadline is not None:
                    self.latencies_ms.append(now_ms - float(deadline))
        events.close()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()


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
    workdir: Path, server: RedisServer, load: Load, executor: str, interval: float, source: str
) -> dict[str, float]:
    """One daemon under the fleet: its figures."""
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
        calls0, cpu0, t0 = calls(daemon), cpu_seconds(pid), time.monotonic()
        assert server.process is not None
        worker = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps([server.port, load.__dict__])],
            capture_output=True,
            check=True,
            text=True,
        )
        calls1, cpu1, t1 = calls(daemon), cpu_seconds(pid), time.monotonic()
        told = json.loads(worker.stdout)
        given_up = t1 + load.lease_s[1] + interval + 10
        while len(sampler.seen) < told["dying"] and time.monotonic() < given_up:
            time.sleep(0.05)
        daemon.stop()
    sampler.stop()
    lat = sampler.latencies_ms
    return {
        "p50": percentile(lat, 0.50),
        "p99": percentile(lat, 0.99),
        "max": max(lat, default=float("nan")),
        "over_1s": sum(1 for x in lat if x > 1000),
        "back": len(lat),
        "dying": told["dying"],
        "claims_s": told["claims"] / told["seconds"],
        "cpu": 100 * (cpu1 - cpu0) / (t1 - t0),
        "sweeps_s": (calls1[0] - calls0[0]) / (t1 - t0),
        "reads_s": (calls1[1] - calls0[1]) / (t1 - t0),
        "calls_s": (sum(calls1) - sum(calls0)) / (t1 - t0),
        "per_claim": (sum(calls1) - sum(calls0)) / max(1, told["claims"]),
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
                            Path(tmp), server, load, executor, interval, source
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
