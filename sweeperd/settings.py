"""The one settings object of sweeperd, built once from defaults, the TOML file and flags/env."""

from __future__ import annotations

import contextlib
import difflib
import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import redis

from sweeperd.connection import CREDENTIAL_NAME, read_password
from sweeperd.constants import (
    DEFAULT_CALL_TARGET_MS,
    DEFAULT_DRAIN_BUDGET,
    DEFAULT_DRAIN_SHARE,
    DEFAULT_INTERVAL_S,
    DEFAULT_JITTER_FRACTION,
    DEFAULT_LIMIT,
    DEFAULT_MAX_STALLED,
    DEFAULT_METRICS_ADDR,
    DEFAULT_PREFIX_ROOT,
    DEFAULT_REDIS_URL,
    DEFAULT_SOCKET_TIMEOUT_S,
    LLONG_MAX,
)
from sweeperd.executors import ExecutorChoice
from sweeperd.keyspace import is_queue_name
from sweeperd.logs import LEVELS, LogFormat, redact_text

ENV_PREFIX = "SWEEPERD_"
CONFIG_WHERE = "--config (SWEEPERD_CONFIG)"
URL_SCHEMES = ("redis", "rediss", "unix")
QUEUE_KEYS = ("interval", "max_stalled", "limit")  # what a [queues.<name>] table may set

# The settings of the file and of overrides, with their defaults; "queues" has none.
DEFAULTS: dict[str, object] = {
    "redis_url": DEFAULT_REDIS_URL,
    "redis_password_file": None,
    "prefix_root": DEFAULT_PREFIX_ROOT,
    "interval": DEFAULT_INTERVAL_S,
    "max_stalled": DEFAULT_MAX_STALLED,
    "limit": DEFAULT_LIMIT,
    "executor": ExecutorChoice.AUTO.value,
    "metrics_addr": DEFAULT_METRICS_ADDR,
    "log_format": LogFormat.AUTO.value,
    "log_level": "info",
    "drain_budget": DEFAULT_DRAIN_BUDGET,
    "socket_timeout": DEFAULT_SOCKET_TIMEOUT_S,
    "jitter": DEFAULT_JITTER_FRACTION,
    "discover": 0.0,  # seconds between SCANs for queues; 0 = off
}
KNOWN_KEYS = (*DEFAULTS, "queues")
FLAGS = {key: "--" + key.replace("_", "-") for key in DEFAULTS} | {"queues": "--queue"}

E = TypeVar("E", bound=StrEnum)
_parse_url: Callable[[str], dict[str, Any]] = redis.connection.parse_url


class ConfigError(Exception):
    """A setting that cannot be used; the message is one line naming it and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.splitlines()))


@dataclass(frozen=True)
class QueueSettings:
    name: str
    interval: float  # seconds between two sweeps
    max_stalled: int
    limit: int


@dataclass(frozen=True)
class Settings:
    redis_url: str
    redis_password: str | None = field(repr=False)
    prefix_root: str
    interval: float  # seconds
    max_stalled: int
    limit: int
    executor: ExecutorChoice
    metrics_host: str  # "" = every interface, IPv4 and IPv6
    metrics_port: int
    log_format: LogFormat  # json or console, never auto
    log_level: str  # lower case, one of logs.LEVELS
    drain_budget: int
    socket_timeout: float  # seconds
    jitter: float  # fraction of the interval, 0..1
    discover: float  # seconds between SCANs for <root>:{*}:active; 0 = off
    queues: tuple[QueueSettings, ...]
    config_path: Path | None
    call_target_ms: float = DEFAULT_CALL_TARGET_MS  # one call's target time; sizes adapt to it
    drain_share: float = DEFAULT_DRAIN_SHARE  # of the server's time a drain may take, (0, 1]

    def for_queue(self, name: str) -> QueueSettings:
        """A configured queue's settings, or the global ones for a discovered queue."""
        for queue in self.queues:
            if queue.name == name:
                return queue
        return QueueSettings(name, self.interval, self.max_stalled, self.limit)

    def describe(self) -> dict[str, object]:
        """The settings fit for a log line: credentials removed from the URL, no password."""
        shown: dict[str, object] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "redis_password"
        }
        shown["redis_url"] = redact_text(self.redis_url)
        shown["redis_password"] = "<set>" if self.redis_password is not None else None
        shown["queues"] = [q.name for q in self.queues]
        shown["config_path"] = str(self.config_path) if self.config_path else None
        return shown

    def __repr__(self) -> str:
        return f"Settings({self.describe()!r})"


@dataclass(frozen=True)
class _Given:
    """A value and where it came from: a flag/env var, the file or the default."""

    value: object
    where: str
    text_ok: bool  # flags and env vars may arrive as text; the file's values are typed


def _flag_where(key: str) -> str:
    return f"{FLAGS[key]} ({ENV_PREFIX}{key.upper()})"


def _shown(value: object) -> str:
    return repr(redact_text(value)) if isinstance(value, str) else repr(value)


def _number(given: _Given, what: str) -> float:
    value = given.value
    if isinstance(value, str) and given.text_ok:
        with contextlib.suppress(ValueError):
            value = float(value)
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):
            number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{given.where} must be {what}, not {_shown(given.value)}")
    return number


def _positive_float(given: _Given) -> float:
    value = _number(given, "a positive number of seconds")
    if value <= 0:
        raise ConfigError(f"{given.where} must be a positive number of seconds, not {value:g}")
    return value


def _discover(given: _Given) -> float:
    value = _number(given, "a number of seconds (0 = off)")
    if value < 0:
        raise ConfigError(f"{given.where} must be 0 (off) or a positive number of seconds")
    return value


def _jitter(given: _Given) -> float:
    value = _number(given, "a fraction of the interval between 0 and 1")
    if not 0 <= value <= 1:
        raise ConfigError(f"{given.where} must be a fraction between 0 and 1, not {value:g}")
    return value


def _positive_int(given: _Given) -> int:
    value = given.value
    if isinstance(value, str) and given.text_ok and value.strip().lstrip("+-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LLONG_MAX:
        raise ConfigError(
            f"{given.where} must be a whole number from 1 to {LLONG_MAX}, not {_shown(given.value)}"
        )
    return value


def _text(given: _Given) -> str:
    if not isinstance(given.value, str):
        raise ConfigError(f"{given.where} must be a string, not {_shown(given.value)}")
    return given.value


def _choice(given: _Given, choices: type[E]) -> E:
    text = _text(given).strip().lower()
    try:
        return choices(text)
    except ValueError:
        known = ", ".join(c.value for c in choices)
        raise ConfigError(
            f"{given.where} must be one of {known}, not {_shown(given.value)}"
        ) from None


def _log_level(given: _Given) -> str:
    text = _text(given).strip().lower()
    if text not in LEVELS:
        known = ", ".join(LEVELS)
        raise ConfigError(f"{given.where} must be one of {known}, not {_shown(given.value)}")
    return text


def _redis_url(given: _Given) -> str:
    url = _text(given).strip()
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in URL_SCHEMES:
        raise ConfigError(
            f"{given.where} must be a redis://, rediss:// or unix:// URL, not {_shown(url)}"
        )
    try:
        _parse_url(url)
    except ValueError as exc:
        problem = redact_text(str(exc)).rstrip(".")
        raise ConfigError(
            f"{given.where} is not a usable Redis URL ({problem}): {_shown(url)}"
        ) from None
    return url


def _metrics_addr(given: _Given) -> tuple[str, int]:
    text = _text(given).strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
        sep = "" if ":" in host else sep  # a bare IPv6 address: it needs its brackets
    if (
        not sep
        or any(c.isspace() for c in host)
        or not port.isdigit()
        or not 1 <= int(port) <= 65535
    ):
        raise ConfigError(
            f"{given.where} must be HOST:PORT with a port from 1 to 65535 "
            f"(e.g. 0.0.0.0:9787, :9787, [::1]:9787), not {_shown(given.value)}"
        )
    return host, int(port)


def _root(given: _Given) -> str:
    root = _text(given)
    if not root or any(c in "{}" or c.isspace() for c in root):
        raise ConfigError(
            f"{given.where} must be a non-empty key root without {{, }} or whitespace, "
            f"not {_shown(root)}"
        )
    return root


def _queue_name(name: object, where: str) -> str:
    if not is_queue_name(name):
        raise ConfigError(
            f"queue name {_shown(name)} in {where} must be non-empty, without {{, }} or whitespace"
        )
    return str(name)


def _why(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return exc.strerror or str(exc)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the config file {path} ({CONFIG_WHERE}): {_why(exc)}"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    _refuse_unknown(data, KNOWN_KEYS, f"config file {path}")
    return data


def _refuse_unknown(table: Mapping[str, object], known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(
                f"unknown key {key!r} in {where}{hint}; known keys: {', '.join(known)}"
            )


def _file_queues(data: Mapping[str, Any], path: Path) -> dict[str, dict[str, _Given]]:
    """The file's queues: each name with the per-queue values its table sets."""
    given = data.get("queues", [])
    where = f"queues in {path}"
    if isinstance(given, list):
        return {_queue_name(name, where): {} for name in given}
    if not isinstance(given, dict):
        raise ConfigError(f"{where} must be a list of names or [queues.<name>] tables")
    queues: dict[str, dict[str, _Given]] = {}
    for name, table in given.items():
        table_where = f"[queues.{name}] in {path}"
        _queue_name(name, where)
        if not isinstance(table, dict):
            raise ConfigError(f"queues.{name} in {path} must be a table ([queues.{name}])")
        _refuse_unknown(table, QUEUE_KEYS, table_where)
        queues[name] = {
            key: _Given(value, f"{key} of {table_where}", False) for key, value in table.items()
        }
    return queues


def _flag_queues(value: object) -> list[str]:
    """Queue names from --queue / SWEEPERD_QUEUES: each entry may be comma-separated."""
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list | tuple):
        raise ConfigError(f"{_flag_where('queues')} must be queue names, not {_shown(value)}")
    where = _flag_where("queues")
    return [_queue_name(name.strip(), where) for entry in entries for name in str(entry).split(",")]


def _gather(
    overrides: Mapping[str, object], data: Mapping[str, Any], path: Path | None
) -> dict[str, _Given]:
    """Every setting with its winning value: an override, else the file's, else the default."""
    unknown = set(overrides) - set(KNOWN_KEYS)
    if unknown:
        raise ValueError(f"build_settings: unknown override keys {sorted(unknown)}")
    chosen: dict[str, _Given] = {}
    for key, default in DEFAULTS.items():
        if overrides.get(key) is not None:
            chosen[key] = _Given(overrides[key], _flag_where(key), True)
        elif key in data:
            chosen[key] = _Given(data[key], f"{key} in {path}", False)
        else:
            chosen[key] = _Given(default, f"the default {key}", False)
    return chosen


def _password(given: _Given, config_path: Path | None) -> str | None:
    if given.value is None:
        try:
            return read_password(None)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read the Redis password from $CREDENTIALS_DIRECTORY/{CREDENTIAL_NAME}: "
                f"{_why(exc)}; fix the unit's LoadCredential= or set "
                f"{_flag_where('redis_password_file')}"
            ) from None
    path = Path(_text(given))
    if config_path is not None and not given.text_ok and not path.is_absolute():
        path = config_path.parent / path  # a relative path in the file is the file's neighbour
    try:
        return read_password(str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the Redis password file {path} ({given.where}): {_why(exc)}"
        ) from None


def _queues(
    file_queues: Mapping[str, Mapping[str, _Given]],
    flag_names: list[str],
    defaults: QueueSettings,
) -> tuple[QueueSettings, ...]:
    """The file's queues (a table's own values win over the globals), then the flags' new ones."""
    parsers: dict[str, Callable[[_Given], Any]] = {
        "interval": _positive_float,
        "max_stalled": _positive_int,
        "limit": _positive_int,
    }
    built: dict[str, QueueSettings] = {}
    for name, table in file_queues.items():
        own = {key: parsers[key](given) for key, given in table.items()}
        built[name] = QueueSettings(
            name,
            own.get("interval", defaults.interval),
            own.get("max_stalled", defaults.max_stalled),
            own.get("limit", defaults.limit),
        )
    for name in flag_names:
        built.setdefault(
            name, QueueSettings(name, defaults.interval, defaults.max_stalled, defaults.limit)
        )
    return tuple(built.values())


def build_settings(
    overrides: Mapping[str, object], config_path: Path | None, *, stdout_isatty: bool
) -> Settings:
    """Defaults, then the TOML file, then flags/env (`overrides`; None = not given), checked."""
    data = _read_file(config_path) if config_path is not None else {}
    given = _gather(overrides, data, config_path)
    file_queues = _file_queues(data, config_path) if config_path is not None else {}
    flag_names = _flag_queues(overrides["queues"]) if overrides.get("queues") is not None else []
    log_format = _choice(given["log_format"], LogFormat)
    if log_format is LogFormat.AUTO:
        log_format = LogFormat.CONSOLE if stdout_isatty else LogFormat.JSON
    host, port = _metrics_addr(given["metrics_addr"])
    interval = _positive_float(given["interval"])
    max_stalled = _positive_int(given["max_stalled"])
    limit = _positive_int(given["limit"])
    discover = _discover(given["discover"])
    queues = _queues(file_queues, flag_names, QueueSettings("", interval, max_stalled, limit))
    if not queues and discover == 0:
        raise ConfigError(
            "no queue to sweep: give --queue NAME, queues in the config file, or --discover SECONDS"
        )
    return Settings(
        redis_url=_redis_url(given["redis_url"]),
        redis_password=_password(given["redis_password_file"], config_path),
        prefix_root=_root(given["prefix_root"]),
        interval=interval,
        max_stalled=max_stalled,
        limit=limit,
        executor=_choice(given["executor"], ExecutorChoice),
        metrics_host=host,
        metrics_port=port,
        log_format=log_format,
        log_level=_log_level(given["log_level"]),
        drain_budget=_positive_int(given["drain_budget"]),
        socket_timeout=_positive_float(given["socket_timeout"]),
        jitter=_jitter(given["jitter"]),
        discover=discover,
        queues=queues,
        config_path=config_path,
    )
