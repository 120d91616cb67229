"""The operator matrix's topologies as an operator meets them: one server, a 3+3 Cluster, and a
primary with its replica behind Sentinel, each data node carrying the user `sweeperd acl`
prints; the flags a command takes to reach them as a user, and the seeded ids read back."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Self

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import PAST_MS, acl_line, run_id
from tests.support.servers import RedisServer
from tests.support.topologies import MASTER, Cluster, SentinelGroup, wait_for, write_leases

ACL_USER = "sweeperd"
DEFAULT_USER = "default"
USERS = (DEFAULT_USER, ACL_USER)
PASSWORD = "matrix-Pw-4417"
SEEDED = (b"a", b"b")  # each queue's expired leases, granted by this run (counted)


def where_ids(client: redis.Redis, queue: str) -> dict[str, str]:
    """Each seeded id of `queue` as `<set>:<state>:<stalled>`: the set it is in (active,
    pending, dead, or none) and its row's fields ('' where absent)."""
    keys = QueueKeys(queue)
    found = {}
    for job in SEEDED:
        sets = [
            name
            for name, key in (
                ("active", keys.active),
                ("pending", keys.pending),
                ("dead", keys.dead),
            )
            if client.zscore(key, job) is not None
        ]
        state, stalled = (
            v.decode() if isinstance(v, bytes) else ""
            for v in client.hmget(keys.job(job), "state", "stalled")
        )
        found[job.decode()] = f"{','.join(sets) or 'none'}:{state}:{stalled}"
    return found


class Scene:
    """One topology: its data nodes carry the ACL user the row's `sweeperd acl` line makes, in
    an ACL file read at every start (a restarted node has it too)."""

    name = ""

    def __init__(self, workdir: Path, kind: str) -> None:
        self.workdir = workdir
        self.kind = kind
        self.paused: list[RedisServer] = []

    # What a command is given.
    def topology_flags(self) -> list[str]:
        """The flags that name the topology: none, --cluster, or the Sentinels."""
        return []

    def url(self, user: str) -> str:
        raise NotImplementedError

    def credentials(self, user: str) -> str:
        return "" if user == DEFAULT_USER else f"{ACL_USER}:{PASSWORD}@"

    def flags(self, user: str) -> list[str]:
        """What a command takes to reach the servers as `user`."""
        return ["--redis-url", self.url(user), *self.topology_flags()]

    def acl_line(self) -> str:
        """The line `sweeperd acl` prints for the row: every command, on this topology."""
        return acl_line(*self.topology_flags(), user=ACL_USER)

    def named(self, server: RedisServer) -> str:
        """How a line names a server that cannot be reached: the URL when it is the URL's
        server, else host:port."""
        return server.node

    # The servers.
    def nodes(self) -> list[RedisServer]:
        """Every data node: where the ACL user must exist."""
        raise NotImplementedError

    def primaries(self) -> list[RedisServer]:
        raise NotImplementedError

    def slot_owners(self) -> dict[int, RedisServer]:
        """The primary of every slot now."""
        [primary] = self.primaries()
        return dict.fromkeys(range(16384), primary)

    def live(self) -> list[RedisServer]:
        """The nodes that answer: running, and not stopped (SIGSTOP)."""
        return [
            n
            for n in self.nodes()
            if n.process is not None and n.process.poll() is None and n not in self.paused
        ]

    def with_users(self) -> Self:
        """The row's ACL user in each node's ACL file: the line's rules, its password given."""
        rules = self.acl_line().removeprefix("ACL SETUSER ").replace("><password>", f">{PASSWORD}")
        for server in self.nodes():
            users = server.workdir / "users.acl"
            users.write_text(f"user {rules}\n")
            server.extra["aclfile"] = str(users)
        return self

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Every node up, the primaries as they should be, the links up."""

    def revived(self, server: RedisServer) -> None:
        """A killed server started again."""
        server.process = None
        server.start()

    def pause(self, server: RedisServer) -> None:
        """SIGSTOP: the node answers nothing, and takes nothing over, until resumed."""
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)
        self.paused.append(server)

    def resume(self) -> None:
        for server in self.paused:
            assert server.process is not None
            os.kill(server.process.pid, signal.SIGCONT)
        self.paused = []

    # The keyspace and the ACL.
    def flush(self) -> None:
        for server in self.primaries():
            with server.client() as c:
                c.flushall()
                c.script_flush()

    def seed(self, queue: str, owner: RedisServer) -> None:
        """The queue's expired leases on its primary `owner`, granted by its process (this
        run's epoch: counted), replicated."""
        with owner.client() as c:
            write_leases(c, QueueKeys(queue), list(SEEDED), PAST_MS, run_id(c))

    def ids(self, queue: str, owner: RedisServer) -> dict[str, str]:
        """Where the queue's seeded ids are, read on `owner` or where its MOVED points (a
        failover since): no CLUSTER SLOTS, which a condition may take away."""
        with owner.client() as c:
            try:
                return where_ids(c, queue)
            except redis.exceptions.MovedError as exc:
                host, port = exc.node_addr
        with redis.Redis(host=host, port=port, socket_timeout=10) as there:
            return where_ids(there, queue)

    def acl_log_reset(self) -> None:
        for server in self.live():
            with server.client() as c:
                c.acl_log_reset()

    def acl_log(self) -> list[tuple[str, str, str]]:
        """Every live node's ACL LOG: (node, user, what was refused)."""
        entries = []
        for server in self.live():
            with server.client() as c:
                for entry in c.acl_log():
                    entries.append((server.node, str(entry["username"]), str(entry["object"])))
        return entries

    def set_rule(self, rule: str) -> None:
        """One ACL rule for both users on every live node (a command taken or given back)."""
        for server in self.live():
            with server.client() as c:
                for user in USERS:
                    c.execute_command("ACL", "SETUSER", user, rule)

    def configure(self, name: str, value: str) -> None:
        for server in self.live():
            with server.client() as c:
                c.config_set(name, value)


class OneServer(Scene):
    """A server of its own, which the URL names."""

    name = "standalone"

    def __init__(self, workdir: Path, kind: str) -> None:
        super().__init__(workdir, kind)
        self.server = RedisServer(workdir / "server", kind=kind)

    def url(self, user: str) -> str:
        return f"redis://{self.credentials(user)}127.0.0.1:{self.server.port}/0"

    def named(self, server: RedisServer) -> str:
        return f"redis://127.0.0.1:{server.port}/0"

    def nodes(self) -> list[RedisServer]:
        return [self.server]

    def primaries(self) -> list[RedisServer]:
        return [self.server]

    def start(self) -> Self:
        self.with_users().server.start()
        return self

    def stop(self) -> None:
        self.server.stop()


class ClusterScene(Scene):
    """Three primaries and a replica each; the URL names the first node."""

    name = "cluster"

    def __init__(self, workdir: Path, kind: str) -> None:
        super().__init__(workdir, kind)
        self.cluster = Cluster(workdir / "cluster", kind=kind)
        self.seed_node = self.cluster.servers[0]

    def topology_flags(self) -> list[str]:
        return ["--cluster"]

    def url(self, user: str) -> str:
        return f"redis://{self.credentials(user)}127.0.0.1:{self.seed_node.port}/0"

    def nodes(self) -> list[RedisServer]:
        return self.cluster.servers

    def primaries(self) -> list[RedisServer]:
        return self.cluster.primaries()

    def slot_owners(self) -> dict[int, RedisServer]:
        by_port = {s.port: s for s in self.cluster.servers}
        return {
            slot: by_port[port]
            for first, last, port in self.cluster.slots()
            for slot in range(first, last + 1)
        }

    def start(self) -> Self:
        self.with_users().cluster.start()
        return self

    def stop(self) -> None:
        self.cluster.stop()

    def settle(self) -> None:
        self.cluster.settle()

    def flush(self) -> None:
        self.cluster.flush()

    def revived(self, server: RedisServer) -> None:
        """A killed primary started again, and every node seeing it up (its FAIL flag cleared)
        before its stopped replica is let go: a replica resumed while its primary is still
        marked failed wins an election and takes over."""
        super().revived(server)
        wait_for(
            lambda: self.cluster.seen_up(server, self.live()), f"every node to see {server.node} up"
        )
        self.resume()


class SentinelScene(Scene):
    """A primary and its replica behind three Sentinels; the URL gives the credentials (its
    host is unused: Sentinel names the primary)."""

    name = "sentinel"

    def __init__(self, workdir: Path, kind: str) -> None:
        super().__init__(workdir, kind)
        self.group = SentinelGroup(workdir / "sentinel", kind=kind)

    def topology_flags(self) -> list[str]:
        return ["--sentinel", self.group.addresses, "--sentinel-master", MASTER]

    def url(self, user: str) -> str:
        return f"redis://{self.credentials(user)}localhost:6379/0"

    def nodes(self) -> list[RedisServer]:
        return [self.group.primary, self.group.replica]

    def primaries(self) -> list[RedisServer]:
        return [self.group.current()]

    def start(self) -> Self:
        self.with_users().group.start()
        return self

    def stop(self) -> None:
        self.group.stop()

    def settle(self) -> None:
        self.group.settle()

    def flush(self) -> None:
        super().flush()
        with self.group.current().client() as c:
            c.execute_command("WAIT", 1, 2000)

    def down_after(self, ms: int) -> None:
        """How long every Sentinel waits before it calls the primary down."""
        for n in range(len(self.group.sentinel_ports)):
            with self.group.sentinel_client(n) as c:
                c.execute_command("SENTINEL", "SET", MASTER, "down-after-milliseconds", ms)

    def revived(self, server: RedisServer) -> None:
        """A killed primary started again, the Sentinels quick to call it down again only once
        each has had its answer: told first, they fail it over for its silence before."""
        super().revived(server)

        def answered() -> bool:
            for n in range(len(self.group.sentinel_ports)):
                with self.group.sentinel_client(n) as c:
                    state = c.sentinel_master(MASTER)
                if int(state["last-ok-ping-reply"]) > 500 or state["is_sdown"]:
                    return False
            return True

        wait_for(answered, "every Sentinel to have the primary's answer")
        self.down_after(1000)


SCENES: dict[str, type[Scene]] = {s.name: s for s in (OneServer, ClusterScene, SentinelScene)}
