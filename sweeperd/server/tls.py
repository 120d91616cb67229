"""The TLS files of a rediss:// connection: checked once, then handed to redis-py."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import redis

from sweeperd.server.urls import BadConnection

# A TLS port's answer to a plain connection.
DROPPED = ("reset by peer", "closed by server")
NOT_TLS = (
    "the server may not speak TLS (a plain port leaves a TLS handshake unanswered): use "
    "redis:// if it has no TLS port"
)
TLS_ONLY = "the server may speak TLS only (it drops a plain connection): use rediss://"

# The settings, in TlsFiles' order.
TLS_KEYS = ("redis_ca_file", "redis_cert_file", "redis_key_file")


class BadTlsFile(BadConnection):
    """A TLS file that cannot be used; `key` is its setting (redis_ca_file, ...)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class TlsFiles:
    """The CA bundle that vouches for the server, and the client's own certificate and key."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __bool__(self) -> bool:
        return any((self.ca_file, self.cert_file, self.key_file))

    def checked(self, scheme: str) -> TlsFiles:
        """Return each file readable and what it claims to be, the key matching the certificate."""
        if not self:
            return self
        if scheme != "rediss":
            given = next(k for k, v in self.by_key().items() if v)
            raise BadTlsFile(given, "is for rediss:// URLs only (TLS); the URL is not one")
        if self.key_file and not self.cert_file:
            raise BadTlsFile("redis_key_file", "needs its certificate (the cert file) as well")
        context = ssl.create_default_context()
        try:
            if self.ca_file:
                context.load_verify_locations(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise BadTlsFile("redis_ca_file", _tls_problem(self.ca_file, exc)) from None
        for key, path in (("redis_cert_file", self.cert_file), ("redis_key_file", self.key_file)):
            # Which of the two cannot be read, before they are paired.
            _readable(key, path)
        try:
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            pair = f"{self.cert_file} with {self.key_file}" if self.key_file else self.cert_file
            raise BadTlsFile("redis_cert_file", _tls_problem(pair, exc)) from None
        return self

    def by_key(self) -> dict[str, str | None]:
        """Return each file by the setting that names it."""
        return dict(zip(TLS_KEYS, (self.ca_file, self.cert_file, self.key_file), strict=True))

    def client_options(self) -> dict[str, object]:
        """Return redis-py's SSLConnection options; the hostname is checked unless the URL says
        not."""
        options: dict[str, object] = {"ssl_check_hostname": True}
        if self.ca_file:
            options["ssl_ca_certs"] = self.ca_file
        if self.cert_file:
            options["ssl_certfile"] = self.cert_file
        if self.key_file:
            options["ssl_keyfile"] = self.key_file
        return options


# Plain TCP, or rediss:// with the system's CA bundle.
NO_TLS = TlsFiles()


def _readable(key: str, path: str | None) -> None:
    """Check that the file named by setting `key` can be opened for reading (or none is named)."""
    if path is None:
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise BadTlsFile(key, _tls_problem(path, exc)) from None


def _tls_problem(path: str | None, exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"{path} is not a usable PEM file for TLS ({exc.reason or exc})"
    return f"cannot read {path}: {exc.strerror or exc}"


def mismatch(scheme: str, exc: BaseException) -> str:
    """Return what a failure to connect may mean when the URL and the server disagree on TLS: a
    rediss:// handshake left unanswered, a redis:// connection dropped; "" otherwise."""
    text = str(exc)
    if scheme == "rediss" and isinstance(exc, redis.TimeoutError) and "connecting" in text:
        return NOT_TLS
    if scheme == "redis" and isinstance(exc, redis.ConnectionError):
        return TLS_ONLY if any(t in text for t in DROPPED) else ""
    return ""
