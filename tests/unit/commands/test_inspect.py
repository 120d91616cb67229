"""`sweeperd inspect` as a real process: a queue's counts from a real server, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import FUTURE_OFFSET_MS, dump_all, lease, now_ms, run_id
from tests.support.invoke import Ran, sweeperd
from tests.support.servers import RedisServer, free_port

Q = QueueKeys("q")
OVERDUE_MS = 90_000  # how long the oldest expired lease has been overdue


def populate(r: redis.Redis) -> None:
    """3 expired leases (the oldest 90 s overdue), 2 live, 4 pending, 1 dead, count 7."""
    now = now_ms()
    for n, overdue_ms in enumerate((OVERDUE_MS, 30_000, 1_000)):
        lease(r, Q, f"old{n}".encode(), now - overdue_ms, attempts=1)
    for n in range(2):
        lease(r, Q, f"live{n}".encode(), now + FUTURE_OFFSET_MS, attempts=1)
    r.zadd(Q.pending, {f"p{n}": 0 for n in range(4)})
    r.zadd(Q.dead, {"d": 0})
    r.hset(Q.metrics_failed, "count", 7)


def not_json(constant: str) -> None:
    """json.loads' hook for NaN and Infinity, which RFC 8259 JSON has not."""
    raise AssertionError(f"{constant} is not JSON")


def inspect(server: RedisServer, *args: str) -> Ran:
    return sweeperd("inspect", "--queue", "q", "--redis-url", server.url, *args)


class TestInspectJson:
    """`inspect --json`: one object with the queue's counts and the server's identity."""

    def test_fields(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Every field is right, oldest_overdue_s and next_due_s within a few seconds, and
        nothing is written."""
        populate(r)
        before = dump_all(r)
        ran = inspect(redis_server, "--json")
        assert (ran.code, ran.err) == (0, "")
        body = ran.json()
        overdue = body.pop("oldest_overdue_s")
        assert OVERDUE_MS / 1000 <= overdue < OVERDUE_MS / 1000 + 10
        due = body.pop("next_due_s")
        assert FUTURE_OFFSET_MS / 1000 - 10 < due <= FUTURE_OFFSET_MS / 1000
        assert body == {
            "queue": "q",
            "active": 5,
            "expired": 3,
            "pending": 4,
            "dead": 1,
            "failed": 7,
            "run_id": run_id(r).decode(),
            "verb_available": True,
            "exists": True,
            "maxmemory_policy": "noeviction",
        }
        assert dump_all(r) == before

    def test_plain_server(self, r_plain: redis.Redis, plain_server: RedisServer) -> None:
        """On a server without the module the verb is reported unavailable."""
        populate(r_plain)
        ran = inspect(plain_server, "--json")
        assert (ran.code, ran.err) == (0, "")
        body = ran.json()
        assert (body["verb_available"], body["expired"], body["run_id"]) == (
            False,
            3,
            run_id(r_plain).decode(),
        )

    def test_empty_queue(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A queue with no keys counts zero everywhere, nothing overdue, and creates no key."""
        ran = inspect(redis_server, "--json")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == {
            "queue": "q",
            "active": 0,
            "expired": 0,
            "oldest_overdue_s": None,
            "next_due_s": None,
            "pending": 0,
            "dead": 0,
            "failed": 0,
            "run_id": run_id(r).decode(),
            "verb_available": True,
            "exists": False,
            "maxmemory_policy": "noeviction",
        }
        assert r.dbsize() == 0

    def test_failed_not_an_integer(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A failed count that is not an integer is reported as null, not as 0."""
        r.hset(Q.metrics_failed, "count", "abc")
        ran = inspect(redis_server, "--json")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json()["failed"] is None

    def test_strict_json_with_minus_infinity(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A lease with a -inf deadline still gives strict JSON (no Infinity), overdue a number."""
        lease(r, Q, b"odd", 0, attempts=1)
        r.zadd(Q.active, {b"odd": float("-inf")})
        ran = inspect(redis_server, "--json")
        assert (ran.code, ran.err) == (0, "")
        body = json.loads(ran.out, parse_constant=not_json)
        assert body["expired"] == 1
        assert isinstance(body["oldest_overdue_s"], float)

    def test_a_lease_that_never_falls_due(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A lease with a +inf deadline is no next due time (and still strict JSON); the next
        finite one is."""
        lease(r, Q, b"never", 0, attempts=1)
        r.zadd(Q.active, {b"never": float("inf")})
        ran = inspect(redis_server, "--json")
        assert (ran.code, ran.err) == (0, "")
        assert json.loads(ran.out, parse_constant=not_json)["next_due_s"] is None
        lease(r, Q, b"soon", now_ms() + 60_000, attempts=1)
        due = inspect(redis_server, "--json").json()["next_due_s"]
        assert 50 < due <= 60


class TestInspectText:
    """`inspect` without --json: the same facts, readable."""

    def test_contains_fields(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The summary names the queue, every count, the run_id and the executor it implies."""
        populate(r)
        before = dump_all(r)
        ran = inspect(redis_server)
        assert (ran.code, ran.err) == (0, "")
        lines = ran.out.splitlines()
        assert lines[0] == "queue      q"
        assert lines[1].startswith("active     5  (expired now: 3, oldest overdue: 9")
        assert lines[1].endswith("s)") and ", next due in 3" in lines[1]
        assert lines[2:] == [
            "pending    4",
            "dead       1  (metrics:failed count: 7)",
            f"server     run_id {run_id(r).decode()}",
            "verb       EMQ.STALLED.CHECK available (native)",
        ]
        assert dump_all(r) == before

    def test_plain_server(self, r_plain: redis.Redis, plain_server: RedisServer) -> None:
        """On a server without the module the summary points to the script executor."""
        ran = inspect(plain_server)
        assert (ran.code, ran.err) == (0, "")
        assert "oldest overdue: none, next due: none)" in ran.out
        assert "verb       EMQ.STALLED.CHECK not loaded (script executor)" in ran.out.splitlines()


class TestInspectExit:
    """inspect's exit codes."""

    def test_unreachable(self) -> None:
        """Nothing listening on the port: exit 3 with one line naming the address."""
        url = f"redis://127.0.0.1:{free_port()}/0"
        ran = sweeperd("inspect", "--queue", "q", "--redis-url", url, "--json")
        assert ran.code == 3
        [line] = ran.err_lines
        assert line.startswith(f"sweeperd: cannot reach {url}")
        assert ran.json() == {
            "queue": "q",
            "error": {"reason": "connection", "message": line.removeprefix("sweeperd: ")},
        }

    def test_wrong_type(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A queue key of the wrong type is the server's refusal: exit 1, one line, no writes."""
        r.set(Q.active, "x")
        before = dump_all(r)
        ran = inspect(redis_server, "--json")
        assert ran.code == 1
        [line] = ran.err_lines
        assert "WRONGTYPE" in line
        assert ran.json()["error"] == {"reason": "wrongtype", "message": line[len("sweeperd: ") :]}
        assert dump_all(r) == before

    def test_a_guessed_list_is_named(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A `pending` list where a sorted set belongs: one line naming the key and the type it
        must hold, pointing at the data model, never redis-py's pipeline text; exit 1 for
        inspect and for once's dry run, which read the queue's counts the same way; nothing
        written."""
        lease(r, Q, b"due", now_ms() - OVERDUE_MS, attempts=1)
        r.rpush(Q.pending, "guessed")
        before = dump_all(r)
        said = (
            "sweeperd: emq:{q}:pending is not a sorted set (ZCARD: WRONGTYPE Operation against a "
            "key holding the wrong kind of value); see docs/keyspace.md#a-queues-keys"
        )
        ran = inspect(redis_server)
        assert (ran.code, ran.out, ran.err_lines) == (1, "", [said])
        assert dump_all(r) == before
        r.zrem(Q.active, "due")  # a dry run with nothing due reads the counts to say so
        before = dump_all(r)
        ran = sweeperd("once", "--queue", "q", "--redis-url", redis_server.url, "--dry-run")
        assert (ran.code, ran.out, ran.err_lines) == (1, "", [said])
        assert dump_all(r) == before


class TestPrecedence:
    def test_a_switch_set_false_in_the_env_beats_the_file(
        self, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """`cluster = true` in the file, SWEEPERD_CLUSTER=false: a standalone server is read as
        one (the file alone refuses it as not a cluster node, exit 3)."""
        populate(r)
        config = tmp_path / "sweeperd.toml"
        config.write_text("cluster = true\n")
        assert inspect(redis_server, "--config", str(config)).code == 3
        ran = sweeperd(
            "inspect",
            "--queue",
            "q",
            "--redis-url",
            redis_server.url,
            "--json",
            "--config",
            str(config),
            env={"SWEEPERD_CLUSTER": "false"},
        )
        assert (ran.code, ran.err) == (0, "")
        assert ran.json()["expired"] == 3
