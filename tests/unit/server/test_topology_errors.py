"""A topology that is wrong or broken is said out loud: a Cluster node swept without --cluster,
--cluster at one server, a Cluster that is down, --sentinel at a Redis server or at nothing, and
a server still loading its dataset; one line, the right exit code or reason, nothing written."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys, members_key
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.helpers import FUTURE_OFFSET_MS, PAST_MS, dump_all, lease, now_ms, run_id
from tests.support.invoke import Ran, sweeperd
from tests.support.servers import RedisServer, free_port, server_binary
from tests.support.topologies import Cluster, free_bus_port, info, write_leases

Q = QueueKeys("q")


def one_line(ran: Ran, code: int) -> str:
    """The run's only stderr line, its `sweeperd: ` head removed, once the exit code is checked."""
    assert ran.code == code, ran.err
    [line] = ran.err.splitlines()
    assert line.startswith("sweeperd: ")
    return line.removeprefix("sweeperd: ")


def cluster_info(c: redis.Redis) -> bytes:
    return bytes(c.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]


def failures(d: DaemonProcess, queue: str, reason: str) -> float:
    return d.value("sweeperd_sweep_failures_total", queue=queue, reason=reason) or 0.0


def lone_cluster_node(workdir: Path, kind: str) -> RedisServer:
    """A one-node Cluster (every slot on it), the module loaded."""
    return RedisServer(
        workdir,
        kind=kind,
        port=free_bus_port(),
        extra={"cluster-enabled": "yes", "cluster-config-file": str(workdir / "nodes.conf")},
    )


def serve_every_slot(server: RedisServer) -> None:
    with server.client() as c:
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_until(
            lambda: "cluster_state:ok" in c.execute_command("CLUSTER", "INFO").decode(),
            what="the one-node cluster to be ok",
        )


@pytest.fixture(scope="module")
def lone_node(server_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with lone_cluster_node(
        tmp_path_factory.mktemp(f"{server_kind}-lone-node"), server_kind
    ) as server:
        serve_every_slot(server)
        yield server


def node_has(node: RedisServer, key: str) -> bool:
    with node.client() as c:
        return bool(c.exists(key))


def queue_keys(dumps: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The dumps of the queue's keys, sweeperd's own (the heartbeat's) left out."""
    return {key: dump for key, dump in dumps.items() if not key.startswith(b"emq:sweeperd:")}


CLUSTER_WORDS = (
    "is a Cluster node: this is a Cluster, add --cluster (SWEEPERD_CLUSTER=true) so that each "
    "queue is swept on the primary that owns its slot"
)


class TestClusterNodeWithoutFlag:
    @pytest.mark.parametrize("command", ["once", "inspect", "top"])
    def test_once_inspect_and_top_refuse(self, lone_node: RedisServer, command: str) -> None:
        """once, inspect and top at a Cluster node without --cluster: exit 1 (the node refused,
        MOVED), reason moved, the fix named in one line, nothing written."""
        with lone_node.client() as c:
            c.flushall()
            lease(c, Q, b"j", PAST_MS, attempts=1)
            before = dump_all(c)
            ran = sweeperd(command, "--redis-url", lone_node.url, "-q", "q")
            assert one_line(ran, 1) == f"127.0.0.1:{lone_node.port} {CLUSTER_WORDS}"
            ran = sweeperd(command, "--redis-url", lone_node.url, "-q", "q", "--json")
            assert ran.code == 1
            assert json.loads(ran.out)["error"]["reason"] == "moved"
            assert dump_all(c) == before

    def test_run_refuses_at_start(self, lone_node: RedisServer, tmp_path: Path) -> None:
        """run at a Cluster node without --cluster exits 1 at start with the same line."""
        ran = sweeperd(
            "run",
            "--redis-url",
            lone_node.url,
            "-q",
            "q",
            "--metrics-addr",
            f"127.0.0.1:{free_port()}",
        )
        assert one_line(ran, 1) == f"127.0.0.1:{lone_node.port} {CLUSTER_WORDS}"

    def test_run_fails_every_tick(self, tmp_path: Path, server_kind: str) -> None:
        """A Cluster node that comes up after run started without --cluster: every tick fails
        with reason moved and the fix logged, not ready (though it answers the heartbeat),
        nothing of the queue written."""
        node = lone_cluster_node(tmp_path / "node", server_kind)
        args = ("--redis-url", node.url, "-q", "q", "--interval", "0.2", "--jitter", "0")
        with DaemonProcess(tmp_path, *args) as d:
            with node:
                serve_every_slot(node)
                with node.client() as c:
                    lease(c, Q, b"j", PAST_MS, attempts=1)
                    before = dump_all(c)
                wait_until(lambda: failures(d, "q", "moved") >= 3, what="moved failures")
                wait_until(lambda: node_has(node, members_key("emq")), what="a heartbeat")
                assert d.get("/readyz")[0] == 503
                with node.client() as c:
                    assert queue_keys(dump_all(c)) == queue_keys(before)
            assert d.stop() == 0
        [failed] = [e for e in d.events("sweep_failed") if e["reason"] == "moved"]
        assert failed["error"] == f"127.0.0.1:{node.port} {CLUSTER_WORDS}"


class TestClusterFlagAtOneServer:
    NOT_CLUSTER = (
        "is not a Cluster node (cluster_enabled:0): drop --cluster, or give the URL of a node of "
        "the Cluster"
    )

    @pytest.mark.parametrize("command", ["once", "inspect", "run"])
    def test_refused(self, redis_server: RedisServer, command: str) -> None:
        """--cluster at a server that is not a Cluster node: exit 3, reason topology, one line;
        run refuses at start."""
        extra = ["--metrics-addr", f"127.0.0.1:{free_port()}"] if command == "run" else []
        ran = sweeperd(command, "--cluster", "--redis-url", redis_server.url, "-q", "q", *extra)
        assert one_line(ran, 3) == f"127.0.0.1:{redis_server.port} {self.NOT_CLUSTER}"
        if command != "run":
            ran = sweeperd(
                command, "--cluster", "--redis-url", redis_server.url, "-q", "q", "--json"
            )
            assert json.loads(ran.out)["error"]["reason"] == "topology"


@pytest.fixture(scope="module")
def bare_cluster(server_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three primaries and no replica: one dead primary takes the Cluster down."""
    with Cluster(
        tmp_path_factory.mktemp(f"{server_kind}-bare-cluster"), kind=server_kind, replicas=0
    ) as made:
        yield made


def queue_on(cluster: Cluster, server: RedisServer, tag: str) -> str:
    for n in range(100_000):
        if cluster.owner(QueueKeys(f"{tag}{n}").active) is server:
            return f"{tag}{n}"
    raise AssertionError("no queue name found")


class TestCluster:
    def test_ready_with_one_queue_on_three_primaries(
        self, bare_cluster: Cluster, tmp_path: Path
    ) -> None:
        """One queue, three primaries: ready as soon as the queue's primary answers (the two
        that own none of the swept queues are not waited for)."""
        bare_cluster.flush()
        queue = queue_on(bare_cluster, bare_cluster.primaries()[0], "ready-")
        with DaemonProcess(
            tmp_path,
            "--cluster",
            "--redis-url",
            bare_cluster.seed_url(),
            "-q",
            queue,
            "--interval",
            "0.3",
        ) as d:
            d.wait_swept(queue)
            wait_until(lambda: d.get("/readyz")[0] == 200, what="ready")
            assert d.value("sweeperd_ready") == 1
            assert d.stop() == 0

    def test_cluster_down_names_the_dead_primary(
        self, bare_cluster: Cluster, tmp_path: Path
    ) -> None:
        """A primary killed with no replica to take over: the Cluster is down; once and inspect
        say so in the same words, naming the dead node (exit 3, reason cluster_down), and run
        counts and logs it."""
        bare_cluster.flush()
        live, dead = bare_cluster.primaries()[:2]
        queue = queue_on(bare_cluster, live, "down-")
        with live.client() as c:
            write_leases(c, QueueKeys(queue), [b"j"], PAST_MS, run_id(c))
        args = ("--cluster", "--redis-url", live.url, "-q", queue)
        with DaemonProcess(tmp_path, *args, "--interval", "0.3") as d:
            d.wait_swept(queue)
            bare_cluster.kill(dead)
            try:
                with live.client() as c:
                    wait_until(
                        lambda: b"cluster_state:fail" in cluster_info(c), what="the cluster to fail"
                    )
                said = one_line(sweeperd("once", *args), 3)
                inspected = one_line(sweeperd("inspect", *args), 3)
                inspected_json = sweeperd("inspect", *args, "--json").json()["error"]
                wait_until(lambda: failures(d, queue, "cluster_down"), what="cluster_down")
                assert d.stop() == 0
            finally:
                bare_cluster.revive(dead)
        words = (
            f"the cluster is down (CLUSTERDOWN The cluster is down): 127.0.0.1:{dead.port} "
            "failed, and it has no replica: start the failed nodes again (a replica that is up "
            "takes over), or move their slots to a primary that is up"
        )
        assert said.startswith(f"{words}: refused, nothing written")
        assert said.endswith("; run it again once the cluster is up")
        assert inspected == f"{words}; run it again once the cluster is up"
        assert inspected_json == {"reason": "cluster_down", "message": inspected}
        [failed] = [e for e in d.events("sweep_failed") if e["reason"] == "cluster_down"]
        assert failed["error"] == words


class TestSentinel:
    @pytest.mark.parametrize("command", ["once", "inspect", "run"])
    def test_at_a_redis_server(self, redis_server: RedisServer, command: str) -> None:
        """--sentinel naming a Redis server: not a Sentinel, exit 3, one line."""
        extra = ["--metrics-addr", f"127.0.0.1:{free_port()}"] if command == "run" else []
        ran = sweeperd(
            command,
            "--sentinel",
            f"127.0.0.1:{redis_server.port}",
            "--sentinel-master",
            "m",
            "-q",
            "q",
            *extra,
        )
        assert one_line(ran, 3) == (
            f"127.0.0.1:{redis_server.port} is not a Sentinel (a Redis server answers there): "
            "give Sentinel addresses in --sentinel, or drop it"
        )

    def test_a_sentinel_that_refuses_the_user_is_noperm(
        self, redis_server: RedisServer, tmp_path: Path, server_kind: str
    ) -> None:
        """A Sentinel whose ACL refuses SENTINEL MASTERS: exit 1, reason noperm, the command and
        the rule for the Sentinels' user named (never "sees it down")."""
        port = free_port()
        conf = tmp_path / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
            f"sentinel monitor m 127.0.0.1 {redis_server.port} 1\n"
        )
        sentinel = subprocess.Popen([server_binary(server_kind), str(conf), "--sentinel"])
        try:
            with redis.Redis(port=port, socket_timeout=5) as c:
                wait_until(lambda: c.ping(), what="the Sentinel")
                c.execute_command("ACL", "SETUSER", "default", "-sentinel|masters")
            args = ["--sentinel", f"127.0.0.1:{port}", "--sentinel-master", "m", "-q", "q"]
            ran = sweeperd("inspect", *args, "--json")
        finally:
            sentinel.terminate()
            sentinel.wait()
        said = (
            "User default has no permissions to run the 'sentinel|masters' command"
            if server_kind == "valkey"
            else "this user has no permissions to run the 'sentinel|masters' command"
        )
        assert one_line(ran, 1) == (
            f"127.0.0.1:{port}: the ACL user default may not run SENTINEL MASTERS ({said}): "
            "grant it with ACL SETUSER default +sentinel|masters (docs/security.md#the-acl-user)"
        )
        assert json.loads(ran.out)["error"]["reason"] == "noperm"

    def test_unreachable(self) -> None:
        """No Sentinel answers: one short line naming each address and why."""
        ports = [free_port(), free_port()]
        sentinels = ",".join(f"127.0.0.1:{p}" for p in ports)
        ran = sweeperd(
            "once",
            "--sentinel",
            sentinels,
            "--sentinel-master",
            "m",
            "-q",
            "q",
            "--socket-timeout",
            "1",
        )
        assert one_line(ran, 3) == (
            f"no Sentinel named a primary for 'm': 127.0.0.1:{ports[0]}: connection refused; "
            f"127.0.0.1:{ports[1]}: connection refused"
        )


def loading_start(server: RedisServer) -> None:
    """Start the server without waiting for it to load; return once it answers as loading."""
    server.process = subprocess.Popen(server.argv(), stdout=subprocess.DEVNULL)
    with server.client() as c:
        wait_until(lambda: _loading(c), what="the server to be loading")


def _loading(c: redis.Redis) -> bool:
    try:
        return info(c, "persistence")["loading"] == "1"
    except redis.ConnectionError:
        return False


class TestLoading:
    FILLER = 30_000  # keys loaded at 100 µs each: about 3 s of loading

    def restart_loading(self, server: RedisServer) -> None:
        """Save, stop, and start again loading FILLER keys slowly (key-load-delay)."""
        with server.client() as c:
            c.execute_command("DEBUG", "POPULATE", self.FILLER, "filler")
            c.save()
        server.stop()
        server.extra["key-load-delay"] = "100"
        server.extra["loading-process-events-interval-bytes"] = "1024"  # answer while loading
        loading_start(server)

    def test_once_says_loading(self, tmp_path: Path, server_kind: str) -> None:
        """once while the server loads: exit 3, reason loading (not reply_lost), one line
        naming the server, what it said, that nothing was written, and to run it again."""
        server = RedisServer(tmp_path / "server", kind=server_kind).start()
        try:
            self.restart_loading(server)
            ran = sweeperd("once", "--redis-url", server.url, "-q", "q", "--json")
            assert ran.code == 3, ran.err
            error = json.loads(ran.out)["error"]
            assert error["reason"] == "loading"
            name = "Valkey" if server_kind == "valkey" else "Redis"  # each names itself
            assert error["message"] == (
                f"127.0.0.1:{server.port} is loading its dataset (LOADING {name} is loading the "
                "dataset in memory): refused, nothing written, what is due unreadable; run it "
                "again once it has loaded"
            )
        finally:
            server.stop()

    def test_the_restart_sweep_waits_for_the_load(self, tmp_path: Path, server_kind: str) -> None:
        """A tick that meets a loading server fails with reason loading and comes again soon:
        once it has loaded, the restart is counted and the earlier run's leases come back
        exempt at once, long before the 30 s interval."""
        server = RedisServer(tmp_path / "server", kind=server_kind).start()
        try:
            with server.client() as c:
                write_leases(c, Q, [b"a", b"b"], now_ms() + FUTURE_OFFSET_MS, run_id(c))
            # --deadline-source off: the leases made due below must wait for the load, unheard
            args = ("--redis-url", server.url, "-q", "q", "--interval", "30", "--jitter", "0",
                    "--deadline-source", "off")  # fmt: skip
            with DaemonProcess(tmp_path, *args) as d:
                d.wait_swept("q")
                with server.client() as c:  # due now, saved so, and not swept before the stop
                    c.zadd(Q.active, {b"a": PAST_MS, b"b": PAST_MS}, xx=True)
                self.restart_loading(server)
                assert d.process is not None
                d.process.send_signal(signal.SIGHUP)  # a tick now, while it loads
                wait_until(lambda: failures(d, "q", "loading"), what="a loading failure")
                started = time.monotonic()
                d.wait_value("sweeperd_exempt_total", 2, queue="q")
                print(f"\nrecovered {time.monotonic() - started:.1f} s after the first loading")
                node = f"127.0.0.1:{server.port}"
                assert d.value("sweeperd_server_restarts_total", node=node) == 1
                assert failures(d, "q", "reply_lost") == 0
                assert d.stop() == 0
        finally:
            server.stop()
