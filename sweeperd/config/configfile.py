"""The TOML config file: read, its keys checked, its `queues` list and `[queue.<name>]` tables."""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeperd.config.coercers import ConfigError, Given, queue_name, why_unreadable
from sweeperd.config.options import OPTIONS, REMOVED_KEYS, SETTING_KEYS

# What a [queue.<name>] table may set; the tables' name ("queues" is the list of names), and
# their name before TOML's list/table clash, [queues.<name>].
QUEUE_KEYS = ("interval", "max_stalled", "limit")
TABLES = "queue"
OLD_TABLES = "queues"
# The keys a file may hold, in the order a refusal lists them; instance_id is per replica.
FILE_KEYS = (
    *(k for k in SETTING_KEYS if k != "queues" and OPTIONS[k].toml),
    "queues",
    TABLES,
)
# Why the file may not set an option that is a setting nonetheless, and to whom its flag goes.
NOT_IN_FILE = {
    "instance_id": ("each replica has its own, and the replicas share the file", "each replica"),
}
# A queue's name -> the values its table sets; and the tables as TOML read them.
QueueTables = dict[str, dict[str, Given]]
Tables = dict[str, Any]


@dataclass(frozen=True)
class FileQueues:
    """The queues a file names: each with the values its table sets, the `queues` list's names
    (None: the file has no list, and its tables name its queues), how to write it now."""

    queues: QueueTables
    listed: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()


def read_config(path: Path) -> dict[str, Any]:
    """Return the file's settings as TOML typed them, once every top-level key is a known one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the config file {path} ({OPTIONS['config'].where}): {why_unreadable(exc)}"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for key in (k for k in data if k in OPTIONS and k not in FILE_KEYS):
        _refuse_flag(key, f"config file {path}")
    _refuse_unknown(data, FILE_KEYS, f"config file {path}")
    return data


def _refuse_unknown(table: Mapping[str, object], known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key in REMOVED_KEYS and key not in known:
            raise ConfigError(f"{REMOVED_KEYS[key]}; remove it from {where}")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(
                f"unknown key {key!r} in {where}{hint}; known keys: {', '.join(known)}"
            )


def _refuse_flag(key: str, where: str) -> None:
    """Refuse an option the file may not set (a flag, or a replica's own setting), named as such."""
    why, whom = NOT_IN_FILE.get(key, ("", ""))
    raise ConfigError(
        f"{key} is not read from a config file{f' ({why})' if why else ''}: give "
        f"{OPTIONS[key].where}{f' to {whom}' if whom else ''}, and remove it from {where}"
    )


def file_queues(data: Mapping[str, Any], path: Path) -> FileQueues:
    """Return the file's queues: `queues = [names]`, then `[queue.<name>]` tables, each name with
    the values its table sets; and the notes on how to write the file now. `[queues.<name>]` tables
    (one key cannot be both TOML's list and table) are read as `[queue.<name>]`."""
    listed, tables, old = _shapes(data, path)
    queues: QueueTables = {queue_name(name, f"queues in {path}"): {} for name in listed}
    names = tuple(queues) if "queues" in data and not old else None
    for spelled, given in ((TABLES, tables), (OLD_TABLES, old)):
        for name, table in given.items():
            queue_name(name, f"{spelled} in {path}")
            if spelled == OLD_TABLES and name in tables:
                raise ConfigError(
                    f"queue {name} has two tables in {path}, [{TABLES}.{name}] and "
                    f"[{OLD_TABLES}.{name}]: keep [{TABLES}.{name}]"
                )
            queues[name] = _queue_table(table, f"{spelled}.{name}", path)
    return FileQueues(queues, names, _notes(old, path))


def unlisted_tables(
    file: FileQueues, named: Sequence[str], path: Path, *, discover: bool
) -> tuple[str, ...]:
    """Return the `[queue.<name>]` tables of queues that neither the file's list nor `named` (the
    flags' names) lists. Where the queues are listed, such a table is a typo and refused,
    naming the nearest listed queue; unless discovery is on, where it may be for a queue a
    scan finds (the daemon warns when no scan does). A file without a list names its queues
    by its tables: nothing is unlisted."""
    if file.listed is None:
        return ()
    names = [*file.listed, *named]
    known = set(names)
    unlisted = tuple(name for name in file.queues if name not in known)
    if unlisted and not discover:
        name = unlisted[0]
        close = difflib.get_close_matches(name, names, n=1)
        flag = OPTIONS["queues"].flag_name
        lists = (
            f"neither queues = [...] nor {flag} lists" if named else "queues = [...] does not list"
        )
        raise ConfigError(
            f"[{TABLES}.{name}] in {path} is for a queue that {lists}"
            f"{f' (did you mean {close[0]}?)' if close else ''}: fix the table's name, or list "
            f"the queue (with --discover on, a table may be for a queue a scan finds)"
        )
    return unlisted


def _shapes(data: Mapping[str, Any], path: Path) -> tuple[list[Any], Tables, Tables]:
    """Return the list of names, the tables, and the tables spelled the old way; a wrong shape is
    refused saying which key holds what."""
    listed, tables = data.get("queues", []), data.get(TABLES, {})
    old: Tables = {}
    if isinstance(listed, dict):
        old, listed = listed, []
    if not isinstance(listed, list):
        raise ConfigError(
            f"queues in {path} must be a list of names; a queue's own values go in "
            f"[{TABLES}.<name>] tables"
        )
    if not isinstance(tables, dict):
        raise ConfigError(
            f"{TABLES} in {path} must be [{TABLES}.<name>] tables; a list of names is "
            "queues = [...]"
        )
    return listed, tables, old


def _notes(old: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    """Return how to write the old tables now: said once per read of the file, never fatal."""
    if not old:
        return ()
    renamed = ", ".join(f"[{TABLES}.{name}]" for name in old)
    return (
        f"config file {path}: [{OLD_TABLES}.<name>] tables are read as [{TABLES}.<name>]; "
        f"rename them {renamed} (queues = [...] is the list of names)",
    )


def _queue_table(table: object, spelled: str, path: Path) -> dict[str, Given]:
    """Return one queue's table: the values it sets, each named by the table as written."""
    if not isinstance(table, dict):
        raise ConfigError(f"{spelled} in {path} must be a table ([{spelled}])")
    where = f"[{spelled}] in {path}"
    _refuse_unknown(table, QUEUE_KEYS, where)
    return {key: Given(value, f"{key} of {where}", False) for key, value in table.items()}
