"""Real topologies for the tests, of either server kind: a Cluster of servers with the module,
and a primary with a replica behind three Sentinels. Started once per test module."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

import redis
from redis.crc import key_slot

from sweeperd.keyspace import QueueKeys
from sweeperd.server.clusternodes import cluster_nodes
from tests.support.helpers import lease
from tests.support.servers import START_TIMEOUT_S, RedisServer, free_port, server_binary

SETTLE_S = 30.0  # a failover or a rejoin is done within this
NODE_TIMEOUT_MS = 1000  # cluster-node-timeout: a dead primary is failed over in about 2 s
MASTER = "sweepmaster"  # the name the Sentinels know the primary by
DOWN_AFTER_MS = 1000  # the Sentinels' down-after-milliseconds: a dead primary is down after 1 s
FAILOVER_TIMEOUT_MS = 3000
# A failover not done by then was aborted (its timeout, then twice that before another).
FAILOVER_AGAIN_S = 2 * FAILOVER_TIMEOUT_MS / 1000 + 1


def free_bus_port() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    while True:
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def wait_for(check: object, what: str, timeout_s: float = SETTLE_S) -> None:
    """Poll `check` (a callable) until it is truthy; errors on the way count as not yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(redis.RedisError, OSError):
            if check():  # type: ignore[operator]
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def info(client: redis.Redis, section: str) -> dict[str, str]:
    raw = client.execute_command("INFO", section)  # type: ignore[no-untyped-call]
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def write_leases(
    client: redis.Redis, keys: QueueKeys, ids: list[bytes], deadline_ms: int, epoch: bytes | None
) -> None:
    """Leases with rows (attempts 1, granted under `epoch`), each row written before its lease
    (see helpers.lease: a daemon may sweep between the two), replicated before it returns."""
    pipe = client.pipeline(transaction=False)
    granted = {} if epoch is None else {"lease_epoch": epoch}
    for job in ids:
        lease(pipe, keys, job, deadline_ms, attempts="1", state="active", **granted)
    pipe.execute()
    replicated(client)


def replicated(client: redis.Redis) -> None:
    """The server's writes so far reached its replicas (WAIT), when it has any."""
    replicas = int(info(client, "replication").get("connected_slaves", "0"))
    if replicas:
        client.execute_command("WAIT", replicas, 2000)  # type: ignore[no-untyped-call]


class Started:
    """A topology used in a with block: started on entry (stopped again if that fails)."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class Cluster(Started):
    """Three primaries and a replica each (or none), the module loaded on every node."""

    def __init__(
        self, workdir: Path, *, kind: str = "redis", primaries: int = 3, replicas: int = 1
    ) -> None:
        self.replicas = replicas
        self.servers: list[RedisServer] = []
        for n in range(primaries * (1 + replicas)):
            port = free_bus_port()
            self.servers.append(
                RedisServer(
                    workdir / f"node-{n}",
                    kind=kind,
                    port=port,
                    extra={
                        "cluster-enabled": "yes",
                        "cluster-config-file": str(workdir / f"node-{n}" / "nodes.conf"),
                        "cluster-node-timeout": str(NODE_TIMEOUT_MS),
                        "cluster-replica-validity-factor": "0",  # any replica may take over
                    },
                )
            )

    def start(self) -> Self:
        for server in self.servers:
            server.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *self.addresses(self.servers),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=START_TIMEOUT_S * 3,
        )
        self.settle()
        return self

    @staticmethod
    def addresses(servers: list[RedisServer]) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in servers]

    def stop(self) -> None:
        for server in self.servers:
            if server.process is not None and server.process.poll() is None:
                os.kill(server.process.pid, signal.SIGCONT)
            server.stop()

    def live(self) -> list[RedisServer]:
        return [s for s in self.servers if s.process is not None and s.process.poll() is None]

    def role(self, server: RedisServer) -> str:
        with server.client() as c:
            return info(c, "replication")["role"]

    def primaries(self) -> list[RedisServer]:
        return [s for s in self.live() if self.role(s) == "master"]

    def settled(self) -> bool:
        """Every live node says the cluster is ok, agrees on the primaries, and every replica
        has its link to its primary up."""
        primaries = {f"127.0.0.1:{s.port}" for s in self.primaries()}
        for server in self.live():
            with server.client() as c:
                state = c.execute_command("CLUSTER", "INFO")
                text = state.decode() if isinstance(state, bytes) else str(state)
                if "cluster_state:ok" not in text:
                    return False
                owners = {
                    f"{slot[2][0].decode()}:{slot[2][1]}"
                    for slot in c.execute_command("CLUSTER", "SLOTS")
                }
                if owners != primaries:
                    return False
                repl = info(c, "replication")
                if repl["role"] == "slave" and repl.get("master_link_status") != "up":
                    return False
        return len(primaries) == len(self.servers) // (1 + self.replicas)

    def heal(self) -> None:
        """Every node running again (one a failed test left killed or stopped is started or
        resumed: it rejoins as a replica), then settled."""
        for server in self.servers:
            if server.process is None or server.process.poll() is not None:
                server.process = None
                server.start()
            else:
                os.kill(server.process.pid, signal.SIGCONT)
        self.settle()

    def settle(self) -> None:
        wait_for(self.settled, "the cluster to settle")

    def seed_url(self, server: RedisServer | None = None) -> str:
        return (server or self.servers[0]).url

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.live()[0].port, socket_timeout=5)

    def slots(self) -> list[tuple[int, int, int]]:
        """(first slot, last slot, primary's port) as a live primary sees them."""
        with self.primaries()[0].client() as c:
            reply = c.execute_command("CLUSTER", "SLOTS")
        return [(int(first), int(last), int(nodes[0][1])) for first, last, *nodes in reply]

    def owner(self, key: str) -> RedisServer:
        """The primary that serves `key`'s slot now."""
        slot = key_slot(key.encode())
        for first, last, port in self.slots():
            if first <= slot <= last:
                return next(s for s in self.servers if s.port == port)
        raise AssertionError(f"no primary serves slot {slot}")

    def replica_of(self, primary: RedisServer) -> RedisServer:
        for server in self.live():
            with server.client() as c:
                repl = info(c, "replication")
            if repl["role"] == "slave" and int(repl["master_port"]) == primary.port:
                return server
        raise AssertionError(f"no replica follows {primary.port}")

    def run_id(self, server: RedisServer) -> bytes:
        with server.client() as c:
            return info(c, "server")["run_id"].encode()

    def flush(self) -> None:
        """Every primary's keyspace emptied, every node's script cache too."""
        for server in self.primaries():
            with server.client() as c:
                c.flushall()
                replicated(c)
        for server in self.live():
            with server.client() as c:
                c.script_flush()

    def failover(self, replica: RedisServer) -> None:
        """CLUSTER FAILOVER on a replica: it becomes its primary's primary, gracefully."""
        with replica.client() as c:
            c.execute_command("CLUSTER", "FAILOVER")
        wait_for(lambda: self.role(replica) == "master", "the replica to take over")
        self.settle()

    def kill(self, primary: RedisServer) -> None:
        """kill -9: the process is gone at once, its files kept for a restart."""
        assert primary.process is not None
        primary.process.kill()
        primary.process.wait()

    def revive(self, server: RedisServer) -> None:
        """Start a killed node again: it rejoins as a replica of the primary that replaced it."""
        server.process = None
        server.start()
        self.settle()

    def pause(self, server: RedisServer) -> None:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)

    def resume(self, server: RedisServer) -> None:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def hung(self, primary: RedisServer) -> Iterator[None]:
        """A primary SIGSTOPped where it is: its replica may not take over meanwhile. Past the
        node timeout (a loaded machine's slow test) a failover would come, and might turn the
        resumed primary into a replica under a later test (its FLUSHALL refused as READONLY).
        Resumed, failovers are allowed again once every node sees it up (a replica let go
        while its primary is still marked failed wins an election)."""
        replica = self.replica_of(primary)
        with replica.client() as c:
            c.config_set("cluster-replica-no-failover", "yes")
        self.pause(primary)
        try:
            yield
        finally:
            self.resume(primary)
            wait_for(lambda: self.seen_up(primary), f"every node to see {primary.node} up")
            with replica.client() as c:
                c.config_set("cluster-replica-no-failover", "no")

    def seen_up(self, server: RedisServer, asked: Sequence[RedisServer] | None = None) -> bool:
        """Tell whether no node `asked` (every live one) marks `server` failing (fail or
        fail?)."""
        for node in self.live() if asked is None else asked:
            with node.client() as c:
                listed = cluster_nodes(c)
            flags = next(f[2] for f in listed if f[1].split("@")[0] == server.node)
            if "fail" in flags:
                return False
        return True

    def migrate(self, slot: int, source: RedisServer, target: RedisServer) -> None:
        """Move one slot and its keys from `source` to `target`, as redis-cli --cluster reshard
        does, in one MIGRATE."""
        with source.client() as s, target.client() as t:
            source_id = s.execute_command("CLUSTER", "MYID").decode()
            target_id = t.execute_command("CLUSTER", "MYID").decode()
            t.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100000)
            if keys:
                s.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            for server in self.primaries():
                with server.client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self.settle()

    def migrate_atomically(self, slot: int, source: RedisServer, target: RedisServer) -> None:
        """Move one slot by Valkey 9's atomic slot migration (CLUSTER MIGRATESLOTS), waited for
        until the source says it succeeded and every node agrees on the new owner."""
        with source.client() as s, target.client() as t:
            target_id = t.execute_command("CLUSTER", "MYID").decode()
            before = {job[b"name"] for job in migrations(s)}
            s.execute_command(
                "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot, "NODE", target_id
            )

            def over() -> bool:
                [job] = [job for job in migrations(s) if job[b"name"] not in before]
                assert job[b"state"] not in (b"failed", b"cancelled", b"canceled"), job
                return job[b"state"] == b"success"

            wait_for(over, f"slot {slot} to move to {target.port}")
        wait_for(lambda: self.owner_port(slot) == target.port, f"slot {slot} owned by its target")
        self.settle()

    def owner_port(self, slot: int) -> int:
        return next(port for first, last, port in self.slots() if first <= slot <= last)


def migrations(client: redis.Redis) -> list[dict[bytes, object]]:
    """CLUSTER GETSLOTMIGRATIONS: each migration the node knows as a dict of its fields."""
    reply = client.execute_command("CLUSTER", "GETSLOTMIGRATIONS")  # type: ignore[no-untyped-call]
    return [e if isinstance(e, dict) else dict(zip(e[::2], e[1::2], strict=True)) for e in reply]


class SentinelGroup(Started):
    """A primary, its replica and three Sentinels watching them (<kind>-server --sentinel)."""

    def __init__(self, workdir: Path, *, kind: str = "redis") -> None:
        self.workdir = workdir
        self.kind = kind
        self.primary = RedisServer(workdir / "primary", kind=kind)
        self.replica = RedisServer(workdir / "replica", kind=kind)
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    def start(self) -> Self:
        self.primary.start()
        self.replica.replicaof = ("127.0.0.1", self.primary.port)
        self.replica.start()
        wait_for(lambda: self.linked(self.replica), "the replica to sync")
        for n, port in enumerate(self.sentinel_ports):
            conf = self.workdir / f"sentinel-{n}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                f"logfile {self.workdir / f'sentinel-{n}.log'}\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    [server_binary(self.kind), str(conf), "--sentinel"], stdout=subprocess.DEVNULL
                )
            )
        wait_for(self.watched, "the Sentinels to see each other and the replica")
        return self

    def linked(self, replica: RedisServer) -> bool:
        with replica.client() as c:
            return info(c, "replication").get("master_link_status") == "up"

    def caught_up(self) -> None:
        """Wait until the replica holds every write the primary took so far: its link up and its
        offset at the primary's (a WAIT gives up after its timeout on a loaded machine, and a
        replica still resyncing acknowledges nothing)."""
        with self.current().client() as c:
            offset = int(info(c, "replication")["master_repl_offset"])

        def holds() -> bool:
            with self.other().client() as c:
                repl = info(c, "replication")
            return (
                repl.get("master_link_status") == "up" and int(repl["slave_repl_offset"]) >= offset
            )

        wait_for(holds, "the replica to hold the primary's writes")

    def sentinel_client(self, n: int = 0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.sentinel_ports[n], socket_timeout=5)

    def watched(self) -> bool:
        for n in range(len(self.sentinel_ports)):
            with self.sentinel_client(n) as c:
                state = c.sentinel_master(MASTER)
                if int(state["num-other-sentinels"]) < 2 or int(state["num-slaves"]) < 1:
                    return False
        return True

    def named_primary(self) -> int:
        with self.sentinel_client() as c:
            _host, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
        return int(port)

    def current(self) -> RedisServer:
        port = self.named_primary()
        return self.primary if self.primary.port == port else self.replica

    def other(self) -> RedisServer:
        return self.replica if self.current() is self.primary else self.primary

    @property
    def addresses(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)

    def failover(self) -> None:
        """SENTINEL FAILOVER: the replica is promoted (the old primary is left as it is, still
        saying it is a primary until Sentinel turns it into a replica, seconds later)."""
        before = self.current()
        asked = float("-inf")

        def promoted() -> bool:
            """Ask again, once a failover's time and its cooldown are past, while the old primary
            is named: one that outlasted its failover-timeout on a loaded machine was aborted,
            and nothing else retries it (asking sooner could fail the new primary over too)."""
            nonlocal asked
            if self.current() is not before:
                return True
            if time.monotonic() - asked >= FAILOVER_AGAIN_S:
                asked = time.monotonic()
                with self.sentinel_client() as c, contextlib.suppress(redis.ResponseError):
                    c.execute_command("SENTINEL", "FAILOVER", MASTER)
            return False

        wait_for(promoted, "Sentinel to name the new primary")
        wait_for(lambda: self.role(self.current()) == "master", "the new primary to be one")

    def role(self, server: RedisServer) -> str:
        with server.client() as c:
            return info(c, "replication")["role"]

    def kill(self) -> RedisServer:
        """kill -9 of the primary Sentinel names; the process is gone, its files kept."""
        victim = self.current()
        assert victim.process is not None
        victim.process.kill()
        victim.process.wait()
        return victim

    def settle(self) -> None:
        """The named primary is a primary, the other replicates it, link up (a dead one started
        again, a demoted one told to follow now rather than when Sentinel gets to it)."""
        primary, replica = self.current(), self.other()
        if replica.process is None or replica.process.poll() is not None:
            replica.process = None
            replica.replicaof = ("127.0.0.1", primary.port)
            replica.start()
        with replica.client() as c:
            if info(c, "replication")["role"] == "master":
                c.execute_command("REPLICAOF", "127.0.0.1", primary.port)

        def done() -> bool:
            primary, replica = self.current(), self.other()
            if not self.agreed(primary):
                return False
            with primary.client() as c:
                if info(c, "replication")["role"] != "master":
                    return False
            with replica.client() as c:
                repl = info(c, "replication")
            return (
                repl["role"] == "slave"
                and int(repl["master_port"]) == primary.port
                and (repl.get("master_link_status") == "up")
            )

        wait_for(done, "the primary and replica to settle")

    def agreed(self, primary: RedisServer) -> bool:
        """Tell whether every Sentinel names `primary`, up, with no failover under way: one
        still running after a test's kill could demote the primary under the next test's
        writes (an audit test found none of the rows it had planted on the named primary)."""
        for n in range(len(self.sentinel_ports)):
            with self.sentinel_client(n) as c:
                state = c.sentinel_master(MASTER)
                flags = str(state["flags"])
                if int(state["port"]) != primary.port or "failover" in flags or "down" in flags:
                    return False
        return True

    def stop(self) -> None:
        for process in self.sentinels:
            process.terminate()
        for process in self.sentinels:
            try:
                process.wait(START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.primary.stop()
        self.replica.stop()
