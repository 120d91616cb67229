"""`sweeperd audit` on a real server: every class planted beside clean queues found exactly, the
keyspace byte-equal after, the exit codes, bad options, and --repair through the counted verb."""

from __future__ import annotations

from typing import Any

import redis

from sweeperd import model
from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import Job, clean, plant, planted
from tests.support.helpers import acl_line, dump_all, hash_of, run_id
from tests.support.invoke import Ran, sweeperd
from tests.support.servers import RedisServer, free_port

Q = QueueKeys("q")
PASSWORD = "audit-7d1c9e"
CLASSES = ("stranded", "unreachable_deadline", "two_sets", "state_mismatch", "rowless", "setless")


def audit(server: RedisServer, *args: str) -> Ran:
    return sweeperd("audit", "--redis-url", server.url, "--grace", "0", *args)


def found_by_queue(body: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Each queue's findings from --json, class -> ids."""
    return {q["queue"]: {c: f["ids"] for c, f in q["findings"].items()} for q in body["queues"]}


class TestPlanted:
    """A keyspace with every class beside clean jobs and clean queues."""

    def test_every_class_found_exactly(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Each planted id is in its class and nothing else is found: the named queue, and
        every queue discovered; the counts and totals agree."""
        expected = plant(r, Q, planted())
        plant(r, QueueKeys("other"), clean())
        plant(r, QueueKeys("quiet"), clean())
        assert set(expected) == set(CLASSES)
        for args in (("--queue", "q", "--queue", "other"), ()):
            ran = audit(redis_server, "--json", *args)
            assert ran.code == 1, ran.err
            body = ran.json()
            found = found_by_queue(body)
            assert found.pop("q") == expected
            assert all(f == {} for f in found.values())
            assert body["totals"] == {c: len(expected[c]) for c in CLASSES}
            assert body["findings"] == sum(len(ids) for ids in expected.values())

    def test_nothing_written(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """DUMP of every key is byte-equal before and after, text or JSON, with --max-lease."""
        plant(r, Q, planted())
        plant(r, QueueKeys("other"), clean())
        before = dump_all(r)
        for args in ((), ("--json",), ("--queue", "q", "--max-lease", "1")):
            assert audit(redis_server, *args).code == 1
        assert dump_all(r) == before

    def test_clean_is_exit_0(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Queues where every job is accounted for: exit 0, a clean line each, and the total."""
        plant(r, QueueKeys("a"), clean())
        plant(r, QueueKeys("b"), clean())
        ran = audit(redis_server)
        assert (ran.code, ran.err) == (0, "")
        lines = ran.out.splitlines()
        assert lines[0].startswith("audited 2 queues on 1 server: 6 rows read")
        assert [line.split()[:3] for line in lines[2:4]] == [
            ["a", "clean", "0"],
            ["b", "clean", "0"],
        ]
        assert lines[-1] == "findings: 0: every job accounted for"

    def test_text_names_class_meaning_and_fix(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """The table shows each class's count and first ids, then what each means and what to
        do, then the findings counted."""
        plant(r, Q, [Job(f"s{n:02}", {"state": "active"}) for n in range(12)])
        ran = audit(redis_server, "--queue", "q")
        assert ran.code == 1
        row = next(line for line in ran.out.splitlines() if line.startswith("q "))
        assert row.split()[:3] == ["q", "stranded", "12"]
        assert row.endswith("s00, s01, s02, s03, s04, s05, s06, s07, s08, s09 … and 2 more")
        assert "  stranded: row in state active that no set holds" in ran.out
        assert ran.out.splitlines()[-1] == "findings: 12 (stranded 12)"

    def test_max_lease(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A lease due in two hours is unreachable under --max-lease 3600, not under the day."""
        plant(r, Q, [Job("two-hours", {"state": "active"}, {"active": 10**13})])
        assert audit(redis_server, "-q", "q", "--json").json()["findings"] == 1  # year 2286
        r.zadd(Q.active, {"two-hours": r.time()[0] * 1000 + 7_200_000})
        assert audit(redis_server, "-q", "q").code == 0
        ran = audit(redis_server, "-q", "q", "--max-lease", "3600", "--json")
        assert found_by_queue(ran.json()) == {"q": {"unreachable_deadline": ["two-hours"]}}


class TestFailures:
    """Bad options, a server that cannot be reached, a queue whose reads are refused."""

    def test_bad_options_exit_2_and_send_nothing(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Each bad value is one line naming the option, exit 2, the server untouched."""
        plant(r, Q, planted())
        before = dump_all(r)
        calls = int(r.info("stats")["total_commands_processed"])
        for args, said in (
            (("--grace", "-1"), "--grace (SWEEPERD_GRACE) must be"),
            (("--max-lease", "0"), "--max-lease (SWEEPERD_MAX_LEASE) must be"),
            (("--rate", "nan"), "--rate (SWEEPERD_RATE) must be"),
            (("--repair",), "--repair off a terminal needs --yes"),
        ):
            ran = sweeperd("audit", "--redis-url", redis_server.url, *args)
            assert ran.code == 2, args
            assert ran.err.startswith(f"sweeperd: {said}"), ran.err
            assert len(ran.err_lines) == 1
        assert int(r.info("stats")["total_commands_processed"]) == calls + 1  # this INFO only
        assert dump_all(r) == before

    def test_unreachable_exit_3(self) -> None:
        """No server on the port: one line, exit 3."""
        ran = sweeperd("audit", "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
        assert ran.code == 3
        assert "Connection refused" in ran.err

    def test_refused_queue_does_not_stop_the_others(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A queue whose pending key is a string says WRONGTYPE, exit 1; the other is read."""
        plant(r, QueueKeys("good"), [Job("x", {"state": "active"})])
        r.set(QueueKeys("bad").pending, "oops")
        r.hset(QueueKeys("bad").job("y"), "state", "pending")
        body = audit(redis_server, "--json", "-q", "good", "-q", "bad").json()
        [bad, good] = body["queues"]
        assert bad["error"]["reason"] == "wrongtype"
        assert bad["findings"] == {}
        assert good["findings"] == {"stranded": {"count": 1, "ids": ["x"]}}


class TestRepair:
    """--repair puts stranded jobs back as expired leases for the counted verb to judge."""

    def rows(self, r: redis.Redis, ids: list[bytes]) -> dict[bytes, dict[bytes, bytes]]:
        return {i: hash_of(r, Q.job(i)) for i in ids}

    def test_exact_against_the_model(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Each stranded job ends as model.judge_lease says the verb judges it: exempt for an
        earlier lease_epoch, counted (recovered, or dead at the budget) otherwise; every other
        class is left byte for byte as it was."""
        epoch = run_id(r)
        stranded = {
            b"no-epoch": {b"state": b"active", b"attempts": b"1"},
            b"this-run": {b"state": b"active", b"attempts": b"1", b"lease_epoch": epoch},
            b"earlier-run": {b"state": b"active", b"attempts": b"3", b"lease_epoch": b"e0"},
            b"near-budget": {b"state": b"active", b"stalled": b"1", b"lease_epoch": epoch},
        }
        plant(
            r,
            Q,
            [
                Job(i.decode(), {k.decode(): v.decode() for k, v in row.items()})
                for i, row in stranded.items()
            ],
        )
        others = [j for j in planted() if not j.job_id.startswith(("stranded", "expired", "ghost"))]
        plant(r, QueueKeys("untouched"), others)
        untouched = {k: v for k, v in dump_all(r).items() if b"untouched" in k}
        ran = audit(redis_server, "--repair", "--yes", "--max-stalled", "2", "--json")
        assert ran.code == 1, ran.err
        [repaired] = ran.json()["repaired"]
        verdicts = {
            i: model.judge_lease(model.Lease(i, row), epoch, 2) for i, row in stranded.items()
        }
        after = self.rows(r, list(stranded))
        for job_id, judged in verdicts.items():
            assert isinstance(judged, model.Judgement)
            row = dict(stranded[job_id])
            if judged.verdict is model.Verdict.DEAD:
                row |= {
                    b"state": b"dead",
                    b"stalled": str(judged.stalled).encode(),
                    b"last_error": b"stalled",
                }
                assert r.zscore(Q.dead, job_id) == 0
            else:
                row[b"state"] = b"pending"
                if judged.stalled is not None:
                    row[b"stalled"] = str(judged.stalled).encode()
                assert r.zscore(Q.pending, job_id) == 0
            assert after[job_id] == row, job_id
        assert sorted(repaired["put"]) == sorted(i.decode() for i in stranded)
        assert repaired["exempt"] == ["earlier-run"]
        assert repaired["dead"] == ["near-budget"]
        assert sorted(repaired["recovered"]) == ["earlier-run", "no-epoch", "this-run"]
        assert r.zcard(Q.active) == 0
        assert int(r.hget(Q.metrics_failed, "count") or 0) == 1
        assert {k: v for k, v in dump_all(r).items() if b"untouched" in k} == untouched
        text = audit(redis_server, "--json").json()
        assert text["totals"]["stranded"] == 0

    def test_closing_line(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The text's last line says what was put back and what the sweep did with it."""
        plant(
            r,
            Q,
            [Job("a", {"state": "active", "lease_epoch": "e0"}), Job("b", {"state": "active"})],
        )
        ran = audit(redis_server, "--repair", "--yes", "-q", "q")
        assert ran.code == 1
        assert ran.out.splitlines()[-1] == (
            "repaired q: 2 stranded put back in active as expired leases; the counted sweep "
            "recovered 1 of them (1 exempt: lease from an earlier server run), dead-lettered 1 "
            "(max_stalled 1)"
        )

    def test_a_refused_sweep_leaves_them_expired(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A lane row among the expired leases makes the verb refuse the sweep: the stranded
        job stays in active, expired, untouched otherwise, and the line says so (exit 1)."""
        plant(r, Q, [Job("a", {"state": "active", "attempts": "1"})])
        plant(r, Q, [Job("lane", {"state": "active", "group": "g"}, {"active": 1_000})])
        ran = audit(redis_server, "--repair", "--yes", "-q", "q")
        assert ran.code == 1
        last = ran.out.splitlines()[-1]
        assert last.startswith(
            "repaired q: 1 stranded put back in active as expired leases; the counted sweep "
            "recovered 0 of them (0 exempt: lease from an earlier server run), dead-lettered 0 "
            "(max_stalled 1); then it was refused (lane: "
        ), last
        assert last.endswith("1 wait in active, expired, for the next sweep"), last
        assert r.zscore(Q.active, "a") is not None
        assert hash_of(r, Q.job("a")) == {b"state": b"active", b"attempts": b"1"}

    def test_a_row_changed_since_is_left(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The repair script re-checks each id: one a worker took back meanwhile is not put."""
        from sweeperd.audit import scripts

        plant(r, Q, [Job("a", {"state": "active"}), Job("b", {"state": "active"})])
        r.zadd(Q.active, {"b": 10**13})
        assert scripts.repair(r, Q, [b"a", b"b", b"gone"]) == [b"a"]
        assert r.zscore(Q.active, "b") == 10**13


class TestAclUser:
    """The users `sweeperd acl --for audit` (and with --repair) prints are enough, and no more."""

    def test_audit_and_repair_as_the_printed_users(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """The read-only user audits with nothing denied, and its repair is refused (noperm,
        nothing written); the repair user repairs; the ACL LOG holds the one refusal."""
        lines = {
            "reader": acl_line("--for", "audit", user="reader", password=PASSWORD),
            "repairer": acl_line("--for", "audit", "--repair", user="repairer", password=PASSWORD),
        }
        try:
            for line in lines.values():
                r.execute_command(*line.split())  # type: ignore[no-untyped-call]
            r.acl_log_reset()
            plant(r, Q, planted())
            url = f"redis://reader:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
            read = sweeperd("audit", "--redis-url", url, "--grace", "0", "--json")
            assert read.code == 1, read.err
            assert read.json()["totals"]["stranded"] == 2
            assert r.acl_log() == []
            before = dump_all(r)
            refused = sweeperd(
                "audit", "--redis-url", url, "--grace", "0", "--json", "--repair", "--yes"
            )
            [done] = refused.json()["repaired"]
            assert (refused.code, done["error"]["reason"], done["put"]) == (1, "noperm", [])
            assert dump_all(r) == before
            url = f"redis://repairer:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
            r.acl_log_reset()
            fixed = sweeperd(
                "audit", "--redis-url", url, "--grace", "0", "--json", "--repair", "--yes"
            )
            assert fixed.code == 1, fixed.err
            [done] = fixed.json()["repaired"]
            assert (done["error"], done["dead"], done["exempt"]) == (
                None,
                ["stranded-1"],
                ["stranded-2"],  # its lease_epoch is an earlier run's
            )
            assert r.acl_log() == []
        finally:
            r.acl_deluser("reader", "repairer")
