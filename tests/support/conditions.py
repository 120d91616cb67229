"""The operator matrix's conditions on a running topology: each one set up (the cells' queues
seeded first) and undone again; the topology's daemons, one per user; what they logged and
counted since a condition began."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from sweeperd.keyspace import QueueKeys, members_key
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.scenes import ACL_USER, SCENES, USERS, ClusterScene, Scene, SentinelScene
from tests.support.servers import RedisServer, free_port
from tests.support.topologies import info, wait_for

# The daemons: fast ticks, a budget that recovers (3), calls that give up within a second.
RUN_ARGS = ("--interval", "0.3", "--jitter", "0", "--max-stalled", "3", "--socket-timeout", "1")
REASONS = (
    "connection",
    "auth",
    "cluster_down",
    "loading",
    "noperm",
)  # the failures the conditions cause
NOT_WRITTEN = {"a": "active:active:", "b": "active:active:"}
FILLER = 100_000  # keys the restarted server loads, key-load-delay each, until told faster


@dataclass
class Row:
    """A topology and its daemons, one per user, each sweeping one queue on every shard."""

    scene: Scene
    daemons: dict[str, DaemonProcess] = field(default_factory=dict)
    queues: dict[str, list[str]] = field(default_factory=dict)  # user -> its daemon's queues


class Rows:
    """The topology running now and its daemons; asking for another stops it first (the cells
    come topology by topology)."""

    def __init__(self, kind: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.kind = kind
        self.tmp_path_factory = tmp_path_factory
        self.now: Row | None = None

    def row(self, name: str) -> Row:
        if self.now is not None and self.now.scene.name == name:
            return self.now
        self.close()
        workdir = self.tmp_path_factory.mktemp(f"{self.kind}-matrix-{name}")
        self.now = row = Row(SCENES[name](workdir, self.kind).start())
        for user in USERS:
            start_daemon(row, user, workdir)
        for daemon in row.daemons.values():
            daemon.started()
        return row

    def close(self) -> None:
        row, self.now = self.now, None
        if row is None:
            return
        row.scene.resume()
        try:
            for daemon in row.daemons.values():
                assert daemon.stop() == 0, daemon.log_text()[-3000:]
        finally:
            row.scene.stop()


def start_daemon(row: Row, user: str, workdir: Path) -> None:
    """The default user's daemon sweeps alone (--shard off); the acl user's shares the queues
    (a 0.5 s heartbeat). Each sweeps one queue per shard, started, not waited for."""
    queues = [named_on(f"run.{user}", slots) for slots in shards(row.scene)]
    sharing = ("--heartbeat", "0.5") if user == ACL_USER else ("--shard", "off")
    row.queues[user] = queues
    row.daemons[user] = DaemonProcess(
        workdir, *row.scene.flags(user), "--queue", ",".join(queues), *RUN_ARGS, *sharing
    ).spawn()


def shards(scene: Scene) -> list[set[int]]:
    """The slots of each primary (a shard's slots stay together through its failovers)."""
    owners = scene.slot_owners()
    by_port: dict[int, set[int]] = {}
    for slot in range(16384):
        by_port.setdefault(owners[slot].port, set()).add(slot)
    return list(by_port.values())


def named_on(base: str, slots: set[int]) -> str:
    """A queue name starting with `base` whose slot is one of `slots`."""
    for n in range(100_000):
        name = f"{base}.{n}"
        if key_slot(QueueKeys(name).active.encode()) in slots:
            return name
    raise AssertionError(f"no name for {base}")


@dataclass
class Situation:
    """A topology in one condition: each cell's queue and who held it, the server that failed,
    and where the daemons' logs and counts stood when it began."""

    row: Row
    name: str
    commands: tuple[str, ...]
    queues: dict[tuple[str, str], str] = field(default_factory=dict)  # (user, command) -> queue
    owners: dict[str, RedisServer] = field(default_factory=dict)  # queue -> its primary, seeded
    failed: RedisServer | None = None  # the server killed or loading, or the promoted replica
    stopped: RedisServer | None = None  # the failed primary's replica, paused with it (down)
    logs_from: dict[str, int] = field(default_factory=dict)  # user -> its daemon's log so far
    failures_before: dict[tuple[str, str], float] = field(default_factory=dict)
    urls: dict[str, list[str]] = field(default_factory=dict)  # user -> the URLs its cells give

    @property
    def scene(self) -> Scene:
        return self.row.scene

    def flags(self, user: str) -> list[str]:
        """What the cells give to reach the servers as `user`: the scene's, or the condition's
        URLs (several seeds, another scheme)."""
        urls = self.urls.get(user)
        if urls is None:
            return self.scene.flags(user)
        return [*(a for u in urls for a in ("--redis-url", u)), *self.scene.topology_flags()]

    def ids(self, queue: str) -> dict[str, str]:
        return self.scene.ids(queue, self.owners[queue])

    def readable(self, queue: str) -> bool:
        """Whether the queue's keys can be read now: not while its server is dead or loading,
        nor anywhere while the Cluster is down (they are read once it is undone)."""
        if self.name in ("down", "loading"):
            return False
        return not (self.name in ("killed", "replica") and self.owners[queue] is self.failed)

    def events(self, user: str, name: str) -> list[dict[str, object]]:
        """The user's daemon's log events called `name` since the condition began."""
        return self.row.daemons[user].events(name, since=self.logs_from[user])

    def failures(self, user: str, queue: str, reason: str) -> float:
        """The user's daemon's failures of `queue` for `reason` since the condition began."""
        daemon = self.row.daemons[user]
        now = daemon.value("sweeperd_sweep_failures_total", queue=queue, reason=reason) or 0.0
        return now - self.failures_before.get((queue, reason), 0.0)

    def seed(self, home: RedisServer) -> None:
        """Every cell's queue (on `home`) and every daemon's queue seeded with expired leases,
        each queue's primary noted; where the daemons' logs and failures stand, too."""
        scene = self.scene
        owners = scene.slot_owners()
        slots = {slot for slot in range(16384) if owners[slot] is home}
        self.queues = {
            (u, c): named_on(f"{self.name}.{u}.{c}", slots) for u in USERS for c in self.commands
        }
        every = [*self.queues.values(), *(q for qs in self.row.queues.values() for q in qs)]
        self.owners = {q: owners[key_slot(QueueKeys(q).active.encode())] for q in every}
        for queue, owner in self.owners.items():
            scene.seed(queue, owner)
        for user, daemon in self.row.daemons.items():
            self.logs_from[user] = len(daemon.log_text())
            for queue in self.row.queues[user]:
                for reason in REASONS:
                    value = daemon.value(
                        "sweeperd_sweep_failures_total", queue=queue, reason=reason
                    )
                    self.failures_before[(queue, reason)] = value or 0.0

    def unread(self) -> None:
        """What the cells could not read while the condition lasted: nothing was written."""
        for (_user, command), queue in self.queues.items():
            if command not in ("run", "acl") and not self.readable(queue):
                assert self.ids(queue) == NOT_WRITTEN, queue


def members_home(scene: Scene) -> RedisServer:
    """The primary that holds the replicas' members key now."""
    return scene.slot_owners()[key_slot(members_key("emq").encode())]


def victim(scene: Scene) -> RedisServer:
    """A primary to fail: in a Cluster neither the URL's node nor the members key's."""
    if not isinstance(scene, ClusterScene):
        return scene.primaries()[0]
    seed, home = scene.seed_node, members_home(scene)
    return next(p for p in scene.primaries() if p not in (seed, home))


def kill(server: RedisServer) -> None:
    """kill -9, its data saved first (no AOF here): it restarts with the seeded leases."""
    with server.client() as c:
        c.save()
    assert server.process is not None
    server.process.kill()
    server.process.wait()


def loading_now(client: redis.Redis) -> bool:
    try:
        return info(client, "persistence").get("loading") == "1"
    except redis.ConnectionError:
        return False


# The conditions: each sets one up, and its undo puts the topology back.
def healthy(s: Situation) -> None:
    s.seed(members_home(s.scene))


def killed(s: Situation) -> None:
    """A primary killed while its replica cannot take over: a Cluster's replica stopped, its
    other primaries serving on (full coverage not required); the Sentinels slow to call it
    down (a minute)."""
    scene = s.scene
    s.failed = dead = victim(scene)
    s.seed(dead)
    if isinstance(scene, ClusterScene):
        scene.configure("cluster-require-full-coverage", "no")
        scene.pause(scene.cluster.replica_of(dead))
    if isinstance(scene, SentinelScene):
        scene.down_after(60_000)
    kill(dead)


def failover(s: Situation) -> None:
    """CLUSTER FAILOVER sent to the replica of the members key's primary, not waited for: the
    first cells run while it switches."""
    scene = s.scene
    assert isinstance(scene, ClusterScene)
    home = members_home(scene)
    s.failed = replica = scene.cluster.replica_of(home)
    s.seed(home)
    with replica.client() as c:
        c.execute_command("CLUSTER", "FAILOVER")


def down(s: Situation) -> None:
    """A primary killed, its replica stopped: the Cluster is down for every slot."""
    scene = s.scene
    assert isinstance(scene, ClusterScene)
    s.failed, live = victim(scene), members_home(scene)
    s.seed(live)
    s.stopped = scene.cluster.replica_of(s.failed)
    scene.pause(s.stopped)
    kill(s.failed)
    with live.client() as c:
        wait_for(lambda: b"cluster_state:fail" in c.execute_command("CLUSTER", "INFO"), "down")


def loading(s: Situation) -> None:
    """The server restarted on a dataset it loads slowly (10 s, cut short by the undo)."""
    server = s.scene.primaries()[0]
    s.seed(server)
    with server.client() as c:
        c.execute_command("DEBUG", "POPULATE", FILLER, "filler")
        c.save()
    s.failed = server
    server.stop()
    server.extra["key-load-delay"] = "100"  # µs a key
    server.extra["loading-process-events-interval-bytes"] = "1024"  # it answers while loading
    server.process = subprocess.Popen(server.argv(), stdout=subprocess.DEVNULL)
    with server.client() as c:
        wait_until(lambda: loading_now(c), what="the server to be loading")


def replica_read(s: Situation) -> None:
    """A primary killed while its replica is told not to take over: the replica answers reads
    of the primary's slots, the other primaries serve on (full coverage not required)."""
    scene = s.scene
    assert isinstance(scene, ClusterScene)
    s.failed = dead = victim(scene)
    s.seed(dead)
    scene.configure("cluster-require-full-coverage", "no")
    with scene.cluster.replica_of(dead).client() as c:
        c.config_set("cluster-replica-no-failover", "yes")
    kill(dead)


def replica_back(s: Situation) -> None:
    """The dead primary started again, still the primary; failovers allowed again."""
    revived(s)
    s.scene.configure("cluster-replica-no-failover", "no")


def user_lost(s: Situation) -> None:
    """A primary without the ACL user, as a restart leaves a node whose user was not saved
    (ACL DELUSER: its connections close too)."""
    s.failed = node = victim(s.scene)
    s.seed(node)
    with node.client() as c:
        c.execute_command("ACL", "DELUSER", ACL_USER)


def user_back(s: Situation) -> None:
    """The user read again from the node's ACL file."""
    assert s.failed is not None
    with s.failed.client() as c:
        c.execute_command("ACL", "LOAD")


def seed_dead(s: Situation) -> None:
    """The cells' first seed a node killed (a replica: nothing fails over), their last a port
    nothing listens on; the URL's node between them."""
    scene = s.scene
    assert isinstance(scene, ClusterScene)
    s.seed(members_home(scene))
    s.failed = dead = scene.cluster.replica_of(victim(scene))
    kill(dead)
    nowhere = f"127.0.0.1:{free_port()}"
    for user in USERS:
        live = scene.url(user)
        s.urls[user] = [live.replace(scene.seed_node.node, dead.node), live]
        s.urls[user].append(live.replace(scene.seed_node.node, nowhere))


def seed_back(s: Situation) -> None:
    """The killed replica started again: it rejoins as the replica it was."""
    dead = s.failed
    if dead is not None and (dead.process is None or dead.process.poll() is not None):
        s.scene.revived(dead)
    s.scene.settle()


def tls_mismatch(s: Situation) -> None:
    """The cells given rediss:// for the server, which speaks no TLS."""
    s.seed(members_home(s.scene))
    for user in USERS:
        s.urls[user] = [s.scene.url(user).replace("redis://", "rediss://", 1)]


Step = Callable[[Situation], None]


def denied(command: str) -> tuple[Step, Step]:
    """`command`, which every sweeperd command needs, taken from both users on every node; and
    given back."""

    def deny(s: Situation) -> None:
        s.seed(members_home(s.scene))
        s.scene.set_rule(f"-{command}")

    def allow(s: Situation) -> None:
        s.scene.set_rule(f"+{command}")

    return deny, allow


def nothing(s: Situation) -> None:
    """Nothing to undo."""


def revived(s: Situation) -> None:
    """The dead primary started again before its replica is let go: the primary still, with
    its saved data."""
    dead = s.failed
    if dead is not None and (dead.process is None or dead.process.poll() is not None):
        s.scene.revived(dead)
    s.scene.resume()
    if isinstance(s.scene, ClusterScene):
        s.scene.configure("cluster-require-full-coverage", "yes")


def loaded(s: Situation) -> None:
    """The load let run at full speed to its end."""
    server = s.failed
    if server is None:
        return
    with server.client() as c:
        c.config_set("key-load-delay", "0")
        c.config_set("loading-process-events-interval-bytes", str(2 * 1024 * 1024))
        wait_until(lambda: not loading_now(c), what="the server to have loaded")
    del server.extra["key-load-delay"], server.extra["loading-process-events-interval-bytes"]


SETUPS: dict[str, tuple[Step, Step]] = {
    "healthy": (healthy, nothing),
    "killed": (killed, revived),
    "failover": (failover, nothing),
    "down": (down, revived),
    "loading": (loading, loaded),
    "replica": (replica_read, replica_back),
    "nouser": (user_lost, user_back),
    "seeddead": (seed_dead, seed_back),
    "tls": (tls_mismatch, nothing),
}
