"""Clients to a Redis/Valkey node: bounded timeouts, raw replies, credentials kept out of logs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

PASSWORD_FILE_ENV = "SWEEPERD_REDIS_PASSWORD_FILE"
CREDENTIAL_NAME = "redis-password"  # systemd LoadCredential= name


def _raw(response: Any, **_options: Any) -> Any:
    return response


def connect(url: str, *, socket_timeout: float, password: str | None = None) -> redis.Redis:
    """A client whose replies are bytes and whose INFO and COMMAND replies are left unparsed."""
    client = redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        decode_responses=False,
        **({"password": password} if password is not None else {}),
    )
    # redis-py turns an all-digit run_id into an int and fails on COMMAND INFO of an
    # unknown verb; sweeperd parses both itself.
    client.set_response_callback("INFO", _raw)
    client.set_response_callback("COMMAND INFO", _raw)
    client.set_response_callback("COMMAND", _raw)
    return client


def read_password(password_file: str | None) -> str | None:
    """The password from a file: the given one, else systemd's credential, else none."""
    if password_file:
        return Path(password_file).read_text().rstrip("\r\n")
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if credentials and (Path(credentials) / CREDENTIAL_NAME).is_file():
        return (Path(credentials) / CREDENTIAL_NAME).read_text().rstrip("\r\n")
    return None


def redact(url: str) -> str:
    """The URL with any user and password removed, fit for logs and labels."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if not sep or "@" not in netloc:
        return url
    return f"{scheme}://{netloc.rsplit('@', 1)[1]}{slash}{path}"


def node_name(url: str) -> str:
    """The `node` label of a server: host:port, or the socket path."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
