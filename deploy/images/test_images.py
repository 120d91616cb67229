"""The built images, started by buildah with chroot isolation: no registry, no engine."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import wait_until
from tests.support.helpers import FUTURE_OFFSET_MS, hash_of, lease, members, now_ms, run_id
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
APP_IMAGE = f"sweeperd:{VERSION}"
MODULE_IMAGE = f"sweeperd-redis-module:{VERSION}"
MODULE_IN_IMAGE = "/usr/local/lib/redis/modules/emq_stalled.so"
HEALTHCHECK_PORT = 9787  # fixed by the Dockerfile's HEALTHCHECK; chroot shares the host network
COMMAND_TIMEOUT_S = 60
SECOND_NS = 1_000_000_000


def buildah(*args: str) -> subprocess.CompletedProcess[str]:
    """buildah on the vfs storage `make image` builds into."""
    return subprocess.run(
        ["buildah", "--storage-driver", "vfs", *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def image_config(image: str) -> dict[str, Any]:
    """The image's Docker-format config; a missing image fails the test."""
    result = buildah("inspect", "--type", "image", image)
    assert result.returncode == 0, f"{image} is not built: run `make image`\n{result.stderr}"
    config: dict[str, Any] = json.loads(result.stdout)["Docker"]["config"]
    return config


def declared_user() -> str:
    """The USER of the Dockerfile's final stage, as written."""
    text = (REPO / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    found = re.search(r"^USER (\S+)$", final, re.M)
    assert found is not None, "the Dockerfile's final stage has no USER"
    return found.group(1)


def innermost(pid: int) -> int:
    """The last of a chain of child processes: under `buildah run`, the container's command."""
    while True:
        children = [
            int(stat.parent.name)
            for stat in Path("/proc").glob("[0-9]*/stat")
            if parent_pid(stat) == pid
        ]
        if not children:
            return pid
        pid = children[0]


def parent_pid(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # the process exited while we looked


def stop(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int:
    """SIGTERM to the container's command, as `docker stop` does; its exit code, via buildah."""
    if process.poll() is None:
        os.kill(innermost(process.pid), signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise AssertionError(f"{process.args!r} did not stop within {timeout_s}s") from None
    return process.returncode


class Container:
    """A working container of an image; commands run in it as the image's user unless told."""

    def __init__(self, image: str, env: Mapping[str, str] | None = None) -> None:
        self.config = image_config(image)
        created = buildah("from", "--pull=never", image)
        assert created.returncode == 0, created.stderr
        self.name = created.stdout.strip()
        self.background: list[subprocess.Popen[bytes]] = []
        for name, value in (env or {}).items():  # `docker run -e`
            configured = buildah("config", "--env", f"{name}={value}", self.name)
            assert configured.returncode == 0, configured.stderr

    def argv(self, command: Sequence[str], user: str | None) -> list[str]:
        as_user = ["--user", user] if user else []
        return [
            *("buildah", "--storage-driver", "vfs", "run", "--isolation", "chroot"),
            *as_user,
            self.name,
            "--",
            *command,
        ]

    def entrypoint(self, *args: str) -> list[str]:
        """The image's entrypoint with these arguments, as `docker run IMAGE ARGS` starts it."""
        return [*(self.config["Entrypoint"] or []), *args]

    def default_command(self, *extra: str) -> list[str]:
        """The entrypoint and CMD, then extra arguments, as `docker run IMAGE` starts it."""
        return self.entrypoint(*(self.config["Cmd"] or []), *extra)

    def run(self, *command: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command, user),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )

    def start(self, command: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        """A long-running command in a session of its own, so stopping it stops what it ran."""
        with log.open("wb") as out:
            process = subprocess.Popen(
                self.argv(command, None),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append(process)
        return process

    def remove(self) -> None:
        try:
            for process in self.background:
                stop(process)
        finally:
            buildah("rm", self.name)


@dataclass
class ModuleServer:
    """The module image's server on a loopback port, and a client of it."""

    container: Container
    port: int
    client: redis.Redis
    log: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleServer]:
    """The module image started by its own entrypoint and CMD, plus a loopback port."""
    container = Container(MODULE_IMAGE)
    port = free_port()
    log = tmp_path_factory.mktemp("module-image") / "redis.log"
    options = ("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
    process = container.start(container.default_command(*options), log)
    client = redis.Redis(port=port)
    try:
        wait_until(lambda: pings(client) or process.poll() is not None, what="the module image")
        assert process.poll() is None, log.read_text(errors="replace")
        yield ModuleServer(container, port, client, log)
    finally:
        client.close()
        container.remove()


def pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def emptied(module_server: ModuleServer) -> redis.Redis:
    """The module image's server with an empty keyspace."""
    module_server.client.flushall()
    return module_server.client


@pytest.fixture(scope="module")
def app() -> Iterator[Container]:
    """A working container of the sweeperd image, as built."""
    container = Container(APP_IMAGE)
    try:
        yield container
    finally:
        container.remove()


class TestAppImageConfig:
    def test_declares_user_entrypoint_port_labels_and_healthcheck(self) -> None:
        """buildah inspect shows the Dockerfile's user, entrypoint, port, labels and healthcheck."""
        config = image_config(APP_IMAGE)
        assert config["User"] == declared_user()
        assert config["Entrypoint"] == ["sweeperd"] and config["Cmd"] == ["run"]
        assert set(config["ExposedPorts"]) == {f"{HEALTHCHECK_PORT}/tcp"}
        labels = config["Labels"]
        assert labels["org.opencontainers.image.title"] == "sweeperd"
        assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
        assert "EMQ.STALLED.CHECK" in labels["org.opencontainers.image.description"]
        check = config["Healthcheck"]
        assert check["Test"][0] == "CMD" and "/healthz" in check["Test"][-1]
        assert (check["Interval"], check["Timeout"], check["Retries"]) == (
            30 * SECOND_NS,
            5 * SECOND_NS,
            3,
        )


class TestModuleImageConfig:
    def test_declares_the_module_command_and_port(self) -> None:
        """The module image starts redis-server with the module, on 6379, from /data."""
        config = image_config(MODULE_IMAGE)
        assert config["Cmd"] == ["redis-server", "--loadmodule", MODULE_IN_IMAGE]
        assert config["Entrypoint"] == ["docker-entrypoint.sh"]
        assert set(config["ExposedPorts"]) == {"6379/tcp"}
        assert config["WorkingDir"] == "/data"


class TestAppImageCommands:
    def test_runs_as_the_declared_user(self, app: Container) -> None:
        """A command in the image runs as the numeric non-root user the Dockerfile declares."""
        result = app.run("id", "-u")
        assert result.returncode == 0, result.stderr
        group = app.run("id", "-g")
        assert f"{result.stdout.strip()}:{group.stdout.strip()}" == declared_user()
        assert result.stdout.strip() != "0"

    def test_version(self, app: Container) -> None:
        """`sweeperd --version` and `sweeperd version` through the entrypoint print the
        package's version."""
        for argv in (["--version"], ["version"]):
            result = app.run(*app.entrypoint(*argv))
            assert result.returncode == 0, result.stdout + result.stderr
            assert result.stdout.strip() == f"sweeperd {VERSION}", argv

    def test_help(self, app: Container) -> None:
        """`sweeperd --help` through the entrypoint lists the commands."""
        result = app.run(*app.entrypoint("--help"))
        assert result.returncode == 0, result.stdout + result.stderr
        for command in ("run", "once", "inspect", "demo"):
            assert re.search(rf"^\W*{command}\b", result.stdout, re.M), (command, result.stdout)

    def test_no_compiler_in_the_final_image(self, app: Container) -> None:
        """The build tools stayed in the builder: no gcc, no cc in the final image."""
        result = app.run("sh", "-c", "command -v gcc cc || true")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == ""


class TestModuleImage:
    def test_loads_the_module(self, module_server: ModuleServer) -> None:
        """The server started by the image's CMD has the module and knows the verb."""
        modules = module_server.client.module_list()
        assert b"emqref" in [module[b"name"] for module in modules]
        info = module_server.client.execute_command("COMMAND", "INFO", "EMQ.STALLED.CHECK")  # type: ignore[no-untyped-call]
        assert info["emq.stalled.check"]["first_key_pos"] == 1

    def test_answers_the_verb(self, emptied: redis.Redis) -> None:
        """EMQ.STALLED.CHECK recovers, dead-letters and drops a ghost as the contract says."""
        keys = QueueKeys("verb")
        epoch = run_id(emptied)
        lease(emptied, keys, b"again", state="active", attempts=1, stalled=0, lease_epoch=epoch)
        lease(emptied, keys, b"spent", state="active", attempts=1, stalled=1, lease_epoch=epoch)
        lease(emptied, keys, b"ghost")
        reply = emptied.execute_command(  # type: ignore[no-untyped-call]
            "EMQ.STALLED.CHECK", keys.active, keys.pending, keys.dead, keys.prefix, 2, 100
        )
        assert reply == [[b"again"], [b"spent"]]
        assert members(emptied, keys.active) == []
        assert members(emptied, keys.pending) == [b"again"]
        assert members(emptied, keys.dead) == [b"spent"]
        assert not emptied.exists(keys.job(b"ghost"))
        assert hash_of(emptied, keys.metrics_failed) == {b"count": b"1"}

    def test_server_runs_as_the_redis_user(self, module_server: ModuleServer) -> None:
        """The entrypoint drops from root to the redis user (uid 999, as upstream), in /data."""
        redis_uid = module_server.container.run("id", "-u", "redis")
        assert redis_uid.returncode == 0, redis_uid.stderr
        info = module_server.client.info("server")
        status = Path(f"/proc/{info['process_id']}/status").read_text()
        uid = re.search(r"^Uid:\s+(\d+)", status, re.M)
        assert uid is not None and uid.group(1) == redis_uid.stdout.strip() == "999"
        assert module_server.client.config_get("dir") == {"dir": "/data"}


class TestOnceInImage:
    def test_sweeps_a_seeded_queue(self, app: Container, module_server: ModuleServer) -> None:
        """`sweeperd once` in the image recovers, dead-letters, exempts and leaves the future."""
        r = module_server.client
        r.flushall()
        keys = QueueKeys("orders")
        epoch = run_id(r)
        lease(r, keys, b"counted", state="active", attempts=1, stalled=0, lease_epoch=epoch)
        lease(r, keys, b"spent", state="active", attempts=2, stalled=1, lease_epoch=epoch)
        lease(r, keys, b"earlier", state="active", attempts=1, lease_epoch=b"0" * 40)
        lease(r, keys, b"ghost")
        future = now_ms() + FUTURE_OFFSET_MS
        lease(r, keys, b"held", future, state="active", attempts=1, lease_epoch=epoch)
        argv = ("once", "--queue", "orders", "--redis-url", module_server.url)
        result = app.run(*app.entrypoint(*argv, "--max-stalled", "2", "--json"))
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["executor"] == "native"
        assert sorted(report["recovered"]) == ["counted", "earlier"]
        assert report["dead"] == ["spent"] and report["exempt"] == ["earlier"]
        assert members(r, keys.active) == [b"held"]
        assert sorted(members(r, keys.pending)) == [b"counted", b"earlier"]
        assert members(r, keys.dead) == [b"spent"]
        assert hash_of(r, keys.job(b"counted"))[b"stalled"] == b"1"
        assert b"stalled" not in hash_of(r, keys.job(b"earlier"))
        assert hash_of(r, keys.job(b"spent"))[b"state"] == b"dead"
        assert not r.exists(keys.job(b"ghost"))


@pytest.fixture
def daemon(module_server: ModuleServer) -> Iterator[Container]:
    """A container of the sweeperd image whose `run` sweeps queue mail on the module image."""
    assert free_on_loopback(HEALTHCHECK_PORT), (
        f"port {HEALTHCHECK_PORT} is taken: run this through `make image-test`, "
        "which gives it a network namespace of its own"
    )
    env = {  # `docker run -e`; metrics stay on the image's own 0.0.0.0:9787
        "SWEEPERD_REDIS_URL": module_server.url,
        "SWEEPERD_QUEUES": "mail",
        "SWEEPERD_INTERVAL": "1",
        "SWEEPERD_MAX_STALLED": "3",
    }
    container = Container(APP_IMAGE, env)
    try:
        yield container
    finally:
        container.remove()


def free_on_loopback(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def healthcheck(container: Container) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK command, run in the container as the engine runs it."""
    test = container.config["Healthcheck"]["Test"]
    command = test[1:] if test[0] == "CMD" else ["/bin/sh", "-c", test[1]]
    return container.run(*command)


class TestDaemonInImage:
    def test_healthcheck_passes_against_the_running_daemon(
        self, daemon: Container, emptied: redis.Redis, tmp_path: Path
    ) -> None:
        """The HEALTHCHECK fails with no daemon, passes once it runs; SIGTERM exits 0."""
        assert healthcheck(daemon).returncode != 0
        log = tmp_path / "sweeperd.log"
        process = daemon.start(daemon.default_command(), log)
        wait_until(
            lambda: healthcheck(daemon).returncode == 0 or process.poll() is not None,
            what="the HEALTHCHECK to pass",
        )
        assert process.poll() is None, log.read_text(errors="replace")
        assert stop(process) == 0, log.read_text(errors="replace")
        assert healthcheck(daemon).returncode != 0

    def test_sweeps_on_its_schedule(
        self, daemon: Container, emptied: redis.Redis, tmp_path: Path
    ) -> None:
        """The daemon from the image returns an expired lease to pending, counted once."""
        keys = QueueKeys("mail")
        lease(emptied, keys, b"m1", state="active", attempts=1, lease_epoch=run_id(emptied))
        log = tmp_path / "sweeperd.log"
        process = daemon.start(daemon.default_command(), log)
        wait_until(
            lambda: members(emptied, keys.pending) == [b"m1"] or process.poll() is not None,
            what="the daemon's sweep",
        )
        assert process.poll() is None, log.read_text(errors="replace")
        assert hash_of(emptied, keys.job(b"m1"))[b"stalled"] == b"1"
        assert stop(process) == 0, log.read_text(errors="replace")
