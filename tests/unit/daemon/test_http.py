"""The HTTP server: real requests to /metrics, /healthz, /readyz, / and the rest; bind and close."""

from __future__ import annotations

import gzip
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from sweeperd import __version__
from sweeperd.daemon.http import MetricsServer, serve


class Flags:
    """Switchable health and readiness for a test."""

    def __init__(self) -> None:
        self.healthy = True
        self.ready = True
        self.status = "sweeping 2 queues <ok>"


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("demo_things", "Things.", registry=registry).inc(3)
    return registry


@pytest.fixture
def flags() -> Flags:
    return Flags()


@pytest.fixture
def server(registry: CollectorRegistry, flags: Flags) -> Iterator[MetricsServer]:
    running = serve(
        "127.0.0.1",
        0,
        registry,
        healthy=lambda: flags.healthy,
        ready=lambda: flags.ready,
        landing=lambda: flags.status,
    )
    yield running
    running.close()


def get(
    server: MetricsServer, path: str, headers: dict[str, str] | None = None, host: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    url = f"http://{host}:{server.port}{path}"
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class TestRoutes:
    def test_metrics(self, server: MetricsServer) -> None:
        """/metrics serves the registry in the text format."""
        status, headers, body = get(server, "/metrics")
        assert status == 200
        assert headers["Content-Type"].startswith("text/plain; version=")
        assert b"demo_things_total 3.0" in body

    def test_metrics_gzip(self, server: MetricsServer) -> None:
        """/metrics is gzipped when the client asks (the library's content negotiation)."""
        status, headers, body = get(server, "/metrics", {"Accept-Encoding": "gzip"})
        assert status == 200
        assert headers["Content-Encoding"] == "gzip"
        assert b"demo_things_total 3.0" in gzip.decompress(body)

    def test_metrics_openmetrics(self, server: MetricsServer) -> None:
        """/metrics speaks OpenMetrics when asked."""
        accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
        status, headers, body = get(server, "/metrics", accept)
        assert status == 200
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")

    def test_healthz(self, server: MetricsServer, flags: Flags) -> None:
        """/healthz is 200 ok while healthy, 503 otherwise."""
        assert get(server, "/healthz")[::2] == (200, b"ok\n")
        flags.healthy = False
        status, _, body = get(server, "/healthz")
        assert status == 503
        assert body.startswith(b"unhealthy")

    def test_readyz(self, server: MetricsServer, flags: Flags) -> None:
        """/readyz is 200 while ready, 503 with a short reason otherwise."""
        assert get(server, "/readyz")[::2] == (200, b"ok\n")
        flags.ready = False
        assert get(server, "/readyz")[::2] == (503, b"not ready\n")

    def test_landing(self, server: MetricsServer) -> None:
        """/ is an HTML page with links, the version and the escaped status text."""
        status, headers, body = get(server, "/")
        page = body.decode()
        assert status == 200
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert f"sweeperd {__version__}" in page
        for link in ("metrics", "healthz", "readyz"):
            assert f'href="{link}"' in page
        assert "sweeping 2 queues &lt;ok&gt;" in page

    def test_not_found(self, server: MetricsServer) -> None:
        """Any other path is 404."""
        assert get(server, "/nope")[0] == 404
        assert get(server, "/metrics/extra")[0] == 404

    def test_failing_check_is_503(self, registry: CollectorRegistry) -> None:
        """A check that raises answers 503, and the server keeps serving."""

        def broken() -> bool:
            raise RuntimeError("boom")

        running = serve("127.0.0.1", 0, registry, healthy=broken, ready=broken)
        try:
            assert get(running, "/healthz")[0] == 503
            assert get(running, "/readyz")[0] == 503
            assert get(running, "/metrics")[0] == 200
            assert get(running, "/")[0] == 200
        finally:
            running.close()

    def test_quiet(self, server: MetricsServer, capfd: pytest.CaptureFixture[str]) -> None:
        """Requests write nothing to stderr."""
        get(server, "/metrics")
        get(server, "/nope")
        assert capfd.readouterr().err == ""


class Rendered:
    """An exposition callable that records the Accept headers it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    def __call__(self, accept: str | None) -> tuple[bytes, str]:
        self.asked.append(accept)
        return b"rendered_things 7\n", "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture
def rendered(registry: CollectorRegistry) -> Iterator[tuple[MetricsServer, Rendered]]:
    exposition = Rendered()
    running = serve("127.0.0.1", 0, registry, healthy=always, ready=always, exposition=exposition)
    yield running, exposition
    running.close()


class TestExposition:
    def test_a_scrape_is_the_exposition(self, rendered: tuple[MetricsServer, Rendered]) -> None:
        """A GET of /metrics is the exposition's body and type, asked with the Accept header."""
        server, exposition = rendered
        status, headers, body = get(server, "/metrics", {"Accept": "text/plain"})
        assert (status, body) == (200, b"rendered_things 7\n")
        assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert exposition.asked == ["text/plain"]

    def test_gzip(self, rendered: tuple[MetricsServer, Rendered]) -> None:
        """The exposition is gzipped when the client asks."""
        server, _ = rendered
        status, headers, body = get(server, "/metrics", {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(body) == b"rendered_things 7\n"

    def test_a_selection_is_the_library_s(self, rendered: tuple[MetricsServer, Rendered]) -> None:
        """/metrics?name[]=... is answered by prometheus_client from the registry."""
        server, exposition = rendered
        status, _, body = get(server, "/metrics?name[]=demo_things_total")
        assert status == 200 and b"demo_things_total 3.0" in body
        assert exposition.asked == []


def always() -> bool:
    return True


def start(host: str, port: int = 0, check: Callable[[], bool] = always) -> MetricsServer:
    return serve(host, port, CollectorRegistry(), healthy=check, ready=check)


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


class TestBinding:
    def test_port_zero(self) -> None:
        """Port 0 binds a free port and reports it."""
        running = start("127.0.0.1")
        try:
            assert running.port > 0
            assert running.host == "127.0.0.1"
        finally:
            running.close()

    def test_port_in_use(self, server: MetricsServer) -> None:
        """A taken port is an OSError that says where it tried to listen."""
        with pytest.raises(OSError, match=rf"cannot listen on 127\.0\.0\.1:{server.port}: "):
            start("127.0.0.1", server.port)

    def test_unknown_host(self) -> None:
        """A host that does not resolve is an OSError naming it."""
        with pytest.raises(OSError, match=r"cannot listen on no\.such\.host\.invalid:0: "):
            start("no.such.host.invalid")

    @pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback on this host")
    def test_ipv6(self) -> None:
        """An IPv6 host is served."""
        running = start("::1")
        try:
            assert get(running, "/healthz", host="[::1]")[0] == 200
        finally:
            running.close()

    def test_every_interface(self) -> None:
        """The empty host listens on every interface, reachable over IPv4 loopback."""
        running = start("")
        try:
            assert get(running, "/healthz")[0] == 200
            if has_ipv6_loopback() and socket.has_dualstack_ipv6():
                assert get(running, "/healthz", host="[::1]")[0] == 200
        finally:
            running.close()


class TestClose:
    def test_close_stops_serving(self) -> None:
        """After close() the port refuses connections, and close() returns quickly."""
        running = start("127.0.0.1")
        port = running.port
        begun = time.monotonic()
        running.close(timeout=5.0)
        assert time.monotonic() - begun < 2.0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()

    def test_close_with_idle_client(self) -> None:
        """A client that connected and sent nothing does not hold close() up."""
        running = start("127.0.0.1")
        idle = socket.create_connection(("127.0.0.1", running.port), timeout=5)
        try:
            time.sleep(0.1)
            begun = time.monotonic()
            running.close(timeout=2.0)
            assert time.monotonic() - begun < 2.5
        finally:
            idle.close()

    def test_close_twice(self) -> None:
        """A second close() is harmless."""
        running = start("127.0.0.1")
        running.close()
        running.close()
