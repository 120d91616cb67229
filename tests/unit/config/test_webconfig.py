"""The HTTP side's web config: TLS and basic auth, checked at start, served, and scraped by a
real Prometheus."""

from __future__ import annotations

import base64
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml
from prometheus_client import CollectorRegistry

from sweeperd.config.webconfig import BadWebConfig, load_web_config
from sweeperd.daemon.http import MetricsServer, serve
from sweeperd.keyspace import QueueKeys
from tests.support.certs import Pki
from tests.support.helpers import PAST_MS, lease
from tests.support.invoke import sweeperd
from tests.support.prometheus_server import Process, Stack, prometheus_binary
from tests.support.servers import PROMETHEUS_ONLY, RedisServer, free_port

USER, PASSWORD = "prometheus", "scrape-pw-5521"


def write_config(where: Path, pki: Pki | None, users: dict[str, str] | None) -> Path:
    """A web config with TLS from `pki` (when given) and bcrypt hashes of `users`' passwords."""
    document: dict[str, object] = {}
    if pki is not None:
        document["tls_server_config"] = {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
        }
    if users:
        document["basic_auth_users"] = {
            name: bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
            for name, password in users.items()
        }
    path = where / "web.yml"
    path.write_text(yaml.safe_dump(document))
    return path


def get(url: str, pki: Pki | None, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    """The status and body of a GET, over TLS trusting `pki`'s CA when given."""
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(pki.ca)) if pki is not None else None
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served(pki: Pki, tmp_path: Path) -> Iterator[MetricsServer]:
    """The HTTP side behind TLS and one basic-auth user."""
    web = load_web_config(write_config(tmp_path, pki, {USER: PASSWORD}))
    server = serve(
        "127.0.0.1", 0, CollectorRegistry(), healthy=lambda: True, ready=lambda: True, web=web
    )
    yield server
    server.close()


class TestLoad:
    def test_refusals_say_what_is_wrong(self, pki: Pki, tmp_path: Path) -> None:
        """A plain password, an unknown key, a cert without its key, a missing file: refused,
        each naming the problem."""
        cases = {
            "basic_auth_users:\n  u: plain-password\n": "must be a bcrypt hash",
            "basic_auth: {}\n": "unknown key 'basic_auth'",
            f"tls_server_config:\n  cert_file: {pki.server_cert}\n": "both cert_file and key_file",
            "tls_server_config:\n  cert_file: /nope.crt\n  key_file: /nope.key\n": "No such file",
            "tls_server_config:\n  certfile: x\n": "unknown key tls_server_config.certfile",
            "- a list\n": "must be a mapping",
        }
        for text, named in cases.items():
            path = tmp_path / "web.yml"
            path.write_text(text)
            with pytest.raises(BadWebConfig, match=named):
                load_web_config(path)

    def test_an_empty_file_changes_nothing(self, tmp_path: Path) -> None:
        """An empty web config: plain HTTP, no users."""
        path = tmp_path / "web.yml"
        path.write_text("")
        web = load_web_config(path)
        assert web.ssl_context() is None and web.allows(None)


class TestServed:
    def test_tls_and_basic_auth_guard_every_path(self, served: MetricsServer, pki: Pki) -> None:
        """Over TLS, every path answers 401 without the right user and password, 200 with."""
        base = f"https://localhost:{served.port}"
        for path in ("/metrics", "/healthz", "/readyz", "/"):
            assert get(base + path, pki)[0] == 401
            assert get(base + path, pki, (USER, "wrong"))[0] == 401
            assert get(base + path, pki, ("nobody", PASSWORD))[0] == 401
            assert get(base + path, pki, (USER, PASSWORD))[0] == 200

    def test_plain_http_and_a_bad_handshake_do_not_stop_the_server(
        self, served: MetricsServer, pki: Pki
    ) -> None:
        """A plain-HTTP request to the TLS port fails alone; the next TLS request is served."""
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{served.port}/healthz", timeout=5)
        assert get(f"https://localhost:{served.port}/healthz", pki, (USER, PASSWORD))[0] == 200


class TestDaemonSettings:
    def test_a_bad_web_config_exits_2(self, tmp_path: Path) -> None:
        """run with a web config holding a plain password: exit 2, one line naming the option."""
        path = tmp_path / "web.yml"
        path.write_text("basic_auth_users:\n  u: hunter2\n")
        ran = sweeperd("run", "--queue", "q", "--web-config-file", str(path))
        assert ran.code == 2
        [line] = ran.err_lines
        assert "--web-config-file (SWEEPERD_WEB_CONFIG_FILE)" in line
        assert "hunter2" not in line


def prometheus_config(port: int, pki: Pki, password_file: Path) -> str:
    scrape = {
        "job_name": "sweeperd",
        "scheme": "https",
        "tls_config": {"ca_file": str(pki.ca), "server_name": "localhost"},
        "basic_auth": {"username": USER, "password_file": str(password_file)},
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }
    every_second = {"scrape_interval": "1s", "scrape_timeout": "1s"}
    return yaml.safe_dump({"global": every_second, "scrape_configs": [scrape]})


@pytest.mark.only_on("redis", reason=PROMETHEUS_ONLY)
class TestPrometheusOverTls:
    def test_prometheus_scrapes_over_tls_with_basic_auth(
        self, redis_server: RedisServer, pki: Pki, tmp_path: Path
    ) -> None:
        """A real Prometheus scrapes the daemon over TLS with basic auth and reads a counter."""
        queue = QueueKeys("web-e2e")
        with redis_server.client() as client:
            client.delete(queue.active, queue.pending)
            lease(client, queue, b"w1", PAST_MS, state="active", attempts=1)
        web_config = write_config(tmp_path, pki, {USER: PASSWORD})
        password_file = tmp_path / "scrape-password"
        password_file.write_text(PASSWORD)
        metrics_port, prometheus_port = free_port(), free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(prometheus_config(metrics_port, pki, password_file))
        daemon = [
            sys.executable,
            "-m",
            "sweeperd",
            "run",
            "--redis-url",
            redis_server.url,
            "--queue",
            queue.queue,
            "--max-stalled",
            "3",
            "--interval",
            "1",
            "--log-format",
            "json",
            "--metrics-addr",
            f"127.0.0.1:{metrics_port}",
            "--web-config-file",
            str(web_config),
        ]
        prometheus = [
            prometheus_binary(),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ]
        processes: list[Process] = []
        try:
            processes.append(Process.start("sweeperd", daemon, tmp_path / "sweeperd.log"))
            processes.append(Process.start("prometheus", prometheus, tmp_path / "prom.log"))
            stack = Stack(f"http://127.0.0.1:{prometheus_port}", queue.queue, "", processes)
            up = stack.wait_for("the target up", lambda: stack.value('up{job="sweeperd"}') or None)
            assert up == 1
            recovered = f'sweeperd_recovered_total{{queue="{queue.queue}"}}'
            assert stack.wait_for("recovered", lambda: stack.value(recovered) or None) == 1
            assert get(f"https://localhost:{metrics_port}/metrics", pki)[0] == 401
        finally:
            for process in reversed(processes):
                process.stop()
