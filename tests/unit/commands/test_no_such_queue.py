"""`inspect` and `once` on a queue with no key at all: said, without calling it an error."""

from __future__ import annotations

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import FUTURE_OFFSET_MS, lease, now_ms
from tests.support.invoke import Ran, sweeperd
from tests.support.servers import RedisServer


def absent(queue: str, root: str = "emq") -> str:
    keys = QueueKeys(queue, root)
    return (
        f"none of the keys of queue {queue} exists ({keys.active}, :pending, :dead, "
        ":metrics:failed): an empty queue, or a wrong name or --prefix-root"
    )


def run(server: RedisServer, command: str, queue: str, *args: str) -> Ran:
    return sweeperd(command, "-q", queue, "--redis-url", server.url, *args)


class TestInspect:
    def test_a_typo_is_said_in_the_text(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A queue with no key: the counts, then a line saying so; exit 0, nothing written."""
        lease(r, QueueKeys("emails"), b"j", attempts=1)
        ran = run(redis_server, "inspect", "emials")
        assert (ran.code, ran.err) == (0, "")
        assert ran.out.splitlines()[-1] == f"note       {absent('emials')}"
        assert r.dbsize() == 2

    def test_a_typo_is_a_field_in_json(self, redis_server: RedisServer) -> None:
        """--json says it in `exists`: false, exit 0."""
        ran = run(redis_server, "inspect", "typo", "--json", "--prefix-root", "jobs")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json()["exists"] is False

    def test_an_emptied_queue_with_any_key_is_no_typo(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A queue whose sets were emptied but whose failed count is kept exists: no note."""
        r.hset(QueueKeys("q").metrics_failed, "count", 3)
        text, body = run(redis_server, "inspect", "q"), run(redis_server, "inspect", "q", "--json")
        assert (text.code, body.code) == (0, 0)
        assert "note" not in text.out
        assert body.json()["exists"] is True


class TestOnce:
    def test_nothing_due_on_a_queue_with_no_key(self, redis_server: RedisServer) -> None:
        """once says why nothing was due when the queue has no key; exit 0."""
        for args in ([], ["--dry-run"]):
            ran = run(redis_server, "once", "typo", *args)
            assert (ran.code, ran.err) == (0, ""), args
            assert ran.out.splitlines()[-1] == f"nothing was due: {absent('typo')}", args

    def test_nothing_due_on_a_queue_that_exists(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A queue with leases not yet due: plain "nothing was due"."""
        lease(r, QueueKeys("q"), b"later", now_ms() + FUTURE_OFFSET_MS, attempts=1)
        ran = run(redis_server, "once", "q")
        assert ran.out.splitlines()[-1] == "nothing was due"
