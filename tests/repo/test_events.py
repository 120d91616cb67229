"""The events the package logs are the events docs/operations.md names, every one of them."""

from __future__ import annotations

import io
import json

from sweeperd.constants import QueueMetrics
from sweeperd.fleet.ledger import Ledger
from sweeperd.keyspace import QueueKeys
from sweeperd.logs import configure_logging
from sweeperd.metrics.numbers import SweepNumbers
from sweeperd.verb.replies import Call, CallResult, SweepReply
from tests.support.events import documented, logged
from tests.support.paths import REPO


class TestEvents:
    def test_every_logged_event_is_documented(self) -> None:
        """No event reaches a log that the Events list does not name."""
        assert logged() - documented() == set()

    def test_every_documented_event_is_logged(self) -> None:
        """The Events list names no event the package no longer logs."""
        assert documented() - logged() == set()

    def test_the_reading_finds_the_events(self) -> None:
        """The two readings are not empty: a few events every run logs are in both."""
        assert {"sweep", "sweep_failed", "started", "stopped"} <= logged() & documented()


class TestTheShownLine:
    def test_the_json_line_docs_show_is_one_the_ledger_writes(self) -> None:
        """docs/operations.md's `sweep` line has exactly the keys, and the values, a real one
        has (its timestamp apart), rendered by the JSON logs."""
        out = io.StringIO()
        configure_logging("json", "info", out)
        ledger = Ledger(SweepNumbers(QueueMetrics.BASIC), "redis-0:6379")
        reply = SweepReply(
            recovered=(b"welcome-3", b"welcome-2"), dead=(b"poison-1",), exempt=(b"welcome-2",)
        )
        ledger.record("emails", CallResult(Call(QueueKeys("emails"), 3, 1000), reply), 1.7e9)
        written = json.loads(out.getvalue())
        text = (REPO / "docs" / "operations.md").read_text()
        shown = json.loads(text.split("```json\n", 1)[1].split("\n```", 1)[0])
        assert list(shown) == list(written)
        assert {k: v for k, v in shown.items() if k != "timestamp"} == {
            k: v for k, v in written.items() if k != "timestamp"
        }
