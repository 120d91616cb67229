"""Failures of `once`, `inspect` and `run` as an operator meets them: one line, the right exit."""

from __future__ import annotations

import http.server
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import dump_all, hash_of, lease, members, run_id
from tests.support.invoke import Ran, sweeperd, sweeperd_many, sweeperd_process
from tests.support.servers import RedisServer, free_port

Q = QueueKeys("q")
PASSWORD = "s3cret-pw"
ACL_USER, ACL_PASSWORD = "sweeper", "acl-pw"


def one_line(ran: Ran, code: int) -> str:
    """The run's single stderr line, once its exit code is checked; no traceback."""
    assert ran.code == code, ran.err
    [line] = ran.err_lines
    assert line.startswith("sweeperd: ")
    return line


@pytest.fixture(scope="module")
def locked_server(
    server_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """A server with the module, a password, and an ACL user without INFO and EVALSHA."""
    workdir = tmp_path_factory.mktemp(f"{server_kind}-locked")
    with RedisServer(workdir, kind=server_kind) as server:
        with server.client() as admin:
            admin.acl_setuser(
                ACL_USER,
                enabled=True,
                passwords=[f"+{ACL_PASSWORD}"],
                keys=["*"],
                commands=["+@all", "-info", "-evalsha"],
            )
            admin.config_set("requirepass", PASSWORD)
        yield server


class Quiet(http.server.BaseHTTPRequestHandler):
    """The standard handler, its request log silenced: it would land in this process's stderr."""

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    """A port where an HTTP server, not a Redis one, answers."""
    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class TestUrl:
    """A Redis URL whose parts redis-py would drop or refuse later is refused before any call."""

    @pytest.mark.parametrize(
        ("url_tail", "named"),
        [
            ("/1x", "the db (the path after the host) must be a number"),
            ("/0/1", "the db (the path after the host) must be a number"),
            ("/0?db=2x", "the db (?db=) must be a number"),
            ("/99999999999", "the db (the path after the host) must be a number from 0 to"),
            ("/0?foo=1", "unknown query key 'foo'"),
            ("/0?socket_timeout=1e12", "unknown query key 'socket_timeout'"),
            ("/0?ssl_cert_reqs=required", "ssl_cert_reqs is for rediss:// URLs only"),
        ],
    )
    def test_refused_on_a_live_server(
        self, r: redis.Redis, redis_server: RedisServer, url_tail: str, named: str
    ) -> None:
        """A bad db or query key is exit 2 naming the part, and db 0 is not swept instead."""
        lease(r, Q, b"j", attempts=1)
        before = dump_all(r)
        url = f"redis://127.0.0.1:{redis_server.port}{url_tail}"
        once, inspect = sweeperd_many(
            ["once", "-q", "q", "--redis-url", url], ["inspect", "-q", "q", "--redis-url", url]
        )
        for ran in (once, inspect):
            line = one_line(ran, 2)
            assert line.startswith("sweeperd: --redis-url (SWEEPERD_REDIS_URL): ")
            assert named in line
            assert ran.out == ""
        assert dump_all(r) == before

    def test_port_zero(self) -> None:
        """Port 0 is refused, not turned into 6379."""
        line = one_line(sweeperd("once", "-q", "q", "--redis-url", "redis://127.0.0.1:0/0"), 2)
        assert "the port must be a number from 1 to 65535, not '0'" in line

    def test_bad_ssl_cert_reqs(self) -> None:
        """A bad ssl_cert_reqs is one line, exit 2."""
        url = "rediss://127.0.0.1:1/0?ssl_cert_reqs=maybe"
        line = one_line(sweeperd("inspect", "-q", "q", "--redis-url", url), 2)
        assert "ssl_cert_reqs must be one of none, optional, required, not 'maybe'" in line

    def test_db_out_of_range_for_the_server(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A db the server lacks (it has 16) is exit 2 naming the db, and nothing is written."""
        lease(r, Q, b"j", attempts=1)
        before = dump_all(r)
        url = f"redis://127.0.0.1:{redis_server.port}/16"
        ran = sweeperd("once", "-q", "q", "--redis-url", url, "--json")
        line = one_line(ran, 2)
        assert "the db is out of range for" in line
        assert ran.json()["error"]["reason"] == "usage"
        assert dump_all(r) == before

    def test_password_in_query_redacted(self) -> None:
        """A password given as ?password= is never shown: not on stderr, not in the JSON."""
        url = f"redis://127.0.0.1:{free_port()}/0?password={PASSWORD}"
        ran = sweeperd("once", "-q", "q", "--redis-url", url, "--json")
        line = one_line(ran, 3)
        assert PASSWORD not in ran.err + ran.out
        assert "password=<redacted>" in line
        assert ran.json()["error"]["reason"] == "connection"

    def test_password_in_query_redacted_in_refusals(self) -> None:
        """A refused URL is shown without its query password."""
        url = f"redis://127.0.0.1:1/0?password={PASSWORD}&foo=1"
        ran = sweeperd("inspect", "-q", "q", "--redis-url", url)
        one_line(ran, 2)
        assert PASSWORD not in ran.err


class TestDigitsAndOrder:
    @pytest.mark.parametrize(
        ("args", "says"),
        [
            (["--sentinel", "h:\u00b2", "--sentinel-master", "m"], "a Sentinel's address must be"),
            (["--limit", "\u00b2"], "--limit (SWEEPERD_LIMIT) must be a whole number"),
            (["--redis-url", "redis://h:\u00b2/0"], "the port must be a number from 1 to 65535"),
            (["--redis-url", "REDIS://h", "--cluster"], "the scheme must be redis://"),
        ],
    )
    def test_refused_in_one_line(self, args: list[str], says: str) -> None:
        """A digit that is no ASCII digit ('²'), and a bad URL scheme with --cluster: exit 2,
        one line saying what is wrong, never a traceback."""
        assert says in one_line(sweeperd("once", "-q", "q", *args), 2)


class TestEmptyConfig:
    @pytest.mark.parametrize("command", ["run", "once", "inspect", "top"])
    def test_refused_as_a_flag_and_as_an_env_var(self, command: str) -> None:
        """--config '' or SWEEPERD_CONFIG set empty is not "no file" (the file's settings would
        silently not apply): exit 2, one line."""
        says = "--config (SWEEPERD_CONFIG) is empty: give the TOML file's path or leave it out"
        flag = sweeperd(command, "-q", "q", "--config", "")
        env = sweeperd(command, "-q", "q", env={"SWEEPERD_CONFIG": ""})
        assert one_line(flag, 2) == one_line(env, 2) == f"sweeperd: {says}"


class TestTimeouts:
    @pytest.mark.parametrize("value", ["nan", "inf", "1e12", "0"])
    def test_refused(self, redis_server: RedisServer, value: str) -> None:
        """A socket timeout a socket cannot take is exit 2, one line, for once and inspect."""
        runs = sweeperd_many(
            ["once", "-q", "q", "--redis-url", redis_server.url, "--socket-timeout", value],
            ["inspect", "-q", "q", "--redis-url", redis_server.url, "--socket-timeout", value],
        )
        for ran in runs:
            assert "--socket-timeout (SWEEPERD_SOCKET_TIMEOUT) must be" in one_line(ran, 2)


class TestNotRedis:
    def test_http_server(self, http_port: int) -> None:
        """An HTTP server on the port is exit 3: not a Redis server, one line, JSON error."""
        url = f"redis://127.0.0.1:{http_port}/0"
        once, inspect = sweeperd_many(
            ["once", "-q", "q", "--redis-url", url, "--json"],
            ["inspect", "-q", "q", "--redis-url", url, "--json"],
        )
        for ran in (once, inspect):
            line = one_line(ran, 3)
            assert f"127.0.0.1:{http_port} does not answer as a Redis server" in line
            assert ran.json()["error"]["reason"] == "protocol"


def with_password_file(tmp_path: Path, password: str, command: str, url: str) -> Ran:
    """`command -q q` with the password read from a file holding `password`."""
    (tmp_path / "pw").write_text(password)
    return sweeperd(
        command, "-q", "q", "--redis-url", url, "--redis-password-file", str(tmp_path / "pw")
    )


class TestAuthentication:
    def test_needs_a_password(self, locked_server: RedisServer) -> None:
        """No password for a server that wants one: it says so, exit 1, not "cannot reach"."""
        ran = sweeperd("once", "-q", "q", "--redis-url", locked_server.url, "--json")
        line = one_line(ran, 1)
        assert "the server needs a password (--redis-password-file" in line
        assert ran.json()["error"]["reason"] == "auth"

    def test_wrong_password(self, locked_server: RedisServer, tmp_path: Path) -> None:
        """A wrong password: "authentication failed", exit 1."""
        ran = with_password_file(tmp_path, "wrong\n", "inspect", locked_server.url)
        line = one_line(ran, 1)
        assert "authentication failed" in line
        assert "cannot reach" not in line

    def test_right_password(self, locked_server: RedisServer, tmp_path: Path) -> None:
        """The right password from the file: the queue is inspected."""
        ran = with_password_file(tmp_path, PASSWORD + "\n", "inspect", locked_server.url)
        assert (ran.code, ran.err) == (0, "")

    def test_empty_password_file(self, redis_server: RedisServer, tmp_path: Path) -> None:
        """An empty password file is exit 2 naming the file."""
        ran = with_password_file(tmp_path, "\n", "once", redis_server.url)
        assert f"the password file {tmp_path / 'pw'} is empty" in one_line(ran, 2)

    def test_unreadable_credential(self, redis_server: RedisServer, tmp_path: Path) -> None:
        """An unreadable $CREDENTIALS_DIRECTORY/redis-password names its path."""
        (tmp_path / "redis-password").mkdir()
        ran = sweeperd(
            "once",
            "-q",
            "q",
            "--redis-url",
            redis_server.url,
            env={"CREDENTIALS_DIRECTORY": str(tmp_path)},
        )
        line = one_line(ran, 2)
        assert f"cannot read the Redis password file {tmp_path / 'redis-password'}" in line
        assert "None" not in line


class TestPermissions:
    def test_without_info(self, locked_server: RedisServer) -> None:
        """An ACL user without INFO: once and inspect exit 1 naming the command."""
        url = f"redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{locked_server.port}/0"
        runs = sweeperd_many(
            ["once", "-q", "q", "--redis-url", url, "--json"],
            ["inspect", "-q", "q", "--redis-url", url, "--json"],
        )
        for ran in runs:
            line = one_line(ran, 1)
            assert "'info'" in line
            assert ACL_PASSWORD not in ran.err + ran.out
            assert ran.json()["error"]["reason"] == "noperm"

    def test_without_evalsha(self, locked_server: RedisServer) -> None:
        """The script executor for a user without EVALSHA: exit 1 naming it."""
        url = f"redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{locked_server.port}/0"
        with locked_server.client(password=PASSWORD) as admin:
            admin.acl_setuser(ACL_USER, enabled=True, commands=["+info"])
            try:
                ran = sweeperd("once", "-q", "q", "--redis-url", url, "--executor", "script")
            finally:
                admin.acl_setuser(ACL_USER, enabled=True, commands=["-info"])
        assert "'evalsha'" in one_line(ran, 1)


class TestQueues:
    def test_two_queues_refused(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """`once -q a -q b` is refused (exit 2, both named) rather than sweeping only b."""
        for name in ("a", "b"):
            lease(r, QueueKeys(name), b"j", attempts=1)
        before = dump_all(r)
        ran = sweeperd("once", "-q", "a", "-q", "b", "--redis-url", redis_server.url, "--json")
        line = one_line(ran, 2)
        assert "once takes exactly one queue" in line
        assert "(got a, b)" in line
        assert ran.json()["error"]["reason"] == "usage"
        assert dump_all(r) == before

    def test_env_list_with_spaces(self, redis_server: RedisServer) -> None:
        """SWEEPERD_QUEUES="emails, reports" reads as two queues, as docs/configuration.md says."""
        ran = sweeperd(
            "once",
            "--redis-url",
            redis_server.url,
            env={"SWEEPERD_QUEUES": "emails, reports"},
        )
        assert "(got emails, reports)" in one_line(ran, 2)

    def test_prefix_root_checked(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """`once --prefix-root 'a{b'` is refused as `run` refuses it, and writes nothing."""
        lease(r, QueueKeys("q", "a{b"), b"j", attempts=1)
        before = dump_all(r)
        ran = sweeperd("once", "-q", "q", "--redis-url", redis_server.url, "--prefix-root", "a{b")
        assert "--prefix-root (SWEEPERD_PREFIX_ROOT) must be" in one_line(ran, 2)
        assert dump_all(r) == before


class TestConfig:
    def test_once_applies_the_queues_table(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """`once --config` takes the queue's own max_stalled: stalled 1 of 3 is recovered."""
        config = tmp_path / "sweeperd.toml"
        config.write_text(f'redis_url = "{redis_server.url}"\n[queue.mail]\nmax_stalled = 3\n')
        mail = QueueKeys("mail")
        lease(r, mail, b"j", attempts=1, stalled=1, lease_epoch=run_id(r))
        ran = sweeperd("once", "-q", "mail", "--config", str(config), "--json")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json()["recovered"] == ["j"]
        assert hash_of(r, mail.job(b"j"))[b"stalled"] == b"2"
        assert members(r, mail.dead) == []

    def test_config_from_env(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """SWEEPERD_CONFIG is read by inspect as by run."""
        config = tmp_path / "sweeperd.toml"
        config.write_text(f'redis_url = "{redis_server.url}"\nprefix_root = "jobs"\n')
        lease(r, QueueKeys("q", "jobs"), b"j", attempts=1)
        ran = sweeperd("inspect", "-q", "q", "--json", env={"SWEEPERD_CONFIG": str(config)})
        assert (ran.code, ran.json()["active"]) == (0, 1)

    def test_removed_drain_budget(self, tmp_path: Path) -> None:
        """A config file still naming drain_budget is told it was removed and why."""
        config = tmp_path / "sweeperd.toml"
        config.write_text('queues = ["q"]\ndrain_budget = 10\n')
        line = one_line(sweeperd("run", "--config", str(config)), 2)
        assert "drain_budget was removed: a backlog is drained automatically" in line


class TestJsonErrors:
    def test_no_verb(self, r_plain: redis.Redis, plain_server: RedisServer) -> None:
        """`--executor native` without the module: --json prints an error object, exit 1."""
        ran = sweeperd(
            "once", "-q", "q", "--redis-url", plain_server.url, "--executor", "native", "--json"
        )
        line = one_line(ran, 1)
        assert ran.json() == {
            "queue": "q",
            "error": {"reason": "no_verb", "message": line.removeprefix("sweeperd: ")},
        }

    def test_bad_option(self) -> None:
        """A bad value with --json: an error object too."""
        ran = sweeperd("once", "-q", "q", "--limit", "0", "--json")
        one_line(ran, 2)
        assert ran.json()["error"]["reason"] == "usage"


class TestStdout:
    def test_full_disk(self, redis_server: RedisServer) -> None:
        """A result that cannot be written (> /dev/full) is one line and exit 1, no traceback."""
        with open("/dev/full", "w") as full:
            ran = sweeperd_process(
                "inspect", "-q", "q", "--redis-url", redis_server.url, stdout=full
            )
        line = one_line(ran, 1)
        assert "cannot be written to stdout: No space left on device" in line


class TestRunRefusesAtStart:
    @pytest.mark.parametrize(
        ("args", "named"),
        [
            (["--redis-url", "redis://127.0.0.1:1/0?socket_keepalive=x"], "--redis-url"),
            (["--socket-timeout", "1e12"], "--socket-timeout"),
            (["--interval", "1e12"], "--interval"),
            (["--call-target-ms", "0"], "--call-target-ms"),
            (["--drain-share", "0"], "--drain-share"),
        ],
    )
    def test_refused(self, args: list[str], named: str) -> None:
        """Settings that would crash every tick stop `run` at start: exit 2, one line."""
        ran = sweeperd("run", "-q", "q", "--metrics-addr", f"127.0.0.1:{free_port()}", *args)
        assert one_line(ran, 2).startswith(f"sweeperd: {named} ")


class TestRunReload:
    def test_bad_file_on_sighup(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """A config file broken before SIGHUP is logged as reload_failed; run goes on sweeping."""
        config = tmp_path / "sweeperd.toml"
        config.write_text('queues = ["q"]\n')
        args = ["--config", str(config), "--redis-url", redis_server.url, "--interval", "0.2"]
        with DaemonProcess(tmp_path, *args) as daemon:
            wait_until(
                lambda: daemon.value("sweeperd_last_success_timestamp_seconds", queue="q"),
                what="a sweep",
            )
            config.write_text('queues = ["q"]\nlimit = 0\n')
            assert daemon.process is not None
            daemon.process.send_signal(signal.SIGHUP)
            wait_until(lambda: daemon.events("reload_failed"), what="reload_failed")
            lease(r, Q, b"j", attempts=1)
            daemon.wait_value("sweeperd_dead_total", 1, queue="q")
            assert daemon.stop() == 0
