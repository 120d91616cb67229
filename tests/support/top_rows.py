"""`sweeperd top`'s rows read back off its screen, by queue, for the tests to compare."""

from __future__ import annotations

from sweeperd.top.refresh import Screen


def rows_of(screen: Screen) -> dict[str, tuple[object, ...]]:
    """Each row's state and counts, by queue."""
    return {
        row.queue: (row.state, row.expired, row.active, row.pending, row.dead, row.failed)
        for row in screen.rows
    }
