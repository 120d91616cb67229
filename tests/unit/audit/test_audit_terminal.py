"""`audit` on a terminal: a long audit's progress bar; with --repair the findings first, then
the question `once` asks; a no writes nothing, a yes repairs through the counted verb."""

from __future__ import annotations

import re

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import Job, plant
from tests.support.helpers import dump_all, members
from tests.support.servers import RedisServer
from tests.support.terminal import OnTerminal

Q = QueueKeys("q")
QUESTION = (
    "Put 2 stranded jobs back in active as expired leases and sweep them with the counted verb? "
    "[y/N]"
)


def stranded(r: redis.Redis) -> None:
    plant(r, Q, [Job("a", {"state": "active"}), Job("b", {"state": "active", "lease_epoch": "e"})])


def repair_on_terminal(server: RedisServer) -> OnTerminal:
    return OnTerminal("audit", "--redis-url", server.url, "--grace", "0", "--repair")


class TestOnATerminal:
    def test_no_writes_nothing(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The question comes before anything is written; a no leaves every key as it was,
        says so, and the findings are printed, exit 1."""
        stranded(r)
        before = dump_all(r)
        with repair_on_terminal(redis_server) as term:
            term.wait_for(QUESTION)
            assert dump_all(r) == before
            term.keys("n\n")
            code = term.finish()
        assert code == 1
        assert "sweeperd: not confirmed: nothing repaired" in term.screen
        assert "findings: 2 (stranded 2)" in term.screen
        assert dump_all(r) == before

    def test_yes_repairs(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A yes puts both back and sweeps them: the counted one dead at the default budget,
        the earlier epoch's pending."""
        stranded(r)
        with repair_on_terminal(redis_server) as term:
            term.wait_for(QUESTION)
            term.keys("y\n")
            code = term.finish()
        assert code == 1, term.screen
        assert (members(r, Q.dead), members(r, Q.pending)) == ([b"a"], [b"b"])
        assert "repaired q: 2 stranded put back" in term.screen.replace("\r\n", " ")


class TestProgress:
    def test_a_long_audit_shows_its_progress(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """An audit paced to 1,000 keys a second over 2,000 rows shows on the terminal the keys
        it has read and the rate as it goes, then its findings."""
        pipe = r.pipeline(transaction=False)
        for n in range(2_000):
            pipe.hset(Q.job(f"s{n:04}"), "state", "active")
        pipe.execute()
        args = ("audit", "--redis-url", redis_server.url, "--grace", "0", "--rate", "1000")
        with OnTerminal(*args, term="xterm") as term:
            term.wait_for(" keys read ")
            code = term.finish()
        assert code == 1, term.screen
        assert re.search(r"auditing [1-9][\d,]* keys read [1-9][\d,]*/s", term.screen), term.screen
        assert term.screen.rstrip().endswith("findings: 2,000 (stranded 2,000)"), term.screen
