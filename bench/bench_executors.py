"""The Lua port against the module on the same expired-lease backlog: speed and their ratio.

Run from the repository root after `make -C module`:

    python -m bench.bench_executors [--leases 100000] [--limits 100,1000] [--rounds 5]

For each limit and budget both executors drain an identical seeded backlog (see
bench_verb), taking turns for `--rounds` rounds; each keeps its fastest round, so a
neighbour's burst of load on a shared machine does not decide the ratio. The table has
bench_verb's columns, then one line per pair with the script's wall leases/s and server
usec_per_call as a multiple of the module's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_verb import (
    ALL_RECOVER,
    EXECUTORS,
    MIX_MAX_STALLED,
    Executor,
    Reply,
    Result,
    bench_server,
    drain,
    print_table,
    seed,
)
from sweeperd.verb.scripts import STALLED_CHECK


def sweep_script(
    client: redis.Redis, active: str, pending: str, dead: str, prefix: str, ms: int, limit: int
) -> Reply:
    """One EVALSHA of the package's Lua port (loaded by the caller)."""
    reply = client.evalsha(STALLED_CHECK.sha, 3, active, pending, dead, prefix, ms, limit)
    assert isinstance(reply, list)
    return reply


LUA = Executor("script", sweep_script, "cmdstat_evalsha")


def ratio_line(native: Result, script: Result) -> str:
    """How the script compares with the module on one backlog."""
    speed = (script.leases / script.wall_s) / (native.leases / native.wall_s)
    cost = script.usec_per_call / native.usec_per_call if native.usec_per_call else float("nan")
    return (
        f"limit {native.limit}, {'all recover' if native.max_stalled == ALL_RECOVER else 'mix'}: "
        f"Lua/module leases/s {speed:.2f}x, server usec/call {cost:.2f}x"
    )


def fastest_rounds(
    client: redis.Redis,
    executors: list[Executor],
    leases: int,
    limit: int,
    max_stalled: int,
    rounds: int,
) -> list[Result]:
    """Each executor's fastest drain of the same backlog, the executors taking turns."""
    best: dict[str, Result] = {}
    for _ in range(rounds):
        for executor in executors:
            seed(client, leases)
            result = drain(client, executor, limit, max_stalled)
            kept = best.get(executor.name)
            if kept is None or result.wall_s < kept.wall_s:
                best[executor.name] = result
    return [best[executor.name] for executor in executors]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=100_000)
    parser.add_argument("--limits", default="100,1000", help="comma-separated limits, one run each")
    parser.add_argument("--no-mix", action="store_true", help="skip the runs where a third die")
    parser.add_argument("--rounds", type=int, default=5, help="turns per pair; the fastest counts")
    args = parser.parse_args(argv)
    budgets = [ALL_RECOVER] if args.no_mix else [ALL_RECOVER, MIX_MAX_STALLED]
    results: list[Result] = []
    ratios: list[str] = []
    with bench_server() as client:
        STALLED_CHECK.load(client)
        for limit in (int(text) for text in args.limits.split(",")):
            for max_stalled in budgets:
                pair = fastest_rounds(
                    client, [EXECUTORS["native"], LUA], args.leases, limit, max_stalled, args.rounds
                )
                results += pair
                ratios.append(ratio_line(*pair))
    print_table(results)
    print("\n".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
