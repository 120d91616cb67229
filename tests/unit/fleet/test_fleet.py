"""The fleet's primaries as layouts come and go: a primary no more keeps its series an hour."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from sweeperd.daemon.daemon import tuning
from sweeperd.fleet.fleet import RETIRED_TTL_S, Fleet
from sweeperd.metrics.registry import Metrics
from sweeperd.server.topology import Layout
from tests.support.clock import Clock
from tests.support.daemon_inprocess import settings_for

A, B = "10.0.0.1:6379", "10.0.0.2:6379"


class TestRetired:
    def test_a_primary_gone_an_hour_loses_its_series(self) -> None:
        """A failover that names a new host: the old one's restarts and sweeps stay (counters
        summed over time must not drop at once), then go after RETIRED_TTL_S; the new one's
        stay. No layout is read from a server: each is applied as the watch would."""
        settings = settings_for("redis://127.0.0.1:1/0")
        metrics = Metrics(CollectorRegistry(), version="test")
        clock = Clock(100.0)
        fleet = Fleet(
            settings.connection,
            metrics,
            tuning(settings),
            on_restart=lambda _node: None,
            clock=clock,
        )
        fleet.applied(Layout({A: ("10.0.0.1", 6379)}))
        fleet.members[A].node.restarts = 2
        fleet.applied(Layout({B: ("10.0.0.2", 6379)}))
        clock.now += RETIRED_TTL_S
        fleet.applied(Layout({B: ("10.0.0.2", 6379)}))
        assert [(s.name, s.restarts) for s in fleet.states()] == [(B, 0), (A, 2)]
        assert set(metrics.numbers.nodes) == {A, B}
        clock.now += 1
        fleet.applied(Layout({B: ("10.0.0.2", 6379)}))
        assert [(s.name, s.restarts) for s in fleet.states()] == [(B, 0)]
        assert set(metrics.numbers.nodes) == {B}
        fleet.stop(0.1)
