"""`sweeperd demo`: a throwaway server with stalled leases, swept live by the daemon."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
import structlog

from sweeperd import __version__
from sweeperd.config.settings import Settings, build_settings
from sweeperd.constants import LEASE_EPOCH
from sweeperd.daemon.daemon import Daemon
from sweeperd.keyspace import QueueKeys
from sweeperd.metrics.registry import Metrics
from sweeperd.server.connection import connect
from sweeperd.server.serverinfo import ServerInfo, read_server_info

log = structlog.get_logger("sweeperd.demo")

QUEUES = ("emails", "reports", "billing")
BACKLOG = 50_000  # expired leases of `reports`, as a dead worker fleet leaves them
MAX_STALLED = 3
MODULE_NAME = "emq_stalled.so"
SERVERS = ("redis-server", "valkey-server")  # without --server: the first found on PATH
START_TIMEOUT_S = 10.0
LOG_TAIL = 3  # lines of the server's log in the one line that says it did not start
LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [#*.-] ")  # pid:role date time level
Say = Callable[[str], None]


class ServerDidNotStart(Exception):
    """The demo's server exited, or did not answer, within its start time."""


def find_server(given: str | None) -> str:
    """The server binary: the given name on PATH or path, else the first of SERVERS on PATH."""
    for name in [given] if given else SERVERS:
        found = shutil.which(name)
        if found is not None:
            return os.path.abspath(found)
    if given:
        raise FileNotFoundError(f"--server {given}: no such executable, on PATH or as a path")
    raise FileNotFoundError(
        "neither redis-server nor valkey-server is on PATH: apt-get install redis-server,"
        " or give --server PATH"
    )


def find_module(given: Path | None) -> Path | None:
    """The reference module as an absolute path (the server runs in a directory of its own):
    the given one, which must exist, else ./module's or the source tree's, if built."""
    if given is not None:
        if not given.is_file():
            raise FileNotFoundError(f"--module {given} (SWEEPERD_MODULE): no such file")
        return given.absolute()
    candidates = [
        Path.cwd() / "module" / MODULE_NAME,
        Path(__file__).resolve().parent.parent / "module" / MODULE_NAME,
    ]
    return next((p.absolute() for p in candidates if p.is_file()), None)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def throwaway_server(
    workdir: Path, module: Path | None, binary: str
) -> Iterator[tuple[str, Callable[[], None]]]:
    """The server binary on a free loopback port with AOF on; yields its URL and a restart."""
    port = free_port()
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--logfile",
        str(workdir / "redis.log"),
    ]
    if module is not None:
        argv += ["--loadmodule", str(module)]
    url = f"redis://127.0.0.1:{port}/0"
    process: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        process[:] = [subprocess.Popen(argv, stdout=subprocess.DEVNULL)]
        try:
            wait_for(url, process[0])
        except ServerDidNotStart as exc:
            process[0].kill()
            process[0].wait(10)
            tail = log_tail(workdir / "redis.log")
            raise ServerDidNotStart(f"{binary} {exc}; its log ends: {tail}") from None

    def restart() -> None:
        process[0].terminate()
        process[0].wait(10)
        start()

    start()
    try:
        yield url, restart
    finally:
        process[0].terminate()
        process[0].wait(10)


def wait_for(url: str, process: subprocess.Popen[bytes]) -> None:
    """Returns once the server answers; raises ServerDidNotStart saying why when it exits or
    its start time runs out first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    with connect(url, socket_timeout=1.0) as client:
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.BusyLoadingError):
                code = process.poll()
                if code is not None:
                    raise ServerDidNotStart(f"exited with code {code}") from None
                if time.monotonic() > deadline:
                    raise ServerDidNotStart(
                        f"did not answer on {url} within {START_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.05)


def log_tail(log: Path) -> str:
    """The log's last lines, their pid and time stamps cut, on one line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log written)"
    kept = [LOG_PREFIX.sub("", line).strip() for line in lines if line.strip()][-LOG_TAIL:]
    return " | ".join(kept) or "(empty)"


def seed(client: redis.Redis, run_id: bytes, now_ms: int) -> None:
    """Expired leases of every kind the sweep knows, and some that are not due yet."""
    emails, reports, billing = (QueueKeys(q) for q in QUEUES)
    past = now_ms - 60_000
    pipe = client.pipeline(transaction=False)

    def lease(keys: QueueKeys, job_id: str, deadline: int, **row: str) -> None:
        pipe.zadd(keys.active, {job_id: deadline})
        if row:
            fields = {"state": "active", **row}
            pipe.hset(keys.job(job_id), items=[x for pair in fields.items() for x in pair])

    lease(emails, "welcome-1", past, lease_epoch="a-run-before-a-restart")  # exempt
    lease(emails, "welcome-2", past, lease_epoch="a-run-before-a-restart")  # exempt
    lease(emails, "digest-1", past, lease_epoch=run_id.decode())  # counted: stalled 1
    lease(emails, "poison-1", past, lease_epoch=run_id.decode(), stalled="2")  # at budget: dead
    lease(emails, "ghost-1", past)  # no row: removed from active, listed nowhere
    for n in range(BACKLOG):  # a mass stall: drained call after call, each about 2 ms
        lease(reports, f"report-{n:05}", past - n, stalled=str(n % 2))
    for n in range(5):  # due in two to six seconds: swept while you watch
        lease(billing, f"invoice-{n}", now_ms + 2_000 + 1_000 * n, lease_epoch=run_id.decode())
    pipe.execute()


def demo_settings(url: str, metrics_port: int, executor: str, isatty: bool) -> Settings:
    overrides: dict[str, object] = {
        "queues": list(QUEUES),
        "redis_url": url,
        "interval": "1",
        "max_stalled": str(MAX_STALLED),
        "metrics_addr": f"127.0.0.1:{metrics_port or free_port()}",
        "executor": executor,
        "queue_metrics": "full",  # the summary shows each queue's ghosts
    }
    return build_settings(overrides, None, logs_to_tty=isatty)


def summary(daemon: Daemon, client: redis.Redis) -> list[str]:
    registry = daemon.metrics.registry
    lines = []
    for queue in QUEUES:
        keys = QueueKeys(queue)

        def value(name: str, q: str = queue) -> int:
            return int(registry.get_sample_value(name, {"queue": q}) or 0)

        lines.append(
            f"  {queue:8} recovered {value('sweeperd_recovered_total'):6}"
            f" (exempt {value('sweeperd_exempt_total')})"
            f"  dead {value('sweeperd_dead_total'):6}"
            f"  ghosts {value('sweeperd_ghosts_removed_total')}"
            f"  | now: active {client.zcard(keys.active)}, pending {client.zcard(keys.pending)},"
            f" dead {client.zcard(keys.dead)}"
        )
    restarts = registry.get_sample_value(
        "sweeperd_server_restarts_total", {"node": daemon.settings.connection.node}
    )
    lines.append(f"  server restarts seen: {int(restarts or 0)}")
    return lines


def run_demo(
    seconds: float,
    module: Path | None,
    metrics_port: int,
    say: Say,
    isatty: bool,
    server: str | None = None,
) -> None:
    """Seed, sweep live, restart the server halfway, sweep again, summarise, clean up."""
    binary = find_server(server)
    found = find_module(module)
    executor = "native" if found else "script"
    say(f"server: {binary}")
    say(f"module: {found or 'not found, using the Lua port (--executor script)'}")
    with (
        tempfile.TemporaryDirectory(prefix="sweeperd-demo-") as tmp,
        throwaway_server(Path(tmp), found, binary) as (url, restart),
    ):
        client = connect(url, socket_timeout=5.0)
        info = read_server_info(client)
        seed(client, info.run_id, info.time_ms)
        say(f"server {url} (run_id {info.run_id.decode()[:12]}…) seeded: {', '.join(QUEUES)}")
        settings = demo_settings(url, metrics_port, executor, isatty)
        metrics = Metrics(version=__version__, level=settings.daemon.queue_metrics)
        daemon = Daemon(settings, lambda: settings, metrics=metrics)
        daemon.start()
        address = f"http://127.0.0.1:{daemon.server.port if daemon.server else metrics_port}"
        say(f"sweeping every second; metrics at {address}/metrics")
        try:
            time.sleep(seconds / 2)
            stamp_for_restart(client, read_server_info(client))
            say("restarting the server: leases taken before it come back uncounted")
            restart()
            time.sleep(seconds / 2)
            say("summary:")
            for line in summary(daemon, client):
                say(line)
            say(f"metrics were served at {address}/metrics")
        finally:
            daemon.stop_requested.set()
            daemon.stop()


def stamp_for_restart(client: redis.Redis, info: ServerInfo) -> None:
    """Leases taken now, on this run, expiring right after the restart."""
    keys = QueueKeys("emails")
    pipe = client.pipeline(transaction=False)
    for n in range(3):
        job_id = f"restart-{n}"
        pipe.zadd(keys.active, {job_id: info.time_ms + 500})
        pipe.hset(
            keys.job(job_id),
            items=["state", "active", "attempts", "1", LEASE_EPOCH, info.run_id.decode()],
        )
    pipe.execute()
