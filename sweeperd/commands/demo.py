"""`sweeperd demo`: a throwaway server with stalled leases, swept live by the daemon until what
the demo shows has happened; `--keep`: the README tour's queues, seeded and kept for you."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from sweeperd import __version__
from sweeperd.commands.seeding import (
    BILLING,
    DEMO_DUE,
    DEMO_MAX_STALLED,
    DEMO_QUEUES,
    RESTART_LEASES,
    SEED_TIMEOUT_S,
    TOUR_QUEUES,
    lease_billing,
    lease_then_shut_down,
    seed_demo,
    seed_tour,
)
from sweeperd.commands.throwaway import (
    HOST,
    ServerFailed,
    ThrowawayServer,
    check_port,
    find_module,
    find_server,
    free_port,
    log_tail,
)
from sweeperd.config.settings import Settings, build_settings
from sweeperd.daemon.daemon import Daemon
from sweeperd.keyspace import QueueKeys
from sweeperd.metrics.registry import Metrics
from sweeperd.server.connection import connect
from sweeperd.server.serverinfo import read_server_info
from sweeperd.signals import SignalInbox

# How often the demo looks whether the daemon has swept what it waits for, and how often a kept
# server is looked at while it waits for you; SIGTERM and SIGHUP stop a kept server, besides Ctrl-C.
POLL_S = 0.05
KEPT_POLL_S = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
Say = Callable[[str], None]
# Leases each queue's sweeps took: recovered, dead and ghosts.
Swept = dict[str, int]


class NotShown(Exception):
    """The demo's time ran out before the daemon had swept what the demo shows."""


def demo_settings(url: str, metrics_port: int, executor: str, isatty: bool) -> Settings:
    overrides: dict[str, object] = {
        "queues": list(DEMO_QUEUES),
        "redis_url": url,
        "interval": "1",
        "max_stalled": str(DEMO_MAX_STALLED),
        "metrics_addr": f"{HOST}:{metrics_port or free_port()}",
        "executor": executor,
        # The summary shows each queue's ghosts.
        "queue_metrics": "full",
    }
    return build_settings(overrides, None, logs_to_tty=isatty)


def value(daemon: Daemon, name: str, queue: str) -> int:
    """Return the queue's count, summed over the nodes that took its calls (at full its ghosts are
    per queue and node)."""
    return int(
        sum(
            sample.value
            for family in daemon.metrics.sweep.collect()
            for sample in family.samples
            if sample.name == name and sample.labels.get("queue") == queue
        )
    )


def swept(daemon: Daemon) -> Swept:
    """Return what the daemon's sweeps took from each queue so far, by its own counters."""
    names = ("sweeperd_recovered_total", "sweeperd_dead_total", "sweeperd_ghosts_removed_total")
    return {q: sum(value(daemon, name, q) for name in names) for q in DEMO_QUEUES}


def restarts(daemon: Daemon) -> int:
    node = daemon.settings.connection.node
    seen = daemon.metrics.registry.get_sample_value(
        "sweeperd_server_restarts_total", {"node": node}
    )
    return int(seen or 0)


def wait_until(done: Callable[[], bool], deadline: float) -> bool:
    """Tell whether `done` came true before the monotonic `deadline`, looked at every POLL_S."""
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def summary(daemon: Daemon, client: redis.Redis) -> list[str]:
    lines = []
    for queue in DEMO_QUEUES:
        keys = QueueKeys(queue)
        lines.append(
            f"  {queue:8} recovered {value(daemon, 'sweeperd_recovered_total', queue):6}"
            f" (exempt {value(daemon, 'sweeperd_exempt_total', queue)})"
            f"  dead {value(daemon, 'sweeperd_dead_total', queue):6}"
            f"  ghosts {value(daemon, 'sweeperd_ghosts_removed_total', queue)}"
            f"  | now: active {client.zcard(keys.active)}, pending {client.zcard(keys.pending)},"
            f" dead {client.zcard(keys.dead)}"
        )
    lines.append(f"  server restarts seen: {restarts(daemon)}")
    return lines


def shortfall(daemon: Daemon, due: Swept) -> str:
    """Return what the daemon has not swept yet of what falls due, in a few words."""
    taken = swept(daemon)
    behind = [f"{q} {taken[q]:,} of {n:,} swept" for q, n in due.items() if taken[q] < n]
    return ", ".join(behind) or "the restart not seen yet"


def show(
    daemon: Daemon, server: ThrowawayServer, client: redis.Redis, say: Say, seconds: float
) -> str | None:
    """Waits for every lease to be swept, restarts the server, waits for the leases taken
    before it to come back; what was still missing when `seconds` ran out, or None."""
    deadline = time.monotonic() + seconds
    due = dict(DEMO_DUE)
    if wait_until(lambda: swept(daemon) == due, deadline):
        lease_then_shut_down(client, read_server_info(client))
        say("restarting the server: leases taken before it come back uncounted")
        server.restart()
        due["emails"] += RESTART_LEASES
        if wait_until(lambda: swept(daemon) == due and restarts(daemon) == 1, deadline):
            return None
    return f"not all shown within {seconds:g} s: {shortfall(daemon, due)}"


def run_demo(
    seconds: float,
    module: Path | None,
    metrics_port: int,
    say: Say,
    isatty: bool,
    server: str | None = None,
    port: int = 0,
) -> None:
    """Seed, sweep live, restart the server once all is swept, sweep again, summarise, clean
    up; raises NotShown after the summary when `seconds` ran out first."""
    binary, found = find_server(server), find_module(module)
    check_port(port, "--port")
    check_port(metrics_port, "--metrics-port")
    executor = "native" if found else "script"
    say(f"server: {binary}")
    say(f"module: {found or 'not found, using the Lua port (--executor script)'}")
    with (
        tempfile.TemporaryDirectory(prefix="sweeperd-demo-") as tmp,
        ThrowawayServer(Path(tmp), binary, found, port) as running,
    ):
        client = connect(running.url, socket_timeout=SEED_TIMEOUT_S)
        info = read_server_info(client)
        seed_demo(client, info.run_id, info.time_ms)
        say(f"server {running.url} (run_id {info.run_id.decode()[:12]}…) seeded: emails, reports")
        settings = demo_settings(running.url, metrics_port, executor, isatty)
        metrics = Metrics(version=__version__, level=settings.daemon.queue_metrics)
        daemon = Daemon(settings, lambda: settings, metrics=metrics)
        daemon.start()
        # Stopped however the demo ends: a server that died under it fails the demo in one line,
        # said once the daemon's threads (which log the server down) have ended.
        try:
            address = f"http://{HOST}:{daemon.metrics_port or metrics_port}"
            lease_billing(client, read_server_info(client))
            say(
                f"sweeping every second; billing's {BILLING} leases due in 2 to 6 s; "
                f"metrics at {address}/metrics"
            )
            missing = show(daemon, running, client, say, seconds)
            say("summary:")
            for line in summary(daemon, client):
                say(line)
            say(f"metrics were served at {address}/metrics")
        finally:
            daemon.stop()
    if missing is not None:
        raise NotShown(missing)


def keep_tour(module: Path | None, say: Say, server: str | None = None, port: int = 0) -> None:
    """Seed the README tour's queues into a throwaway server, kept until Ctrl-C, SIGTERM or
    SIGHUP (or the server's own SHUTDOWN); then the server is stopped and its files removed."""
    binary, found = find_server(server), find_module(module)
    check_port(port, "--port")
    say(f"server: {binary}")
    say(f"module: {found or 'not found: the commands send the Lua port (--executor script)'}")
    with (
        tempfile.TemporaryDirectory(prefix="sweeperd-tour-") as tmp,
        ThrowawayServer(Path(tmp), binary, found, port) as kept,
    ):
        with connect(kept.url, socket_timeout=SEED_TIMEOUT_S) as client:
            info = read_server_info(client)
            seed_tour(client, info.run_id, info.time_ms)
        say(
            f"server {kept.url} (run_id {info.run_id.decode()[:12]}…) seeded for the README "
            f"tour: {', '.join(TOUR_QUEUES)}"
        )
        say(f"it runs until you stop it: Ctrl-C here, or kill {os.getpid()}")
        wait_for_stop(kept)
        code = kept.exited()
        if code:
            raise ServerFailed(
                f"{binary} exited with code {code}; its log ends: {log_tail(kept.log)}"
            )
    say("stopped: the server is gone and its files removed")


def wait_for_stop(kept: ThrowawayServer) -> None:
    """Returns at Ctrl-C, SIGTERM or SIGHUP, or once the server has ended by itself."""
    try:
        with SignalInbox(STOP_SIGNALS) as signals:
            while not signals.wait(KEPT_POLL_S) and kept.exited() is None:
                pass
    except KeyboardInterrupt:
        pass
