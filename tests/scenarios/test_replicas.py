"""Three `sweeperd run` replicas on one real server share 300 queues; one is killed, one stops."""

from __future__ import annotations

import re
import signal
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys, members_key
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import hash_of, lease, members, now_ms, owned_by, server_ms
from tests.support.servers import RedisServer

QUEUES = [f"q{n:03}" for n in range(300)]
LEASES_PER_QUEUE = 8
# Time runs at half the pace of a deployment: what is checked is relative to the interval and
# the heartbeat (calls per interval, a takeover within two TTLs), not their length.
EXPIRY_SPAN_MS = (1_000, 20_000)  # lease deadlines spread over this, from the seeding on
MAX_STALLED = 5  # a budget no lease reaches: every recovered row ends with stalled = 1
INTERVAL_S = 0.5
HEARTBEAT_S = 2.0
TAKEOVER_BOUND_S = 2 * HEARTBEAT_S  # docs/topologies.md's bound: two heartbeat TTLs
WINDOW_S = 3.0  # the settled window in which the calls of the three are counted
IDS = ("r1", "r2", "r3")
OWNED_ONLY = "sweeperd_expired_leases"  # a gauge of the queue's state: only its owner exports it
ROOT = "killcount"  # TestKillCountsOnce's key root
SAMPLE = re.compile(r'^(sweeperd_\w+)\{queue="([^"]+)"\} (\S+)$', re.M)


def per_queue(daemon: DaemonProcess, name: str) -> dict[str, float]:
    """One per-queue series of a live replica, by queue (a quick read of 6,000 lines)."""
    text = daemon.metrics_text()
    return {q: float(v) for metric, q, v in SAMPLE.findall(text) if metric == name}


def seed(client: redis.Redis) -> int:
    """Leases of every queue expiring continuously over EXPIRY_SPAN_MS; returns how many."""
    start = now_ms()
    low, high = EXPIRY_SPAN_MS
    count = len(QUEUES) * LEASES_PER_QUEUE
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        keys = QueueKeys(QUEUES[n % len(QUEUES)])
        deadline = start + low + (high - low) * n // count
        lease(pipe, keys, f"j{n}".encode(), deadline_ms=deadline, attempts="1", state="active")
    pipe.execute()
    return count


@dataclass
class Run:
    """What the scenario saw, for the tests below to judge."""

    client: redis.Redis
    leases: int
    settled_shares: dict[str, set[str]] = field(default_factory=dict)  # OWNED_ONLY series
    landing: str = ""
    calls_in_window: float = 0.0
    would_be_calls: float = 0.0
    killed_queues: list[str] = field(default_factory=list)
    takeover_s: dict[str, float] = field(default_factory=dict)  # queue -> kill to first sweep
    deadline_ms_at_sigterm: float = 0.0
    left_at_ms: int = 0
    moved_after_sigterm_s: float = 0.0
    survivor: DaemonProcess | None = None
    stopped: DaemonProcess | None = None


def calls(daemons: list[DaemonProcess]) -> float:
    return sum(d.total("sweeperd_sweeps_total") for d in daemons)  # per node or per queue


def settle(daemons: list[DaemonProcess], members: int) -> None:
    """Every replica sees `members` members and together they own every queue once."""
    wait_until(
        lambda: (
            all(d.value("sweeperd_members") == members for d in daemons)
            and sum(d.value("sweeperd_owned_queues") or 0 for d in daemons) == len(QUEUES)
        ),
        what=f"{members} members owning {len(QUEUES)} queues",
    )


@contextmanager
def replicas(workdir: Path, *args: str) -> Iterator[list[DaemonProcess]]:
    """IDS as `sweeperd run` processes sharing QUEUES, settled (three members owning every
    queue once); those still running stopped at the end."""
    env = {"SWEEPERD_QUEUES": ",".join(QUEUES)}
    daemons = [DaemonProcess(workdir, *args, "--instance-id", i, env=env) for i in IDS]
    try:
        for daemon in daemons:
            daemon.start()
        settle(daemons, 3)
        yield daemons
    finally:
        for daemon in daemons:
            if not daemon.exited():
                daemon.stop()


def first_sweeps_after(
    daemons: list[DaemonProcess], queues: list[str], after: float
) -> dict[str, float]:
    """For each queue, how long after `after` (Unix time) its first successful call came."""
    found: dict[str, float] = {}

    def look() -> bool:
        for daemon in daemons:
            for queue, at in per_queue(daemon, "sweeperd_last_success_timestamp_seconds").items():
                if queue in queues and queue not in found and at > after:
                    found[queue] = at - after
        return len(found) == len(queues)

    wait_until(look, timeout_s=30, what="every moved queue swept again")
    return found


def kill_one(run: Run, daemons: list[DaemonProcess]) -> None:
    """(c) kill -9 of r3: its queues swept again by the others, timed from the kill."""
    run.killed_queues = owned_by("r3", QUEUES, set(IDS))
    killed_at = time.time()
    assert daemons[2].stop(signal.SIGKILL) == -signal.SIGKILL
    run.takeover_s = first_sweeps_after(daemons[:2], run.killed_queues, killed_at)
    settle(daemons[:2], 2)


def stop_one(run: Run, daemons: list[DaemonProcess]) -> None:
    """(d) SIGTERM of r2: its entry removed before its deadline, its queues moved to r1."""
    key = members_key("emq")
    score = run.client.zscore(key, "r2")
    assert score is not None
    run.deadline_ms_at_sigterm = score
    sent = time.monotonic()
    assert daemons[1].process is not None
    daemons[1].process.send_signal(signal.SIGTERM)
    wait_until(lambda: run.client.zscore(key, "r2") is None, what="r2's entry removed")
    run.left_at_ms = server_ms(run.client)
    settle(daemons[:1], 1)
    run.moved_after_sigterm_s = time.monotonic() - sent
    assert daemons[1].wait() == 0  # the one SIGTERM: it may still be exiting


def scenario(client: redis.Redis, url: str, workdir: Path) -> Iterator[Run]:
    run = Run(client, seed(client))
    base = [
        "--redis-url",
        url,
        "--executor",
        "native",
        "--interval",
        str(INTERVAL_S),
        "--jitter",
        "0",
        "--heartbeat",
        str(HEARTBEAT_S),
        "--max-stalled",
        str(MAX_STALLED),
    ]
    with replicas(workdir, *base) as daemons:
        wait_until(
            lambda: sum(len(per_queue(d, OWNED_ONLY)) for d in daemons) == len(QUEUES),
            what="each queue's state exported by one replica",
        )
        run.settled_shares = {
            i: set(per_queue(d, OWNED_ONLY)) for i, d in zip(IDS, daemons, strict=True)
        }
        run.landing = daemons[0].get("/")[1]
        before, started = calls(daemons), time.monotonic()
        time.sleep(WINDOW_S)
        run.calls_in_window = calls(daemons) - before
        run.would_be_calls = len(QUEUES) * (time.monotonic() - started) / INTERVAL_S
        kill_one(run, daemons)
        stop_one(run, daemons)
        run.survivor, run.stopped = daemons[0], daemons[1]
        last_deadline_s = EXPIRY_SPAN_MS[1] / 1000
        wait_until(
            lambda: all(client.zcard(QueueKeys(q).active) == 0 for q in QUEUES),
            timeout_s=last_deadline_s + 20,
            what="every lease recovered",
        )
        yield run


@pytest.fixture(scope="module")
def run(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The whole scenario, once: three replicas, 2,400 leases, a kill -9, a SIGTERM."""
    with redis_server.client() as client:
        client.flushall()
        yield from scenario(client, redis_server.url, tmp_path_factory.mktemp("replicas"))


class TestReplicas:
    def test_every_lease_is_recovered_exactly_once(self, run: Run) -> None:
        """(a) Every row ends pending with stalled = 1, once in pending; nothing dead or active."""
        rows = 0
        for queue in QUEUES:
            keys = QueueKeys(queue)
            pending = members(run.client, keys.pending)
            assert len(pending) == LEASES_PER_QUEUE
            for job in pending:
                assert hash_of(run.client, keys.job(job)) == {
                    b"attempts": b"1",
                    b"state": b"pending",
                    b"stalled": b"1",
                }
                rows += 1
            assert run.client.exists(keys.dead, keys.active, keys.metrics_failed) == 0
        assert rows == run.leases

    def test_the_replicas_share_the_calls_of_one(self, run: Run) -> None:
        """(b) The three together send at most 1.3x the calls one replica would, not 3x."""
        print(
            f"\ncalls of the three / one replica's: {run.calls_in_window / run.would_be_calls:.2f}"
        )
        assert 0 < run.calls_in_window <= 1.3 * run.would_be_calls, (
            run.calls_in_window,
            run.would_be_calls,
        )

    def test_each_queue_is_exported_by_its_one_owner(self, run: Run) -> None:
        """Settled, each queue's state (its expired leases) comes from exactly one replica."""
        shares = list(run.settled_shares.values())
        assert sum(len(s) for s in shares) == len(QUEUES)
        assert set().union(*shares) == set(QUEUES)
        for member, share in run.settled_shares.items():
            assert share == set(owned_by(member, QUEUES, set(IDS)))

    def test_the_landing_page_lists_the_members(self, run: Run) -> None:
        """The landing page names the three members."""
        assert "members (3), this replica is r1:" in run.landing
        for member in IDS:
            assert f"  {member}  expires in " in run.landing

    def test_a_killed_replicas_queues_are_swept_within_the_bound(self, run: Run) -> None:
        """(c) After kill -9, every queue of the killed replica is swept again within 2 TTLs."""
        assert len(run.killed_queues) > 50
        slowest = max(run.takeover_s.values())
        print(
            f"\nkill -9 to first sweep of a moved queue: median "
            f"{statistics.median(run.takeover_s.values()):.2f} s, max {slowest:.2f} s "
            f"(heartbeat TTL {HEARTBEAT_S:g} s, interval {INTERVAL_S:g} s)"
        )
        assert slowest <= TAKEOVER_BOUND_S

    def test_sigterm_moves_the_queues_at_once(self, run: Run) -> None:
        """(d) SIGTERM removes the entry before its deadline; the survivor owns every queue."""
        assert run.left_at_ms < run.deadline_ms_at_sigterm
        print(f"\nSIGTERM to the survivor owning every queue: {run.moved_after_sigterm_s:.2f} s")
        assert run.stopped is not None and run.stopped.events("left")
        assert run.survivor is not None
        assert run.survivor.value("sweeperd_owned_queues") == len(QUEUES)
        assert (run.survivor.value("sweeperd_ownership_changes_total") or 0) >= 3
        moves = run.survivor.events("queues_moved")
        assert [m["owned"] for m in moves][-2:] == [
            len(owned_by("r1", QUEUES, {"r1", "r2"})),
            len(QUEUES),
        ]


class TestKillCountsOnce:
    """Its own key root and members: the scenario's survivor still runs until the module ends."""

    def test_leases_due_after_a_kill_are_counted_once_by_the_others(
        self, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """A lease in every queue falls due just after one of three replicas is killed
        (kill -9): the two others recover every one, the killed one's queues' too, and their
        `sweeperd_recovered_total` sum to the leases, each queue's to 1: counted once, never
        by the old owner and the new one both, never missed."""
        with redis_server.client() as client:
            args = (
                *("--redis-url", redis_server.url, "--interval", "5", "--heartbeat", "1"),
                *("--max-stalled", "5", "--prefix-root", ROOT),
            )
            with replicas(tmp_path, *args) as daemons:
                pipe = client.pipeline(transaction=False)
                for queue in QUEUES:  # due in an hour: never the killed one's to take
                    later = now_ms() + 3_600_000
                    lease(pipe, QueueKeys(queue, ROOT), b"j", deadline_ms=later, attempts="1")
                pipe.execute()
                assert daemons[2].stop(signal.SIGKILL) == -signal.SIGKILL
                for queue in QUEUES:  # due now, the killed one gone
                    pipe.zadd(QueueKeys(queue, ROOT).active, {b"j": now_ms()}, xx=True)
                pipe.execute()
                survivors = daemons[:2]
                wait_until(
                    lambda: (
                        sum(d.total("sweeperd_recovered_total") for d in survivors) >= len(QUEUES)
                    ),
                    timeout_s=60,
                    what="every lease recovered by the two",
                )
                by_queue = [per_queue(d, "sweeperd_recovered_total") for d in survivors]
                assert {q: by_queue[0][q] + by_queue[1][q] for q in QUEUES} == dict.fromkeys(
                    QUEUES, 1.0
                )
                killed = owned_by("r3", QUEUES, set(IDS))
                assert killed and all(client.zcard(QueueKeys(q, ROOT).active) == 0 for q in QUEUES)
                assert all(
                    client.hget(QueueKeys(q, ROOT).job(b"j"), "stalled") == b"1" for q in QUEUES
                )
