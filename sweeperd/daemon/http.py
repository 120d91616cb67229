"""The HTTP side: /metrics, /healthz, /readyz and a landing page, on a threaded WSGI server."""

from __future__ import annotations

import gzip
import html
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import gzip_accepted

from sweeperd import __version__
from sweeperd.config.webconfig import WebConfig

log = structlog.get_logger("sweeperd.http")

# The serving loop looks for a shutdown request every POLL_S (a stop waits that long at most; a
# look is a wake, 0.15 % of a core at 10 a second on a 2-core VM); a client that sends nothing for
# REQUEST_TIMEOUT_S is dropped. GZIP_LEVEL 1 compresses 10,000 queues in 5 ms to 166 KiB; level
# 9 (the library's) took 38 ms for 154 KiB.
POLL_S = 0.5
REQUEST_TIMEOUT_S = 10.0
GZIP_LEVEL = 1
# A scrape's body and content type for its Accept header (see metrics.Metrics.exposition).
Exposition = Callable[[str | None], tuple[bytes, str]]
# Copied into a fresh list per response: wsgiref adds to it.
TEXT = ("Content-Type", "text/plain; charset=utf-8")
LANDING = """<!doctype html>
<html><head><meta charset="utf-8"><title>sweeperd</title></head>
<body><h1>sweeperd {version}</h1>
<p>The stalled-job sweeper for EchoMQ queues.</p>
<ul><li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li>
<li><a href="readyz">/readyz</a></li></ul>
{status}</body></html>
"""


class CannotListen(OSError):
    """The HTTP side cannot bind its address (taken, or not this host's); says which."""


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """The WSGI server, a thread per request; a slow client never holds up the shutdown."""

    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks DNS for the host's FQDN, which can stall; skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.socket.getsockname()[:2]
        self.server_name, self.server_port = host, port
        self.setup_environ()


class _Server6(_Server):
    address_family = socket.AF_INET6


class _DualStack(_Server6):
    """Every interface, IPv4 and IPv6 alike, on one socket."""

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Write no line on stderr per request."""


class MetricsServer:
    """A running server; close() stops it."""

    def __init__(self, server: _Server, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The port actually bound (port 0 picks a free one)."""
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving and wait at most `timeout` seconds for the serving thread."""
        threading.Thread(target=self._server.shutdown, daemon=True).start()
        self._thread.join(timeout)
        self._server.server_close()
        if self._thread.is_alive():
            log.warning("http_close_timeout", waited_s=timeout)


def _checked(check: Callable[[], bool], name: str) -> bool:
    try:
        return bool(check())
    except Exception:
        log.exception("http_check_failed", check=name)
        return False


def _said(waiting: Callable[[], str]) -> str:
    """Say what readiness waits for; nothing when saying it fails (logged)."""
    try:
        return waiting()
    except Exception:
        log.exception("http_check_failed", check="waiting")
        return ""


def _plain(start_response: StartResponse, ok: bool, text: str) -> list[bytes]:
    start_response("200 OK" if ok else "503 Service Unavailable", [TEXT])
    return [text.encode() + b"\n"]


def _metrics_app(registry: CollectorRegistry, exposition: Exposition | None) -> WSGIApplication:
    """Serve /metrics: a plain GET is rendered by `exposition`; the rest (OPTIONS, other methods,
    ?name[]= selections) by prometheus_client's own app on the registry."""
    generic: WSGIApplication = make_wsgi_app(registry)
    if exposition is None:
        return generic

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] != "GET" or "name[]" in parse_qs(
            environ.get("QUERY_STRING", "")
        ):
            return generic(environ, start_response)
        body, content_type = exposition(environ.get("HTTP_ACCEPT"))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body, compresslevel=GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app


def _app(
    registry: CollectorRegistry,
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
    landing: Callable[[], str] | None,
    exposition: Exposition | None = None,
    waiting: Callable[[], str] | None = None,
) -> WSGIApplication:
    metrics = _metrics_app(registry, exposition)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            ok = _checked(healthy, "healthy")
            return _plain(start_response, ok, "ok" if ok else "unhealthy: the scheduler is stuck")
        if path == "/readyz":
            ok = _checked(ready, "ready")
            why = "" if ok or waiting is None else _said(waiting)
            return _plain(start_response, ok, "ok" if ok else f"not ready: {why}".rstrip(": "))
        if path == "/":
            status = html.escape(landing()) if landing is not None else ""
            page = LANDING.format(
                version=html.escape(__version__), status=f"<pre>{status}</pre>\n" if status else ""
            )
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [page.encode()]
        start_response("404 Not Found", [TEXT])
        return [b"not found: try /metrics, /healthz, /readyz\n"]

    return app


def _bindable(host: str) -> tuple[type[_Server], str]:
    """Return the server class and address for `host`: "" is every interface, IPv6 too if it can."""
    if host == "":
        return (_DualStack, "::") if socket.has_dualstack_ipv6() else (_Server, "0.0.0.0")
    family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    return (_Server6 if family == socket.AF_INET6 else _Server), host


def serve(
    host: str,
    port: int,
    registry: CollectorRegistry,
    *,
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
    landing: Callable[[], str] | None = None,
    web: WebConfig | None = None,
    exposition: Exposition | None = None,
    waiting: Callable[[], str] | None = None,
) -> MetricsServer:
    """Serve /metrics, /healthz, /readyz and / on host:port from a daemon thread; `web` adds
    TLS and basic auth; /metrics from `exposition` when given (see Metrics.exposition), else
    from the registry; /readyz says what `waiting` says while not ready."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host or '*'}:{port}"
    try:
        server_class, address = _bindable(host)
        if web is not None:
            server_class = web.server_class(server_class)
        server = server_class((address, port), _QuietHandler)
    except OSError as exc:
        raise CannotListen(exc.errno, f"cannot listen on {shown}: {exc.strerror or exc}") from exc
    app = _app(registry, healthy, ready, landing, exposition, waiting)
    server.set_app(web.guard(app) if web is not None else app)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_S}, name="sweeperd-http"
    )
    thread.daemon = True
    thread.start()
    return MetricsServer(server, thread)
