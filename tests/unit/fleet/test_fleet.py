"""The fleet's primaries as layouts come and go, its routing of queues to them (a pure function
of the layout and the key root, tested without threads), and its wakes of queues at their
deadlines, only where they are still served."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from sweeperd.config.settings import QueueSettings
from sweeperd.constants import QueueMetrics
from sweeperd.daemon.daemon import tuning
from sweeperd.fleet.fleet import RETIRED_TTL_S, Fleet
from sweeperd.fleet.outcome import Outcome
from sweeperd.fleet.routes import Routes, Slots
from sweeperd.keyspace import QueueKeys
from sweeperd.metrics.registry import Metrics
from sweeperd.server.topology import Layout, slot_of
from tests.support.clock import Clock
from tests.support.daemon_inprocess import settings_for
from tests.support.helpers import lease, server_ms
from tests.support.servers import RedisServer, free_port

B = "10.0.0.2:6379"


def queue(name: str) -> QueueSettings:
    return QueueSettings(name, 5.0, 1, 100)


class TestRetired:
    def test_a_primary_gone_an_hour_loses_its_series(
        self, server_kind: str, tmp_path: Path
    ) -> None:
        """A failover that names a new host: the old one's restarts and sweeps stay (counters
        summed over time must not drop at once), then go after RETIRED_TTL_S; the new one's
        stay. The layouts are applied as the watch would; the old primary is a real server that
        restarts twice under the fleet's sweeps."""
        with RedisServer(tmp_path, kind=server_kind) as server:
            a = server.node
            settings = settings_for(server.url)
            metrics = Metrics(CollectorRegistry(), version="test")
            clock = Clock(100.0)
            told: list[Outcome] = []
            fleet = Fleet(
                settings.connection, metrics, tuning(settings), report=told.append, clock=clock
            )
            fleet.apply(Layout({a: ("127.0.0.1", server.port)}))
            fleet.sweep([queue("q")])
            for _ in range(2):
                server.restart()
                fleet.sweep([queue("q")])
            assert told == [Outcome(restarted=True)] * 2
            fleet.apply(Layout({B: ("10.0.0.2", 6379)}))
            clock.now += RETIRED_TTL_S
            fleet.apply(Layout({B: ("10.0.0.2", 6379)}))
            assert [(s.name, s.restarts) for s in fleet.states()] == [(B, 0), (a, 2)]
            assert set(metrics.numbers.nodes) == {a, B}
            clock.now += 1
            fleet.apply(Layout({B: ("10.0.0.2", 6379)}))
            assert [(s.name, s.restarts) for s in fleet.states()] == [(B, 0)]
            assert set(metrics.numbers.nodes) == {B}
            fleet.stop(0.1)


class TestSeriesOnTheirNode:
    """With --queue-metrics full, each queue's sweeps, ghosts and histograms are there at 0 on
    its node as soon as the fleet knows the route."""

    def value(self, metrics: Metrics, queue: str, node: str) -> float | None:
        return metrics.registry.get_sample_value(
            "sweeperd_sweeps_total", {"queue": queue, "node": node}
        )

    def test_a_standalone_server_down_is_the_queues_node(self) -> None:
        """Standalone: the URL's server is the node before it ever answers."""
        settings = settings_for(f"redis://127.0.0.1:{free_port()}/0")
        metrics = Metrics(CollectorRegistry(), version="test", level=QueueMetrics.FULL)
        metrics.numbers.add_queue("q")
        fleet = Fleet(settings.connection, metrics, tuning(settings), report=lambda _: None)
        assert self.value(metrics, "q", settings.connection.node) is None
        fleet.refresh()
        assert self.value(metrics, "q", settings.connection.node) == 0
        fleet.stop(0.1)

    def test_a_migrated_queue_has_a_series_on_each_node(self) -> None:
        """Cluster: each queue is at 0 on the primary of its slot in the map read; a slot that
        moves gives its queue a second series on its new primary, the first one kept."""
        settings = settings_for("redis://127.0.0.1:7000/0")
        metrics = Metrics(CollectorRegistry(), version="test", level=QueueMetrics.FULL)
        names = [f"q{n}" for n in range(20)]
        for name in names:
            metrics.numbers.add_queue(name)
        fleet = Fleet(settings.connection, metrics, tuning(settings), report=lambda _: None)
        layout = TestRoutes().layout()
        fleet.apply(layout)
        home = {n: layout.owner(slot_of(QueueKeys(n).active)) or "" for n in names}
        assert set(home.values()) == {"a:1", "b:1"}
        for name in names:
            assert [self.value(metrics, name, node) for node in ("a:1", "b:1")] == [
                0 if home[name] == node else None for node in ("a:1", "b:1")
            ]
        moved = next(n for n in names if home[n] == "a:1")
        owners = tuple(
            "b:1" if slot == slot_of(QueueKeys(moved).active) else owner
            for slot, owner in enumerate(layout.owners or ())
        )
        fleet.apply(Layout(layout.primaries, owners))
        assert [self.value(metrics, moved, node) for node in ("a:1", "b:1")] == [0, 0]
        fleet.stop(0.1)


class TestRoutes:
    def layout(self) -> Layout:
        """Two primaries splitting the slots at 8192."""
        owners = tuple("a:1" if slot < 8192 else "b:1" for slot in range(16384))
        return Layout({"a:1": ("a", 1), "b:1": ("b", 1)}, owners)

    def test_each_queue_goes_to_the_owner_of_its_slot(self) -> None:
        """Queues are grouped by the member owning their slot, in their order."""
        names = [f"q{n}" for n in range(40)]
        routes = Routes(self.layout(), Slots("emq"), {"a:1", "b:1"})
        routed, unrouted = routes.split([queue(n) for n in names])
        assert unrouted == []
        expected = {
            owner: [n for n in names if (slot_of(QueueKeys(n).active) < 8192) == (owner == "a:1")]
            for owner in ("a:1", "b:1")
        }
        assert {k: [q.name for q in v] for k, v in routed.items()} == expected
        assert all(expected.values())

    def test_the_key_root_is_part_of_the_slot(self) -> None:
        """The slot is the hash tag's: the same queue under another root is the same slot."""
        slots = Slots("jobs")
        assert slots("q7") == slot_of(QueueKeys("q7", "jobs").active) == slot_of("x:{q7}:y")

    def test_one_primary_owns_every_queue_without_a_slot(self) -> None:
        """A layout of one primary (no slot map): every queue is its (none without its member),
        and no slot is computed nor kept (100,000 of them were 6.7 MiB)."""
        slots = Slots("emq")
        routes = Routes(Layout({"a:1": None}), slots, {"a:1"})
        assert routes.split([queue("q1"), queue("q2")]) == ({"a:1": [queue("q1"), queue("q2")]}, [])
        assert routes.split([]) == ({}, [])
        other = Routes(Layout({"a:1": None}), slots, {"b:1"})
        assert other.split([queue("q1"), queue("q2")]) == ({}, [queue("q1"), queue("q2")])
        assert slots._slots == {}

    def test_a_slot_without_a_member_is_unrouted(self) -> None:
        """A primary of the layout the fleet has no member for, a slot nobody serves (None
        mid-failover), or no layout at all: the queue is unrouted."""
        layout = self.layout()
        half = Routes(layout, Slots("emq"), {"a:1"})
        names = [f"q{n}" for n in range(20)]
        routed, unrouted = half.split([queue(n) for n in names])
        assert set(routed) == {"a:1"}
        assert {q.name for q in unrouted} == {n for n in names if half.owner(n) is None}
        assert unrouted and all(
            layout.owner(slot_of(QueueKeys(q.name).active)) == "b:1" for q in unrouted
        )
        nobody = Routes(Layout({"a:1": ("a", 1)}, (None,) * 16384), Slots("emq"), {"a:1"})
        assert nobody.split([queue("q1")]) == ({}, [queue("q1")])
        assert Routes(None, Slots("emq"), {"a:1"}).owners(["q1", "q2"]) == {None}


class TestWakes:
    def fleet(self, server: RedisServer) -> tuple[Fleet, Metrics]:
        """A fleet with deadline wakes, its one primary the server, series per queue."""
        settings = settings_for(server.url)
        metrics = Metrics(CollectorRegistry(), version="test", level=QueueMetrics.FULL)
        wakes = replace(tuning(settings), at_deadlines=True)
        made = Fleet(settings.connection, metrics, wakes, report=lambda _: None)
        made.apply(Layout({server.node: ("127.0.0.1", server.port)}))
        return made, metrics

    def sweeps(self, metrics: Metrics, queue: str, node: str) -> float | None:
        return metrics.registry.get_sample_value(
            "sweeperd_sweeps_total", {"queue": queue, "node": node}
        )

    def test_only_a_queue_still_swept_here_is_woken(self, server_kind: str, tmp_path: Path) -> None:
        """Queues armed by a sweep, then b and c owned no more (another replica's now): b has
        no wake left; c, armed again by a sweep that ended after (a tick in flight), is not
        swept at its wake; a is."""
        with RedisServer(tmp_path, kind=server_kind) as server, server.client() as r:
            fleet, metrics = self.fleet(server)
            fleet.own([queue("a"), queue("b"), queue("c")])
            for name in ("a", "b", "c"):
                metrics.numbers.add_queue(name)
                lease(r, QueueKeys(name), b"j", server_ms(r) + 3_000, attempts="1")
            fleet.sweep([queue("a"), queue("b")])
            fleet.own([queue("a")])
            fleet.sweep([queue("c")])
            at = fleet.next_wake()
            assert at is not None
            fleet.wake(at + 5)
            assert [self.sweeps(metrics, n, server.node) for n in ("a", "b", "c")] == [2, 1, 1]
            fleet.stop(0.1)

    def test_a_queue_whose_slot_moved_is_not_woken_on_its_old_primary(
        self, server_kind: str, tmp_path: Path
    ) -> None:
        """A queue armed on one primary, then its slot served by another: its wake there sweeps
        nothing (nor fails: the new primary arms its own wakes when it sweeps it)."""
        with RedisServer(tmp_path, kind=server_kind) as server, server.client() as r:
            fleet, metrics = self.fleet(server)
            fleet.own([queue("a")])
            metrics.numbers.add_queue("a")
            lease(r, QueueKeys("a"), b"j", server_ms(r) + 3_000, attempts="1")
            fleet.sweep([queue("a")])
            at = fleet.next_wake()
            assert at is not None
            moved = slot_of(QueueKeys("a").active)
            owners = tuple(B if slot == moved else server.node for slot in range(16384))
            fleet.apply(
                Layout({server.node: ("127.0.0.1", server.port), B: ("10.0.0.2", 6379)}, owners)
            )
            fleet.wake(at + 5)
            assert self.sweeps(metrics, "a", server.node) == 1
            assert self.sweeps(metrics, "a", B) == 0  # there at 0 from the layout that moved it
            assert (
                metrics.registry.get_sample_value(
                    "sweeperd_sweep_failures_total", {"queue": "a", "reason": "connection"}
                )
                is None
            )
            fleet.stop(0.1)

    def test_a_queue_moved_there_and_back_is_swept_on_each_owner(
        self, server_kind: str, tmp_path: Path
    ) -> None:
        """A queue armed on A (its lease due in 3 s), its slot moved to B and its lease with
        it, due there at once; then back to A, due at once again: each owner's scheduled tick
        sweeps it, A's wake from before the move sweeps nothing while B serves it, and B's wake
        (none: B found nothing left) holds nothing back once it is A's again."""
        with (
            RedisServer(tmp_path / "a", kind=server_kind) as a,
            RedisServer(tmp_path / "b", kind=server_kind) as b,
        ):
            fleet, metrics = self.fleet(a)
            keys, slot = QueueKeys("q"), slot_of(QueueKeys("q").active)
            primaries = {a.node: ("127.0.0.1", a.port), b.node: ("127.0.0.1", b.port)}

            def owned_by(server: RedisServer) -> Layout:
                owners = tuple(server.node if s == slot else a.node for s in range(16384))
                return Layout(primaries, owners)

            def moved_to(server: RedisServer, job: bytes) -> None:
                """The slot and the queue's keys on `server` now, its lease due at once."""
                for other in (a, b):
                    with other.client() as r:
                        r.flushall()
                with server.client() as r:
                    lease(r, keys, job, server_ms(r) - 1, attempts="1")
                fleet.apply(owned_by(server))

            metrics.numbers.add_queue("q")
            fleet.own([queue("q")])
            with a.client() as r:
                lease(r, keys, b"early", server_ms(r) + 3_000, attempts="1")
            fleet.sweep([queue("q")])
            armed = fleet.next_wake()
            assert armed is not None
            moved_to(b, b"there")
            fleet.sweep([queue("q")])
            fleet.wake(armed + 5)
            assert (self.sweeps(metrics, "q", a.node), self.sweeps(metrics, "q", b.node)) == (1, 1)
            moved_to(a, b"back")
            fleet.sweep([queue("q")])
            assert (self.sweeps(metrics, "q", a.node), self.sweeps(metrics, "q", b.node)) == (2, 1)
            with a.client() as r:
                assert r.zcard(keys.active) == 0
            fleet.stop(0.1)
