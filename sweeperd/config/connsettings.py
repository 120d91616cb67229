"""The connection settings: URL, password files, systemd's credential, TLS files, topology."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sweeperd.config.coercers import ConfigError, shown, why_unreadable
from sweeperd.config.options import OPTIONS
from sweeperd.logs import redact_text
from sweeperd.server.connection import Connection, Topology, TopologyRefused
from sweeperd.server.tls import TLS_KEYS, BadTlsFile, TlsFiles
from sweeperd.server.urls import BadConnection, check_url, seed_of

# The systemd LoadCredential= name.
CREDENTIAL_NAME = "redis-password"
TLS_FIX = "see docs/security.md#tls"


def connection_of(typed: Mapping[str, Any], where: Mapping[str, str]) -> Connection:
    """Return the connection settings, read by their coercers, checked together before anything is
    sent; `where` names each setting as a refusal does."""
    url, *others = typed["redis_url"]
    password = _password(typed["redis_password_file"], where["redis_password_file"])
    tls = TlsFiles(*(None if typed[key] is None else str(typed[key]) for key in TLS_KEYS))
    topology = Topology(
        cluster=typed["cluster"],
        sentinels=typed["sentinels"],
        sentinel_master=typed["sentinel_master"],
        sentinel_password=_sentinel_password(
            typed["sentinel_password_file"], where["sentinel_password_file"]
        ),
    )
    try:
        url = check_url(url)
        topology = replace(topology, seeds=_seeds(url, others, where["redis_url"]))
        # The URL first: the topology check reads its db.
        topology.check(url)
        return Connection.checked(url, password, typed["socket_timeout"], tls, topology)
    except BadTlsFile as exc:
        raise ConfigError(f"{where[exc.key]} {exc}; {TLS_FIX}") from None
    except TopologyRefused as exc:
        raise ConfigError(str(exc)) from None
    except BadConnection as exc:
        problem = redact_text(str(exc))
        raise ConfigError(f"{where['redis_url']}: {problem}, in {shown(url)}") from None


def _seeds(url: str, others: list[str], where: str) -> tuple[tuple[str, int], ...]:
    """Return the addresses of the seeds named after the first URL, each checked against it."""
    seeds = []
    for other in others:
        try:
            seeds.append(seed_of(url, other))
        except BadConnection as exc:
            raise ConfigError(f"{where}: {redact_text(str(exc))}, in {shown(other)}") from None
    return tuple(seeds)


def _password(path: Path | None, where: str) -> str | None:
    """Return the password from the given file, else systemd's credential, else none."""
    if path is None:
        path = credential_path()
        if path is None or not path.exists():
            return None
        fix = f"fix the unit's LoadCredential= or set {OPTIONS['redis_password_file'].where}"
    else:
        fix = f"check {where}"
    return _secret(path, "Redis", fix)


def _sentinel_password(path: Path | None, where: str) -> str | None:
    return None if path is None else _secret(path, "Sentinel", f"check {where}")


def _secret(path: Path, whose: str, fix: str) -> str:
    """Return a password file's content, its line end stripped; a file that cannot be read or is
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


def credential_path() -> Path | None:
    """Return systemd's credential file for the password, when the unit passed one."""
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    return Path(credentials) / CREDENTIAL_NAME if credentials else None
