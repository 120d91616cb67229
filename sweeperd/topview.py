"""How `sweeperd top` shows a refresh: a rich table, plain text, or one JSON object."""

from __future__ import annotations

import io
import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sweeperd.constants import EXIT_OK
from sweeperd.options import OPTIONS
from sweeperd.settings import Settings
from sweeperd.top import Clock, QueueRow, Screen, ServerRow, Top, wall_clock

HEADER_LINES = 5  # the title, the table's head and borders, besides one line per server
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0
JSON_SCHEMA = 1  # `schema` in --json: raised when a field changes meaning or goes


def _count(value: int | None) -> str:
    return "…" if value is None else f"{value:,}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _uptime(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    return (f"{days}d" if days else "") + f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def server_line(s: ServerRow) -> Text:
    """One server: run_id, uptime, role and the verb, or why it could not be read."""
    if s.error is not None:
        return Text(f"{s.node}  UNREACHABLE: {s.error}", style="bold red")
    verb = "verb loaded" if s.verb_loaded else "verb NOT loaded (script executor)"
    line = Text(f"{s.node}  run_id {s.run_id[:12]}…  up {_uptime(s.uptime_s)}  {s.role}  {verb}")
    if s.restarted:
        line.append(f"  RESTARTED since the view started (run_id was {s.first_run_id[:12]}…)",
                    style="bold red")  # fmt: skip
    return line


def table(screen: Screen) -> Table:
    """The rows, most expired leases first."""
    shown = f"top {len(screen.rows)} of {screen.queues} queues by expired leases"
    grid = Table(title=None, caption=shown, caption_justify="left", expand=False)
    for name in ("queue", "expired", "oldest overdue", "active", "pending", "dead",
                 "recovered/s", "dead/s"):  # fmt: skip
        grid.add_column(name, justify="left" if name == "queue" else "right", no_wrap=True)
    for row in screen.rows:
        grid.add_row(
            row.queue, _count(row.expired), _age(row.oldest_overdue_s), _count(row.active),
            _count(row.pending), _count(row.dead), _rate(row.recovered_per_s),
            _rate(row.dead_per_s),
        )  # fmt: skip
    return grid


def renderable(screen: Screen, interval: float, live: bool = True) -> Group:
    clock = time.strftime("%H:%M:%S", time.localtime(screen.at))
    how = (
        f"every {interval:g}s  (read only; Ctrl-C quits)"
        if live
        else (f"rates over {interval:g}s  (read only)")
    )
    title = Text(f"sweeperd top  {clock}  {how}", style="bold")
    return Group(title, *(server_line(s) for s in screen.servers), table(screen))


def plain_text(screen: Screen, interval: float, width: int) -> str:
    """The same view as text without colours, for a pipe or a log."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    console.print(renderable(screen, interval, live=False))
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())


def _row_json(row: QueueRow) -> dict[str, object]:
    return asdict(row)


def _server_json(s: ServerRow) -> dict[str, object]:
    return {**asdict(s), "restarted": s.restarted}


def as_json(screen: Screen, interval: float) -> str:
    """The documented --json object (README: sweeperd top)."""
    body = {
        "schema": JSON_SCHEMA,
        "at": screen.at,
        "interval_s": interval,
        "queues": screen.queues,
        "servers": [_server_json(s) for s in screen.servers],
        "rows": [_row_json(r) for r in screen.rows],
    }
    return json.dumps(body, allow_nan=False)


def rows_fitting(lines: int, servers: int) -> int:
    """How many rows fit a terminal of `lines` lines under the header; at least 5."""
    return max(5, lines - HEADER_LINES - servers - 2)


@dataclass(frozen=True)
class ViewOptions:
    interval: float
    rows: int
    once: bool  # print once and exit: --once, or stdout is no terminal
    json: bool


def _number(params: Mapping[str, object], key: str, kind: type[float] | type[int]) -> float:
    where = OPTIONS[key].where
    try:
        return kind(str(params[key]))
    except ValueError:
        noun = "a whole number" if kind is int else "a number of seconds"
        raise ValueError(f"{where} must be {noun}, not {params[key]!r}") from None


def options_of(params: Mapping[str, object], isatty: bool) -> ViewOptions:
    """top's own options, checked: a ValueError names the bad one and its range."""
    interval = _number(params, "top_interval", float) if params["top_interval"] else 1.0
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        raise ValueError(
            f"{OPTIONS['top_interval'].where} must be between {MIN_INTERVAL_S:g} and "
            f"{MAX_INTERVAL_S:g} seconds, not {interval:g}"
        )
    if params["rows"]:
        rows = int(_number(params, "rows", int))
        if rows < 1:
            raise ValueError(f"{OPTIONS['rows'].where} must be 1 or more, not {rows}")
    else:
        rows = rows_fitting(shutil.get_terminal_size((100, 40)).lines, 1)
    once = bool(params["once"]) or not isatty or bool(params["json"])
    return ViewOptions(interval, rows, once, bool(params["json"]))


def run(
    settings: Settings, view: ViewOptions, say: Callable[[str], None], clock: Clock = wall_clock
) -> int:
    """Show the view until Ctrl-C, or once; a server that cannot be read ends a --once run
    with its failure (raised), and shows in red in the live view."""
    top = Top(
        settings.connection, settings.prefix_root, [q.name for q in settings.queues],
        view.rows, clock,
    )  # fmt: skip
    try:
        if view.once:
            return _once(top, view, say)
        _live(top, view)
    except KeyboardInterrupt:
        pass
    finally:
        top.close()
    return EXIT_OK


def _once(top: Top, view: ViewOptions, say: Callable[[str], None]) -> int:
    for attempt in range(2):  # two reads: the rates need both
        screen = top.refresh()
        if screen.failures:
            raise screen.failures[0]
        if attempt == 0:
            time.sleep(view.interval)
    width = shutil.get_terminal_size((120, 40)).columns
    say(as_json(screen, view.interval) if view.json else plain_text(screen, view.interval, width))
    return EXIT_OK


def _live(top: Top, view: ViewOptions) -> None:
    with Live(console=Console(), screen=True, auto_refresh=False) as live:
        while True:
            live.update(renderable(top.refresh(), view.interval), refresh=True)
            time.sleep(view.interval)
