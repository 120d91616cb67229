"""Discovery: the queues whose active set exists, found by SCAN on a real server."""

from __future__ import annotations

import redis

from sweeperd.discovery import discover_queues
from sweeperd.keyspace import QueueKeys


class TestDiscoverQueues:
    def test_finds_every_active_set_of_the_root(self, r: redis.Redis) -> None:
        """Every <root>:{q}:active zset is a queue; other keys and roots are not."""
        for queue in ("a", "b:c", "ü"):
            r.zadd(QueueKeys(queue).active, {"j": 1})
        r.zadd(QueueKeys("other", "elsewhere").active, {"j": 1})
        r.zadd(QueueKeys("p").pending, {"j": 1})
        r.set(QueueKeys("string").active, "not a zset")
        assert discover_queues(r, "emq") == {"a", "b:c", "ü"}

    def test_a_root_with_glob_characters_is_matched_literally(self, r: redis.Redis) -> None:
        """A root like `e*q` finds its own queues, not those of `exq`."""
        r.zadd(QueueKeys("mine", "e*q").active, {"j": 1})
        r.zadd(QueueKeys("theirs", "exq").active, {"j": 1})
        assert discover_queues(r, "e*q") == {"mine"}
