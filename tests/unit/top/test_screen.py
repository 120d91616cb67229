"""top's screen: every count and rate fits its six characters, the sign included; the live
view's rows leave room for every server and note."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console

from sweeperd.top.read import ERROR, MOVED, STALE
from sweeperd.top.refresh import QueueRow, Screen, ServerRow
from sweeperd.top.screen import (
    CELL,
    NEVER_NOTE,
    STALE_NOTE,
    Fitted,
    count,
    lines_besides_rows,
    notes,
    plain_text,
    rate,
)
from sweeperd.top.view import SPARE_LINES, rows_for


def drawn(screen: Screen, width: int, height: int) -> list[str]:
    """The live view's lines in a terminal of `width` x `height`, as the live view draws it
    (rich's screen mode hands its renderable the terminal's height)."""
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None)
    lines = console.render_lines(Fitted(screen, 1.0), console.options.update(height=height))
    return ["".join(segment.text for segment in line).rstrip() for line in lines]


def servers(n: int) -> tuple[ServerRow, ...]:
    return tuple(
        ServerRow(f"10.0.0.{k}:6379", run_id="r" * 40, role="master", verb_loaded=True)
        for k in range(1, n + 1)
    )


def rows_on(node: str, n: int, **fields: object) -> tuple[QueueRow, ...]:
    """`n` rows on `node`, most expired first, with `fields` in place of the defaults."""
    made = (QueueRow(f"queue{k}", node, 10 * (n - k)) for k in range(n))
    return tuple(replace(row, **fields) for row in made)  # type: ignore[arg-type]


class TestCells:
    @pytest.mark.parametrize(
        ("value", "shown"),
        [
            (0, "0"),
            (99_999, "99,999"),
            (100_000, "100.0k"),
            (999_999, "1.0M"),
            (123_456_789, "123.5M"),
            (1_500_000_000, "1.5G"),
            (-9_999, "-9,999"),
            (-12_345, "-12.3k"),
            (-123_456, "-123k"),
            (-99_999, "-100k"),
            (-999_999, "-1.0M"),
            (-1_234_567_890, "-1.2G"),
        ],
    )
    def test_a_count(self, value: int, shown: str) -> None:
        """The plain count while it fits, then the first unit under 1,000 with one decimal, or
        none where the sign leaves no room for it."""
        assert count(value) == shown
        assert len(shown) <= CELL

    @pytest.mark.parametrize(
        ("value", "shown"),
        [
            (0.04, "0.0"),
            (-99.5, "-99.5"),
            (-150.4, "-150"),
            (-12_345.0, "-12.3k"),
            (250e3, "250.0k"),
        ],
    )
    def test_a_rate(self, value: float, shown: str) -> None:
        """A rate: one decimal under 100, then as a count (negative while workers drain)."""
        assert rate(value) == shown
        assert len(shown) <= CELL


class TestLiveFit:
    def test_the_rows_leave_room_for_every_server_and_note(self) -> None:
        """Four servers, one unreachable with its rows kept, and a row's own error: the next
        refresh shows as many rows as fit under all of them as drawn at the terminal's width
        (a line that wraps takes two), and never fewer than five."""
        up = [ServerRow(f"10.0.0.{n}:6379", run_id="r" * 40) for n in range(1, 4)]
        servers = (*up, ServerRow("10.0.0.4:6379", error="connection refused"))
        rows = (
            QueueRow("a", "10.0.0.4:6379", 3, state=STALE),
            QueueRow("b", "10.0.0.1:6379", 1, state=ERROR, error="WRONGTYPE"),
            QueueRow("c", "10.0.0.2:6379", 0),
        )
        screen = Screen(at=0.0, servers=servers, rows=rows, queues=3, unread=2)
        assert len(list(notes(screen))) == 2  # b's error, and what ~ means
        besides = 1 + 4 + 2 + 1 + 2  # the title, the servers, the table's head, the count, notes
        assert lines_besides_rows(screen, 1.0, 100) == besides
        assert rows_for(screen, 40, 100, 1.0) == 40 - besides - SPARE_LINES
        assert lines_besides_rows(screen, 1.0, 50) == besides + 3 + 1 + 1 + 1  # wrapped: 3 servers,
        # the title, the count and what ~ means
        assert rows_for(screen, 10, 100, 1.0) == 5


class TestFitsTheTerminal:
    def test_a_small_terminal_shows_fewer_rows_and_says_how_many(self) -> None:
        """40 x 12 with two servers and six queues: the lines wrap, three rows fit, and the
        count under them says 3 of 6: the view never looks complete when it is not."""
        screen = Screen(at=0.0, servers=servers(2), rows=rows_on("10.0.0.1:6379", 6), queues=6)
        lines = [line for line in drawn(screen, 40, 12) if line]
        assert len(lines) == 12
        assert lines[-1] == "3 of 6 queues shown, most expired first"
        assert [line.split()[0] for line in lines[-4:-1]] == ["queue0", "queue1", "queue2"]

    def test_the_count_stays_when_the_other_lines_do_not_fit(self) -> None:
        """Ten servers in 40 x 12: one row stays, the server lines go from the bottom up, and
        the count says how many rows and how many lines are not shown."""
        screen = Screen(at=0.0, servers=servers(10), rows=rows_on("10.0.0.1:6379", 6), queues=6)
        lines = [line for line in drawn(screen, 40, 12) if line]
        assert len(lines) == 12
        head = lines_besides_rows(screen, 1.0, 40) - 3  # the title and servers: all but the
        # table's head and the count
        count = " ".join(lines[-2:])
        assert count == (
            f"1 of 6 queues shown, most expired first; {head - 7} more lines in a taller terminal"
        )
        assert lines[0].startswith("sweeperd top") and lines[-3].startswith("queue0")

    def test_rows_that_fit_are_all_drawn(self) -> None:
        """In a terminal big enough, the whole view: the title, the server, the table, the
        count."""
        screen = Screen(at=0.0, servers=servers(1), rows=rows_on("10.0.0.1:6379", 3), queues=3)
        lines = [line for line in drawn(screen, 100, 40) if line]
        assert len(lines) == 1 + 1 + 2 + 3 + 1
        assert lines[-1] == "3 of 3 queues shown, most expired first"

    @pytest.mark.parametrize(("width", "height"), [(25, 12), (80, 5)])
    def test_below_the_smallest_size_it_says_so(self, width: int, height: int) -> None:
        """At 25 columns (or 5 lines) no table fits: the view says so instead of drawing a
        part of itself."""
        screen = Screen(at=0.0, servers=servers(1), rows=rows_on("10.0.0.1:6379", 3), queues=3)
        said = " ".join(line for line in drawn(screen, width, height) if line)
        assert said == f"top needs a terminal of 30x6 at least: this one is {width}x{height}"


class TestNeverRead:
    def test_rows_never_read_say_so(self) -> None:
        """A server that answers but refuses every read since the view started (CLUSTERDOWN):
        its rows are marked ?, the note says never read, its line says its queues were never
        read: nothing speaks of last numbers there are none of."""
        [server] = servers(1)
        down = ServerRow(server.node, run_id=server.run_id, error="CLUSTERDOWN The cluster is down")
        screen = Screen(
            at=0.0,
            servers=(down,),
            rows=rows_on(server.node, 2, state=STALE, expired=None),
            queues=2,
            unread=2,
        )
        text = plain_text(screen, 1.0, 100).splitlines()
        assert (
            text[1] == f"1 {server.node}  CLUSTERDOWN The cluster is down (its queues never read)"
        )
        assert [line.split()[0] for line in text[4:6]] == ["?queue0", "?queue1"]
        assert text[-1] == NEVER_NOTE
        assert STALE_NOTE not in text

    def test_rows_read_before_keep_the_last_numbers(self) -> None:
        [server] = servers(1)
        down = ServerRow(server.node, run_id=server.run_id, error="CLUSTERDOWN The cluster is down")
        rows = rows_on(server.node, 2, state=STALE, as_of=1.0)
        screen = Screen(at=0.0, servers=(down,), rows=rows, queues=2, unread=2)
        text = plain_text(screen, 1.0, 100).splitlines()
        assert text[1].endswith("(rows as last read)")
        assert [line.split()[0] for line in text[4:6]] == ["~queue0", "~queue1"]
        assert text[-1] == STALE_NOTE

    def test_a_moved_row_never_read(self) -> None:
        """A row whose slot moved before it was ever read: its note says never read, not
        `numbers as of never`."""
        [server] = servers(1)
        [row] = rows_on(server.node, 1, state=MOVED, expired=None, error="MOVED 12 10.0.0.2:6379")
        said = [str(line) for line in notes(Screen(0.0, (server,), (row,), 1, unread=1))]
        assert said == ["?queue0: MOVED 12 10.0.0.2:6379 (never read)"]
