"""`once` at the default budget, which nobody set: a person on a terminal is shown the dry run's
counts and asked before a job is dead-lettered; off a terminal nothing asks, and the output
and stderr say the budget used."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import PAST_MS, dump_all, lease, members, run_id
from tests.support.invoke import default_budget_said, sweeperd
from tests.support.servers import RedisServer
from tests.support.terminal import OnTerminal

Q = QueueKeys("q")
EARLIER = b"e" * 40  # a lease_epoch of an earlier server run: exempt
NOTE = default_budget_said("q")
DRY_RUN = (
    "a dry run now: would recover 1 (of which 1 exempt: lease from an earlier server run)  "
    "dead 3  ghosts 0  calls 1"
)
QUESTION = "Dead-letter 3 jobs of q? [y/N]"


def stalled(r: redis.Redis) -> None:
    """Three counted leases (their first stall is their last at budget 1) and an exempt one."""
    epoch = run_id(r)
    for n in range(3):
        lease(r, Q, f"j{n}".encode(), PAST_MS + n, attempts=1, lease_epoch=epoch)
    lease(r, Q, b"x", PAST_MS + 3, attempts=1, lease_epoch=EARLIER)


def once_on_terminal(server: RedisServer, *args: str) -> OnTerminal:
    return OnTerminal("once", "-q", "q", "--redis-url", server.url, "--drain", *args)


class TestOnATerminal:
    def test_no_writes_nothing(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The dry run's counts and the question come before anything is written; a no leaves
        every key as it was and exits 1, saying how to set a budget."""
        stalled(r)
        before = dump_all(r)
        with once_on_terminal(redis_server) as term:
            screen = term.wait_for(QUESTION)
            assert dump_all(r) == before
            term.keys("n\n")
            code = term.finish()
        assert code == 1
        assert screen.splitlines()[:2] == [NOTE, DRY_RUN]
        assert term.screen.splitlines()[-1] == (
            "sweeperd: not confirmed: nothing written; set a budget of your own (--max-stalled "
            "N, or max_stalled in the config file), or give --yes to sweep at the default"
        )
        assert dump_all(r) == before

    def test_yes_sweeps(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A yes sweeps as the dry run said: the three counted jobs dead, the exempt one
        pending; the summary names the budget the default."""
        stalled(r)
        with once_on_terminal(redis_server) as term:
            term.wait_for(QUESTION)
            term.keys("y\n")
            code = term.finish()
        assert code == 0, term.screen
        assert members(r, Q.dead) == [b"j0", b"j1", b"j2"]
        assert members(r, Q.pending) == [b"x"]
        assert "max_stalled 1 (the default)  limit 1000" in term.screen
        assert term.screen.count(NOTE) == 1  # said before the question, not again after

    def test_without_drain_it_asks_of_the_first_call(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Without --drain nor --limit the sweep's one call is sized (100 leases, the first
        size): the question counts what that call takes, and a yes takes exactly that."""
        epoch = run_id(r)
        for n in range(150):
            lease(r, Q, f"j{n:03}".encode(), PAST_MS + n, attempts=1, lease_epoch=epoch)
        with OnTerminal("once", "-q", "q", "--redis-url", redis_server.url) as term:
            term.wait_for("Dead-letter 100 jobs of q? [y/N]")
            term.keys("y\n")
            code = term.finish()
        assert code == 0, term.screen
        assert members(r, Q.dead) == [f"j{n:03}".encode() for n in range(100)]

    @pytest.mark.parametrize(
        "args", [["--yes"], ["--max-stalled", "1"]], ids=["--yes", "a budget given"]
    )
    def test_nothing_asks(self, r: redis.Redis, redis_server: RedisServer, args: list[str]) -> None:
        """--yes, or a budget given (even the default's value), sweeps without a question."""
        stalled(r)
        with once_on_terminal(redis_server, *args) as term:
            code = term.finish()
        assert code == 0, term.screen
        assert "[y/N]" not in term.screen
        assert members(r, Q.dead) == [b"j0", b"j1", b"j2"]
        assert (NOTE in term.screen) is (args == ["--yes"])

    def test_nothing_to_dead_letter_asks_nothing(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A sweep that would dead-letter no job (only an exempt lease due) is not asked about."""
        lease(r, Q, b"x", PAST_MS, attempts=1, lease_epoch=EARLIER)
        with once_on_terminal(redis_server) as term:
            code = term.finish()
        assert code == 0, term.screen
        assert "[y/N]" not in term.screen and NOTE not in term.screen
        assert members(r, Q.pending) == [b"x"]


class TestOffATerminal:
    def test_nothing_asks_and_the_budget_is_said(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Off a terminal the sweep runs; the summary says the budget is the default, and one
        line on stderr what that meant."""
        stalled(r)
        ran = sweeperd("once", "-q", "q", "--redis-url", redis_server.url)
        assert ran.code == 0
        assert ran.out.splitlines()[0].endswith("max_stalled 1 (the default)  limit 1000")
        assert ran.err_lines == [NOTE]
        assert members(r, Q.dead) == [b"j0", b"j1", b"j2"]

    def test_json_says_the_budget_is_the_default(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """--json says max_stalled_default; a dry run's predicted deaths are said too."""
        stalled(r)
        ran = sweeperd("once", "-q", "q", "--redis-url", redis_server.url, "--json", "--dry-run")
        assert (ran.json()["max_stalled_default"], ran.json()["dead"]) == (True, ["j0", "j1", "j2"])
        assert ran.err_lines == [NOTE]

    @pytest.mark.parametrize(
        "toml",
        ['max_stalled = 1\nqueues = ["q"]\n', "[queue.q]\nmax_stalled = 1\n"],
        ids=["the file's", "the table's"],
    )
    def test_a_budget_in_the_file_is_one_given(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path, toml: str
    ) -> None:
        """A max_stalled the file sets, globally or in the queue's table, is a budget someone
        set: no line on stderr, max_stalled_default false."""
        stalled(r)
        config = tmp_path / "sweeperd.toml"
        config.write_text(f'redis_url = "{redis_server.url}"\n{toml}')
        ran = sweeperd("once", "-q", "q", "--config", str(config), "--json")
        assert (ran.code, ran.err) == (0, "")
        assert (ran.json()["max_stalled_default"], len(ran.json()["dead"])) == (False, 3)
