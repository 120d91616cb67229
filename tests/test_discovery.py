"""Discovery: the queues whose active set exists, found by SCAN on a real server."""

from __future__ import annotations

import redis

from sweeperd.discovery import discover_queues
from sweeperd.keyspace import QueueKeys, queue_of_active_key
from sweeperd.membership import MembershipStore, members_key


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

    def test_sweeperds_own_keys_are_never_queues(self, r: redis.Redis) -> None:
        """The members key under <root>:sweeperd: is not a queue; a queue named sweeperd is."""
        MembershipStore(r, "emq", "r1", 5.0).beat()
        r.zadd(QueueKeys("sweeperd").active, {"j": 1})
        r.zadd(QueueKeys("members").active, {"j": 1})
        assert r.exists(members_key("emq")) == 1
        assert discover_queues(r, "emq") == {"sweeperd", "members"}


class TestQueueOfActiveKey:
    def test_the_members_key_is_not_an_active_key(self) -> None:
        """The parser refuses the members key, under any root, and takes a real active key."""
        for root in ("emq", "jobs", "e*q"):
            assert queue_of_active_key(members_key(root).encode(), root) is None
        assert queue_of_active_key(QueueKeys("members").active.encode(), "emq") == "members"
