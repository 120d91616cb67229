"""A Cluster reached through several seeds, as the user `sweeperd acl` prints: the tools and the
daemon with the first seed dead (refused) or two of three dead (one refused, one hung), every
seed dead said seed by seed, and a node that lost the ACL user named, not the seed."""

from __future__ import annotations

import contextlib
import itertools
import re
import socket
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from sweeperd.keyspace import QueueKeys
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.invoke import Ran, sweeperd
from tests.support.scenes import ACL_USER, ClusterScene
from tests.support.servers import RedisServer, free_port

TIMEOUT = ("--socket-timeout", "1")
RUN_ARGS = ("--interval", "0.3", "--jitter", "0", "--max-stalled", "3", *TIMEOUT)
NOT_WRITTEN = {"a": "active:active:", "b": "active:active:"}
RECOVERED = {"a": "pending:pending:1", "b": "pending:pending:1"}
NAMES = itertools.count()


@pytest.fixture(scope="module")
def scene(server_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterScene]:
    """A 3+3 Cluster whose every node has the acl user (from its ACL file)."""
    made = ClusterScene(tmp_path_factory.mktemp(f"{server_kind}-seeds"), server_kind)
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.fixture(scope="module")
def hung() -> Iterator[int]:
    """A port that takes connections and never answers (a node stopped by SIGSTOP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen(64)
        yield sock.getsockname()[1]


def url(scene: ClusterScene, port: int) -> str:
    """The acl user's URL of the node at `port`."""
    return f"redis://{scene.credentials(ACL_USER)}127.0.0.1:{port}/0"


def seeded(scene: ClusterScene) -> tuple[str, RedisServer]:
    """A new queue with two expired leases of this run's epoch, and its primary."""
    queue = f"seeds.{next(NAMES)}"
    owner = scene.cluster.owner(QueueKeys(queue).active)
    scene.seed(queue, owner)
    return queue, owner


def seeds(scene: ClusterScene, hung: int, dead: int) -> tuple[list[str], dict[str, str]]:
    """Three seeds, the first dead (refused), and with `dead` 2 the last hung too: one dead as
    SWEEPERD_REDIS_URL with commas, two as the flag repeated."""
    live = [s.port for s in scene.cluster.servers[:2]]
    if dead == 1:
        urls = [url(scene, free_port()), *(url(scene, port) for port in live)]
        return ["--cluster"], {"SWEEPERD_REDIS_URL": ",".join(urls)}
    urls = [url(scene, free_port()), url(scene, live[0]), url(scene, hung)]
    return ["--cluster", *(a for u in urls for a in ("--redis-url", u))], {}


def ok(ran: Ran) -> dict[str, object]:
    assert (ran.code, ran.err) == (0, ""), ran.err
    return ran.json()


@pytest.mark.parametrize("dead", [1, 2])
class TestToolsWithDeadSeeds:
    def test_inspect(self, scene: ClusterScene, hung: int, dead: int) -> None:
        """inspect reads the queue through the seed that answers."""
        queue, owner = seeded(scene)
        flags, env = seeds(scene, hung, dead)
        view = ok(sweeperd("inspect", "-q", queue, "--json", *TIMEOUT, *flags, env=env))
        assert (view["active"], view["expired"]) == (2, 2)
        assert scene.ids(queue, owner) == NOT_WRITTEN

    def test_once(self, scene: ClusterScene, hung: int, dead: int) -> None:
        """once sweeps the queue on its primary, found through the seed that answers."""
        queue, owner = seeded(scene)
        flags, env = seeds(scene, hung, dead)
        ran = sweeperd(
            "once", "-q", queue, "--json", "--max-stalled", "3", *TIMEOUT, *flags, env=env
        )
        assert sorted(ok(ran)["recovered"]) == ["a", "b"]  # type: ignore[call-overload]
        assert scene.ids(queue, owner) == RECOVERED

    def test_top(self, scene: ClusterScene, hung: int, dead: int) -> None:
        """top --once reads every primary, the queue's row among them."""
        queue, owner = seeded(scene)
        flags, env = seeds(scene, hung, dead)
        args = ("--once", "--json", "--interval", "0.1", "-q", queue, *TIMEOUT, *flags)
        view = ok(sweeperd("top", *args, env=env))
        rows = {row["queue"]: row for row in view["rows"]}  # type: ignore[attr-defined]
        assert (rows[queue]["node"], rows[queue]["state"], rows[queue]["expired"]) == (
            owner.node,
            "ok",
            2,
        )
        servers = {s["node"]: s["error"] for s in view["servers"]}  # type: ignore[attr-defined]
        assert servers == {p.node: None for p in scene.cluster.primaries()}


SEEDS_FIX = (
    "name other nodes with --redis-url (repeat it: one node each; SWEEPERD_REDIS_URL: commas "
    "between)"
)


class TestEverySeedDead:
    @pytest.mark.parametrize("command", ["inspect", "once", "top"])
    def test_each_seed_said(self, command: str, scene: ClusterScene, hung: int) -> None:
        """Every seed dead: exit 3, one line naming each seed tried with its own error, and how
        to name another; not "cannot reach" the first URL."""
        refused = free_port()
        args = ["-q", "q", *TIMEOUT, "--cluster"]
        args += ["--redis-url", url(scene, refused), "--redis-url", url(scene, hung)]
        extra = ["--once", "--interval", "0.1"] if command == "top" else []
        ran = sweeperd(command, *args, *extra)
        assert (ran.code, ran.out) == (3, ""), ran.err
        [line] = ran.err_lines
        assert line == (
            "sweeperd: no node of the Cluster answered CLUSTER SLOTS (2 tried: "
            f"127.0.0.1:{refused}: connection refused; 127.0.0.1:{hung}: timeout reading from "
            f"socket); {SEEDS_FIX}"
        )


class TestDaemonSeeds:
    def test_first_seed_dead(self, scene: ClusterScene, tmp_path: Path) -> None:
        """run started with its first (and last) seed dead becomes ready and sweeps."""
        queue, owner = seeded(scene)
        urls = [url(scene, free_port()), url(scene, scene.seed_node.port), url(scene, free_port())]
        flags = [a for u in urls for a in ("--redis-url", u)]
        with DaemonProcess(tmp_path, *flags, "--cluster", "-q", queue, *RUN_ARGS) as daemon:
            wait_until(lambda: daemon.get("/readyz")[0] == 200, what="ready")
            wait_until(lambda: scene.ids(queue, owner) == RECOVERED, what=f"{queue} swept")
            assert daemon.stop() == 0

    def test_every_seed_dead(self, scene: ClusterScene, hung: int, tmp_path: Path) -> None:
        """run with every seed dead is not ready, and /readyz and / say each seed's error."""
        refused = free_port()
        flags = ["--redis-url", url(scene, refused), "--redis-url", url(scene, hung)]
        with DaemonProcess(tmp_path, *flags, "--cluster", "-q", "q", *RUN_ARGS) as daemon:
            said = (
                f"waiting for 127.0.0.1:{refused}, 127.0.0.1:{hung} to answer: no node of the "
                f"Cluster answered CLUSTER SLOTS (2 tried: 127.0.0.1:{refused}: connection "
                f"refused; 127.0.0.1:{hung}: timeout reading from socket); {SEEDS_FIX}"
            )
            wait_until(lambda: daemon.get("/readyz") == (503, f"not ready: {said}\n"))
            assert said in daemon.get("/")[1]
            assert daemon.stop() == 0


class TestUserMissingOnANode:
    def test_the_queues_primary(self, scene: ClusterScene) -> None:
        """The queue's primary restarted without the user: the line names that primary, not
        the seed, says users are per node and lost at restart unless saved; exit 1."""
        queue, owner = seeded(scene)
        seed = next(s for s in scene.cluster.primaries() if s is not owner)
        with without_user(owner):
            ran = sweeperd(
                "inspect", "-q", queue, *TIMEOUT, "--cluster", "--redis-url", url(scene, seed.port)
            )
        assert (ran.code, ran.out) == (1, ""), ran.err
        [line] = ran.err_lines
        assert re.fullmatch(
            rf"sweeperd: {owner.node}: authentication failed as {ACL_USER} \(invalid "
            rf"username-password pair or user is disabled\); the user {ACL_USER} may be missing "
            r"there: ACL users live on each node and are lost at restart unless saved \(ACL SAVE "
            r"with an aclfile, or user lines in the config file: "
            r"docs/security.md#acl-users-live-on-each-node\); check --redis-password-file "
            r"\(SWEEPERD_REDIS_PASSWORD_FILE\) and the URL's user",
            line,
        ), line

    def test_top_says_the_login_refused(self, scene: ClusterScene) -> None:
        """top's line for a primary that refused the user's login says so, and where to look;
        not that it is unreachable (it answered)."""
        queue, owner = seeded(scene)
        seed = next(s for s in scene.cluster.primaries() if s is not owner)
        args = ["--once", "--interval", "0.1", "-q", queue, *TIMEOUT, "--cluster"]
        with without_user(owner):
            ran = sweeperd(
                "top", *args, "--redis-url", url(scene, seed.port), env={"COLUMNS": "400"}
            )
        assert ran.code == 0, ran.err
        [line] = [line for line in ran.out.splitlines() if f" {owner.node}  " in line]
        assert line.split(f"{owner.node}  ", 1)[1].startswith(
            "LOGIN REFUSED: invalid username-password pair or user is disabled: the user may be "
            "missing on this node (ACL SAVE with an aclfile, or user lines in the config file: "
            "docs/security.md#acl-users-live-on-each-node)"
        ), line

    def test_the_only_seed(self, scene: ClusterScene) -> None:
        """The only seed lost the user: an authentication failure, exit 1, naming the seed; a
        second seed that has the user is read instead."""
        queue, owner = seeded(scene)
        seed = scene.cluster.replica_of(owner)
        other = scene.cluster.servers[0] if seed is not scene.cluster.servers[0] else owner
        with without_user(seed):
            alone = sweeperd(
                "inspect", "-q", queue, *TIMEOUT, "--cluster", "--redis-url", url(scene, seed.port)
            )
            both = sweeperd(
                "inspect",
                "-q",
                queue,
                "--json",
                *TIMEOUT,
                "--cluster",
                "--redis-url",
                url(scene, seed.port),
                "--redis-url",
                url(scene, other.port),
            )
        assert (alone.code, alone.out) == (1, ""), alone.err
        [line] = alone.err_lines
        assert line.startswith(f"sweeperd: {seed.node}: authentication failed as {ACL_USER} "), line
        assert f"(1 tried: {seed.node}: invalid username-password pair" in line, line
        assert (ok(both)["active"], ok(both)["expired"]) == (2, 2)


@contextlib.contextmanager
def without_user(node: RedisServer) -> Iterator[None]:
    """The acl user deleted on one node, as a restart without a saved user leaves it; put back
    from the node's ACL file after."""
    with node.client() as c:
        c.execute_command("ACL", "DELUSER", ACL_USER)
    try:
        yield
    finally:
        with node.client() as c:
            c.execute_command("ACL", "LOAD")


class TestPartialOutage:
    def test_readiness_names_the_nodes_and_recovers(
        self, scene: ClusterScene, tmp_path: Path
    ) -> None:
        """A primary and its replica stopped: /readyz and / name that primary with its error and
        the primaries that answer; once both are back, ready again, every queue swept."""
        cluster = scene.cluster
        victim = next(p for p in cluster.primaries() if p is not scene.seed_node)
        replica = cluster.replica_of(victim)
        queues = {p.node: queue_on(scene, p) for p in cluster.primaries()}
        flags = ["--redis-url", url(scene, scene.seed_node.port), "--cluster", *RUN_ARGS]
        with DaemonProcess(tmp_path, *flags, "-q", ",".join(queues.values())) as daemon:
            wait_until(lambda: daemon.get("/readyz")[0] == 200, what="ready")
            scene.configure("cluster-require-full-coverage", "no")
            try:
                scene.pause(replica)
                scene.pause(victim)
                others = sorted(n for n in queues if n != victim.node)
                said = re.compile(
                    rf"not ready: waiting for {re.escape(victim.node)} \(.+\) to answer; "
                    f"{re.escape(', '.join(others))} answer\n"
                )
                wait_until(lambda: said.fullmatch(daemon.get("/readyz")[1]), what=said.pattern)
                assert f"waiting for {victim.node} (" in daemon.get("/")[1]
            finally:
                scene.resume()
                scene.configure("cluster-require-full-coverage", "yes")
            cluster.settle()
            # readiness is judged on each request: a sweep late on a loaded machine (the window
            # is three 0.3 s intervals) may flip it back between two requests
            wait_until(lambda: daemon.get("/readyz") == (200, "ok\n"), what="ready again")
            wait_until(lambda: "sweeping 3 queues on " in daemon.get("/")[1], what="the page")
            for name, queue in queues.items():
                holder = next(s for s in cluster.servers if s.node == name)
                wait_until(partial(swept, scene, queue, holder), what=f"{queue} swept")
            assert daemon.stop() == 0


def swept(scene: ClusterScene, queue: str, owner: RedisServer) -> bool:
    return scene.ids(queue, owner) == RECOVERED


def queue_on(scene: ClusterScene, primary: RedisServer) -> str:
    """A new queue on `primary`, seeded with two expired leases."""
    while True:
        queue = f"seeds.{next(NAMES)}"
        if scene.cluster.owner(QueueKeys(queue).active) is primary:
            scene.seed(queue, primary)
            return queue


class TestTopReplicaRead:
    def test_readonly_refused_is_said(self, scene: ClusterScene) -> None:
        """top reads a dead primary's queues on its replica; a user the replica refuses
        READONLY is told so, with the rule that grants it, not that the slot moved."""
        cluster = scene.cluster
        victim = next(p for p in cluster.primaries() if p is not scene.seed_node)
        replica = cluster.replica_of(victim)
        queue = queue_on(scene, victim)
        args = ["--once", "--json", "--interval", "0.1", "-q", queue, *TIMEOUT, "--cluster"]
        with replica.client() as c:
            c.execute_command("ACL", "SETUSER", ACL_USER, "-readonly")
            c.config_set("cluster-replica-no-failover", "yes")
        scene.configure("cluster-require-full-coverage", "no")
        cluster.kill(victim)
        try:
            ran = sweeperd("top", *args, "--redis-url", url(scene, scene.seed_node.port))
        finally:
            scene.revived(victim)
            scene.configure("cluster-require-full-coverage", "yes")
            with replica.client() as c:
                c.execute_command("ACL", "SETUSER", ACL_USER, "+readonly")
                c.config_set("cluster-replica-no-failover", "no")
            cluster.settle()
        [row] = [r for r in ok(ran)["rows"] if r["queue"] == queue]  # type: ignore[attr-defined]
        assert (row["node"], row["state"]) == (replica.node, "error"), row
        assert row["error"].startswith(f"the ACL user {ACL_USER} may not run READONLY ("), row
        assert row["error"].endswith(
            f"grant it with ACL SETUSER {ACL_USER} +readonly (docs/security.md#the-acl-user)"
        ), row
