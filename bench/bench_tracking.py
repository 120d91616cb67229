"""What the source of deadlines costs the server per idle sweep: the sweeps' connection
untracked, tracking every read (CLIENT TRACKING's default mode), or tracking on request (OPTIN,
sweeperd's: nothing tracked without CLIENT CACHING yes); the server's CPU per call from /proc,
the ways taking turns, on Redis and on Valkey (--server)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fanout import cpu_seconds
from sweeperd.keyspace import QueueKeys
from sweeperd.server.calls import command
from sweeperd.server.connection import connect as client_of
from sweeperd.verb.executors import NATIVE
from sweeperd.verb.replies import Call
from sweeperd.verb.rounds import Packed, sweep_round
from tests.support.helpers import invalidations, tracked_keys
from tests.support.servers import SERVER_KINDS, RedisServer, selected_kinds

ROUND = 1_000  # calls per round trip, as a tick of 1,000 queues sends them
WAYS = {
    "untracked": (),
    "every read": ("CLIENT", "TRACKING", "on", "REDIRECT", "{id}", "NOLOOP"),
    "on request": ("CLIENT", "TRACKING", "on", "REDIRECT", "{id}", "NOLOOP", "OPTIN"),
}


def seed(client: redis.Redis, queues: int) -> list[Call]:
    """A far lease in every tenth queue, the others empty; the queues' brief calls."""
    far = int(time.time() * 1000) + 3_600_000
    pipe = client.pipeline(transaction=False)
    keys = [QueueKeys(f"idle-{n}") for n in range(queues)]
    for k in keys[::10]:
        pipe.zadd(k.active, {"live": far})
    pipe.execute()
    return [Call(k, 1, 100, brief=True) for k in keys]


def sweeper(server: RedisServer, way: tuple[str, ...], redirect: int) -> redis.Redis:
    """A client tracking as `way` says (its one connection, taken and given back in turn)."""
    client = client_of(server.url, socket_timeout=30.0)
    if way:
        command(client, *(str(redirect) if a == "{id}" else a for a in way))
    return client


def server_us_per_call(
    server: RedisServer, client: redis.Redis, calls: list[Call], seconds: float
) -> tuple[float, int]:
    """Sweep every queue, round after round, for `seconds`: the server's CPU µs per call, and
    the keys in its tracking table after (read with a client of the server's `plain`)."""
    assert server.process is not None
    pid, packed = server.process.pid, Packed()
    sent, cpu0, t0 = 0, cpu_seconds(server.process.pid), time.monotonic()
    while time.monotonic() - t0 < seconds:
        for i in range(0, len(calls), ROUND):
            sweep_round(client, NATIVE, calls[i : i + ROUND], packed)
            sent += len(calls[i : i + ROUND])
    return 1e6 * (cpu_seconds(pid) - cpu0) / sent, tracked_keys(server.client())


def each_way(
    server: RedisServer, plain: redis.Redis, redirect: int, queues: int, seconds: float, turns: int
) -> dict[str, tuple[float, int]]:
    """Each way's least µs per call over `turns` turns (the ways taking turns), and the keys
    tracked after it; the tracking table emptied with the keys before each."""
    best: dict[str, tuple[float, int]] = {}
    for _ in range(turns):
        for name, way in WAYS.items():
            plain.flushall()
            calls = seed(plain, queues)
            client = sweeper(server, way, redirect)
            NATIVE.prepare(client)
            found = server_us_per_call(server, client, calls, seconds)
            client.close()
            best[name] = min(best.get(name, found), found)
    return best


def measure(kind: str, queues: int, seconds: float, turns: int, say: Callable[[str], None]) -> None:
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp), kind=kind) as server:
        plain = server.client()
        with invalidations(server.port) as (_, redirect):
            best = each_way(server, plain, redirect, queues, seconds, turns)
        base = best["untracked"][0]
        for name, (us, keys) in best.items():
            say(f"{kind:>6} {queues:>7} {name:>11} {us:9.2f} {us / base:7.2f} {keys:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0, help="per way and turn")
    parser.add_argument("--turns", type=int, default=3, help="the least of them is kept")
    parser.add_argument("--server", choices=[*SERVER_KINDS, "both"], default="both")
    args = parser.parse_args()
    kinds = selected_kinds(args.server)
    print(
        f"idle brief sweeps in rounds of {ROUND:,}, the server's CPU per call, the least of "
        f"{args.turns} turns of {args.seconds:g} s each"
    )
    print(
        f"{'server':>6} {'queues':>7} {'tracking':>11} {'µs/call':>9} {'ratio':>7} {'tracked':>9}"
    )
    for kind in kinds:
        measure(kind, args.queues, args.seconds, args.turns, lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
