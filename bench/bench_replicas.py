"""Three `sweeperd run` replicas sharing many queues: the time until they share them, each one's
CPU and RSS idle, the heartbeats' cost to the server; then a lease in every tenth queue falling
due just after one replica is killed (kill -9): the time until the others own its queues and
until every lease is back, and each lease counted once (the two others'
sweeperd_recovered_total, 1 per leased queue, and the keyspace)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fanout import cpu_seconds, memory_mib
from bench.bench_scale import READY_TIMEOUT_S, calls_of, config_file, names
from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import lease, now_ms, owned_by
from tests.support.servers import SERVER_KINDS, RedisServer, selected_kinds

IDS = ("r1", "r2", "r3")
KILLED = "r3"
DUE_IN_MS = 2_000  # the leases fall due this long after they are seeded, the kill in between
TAKEOVER_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 120.0
LOGS = Path(os.environ["BENCH_LOGS"]) if "BENCH_LOGS" in os.environ else None  # kept there
COUNTED_TIMEOUT_S = 180.0  # sparse (auto above 10,000 queues) shows new counters at 0 a minute
RECOVERED = re.compile(r'^sweeperd_recovered_total\{queue="([^"]+)"\} (\S+)$', re.M)


def healthy(daemon: DaemonProcess) -> bool:
    return daemon.get("/healthz")[0] == 200


def gauge(daemon: DaemonProcess, name: str) -> float:
    """A gauge without labels, read with the time a replica busy with 33,000 queues needs."""
    found = re.search(rf"^{name} (\S+)$", daemon.metrics_text(timeout_s=60), re.M)
    return float(found.group(1)) if found else 0.0


def settled(daemons: list[DaemonProcess], queues: int) -> bool:
    """Every replica sees them all as members, and together they own every queue once."""
    seen = [(gauge(d, "sweeperd_members"), gauge(d, "sweeperd_owned_queues")) for d in daemons]
    return all(m == len(daemons) for m, _ in seen) and sum(o for _, o in seen) == queues


def seed_leases(server: RedisServer, leased: list[str], due_ms: int) -> None:
    """One lease with its row in each queue of `leased`, due at `due_ms`."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    for queue in leased:
        lease(pipe, QueueKeys(queue), b"j", deadline_ms=due_ms, attempts="1", state="active")
    pipe.execute()
    client.close()


def left_active(server: RedisServer, leased: list[str]) -> int:
    """How many of the queues' leases are still in `active`."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    for queue in leased:
        pipe.zcard(QueueKeys(queue).active)
    left = sum(int(n) for n in pipe.execute())
    client.close()
    return left


def recovered(daemons: list[DaemonProcess]) -> dict[str, float]:
    """Each queue's sweeperd_recovered_total summed over the replicas."""
    found: dict[str, float] = {}
    for daemon in daemons:
        for queue, value in RECOVERED.findall(daemon.metrics_text(timeout_s=60)):
            found[queue] = found.get(queue, 0.0) + float(value)
    return found


def rows_recovered_once(server: RedisServer, leased: list[str]) -> bool:
    """Every leased row is pending with stalled = 1: its lease recovered once."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    for queue in leased:
        pipe.hmget(QueueKeys(queue).job(b"j"), "state", "stalled")
    rows = pipe.execute()
    client.close()
    return all(row == [b"pending", b"1"] for row in rows)


def run(workdir: Path, server: RedisServer, queues: int, interval: int, heartbeat: float) -> None:
    config = config_file(workdir, queues)
    argv = [
        *("--config", str(config), "--redis-url", server.url, "--log-level", "info"),
        *("--interval", str(interval), "--heartbeat", str(heartbeat)),
        *("--max-stalled", "5"),  # a budget no lease reaches: each row ends pending, stalled 1
    ]
    daemons = [DaemonProcess(workdir, *argv, "--instance-id", i) for i in IDS]
    stats = server.client()
    try:
        started = time.monotonic()
        for daemon in daemons:
            daemon.spawn()
        for daemon in daemons:
            wait_until(partial(healthy, daemon), READY_TIMEOUT_S, "/healthz")
        wait_until(lambda: settled(daemons, queues), READY_TIMEOUT_S, "three sharing every queue")
        settle_s = time.monotonic() - started
        time.sleep(min(interval, 10) + 2)  # each one's start-up round is done
        pids = [d.process.pid for d in daemons if d.process is not None]
        stats.config_resetstat()
        cpu0, t0 = [cpu_seconds(p) for p in pids], time.monotonic()
        time.sleep(20)
        elapsed = time.monotonic() - t0
        cpu = [100 * (cpu_seconds(p) - c) / elapsed for p, c in zip(pids, cpu0, strict=True)]
        rss = [memory_mib(p, "VmRSS") for p in pids]
        print(
            f"{server.kind} {queues:,} queues, 3 replicas, --interval {interval} --heartbeat "
            f"{heartbeat:g}: sharing every queue {settle_s:.1f} s after the start; idle CPU "
            f"{', '.join(f'{c:.1f}' for c in cpu)} % of a core, RSS "
            f"{', '.join(f'{r:.0f}' for r in rss)} MiB; heartbeats "
            f"{calls_of(stats, 'evalsha') / elapsed:.0f} EVALSHA/s in all (sweeps and beats), "
            f"{calls_of(stats, 'zremrangebyscore') / elapsed:.2f} beats/s"
        )
        names_all = names(queues)
        leased = names_all[::10]
        theirs = set(owned_by(KILLED, leased, set(IDS)))
        due_ms = now_ms() + DUE_IN_MS
        seed_leases(server, leased, due_ms)
        killed_at = time.time()
        assert daemons[2].stop(signal.SIGKILL) == -signal.SIGKILL
        survivors = daemons[:2]
        wait_until(lambda: settled(survivors, queues), TAKEOVER_TIMEOUT_S, "two owning all")
        owned_s = time.time() - killed_at
        mine = sorted(theirs)
        wait_until(lambda: left_active(server, mine) == 0, TAKEOVER_TIMEOUT_S, "its leases")
        taken_s = time.time() - killed_at
        wait_until(lambda: left_active(server, leased) == 0, TAKEOVER_TIMEOUT_S, "every lease")
        back_s = time.time() - killed_at
        # The killed one died before the leases fell due: the two others count each one.
        wait_until(
            lambda: sum(recovered(survivors).values()) >= len(leased),
            COUNTED_TIMEOUT_S,
            "the two counting every lease",
        )
        counted_s = time.time() - killed_at
        by_queue = recovered(survivors)
        once = all(by_queue.get(q) == 1 for q in leased) and sum(by_queue.values()) == len(leased)
        print(
            f"{server.kind} kill -9 of {KILLED} ({len(theirs):,} of the {len(leased):,} leases "
            f"in its queues, due {DUE_IN_MS / 1000:g} s after the kill): the others own every "
            f"queue {owned_s:.1f} s after the kill (the bound: 2 x heartbeat = "
            f"{2 * heartbeat:g} s), its queues' leases back {taken_s:.1f} s and every lease "
            f"(the two's own queues' too) {back_s:.1f} s after it; the two's "
            f"sweeperd_recovered_total count each lease once: {once} (summed "
            f"{sum(by_queue.values()):,.0f}, {counted_s:.0f} s after the kill: a queue's counters "
            f"show 0 for their first minute at sparse); every row recovered once: "
            f"{rows_recovered_once(server, leased)}"
        )
    except AssertionError:
        for daemon in daemons:
            print(daemon.log_text()[-2000:], file=sys.stderr)
        raise
    finally:
        stats.close()
        for daemon in daemons:
            if daemon.process is not None and not daemon.exited():
                try:
                    daemon.stop(timeout_s=STOP_TIMEOUT_S)
                except AssertionError as exc:  # killed after it; the others still stopped
                    print(f"{daemon.argv[-1]}: {exc}", file=sys.stderr)
            if LOGS is not None:
                shutil.copy(daemon.log_path, LOGS / f"{daemon.argv[-1]}.log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, nargs="+", default=[100_000])
    parser.add_argument("--interval", type=int, default=60)
    parser.add_argument("--heartbeat", type=float, default=5.0)
    parser.add_argument("--server", choices=[*SERVER_KINDS, "both"], default="redis")
    opts = parser.parse_args()
    kinds = selected_kinds(opts.server)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for kind in kinds:
            module = RedisServer(workdir).module
            with RedisServer(workdir / kind, kind=kind, module=module) as server:
                for queues in opts.queues:
                    server.client().flushall()
                    run(workdir, server, queues, opts.interval, opts.heartbeat)


if __name__ == "__main__":
    main()
