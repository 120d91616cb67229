"""How one refresh of `sweeperd top` looks: the title, a line per server, the replicas, the
table (whole at 80 columns; narrower, it drops columns) and a note per row that could not be
read as usual."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from sweeperd.server.eviction import may_evict
from sweeperd.top.read import (
    ERROR,
    KEPT,
    LOGIN_REFUSED,
    MIGRATING,
    MOVED,
    OK,
    READ,
    REPLICA,
    STALE,
)
from sweeperd.top.refresh import QueueRow, Screen, ServerRow

# Before a name.
MARKS = {OK: "", STALE: "~", MIGRATING: "»", MOVED: "»", ERROR: "!", REPLICA: "≈"}
STYLES = {STALE: "dim", MIGRATING: "dim", MOVED: "dim", ERROR: "yellow", REPLICA: "cyan"}
# Characters a count or a rate may take.
CELL = 6
COLUMNS = ("expired", "overdue", "active", "pending", "dead", "rec/s", "dead/s")
DROPPED_FIRST = ("active", "owner", "dead", "dead/s", "node", "pending", "rec/s", "overdue")
# The queue's name is cut to no fewer characters (its mark included)
QUEUE_MIN = 8
# The smallest live view: the table's head, a row, the count.
MIN_COLUMNS, MIN_LINES = 30, 6
# The table's lines besides its rows: the head and its rule (a row is one line)
TABLE_HEAD = 2
# Characters between two columns.
GAP = 2
STALE_NOTE = "~ the last numbers read: their server cannot be read now (its line says why)"
# Before a name kept with no numbers: never read since the view started.
NEVER = "?"
NEVER_NOTE = "? never read: their server has not been read since top started (its line says why)"
REPLICA_NOTE = "≈ read on a replica: their primary cannot be read now (read-only; it may lag)"


def count(value: int | None, missing: str = "…") -> str:
    """Return a count in at most 6 characters: 99,999 (-9,999), then 123.5k (-123k), 12.3M, 1.2G:
    the first of these that fits, a unit taken only while under 1,000 of it."""
    if value is None:
        return missing
    shown = [f"{value:,}"]
    for size, unit in ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        scaled = value / size
        if round(abs(scaled), 1) < 1000:
            shown += [f"{scaled:.1f}{unit}", f"{scaled:.0f}{unit}"]
    return next((text for text in shown if len(text) <= CELL), shown[-1])


def rate(value: float | None) -> str:
    """Return a rate per second: one decimal under 100, whole above, compact above 99,999."""
    if value is None:
        return "-"
    if abs(value) < 100:
        return f"{value:.1f}"
    return count(round(value))


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for limit, unit, size in ((120, "s", 1), (7200, "m", 60), (172800, "h", 3600)):
        if seconds < limit:
            return f"{seconds / size:.1f}{unit}"
    days = seconds / 86400
    return f"{days:.1f}d" if days < 100 else f"{days:,.0f}d"


def uptime(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    return (f"{days}d" if days else "") + f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def letters(n: int) -> str:
    """Return the owner label of the n-th member: a … z, then aa, ab …"""
    high, low = divmod(n, 26)
    return (letters(high - 1) if high else "") + chr(ord("a") + low)


def mark(row: QueueRow) -> str:
    """Return what goes before a row's name: its state's mark, or NEVER for a row kept that was
    never read (it has no last numbers to keep)."""
    return NEVER if row.state in KEPT and row.as_of is None else MARKS[row.state]


def server_line(
    label: str, s: ServerRow, nodes: Mapping[str, str], standin: str | None, ever_read: bool
) -> Text:
    """Return one server: run_id, uptime, role and the verb, or why its queues cannot be read (and
    where they are read instead; whether its rows keep numbers read before, `ever_read`); a
    replica read in place of its primary names it as its role."""
    line = Text(f"{label} {s.node}  ")
    if s.error is not None:
        # The node is named already.
        error = s.error.replace(f" connecting to {s.node}.", ":")
        unreachable = "UNREACHABLE (replaced)" if s.replaced else "UNREACHABLE"
        rows = "rows as last read" if ever_read else "its queues never read"
        # It answered: not unreachable.
        if error.startswith(LOGIN_REFUSED):
            said = error
        else:
            said = f"{unreachable}: {error}" if not s.run_id else f"{error} ({rows})"
        line.append(said, style="bold red")
        if standin is not None:
            line.append(f"  queues read on {nodes[standin]}", style="bold")
    else:
        verb = "verb loaded" if s.verb_loaded else "verb NOT loaded (script executor)"
        role = s.role if s.reads_for is None else f"replica of {nodes.get(s.reads_for, '?')}"
        line.append(f"run_id {s.run_id[:12]}…  up {uptime(s.uptime_s)}  {role}  {verb}")
    if s.scan_error is not None:
        line.append(_unlisted(s), style="bold red")
    if may_evict(s.maxmemory_policy):
        line.append(f"  MAY EVICT queue keys ({s.maxmemory_policy})", style="bold red")
    if s.restarted:
        line.append(
            f"  RESTARTED since the view started (run_id was {s.first_run_id[:12]}…)",
            style="bold red",
        )
    return line


def _unlisted(s: ServerRow) -> str:
    """Return why discovery could not list a server's queues (its line says already when it cannot
    be reached), and what lists them: the user's right to SCAN, or the queues named."""
    said = "  its queues not listed" if not s.run_id else f"  queues not listed: {s.scan_error}"
    if s.scan_error is not None and s.scan_error.startswith("NOPERM"):
        return f"{said} (grant +scan, or give them with --queue)"
    return f"{said} (give them with --queue)"


def caption(screen: Screen, nodes: Mapping[str, str], cut: int = 0) -> str:
    """Return how many rows of how many queues, how many were read now, whose queues are unknown,
    and how many lines the terminal had no room for (`cut`)."""
    said = [f"{len(screen.rows)} of {screen.queues} queues shown, most expired first"]
    if screen.unread:
        said.append(f"{screen.queues - screen.unread} of {screen.queues} queues read")
    unlisted = [nodes[s.node] for s in screen.servers if s.scan_error is not None]
    if unlisted:
        which = "server " if len(unlisted) == 1 else "servers "
        said.append(f"{which}{', '.join(unlisted)} not listed")
    if cut:
        said.append(f"{cut} more line{'s' if cut > 1 else ''} in a taller terminal")
    return "; ".join(said)


@dataclass(frozen=True)
class QueueTable:
    """The rows, most expired first, in the columns that fit the width it is drawn at: the
    queue's name gives way first, down to 8 characters, then whole columns (DROPPED_FIRST);
    a number is never cut."""

    screen: Screen
    # Node -> its line's number.
    nodes: Mapping[str, str]
    # Member -> its letter.
    owners: Mapping[str, str]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        columns = self._cells()
        kept = list(columns)
        for name in DROPPED_FIRST:
            if _width(columns, kept) <= options.max_width:
                break
            if name in kept:
                kept.remove(name)
        grid = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
        )
        # cut, never wrapped.
        grid.add_column("queue", overflow="ellipsis", min_width=QUEUE_MIN)
        for name in kept:
            grid.add_column(name, justify="right", no_wrap=True)
        for n, row in enumerate(self.screen.rows):
            cells = [columns[name][n] for name in kept]
            grid.add_row(mark(row) + row.queue, *cells, style=STYLES.get(row.state))
        yield grid

    def _cells(self) -> dict[str, list[str]]:
        """Return each column's cells, by its header, in the order shown."""
        columns: dict[str, list[str]] = {"node": []}
        if self.owners:
            columns["owner"] = []
        columns |= {name: [] for name in COLUMNS}
        for row in self.screen.rows:
            missing = "…" if row.state in READ else "?"
            columns["node"].append(self.nodes.get(row.node, "?"))
            if self.owners:
                columns["owner"].append(self.owners.get(row.owner or "", "-"))
            for name, cell in zip(COLUMNS, _numbers(row, missing), strict=True):
                columns[name].append(cell)
        return columns


def _numbers(row: QueueRow, missing: str) -> tuple[str, ...]:
    return (
        count(row.expired, missing),
        age(row.oldest_overdue_s),
        count(row.active, missing),
        count(row.pending, missing),
        count(row.dead, missing),
        rate(row.recovered_per_s),
        rate(row.dead_per_s),
    )


def _width(columns: Mapping[str, list[str]], kept: list[str]) -> int:
    """Return the table's width with the `kept` columns whole, the queue's name at its narrowest."""
    widths = [max(map(cell_len, [name, *columns[name]])) for name in kept]
    return QUEUE_MIN + sum(width + GAP for width in widths)


def notes(screen: Screen) -> Iterator[Text]:
    """Yield a line per row with its own error or a slot on the move; one for the rows kept stale,
    one for the rows read on a replica."""
    for row in screen.rows:
        if row.error is not None:
            when = ""
            if row.state in KEPT:
                when = (
                    " (never read)"
                    if row.as_of is None
                    else f" (numbers as of {_clock(row.as_of)})"
                )
            yield Text(f"{mark(row)}{row.queue}: {row.error}{when}", style=STYLES[row.state])
    stale = [row for row in screen.rows if row.state == STALE and row.error is None]
    if any(row.as_of is not None for row in stale):
        yield Text(STALE_NOTE, style="dim")
    if any(row.as_of is None for row in stale):
        yield Text(NEVER_NOTE, style="dim")
    if any(row.state == REPLICA for row in screen.rows):
        yield Text(REPLICA_NOTE, style="dim")


def _clock(at: float | None) -> str:
    return "never" if at is None else time.strftime("%H:%M:%S", time.localtime(at))


def parts(screen: Screen, interval: float, live: bool = True) -> tuple[list[Text], QueueTable]:
    """Return the lines above the table (the title, the servers, the replicas) and the table."""
    how = (
        f"every {interval:g}s, rates over {screen.window_s:g}s  (read only; Ctrl-C quits)"
        if live
        else f"rates over {interval:g}s  (read only)"
    )
    title = Text(f"sweeperd top  {_clock(screen.at)}  {how}", style="bold")
    nodes = {s.node: str(n) for n, s in enumerate(screen.servers, 1)}
    standins = {s.reads_for: s.node for s in screen.servers if s.reads_for is not None}
    owners = {m: letters(screen.seen.get(m, n)) for n, m in enumerate(screen.members)}
    read = {row.node for row in screen.rows if row.as_of is not None}
    lines = [title]
    lines += (
        server_line(nodes[s.node], s, nodes, standins.get(s.node), s.node in read)
        for s in screen.servers
    )
    if owners:
        lines.append(Text("replicas: " + "  ".join(f"{owners[m]} {m}" for m in screen.members)))
    if screen.members_error is not None:
        lines.append(Text(f"replicas: cannot be read: {screen.members_error}", style="bold red"))
    return lines, QueueTable(screen, nodes, owners)


def renderable(screen: Screen, interval: float, live: bool = True) -> Group:
    """Return the whole view: the lines above the table, the table, the count under it, the
    notes."""
    head, table = parts(screen, interval, live)
    return Group(*head, table, Text(caption(screen, table.nodes)), *notes(screen))


@dataclass(frozen=True)
class Fitted:
    """The live view cut to the terminal it is drawn in, the count under the table always
    shown: rows go first (the count says how many are shown), then, for one row to stay, the
    notes and the lines above the table from the bottom up (the count says how many lines
    went). Below MIN_COLUMNS x MIN_LINES it says the terminal is too small."""

    screen: Screen
    interval: float

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width, height = options.max_width, options.height or console.height
        loose = options.update(height=None)
        if width < MIN_COLUMNS or height < MIN_LINES:
            said = f"top needs a terminal of {MIN_COLUMNS}x{MIN_LINES} at least: this one is "
            yield Text(f"{said}{width}x{height}", style="bold")
            return
        head, table = parts(self.screen, self.interval)

        def drawn(part: RenderableType) -> list[list[Segment]]:
            return console.render_lines(part, loose, pad=False)

        above = [line for text in head for line in drawn(text)]
        below = [line for text in notes(self.screen) for line in drawn(text)]
        rows, others = self.screen.rows, len(above) + len(below)
        shown, cut = rows, 0
        # The count's lines grow with what it says: settled by the third.
        for _ in range(3):
            count = drawn(Text(caption(replace(self.screen, rows=shown), table.nodes, cut)))
            # For the rows and the other lines.
            room = max(0, height - len(count) - TABLE_HEAD)
            fits = rows[: min(room, max(min(1, len(rows)), room - others))]
            if (fits, max(0, others - (room - len(fits)))) == (shown, cut):
                break
            shown, cut = fits, max(0, others - (room - len(fits)))
        screen = replace(self.screen, rows=shown)
        count = drawn(Text(caption(screen, table.nodes, cut)))
        below, gone = below[: max(0, len(below) - cut)], max(0, cut - len(below))
        above = above[: len(above) - gone]
        lines = [*above, *drawn(replace(table, screen=screen)), *count, *below]
        for n, line in enumerate(lines[:height]):
            if n:
                yield Segment.line()
            yield from line


def lines_besides_rows(screen: Screen, interval: float, width: int) -> int:
    """Return the lines the live view takes at `width` for all but its rows: the title, the server
    lines, the table's head and caption, the notes, each as wrapped."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    drawn: list[Group | Text] = [renderable(replace(screen, rows=()), interval), *notes(screen)]
    return sum(len(console.render_lines(part, pad=False)) for part in drawn)


def plain_text(screen: Screen, interval: float, width: int) -> str:
    """Return the same view as text without colours, for a pipe or a log."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    console.print(renderable(screen, interval, live=False))
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())
