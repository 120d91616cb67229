"""Membership on a real server: heartbeats in one sorted set, and a replica's share of queues."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from structlog.testing import capture_logs

from sweeperd.config.settings import QueueSettings, build_settings
from sweeperd.daemon.membership import MembershipStore
from sweeperd.daemon.sharing import Sharing
from sweeperd.fleet.node import BACKOFF_FIRST_S, Node
from sweeperd.keyspace import members_key
from sweeperd.server.connection import connect
from tests.support.helpers import owned_by, server_ms
from tests.support.servers import RedisServer, free_port
from tests.support.sharing_rig import TTL_S, make_sharing

KEY = "emq:sweeperd:{members}"
QUEUES = [QueueSettings(f"q{n}", 1.0, 1, 100) for n in range(60)]


def names(queues: list[QueueSettings]) -> list[str]:
    return [q.name for q in queues]


@pytest.fixture
def url(r: redis.Redis, redis_server: RedisServer) -> Iterator[str]:
    """The module server's URL, its keyspace empty."""
    yield redis_server.url


class TestMembershipStore:
    def test_the_key_is_sweeperds_own(self) -> None:
        """The members key sits under <root>:sweeperd: with a fixed hash tag, not a queue's."""
        assert members_key("emq") == KEY
        assert members_key("jobs") == "jobs:sweeperd:{members}"

    def test_a_heartbeat_lists_itself_until_its_deadline(self, r: redis.Redis) -> None:
        """The entry's score is the server's now plus the TTL; the key expires with it."""
        before = server_ms(r)
        view = MembershipStore(r, "emq", "r1", TTL_S).beat()
        after = server_ms(r)
        assert view.members == {"r1"}
        assert before <= view.now_ms <= after
        assert view.deadlines_ms["r1"] == view.now_ms + 3000
        assert r.zscore(KEY, "r1") == view.now_ms + 3000
        assert 0 < r.pttl(KEY) <= 3000

    def test_members_see_each_other(self, r: redis.Redis) -> None:
        """Each heartbeat answers with every live member, itself included."""
        MembershipStore(r, "emq", "r1", TTL_S).beat()
        view = MembershipStore(r, "emq", "r2", TTL_S).beat()
        assert view.members == {"r1", "r2"}

    def test_an_expired_member_is_dropped(self, r: redis.Redis) -> None:
        """A member whose deadline passed is removed from the key and listed nowhere."""
        r.zadd(KEY, {"dead:1": server_ms(r) - 1})
        view = MembershipStore(r, "emq", "r1", TTL_S).beat()
        assert view.members == {"r1"}
        assert r.zrange(KEY, 0, -1) == [b"r1"]

    def test_the_key_lives_as_long_as_its_longest_member(self, r: redis.Redis) -> None:
        """The key's expiry is the latest deadline among its members."""
        MembershipStore(r, "emq", "long", 60.0).beat()
        MembershipStore(r, "emq", "short", 1.0).beat()
        assert r.pttl(KEY) > 50_000

    def test_leave_removes_the_entry_at_once(self, r: redis.Redis) -> None:
        """Leaving deletes the member's entry; the others stay."""
        MembershipStore(r, "emq", "r1", TTL_S).beat()
        store = MembershipStore(r, "emq", "r2", TTL_S)
        store.beat()
        store.leave()
        assert r.zrange(KEY, 0, -1) == [b"r1"]


class TestSharing:
    def test_not_a_member_owns_nothing_until_its_first_heartbeat(self, url: str) -> None:
        """Before any heartbeat answered it sweeps no queue; alone after it, every queue."""
        sharing = make_sharing(url, "r1")
        assert sharing.owned(QUEUES) == []
        assert sharing.refresh(0.0) is True
        assert sharing.owned(QUEUES) == QUEUES
        assert sharing.seen() == 1
        assert sharing.refresh(1.0) is False  # nothing changed

    def test_members_split_the_queues_by_rendezvous(self, url: str) -> None:
        """Two members own disjoint shares that cover every queue, as ownership says."""
        one, two = make_sharing(url, "r1"), make_sharing(url, "r2")
        one.refresh(0.0)
        two.refresh(0.0)
        assert one.refresh(1.0) is True  # it sees r2 now
        shares = names(one.owned(QUEUES)), names(two.owned(QUEUES))
        assert sorted(shares[0] + shares[1]) == sorted(names(QUEUES))
        assert shares[0] == owned_by("r1", names(QUEUES), {"r1", "r2"})
        assert shares[0] and shares[1]

    def test_an_unreachable_member_keeps_its_share_past_its_deadline(self, url: str) -> None:
        """Unanswered past its own deadline it is no member (said once, the gauge at 0), and
        it keeps sweeping its share: the others take it too, an overlap rather than a gap."""
        sharing = make_sharing(url, "r1")
        sharing.refresh(0.0)
        dead = connect(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
        assert sharing.store is not None
        sharing.store = MembershipStore(dead, "emq", "r1", TTL_S)
        with capture_logs() as logs:
            assert sharing.refresh(TTL_S - 0.1) is False
            assert sharing.refresh(TTL_S) is False
            assert sharing.refresh(TTL_S + 1) is False
        assert sharing.owned(QUEUES) == QUEUES
        assert sharing.node is not None and sharing.node.up is False
        assert [e["event"] for e in logs] == ["redis_down", "membership_lost"]
        lost = logs[1]
        assert lost["others"] == [] and "no other member was live" in lost["hint"]
        assert sharing.seen() == 0
        assert "its heartbeat expired unanswered" in sharing.describe()

    def test_a_lost_membership_is_said_restored_when_the_heartbeat_answers(self, url: str) -> None:
        """membership_lost (a warning) after a connection outage is followed by
        membership_restored (after: lost) once a heartbeat answers again: the warning is
        not left as the last word; said once."""
        sharing = make_sharing(url, "r1")
        sharing.refresh(0.0)
        store = sharing.store
        dead = connect(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
        sharing.store = MembershipStore(dead, "emq", "r1", TTL_S)
        with capture_logs() as logs:
            sharing.refresh(TTL_S + 1)
            sharing.store = store  # the server answers again
            sharing.refresh(TTL_S + 2)
            sharing.refresh(TTL_S + 3)
        said = [(e["event"], e.get("after")) for e in logs if e["event"].startswith("member")]
        assert said == [("membership_lost", None), ("membership_restored", "lost")]
        assert sharing.seen() == 1

    def test_an_unreachable_heartbeat_leaves_the_sweeps_their_own_backoff(self, url: str) -> None:
        """A heartbeat that cannot reach the server marks it down but holds no sweep back: the
        node's next sweep is tried (and its failure counted) at once, however often the
        heartbeat fails meanwhile; the backoff is the sweeps' own."""
        sharing = make_sharing(url, "r1")
        sharing.refresh(0.0)
        dead = connect(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
        sharing.store = MembershipStore(dead, "emq", "r1", TTL_S)
        node = sharing.node
        assert isinstance(node, Node)
        for beat in range(1, 10):
            sharing.refresh(beat / 10)
            assert (node.up, node.may_try(beat / 10)) == (False, True), beat
        node.failed(1.0, ConnectionError("refused"))  # the sweep's own failure: it backs off
        sharing.refresh(1.1)
        assert (node.may_try(1.1), node.retry_at) == (False, 1.0 + BACKOFF_FIRST_S)

    def test_a_refused_heartbeat_sweeps_every_queue(self, url: str, r: redis.Redis) -> None:
        """The server refusing the heartbeat (here a WRONGTYPE key) leaves no queue unswept."""
        r.set(KEY, "not a zset")
        sharing = make_sharing(url, "r1")
        with capture_logs() as logs:
            assert sharing.refresh(0.0) is True
            assert sharing.refresh(1.0) is False
            r.delete(KEY)
            sharing.refresh(2.0)
        assert [e["event"] for e in logs if e["event"] != "redis_up"] == [
            "membership_refused",
            "membership_restored",
            "members_changed",
        ]
        restored = next(e for e in logs if e["event"] == "membership_restored")
        assert restored["after"] == "refused"
        assert sharing.owned(QUEUES) == QUEUES
        assert sharing.members == frozenset({"r1"})
        refused = next(e for e in logs if e["event"] == "membership_refused")
        assert (refused["reason"], refused["hint"]) == (
            "wrongtype",
            "the members key holds another type (something else wrote it): delete it, or give "
            "sweeperd a --prefix-root of its own; meanwhile every queue is swept",
        )

    def test_an_acl_refusal_advises_the_acl(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A user without sweeperd's own keys is refused NOPERM: the hint, and only this one,
        says to grant them."""
        r.acl_setuser(
            "queues-only",
            enabled=True,
            passwords=["+pw"],
            keys=["emq:{*}"],
            commands=["+@all"],
        )
        try:
            url = redis_server.url.replace("redis://", "redis://queues-only:pw@")
            sharing = make_sharing(url, "r1")
            with capture_logs() as logs:
                sharing.refresh(0.0)
        finally:
            r.acl_deluser("queues-only")
        [refused] = [e for e in logs if e["event"] == "membership_refused"]
        assert (refused["reason"], refused["hint"]) == (
            "noperm",
            "grant the sweeperd user the <root>:sweeperd:* keys and EVALSHA "
            "(docs/security.md#the-acl-user), or run with --shard off; meanwhile every queue is "
            "swept",
        )
        assert sharing.owned(QUEUES) == QUEUES

    def test_after_leaving_no_heartbeat_brings_it_back(self, url: str, r: redis.Redis) -> None:
        """Leave deletes the entry, and a later heartbeat job does not write it again."""
        sharing = make_sharing(url, "r1")
        sharing.refresh(0.0)
        sharing.leave()
        assert sharing.refresh(1.0) is False
        assert r.exists(KEY) == 0

    def test_sharing_off_owns_every_queue_and_writes_nothing(
        self, url: str, r: redis.Redis
    ) -> None:
        """--shard off: no heartbeat, no key, every queue swept."""
        settings = build_settings(
            {"queues": ["q"], "shard": "off", "redis_url": url}, None, logs_to_tty=False
        )
        make = make_sharing(url, "x")
        sharing = Sharing.of(settings, lambda: make.node)
        assert sharing.refresh(0.0) is False
        sharing.leave()
        assert sharing.owned(QUEUES) == QUEUES
        assert r.exists(KEY) == 0
        assert sharing.describe() == "sharing off: this replica sweeps every queue"

    def test_the_member_list_is_described(self, url: str) -> None:
        """The landing page's text names every member and when its heartbeat expires."""
        make_sharing(url, "r2").refresh(0.0)
        sharing = make_sharing(url, "r1")
        sharing.refresh(0.0)
        lines = sharing.describe().splitlines()
        assert lines[0] == "members (2), this replica is r1:"
        assert lines[1].startswith("  r1  expires in ") and lines[2].startswith("  r2  ")

    def test_moves_are_counted_and_logged_as_counts(self, url: str) -> None:
        """A change of the owned set counts once and logs how many queues moved, not names."""
        sharing = make_sharing(url, "r1")
        with capture_logs() as logs:
            sharing.moved(gained=0, lost=0, owned=10)
            sharing.moved(gained=3, lost=1, owned=12)
        assert sharing.changes == 1
        assert logs == [
            {"event": "queues_moved", "gained": 3, "lost": 1, "owned": 12, "log_level": "info"}
        ]
