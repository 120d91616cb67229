"""The HTTP side's web config file: TLS and basic-auth users, as Prometheus exporters take it.

The file is YAML, in the shape of the exporter-toolkit's web config:

    tls_server_config:
      cert_file: /etc/sweeperd/web.crt
      key_file: /etc/sweeperd/web.key
      client_ca_file: /etc/sweeperd/clients-ca.crt   # optional: clients must show a cert
    basic_auth_users:
      prometheus: $2y$10$...                          # bcrypt hashes (htpasswd -nBC 10)

Either part may be left out; every path (/metrics, /healthz, /readyz, /) is behind both.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import socket
import ssl
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import bcrypt
import yaml

TLS_KEYS = ("cert_file", "key_file", "client_ca_file")
TOP_KEYS = ("tls_server_config", "basic_auth_users")
# A client that does not finish its TLS handshake is dropped.
HANDSHAKE_TIMEOUT_S = 10.0
REALM = 'Basic realm="sweeperd", charset="UTF-8"'


class BadWebConfig(ValueError):
    """A web config that cannot be used; the message says what is wrong in it."""


@dataclass(frozen=True)
class WebConfig:
    """TLS for the HTTP side (when cert_file is set) and the users allowed in (when any)."""

    path: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    # Name -> bcrypt hash; and (user, sha256 of a password bcrypt accepted): bcrypt is slow by
    # design, once is enough.
    users: Mapping[str, bytes] = field(default_factory=dict)
    _passed: set[tuple[str, bytes]] = field(default_factory=set, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def ssl_context(self) -> ssl.SSLContext | None:
        """Return the server side's TLS context, or None for plain HTTP."""
        if self.cert_file is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def allows(self, authorization: str | None) -> bool:
        """Tell whether an Authorization header lets the request in (always, without users)."""
        if not self.users:
            return True
        user, password = _basic(authorization)
        hashed = self.users.get(user) if user is not None else None
        if user is None or hashed is None or password is None:
            bcrypt.checkpw(b"timing", DUMMY_HASH)  # an unknown user costs what a known one does
            return False
        digest = hashlib.sha256(password).digest()
        with self._lock:
            if any(u == user and hmac.compare_digest(d, digest) for u, d in self._passed):
                return True
        if not bcrypt.checkpw(password, hashed):
            return False
        with self._lock:
            self._passed.add((user, digest))
        return True

    def guard(self, app: WSGIApplication) -> WSGIApplication:
        """`app` behind basic auth: 401 with a challenge unless the request's user may in."""
        if not self.users:
            return app

        def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            if self.allows(environ.get("HTTP_AUTHORIZATION")):
                return app(environ, start_response)
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", REALM)],
            )
            return [b"unauthorized: basic auth required (see the web config)\n"]

        return guarded

    def server_class(self, base: type[Any]) -> type[Any]:
        """`base` (a socketserver TCP server) with TLS on each accepted connection.

        The handshake runs in the request's own thread, so a slow client never holds up the
        accept loop; a failed handshake is that connection's end, nothing else."""
        made = self.ssl_context()
        if made is None:
            return base
        context: ssl.SSLContext = made

        class _TlsServer(base):  # type: ignore[misc]
            def finish_request(self, request: socket.socket, client_address: Any) -> None:
                request.settimeout(HANDSHAKE_TIMEOUT_S)
                try:
                    secured = context.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    return
                try:
                    super().finish_request(secured, client_address)
                finally:
                    secured.close()

        return _TlsServer


DUMMY_HASH = bcrypt.hashpw(b"timing", bcrypt.gensalt(4))


def _basic(authorization: str | None) -> tuple[str | None, bytes | None]:
    """Return the user and password of a Basic Authorization header, or (None, None)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None, None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None, None
    return user.decode("utf-8", "replace"), password


def _file(table: Mapping[str, Any], key: str, base: Path) -> Path | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BadWebConfig(f"tls_server_config.{key} must be a file path, not {value!r}")
    path = Path(value)
    return path if path.is_absolute() else base / path


def _tls(table: object, base: Path) -> dict[str, Path | None]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise BadWebConfig("tls_server_config must be a mapping (cert_file, key_file, ...)")
    unknown = sorted(set(table) - set(TLS_KEYS))
    if unknown:
        raise BadWebConfig(
            f"unknown key tls_server_config.{unknown[0]} (known: {', '.join(TLS_KEYS)})"
        )
    files = {key: _file(table, key, base) for key in TLS_KEYS}
    if (files["cert_file"] is None) != (files["key_file"] is None):
        raise BadWebConfig("tls_server_config needs both cert_file and key_file")
    if files["client_ca_file"] is not None and files["cert_file"] is None:
        raise BadWebConfig("tls_server_config.client_ca_file needs cert_file and key_file")
    return files


def _users(table: object) -> dict[str, bytes]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise BadWebConfig("basic_auth_users must map user names to bcrypt hashes")
    users: dict[str, bytes] = {}
    for user, hashed in table.items():
        if not (isinstance(user, str) and user and ":" not in user):
            raise BadWebConfig(f"basic_auth_users: {user!r} is not a user name (no ':')")
        text = hashed.encode() if isinstance(hashed, str) else b""
        if not (text[:4] in (b"$2a$", b"$2b$", b"$2y$") and len(text) == 60):
            raise BadWebConfig(
                f"basic_auth_users.{user} must be a bcrypt hash ($2y$..., as htpasswd -nBC 10 "
                "makes), never a plain password"
            )
        users[user] = text
    return users


def load_web_config(path: Path) -> WebConfig:
    """Return the web config in `path`, checked: readable YAML, known keys, usable TLS files,
    hashes."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise BadWebConfig(f"cannot read {path}: {why}") from None
    except yaml.YAMLError as exc:
        raise BadWebConfig(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise BadWebConfig(f"{path} must be a mapping ({', '.join(TOP_KEYS)})")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise BadWebConfig(f"unknown key {unknown[0]!r} in {path} (known: {', '.join(TOP_KEYS)})")
    files = _tls(data.get("tls_server_config"), path.parent)
    config = WebConfig(
        path,
        cert_file=files.get("cert_file"),
        key_file=files.get("key_file"),
        client_ca_file=files.get("client_ca_file"),
        users=_users(data.get("basic_auth_users")),
    )
    try:
        config.ssl_context()
    except (OSError, ssl.SSLError) as exc:
        raise BadWebConfig(f"tls_server_config in {path}: {exc}") from None
    return config
