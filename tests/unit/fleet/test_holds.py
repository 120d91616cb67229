"""A held queue in the ledger: a hold ends when a call of the queue runs, never when one fails."""

from __future__ import annotations

from structlog.testing import capture_logs

from sweeperd.constants import QueueMetrics
from sweeperd.fleet.holds import Holds
from sweeperd.fleet.ledger import Ledger
from sweeperd.keyspace import QueueKeys
from sweeperd.metrics.numbers import SweepNumbers
from sweeperd.reasons import Reason, SweepError
from sweeperd.verb.replies import Call, CallResult, SweepReply
from tests.support.clock import Clock

NODE = "n:1"


def result(reply: SweepReply | SweepError) -> CallResult:
    return CallResult(Call(QueueKeys("q"), 1, 10), reply, None)


def held(holds: Holds) -> tuple[float, float]:
    """What the holds export: the queues held now and the oldest hold's age."""
    samples = {s.name: s.value for family in holds.collect() for s in family.samples}
    return samples["sweeperd_held_queues"], samples["sweeperd_oldest_hold_age_seconds"]


class TestHoldsInTheLedger:
    def test_a_failure_keeps_the_hold_and_a_reply_ends_it(self) -> None:
        """Held (migrating), then a timeout, a failed tick and a failed call in a round: still
        held, its age growing, no sweep_resumed; then a reply: resumed once, with how long."""
        clock = Clock(100.0)
        numbers = SweepNumbers(QueueMetrics.BASIC)
        numbers.add_queue("q")
        ledger = Ledger(numbers, NODE, Holds(clock))
        timeout = SweepError(Reason.TIMEOUT, "timed out")
        with capture_logs() as logs:
            ledger.hold("q", Reason.MIGRATING)
            clock.now += 5
            ledger.fail("q", timeout)
            ledger.fail_tick(["q"], timeout, duration_s=0.1)
            ledger.record("q", result(timeout), 1.0)
            ledger.record_round([("q", result(timeout))], 1.0, duration_s=0.1)
            assert held(ledger.holds) == (1, 5)
            clock.now += 2
            ledger.record_round([("q", result(SweepReply((), (), (), 0)))], 2.0, duration_s=0.1)
        assert held(ledger.holds) == (0, 0)
        events = [e for e in logs if e["event"] in ("sweep_held", "sweep_resumed")]
        assert [(e["event"], e.get("held_s")) for e in events] == [
            ("sweep_held", None),
            ("sweep_resumed", 7.0),
        ]
        assert numbers.queues["q"].failures == {"timeout": 4}
