"""A worker fleet, a process of its own: it claims jobs by a Lua script that takes the lease on
the server's clock (the row in state active and the id in active, in one call), completes most
of them within 200 ms and dies on a share, leaving their leases to expire. bench_live.py drives
the daemon with it; the audit's tests audit queues while it runs.

    python -m tests.support.worker_fleet '{"port": 6379, "load": {...}, "seed": 38}'

runs it (until its seconds pass, or a line or the end of its stdin) and prints its counts as
JSON: claims, dying, seconds, and per queue the ids of the dying jobs it left behind.
"""

from __future__ import annotations

import heapq
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.paths import REPO

CLAIM = """
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('HSET', KEYS[2], 'state', 'active', 'attempts', '1', 'lease_epoch', ARGV[3],
  'deadline', deadline)
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
return deadline
"""
COMPLETE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then redis.call('DEL', KEYS[2]) end
return 0
"""
TICK_S = 0.01  # the fleet claims and completes in one pipelined round this often
HOLD_S = 0.2  # a live worker completes its job within this


@dataclass(frozen=True)
class Load:
    queues: int
    claims_per_s: float
    lease_s: tuple[float, float]
    dying: float
    seconds: float  # how long the fleet claims


def queue_names(count: int) -> list[str]:
    """The fleet's queues when none are named: l0000, l0001, …"""
    return [f"l{n:04}" for n in range(count)]


def fleet(
    port: int,
    load: Load,
    seed: int,
    names: Sequence[str] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> dict[str, object]:
    """Claim at the load's rate for its seconds (or until `stop`), across its queues (`names`,
    else l0000…); complete all but the dying; say the counts and the dying jobs' ids."""
    client = redis.Redis(port=port)
    run_id = client.info("server")["run_id"]
    claim, complete = client.register_script(CLAIM), client.register_script(COMPLETE)
    rng = random.Random(seed)
    queues = [QueueKeys(name) for name in names or queue_names(load.queues)]
    holding: list[tuple[float, int, QueueKeys, str]] = []
    left: dict[str, list[str]] = {}
    claims = dying = 0
    owed = 0.0
    start = time.monotonic()
    next_tick = start
    while (now := time.monotonic()) - start < load.seconds and not stop():
        pipe = client.pipeline(transaction=False)
        owed += load.claims_per_s * TICK_S
        for _ in range(int(owed)):
            keys, job = rng.choice(queues), f"j{claims}"
            lease_ms = int(rng.uniform(*load.lease_s) * 1000)
            claim(keys=[keys.active, keys.job(job)], args=[job, lease_ms, run_id], client=pipe)
            claims += 1
            if rng.random() < load.dying:
                dying += 1
                left.setdefault(keys.queue, []).append(job)
            else:
                heapq.heappush(holding, (now + rng.uniform(0, HOLD_S), claims, keys, job))
        owed -= int(owed)
        while holding and holding[0][0] <= now:
            _, _, keys, job = heapq.heappop(holding)
            complete(keys=[keys.active, keys.job(job)], args=[job], client=pipe)
        pipe.execute()
        next_tick += TICK_S
        time.sleep(max(0.0, next_tick - time.monotonic()))
    seconds = time.monotonic() - start
    for _, _, keys, job in holding:
        complete(keys=[keys.active, keys.job(job)], args=[job])
    return {"claims": claims, "dying": dying, "seconds": round(seconds, 3), "left": left}


@dataclass(frozen=True)
class Counts:
    """What a fleet did: its claims, the dying among them (their ids per queue) and how long."""

    claims: int
    dying: int
    seconds: float
    left: dict[str, list[str]]

    @property
    def claims_per_s(self) -> float:
        return self.claims / self.seconds


@dataclass
class Fleet:
    """A running fleet process."""

    process: subprocess.Popen[str]
    counts: Counts | None = None

    def stop(self) -> Counts:
        """Stop claiming (its held jobs are completed) and read its counts."""
        out, err = self.process.communicate("stop\n", timeout=60)
        assert self.process.returncode == 0, err
        self.counts = Counts(**json.loads(out))
        return self.counts


@contextmanager
def running(
    port: int, load: Load, seed: int = 38, names: Sequence[str] | None = None
) -> Iterator[Fleet]:
    """A fleet process claiming on the server at `port` until the block ends or it is stopped."""
    spec = {"port": port, "load": load.__dict__, "seed": seed, "names": names}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.worker_fleet", json.dumps(spec)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running = Fleet(process)
    try:
        yield running
    finally:
        if running.counts is None:
            process.kill()
            process.communicate()


def told_to_stop(told: threading.Event) -> None:
    """A line, or the end, of stdin stops the fleet."""
    sys.stdin.readline()
    told.set()


def main() -> None:
    spec = json.loads(sys.argv[1])
    shape = spec["load"]
    shape["lease_s"] = tuple(shape["lease_s"])
    told = threading.Event()
    threading.Thread(target=told_to_stop, args=(told,), daemon=True).start()
    counts = fleet(spec["port"], Load(**shape), spec["seed"], spec.get("names"), told.is_set)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
