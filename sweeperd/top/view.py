"""`sweeperd top`'s options and loop: a live view, or one refresh as plain text or JSON."""

from __future__ import annotations

import errno
import json
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from types import FrameType

import redis
from rich.console import Console
from rich.live import Live

from sweeperd.config.options import OPTIONS
from sweeperd.config.settings import Settings
from sweeperd.constants import DEFAULT_TOP_RATE_WINDOW_S, EXIT_OK
from sweeperd.server.connection import Connection
from sweeperd.server.urls import url_at
from sweeperd.signals import SignalInbox
from sweeperd.top.refresh import Clock, Screen, ServerRow, Top, Unread, wall_clock
from sweeperd.top.screen import Fitted, lines_besides_rows, plain_text

# The title, the table's head and rule, the caption, the replicas.
HEADER_LINES = 5
# Left below the view.
SPARE_LINES = 2
# The rows shown however small the terminal.
MIN_ROWS = 5
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0
# `schema` in --json: raised when a field changes meaning or goes.
JSON_SCHEMA = 3
# Leave the live view: Ctrl-C, a supervisor's kill, the terminal closed.
LEAVE_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A write to a terminal that was closed.
HUNG_UP = (errno.EIO, errno.EPIPE)


class TerminalGone(Exception):
    """The live view's terminal was closed under it: nothing is left to restore or write to."""


class NothingRead(Exception):
    """No server of the view answered: `--once` has nothing to show but the failure, said of
    the server that failed (`connection` points at it)."""

    def __init__(self, connection: Connection, error: redis.RedisError) -> None:
        super().__init__(str(error))
        self.connection = connection
        self.error = error

    @classmethod
    def of(cls, connection: Connection, unread: Unread) -> NothingRead:
        if unread.address is None:
            return cls(connection, unread.error)
        return cls(replace(connection, url=url_at(connection.url, *unread.address)), unread.error)


def _server_json(s: ServerRow) -> dict[str, object]:
    return {**asdict(s), "restarted": s.restarted}


def as_json(screen: Screen, interval: float) -> str:
    """Return the documented --json object (docs/commands.md: sweeperd top)."""
    body = {
        "schema": JSON_SCHEMA,
        "at": screen.at,
        "interval_s": interval,
        "rate_window_s": screen.window_s,
        "queues": screen.queues,
        "read": screen.queues - screen.unread,
        "members": list(screen.members),
        "servers": [_server_json(s) for s in screen.servers],
        "rows": [asdict(r) for r in screen.rows],
    }
    return json.dumps(body, allow_nan=False)


def rows_fitting(lines: int, servers: int) -> int:
    """Return how many rows fit a terminal of `lines` lines under the header; at least MIN_ROWS."""
    return max(MIN_ROWS, lines - HEADER_LINES - servers - SPARE_LINES)


def rows_for(screen: Screen, lines: int, width: int, interval: float) -> int:
    """Return how many rows the live view's next refresh may show in `lines` of `width`: room for
    every other line as drawn at that width (the servers' lines and the notes under the table,
    wrapped), which the rows must not push off the screen, however many servers an incident
    brings."""
    return max(MIN_ROWS, lines - lines_besides_rows(screen, interval, width) - SPARE_LINES)


@dataclass(frozen=True)
class ViewOptions:
    interval: float
    rows: int
    # Print once and exit: --once, or stdout is no terminal.
    once: bool
    json: bool
    # The rates are over the reads of this long.
    window: float = DEFAULT_TOP_RATE_WINDOW_S
    # No --rows: the live view fits the terminal at every refresh.
    fit: bool = False


def _number(params: Mapping[str, object], key: str, kind: type[float] | type[int]) -> float:
    where = OPTIONS[key].where
    try:
        return kind(str(params[key]))
    except ValueError:
        noun = "a whole number" if kind is int else "a number of seconds"
        raise ValueError(f"{where} must be {noun}, not {params[key]!r}") from None


def _given(params: Mapping[str, object], key: str) -> bool:
    """Tell whether the option was given; given empty (a flag, or an env var click drops) it is
    refused, as the settings refuse it: it would otherwise mean the default."""
    value = params[key]
    if value == "" or (value is None and OPTIONS[key].empty_in_env):
        raise ValueError(
            f"{OPTIONS[key].where} is empty: give {OPTIONS[key].metavar} or leave it out"
        )
    return value is not None


def _seconds(params: Mapping[str, object], key: str) -> float:
    """Return a number of seconds between MIN_INTERVAL_S and MAX_INTERVAL_S, or the option's
    default."""
    if not _given(params, key):
        return float(str(OPTIONS[key].default))
    seconds = _number(params, key, float)
    if not MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S:
        raise ValueError(
            f"{OPTIONS[key].where} must be between {MIN_INTERVAL_S:g} and "
            f"{MAX_INTERVAL_S:g} seconds, not {seconds:g}"
        )
    return seconds


def options_of(params: Mapping[str, object], isatty: bool) -> ViewOptions:
    """Return top's own options, checked: a ValueError names the bad one and its range."""
    interval = _seconds(params, "top_interval")
    window = _seconds(params, "top_rate_window")
    if _given(params, "rows"):
        rows = int(_number(params, "rows", int))
        if rows < 1:
            raise ValueError(f"{OPTIONS['rows'].where} must be 1 or more, not {rows}")
    else:
        rows = rows_fitting(shutil.get_terminal_size((100, 40)).lines, 1)
    once = bool(params["once"]) or not isatty or bool(params["json"])
    # Two reads an interval apart: the rates are over that interval, whatever the window.
    if once:
        window = interval
    fit = params["rows"] is None
    return ViewOptions(interval, rows, once, bool(params["json"]), window, fit)


def run(
    settings: Settings, view: ViewOptions, say: Callable[[str], None], clock: Clock = wall_clock
) -> int:
    """Show the view until Ctrl-C (or SIGTERM, SIGHUP), or once; a server that cannot be read
    is said on its line, and a --once run that no server answered raises NothingRead; a
    terminal closed under the live view raises TerminalGone."""
    top = Top(
        settings.connection,
        settings.prefix_root,
        [q.name for q in settings.queues],
        view.rows,
        clock,
        view.window,
    )
    try:
        if view.once:
            return _once(top, settings.connection, view, say)
        _live(top, view)
    except KeyboardInterrupt:
        pass
    finally:
        top.close()
    return EXIT_OK


def _once(top: Top, connection: Connection, view: ViewOptions, say: Callable[[str], None]) -> int:
    screen = top.refresh()
    # Two reads: the rates need both.
    time.sleep(view.interval)
    screen = top.refresh()
    if not screen.answered and screen.failures:
        raise NothingRead.of(connection, screen.failures[0])
    width = shutil.get_terminal_size((120, 40)).columns
    say(as_json(screen, view.interval) if view.json else plain_text(screen, view.interval, width))
    return EXIT_OK


def _live(top: Top, view: ViewOptions) -> None:
    live = Live(console=Console(), screen=True, auto_refresh=False)
    reads = ReadsCutShort()
    try:
        with SignalInbox(LEAVE_SIGNALS, reads.interrupt) as signals, live:
            while True:
                with reads:
                    screen = top.refresh()
                live.update(Fitted(screen, view.interval), refresh=True)
                if view.fit:
                    size = shutil.get_terminal_size((100, 40))
                    top.resize(rows_for(screen, size.lines, size.columns, view.interval))
                if signals.wait(view.interval):
                    return
    except OSError as exc:
        if exc.errno not in HUNG_UP:
            raise
        raise TerminalGone(str(exc)) from None


class ReadsCutShort:
    """Cut a refresh's reads short at a leave signal (a server that hangs is not waited for).
    Anywhere else the signal only wakes the loop, which leaves between two refreshes: no
    exception lands in the middle of rich's drawing or of a finalizer, which swallows it."""

    def __init__(self) -> None:
        self.reading = False

    def __enter__(self) -> None:
        self.reading = True

    def __exit__(self, *_exc: object) -> None:
        self.reading = False

    def interrupt(self, _signum: int, _frame: FrameType | None) -> None:
        """Raise KeyboardInterrupt while reading; otherwise leave the signal to the loop."""
        if self.reading:
            raise KeyboardInterrupt
