"""`sweeperd audit --cluster` on a 3+3 Cluster: each queue audited on its slot's owner, every
class found exactly beside clean queues, nothing written, --repair through the verb on the
owner, and a slot migrating before or during the audit said, never read half-moved."""

from __future__ import annotations

from contextlib import ExitStack
from functools import partial
from pathlib import Path

from sweeperd.audit.reader import Clocks, Pace
from sweeperd.commands.audit import run_audit
from sweeperd.keyspace import QueueKeys
from sweeperd.server.topology import slot_of
from tests.support.audit_plant import Job, clean, plant, planted
from tests.support.built_settings import build
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import dump_all
from tests.support.invoke import Ran, sweeperd, sweeperd_process
from tests.support.servers import RedisServer
from tests.support.topologies import Cluster, wait_for
from tests.support.worker_fleet import Load, running

FLEET = Load(queues=3, claims_per_s=400 / 3, lease_s=(0.3, 8.0), dying=0.05, seconds=120)
DRIVEN = 0.75  # of the fleets' 400 claims a second, at the least, across the audits (loaded)


def audit(cluster: Cluster, *args: str) -> Ran:
    return sweeperd(
        "audit", "--cluster", "--redis-url", cluster.seed_url(), "--grace", "0", "--json", *args
    )


def one_per_primary(cluster: Cluster) -> dict[RedisServer, QueueKeys]:
    """A queue name on each primary, the first found for each."""
    found: dict[RedisServer, QueueKeys] = {}
    n = 0
    while len(found) < len(cluster.primaries()):
        keys = QueueKeys(f"q{n}")
        found.setdefault(cluster.owner(keys.active), keys)
        n += 1
    return found


def fleet_queues(cluster: Cluster, each: int) -> dict[RedisServer, list[str]]:
    """`each` of the fleet's queue names on every primary, l0000 on."""
    found: dict[RedisServer, list[str]] = {p: [] for p in cluster.primaries()}
    n = 0
    while any(len(names) < each for names in found.values()):
        name = f"l{n:04}"
        names = found[cluster.owner(QueueKeys(name).active)]
        if len(names) < each:
            names.append(name)
        n += 1
    return found


def dumps(cluster: Cluster) -> dict[int, dict[bytes, bytes]]:
    """Every primary's keyspace, key by key."""
    result = {}
    for server in cluster.primaries():
        with server.client() as c:
            result[server.port] = dump_all(c)
    return result


def by_queue(ran: Ran) -> dict[str, tuple[str, dict[str, list[str]], object]]:
    """Each queue's node, findings (class -> ids) and error, from --json."""
    return {
        q["queue"]: (q["node"], {c: f["ids"] for c, f in q["findings"].items()}, q["error"])
        for q in ran.json()["queues"]
    }


def set_migrating(cluster: Cluster, slot: int, source: RedisServer, target: RedisServer) -> None:
    """The slot marked migrating from `source` to `target` (and importing there), keys unmoved."""
    with source.client() as s, target.client() as t:
        source_id = s.execute_command("CLUSTER", "MYID").decode()
        target_id = t.execute_command("CLUSTER", "MYID").decode()
        t.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)


def set_stable(slot: int, *servers: RedisServer) -> None:
    for server in servers:
        with server.client() as c:
            c.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")


def full_coverage(cluster: Cluster, required: str) -> None:
    """Set whether the cluster's nodes refuse every slot while one is not served."""
    for server in cluster.servers:
        with server.client() as node:
            node.config_set("cluster-require-full-coverage", required)


class TestAuditCluster:
    """Each queue on its slot's owner."""

    def test_every_class_on_its_owner(self, fresh: Cluster) -> None:
        """Named or discovered, the planted queue's classes exactly, the others clean, each on
        the primary that owns its slot; every primary's keyspace byte-equal after."""
        queues = one_per_primary(fresh)
        [(home, q), *others] = queues.items()
        client = fresh.client()
        expected = plant(client, q, planted())
        for _server, keys in others:
            plant(client, keys, clean())
        before = dumps(fresh)
        named = [arg for keys in queues.values() for arg in ("-q", keys.queue)]
        for args in (named, []):
            ran = audit(fresh, *args)
            assert ran.code == 1, ran.err
            found = by_queue(ran)
            assert found[q.queue] == (home.node, expected, None)
            assert {k: found[k.queue] for _s, k in others} == {
                k: (s.node, {}, None) for s, k in others
            }
            assert sorted(ran.json()["nodes"]) == sorted(s.node for s in fresh.primaries())
        assert dumps(fresh) == before

    def test_repair_on_the_owner(self, fresh: Cluster) -> None:
        """Stranded rows put back and swept on their owner: the earlier epoch's exempt, the
        current one's counted (dead at max_stalled 1)."""
        q = QueueKeys("repair-me")
        owner = fresh.owner(q.active)
        epoch = fresh.run_id(owner).decode()
        client = fresh.client()
        plant(client, q, [Job("now", {"state": "active", "lease_epoch": epoch})])
        plant(client, q, [Job("then", {"state": "active", "lease_epoch": "e0"})])
        ran = audit(fresh, "-q", q.queue, "--repair", "--yes")
        [done] = ran.json()["repaired"]
        assert (done["dead"], done["exempt"], done["error"]) == (["now"], ["then"], None)
        assert client.zscore(q.dead, "now") == 0 and client.zscore(q.pending, "then") == 0
        assert client.hget(q.job("then"), "state") == b"pending"

    def test_migrating_slot_is_said(self, fresh: Cluster) -> None:
        """A slot migrating with half its keys moved: the queue is said migrating, to where,
        with nothing reported of it (no rowless from the rows that moved), exit 1; the other
        queue is audited; once the slot has moved its classes are found on the new owner."""
        q = QueueKeys("moving")
        other = QueueKeys("still")
        client = fresh.client()
        expected = plant(client, q, planted())
        plant(client, other, [Job("lost", {"state": "active"})])
        slot = slot_of(q.active)
        source = fresh.owner(q.active)
        target = next(p for p in fresh.primaries() if p is not source)
        set_migrating(fresh, slot, source, target)
        try:
            with source.client() as s:
                half = [k for k in s.scan_iter(match=f"{q.prefix}job:*")][::2]
                s.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *half)
            ran = audit(fresh, "-q", q.queue, "-q", other.queue)
            assert ran.code == 1, ran.err
            found = by_queue(ran)
            node, classes, error = found[q.queue]
            assert (node, classes) == (source.node, {})
            assert isinstance(error, dict) and error["reason"] == "migrating"
            assert f"slot {slot} migrating to {target.node}" in error["message"]
            assert found[other.queue][1:] == ({"stranded": ["lost"]}, None)
        finally:
            fresh.migrate(slot, source, target)
        moved = by_queue(audit(fresh, "-q", q.queue))
        assert moved[q.queue] == (target.node, expected, None)

    def test_migration_begun_during_the_audit(self, fresh: Cluster, tmp_path: Path) -> None:
        """A slot set migrating between the first read and the second is said: the second read
        is refused, nothing is reported of the queue."""
        q = QueueKeys("midway")
        client = fresh.client()
        plant(client, q, planted())
        slot = slot_of(q.active)
        source = fresh.owner(q.active)
        target = next(p for p in fresh.primaries() if p is not source)
        settings = build(tmp_path, redis_url=fresh.seed_url(), cluster="1", queues=q.queue)

        def begin(_seconds: float) -> None:
            set_migrating(fresh, slot, source, target)

        try:
            result = run_audit(settings, [q.queue], Pace(grace_s=1), Clocks(sleep=begin))
        finally:
            set_stable(slot, source, target)
        [audited] = result.queues
        assert audited.found == {}
        assert audited.error is not None and str(audited.error.reason) == "migrating"
        assert f"migrating to {target.node}" in audited.error.message

    def test_a_dead_primary_does_not_stop_the_others(self, fresh: Cluster) -> None:
        """Discovery on a Cluster with a primary paused past the socket timeout: its line says
        it was not read, exit 3; the queues of the others are audited. The others serve their
        slots all along (full coverage not required): a Cluster that marked the paused node
        failed before the audit read them would answer CLUSTERDOWN, as it did on a loaded
        machine."""
        queues = one_per_primary(fresh)
        client = fresh.client()
        for keys in queues.values():
            plant(client, keys, [Job("lost", {"state": "active"})])
        seed = fresh.seed_url()
        paused = next(s for s in queues if f":{s.port}/" not in seed)  # the map is read
        others = [(s, k) for s, k in queues.items() if s is not paused]
        full_coverage(fresh, "no")
        try:
            with fresh.hung(paused):
                ran = audit(fresh, "--socket-timeout", "0.5")
        finally:
            full_coverage(fresh, "yes")
        assert ran.code == 3, ran.err
        body = ran.json()
        assert "failed_nodes" in body, ran.out
        assert list(body["failed_nodes"]) == [paused.node]
        assert {q["queue"] for q in body["queues"]} == {k.queue for _s, k in others}
        assert body["totals"]["stranded"] == len(others), ran.out

    def test_the_daemon_audits_each_queue_on_its_owner(
        self, fresh: Cluster, tmp_path: Path
    ) -> None:
        """run --cluster --audit-every: a stranded job in a queue on each primary, each
        exported under its queue, read on the primary that owns it."""
        queues = one_per_primary(fresh)
        client = fresh.client()
        for keys in queues.values():
            plant(client, keys, [Job("lost", {"state": "active"}), *clean()])
        named = [arg for keys in queues.values() for arg in ("-q", keys.queue)]
        args = ("--cluster", "--redis-url", fresh.seed_url(), "--audit-every", "1", *named)
        with DaemonProcess(tmp_path, *args, "--interval", "3600") as daemon:

            def stranded_of(queue: str) -> float | None:
                return daemon.value("sweeperd_audit_findings", queue=queue, **{"class": "stranded"})

            for keys in queues.values():
                wait_until(
                    partial(stranded_of, keys.queue), what=f"{keys.queue}'s stranded job exported"
                )
                assert stranded_of(keys.queue) == 1
            assert daemon.events("audit_failed") == []

    def test_no_finding_under_the_fleet(self, fresh: Cluster) -> None:
        """A worker fleet on each primary, 3 queues each, 400 claims and completions a second
        in all: `sweeperd audit --cluster` (a process, every queue found) finds nothing, exit 0;
        a stranded job then planted in one of the fleet's queues is exactly what it finds."""
        queues = fleet_queues(fresh, FLEET.queues)
        args = ("audit", "--cluster", "--redis-url", fresh.seed_url(), "--json")
        with ExitStack() as stack:
            fleets = [
                stack.enter_context(running(p.port, FLEET, seed=n, names=names))
                for n, (p, names) in enumerate(queues.items())
            ]
            for primary in queues:
                with primary.client() as c:
                    wait_for(lambda c=c: c.dbsize() >= 30, "the fleet to hold leases")
            clean_run = sweeperd_process(*args)
            home = queues[fresh.primaries()[0]][1]
            with fresh.client() as client:
                plant(client, QueueKeys(home), [Job("lost", {"state": "active"})])
            planted_run = sweeperd_process(*args)
            assert all(f.process.poll() is None for f in fleets), "the fleets ran throughout"
            counts = [f.stop() for f in fleets]
        assert (clean_run.code, clean_run.json()["findings"]) == (0, 0), clean_run.out
        every = sorted(name for names in queues.values() for name in names)
        assert sorted(by_queue(clean_run)) == every
        assert planted_run.code == 1, planted_run.out
        found = {q: classes for q, (_n, classes, _e) in by_queue(planted_run).items()}
        assert found == {**{q: {} for q in every}, home: {"stranded": ["lost"]}}
        rate = sum(c.claims for c in counts) / max(c.seconds for c in counts)
        assert rate >= DRIVEN * FLEET.claims_per_s * len(queues), (rate, counts)
