"""Coercers: each turns a given setting into a typed value, or raises ConfigError naming it."""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from sweeperd.constants import (
    BOOLEAN_WORDS,
    LLONG_MAX,
    MAX_INTERVAL_S,
    MAX_SOCKET_TIMEOUT_S,
    MIN_HEARTBEAT_S,
)
from sweeperd.keyspace import is_queue_name
from sweeperd.logs import LEVELS, redact_text

# Characters: a member id shows in logs and on the landing page.
MAX_INSTANCE_ID = 200

E = TypeVar("E", bound=StrEnum)


class ConfigError(Exception):
    """A setting that cannot be used; the message is one line naming it and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.splitlines()))


@dataclass(frozen=True)
class Given:
    """A value and where it came from: a flag/env var, the file or the default. `text_ok` is
    True for flags and env vars, which may arrive as text (the file's values are typed);
    `beside` is the config file's folder, for a value read from the file."""

    value: object
    where: str
    text_ok: bool
    beside: Path | None = None


def shown(value: object) -> str:
    """Return a value as a refusal quotes it: text with any credentials in a URL removed, a boolean
    as TOML and the env vars spell it (true, not True)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(redact_text(value)) if isinstance(value, str) else repr(value)


def why_unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Return why a file could not be read, in a few words."""
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return exc.strerror or str(exc)


def _number(given: Given, what: str) -> float:
    """Return a finite number (text is read as one from a flag or env var), refused naming
    `what`."""
    value = given.value
    if isinstance(value, str) and given.text_ok:
        with contextlib.suppress(ValueError):
            value = float(value)
    parsed = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):
            parsed = float(value)
    if not math.isfinite(parsed):
        raise ConfigError(f"{given.where} must be {what}, not {shown(given.value)}")
    return parsed


def _bounded(given: Given, what: str, low: float, high: float, *, low_ok: bool) -> float:
    """Return a finite number in [low, high] (or (low, high] when not low_ok), refused naming
    `what`."""
    value = _number(given, what)
    if not (low <= value if low_ok else low < value) or value > high:
        raise ConfigError(f"{given.where} must be {what}, not {value:g}")
    return value


def seconds(given: Given) -> float:
    """Return an interval: seconds, above 0 and at most a day."""
    return _seconds_up_to(given, MAX_INTERVAL_S)


def timeout_seconds(given: Given) -> float:
    """Return a socket timeout: seconds, above 0 and at most an hour."""
    return _seconds_up_to(given, MAX_SOCKET_TIMEOUT_S)


def _seconds_up_to(given: Given, high: float) -> float:
    """Seconds, above 0 and at most `high`."""
    what = f"a positive number of seconds up to {high:g}"
    return _bounded(given, what, 0, high, low_ok=False)


def seconds_or_off(given: Given) -> float:
    """Return a period: 0 for off, or seconds up to a day."""
    what = f"0 (off) or a positive number of seconds up to {MAX_INTERVAL_S:g}"
    return _bounded(given, what, 0, MAX_INTERVAL_S, low_ok=True)


def grace_seconds(given: Given) -> float:
    """Read audit --grace: seconds from 0 (no second read's wait) up to an hour."""
    return _bounded(given, "a number of seconds from 0 up to 3600", 0, 3600, low_ok=True)


def max_lease_seconds(given: Given) -> float:
    """Read audit --max-lease: the longest lease, seconds above 0 and at most a year."""
    what = "a positive number of seconds up to 31536000 (a year)"
    return _bounded(given, what, 0, 31_536_000, low_ok=False)


def keys_per_second(given: Given) -> float:
    """Read audit --rate: keys read per second, above 0 and at most ten million."""
    return _bounded(given, "a positive number of keys per second", 0, 1e7, low_ok=False)


def fraction(given: Given) -> float:
    """Return a fraction from 0 to 1, both taken."""
    return _bounded(given, "a fraction between 0 and 1", 0, 1, low_ok=True)


def share(given: Given) -> float:
    """Return a share above 0 and at most 1."""
    return _bounded(given, "a fraction above 0 and at most 1", 0, 1, low_ok=False)


def milliseconds(given: Given) -> float:
    """Milliseconds, above 0."""
    return _bounded(given, "a positive number of milliseconds", 0, math.inf, low_ok=False)


def heartbeat(given: Given) -> float:
    """Return a member's time to live: seconds, long enough for a round trip, at most a day."""
    what = f"a number of seconds from {MIN_HEARTBEAT_S:g} to {MAX_INTERVAL_S:g}"
    return _bounded(given, what, MIN_HEARTBEAT_S, MAX_INTERVAL_S, low_ok=True)


def positive_int(given: Given) -> int:
    """Return a whole number from 1 to LLONG_MAX (text from a flag or env var; never a bool)."""
    value = given.value
    digits = value.strip().lstrip("+-") if isinstance(value, str) else ""
    if isinstance(value, str) and given.text_ok and digits.isascii() and digits.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LLONG_MAX:
        raise ConfigError(
            f"{given.where} must be a whole number from 1 to {LLONG_MAX}, not {shown(given.value)}"
        )
    return value


def string(given: Given) -> str:
    """Text, as given."""
    if not isinstance(given.value, str):
        raise ConfigError(f"{given.where} must be a string, not {shown(given.value)}")
    return given.value


def optional_name(given: Given) -> str | None:
    """Return a name, stripped; None when none is given."""
    return None if given.value is None else string(given).strip() or None


def key_root(given: Given) -> str:
    """Return the key root: not empty, no braces (a hash tag) and no whitespace."""
    root = string(given)
    if not root or any(c in "{}" or c.isspace() for c in root):
        raise ConfigError(
            f"{given.where} must be a non-empty key root without {{, }} or whitespace, "
            f"not {shown(root)}"
        )
    return root


def instance_id(given: Given) -> str:
    """Return the member id: given, or hostname:pid, which is unique among a host's processes."""
    if given.value is None:
        return f"{socket.gethostname()}:{os.getpid()}"
    text = string(given)
    if not text or len(text) > MAX_INSTANCE_ID or not text.isprintable() or " " in text:
        raise ConfigError(
            f"{given.where} must be 1 to {MAX_INSTANCE_ID} printable characters without spaces "
            f"(e.g. the pod name), not {shown(given.value)}"
        )
    return text


def log_level(given: Given) -> str:
    """Return one of logs.LEVELS, in any case."""
    text = string(given).strip().lower()
    if text not in LEVELS:
        known = ", ".join(LEVELS)
        raise ConfigError(f"{given.where} must be one of {known}, not {shown(given.value)}")
    return text


def choice_of(choices: type[E]) -> Callable[[Given], E]:
    """Return the coercer to one of an enum's values, given in any case."""

    def coerce(given: Given) -> E:
        text = string(given).strip().lower()
        try:
            return choices(text)
        except ValueError:
            known = ", ".join(c.value for c in choices)
            raise ConfigError(
                f"{given.where} must be one of {known}, not {shown(given.value)}"
            ) from None

    return coerce


def switch(given: Given) -> bool:
    """On or off: a bool, or one of the on/off words from a flag or env var."""
    value = given.value
    if isinstance(value, str) and given.text_ok and value.strip().lower() in BOOLEAN_WORDS:
        value = BOOLEAN_WORDS[value.strip().lower()]
    if not isinstance(value, bool):
        raise ConfigError(f"{given.where} must be true or false, not {shown(given.value)}")
    return value


def file_path(given: Given) -> Path | None:
    """Return a file's path, None when none is given; a relative path in the config file is the
    file's neighbour."""
    if given.value is None:
        return None
    text = string(given)
    if "\0" in text:
        raise ConfigError(f"{given.where} holds a NUL character: give the file's path")
    path = Path(text)
    if given.beside is not None and not path.is_absolute():
        return given.beside / path
    return path


def host_port(text: str, *, empty_host: bool, bare_ipv6: bool) -> tuple[str, int] | None:
    """HOST:PORT as a pair, an IPv6 host in brackets and a port from 1 to 65535; None for
    anything else. `empty_host` takes `:PORT` (the host ""); `bare_ipv6` takes `::1:26379`, the
    last colon starting the port."""
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
        if ":" in host and not bare_ipv6:
            return None
    if not sep or not (host or empty_host) or any(c.isspace() for c in host):
        return None
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        return None
    return host, int(port)


def metrics_addr(given: Given) -> tuple[str, int]:
    """Return where the HTTP side listens: no host is every interface; an IPv6 host needs
    brackets."""
    address = host_port(string(given), empty_host=True, bare_ipv6=False)
    if address is None:
        raise ConfigError(
            f"{given.where} must be HOST:PORT with a port from 1 to 65535 "
            f"(e.g. 0.0.0.0:9787, :9787, [::1]:9787), not {shown(given.value)}"
        )
    return address


def sentinels(given: Given) -> tuple[tuple[str, int], ...]:
    """Sentinel addresses: commas and spaces separate them, as queue names; each names its host,
    an IPv6 one with or without brackets."""
    if given.value is None:
        return ()
    found = []
    for piece in (p for entry in _entries(given, "HOST:PORT addresses") for p in _pieces(entry)):
        address = host_port(piece, empty_host=False, bare_ipv6=True)
        if address is None:
            raise ConfigError(
                f"{given.where}: a Sentinel's address must be HOST:PORT with a port from 1 to "
                f"65535, not {piece!r}"
            )
        found.append(address)
    return tuple(found)


# A comma in a password stays.
SEED_SPLIT = re.compile(r"[\s,]+(?=(?:redis|rediss|unix)://)")


def redis_urls(given: Given) -> tuple[str, ...]:
    """Return the server's URL, or a Cluster's seeds: the flag repeated, a list in the file, or URLs
    separated by commas or spaces (a separator counts only before a scheme)."""
    entries = _entries(given, "a URL or a list of URLs")
    if not entries or not all(isinstance(entry, str) for entry in entries):
        raise ConfigError(
            f"{given.where} must be a URL or a list of URLs, not {shown(given.value)}"
        )
    urls = [url for entry in entries for url in SEED_SPLIT.split(str(entry).strip())]
    return tuple(dict.fromkeys(urls))


def queue_name(name: object, where: str) -> str:
    """Return a queue name, as keyspace.is_queue_name takes it; `where` names the list it is in."""
    if not is_queue_name(name):
        raise ConfigError(
            f"queue name {shown(name)} in {where} must be non-empty, without {{, }} or whitespace"
        )
    return str(name)


def queue_list(given: Given) -> list[str]:
    """Queue names from --queue / SWEEPERD_QUEUES: commas and spaces separate names."""
    names: list[str] = []
    for entry in _entries(given, "queue names"):
        pieces = _pieces(entry)
        # Nothing but separators: the message shows what was given.
        if not pieces:
            raise ConfigError(
                f"queue name {shown(entry)} in {given.where} must be non-empty, "
                "without {, } or whitespace"
            )
        names += [queue_name(p, given.where) for p in pieces]
    return names


def _entries(given: Given, what: str) -> list[object] | tuple[object, ...]:
    """Return a list setting's entries: one text (an env var, a file's string) or a list of them."""
    entries = [given.value] if isinstance(given.value, str) else given.value
    if not isinstance(entries, list | tuple):
        raise ConfigError(f"{given.where} must be {what}, not {shown(given.value)}")
    return entries


def _pieces(entry: object) -> list[str]:
    """Return the items of one entry: commas and spaces separate them."""
    return str(entry).replace(",", " ").split()
