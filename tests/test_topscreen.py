"""top's cells: every count and rate fits its six characters, the sign included."""

from __future__ import annotations

import pytest

from sweeperd.topscreen import CELL, count, rate


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
