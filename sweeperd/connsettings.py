"""The connection settings: URL, password files, systemd's credential, TLS files, topology."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sweeperd import coercers
from sweeperd.coercers import ConfigError, Given, shown, why_unreadable
from sweeperd.connection import Connection, Topology
from sweeperd.logs import redact_text
from sweeperd.options import OPTIONS
from sweeperd.tls import BadTlsFile, TlsFiles
from sweeperd.urls import BadConnection

CREDENTIAL_NAME = "redis-password"  # systemd LoadCredential= name
TLS_FIX = "see README.md, Security"


def connection_of(given: Mapping[str, Given]) -> Connection:
    """The connection settings, checked together before anything is sent."""
    url_given = given["redis_url"]
    url = coercers.string(url_given)
    timeout = coercers.timeout_seconds(given["socket_timeout"])
    password = _password(given["redis_password_file"])
    tls = _tls_files(given)
    topology = _topology(given)
    try:
        topology.check(url.strip())
    except BadConnection as exc:
        raise ConfigError(str(exc)) from None
    try:
        return Connection.checked(url, password, timeout, tls, topology)
    except BadTlsFile as exc:
        where = given[exc.key].where
        raise ConfigError(f"{where} {exc}; {TLS_FIX}") from None
    except BadConnection as exc:
        problem = redact_text(str(exc))
        raise ConfigError(f"{url_given.where}: {problem}, in {shown(url)}") from None


def _password(given: Given) -> str | None:
    """The password from the given file, else systemd's credential, else none."""
    path = coercers.file_path(given)
    if path is None:
        path = credential_path()
        if path is None or not path.exists():
            return None
        fix = f"fix the unit's LoadCredential= or set {OPTIONS['redis_password_file'].where}"
    else:
        fix = f"check {given.where}"
    return _secret(path, "Redis", fix)


def _sentinel_password(given: Given) -> str | None:
    path = coercers.file_path(given)
    return None if path is None else _secret(path, "Sentinel", f"check {given.where}")


def _secret(path: Path, whose: str, fix: str) -> str:
    """A password file's content, its line end stripped; a file that cannot be read or is
    empty is one line naming the file and `fix`."""
    try:
        password = path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the {whose} password file {path}: {why_unreadable(exc)}; {fix}"
        ) from None
    if not password:
        raise ConfigError(f"the password file {path} is empty; write the password in it, or {fix}")
    return password


def _topology(given: Mapping[str, Given]) -> Topology:
    master = given["sentinel_master"]
    return Topology(
        cluster=coercers.switch(given["cluster"]),
        sentinels=coercers.sentinels(given["sentinels"]),
        sentinel_master=None if master.value is None else coercers.string(master).strip() or None,
        sentinel_password=_sentinel_password(given["sentinel_password_file"]),
    )


def _tls_files(given: Mapping[str, Given]) -> TlsFiles:
    """The TLS files given, by their paths."""
    paths: dict[str, str | None] = {}
    for key in ("redis_ca_file", "redis_cert_file", "redis_key_file"):
        path = coercers.file_path(given[key])
        paths[key] = None if path is None else str(path)
    return TlsFiles(paths["redis_ca_file"], paths["redis_cert_file"], paths["redis_key_file"])


def credential_path() -> Path | None:
    """systemd's credential file for the password, when the unit passed one."""
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    return Path(credentials) / CREDENTIAL_NAME if credentials else None
