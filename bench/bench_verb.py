"""Drains a seeded backlog of expired leases with EMQ.STALLED.CHECK and reports its speed.

Run from the repository root after `make -C module`:

    python -m bench.bench_verb [--leases 100000] [--limits 100,1000] [--executor native]

Each run seeds a fresh backlog (pipelined), resets INFO commandstats, sweeps until
nothing is left, and prints leases/s by the wall clock, the number of calls, and the
server's own usec_per_call for the executor's command. An executor is a `sweep`
callable plus the commandstats entry it shows up as; add one to EXECUTORS to compare.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

try:
    from tests.support.servers import RedisServer
except ModuleNotFoundError:  # run as a script: bench/ is on sys.path, the repo root is not
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.servers import RedisServer

Reply = list[list[bytes]]
# sweep(client, active, pending, dead, prefix, max_stalled, limit) -> [[recovered], [dead]]
Sweep = Callable[[redis.Redis, str, str, str, str, int, int], Reply]

PREFIX = "emq:{bench}:"
ACTIVE, PENDING, DEAD = PREFIX + "active", PREFIX + "pending", PREFIX + "dead"
EXPIRED_MS = 1_000_000  # a deadline long gone
SEED_CHUNK = 10_000  # leases per pipeline round trip while seeding
ALL_RECOVER = 2**62  # a max_stalled no lease reaches
MIX_MAX_STALLED = 3  # with stalled seeded as i % 3: a third of the leases die


def sweep_native(
    client: redis.Redis, active: str, pending: str, dead: str, prefix: str, ms: int, limit: int
) -> Reply:
    """One EMQ.STALLED.CHECK call to the module."""
    reply = client.execute_command(  # type: ignore[no-untyped-call]
        "EMQ.STALLED.CHECK", active, pending, dead, prefix, ms, limit
    )
    assert isinstance(reply, list)
    return reply


@dataclass(frozen=True)
class Executor:
    """A way to send the verb, and the INFO commandstats entry its calls are counted under."""

    name: str
    sweep: Sweep
    command_stat: str


EXECUTORS = {"native": Executor("native", sweep_native, "cmdstat_emq.stalled.check")}


COLUMNS = ["executor", "limit", "budget", "leases", "dead", "calls", "wall s", "leases/s"]
COLUMNS += ["usec/call", "usec/lease"]  # server side: INFO commandstats


@dataclass(frozen=True)
class Result:
    """One drained backlog: what the sweeps did and how long they took."""

    executor: str
    limit: int
    max_stalled: int
    leases: int
    dead: int
    calls: int  # the last one found nothing
    wall_s: float
    usec_per_call: float  # server side, INFO commandstats

    def cells(self) -> list[str]:
        budget = "all recover" if self.max_stalled == ALL_RECOVER else f"max {self.max_stalled}"
        per_lease = self.usec_per_call * self.calls / self.leases
        leases_per_s = self.leases / self.wall_s
        return [
            *(self.executor, str(self.limit), budget, str(self.leases), str(self.dead)),
            *(str(self.calls), f"{self.wall_s:.2f}", f"{leases_per_s:,.0f}"),
            *(f"{self.usec_per_call:.1f}", f"{per_lease:.2f}"),
        ]


def seed(client: redis.Redis, leases: int) -> None:
    """An expired lease and its row for each of `leases` jobs, stalled cycling 0, 1, 2."""
    epoch = client.info("server")["run_id"]
    client.flushall()
    pipe = client.pipeline(transaction=False)
    for i in range(leases):
        job_id = f"job{i:07}"
        pipe.zadd(ACTIVE, {job_id: EXPIRED_MS + i})
        pipe.hset(
            f"{PREFIX}job:{job_id}", mapping={"attempts": 1, "stalled": i % 3, "lease_epoch": epoch}
        )
        if (i + 1) % SEED_CHUNK == 0:
            pipe.execute()
    pipe.execute()


def drain(client: redis.Redis, executor: Executor, limit: int, max_stalled: int) -> Result:
    """Sweeps the seeded backlog until a call finds nothing; times it by wall and server clock."""
    leases = client.zcard(ACTIVE)
    client.config_resetstat()
    recovered = dead = calls = 0
    started = time.perf_counter()
    while True:
        back, died = executor.sweep(client, ACTIVE, PENDING, DEAD, PREFIX, max_stalled, limit)
        calls += 1
        recovered, dead = recovered + len(back), dead + len(died)
        if not back and not died:
            break
    wall_s = time.perf_counter() - started
    stat = client.info("commandstats").get(executor.command_stat, {})
    assert recovered + dead == leases, (recovered, dead, leases)
    usec_per_call = float(stat.get("usec_per_call", 0.0))
    return Result(executor.name, limit, max_stalled, leases, dead, calls, wall_s, usec_per_call)


def print_table(results: list[Result]) -> None:
    """The figures, one row a run, right-aligned columns."""
    rows = [COLUMNS] + [result.cells() for result in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    for row in rows:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


@contextmanager
def bench_server() -> Iterator[redis.Redis]:
    """A throwaway redis-server with the module, no persistence."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-verb-") as workdir,
        RedisServer(Path(workdir)) as server,
        server.client() as client,
    ):
        yield client


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=100_000)
    parser.add_argument("--limits", default="100,1000", help="comma-separated limits, one run each")
    parser.add_argument("--executor", choices=sorted(EXECUTORS), default="native")
    parser.add_argument("--no-mix", action="store_true", help="skip the runs where a third die")
    args = parser.parse_args(argv)
    executor = EXECUTORS[args.executor]
    budgets = [ALL_RECOVER] if args.no_mix else [ALL_RECOVER, MIX_MAX_STALLED]
    results = []
    with bench_server() as client:
        for limit in (int(text) for text in args.limits.split(",")):
            for max_stalled in budgets:
                seed(client, args.leases)
                results.append(drain(client, executor, limit, max_stalled))
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
