"""What readiness says, and what the log says of a node, while a server refuses the daemon: every
sweep refused for a reason that will not pass by itself is not ready; a node's error followed
as it changes (refused connection, then refused authentication), and the all-clear after."""

from __future__ import annotations

import signal
from pathlib import Path

import redis

from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import acl_line
from tests.support.servers import RedisServer, free_port

USER, PASSWORD = "sweeperd", "readiness-Pw-2207"
NOT_TLS = (
    "the server may not speak TLS (a plain port leaves a TLS handshake unanswered): use "
    "redis:// if it has no TLS port"
)
FAST = ("--interval", "0.3", "--jitter", "0", "--socket-timeout", "1", "--shard", "off")


def not_ready_saying(daemon: DaemonProcess, text: str) -> str:
    """/readyz once it is 503 saying `text`; the body."""
    wait_until(lambda: (lambda r: r[0] == 503 and text in r[1])(daemon.get("/readyz")), what=text)
    return daemon.get("/readyz")[1]


def auth_failures(daemon: DaemonProcess) -> float:
    return daemon.value("sweeperd_sweep_failures_total", queue="q", reason="auth") or 0.0


class TestRefusedEverySweep:
    def test_native_without_the_module(self, plain_server: RedisServer, tmp_path: Path) -> None:
        """--executor native on a server without the module: every sweep fails no_verb, so it
        is not ready, /readyz and / say why, and `ready` is never logged."""
        args = ("--redis-url", plain_server.url, "--executor", "native", "-q", "q", *FAST)
        with DaemonProcess(tmp_path, *args) as daemon:
            daemon.wait_at_least("sweeperd_sweep_failures_total", 3, queue="q", reason="no_verb")
            body = not_ready_saying(daemon, f"{plain_server.node} refuses every sweep (no_verb): ")
            assert body.startswith("not ready: "), body
            assert "refuses every sweep (no_verb)" in daemon.get("/")[1]
            assert daemon.events("ready") == []
            assert daemon.stop() == 0

    def test_a_command_the_user_lacks(self, redis_server: RedisServer, tmp_path: Path) -> None:
        """A user without ZCOUNT, which the sweep calls: noperm, not ready, saying so; ready
        once it is granted."""
        line = acl_line("--shard", "off", user=USER, password=PASSWORD).replace(" +zcount", "")
        with redis_server.client() as admin:
            admin.execute_command(*line.split())
            url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
            with DaemonProcess(tmp_path, "--redis-url", url, "-q", "q", *FAST) as daemon:
                not_ready_saying(daemon, f"{redis_server.node} refuses every sweep (noperm): ")
                admin.execute_command("ACL", "SETUSER", USER, "+zcount")
                wait_until(lambda: daemon.get("/readyz") == (200, "ok\n"), what="ready")
                assert daemon.stop() == 0
            admin.execute_command("ACL", "DELUSER", USER)


class TestNodeErrorFollowed:
    def test_refused_then_unauthenticated_then_up(self, server_kind: str, tmp_path: Path) -> None:
        """Nothing listening, then a server without the user, then the user made: redis_down
        said for each error, the failures counted as connection then auth, /readyz naming the
        current error, and redis_up with ready at the end."""
        server = RedisServer(tmp_path / "server", kind=server_kind, port=free_port())
        url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0"
        with DaemonProcess(tmp_path, "--redis-url", url, "-q", "q", *FAST) as daemon:
            not_ready_saying(daemon, "Connection refused")
            with server:
                not_ready_saying(daemon, "invalid username-password pair")
                wait_until(lambda: auth_failures(daemon) > 0, what="an auth failure counted")
                downs = [str(e["error"]) for e in daemon.events("redis_down")]
                assert len(downs) == 2 and "Connection refused" in downs[0], downs
                assert "invalid username-password pair" in downs[1], downs
                with server.client() as admin:
                    admin.execute_command(*acl_line(user=USER, password=PASSWORD).split())
                wait_until(lambda: daemon.get("/readyz") == (200, "ok\n"), what="ready")
                assert [e["node"] for e in daemon.events("redis_up")] == [server.node]
                assert len(daemon.events("redis_down")) == 2
                assert daemon.stop() == 0


class TestTlsMismatch:
    def test_rediss_to_a_plain_port(self, plain_server: RedisServer, tmp_path: Path) -> None:
        """rediss:// to a server without TLS: redis_down and /readyz say the server may not
        speak TLS, not only that it timed out."""
        url = plain_server.url.replace("redis://", "rediss://")
        args = ("--redis-url", url, "-q", "q", "--interval", "0.3", "--socket-timeout", "0.5")
        with DaemonProcess(tmp_path, *args, "--shard", "off") as daemon:
            not_ready_saying(daemon, f"(Timeout connecting to server; {NOT_TLS}) to answer")
            [down] = daemon.events("redis_down")
            assert down["error"] == f"Timeout connecting to server; {NOT_TLS}", down
            assert daemon.stop() == 0


class TestStopWhileStarting:
    def test_sigint_during_a_tls_handshake(self, plain_server: RedisServer, tmp_path: Path) -> None:
        """SIGINT while the start waits on a rediss:// handshake to a plain port (unanswered
        for the socket timeout, 10 s here) ends the daemon at once, exit 0."""
        url = plain_server.url.replace("redis://", "rediss://")
        daemon = DaemonProcess(tmp_path, "--redis-url", url, "-q", "q", "--socket-timeout", "10")
        with plain_server.client() as admin:
            before = clients(admin)
            daemon.spawn()
            try:
                wait_until(lambda: clients(admin) > before, what="the daemon's handshake")
                assert daemon.process is not None
                daemon.process.send_signal(signal.SIGINT)
                assert daemon.wait(timeout_s=3.0) == 0, daemon.log_text()
            finally:
                daemon.__exit__(None, None, None)
        assert daemon.events("started") == [], daemon.log_text()
        assert [e["event"] for e in daemon.events("stopped")] == ["stopped"]


def clients(admin: redis.Redis) -> int:
    """The connections the server has now, this one included."""
    return int(admin.info("clients")["connected_clients"])
