"""The audit's pace and its end: keys read at the rate asked with the time passed in, the
progress told after each call, and Ctrl-C ending the reading with what was found so far."""

from __future__ import annotations

import pytest
import redis

from sweeperd.audit.classes import AuditClass
from sweeperd.audit.reader import Clocks, NodeAudit, Pace
from sweeperd.cli.auditing import exit_code
from sweeperd.commands.audit import AuditResult
from sweeperd.commands.auditreport import audit_text
from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import Job, plant

Q = QueueKeys("q")
ROWS = 300


class FakeTime:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def stranded(r: redis.Redis) -> None:
    plant(r, Q, [Job(f"s{n:03}", {"state": "active"}) for n in range(ROWS)])


class TestPace:
    """--rate and the progress."""

    def test_the_rate_is_kept_on_the_time_passed_in(self, r: redis.Redis) -> None:
        """At 100 keys/s the 300 rows (each SCAN call counted as the 50 keys it looked at, at
        least) and their second read take 6 s and a few calls' more of the clock passed in, and
        the progress is told after each call, rising."""
        told: list[int] = []
        fake = FakeTime()
        clocks = Clocks(fake.clock, fake.sleep, progress=told.append)
        pace = Pace(grace_s=0, rate=100, scan_count=50)
        stranded(r)
        [audit] = NodeAudit(r, "emq", pace, clocks).audit(["q"])
        assert len(audit.found[AuditClass.STRANDED]) == ROWS
        assert 6.0 <= fake.now <= 7.0
        assert told == sorted(told) and told[-1] >= ROWS

    def test_the_grace_is_waited_on_the_clock(self, r: redis.Redis) -> None:
        """The second read waits the grace after the last candidate found, on the clock passed
        in: no real sleep."""
        stranded(r)
        fake = FakeTime()
        pace = Pace(grace_s=5, rate=1e9)
        NodeAudit(r, "emq", pace, Clocks(fake.clock, fake.sleep)).audit(["q"])
        assert fake.slept[-1] == pytest.approx(5)


class TestInterrupted:
    """Ctrl-C: the reading stops; what was found is read again and reported."""

    def test_stops_and_reports_what_was_found(self, r: redis.Redis) -> None:
        """Stopped after the first SCAN call, the audit reports that call's stranded rows only,
        marked interrupted, exit 130, after the second read of them."""
        stranded(r)
        calls: list[int] = []
        clocks = Clocks(interrupted=lambda: bool(calls), progress=calls.append)
        node = NodeAudit(r, "emq", Pace(grace_s=0, scan_count=50), clocks)
        [audit] = node.audit(["q"])
        assert node.interrupted
        assert 0 < len(audit.found[AuditClass.STRANDED]) < ROWS
        result = AuditResult(queues=[audit], nodes=[node.node], interrupted=True)
        assert exit_code(result) == 130
        assert "(interrupted: what was read so far)" in audit_text(result, Pace())
