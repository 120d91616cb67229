"""The sweep script's server time per lease against a baseline sweep.lua, interleaved on one
server.

Run from the repository root after `make module venv`:

    python -m bench.bench_epochs [--leases 600000] [--limit 600] [--block 10] [--baseline FILE]
                                 [--max-stalled N] [--runs 1]

For each executor and run one backlog of expired leases is drained by calls of `--limit`:
every other lease granted by an earlier run (exempt), the others counted (dead at
`--max-stalled 1`; all recover by default). The package's sweep script and the baseline take
turns every `--block` calls, so a neighbour's burst of load falls on both. The baseline is a
sweep.lua given by path (an older one, from `git show <commit>:sweeperd/sweep.lua`), or by
default the package's with its SORT_RO turned off (every epoch read by HGET). Each script's
server time is the INFO commandstats usec of EVALSHA summed over its blocks, per lease taken.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_verb import SEED_CHUNK, bench_server
from sweeperd.keyspace import QueueKeys
from sweeperd.verb.scripts import NATIVE_VERB, STALLED_CHECK, LuaScript, as_verb, package_text

QUEUE = QueueKeys("bench")
ALL_RECOVER = 2**62  # a max_stalled no lease reaches
LISTED = 20  # ids a drain's reply lists (the daemon's)
VERBS = {"native": as_verb(NATIVE_VERB), "script": as_verb(STALLED_CHECK.source)}


@dataclass
class Tally:
    """One script's blocks: the server's microseconds and the leases they took."""

    script: LuaScript
    usec: int = 0
    leases: int = 0

    @property
    def per_lease(self) -> float:
        return self.usec / self.leases if self.leases else float("nan")


def seed(client: redis.Redis, leases: int) -> None:
    """`leases` expired leases with rows; every other one granted under an earlier run_id."""
    epoch = str(client.info("server")["run_id"])
    client.flushall()
    pipe = client.pipeline(transaction=False)
    for i in range(leases):
        job = f"job{i:07}"
        pipe.zadd(QUEUE.active, {job: 1_000_000 + i})
        row = {"attempts": "1", "lease_epoch": "an-earlier-run" if i % 2 else epoch}
        pipe.hset(QUEUE.job(job), mapping=row)  # type: ignore[arg-type]
        if (i + 1) % SEED_CHUNK == 0:
            pipe.execute()
    pipe.execute()


def evalsha_usec(client: redis.Redis) -> int:
    stat = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stat.get("usec", 0)) if isinstance(stat, dict) else 0


def taken(verdict: list[object]) -> int:
    """Recovered and dead of one reply: the whole counts when the lists were cut (a baseline
    from before the ghost ids replies them one place earlier), else the two lists' lengths."""
    counts = {7: verdict[4:6], 8: verdict[5:7]}.get(len(verdict))
    if counts is not None:
        return sum(int(n) for n in counts)  # type: ignore[call-overload]
    return len(verdict[0]) + len(verdict[1])  # type: ignore[arg-type]


def block(client: redis.Redis, tally: Tally, calls: int, limit: int, max_stalled: int) -> bool:
    """`calls` sweeps by one script, its server time added to its tally; False once none took
    anything."""
    before = evalsha_usec(client)
    took = 0
    for _ in range(calls):
        verdict, _stats = client.execute_command(  # type: ignore[no-untyped-call]
            "EVALSHA",
            tally.script.sha,
            5,
            QUEUE.active,
            QUEUE.pending,
            QUEUE.dead,
            QUEUE.metrics_failed,
            QUEUE.guard,
            QUEUE.prefix,
            max_stalled,
            limit,
            0,
            LISTED,
        )
        took += taken(verdict)
    tally.usec += evalsha_usec(client) - before
    tally.leases += took
    return took > 0


def interleaved(
    client: redis.Redis, tallies: list[Tally], limit: int, calls: int, max_stalled: int
) -> None:
    """The scripts take turns, a block each, until the backlog is gone."""
    for tally in tallies:
        tally.script.load(client)
    while all([block(client, tally, calls, limit, max_stalled) for tally in tallies]):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=600_000)
    parser.add_argument("--limit", type=int, default=600)
    parser.add_argument("--block", type=int, default=10, help="calls a script makes per turn")
    parser.add_argument("--baseline", type=Path, help="a sweep.lua to compare with")
    parser.add_argument("--executors", default="native,script")
    parser.add_argument("--max-stalled", type=int, default=ALL_RECOVER, help="default: all recover")
    parser.add_argument("--runs", type=int, default=1, help="backlogs drained per executor")
    args = parser.parse_args(argv)
    current = package_text("sweep.lua")
    if args.baseline is None:
        baseline = current.replace("local EPOCHS_PAGE = 1000", "local EPOCHS_PAGE = 0", 1)
        # Unchanged, the bench would measure the script against itself and report nothing.
        assert baseline != current, (
            "sweep.lua no longer has the line `local EPOCHS_PAGE = 1000`: update the baseline "
            "bench/bench_epochs.py makes from it, or pass --baseline"
        )
    else:
        baseline = args.baseline.read_text()
    print(f"{'executor':>8}  {'baseline us/lease':>17}  {'current us/lease':>16}  {'ratio':>5}")
    with bench_server() as client:
        for name in [name for name in args.executors.split(",") for _ in range(args.runs)]:
            seed(client, args.leases)
            old = Tally(LuaScript(VERBS[name] + baseline))
            new = Tally(LuaScript(VERBS[name] + current))
            interleaved(client, [old, new], args.limit, args.block, args.max_stalled)
            ratio = new.per_lease / old.per_lease
            print(f"{name:>8}  {old.per_lease:>17.3f}  {new.per_lease:>16.3f}  {ratio:>5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
