"""The audit's cost: a million rows in one queue, and 10,000 queues of 100 rows, audited on a
real server while another client pings it.

Run from the repository root after `make module venv`:

    python bench/bench_audit.py [--rows 1000000] [--queues 10000] [--rate 1000000]
                                [--server redis|valkey|both]

For each shape: rows audited per second, the longest command the server ran (SLOWLOG) and how
many ran over 5 ms, another client's PING p50/p99/max during the audit against the same
client's before it (one run, so the ratio holds on a loaded machine), the findings (100
stranded rows are planted among the clean ones: each must be found), and the audit's own CPU
seconds, which is what `run --audit-every` spends per audit of those queues (its share of a
core at an hourly audit is printed). `--rate` is the pace (keys per second); the command's
default is 50,000, the bench's default 1,000,000 measures what the calls cost at full speed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

try:
    from bench.bench_mass import OVER_US, involuntary_switches, pinger, server_pid
    from tests.support.servers import SERVER_KINDS, RedisServer, selected_kinds
except ModuleNotFoundError:  # run as a script: bench/ is on sys.path, the repo root is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.bench_mass import OVER_US, involuntary_switches, pinger, server_pid
    from tests.support.servers import SERVER_KINDS, RedisServer, selected_kinds

from sweeperd.audit.classes import AuditClass
from sweeperd.audit.reader import Clocks, NodeAudit, Pace
from sweeperd.server.connection import connect

STRANDED = 100  # rows in state active in no set, planted among the clean ones
SLOW_US = 500  # SLOWLOG keeps every command slower than this
HOURLY_S = 3600.0
BASELINE_S = 5.0  # the pinger alone, before the audit (its interpreter starts within it)
# KEYS: none. ARGV: the queue, the first row's number, how many rows, the lease deadline, how
# many of them stranded (no lease). Rows `<n>` in state active, leased but the stranded.
SEED = """
local prefix = 'emq:{' .. ARGV[1] .. '}:'
local first, count, deadline = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
for n = first, first + count - 1 do
  local id = 'job' .. n
  redis.call('HSET', prefix .. 'job:' .. id, 'state', 'active', 'attempts', '1')
  if n >= tonumber(ARGV[5]) then redis.call('ZADD', prefix .. 'active', deadline, id) end
end
return count
"""
CHUNK = 10_000


@dataclass
class Result:
    shape: str
    rows: int
    seconds: float
    cpu_s: float
    longest_ms: float
    slow: list[str]  # the calls over 5 ms: the command, its first key and its duration
    preempted: int  # how often the server process lost its core during the audit
    baseline: tuple[float, float, float]
    during: tuple[float, float, float]
    found: int
    per_call_us: dict[str, float]  # the server's mean time per call of each command the audit sent

    def lines(self) -> list[str]:
        b, d = self.baseline, self.during
        share = self.cpu_s / HOURLY_S * 100
        return [
            f"  {self.shape}: {self.rows:,} rows in {self.seconds:.1f} s = "
            f"{self.rows / self.seconds:,.0f} rows/s; stranded found {self.found}/{STRANDED}",
            f"    longest call {self.longest_ms:.2f} ms, calls over 5 ms: {len(self.slow)}"
            + (f" ({', '.join(self.slow[:5])})" if self.slow else "")
            + f"; server preempted {self.preempted:,} times; mean "
            + ", ".join(f"{c} {us:,.0f} us" for c, us in self.per_call_us.items()),
            f"    PING ms before p50 {b[0]:.3f} p99 {b[1]:.3f} max {b[2]:.3f}; during p50 "
            f"{d[0]:.3f} p99 {d[1]:.3f} max {d[2]:.3f} (p99 x{d[1] / max(b[1], 1e-9):.2f})",
            f"    audit CPU {self.cpu_s:.1f} s: {share:.2f} % of a core at --audit-every 3600",
        ]


def seed(client: redis.Redis, queues: int, rows: int) -> None:
    """`queues` queues of `rows` rows each, the first STRANDED rows of the first queue with no
    lease (at most one queue's worth), the others leased an hour ahead."""
    deadline = int(time.time() * 1000) + 3_600_000
    for q in range(queues):
        for first in range(0, rows, CHUNK):
            stranded = STRANDED if q == 0 else 0
            client.eval(SEED, 0, f"q{q}", first, min(CHUNK, rows - first), deadline, stranded)


def audited(server: RedisServer, shape: str, queues: list[str] | None, pace: Pace) -> Result:
    """One audit of the server's queues, measured."""
    client = connect(server.url, socket_timeout=30)
    client.config_set("slowlog-log-slower-than", SLOW_US)
    client.config_set("slowlog-max-len", 1_000_000)
    client.slowlog_reset()
    client.config_resetstat()
    with pinger(server.port) as before:
        time.sleep(BASELINE_S)
        baseline = before()
    with pinger(server.port) as during:
        started, cpu = time.perf_counter(), time.process_time()
        switches = involuntary_switches(server_pid(server))
        audits = NodeAudit(client, "emq", pace, Clocks()).audit(queues)
        seconds, cpu_s = time.perf_counter() - started, time.process_time() - cpu
        pings = during()
        preempted = involuntary_switches(server_pid(server)) - switches
    longest, slow = slow_calls(client)
    with server.client() as plain:  # INFO parsed (sweeperd's client leaves it raw)
        stats = plain.info("commandstats")
    per_call = {
        name: float(stats[f"cmdstat_{name}"]["usec_per_call"])
        for name in ("evalsha_ro", "scan", "zscan")
        if f"cmdstat_{name}" in stats
    }
    found = sum(len(a.found.get(AuditClass.STRANDED, [])) for a in audits)
    rows = sum(a.rows for a in audits)
    return Result(
        shape, rows, seconds, cpu_s, longest, slow, preempted, baseline, pings, found, per_call
    )


def slow_calls(client: redis.Redis) -> tuple[float, list[str]]:
    """The longest command in SLOWLOG (ms), and each one over OVER_US named, longest first."""
    entries = sorted(client.slowlog_get(1_000_000), key=lambda e: -int(e["duration"]))
    slow = [
        f"{b' '.join(e['command'].split()[:2]).decode(errors='replace')} {e['duration'] / 1e3:.1f}"
        " ms"
        for e in entries
        if int(e["duration"]) > OVER_US
    ]
    return (int(entries[0]["duration"]) / 1000 if entries else 0.0), slow


def run(kind: str, rows: int, queues: int, pace: Pace, workdir: Path) -> list[Result]:
    results = []
    with RedisServer(workdir / f"{kind}-audit", kind=kind, module=None) as server:
        with server.client() as client:
            seed(client, 1, rows)
        results.append(audited(server, f"1 queue x {rows:,} rows", ["q0"], pace))
        with server.client() as client:
            client.flushall()
            seed(client, queues, 100)
        shape = f"{queues:,} queues x 100 rows, discovered"
        results.append(audited(server, shape, None, pace))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1_000_000.0)
    parser.add_argument("--server", choices=(*SERVER_KINDS, "both"), default="redis")
    args = parser.parse_args()
    kinds = selected_kinds(args.server)
    pace = Pace(grace_s=1.0, rate=args.rate)
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        for kind in kinds:
            print(f"{kind}: --rate {args.rate:,.0f} keys/s, grace {pace.grace_s:g} s")
            for result in run(kind, args.rows, args.queues, pace, Path(tmp)):
                print("\n".join(result.lines()), flush=True)


if __name__ == "__main__":
    main()
