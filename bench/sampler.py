"""How long after its deadline each lease came back, on the server's clock: the pending sets a
keyspace event names are read with one TIME, and each job new there is dated by its deadline."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import redis

from tests.support.servers import RedisServer

EVENTS = "__keyspace@0__:emq:{*}:pending"  # a ZADD to a pending set: a recovery


@dataclass
class Sampler:
    """Reads the pending sets a keyspace event names, with the server's TIME: each lease's
    latency after its deadline (ms, server clock), from `deadlines` (job id -> deadline) where
    given, else from its row's `deadline` field. A job is seen once its deadline is known."""

    server: RedisServer
    deadlines: dict[bytes, float] | None = None
    latencies_ms: list[float] = field(default_factory=list)
    seen: set[bytes] = field(default_factory=set)
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Sampler:
        with self.server.client() as client:
            client.config_set("notify-keyspace-events", "Kz")
        events = self.server.client().pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
        events.psubscribe(EVENTS)
        self.thread = threading.Thread(target=self.run, args=(events,), daemon=True)
        self.thread.start()
        return self

    def run(self, events: redis.client.PubSub) -> None:
        """Every event come so far read at once, with one TIME: a wake's round recovers dozens
        of queues together, and a read per event would date the last ones by the reads before
        them (the latency it gives is the server's time at the read: an upper bound)."""
        reader = self.server.client()
        while not self.stopped.is_set():
            message = events.get_message(timeout=0.1)
            sets = set()
            while message is not None:
                sets.add(message["channel"].decode().removeprefix("__keyspace@0__:"))
                message = events.get_message(timeout=0)
            if not sets:
                continue
            pipe = reader.pipeline(transaction=False)
            pipe.time()
            for pending in sorted(sets):
                pipe.zrange(pending, 0, -1)
            (seconds, micros), *read = pipe.execute()
            now_ms = seconds * 1000 + micros / 1000
            new = [
                (pending, job)
                for pending, ids in zip(sorted(sets), read, strict=True)
                for job in ids
                if job not in self.seen
            ]
            for (_, job), deadline in zip(new, self._deadlines(reader, new), strict=True):
                if deadline is not None:
                    self.seen.add(job)
                    self.latencies_ms.append(now_ms - deadline)
        events.close()

    def _deadlines(self, reader: redis.Redis, new: list[tuple[str, bytes]]) -> list[float | None]:
        """The new jobs' deadlines: given, or read from their rows."""
        if self.deadlines is not None:
            return [self.deadlines.get(job) for _, job in new]
        pipe = reader.pipeline(transaction=False)
        for pending, job in new:
            pipe.hget(pending.removesuffix("pending") + f"job:{job.decode()}", "deadline")
        return [None if d is None else float(d) for d in pipe.execute()]

    def all_back(self) -> bool:
        return self.deadlines is not None and len(self.seen) == len(self.deadlines)

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
