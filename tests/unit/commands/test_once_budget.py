"""`once` spends the budget and limit given by flag or env var over the queue's own table."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import hash_of, lease, members, run_id
from tests.support.invoke import Ran, sweeperd
from tests.support.servers import RedisServer

MAIL = QueueKeys("mail")


def once_with_table(
    server: RedisServer, tmp_path: Path, tables: str, *args: str, env: dict[str, str] | None = None
) -> Ran:
    """`once -q mail` with a config file whose mail table sets max_stalled 3 and limit 500."""
    config = tmp_path / "sweeperd.toml"
    config.write_text(
        f'redis_url = "{server.url}"\n[{tables}.mail]\nmax_stalled = 3\nlimit = 500\n'
    )
    return sweeperd("once", "-q", "mail", "--config", str(config), *args, env=env)


@pytest.fixture(params=["queue", "queues"])
def tables(request: pytest.FixtureRequest) -> str:
    """The table's name as written now, and as written before (still read)."""
    return str(request.param)


class TestFlagsBeatTheTable:
    @pytest.mark.parametrize(
        ("args", "env"),
        [(["--max-stalled", "2"], None), ([], {"SWEEPERD_MAX_STALLED": "2"})],
        ids=["flag", "env"],
    )
    def test_max_stalled(
        self,
        r: redis.Redis,
        redis_server: RedisServer,
        tmp_path: Path,
        tables: str,
        args: list[str],
        env: dict[str, str] | None,
    ) -> None:
        """Budget 2 given, 3 in the table: a job stalled once reaches 2 and is dead-lettered;
        the output says max_stalled 2 and the table's limit 500."""
        lease(r, MAIL, b"j", attempts=1, stalled=1, lease_epoch=run_id(r))
        ran = once_with_table(redis_server, tmp_path, tables, "--json", *args, env=env)
        assert ran.code == 0, ran
        assert members(r, MAIL.dead) == [b"j"]
        assert hash_of(r, MAIL.job(b"j"))[b"stalled"] == b"2"
        body = ran.json()
        assert (body["dead"], body["max_stalled"], body["limit"]) == (["j"], 2, 500)

    def test_limit(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path, tables: str
    ) -> None:
        """--limit 1 over the table's 500: one lease of two taken, one left; the table's budget
        3 still applies (only what is given beats the table)."""
        for job in (b"a", b"b"):
            lease(r, MAIL, job, attempts=1, lease_epoch=run_id(r))
        ran = once_with_table(redis_server, tmp_path, tables, "--json", "--limit", "1")
        assert r.zcard(MAIL.active) == 1
        body = ran.json()
        assert (body["limit"], body["max_stalled"], body["left"]) == (1, 3, 1)
        assert len(body["recovered"]) == 1

    def test_the_text_says_what_was_used(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path, tables: str
    ) -> None:
        """The summary's first line names the budget and limit used."""
        lease(r, MAIL, b"j", attempts=1)
        ran = once_with_table(redis_server, tmp_path, tables, "--max-stalled", "7", "--limit", "9")
        assert ran.out.splitlines()[0].endswith("max_stalled 7  limit 9")
