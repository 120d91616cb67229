"""The shared scan: the queues of a root whose sorted sets exist, found by SCAN on a real server."""

from __future__ import annotations

import redis

from sweeperd.daemon.membership import MembershipStore
from sweeperd.keyspace import QueueKeys, active_key, members_key, queue_of_key
from sweeperd.server.scan import find_queues
from sweeperd.top.layout import QUEUE_SETS


class TestFindQueues:
    def test_finds_every_active_set_of_the_root(self, r: redis.Redis) -> None:
        """Every <root>:{q}:active zset is a queue; other keys and roots are not."""
        for queue in ("a", "b:c", "ü"):
            r.zadd(QueueKeys(queue).active, {"j": 1})
        r.zadd(QueueKeys("other", "elsewhere").active, {"j": 1})
        r.zadd(QueueKeys("p").pending, {"j": 1})
        r.set(QueueKeys("string").active, "not a zset")
        assert find_queues(r, "emq") == {"a", "b:c", "ü"}

    def test_a_root_with_glob_characters_is_matched_literally(self, r: redis.Redis) -> None:
        """A root like `e*q` finds its own queues, not those of `exq`."""
        r.zadd(QueueKeys("mine", "e*q").active, {"j": 1})
        r.zadd(QueueKeys("theirs", "exq").active, {"j": 1})
        assert find_queues(r, "e*q") == {"mine"}

    def test_sweeperds_own_keys_are_never_queues(self, r: redis.Redis) -> None:
        """The members key under <root>:sweeperd: is not a queue; a queue named sweeperd is."""
        MembershipStore(r, "emq", "r1", 5.0).beat()
        r.zadd(QueueKeys("sweeperd").active, {"j": 1})
        r.zadd(QueueKeys("members").active, {"j": 1})
        assert r.exists(members_key("emq")) == 1
        assert find_queues(r, "emq") == {"sweeperd", "members"}

    def test_any_of_the_named_sets_finds_a_queue(self, r: redis.Redis) -> None:
        """top's scan: a queue with only a pending or a dead set is found too; any other set,
        and sweeperd's own keys, are not."""
        r.zadd(QueueKeys("a").active, {"j": 1})
        r.zadd(QueueKeys("p").pending, {"j": 1})
        r.zadd(QueueKeys("d").dead, {"j": 1})
        r.zadd("emq:{other}:delayed", {"j": 1})
        MembershipStore(r, "emq", "r1", 5.0).beat()
        assert find_queues(r, "emq", QUEUE_SETS) == {"a", "p", "d"}
        assert find_queues(r, "emq") == {"a"}


class TestQueueOfKey:
    def test_the_members_key_is_not_an_active_key(self) -> None:
        """The parser refuses the members key, under any root, and takes a real active key."""
        for root in ("emq", "jobs", "e*q"):
            assert queue_of_key(members_key(root).encode(), root) is None
        assert queue_of_key(QueueKeys("members").active.encode(), "emq") == "members"

    def test_the_listeners_active_key_is_the_queues(self) -> None:
        """active_key (the listener's, per queue swept) is QueueKeys' active key, byte for
        byte, and parses back to its queue."""
        for root, queue in (("emq", "a"), ("jobs", "b:c"), ("emq", "ü")):
            assert active_key(queue, root) == QueueKeys(queue, root).active.encode()
            assert queue_of_key(active_key(queue, root), root) == queue

    def test_a_key_of_another_set_or_a_bad_name_is_no_queue(self) -> None:
        """Only the named sets count; a name with whitespace, or bytes that are not UTF-8, is
        no queue name."""
        assert queue_of_key(QueueKeys("q").pending.encode(), "emq") is None
        assert queue_of_key(QueueKeys("q").pending.encode(), "emq", ("pending",)) == "q"
        assert queue_of_key(b"emq:{a b}:active", "emq") is None
        assert queue_of_key(b"emq:{\xff}:active", "emq") is None
        assert queue_of_key(b"emq:{}:active", "emq") is None
