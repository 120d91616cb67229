"""The evidence survives: every per-queue series through a one-replica outage of six heartbeat
times to live, with the counters going on after it; recovered_total summed over replicas equal
to the keyspace through a takeover."""

from __future__ import annotations

import re
import time
from pathlib import Path

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import PAST_MS, lease, now_ms
from tests.support.servers import RedisServer

SERIES = re.compile(r'^(sweeperd_\w+\{[^}]*queue="[^"]+"[^}]*\})', re.M)
HEARTBEAT_S = 0.5  # the shortest a member's time to live may be
OUTAGE_S = 12 * HEARTBEAT_S  # six times to live unanswered: the membership lapses, and more


def queue_series(d: DaemonProcess) -> set[str]:
    """Every per-queue series the daemon exports now, by name and labels."""
    return set(SERIES.findall(d.metrics_text()))


def kept(before: set[str], now: set[str]) -> None:
    """No series of `before` is gone; the only new ones count the outage's failures."""
    assert before <= now, before - now
    assert all(s.startswith("sweeperd_sweep_failures_total{") for s in now - before), now - before


class TestOutage:
    def test_a_one_replica_outage_keeps_every_series(
        self, tmp_path: Path, server_kind: str
    ) -> None:
        """The server down for six of the replica's times to live (its membership lapses), one
        replica sharing: no per-queue series goes at any scrape, and after the restart
        recovered_total goes on from where it was."""
        server = RedisServer(tmp_path / "server", kind=server_kind, appendonly=True).start()
        try:
            with server.client() as c:
                for job in (b"a", b"b", b"c"):
                    lease(c, QueueKeys("q"), job, PAST_MS, attempts="1")
            args = (
                "--redis-url",
                server.url,
                "-q",
                "q",
                "--interval",
                "0.5",
                "--heartbeat",
                str(HEARTBEAT_S),
                "--max-stalled",
                "5",
                "--socket-timeout",
                "0.5",
            )
            with DaemonProcess(tmp_path, *args) as d:
                d.wait_value("sweeperd_recovered_total", 3, queue="q")
                before = queue_series(d)
                server.stop()
                ends = time.monotonic() + OUTAGE_S
                scrapes = 0
                while time.monotonic() < ends:
                    kept(before, queue_series(d))
                    scrapes += 1
                    time.sleep(HEARTBEAT_S / 2)
                assert d.events("membership_lost")  # it did lapse: its heartbeats unanswered
                server.start()
                with server.client() as c:
                    lease(c, QueueKeys("q"), b"d", PAST_MS, attempts="1")
                d.wait_value("sweeperd_recovered_total", 4, queue="q")
                kept(before, queue_series(d))
                assert d.stop() == 0
            print(f"\n{scrapes} scrapes in the outage, {len(before)} per-queue series each")
        finally:
            server.stop()


QUEUES = [f"t{n:02}" for n in range(40)]


def recovered_in_keyspace(c: redis.Redis) -> int:
    """Recovered rows: every lease is seeded with attempts 1 and recovered at most once."""
    return sum(int(c.zcard(QueueKeys(q).pending)) for q in QUEUES)


def summed(daemons: list[DaemonProcess]) -> float:
    return sum(d.total("sweeperd_recovered_total") for d in daemons)


class TestTakeover:
    def test_summed_recovered_equals_the_keyspace_across_a_takeover(
        self, tmp_path: Path, redis_server: RedisServer, r: redis.Redis
    ) -> None:
        """A second replica joins while leases fall due: the queues it takes keep their
        counters on the first, so the sum over both never drops and ends equal to the
        recovered rows. Half the leases fall due before it joins, half once it owns queues
        (however slowly it started), so both replicas recover some."""

        def seed(first_n: int) -> int:
            """200 leases over the queues, falling due one every 10 ms from now: the last's."""
            start = now_ms()
            pipe = r.pipeline(transaction=False)
            for n in range(first_n, first_n + 200):
                lease(
                    pipe,
                    QueueKeys(QUEUES[n % len(QUEUES)]),
                    f"j{n}".encode(),
                    deadline_ms=start + 10 * (n - first_n),
                    attempts="1",
                )
            pipe.execute()
            return start + 2000

        seed(0)
        args = (
            "--redis-url",
            redis_server.url,
            "-q",
            ",".join(QUEUES),
            "--interval",
            "0.3",
            "--heartbeat",
            "1",
            "--max-stalled",
            "5",
        )
        with DaemonProcess(tmp_path, *args, "--instance-id", "first") as first:
            wait_until(lambda: summed([first]) >= 100, what="a quarter recovered")
            with DaemonProcess(tmp_path, *args, "--instance-id", "second") as second:
                both = [first, second]
                seen = [summed(both)]
                wait_until(lambda: second.value("sweeperd_owned_queues"), what="a share taken")
                last_due = seed(200)
                while now_ms() < last_due + 1000:
                    seen.append(summed(both))
                    time.sleep(0.2)
                wait_until(
                    lambda: summed(both) == recovered_in_keyspace(r) == 400,
                    what=f"the sum {summed(both)} equal to the keyspace",
                )
                seen.append(summed(both))
                assert seen == sorted(seen)  # never dropped at a scrape
                assert second.total("sweeperd_recovered_total") > 0  # it took queues over
                assert first.total("sweeperd_ownership_changes_total") >= 1
                assert second.stop() == 0
            assert first.stop() == 0
