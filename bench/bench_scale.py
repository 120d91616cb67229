"""Many queues on one replica: the settings of 200,000 queues; per server and queue count, the
daemon's time to ready, idle CPU and RSS at --interval 60 and 5 with the server's CPU, the
server's CPU per idle sweep call (whole, the script's brief reply, the probe; both executors),
/metrics' size and time per --queue-metrics level, and
top's first view and the ZCOUNTs of each refresh after it; on Redis and on Valkey."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fanout import cpu_seconds, memory_mib, scrape
from sweeperd.config.settings import build_settings
from sweeperd.daemon.settle import SETTLE_INTERVALS
from sweeperd.keyspace import QueueKeys
from sweeperd.server.connection import Connection, connect
from sweeperd.server.packed import round_trip
from sweeperd.top.refresh import READS_PER_REFRESH, Top, wall_clock
from sweeperd.verb.executors import NATIVE, SCRIPT
from sweeperd.verb.replies import Call
from sweeperd.verb.rounds import Packed, sweep_round
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import PAST_MS, lease
from tests.support.servers import SERVER_KINDS, RedisServer, selected_kinds

READY_TIMEOUT_S = 300.0
FULL_UP_TO = 30_000  # full's scrape above this many queues takes minutes and a gigabyte
IDLE_QUEUES = 10_000
IDLE_CALLS = 50_000  # idle calls timed per executor and form
ROUND = 1_000
SETTINGS_QUEUES = (100_000, 200_000)


def names(queues: int) -> list[str]:
    return [f"tenant-{n:06}" for n in range(queues)]


def config_file(workdir: Path, queues: int) -> Path:
    """A TOML file listing `queues` queues."""
    path = workdir / f"queues-{queues}.toml"
    if not path.exists():
        listed = ", ".join(f'"{name}"' for name in names(queues))
        path.write_text(f"queues = [{listed}]\n")
    return path


def settings_seconds(workdir: Path, queues: int) -> float:
    """CPU seconds to read and check the settings of a file listing `queues` queues."""
    path = config_file(workdir, queues)
    started = time.process_time()
    build_settings({}, path, logs_to_tty=False)
    return time.process_time() - started


def seed(server: RedisServer, queues: int) -> None:
    """A lease far from due in every tenth queue; the others empty (idle queues either way)."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    far = int(time.time() * 1000) + 3_600_000
    for name in names(queues)[::10]:
        pipe.zadd(QueueKeys(name).active, {"live": far})
    pipe.execute()
    client.close()


def calls_of(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0


def idle_call_us(server: RedisServer) -> dict[str, float]:
    """The server's CPU µs per idle sweep call (its process's, reads and writes included), over
    10,000 queues seeded as the daemon's (a lease far from due in every tenth), in rounds of
    1,000 whose first call is whole, as the daemon sends them: every call whole; every other
    call the script's brief reply; every other call a probe (the daemon's). The forms take
    turns and the least of three turns is kept."""
    assert server.process is not None
    client = connect(server.url, socket_timeout=30.0)
    server.client().flushall()
    seed(server, IDLE_QUEUES)
    found: dict[str, float] = {}
    for _ in range(3):
        for executor in (NATIVE, SCRIPT):
            executor.prepare(client)
            for form in ("whole", "script brief", "probe"):
                brief = form != "whole"
                calls = [Call(QueueKeys(n), 1, 100, brief=brief) for n in names(IDLE_QUEUES)]
                packed, sent = Packed(), 0
                cpu0 = cpu_seconds(server.process.pid)
                while sent < IDLE_CALLS:
                    for i in range(0, len(calls), ROUND):
                        done = [replace(calls[i], brief=False), *calls[i + 1 : i + ROUND]]
                        if form == "script brief":
                            wire = b"".join(packed.sweep(executor, call) for call in done)
                            round_trip(client, wire, len(done))
                        else:
                            sweep_round(client, executor, done, packed)
                        sent += len(done)
                us = 1e6 * (cpu_seconds(server.process.pid) - cpu0) / sent
                key = f"{executor.name} {form}"
                found[key] = min(found.get(key, float("inf")), us)
    client.close()
    return found


@contextmanager
def daemon(workdir: Path, server: RedisServer, queues: int, *args: str) -> Iterator[DaemonProcess]:
    config = config_file(workdir, queues)
    argv = ["--config", str(config), "--redis-url", server.url, "--log-level", "warning", *args]
    with DaemonProcess(workdir, *argv) as process:
        yield process


def run_figures(
    workdir: Path, server: RedisServer, queues: int, interval: int, seconds: float
) -> dict[str, float]:
    """Time to ready, then idle CPU over `seconds` once the heap is settled, RSS, and
    the server's CPU over that window (its process's, a share of a core and µs per call)."""
    assert server.process is not None
    started = time.monotonic()
    with daemon(workdir, server, queues, "--interval", str(interval)) as process:
        assert process.process is not None
        wait_until(lambda: process.get("/readyz")[0] == 200, READY_TIMEOUT_S, "ready")
        ready_s = time.monotonic() - started
        # The steady state: every queue swept twice and the heap settled (frozen), two intervals
        # after the start (the full collections before it cost 0.1-0.3 % of a core at 100,000).
        time.sleep(SETTLE_INTERVALS * interval + 5)
        pid, server_pid = process.process.pid, server.process.pid
        sweeps0 = process.total("sweeperd_sweeps_total")
        cpu0, server0, t0 = cpu_seconds(pid), cpu_seconds(server_pid), time.monotonic()
        time.sleep(seconds)
        cpu1, server1, t1 = cpu_seconds(pid), cpu_seconds(server_pid), time.monotonic()
        calls = process.total("sweeperd_sweeps_total") - sweeps0
        figures = {
            "ready_s": ready_s,
            "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
            "rss_mib": memory_mib(pid, "VmRSS"),
            "rss_peak_mib": memory_mib(pid, "VmHWM"),
            "server_percent": 100 * (server1 - server0) / (t1 - t0),
            "call_us": 1e6 * (server1 - server0) / max(calls, 1),
            "calls_per_s": calls / (t1 - t0),
        }
        process.stop()
    return figures


def seed_due(server: RedisServer, queues: int) -> int:
    """An expired lease with its row in every hundredth queue: recovered by the start-up
    round, those queues have something to say; returns how many."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    recovering = names(queues)[::100]
    for name in recovering:
        lease(pipe, QueueKeys(name), b"due", deadline_ms=PAST_MS, attempts="1", state="active")
    pipe.execute()
    client.close()
    return len(recovering)


def scrape_figures(
    workdir: Path, server: RedisServer, queues: int, level: str
) -> tuple[float, float]:
    """/metrics at `level` once every queue was swept, a hundredth of them having recovered a
    lease: MiB and seconds of the slowest of 3."""
    seed_due(server, queues)
    with daemon(workdir, server, queues, "--interval", "60", "--queue-metrics", level) as process:
        wait_until(lambda: process.get("/readyz")[0] == 200, READY_TIMEOUT_S, "ready")
        time.sleep(12)
        slowest, size = 0.0, 0
        for _ in range(3):
            started = time.monotonic()
            size = len(scrape(process).encode())
            slowest = max(slowest, time.monotonic() - started)
        process.stop()
    return size / 2**20, slowest


def top_figures(server: RedisServer, queues: int) -> dict[str, float]:
    """top's first view (CPU and wall seconds to its first screen) and the ZCOUNTs the server
    ran for each refresh after it."""
    stats = server.client()
    connection = Connection.checked(server.url, None, 30.0)
    wall, cpu = time.monotonic(), time.process_time()
    view = Top(connection, "emq", names(queues), 20, wall_clock)
    stats.config_resetstat()
    view.refresh()
    first = {
        "first_view_s": time.monotonic() - wall,
        "first_view_cpu_s": time.process_time() - cpu,
        "first_zcounts": calls_of(stats, "zcount"),
    }
    stats.config_resetstat()
    started = time.monotonic()
    view.refresh()
    refresh_s = time.monotonic() - started
    zcounts = calls_of(stats, "zcount")
    view.close()
    stats.close()
    return {**first, "refresh_s": refresh_s, "refresh_zcounts": zcounts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--intervals", type=int, nargs="+", default=[60, 5])
    parser.add_argument("--seconds", type=float, default=30.0, help="idle CPU window")
    parser.add_argument("--levels", nargs="+", default=["auto", "sparse", "basic", "full"])
    parser.add_argument("--server", choices=[*SERVER_KINDS, "both"], default="both")
    opts = parser.parse_args()
    kinds = selected_kinds(opts.server)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for queues in SETTINGS_QUEUES:
            print(f"settings of {queues:,} queues: {settings_seconds(workdir, queues):.2f} s CPU")
        for kind in kinds:
            with RedisServer(
                workdir / kind, kind=kind, module=RedisServer(workdir).module
            ) as server:
                idle = idle_call_us(server)
                said = ", ".join(f"{key} {us:.1f}" for key, us in idle.items())
                print(f"{kind}: the server's CPU µs per idle sweep call: {said}")
                for queues in opts.queues:
                    server.client().flushall()
                    seed(server, queues)
                    for interval in opts.intervals:
                        f = run_figures(workdir, server, queues, interval, opts.seconds)
                        print(
                            f"{kind} {queues:>7,} queues --interval {interval:>2}: ready "
                            f"{f['ready_s']:.1f} s, idle CPU {f['cpu_percent']:.1f} %, RSS "
                            f"{f['rss_mib']:.0f} MiB (peak {f['rss_peak_mib']:.0f}), "
                            f"{f['calls_per_s']:.0f} calls/s; the server "
                            f"{f['server_percent']:.1f} %, {f['call_us']:.1f} µs a call"
                        )
                    for level in opts.levels:
                        if level == "full" and queues > FULL_UP_TO:
                            print(f"{kind} {queues:>7,} queues /metrics at full: not measured")
                            continue
                        mib, seconds = scrape_figures(workdir, server, queues, level)
                        print(
                            f"{kind} {queues:>7,} queues /metrics at {level} ({queues // 100:,} "
                            f"queues recovering): {mib:.2f} MiB in {seconds:.2f} s"
                        )
                    t = top_figures(server, queues)
                    print(
                        f"{kind} {queues:>7,} queues top: first view {t['first_view_s']:.2f} s "
                        f"({t['first_view_cpu_s']:.2f} s CPU, {t['first_zcounts']:,} ZCOUNTs), "
                        f"then {t['refresh_s']:.2f} s and {t['refresh_zcounts']:,.0f} ZCOUNTs a "
                        f"refresh (budget {READS_PER_REFRESH:,} and the rows shown)"
                    )


if __name__ == "__main__":
    main()
