"""The closing line of a repair, as a pure function of what was put back and what the sweep
after it took: the jobs another sweep (a daemon's) took first are said, not lost."""

from __future__ import annotations

from sweeperd.commands.audit import Repair
from sweeperd.commands.auditreport import repair_json, repair_text
from sweeperd.commands.outcome import OnceResult


def swept(**ids: list[bytes]) -> OnceResult:
    return OnceResult("q", "native", "r1", dry_run=False, max_stalled=2, **ids)  # type: ignore[arg-type]


class TestRepairLine:
    def test_taken_by_another_sweep_first(self) -> None:
        """Three put back; the sweep recovered one of them and dead-lettered one (beside a lease
        of its own, not counted here): the third was taken by another sweep first."""
        done = Repair("q", [b"a", b"b", b"c"], swept(recovered=[b"a", b"x"], dead=[b"b"]))
        assert repair_text(done) == (
            "repaired q: 3 stranded put back in active as expired leases; the counted sweep "
            "recovered 1 of them (0 exempt: lease from an earlier server run), dead-lettered 1 "
            "(max_stalled 2), 1 taken by another sweep (a daemon's) first"
        )
        assert repair_json(done) == {
            "queue": "q",
            "put": ["a", "b", "c"],
            "recovered": ["a"],
            "exempt": [],
            "dead": ["b"],
            "error": None,
        }

    def test_nothing_put_back(self) -> None:
        """Every stranded job changed since it was read: none put back, no sweep, said so."""
        assert repair_text(Repair("q", [])) == (
            "repaired q: 0 stranded put back in active as expired leases"
        )
