"""`sweeperd run` as a process against a real server, under both executors."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from sweeperd.daemon.health import HEARTBEAT_S
from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import PAST_MS, dump_all, lease, now_ms, run_id
from tests.support.invoke import sweeperd
from tests.support.servers import RedisServer, free_port

FAST = ("--interval", "0.2", "--jitter", "0")


@dataclass
class Target:
    """A server to sweep and the executor the daemon is told to use on it."""

    server: RedisServer
    client: redis.Redis
    executor: str

    def args(self, *queues: str) -> list[str]:
        flags = ["--redis-url", self.server.url, "--executor", self.executor, *FAST]
        for q in queues:
            flags += ["--queue", q]
        return flags


@pytest.fixture(params=["native", "script"])
def target(
    request: pytest.FixtureRequest,
    r: redis.Redis,
    r_plain: redis.Redis,
    redis_server: RedisServer,
    plain_server: RedisServer,
) -> Target:
    """The module server with the native verb, or the plain server with the Lua port."""
    if request.param == "native":
        return Target(redis_server, r, "native")
    return Target(plain_server, r_plain, "script")


def swept(daemon: DaemonProcess, queue: str) -> bool:
    """The queue has had a successful call (its last-success series exists)."""
    return daemon.value("sweeperd_last_success_timestamp_seconds", queue=queue) is not None


def seed_mixed(client: redis.Redis, keys: QueueKeys) -> None:
    """Two exempt leases, three counted recoveries, two deaths and a ghost (max_stalled 2)."""
    epoch = run_id(client).decode()
    lease(client, keys, b"exempt-1", attempts="1", lease_epoch="earlier-run")
    lease(client, keys, b"exempt-2", attempts="1", lease_epoch="earlier-run", stalled="1")
    for n in range(3):
        lease(client, keys, f"counted-{n}".encode(), attempts="1", lease_epoch=epoch)
    lease(client, keys, b"dies-1", attempts="1", stalled="1")
    lease(client, keys, b"dies-2", attempts="2", stalled="5", lease_epoch=epoch)
    lease(client, keys, b"ghost")
    lease(client, keys, b"not-due", deadline_ms=now_ms() + 3_600_000, attempts="1")


class TestCounters:
    def test_counters_equal_the_keyspace(self, target: Target, workdir: Path) -> None:
        """Recovered, dead and exempt counters equal what happened to the rows; at full the
        ghost is counted on the queue and the node that took the call."""
        keys = QueueKeys("mixed")
        seed_mixed(target.client, keys)
        args = [*target.args("mixed"), "--max-stalled", "2", "--queue-metrics", "full"]
        node = f"127.0.0.1:{target.server.port}"
        with DaemonProcess(workdir, *args) as daemon:
            daemon.wait_value("sweeperd_recovered_total", 5, queue="mixed")
            daemon.wait_value("sweeperd_queue_jobs", 5, queue="mixed", set="pending")
            assert daemon.value("sweeperd_ghosts_removed_total", queue="mixed", node=node) == 1
            assert (daemon.value("sweeperd_sweeps_total", queue="mixed", node=node) or 0) >= 1
            assert daemon.value("sweeperd_dead_total", queue="mixed") == 2
            assert daemon.value("sweeperd_exempt_total", queue="mixed") == 2
            assert daemon.value("sweeperd_queue_jobs", queue="mixed", set="dead") == 2
            assert daemon.value("sweeperd_queue_jobs", queue="mixed", set="active") == 1
            assert daemon.value("sweeperd_queue_failed_jobs", queue="mixed") == 2
            assert daemon.value("sweeperd_expired_leases", queue="mixed") == 0
            assert daemon.value("sweeperd_redis_up", node=f"127.0.0.1:{target.server.port}") == 1
            assert (
                daemon.value(
                    "sweeperd_server_info",
                    node=f"127.0.0.1:{target.server.port}",
                    executor=target.executor,
                )
                == 1
            )
            sweeps = daemon.events("sweep")
            assert daemon.stop() == 0
        c = target.client
        assert sorted(c.zrange(keys.pending, 0, -1)) == [
            b"counted-0",
            b"counted-1",
            b"counted-2",
            b"exempt-1",
            b"exempt-2",
        ]
        assert sorted(c.zrange(keys.dead, 0, -1)) == [b"dies-1", b"dies-2"]
        assert c.zrange(keys.active, 0, -1) == [b"not-due"]
        assert c.hgetall(keys.job(b"exempt-2")) == {
            b"state": b"pending",
            b"attempts": b"1",
            b"lease_epoch": b"earlier-run",
            b"stalled": b"1",
        }
        assert c.hgetall(keys.job(b"dies-2"))[b"stalled"] == b"6"
        assert c.exists(keys.job(b"ghost")) == 0
        assert sum(int(str(e["recovered"])) for e in sweeps) == 5
        assert sum(int(str(e["dead"])) for e in sweeps) == 2

    def test_a_backlog_drains_without_waiting_for_ticks(
        self, target: Target, workdir: Path
    ) -> None:
        """30,000 expired leases and an hour between ticks: the first tick's queue keeps
        draining call after call until nothing is due, counted exactly, its progress logged."""
        keys = QueueKeys("backlog")
        pipe = target.client.pipeline(transaction=False)
        for n in range(30_000):
            pipe.zadd(keys.active, {f"j{n}": PAST_MS + n})
            pipe.hset(keys.job(f"j{n}"), mapping={"attempts": "1"})
        pipe.execute()
        args = [*target.args("backlog"), "--max-stalled", "9", "--interval", "3600"]
        with DaemonProcess(workdir, *args) as daemon:
            daemon.wait_value("sweeperd_recovered_total", 30_000, queue="backlog")
            # One queue: the node's sweeps and tick durations (basic metrics) are the queue's.
            # The drain's calls are no ticks: one tick, and a wake where the listener heard the
            # drain's writes and the drain ended before the wake ran (a loaded machine).
            assert daemon.value("sweeperd_sweeps_total") >= 10  # type: ignore[operator]
            assert daemon.value("sweeperd_sweep_duration_seconds_count") in (1, 2)
            assert daemon.value("sweeperd_expired_leases", queue="backlog") == 0
            wait_until(lambda: daemon.events("drain_finished"), what="drain_finished")
            [started] = daemon.events("drain_started")
            [finished] = daemon.events("drain_finished")
            assert daemon.stop() == 0
        assert started["queue"] == "backlog" and int(str(started["left"])) > 0
        assert int(str(finished["done"])) + 100 >= 30_000 and finished["left"] == 0
        assert target.client.zcard(keys.pending) == 30_000
        assert target.client.exists(keys.active) == 0


class TestIsolation:
    def test_a_lane_row_fails_only_its_queue(self, target: Target, workdir: Path) -> None:
        """Queue A's lane row fails A with reason lane, untouched; queue B is still swept."""
        a, b = QueueKeys("lane-a"), QueueKeys("lane-b")
        lease(target.client, a, b"plain", attempts="1")
        lease(target.client, a, b"lane", attempts="1", group="g1")
        before = {k: v for k, v in dump_all(target.client).items() if k.startswith(b"emq:{lane-a}")}
        args = [*target.args("lane-a", "lane-b"), "--max-stalled", "5"]
        with DaemonProcess(workdir, *args) as daemon:
            wait_until(
                lambda: (
                    (
                        daemon.value("sweeperd_sweep_failures_total", queue="lane-a", reason="lane")
                        or 0
                    )
                    >= 3
                ),
                what="lane failures",
            )
            lease(target.client, b, b"late", attempts="1")
            daemon.wait_value("sweeperd_recovered_total", 1, queue="lane-b")
            failures = daemon.events("sweep_failed")
            assert daemon.stop() == 0
        after = {k: v for k, v in dump_all(target.client).items() if k.startswith(b"emq:{lane-a}")}
        assert after == before
        assert failures[0]["reason"] == "lane"
        assert failures[0]["error"] == "EMQLANE job lane is a lane row"
        assert target.client.zrange(b.pending, 0, -1) == [b"late"]


class TestRestart:
    def test_restart_is_counted_and_leases_come_back_exempt(
        self, server_kind: str, workdir: Path
    ) -> None:
        """A server restarted with AOF under the daemon: counted once, leases exempt."""
        keys = QueueKeys("restart")
        with RedisServer(workdir / "aof", kind=server_kind, appendonly=True) as server:
            client = server.client()
            first = run_id(client)
            with DaemonProcess(
                workdir, "--redis-url", server.url, "--queue", "restart", *FAST
            ) as daemon:
                node = f"127.0.0.1:{server.port}"
                daemon.wait_at_least("sweeperd_sweeps_total", 1, node=node)
                for n in range(4):
                    lease(
                        client,
                        keys,
                        f"held-{n}".encode(),
                        deadline_ms=now_ms() + 1500,
                        attempts="1",
                        lease_epoch=first.decode(),
                        stalled="0",
                    )
                server.restart()
                daemon.wait_value("sweeperd_server_restarts_total", 1, node=node)
                daemon.wait_value("sweeperd_exempt_total", 4, queue="restart")
                assert daemon.value("sweeperd_dead_total", queue="restart") == 0
                restarted = daemon.events("server_restarted")
                sweeps_then = daemon.value("sweeperd_sweeps_total", node=node) or 0
                wait_until(
                    lambda: (
                        (daemon.value("sweeperd_sweeps_total", node=node) or 0) > sweeps_then + 2
                    ),
                    what="sweeps after the restart",
                )
                assert daemon.stop() == 0
            second = run_id(client)
            assert second != first
            assert restarted[0]["old_run_id"] == first.decode()
            assert restarted[0]["new_run_id"] == second.decode()
            for n in range(4):
                assert client.hgetall(keys.job(f"held-{n}")) == {
                    b"attempts": b"1",
                    b"lease_epoch": first,
                    b"stalled": b"0",
                    b"state": b"pending",
                }
            client.close()


class TestLifecycle:
    def test_server_down_at_start_then_up(self, server_kind: str, workdir: Path) -> None:
        """Started before its server, the daemon is not ready and owns no queue (no heartbeat
        answered), then ready and sweeping."""
        port = free_port()
        keys = QueueKeys("late")
        url = f"redis://127.0.0.1:{port}/0"
        node = f"127.0.0.1:{port}"
        with DaemonProcess(workdir, "--redis-url", url, "--queue", "late", *FAST) as daemon:
            assert daemon.get("/readyz")[0] == 503
            daemon.wait_value("sweeperd_redis_up", 0, node=node)
            assert daemon.value("sweeperd_owned_queues") == 0
            with RedisServer(workdir / "late", kind=server_kind, port=port) as server:
                client = server.client()
                lease(client, keys, b"j", attempts="1")
                wait_until(lambda: daemon.get("/readyz")[0] == 200, what="/readyz 200")
                daemon.wait_value("sweeperd_dead_total", 1, queue="late")
                assert daemon.value("sweeperd_redis_up", node=node) == 1
                assert daemon.stop() == 0
                client.close()
        assert len(daemon.events("redis_down")) == 1  # once per change of state, not per try

    def test_sigterm_mid_run_exits_zero(self, target: Target, workdir: Path) -> None:
        """SIGTERM while sweeping a large backlog: the daemon exits 0 within 10 s."""
        keys = QueueKeys("busy")
        pipe = target.client.pipeline(transaction=False)
        for n in range(20_000):
            pipe.zadd(keys.active, {f"j{n}": PAST_MS})
        pipe.execute()
        args = [*target.args("busy"), "--limit", "50"]
        with DaemonProcess(workdir, *args) as daemon:
            wait_until(lambda: daemon.value("sweeperd_sweeps_total"), what="sweep")
            started = time.monotonic()
            assert daemon.stop(signal.SIGTERM) == 0
            assert time.monotonic() - started < 10
        assert daemon.events("stopped")

    def test_sighup_rereads_the_config_file(self, target: Target, workdir: Path) -> None:
        """A queue added to the config file is swept after SIGHUP; one removed loses its
        series."""
        config = workdir / "sweeperd.toml"
        config.write_text('queues = ["first"]\n')
        args = [
            "--config",
            str(config),
            "--redis-url",
            target.server.url,
            "--executor",
            target.executor,
            *FAST,
        ]
        with DaemonProcess(workdir, *args) as daemon:
            wait_until(lambda: swept(daemon, "first"), what="first swept")
            lease(target.client, QueueKeys("second"), b"j", attempts="1")
            config.write_text('queues = ["first", "second"]\n')
            assert daemon.process is not None
            daemon.process.send_signal(signal.SIGHUP)
            daemon.wait_value("sweeperd_dead_total", 1, queue="second")
            assert daemon.events("reloaded")
            config.write_text('queues = ["second"]\n')
            daemon.process.send_signal(signal.SIGHUP)
            wait_until(lambda: len(daemon.events("reloaded")) == 2, what="a second reload")
            wait_until(lambda: 'queue="first"' not in daemon.metrics_text(), what="first dropped")
            assert daemon.value("sweeperd_dead_total", queue="second") == 1
            assert daemon.stop() == 0

    def test_discovery_finds_and_keeps_queues(self, target: Target, workdir: Path) -> None:
        """--discover schedules a queue whose active set appears, and keeps sweeping it (its
        series with it) when the set goes: a drained queue is no vanished one (an hour of
        absence drops it: tests/test_daemon_unit.py)."""
        args = [
            "--redis-url",
            target.server.url,
            "--executor",
            target.executor,
            *FAST,
            "--discover",
            "0.2",
        ]
        keys = QueueKeys("found")
        lease(target.client, keys, b"j", attempts="1", deadline_ms=now_ms() + 3_600_000)
        with DaemonProcess(workdir, *args) as daemon:
            wait_until(
                lambda: swept(daemon, "found"),
                what="the discovered queue swept",
            )
            target.client.delete(keys.active)
            swept_at = daemon.value("sweeperd_last_success_timestamp_seconds", queue="found")
            wait_until(
                lambda: (
                    daemon.value("sweeperd_last_success_timestamp_seconds", queue="found")
                    != swept_at
                ),
                what="the drained queue swept again",
            )
            assert daemon.value("sweeperd_recovered_total", queue="found") == 0
            assert daemon.stop() == 0


class TestNotify:
    def test_ready_and_watchdog_reach_the_notify_socket(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """With NOTIFY_SOCKET set: READY=1, a status, WATCHDOG=1, and STOPPING=1 at the end."""
        path = workdir / "notify.sock"
        env = {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "1000000"}
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(path))
            sock.settimeout(10)
            args = ["--redis-url", redis_server.url, "--queue", "n", *FAST]
            with DaemonProcess(workdir, *args, env=env) as daemon:
                seen = [sock.recv(4096)]
                while b"WATCHDOG=1" not in seen or b"READY=1" not in seen:
                    seen.append(sock.recv(4096))
                assert daemon.stop() == 0
            while seen[-1] != b"STOPPING=1":
                seen.append(sock.recv(4096))
        assert f"STATUS=sweeping 1 queues on 127.0.0.1:{redis_server.port}".encode() in seen
        assert seen.index(b"READY=1") < len(seen) - 1

    def test_a_reload_is_framed_by_reloading_and_ready(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """SIGHUP once ready: RELOADING=1 (with MONOTONIC_USEC) at once, then READY=1 after the
        file was read, a broken file too; the new budget is what the next sweep uses."""
        path, config = workdir / "notify.sock", workdir / "sweeperd.toml"
        config.write_text('queues = ["h"]\nmax_stalled = 1\n')
        args = ["--config", str(config), "--redis-url", redis_server.url, *FAST]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(path))
            sock.settimeout(10)
            with DaemonProcess(workdir, *args, env={"NOTIFY_SOCKET": str(path)}) as daemon:
                assert daemon.process is not None
                while sock.recv(4096) != b"READY=1":
                    pass
                config.write_text('queues = ["h"]\nmax_stalled = 3\n')
                signalled_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
                daemon.process.send_signal(signal.SIGHUP)
                reload = framing(sock)
                config.write_text("max_stalled = [\n")
                daemon.process.send_signal(signal.SIGHUP)
                broken = framing(sock)
                lease(r, QueueKeys("h"), b"j", attempts="1", stalled="1")
                row = QueueKeys("h").job(b"j")
                wait_until(lambda: r.hget(row, "state") == b"pending", what="j recovered at 3")
                assert daemon.stop() == 0
        assert signalled_us <= reload[0]
        assert [e["max_stalled"] for e in daemon.events("reloaded")] == [3]
        assert len(daemon.events("reload_failed")) == 1
        assert reload[1] == broken[1] == "READY=1"
        assert r.hget(QueueKeys("h").job(b"j"), "stalled") == b"2"

    def test_a_reload_before_ready_says_nothing(
        self, redis_server: RedisServer, workdir: Path
    ) -> None:
        """SIGHUP while the server is down: read, but no RELOADING=1 nor READY=1, which would
        tell systemd the start is done."""
        path, config = workdir / "notify.sock", workdir / "sweeperd.toml"
        config.write_text('queues = ["h"]\n')
        down = f"redis://127.0.0.1:{free_port()}/0"
        args = ["--config", str(config), "--redis-url", down, *FAST]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(path))
            sock.settimeout(10)
            with DaemonProcess(workdir, *args, env={"NOTIFY_SOCKET": str(path)}) as daemon:
                assert daemon.process is not None
                assert sock.recv(4096).startswith(b"STATUS=waiting for")
                daemon.process.send_signal(signal.SIGHUP)
                wait_until(lambda: daemon.events("reloaded"), what="the reload")
                assert daemon.stop() == 0
            seen = [sock.recv(4096)]
            while seen[-1] != b"STOPPING=1":
                seen.append(sock.recv(4096))
        assert [m for m in seen if m.startswith((b"RELOADING=", b"READY="))] == []

    def test_reloads_in_a_row_keep_the_heartbeat(
        self, redis_server: RedisServer, workdir: Path
    ) -> None:
        """SIGHUP after SIGHUP, each as soon as the last is read, for longer than /healthz's
        grace (five heartbeats): the scheduler's heartbeat still runs, /healthz stays 200 and
        WATCHDOG=1 goes on (under systemd, a stale heartbeat gets the daemon killed)."""
        path, config = workdir / "notify.sock", workdir / "sweeperd.toml"
        config.write_text('queues = ["h"]\n')
        args = ["--config", str(config), "--redis-url", redis_server.url, *FAST]
        env = {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "2000000"}
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(path))
            seen: list[bytes] = []  # read as they come, as systemd does: a full socket blocks

            def read() -> None:
                while message := sock.recv(4096):
                    seen.append(message)

            reader = threading.Thread(target=read)
            reader.start()
            with DaemonProcess(workdir, *args, env=env) as daemon:
                assert daemon.process is not None
                until = time.monotonic() + 5 * HEARTBEAT_S + 2
                sent = 0
                while time.monotonic() < until:
                    daemon.process.send_signal(signal.SIGHUP)
                    sent += 1
                    wait_until(reloads(daemon, sent), what=f"reload {sent}")
                    assert daemon.get("/healthz")[0] == 200, f"after {sent} reloads"
                watchdogs = seen.count(b"WATCHDOG=1")
                assert daemon.stop() == 0
            sock.sendto(b"", str(path))  # the reader's end
            reader.join(10)
        assert sent > 10
        assert watchdogs >= 5  # once a second (half of WATCHDOG_USEC) while the reloads went on


def reloads(daemon: DaemonProcess, n: int) -> Callable[[], bool]:
    """Whether the daemon has logged n reloads."""
    return lambda: daemon.log_text().count('"reloaded"') == n


def framing(sock: socket.socket) -> tuple[int, str]:
    """The MONOTONIC_USEC of the next RELOADING=1, and the first message after it but STATUS=."""
    message = sock.recv(4096).decode()
    while not message.startswith("RELOADING=1\n"):
        message = sock.recv(4096).decode()
    stamp = int(message.split("MONOTONIC_USEC=")[1])
    after = sock.recv(4096).decode()
    while after.startswith("STATUS="):
        after = sock.recv(4096).decode()
    return stamp, after


class TestExposition:
    def test_live_metrics_pass_promtool(
        self, r: redis.Redis, redis_server: RedisServer, workdir: Path
    ) -> None:
        """promtool check metrics accepts the live /metrics of a daemon that has swept."""
        lease(r, QueueKeys("p"), b"j", attempts="1")
        with DaemonProcess(
            workdir, "--redis-url", redis_server.url, "--queue", "p", *FAST
        ) as daemon:
            daemon.wait_value("sweeperd_dead_total", 1, queue="p")
            body = daemon.metrics_text()
            landing = daemon.get("/")
            assert landing[0] == 200
            assert f"sweeping 1 queues on 127.0.0.1:{redis_server.port}" in landing[1]
            assert daemon.stop() == 0
        checked = subprocess.run(
            ["promtool", "check", "metrics"], input=body.encode(), capture_output=True, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


BAD_CONFIGS = [
    (["--queue", "q", "--interval", "0"], "--interval"),
    (["--queue", "q", "--interval", "x"], "--interval"),
    (["--queue", "q", "--limit", "-1"], "--limit"),
    (["--queue", "q", "--redis-url", "http://x"], "--redis-url"),
    (["--queue", "q", "--metrics-addr", "nope"], "--metrics-addr"),
    (["--queue", "q", "--executor", "magic"], "--executor"),
    (["--queue", "q", "--queue-metrics", "all"], "--queue-metrics"),
    ([], "no queue"),
    (["--config", "/nonexistent/sweeperd.toml"], "/nonexistent/sweeperd.toml"),
    (["--queue", "q", "--no-such-flag"], "--no-such-flag"),
]


class TestBadConfig:
    @pytest.mark.parametrize(("args", "named"), BAD_CONFIGS)
    def test_bad_settings_exit_2_with_one_line(self, args: list[str], named: str) -> None:
        """Each bad setting exits 2 with one line on stderr naming it."""
        done = sweeperd("run", *args)
        assert done.code == 2, done.err
        lines = done.err.strip().splitlines()
        assert len(lines) == 1, done.err
        assert named in lines[0]

    def test_unknown_key_in_the_file_exits_2(self, workdir: Path) -> None:
        """An unknown key in the TOML file is named in the one line."""
        config = workdir / "bad.toml"
        config.write_text('queues = ["q"]\nintervall = 3\n')
        done = sweeperd("run", "--config", str(config))
        assert done.code == 2
        assert "intervall" in done.err and len(done.err.strip().splitlines()) == 1

    def test_taken_metrics_port_exits_2(self, workdir: Path) -> None:
        """A metrics port already bound is a usage error, with one line."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            done = sweeperd("run", "--queue", "q", "--metrics-addr", f"127.0.0.1:{port}")
        assert done.code == 2, done.err
        assert done.err_lines == [
            f"sweeperd: --metrics-addr (SWEEPERD_METRICS_ADDR): cannot listen on 127.0.0.1:{port}: "
            "Address already in use"
        ]
