"""`sweeperd acl`: the one ACL SETUSER line for the commands and options given, and its refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import PAST_MS, acl_line, lease
from tests.support.invoke import sweeperd
from tests.support.servers import RedisServer, free_port

HEAD = "ACL SETUSER u reset on ><password>"
SWEEP = "+script|load +evalsha +time +zcard +zcount +zrange +zrangebyscore +hget"
PORT = "+type +hmget +exists +zremrangebyrank +hset +zadd +hincrby"
READS = "+command|info +zcount +zcard +zrange +hget"  # a queue's counts
INSPECT = f"{READS} +zrangebyscore"  # and the first lease not yet due
HEARS = "+client|id +subscribe +client|tracking +client|caching"  # run hearing its queues change
CHANNEL = "&__redis__:invalidate"
# (the options given, the line printed): read as a table
LINES = [
    (
        ["--for", "run", "--executor", "native", "--shard", "off"],
        f"{HEAD} ~emq:* {CHANNEL} +info +command|info {SWEEP} +emq.stalled.check {HEARS}",
    ),
    (
        ["--for", "run", "--executor", "script", "--discover", "5"],
        f"{HEAD} ~emq:* {CHANNEL} +info {SWEEP} {PORT} +zremrangebyscore +pexpireat +zrem +scan "
        f"{HEARS}",
    ),
    (
        ["--for", "run", "--executor", "native", "--shard", "off", "--deadline-source", "off"],
        f"{HEAD} ~emq:* +info +command|info {SWEEP} +emq.stalled.check",
    ),
    (
        ["--for", "once", "--executor", "native", "--cluster"],
        f"{HEAD} ~emq:* +info +cluster|slots +command|info {SWEEP} +emq.stalled.check "
        "+cluster|nodes +exists +type +hgetall +asking",
    ),
    (["--for", "top", "-q", "emails"], f"{HEAD} %R~emq:* +info {READS} +zrangebyscore"),
    (  # a dead primary's queues read on its replica, after READONLY
        ["--for", "top", "-q", "emails", "--cluster"],
        f"{HEAD} %R~emq:* +info +cluster|slots {READS} +zrangebyscore +readonly",
    ),
    (
        ["--for", "top", "--sentinel", "h:1", "--sentinel-master", "m"],
        f"{HEAD} %R~emq:* +info {READS} +zrangebyscore +scan",
    ),
    (
        ["--for", "inspect", "--prefix-root", "jobs*[1]", "--redis-url", "redis://h:1/2"],
        f"{HEAD} %R~jobs\\*\\[1\\]:* +info +select {INSPECT}",
    ),
    (["--for", "inspect inspect,,"], f"{HEAD} %R~emq:* +info {INSPECT}"),
]


class TestLine:
    @pytest.mark.parametrize(("args", "line"), LINES, ids=[" ".join(a) for a, _ in LINES])
    def test_the_line_for_the_options(self, args: list[str], line: str) -> None:
        """Each set of options gets exactly its line on stdout, nothing on stderr, exit 0."""
        ran = sweeperd("acl", "--user", "u", *args)
        assert (ran.code, ran.out, ran.err) == (0, f"{line}\n", "")

    def test_every_command_by_default_from_the_env_and_the_file(self, tmp_path: Path) -> None:
        """Without --for, the line covers run, once, inspect, top and audit; the user, the
        commands and the settings come from env vars and --config as they do for run."""
        config = tmp_path / "sweeperd.toml"
        config.write_text('cluster = true\nexecutor = "native"\nqueues = ["emails"]\n')
        every = sweeperd("acl", "--user", "u", "--config", str(config))
        assert every.code == 0, every.err
        rules = every.out.split()
        for rule in ("+cluster|slots", "+emq.stalled.check", "+hgetall", "+zrem", "+asking"):
            assert rule in rules
        assert "+hmget" not in rules  # no Lua port
        assert "+scan" in rules  # audit reads a named queue's rows by SCAN too
        env = {"SWEEPERD_ACL_USER": "u", "SWEEPERD_ACL_FOR": "inspect", "SWEEPERD_CLUSTER": "1"}
        ran = sweeperd("acl", env=env)
        # and in a Cluster down, which primaries failed
        assert ran.out == f"{HEAD} %R~emq:* +info +cluster|slots {INSPECT} +cluster|nodes\n", (
            ran.err
        )

    def test_audit_reads_and_its_repair_writes(self) -> None:
        """--for audit is read-only (EVALSHA_RO, %R~); with --repair it writes, as once does."""
        read = sweeperd("acl", "--user", "u", "--for", "audit").out.split()
        assert "%R~emq:*" in read and "+evalsha_ro" in read
        assert not {"+evalsha", "+zadd", "+emq.stalled.check"} & set(read)
        repair = sweeperd("acl", "--user", "u", "--for", "audit", "--repair", "--cluster")
        rules = repair.out.split()
        assert "~emq:*" in rules and {"+evalsha", "+zadd", "+emq.stalled.check"} <= set(rules)
        assert "+cluster|nodes" in rules

    def test_it_reaches_no_server(self) -> None:
        """A URL where nothing listens changes nothing: the line is made from the options."""
        url = f"redis://u:secret@127.0.0.1:{free_port()}/0"
        ran = sweeperd("acl", "--user", "u", "--for", "inspect", "--redis-url", url)
        assert (ran.code, ran.out) == (0, f"{HEAD} %R~emq:* +info {INSPECT}\n")


class TestRefusals:
    @pytest.mark.parametrize(
        ("args", "said"),
        [
            ([], "--user (SWEEPERD_ACL_USER) is needed: the name of the ACL user the line creates"),
            (
                ["--user", "a b"],
                "--user (SWEEPERD_ACL_USER) must be a user name without spaces, not 'a b'",
            ),
            (
                ["--user", ""],
                "--user (SWEEPERD_ACL_USER) must be a user name without spaces, not ''",
            ),
            (
                ["--user", "u", "--for", "run,reap"],
                "--for (SWEEPERD_ACL_FOR) takes run, once, inspect, top, audit (commas or spaces "
                "between), not 'run,reap'",
            ),
            (
                ["--user", "u", "--for", ","],
                "--for (SWEEPERD_ACL_FOR) takes run, once, inspect, top, audit (commas or spaces "
                "between), not ','",
            ),
            (
                ["--user", "u", "--cluster", "--sentinel", "h:1", "--sentinel-master", "m"],
                "--cluster and --sentinel exclude each other: give one",
            ),
        ],
    )
    def test_bad_input_is_one_line_and_exit_2(self, args: list[str], said: str) -> None:
        """No user, a user with a space, a command --for does not know, topology options that
        do not go together: one line naming the option, exit 2, nothing on stdout."""
        ran = sweeperd("acl", *args)
        assert (ran.code, ran.out, ran.err_lines) == (2, "", [f"sweeperd: {said}"])


@pytest.fixture
def user_server(redis_server: RedisServer, r: redis.Redis) -> Iterator[redis.Redis]:
    """The module server, the user `u` removed again after the test."""
    yield r
    r.acl_deluser("u")


class TestOnAServer:
    def test_a_root_with_glob_characters_is_matched_literally(
        self, user_server: redis.Redis, redis_server: RedisServer
    ) -> None:
        """The key root's *, [ and ] are escaped in the key pattern: the user reads its root's
        queue, and a key the unescaped pattern would match is refused."""
        root = "jobs*[1]"
        line = acl_line("--for", "inspect", "--prefix-root", root, user="u", password="pw")
        user_server.execute_command(*line.split())  # type: ignore[no-untyped-call]
        lease(user_server, QueueKeys("q", root), b"a", PAST_MS, attempts=1)
        url = f"redis://u:pw@127.0.0.1:{redis_server.port}/0"
        ran = sweeperd("inspect", "-q", "q", "--prefix-root", root, "--redis-url", url, "--json")
        assert (ran.code, ran.json()["expired"]) == (0, 1), ran.err
        lease(user_server, QueueKeys("q", "jobsX1"), b"a", PAST_MS, attempts=1)
        other = sweeperd("inspect", "-q", "q", "--prefix-root", "jobsX1", "--redis-url", url)
        [said] = other.err_lines
        head = "sweeperd: the ACL user u may not access the key jobsX1:{q}:active by ZCOUNT ("
        tail = (
            "): grant its root with ACL SETUSER u ~jobsX1:* (docs/security.md#the-acl-user; "
            "`sweeperd acl` prints the whole user)"
        )
        assert (other.code, said.startswith(head), said.endswith(tail)) == (1, True, True), said
