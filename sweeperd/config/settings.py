"""The settings objects of sweeperd (every command's, the daemon's own apart), built once from
defaults, the TOML file and flags/env."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sweeperd.config import coercers
from sweeperd.config.coercers import ConfigError, Given
from sweeperd.config.configfile import (
    FileQueues,
    QueueTables,
    file_queues,
    read_config,
    unlisted_tables,
)
from sweeperd.config.connsettings import connection_of
from sweeperd.config.options import OPTIONS, SETTING_KEYS
from sweeperd.config.webconfig import BadWebConfig, WebConfig, load_web_config
from sweeperd.constants import (
    DEFAULT_PREFIX_ROOT,
    DeadlineSource,
    ExecutorChoice,
    LogFormat,
    QueueMetrics,
    Shard,
    SweepAt,
)
from sweeperd.keyspace import QueueKeys
from sweeperd.logs import NAMES_CAP, cap_ids
from sweeperd.server.connection import Connection

# What the commands and the daemon import from here (ConfigError is defined in coercers.py,
# beneath the options table that names its readers).
__all__ = [
    "ConfigError",
    "DaemonSettings",
    "QueueSettings",
    "Settings",
    "build_settings",
    "queue_names",
]

# The settings of the file and of overrides, with their defaults; "queues" has none.
DEFAULTS: dict[str, object] = {k: OPTIONS[k].default for k in SETTING_KEYS if k != "queues"}
KNOWN_KEYS = (*DEFAULTS, "queues")


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """One queue's sweep: its interval in seconds, budget and limit, and its keys under
    `prefix_root`. `budget_given` is False when max_stalled is the default, which no flag, env
    var, file or table set."""

    name: str
    interval: float
    max_stalled: int
    limit: int
    budget_given: bool = field(default=True, compare=False, repr=False)
    prefix_root: str = DEFAULT_PREFIX_ROOT
    # Made once: every call of the queue carries them (made per call, they were 6 % of an idle
    # call's CPU; kept, 4.6 MiB at 100,000 queues).
    keys: QueueKeys = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", QueueKeys(self.name, self.prefix_root))


@dataclass(frozen=True)
class DaemonSettings:
    """What `run` alone reads: its HTTP side, the spread of its schedule, discovery, the
    replicas and the series it exports; `once` and `inspect` never look at them.

    Each field is the flag of its name (docs/configuration.md), in seconds where it is a time;
    `metrics_host` "" is every interface (IPv4 and IPv6), `jitter` a fraction of the interval,
    `discover` and `audit_every` 0 are off, and `web_config` holds the HTTP side's TLS and basic
    auth."""

    metrics_host: str
    metrics_port: int
    jitter: float
    sweep_at: SweepAt
    deadline_source: DeadlineSource
    discover: float
    queue_metrics: QueueMetrics
    shard: Shard
    heartbeat: float
    instance_id: str
    web_config: WebConfig | None = None
    audit_every: float = 0.0


@dataclass(frozen=True)
class Settings:
    """Every setting of a command, built once from flags, env vars and the file.

    Each field is the flag of its name (docs/configuration.md), in seconds where it is a time;
    `log_format` is json or console (auto is resolved), `log_level` lower case. `notes` say how
    to write the file now (said once per read, never fatal); `unlisted_tables` are tables no
    list names, kept for discovery to find; `budget_given` is True when max_stalled was given by
    a flag, an env var or the file."""

    connection: Connection
    prefix_root: str
    interval: float
    max_stalled: int
    limit: int
    call_target_ms: float
    drain_share: float
    executor: ExecutorChoice
    log_format: LogFormat
    log_level: str
    queues: tuple[QueueSettings, ...]
    config_path: Path | None
    daemon: DaemonSettings
    notes: tuple[str, ...] = ()
    unlisted_tables: tuple[str, ...] = ()
    budget_given: bool = True

    def for_queue(self, name: str) -> QueueSettings:
        """Return a configured queue's settings, or the global ones for a discovered queue."""
        for queue in self.queues:
            if queue.name == name:
                return queue
        return QueueSettings(
            name,
            self.interval,
            self.max_stalled,
            self.limit,
            budget_given=self.budget_given,
            prefix_root=self.prefix_root,
        )

    def describe(self) -> dict[str, object]:
        """Return the settings fit for a log line: credentials removed from the URL, no password,
        the queues counted and the first NAMES_CAP of them named."""
        topology = self.connection.topology
        shown: dict[str, object] = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("connection", "notes", "daemon", "unlisted_tables", "budget_given")
        }
        shown |= {f.name: getattr(self.daemon, f.name) for f in fields(self.daemon)}
        shown["redis_url"] = self.connection.shown_url
        if topology.seeds:
            shown["seeds"] = self.connection.shown_seeds
        shown["redis_password"] = "<set>" if self.connection.has_password else None
        shown["socket_timeout"] = self.connection.socket_timeout
        shown["topology"] = topology.mode
        if topology.sentinels:
            shown["sentinels"] = [f"{host}:{port}" for host, port in topology.sentinels]
            shown["sentinel_master"] = topology.sentinel_master
        # A count and the first few names: 5,000 queues made one line of 50 KB, which journald
        # (LineMax=48K) splits in two, each no JSON object.
        shown["queues"] = len(self.queues)
        shown["queue_names"] = cap_ids((q.name for q in self.queues), NAMES_CAP)
        shown["config_path"] = str(self.config_path) if self.config_path else None
        web = self.daemon.web_config
        shown["web_config"] = str(web.path) if web else None
        return shown

    def __repr__(self) -> str:
        return f"Settings({self.describe()!r})"


def queue_names(value: object) -> list[str]:
    """Queue names from --queue / SWEEPERD_QUEUES: commas and spaces separate names."""
    return coercers.queue_list(Given(value, OPTIONS["queues"].where, True))


def _gather(
    overrides: Mapping[str, object], data: Mapping[str, Any], path: Path | None
) -> dict[str, Given]:
    """Return every setting with its winning value: an override, else the file's, else the
    default."""
    unknown = set(overrides) - set(KNOWN_KEYS)
    if unknown:
        raise ValueError(f"build_settings: unknown override keys {sorted(unknown)}")
    chosen: dict[str, Given] = {}
    for key, default in DEFAULTS.items():
        if overrides.get(key) is not None:
            chosen[key] = _not_empty(key, Given(overrides[key], OPTIONS[key].where, True))
        elif key in data:
            beside = path.parent if path else None
            chosen[key] = _not_empty(key, Given(data[key], f"{key} in {path}", False, beside))
        else:
            chosen[key] = Given(default, f"the default {key}", False)
    return chosen


def _not_empty(key: str, given: Given) -> Given:
    """Return the value given, refusing one given empty (`--redis-url ''`, a variable that did
    not expand): it would otherwise mean the default, e.g. whatever server listens on localhost."""
    values = given.value if isinstance(given.value, list | tuple) else [given.value]
    if any(isinstance(value, str) and not value.strip() for value in values):
        o = OPTIONS[key]
        default = f" (default: {o.default_text})" if o.default_text else ""
        raise ConfigError(
            f"{given.where} is empty: set it ({o.metavar or 'true or false'}) or leave it out"
            f"{default}"
        )
    return given


def _web_config(path: Path | None, where: str) -> WebConfig | None:
    """Return the web config file named, read and checked."""
    if path is None:
        return None
    try:
        return load_web_config(path)
    except BadWebConfig as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _queues(
    tables: QueueTables,
    flag_names: list[str],
    defaults: QueueSettings,
) -> tuple[QueueSettings, ...]:
    """Return the file's queues (a table's own values win over the globals), then the flags' new
    ones."""
    built: dict[str, QueueSettings] = {}
    for name, table in tables.items():
        own = {key: _parse(key, given) for key, given in table.items()}
        built[name] = QueueSettings(
            name,
            own.get("interval", defaults.interval),
            own.get("max_stalled", defaults.max_stalled),
            own.get("limit", defaults.limit),
            budget_given="max_stalled" in own or defaults.budget_given,
            prefix_root=defaults.prefix_root,
        )
    for name in flag_names:
        built.setdefault(name, replace(defaults, name=name))
    return tuple(built.values())


def _parse(key: str, given: Given) -> Any:
    """Return the value of one setting, read by the coercer its row in the options table names."""
    parse = OPTIONS[key].parse
    assert parse is not None, f"{key} has no coercer in options.OPTIONS"
    return parse(given)


def build_settings(
    overrides: Mapping[str, object],
    config_path: Path | None,
    *,
    logs_to_tty: bool,
    needs_queue: bool = True,
) -> Settings:
    """Defaults, then the TOML file, then flags/env (`overrides`; None = not given), checked.

    `run`, `once` and `inspect` all build their settings here; `logs_to_tty` says whether the
    logs' stream (stderr) is a terminal, which is what the log format auto follows. Each value
    is read by its coercer in the options table's order; the files named (passwords, TLS
    files, the web config) are read after every value is. Without `needs_queue` (`acl`, which
    sweeps nothing) settings with no queue and no discovery are no error.
    """
    data = read_config(config_path) if config_path is not None else {}
    given = _gather(overrides, data, config_path)
    file = file_queues(data, config_path) if config_path is not None else FileQueues({})
    flag_names = queue_names(overrides["queues"]) if overrides.get("queues") is not None else []
    typed = {key: _parse(key, value) for key, value in given.items()}
    if typed["log_format"] is LogFormat.AUTO:
        typed["log_format"] = LogFormat.CONSOLE if logs_to_tty else LogFormat.JSON
    unlisted = (
        unlisted_tables(file, flag_names, config_path, discover=typed["discover"] > 0)
        if config_path is not None
        else ()
    )
    budget_given = overrides.get("max_stalled") is not None or "max_stalled" in data
    defaults = QueueSettings(
        "",
        typed["interval"],
        typed["max_stalled"],
        typed["limit"],
        budget_given=budget_given,
        prefix_root=typed["prefix_root"],
    )
    queues = _queues(file.queues, flag_names, defaults)
    if needs_queue and not queues and typed["discover"] == 0:
        raise ConfigError(
            "no queue to sweep: give --queue NAME, queues in the config file, or --discover SECONDS"
        )
    where = {key: value.where for key, value in given.items()}
    host, port = typed["metrics_addr"]
    daemon = DaemonSettings(
        **{f.name: typed[f.name] for f in fields(DaemonSettings) if f.name in typed},
        metrics_host=host,
        metrics_port=port,
        web_config=_web_config(typed["web_config_file"], where["web_config_file"]),
    )
    return Settings(
        **{f.name: typed[f.name] for f in fields(Settings) if f.name in typed},
        connection=connection_of(typed, where),
        queues=queues,
        config_path=config_path,
        daemon=daemon,
        notes=file.notes,
        unlisted_tables=unlisted,
        budget_given=budget_given,
    )
