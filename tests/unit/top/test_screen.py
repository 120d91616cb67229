"""top's screen: every count and rate fits its six characters, the sign included; the live
view's rows leave room for every server and note."""

from __future__ import annotations

import pytest

from sweeperd.top.read import ERROR, STALE
from sweeperd.top.refresh import QueueRow, Screen, ServerRow
from sweeperd.top.screen import CELL, count, lines_besides_rows, notes, rate
from sweeperd.top.view import SPARE_LINES, rows_for


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
