"""The audit's verdict on one id, as a pure function (docs/commands.md#what-each-class-means)."""

from __future__ import annotations

import pytest

from sweeperd.audit.classes import AuditClass, Observation, classify, is_unreachable

NOW = 1_767_225_600_000
DAY = 86_400_000


def seen(
    row: str = "hash",
    state: bytes | None = b"active",
    active: float | None = None,
    pending: float | None = None,
    dead: float | None = None,
) -> Observation:
    return Observation(b"j", row, state, active, pending, dead)


class TestClassify:
    """Each class, and what is no finding."""

    @pytest.mark.parametrize(
        ("observation", "expected"),
        [
            (seen(active=NOW), None),
            (seen(state=b"pending", pending=0), None),
            (seen(state=b"dead", dead=0), None),
            (seen(row="none", state=None, active=NOW), None),
            (seen(), AuditClass.STRANDED),
            (seen(active=NOW + DAY + 1), AuditClass.UNREACHABLE_DEADLINE),
            (seen(active=float("inf")), AuditClass.UNREACHABLE_DEADLINE),
            (seen(row="none", state=None, active=float("inf")), AuditClass.UNREACHABLE_DEADLINE),
            (seen(state=b"pending", pending=0, dead=0), AuditClass.TWO_SETS),
            (seen(row="none", state=None, active=NOW, dead=0), AuditClass.TWO_SETS),
            (seen(state=b"pending", dead=0), AuditClass.STATE_MISMATCH),
            (seen(state=b"completed", pending=0), AuditClass.STATE_MISMATCH),
            (seen(state=None, active=NOW), AuditClass.STATE_MISMATCH),
            (seen(row="string", state=None, pending=0), AuditClass.STATE_MISMATCH),
            (seen(state=b"completed"), AuditClass.STATE_MISMATCH),
            (seen(state=b"pending", active=NOW + 2 * DAY), AuditClass.STATE_MISMATCH),
            (seen(row="none", state=None, pending=0), AuditClass.ROWLESS),
            (seen(row="none", state=None, dead=0), AuditClass.ROWLESS),
            (seen(state=b"pending"), AuditClass.SETLESS),
            (seen(state=b"dead"), AuditClass.SETLESS),
        ],
    )
    def test_class(self, observation: Observation, expected: AuditClass | None) -> None:
        """The class is the first of the table's rows that applies; None when all agree."""
        assert classify(observation, NOW, DAY) is expected

    def test_deadline_at_the_longest_lease_is_reachable(self) -> None:
        """A lease due exactly now + the longest lease is reachable; one ms more is not."""
        assert not is_unreachable(NOW + DAY, NOW, DAY)
        assert is_unreachable(NOW + DAY + 1, NOW, DAY)
        assert not is_unreachable(float("-inf"), NOW, DAY)
