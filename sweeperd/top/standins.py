"""The replicas `sweeperd top` reads in place of a primary that cannot be read: its queues
listed and counted there, read-only, the rows marked so."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import redis

from sweeperd.constants import TopologyMode
from sweeperd.server.connection import Connection
from sweeperd.server.scan import find_queues
from sweeperd.server.topology import Address, name_of
from sweeperd.top.layout import QUEUE_SETS
from sweeperd.top.read import OK, REPLICA, NodeRead, NodeReader


class Standins:
    """A reader per replica asked for, kept while its primary cannot be read."""

    def __init__(self, connection: Connection, root: str) -> None:
        self._connection = connection
        self._root = root
        self._readers: dict[str, NodeReader] = {}
        # The replicas read since the last `release`.
        self._used: set[str] = set()

    def read(
        self,
        primary: str,
        replicas: Iterable[Address],
        queues: Sequence[str],
        detail: set[str],
        now: float,
        members_key: str | None,
    ) -> NodeRead | None:
        """`primary`'s queues read on the first of its replicas that answers them all (a
        replica of a Cluster that is down refuses them as its primary's peers do): its line
        says whom it is read for, its rows are marked; None when none does."""
        for address in replicas:
            reader = self._reader(address)
            try:
                read = reader.read(queues, detail, now, members_key)
            except redis.RedisError:
                continue
            if read.failure is not None:
                continue
            self._used.add(reader.node)
            rows = [replace(r, state=REPLICA) if r.state == OK else r for r in read.rows]
            return replace(read, server=replace(read.server, reads_for=primary), rows=rows)
        return None

    def scan(self, replicas: Iterable[Address]) -> set[str] | None:
        """Return the queues the first replica that answers SCAN holds; None when none answers."""
        for address in replicas:
            reader = self._reader(address)
            try:
                found = find_queues(reader.client, self._root, QUEUE_SETS)
            except redis.RedisError:
                continue
            self._used.add(reader.node)
            return found
        return None

    def release(self) -> None:
        """Close the readers not used since the last release."""
        for name in [n for n in self._readers if n not in self._used]:
            self._readers.pop(name).client.close()
        self._used = set()

    def close(self) -> None:
        self._used = set()
        self.release()

    def _reader(self, address: Address) -> NodeReader:
        name = name_of(address)
        if name not in self._readers:
            cluster = self._connection.topology.mode is TopologyMode.CLUSTER
            client = self._connection.client(address)
            self._readers[name] = NodeReader(name, client, self._root, readonly=cluster)
        return self._readers[name]
