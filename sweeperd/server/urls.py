"""Redis URL strings: checked part by part, redacted for logs, named, pointed at another node."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from sweeperd.constants import BOOLEAN_WORDS
from sweeperd.server.calls import url_parts

URL_SCHEMES = ("redis", "rediss", "unix")
# The most `databases` a server may be configured with.
MAX_DB = 2**31 - 1
SSL_CERT_REQS = ("none", "optional", "required")
URL_QUERY_KEYS = ("db", "username", "password", "ssl_cert_reqs", "ssl_check_hostname")


class BadConnection(ValueError):
    """A connection setting that cannot be used; the message names the part that is wrong."""


def url_at(url: str, host: str, port: int) -> str:
    """Return the same URL (credentials, db, query) pointed at another host and port."""
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    user, at, _hostport = netloc.rpartition("@")
    shown_host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{user}{at}{shown_host}:{port}{slash}{path}"


def seed_of(first: str, other: str) -> tuple[str, int]:
    """Return the host and port of another seed of the Cluster `first` names: checked, and refused
    unless it differs from `first` in its host and port alone (one user, one TLS, one db)."""
    other = check_url(other)
    if other.startswith("unix://"):
        raise BadConnection("a Cluster's seeds are redis:// or rediss:// URLs, not unix://")
    a, b = urlsplit(first), urlsplit(other)
    if (a.scheme, a.username, a.password, a.path or "/", a.query) != (
        b.scheme,
        b.username,
        b.password,
        b.path or "/",
        b.query,
    ):
        raise BadConnection(
            f"the seeds differ in more than their host and port ({node_name(other)}): give every "
            "seed the first one's scheme, user, password, db and options"
        )
    return (b.hostname or "localhost", b.port or 6379)


def name_at(address: tuple[str, int]) -> str:
    """Return a node's name, host:port (an IPv6 host in brackets)."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def node_name(url: str) -> str:
    """Return the `node` label of a server: host:port, or the socket path."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def _port(netloc: str) -> None:
    hostport = netloc.rsplit("@", 1)[-1]
    if hostport.startswith("["):
        port = hostport.partition("]")[2].removeprefix(":") if "]:" in hostport else None
    else:
        port = hostport.rpartition(":")[2] if ":" in hostport else None
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise BadConnection(f"the port must be a number from 1 to 65535, not {port!r}")


def _db(text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) <= MAX_DB):
        raise BadConnection(f"the db ({what}) must be a number from 0 to {MAX_DB}, not {text!r}")
    return int(text)


def _query(scheme: str, query: str) -> dict[str, str]:
    pairs = parse_qsl(query, keep_blank_values=True)
    given: dict[str, str] = {}
    for key, value in pairs:
        if key not in URL_QUERY_KEYS:
            raise BadConnection(
                f"unknown query key {key!r} (sweeperd takes {', '.join(URL_QUERY_KEYS)})"
            )
        if key in given:
            raise BadConnection(f"the query key {key!r} is given twice")
        given[key] = value
    if "db" in given:
        _db(given["db"], "?db=")
    ssl_keys = [k for k in given if k.startswith("ssl_")]
    if ssl_keys and scheme != "rediss":
        raise BadConnection(f"{ssl_keys[0]} is for rediss:// URLs only")
    if given.get("ssl_cert_reqs", "required") not in SSL_CERT_REQS:
        raise BadConnection(
            f"ssl_cert_reqs must be one of {', '.join(SSL_CERT_REQS)}, "
            f"not {given['ssl_cert_reqs']!r}"
        )
    if given.get("ssl_check_hostname", "true").lower() not in BOOLEAN_WORDS:
        raise BadConnection(
            f"ssl_check_hostname must be true or false, not {given['ssl_check_hostname']!r}"
        )
    return given


def check_url(url: str) -> str:
    """Return the URL, stripped, once every part of it is one redis-py will use as written."""
    url = url.strip()
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in URL_SCHEMES:
        raise BadConnection("the scheme must be redis://, rediss:// or unix://")
    try:
        parts = urlsplit(url)
    except ValueError:
        # An unclosed or malformed [IPv6] host.
        raise BadConnection("the host is not a name, an IPv4 address or an [IPv6] one") from None
    if parts.fragment:
        raise BadConnection("a URL fragment (#...) means nothing here")
    query = _query(scheme, parts.query)
    if scheme == "unix":
        if not parts.path:
            raise BadConnection("a unix:// URL needs the socket's path (unix:///run/redis.sock)")
        return url
    _port(parts.netloc)
    if parts.path not in ("", "/"):
        _db(parts.path.removeprefix("/"), "the path after the host")
        if "db" in query:
            raise BadConnection("the db is given twice, in the path and as ?db=")
    try:
        url_parts(url)
    except ValueError as exc:
        raise BadConnection(str(exc).rstrip(".")) from None
    return url
