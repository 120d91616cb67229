"""`sweeperd once` as a real process on a real server: the verb's cases, drain, dry run, exits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import redis

from sweeperd.keyspace import QueueKeys
from tests.support.helpers import FUTURE_OFFSET_MS, PAST_MS, dump_all, lease, now_ms, run_id
from tests.support.invoke import Ran, default_budget_said, sweeperd, sweeperd_many
from tests.support.servers import RedisServer, free_port

Q = QueueKeys("q")
EARLIER = b"0" * 40  # a run_id no server has now
ACTIVE, PENDING, DEAD = (k.encode() for k in (Q.active, Q.pending, Q.dead))
FAILED = Q.metrics_failed.encode()


@dataclass(frozen=True)
class Target:
    """A server, a client to it (keyspace empty) and the executor to name for it."""

    r: redis.Redis
    url: str
    executor: str

    @property
    def run_id(self) -> str:
        return run_id(self.r).decode()

    def once(self, *args: str) -> Ran:
        """`sweeperd once --queue q` with this target's URL and executor."""
        return sweeperd(
            "once", "--queue", "q", "--redis-url", self.url, "--executor", self.executor, *args
        )

    def expect(self, **fields: Any) -> dict[str, Any]:
        """The whole `once --json` object of a sweep that ended without an error (at the
        default budget unless `max_stalled` is given)."""
        body: dict[str, Any] = {
            "queue": "q",
            "executor": self.executor,
            "run_id": self.run_id,
            "recovered": [],
            "dead": [],
            "exempt": [],
            "ghosts": [],
            "calls": 1,
            "dry_run": False,
            "max_stalled": 1,
            "max_stalled_default": "max_stalled" not in fields,
            "limit": 1000,
            "left": 0,
        }
        return {**body, **fields}


def target_of(request: pytest.FixtureRequest, kind: str) -> Target:
    """`native` on the module server, `script` on the plain one."""
    server_fixture, client_fixture = {
        "native": ("redis_server", "r"),
        "script": ("plain_server", "r_plain"),
    }[kind]
    server: RedisServer = request.getfixturevalue(server_fixture)
    return Target(request.getfixturevalue(client_fixture), server.url, kind)


@pytest.fixture(params=["native", "script"])
def target(request: pytest.FixtureRequest, server_kind: str) -> Target:
    """Each executor on the server it runs on, of each server kind."""
    return target_of(request, request.param)


@pytest.fixture
def native(request: pytest.FixtureRequest, server_kind: str) -> Target:
    """The native executor on the module server, of each server kind."""
    return target_of(request, "native")


def keyspace(r: redis.Redis) -> dict[bytes, object]:
    """Every key's value: hashes field by field, zsets with scores, other types dumped."""
    found: dict[bytes, object] = {}
    for key in sorted(r.scan_iter(count=1000)):
        kind = r.type(key)
        if kind == b"hash":
            found[key] = r.hgetall(key)
        elif kind == b"zset":
            found[key] = r.zrange(key, 0, -1, withscores=True)
        else:
            found[key] = r.dump(key)
    return found


def row(job_id: str) -> bytes:
    return Q.job(job_id)


def backlog(r: redis.Redis, count: int, **fields: int) -> list[str]:
    """`count` expired leases with rows, deadlines one ms apart; their ids in selection order."""
    ids = [f"job{n:04d}" for n in range(count)]
    pipe = r.pipeline(transaction=False)
    for n, job_id in enumerate(ids):
        pipe.zadd(Q.active, {job_id: PAST_MS + n})
        pipe.hset(Q.job(job_id), items=[x for f in {"attempts": 1, **fields}.items() for x in f])
    pipe.execute()
    return ids


def expired(r: redis.Redis) -> int:
    count = r.zcount(Q.active, "-inf", now_ms())
    assert isinstance(count, int)
    return count


class TestSpecTable:
    """The cases of docs/keyspace.md#what-a-sweep-does through `once --json`, both executors
    (max_stalled 1)."""

    def test_earlier_epoch_is_exempt(self, target: Target) -> None:
        """A lease of an earlier process goes to pending uncounted, listed recovered and exempt."""
        lease(target.r, Q, b"j", attempts=1, lease_epoch=EARLIER)
        ran = target.once("--json")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == target.expect(recovered=["j"], exempt=["j"])
        assert keyspace(target.r) == {
            row("j"): {b"attempts": b"1", b"lease_epoch": EARLIER, b"state": b"pending"},
            PENDING: [(b"j", 0.0)],
        }

    @pytest.mark.parametrize("stamped", [True, False], ids=["current-epoch", "no-epoch"])
    def test_counted_is_dead(self, target: Target, stamped: bool) -> None:
        """A lease of this process, or one with no epoch, is counted: dead, dead-lettered, +1."""
        epoch = {b"lease_epoch": run_id(target.r)} if stamped else {}
        lease(target.r, Q, b"j", PAST_MS, attempts=1, **{k.decode(): v for k, v in epoch.items()})
        target.r.hset(Q.metrics_failed, "count", 5)
        ran = target.once("--json")
        assert (ran.code, ran.err_lines) == (0, [default_budget_said("q")])
        assert ran.json() == target.expect(dead=["j"])
        fields = {b"attempts": b"1", b"stalled": b"1", b"state": b"dead", b"last_error": b"stalled"}
        assert keyspace(target.r) == {
            row("j"): {**fields, **epoch},
            DEAD: [(b"j", 0.0)],
            FAILED: {b"count": b"6"},
        }

    def test_under_budget_is_recovered(self, target: Target) -> None:
        """With max_stalled 3 a row stalled once is recovered with stalled 2, other fields kept."""
        epoch = run_id(target.r)
        lease(target.r, Q, b"j", attempts=4, failures=2, stalled=1, lease_epoch=epoch)
        ran = target.once("--json", "--max-stalled", "3")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == target.expect(recovered=["j"], max_stalled=3)
        assert keyspace(target.r) == {
            row("j"): {
                b"attempts": b"4",
                b"failures": b"2",
                b"stalled": b"2",
                b"lease_epoch": epoch,
                b"state": b"pending",
            },
            PENDING: [(b"j", 0.0)],
        }

    def test_ghost(self, target: Target) -> None:
        """An id with no row leaves active, no row is created, and the output lists it among
        the ghosts, a list of ids as every verdict is."""
        later = now_ms() + FUTURE_OFFSET_MS
        lease(target.r, Q, b"ghost")
        lease(target.r, Q, b"later", later, attempts=1)
        ran = target.once("--json")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == target.expect(ghosts=["ghost"])
        assert keyspace(target.r) == {
            ACTIVE: [(b"later", float(later))],
            row("later"): {b"attempts": b"1"},
        }

    def test_the_largest_limit(self, target: Target) -> None:
        """--limit 2**63-1, the verb's largest, reaches the server as written: a ghost among
        the leases is named, the others recovered (ids are read ahead to name ghosts)."""
        lease(target.r, Q, b"ghost")
        lease(target.r, Q, b"j", PAST_MS, attempts=1)
        largest = str(2**63 - 1)
        ran = target.once("--json", "--limit", largest, "--max-stalled", "5")
        assert (ran.code, ran.err) == (0, "")
        body = ran.json()
        assert (body["recovered"], body["ghosts"], body["limit"]) == (
            ["j"],
            ["ghost"],
            2**63 - 1,
        )

    def test_lane_row_refused(self, target: Target) -> None:
        """A lane row among ordinary ones refuses the call: exit 1, nothing written."""
        lease(target.r, Q, b"a", PAST_MS, attempts=1)
        lease(target.r, Q, b"lane", PAST_MS + 1, attempts=1, group="g")
        lease(target.r, Q, b"b", PAST_MS + 2, attempts=1, lease_epoch=EARLIER)
        before = dump_all(target.r)
        ran = target.once("--json")
        assert ran.code == 1
        said = "EMQLANE job lane is a lane row: refused, nothing written, 3 leases still due"
        assert ran.err_lines == [f"sweeperd: {said}"]
        assert ran.json() == target.expect(error={"reason": "lane", "message": said}, left=3)
        assert dump_all(target.r) == before

    def test_a_refusal_in_text(self, target: Target) -> None:
        """Without --json: the summary's last line is the reason and the same words as stderr's
        (one lease is one lease)."""
        lease(target.r, Q, b"lane", PAST_MS, attempts=1, group="g")
        ran = target.once()
        said = "refused, nothing written, 1 lease still due"
        assert ran.code == 1
        assert ran.err_lines == [f"sweeperd: EMQLANE job lane is a lane row: {said}"]
        assert ran.out.splitlines()[-1] == f"lane: {said}"

    def test_stalled_not_an_integer_refused(self, target: Target) -> None:
        """stalled = abc on a counted row is HINCRBY's refusal: exit 1, nothing written."""
        lease(target.r, Q, b"a", PAST_MS, attempts=1, lease_epoch=EARLIER)
        lease(target.r, Q, b"j", PAST_MS + 1, attempts=1, stalled="abc")
        before = dump_all(target.r)
        ran = target.once("--json")
        assert ran.code == 1
        said = "ERR hash value is not an integer: refused, nothing written, 2 leases still due"
        assert ran.err_lines == [f"sweeperd: {said}"]
        assert ran.json()["error"] == {
            "reason": "counter",
            "message": said,
        }
        assert dump_all(target.r) == before


class TestPrefixRoot:
    """`--prefix-root` names the keyspace the sweep works in."""

    def test_other_root(self, native: Target) -> None:
        """With --prefix-root app only app:{q}: is swept; the emq:{q}: lease is left alone."""
        app = QueueKeys("q", "app")
        lease(native.r, app, b"j", attempts=1, lease_epoch=EARLIER)
        lease(native.r, Q, b"j", attempts=1, lease_epoch=EARLIER)
        ran = native.once("--json", "--prefix-root", "app")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == native.expect(recovered=["j"], exempt=["j"])
        assert native.r.zrange(app.pending, 0, -1) == [b"j"]
        assert native.r.hget(app.job("j"), "state") == b"pending"
        assert native.r.zrange(Q.active, 0, -1) == [b"j"]
        assert native.r.exists(Q.pending) == 0


class TestExecutorChoice:
    """`--executor auto` (the default) picks native where the verb is loaded, script elsewhere."""

    def test_auto(self, target: Target) -> None:
        """Without --executor the JSON names the executor the server allows, and it sweeps."""
        lease(target.r, Q, b"j", attempts=1, lease_epoch=EARLIER)
        ran = sweeperd("once", "--queue", "q", "--redis-url", target.url, "--json")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == target.expect(recovered=["j"], exempt=["j"])

    def test_native_without_module(self, r_plain: redis.Redis, plain_server: RedisServer) -> None:
        """`--executor native` on a server without the verb: exit 1, one clear line, no writes."""
        lease(r_plain, Q, b"j", attempts=1)
        before = dump_all(r_plain)
        ran = sweeperd(
            "once", "--queue", "q", "--redis-url", plain_server.url, "--executor", "native"
        )
        assert (ran.code, ran.out) == (1, "")
        [line] = ran.err_lines
        assert "does not know EMQ.STALLED.CHECK" in line
        assert "--executor script" in line
        assert dump_all(r_plain) == before


class TestDrain:
    """`--drain` repeats the call until no lease due at the start remains."""

    def test_drain(self, target: Target) -> None:
        """250 expired leases at limit 100 take three calls and leave none expired."""
        ids = backlog(target.r, 250, stalled=0)
        lease(target.r, Q, b"later", now_ms() + FUTURE_OFFSET_MS, attempts=1)
        ran = target.once("--json", "--drain", "--limit", "100", "--max-stalled", "5")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == target.expect(recovered=ids, calls=3, max_stalled=5, limit=100)
        assert expired(target.r) == 0
        assert target.r.zrange(Q.active, 0, -1) == [b"later"]
        assert target.r.zcard(Q.pending) == 250
        assert target.r.hgetall(Q.job(ids[-1])) == {
            b"attempts": b"1",
            b"stalled": b"1",
            b"state": b"pending",
        }

    @pytest.mark.parametrize("target", ["native"], indirect=True)
    def test_without_drain(self, target: Target) -> None:
        """Without --drain one call takes the first 100 and leaves 150 expired."""
        ids = backlog(target.r, 250)
        ran = target.once("--json", "--limit", "100")
        assert (ran.code, ran.err_lines) == (0, [default_budget_said("q")])
        assert ran.json() == target.expect(dead=ids[:100], limit=100, left=150)
        assert expired(target.r) == 150
        assert target.r.zrange(Q.active, 0, 0) == [ids[100].encode()]
        assert target.r.hget(Q.metrics_failed, "count") == b"100"


def mixed(r: redis.Redis) -> None:
    """One of each verdict at max_stalled 3, plus a lease not yet due."""
    epoch = run_id(r)
    lease(r, Q, b"exempt", PAST_MS, attempts=1, lease_epoch=EARLIER, stalled=2)
    lease(r, Q, b"dead", PAST_MS + 1, attempts=3, lease_epoch=epoch, stalled=2)
    lease(r, Q, b"ghost", PAST_MS + 2)
    lease(r, Q, b"recovered", PAST_MS + 3, attempts=2, stalled=1)
    lease(r, Q, b"dead2", PAST_MS + 4, attempts=1, stalled=5)
    lease(r, Q, b"recovered2", PAST_MS + 5, attempts=1, lease_epoch=epoch)
    lease(r, Q, b"later", now_ms() + FUTURE_OFFSET_MS, attempts=1)
    r.hset(Q.metrics_failed, "count", 7)


def lists(body: dict[str, Any]) -> tuple[object, ...]:
    return body["recovered"], body["dead"], body["exempt"], body["ghosts"], body["calls"]


class TestDryRun:
    """`--dry-run` predicts the sweep from the model and writes nothing."""

    @pytest.mark.parametrize(
        ("target", "batching"),
        [("native", []), ("script", ["--drain", "--limit", "2"])],
        ids=["native-one-call", "script-drain-by-2"],
        indirect=["target"],
    )
    def test_predicts_the_sweep(self, target: Target, batching: list[str]) -> None:
        """The dry run lists exactly what the following sweep does, and leaves every byte."""
        mixed(target.r)
        before = dump_all(target.r)
        dry = target.once("--json", "--dry-run", "--max-stalled", "3", *batching)
        assert (dry.code, dry.err) == (0, "")
        assert dump_all(target.r) == before
        real = target.once("--json", "--max-stalled", "3", *batching)
        assert (real.code, real.err) == (0, "")
        assert dry.json() == {**real.json(), "dry_run": True}
        assert lists(real.json()) == (
            ["exempt", "recovered", "recovered2"],
            ["dead", "dead2"],
            ["exempt"],
            ["ghost"],
            3 if batching else 1,
        )
        assert target.r.hget(Q.metrics_failed, "count") == b"9"

    def test_predicts_a_refusal(self, target: Target) -> None:
        """A dry run over a lane row says the lane error, exits 1 and writes nothing."""
        mixed(target.r)
        lease(target.r, Q, b"lane", PAST_MS + 2, attempts=1, group="g")
        before = dump_all(target.r)
        dry = target.once("--json", "--dry-run", "--max-stalled", "3")
        assert dry.code == 1
        assert dry.err_lines == [
            "sweeperd: EMQLANE job lane is a lane row: refused, nothing written, 7 leases still due"
        ]
        assert dump_all(target.r) == before
        real = target.once("--json", "--max-stalled", "3")
        assert (real.code, real.err) == (1, dry.err)
        assert dry.json() == {**real.json(), "dry_run": True}
        assert dump_all(target.r) == before

    @pytest.mark.parametrize("target", ["script"], indirect=True)
    def test_predicts_a_refusal_in_a_later_batch(self, target: Target) -> None:
        """Draining by 2, the dry run lists the first batch's verdicts and the second's refusal."""
        mixed(target.r)
        lease(target.r, Q, b"lane", PAST_MS + 2, attempts=1, group="g")
        before = dump_all(target.r)
        dry = target.once("--json", "--dry-run", "--max-stalled", "3", "--drain", "--limit", "2")
        assert dry.code == 1
        assert dump_all(target.r) == before
        real = target.once("--json", "--max-stalled", "3", "--drain", "--limit", "2")
        assert (real.code, real.err) == (1, dry.err)
        assert real.json() == target.expect(
            recovered=["exempt"],
            dead=["dead"],
            exempt=["exempt"],
            calls=2,
            error={
                "reason": "lane",
                "message": "EMQLANE job lane is a lane row: call 2 refused, nothing written by "
                "it, 5 leases still due",
            },
            max_stalled=3,
            limit=2,
            left=5,
        )
        assert dry.json() == {**real.json(), "dry_run": True}

    def test_predicts_a_wrongtype_queue_key(self, native: Target) -> None:
        """An active key that is not a zset: the dry run says WRONGTYPE like the verb, no writes."""
        native.r.set(Q.active, "x")
        before = dump_all(native.r)
        dry = native.once("--json", "--dry-run")
        real = native.once("--json")
        assert (dry.code, real.code) == (1, 1)
        assert dry.err == real.err
        assert real.err_lines == [
            "sweeperd: WRONGTYPE Operation against a key holding the wrong kind of value: "
            "refused, nothing written, what is due unreadable"
        ]
        assert dry.json() == {**real.json(), "dry_run": True}
        assert dump_all(native.r) == before

    def test_text(self, native: Target) -> None:
        """The text of a dry run says it would recover and that nothing was written."""
        mixed(native.r)
        before = dump_all(native.r)
        ran = native.once("--dry-run", "--max-stalled", "3")
        assert (ran.code, ran.err) == (0, "")
        assert "(dry run: nothing written)" in ran.out
        assert "would recover 3 (of which 1 exempt" in ran.out
        assert dump_all(native.r) == before


USAGE = {  # case: (arguments after `once`, the option the error line names)
    "limit 0": (["--queue", "q", "--limit", "0"], "--limit (SWEEPERD_LIMIT)"),
    "limit -1": (["--queue", "q", "--limit", "-1"], "--limit (SWEEPERD_LIMIT)"),
    "max-stalled 0": (["--queue", "q", "--max-stalled", "0"], "--max-stalled (SWEEPERD_MAX"),
    "max-stalled x": (["--queue", "q", "--max-stalled", "x"], "--max-stalled (SWEEPERD_MAX"),
    "no queue": ([], "--queue (SWEEPERD_QUEUES)"),
    "unknown flag": (["--queue", "q", "--bogus"], "'--bogus'"),
    "url scheme": (["--queue", "q", "--redis-url", "foo://u:s3cret@x"], "--redis-url (SWEEPERD"),
    "brace": (["--queue", "a{b}"], "--queue (SWEEPERD_QUEUES)"),
}


@pytest.fixture(scope="class")
def usage(redis_server: RedisServer) -> tuple[dict[str, Ran], bool]:
    """Every USAGE case run side by side against a server holding a lease; unchanged after?"""
    with redis_server.client() as r:
        r.flushall()
        lease(r, Q, b"j", attempts=1)
        before = dump_all(r)
        argvs = []
        for args, _ in USAGE.values():
            url = [] if "--redis-url" in args else ["--redis-url", redis_server.url]
            argvs.append(["once", *url, *args])
        runs = sweeperd_many(*argvs)
        return dict(zip(USAGE, runs, strict=True)), dump_all(r) == before


class TestExitCodes:
    """0 done, 1 refused (both above), 2 bad usage, 3 unreachable."""

    def test_nothing_due(self, target: Target) -> None:
        """Nothing due is success: exit 0, one call, empty lists, and future leases untouched."""
        lease(target.r, Q, b"later", now_ms() + FUTURE_OFFSET_MS, attempts=1)
        before = dump_all(target.r)
        ran = target.once("--json")
        assert (ran.code, ran.err) == (0, "")
        assert ran.json() == target.expect()
        assert dump_all(target.r) == before

    @pytest.mark.parametrize("case", USAGE)
    def test_usage(self, usage: tuple[dict[str, Ran], bool], case: str) -> None:
        """A bad option exits 2 with exactly one stderr line naming it, and writes nothing."""
        runs, unchanged = usage
        ran = runs[case]
        assert (ran.code, ran.out) == (2, "")
        [line] = ran.err_lines
        assert line.startswith("sweeperd: ")
        assert USAGE[case][1] in line
        assert "s3cret" not in ran.err
        assert unchanged

    def test_unreachable(self) -> None:
        """Nothing listening on the port: exit 3 with one line naming the address."""
        url = f"redis://127.0.0.1:{free_port()}/0"
        ran = sweeperd(
            "once", "--queue", "q", "--redis-url", url, "--executor", "script", "--dry-run"
        )
        assert (ran.code, ran.out) == (3, "")
        [line] = ran.err_lines
        assert line.startswith(f"sweeperd: cannot reach {url}")

    def test_unreachable_password_redacted(self) -> None:
        """Unreachable with the default executor: exit 3, and the password is never printed."""
        port = free_port()
        ran = sweeperd("once", "--queue", "q", "--redis-url", f"redis://u:s3cret@127.0.0.1:{port}")
        assert ran.code == 3
        assert "s3cret" not in ran.err
        assert f"127.0.0.1:{port}" in ran.err


class TestText:
    """The summary printed without --json."""

    def test_counts_and_ids(self, native: Target) -> None:
        """Counts, the run_id's head and every id of a short list are printed."""
        mixed(native.r)
        ran = native.once("--max-stalled", "3")
        assert (ran.code, ran.err) == (0, "")
        lines = ran.out.splitlines()
        assert lines[0] == (
            f"queue q  executor native  run_id {native.run_id[:12]}…  max_stalled 3  limit 1000"
        )
        assert lines[1] == (
            "recovered 3 (of which 1 exempt: lease from an earlier server run)  dead 2  ghosts 1  "
            "calls 1"
        )
        assert lines[2:] == [
            "recovered:",
            "  exempt",
            "  recovered",
            "  recovered2",
            "exempt:",
            "  exempt",
            "dead:",
            "  dead",
            "  dead2",
            "ghosts (ids in active with no row: removed):",
            "  ghost",
        ]

    def test_long_lists_abbreviated(self, native: Target) -> None:
        """A long id list shows its head and '… and N more' (20-line terminal: 4 ids shown)."""
        ids = backlog(native.r, 30)
        ran = native.once("--max-stalled", "1")
        assert (ran.code, ran.err) == (0, "")
        assert "recovered 0 (of which 0 exempt" in ran.out
        assert "dead 30  ghosts 0  calls 1" in ran.out
        dead = ran.out.splitlines()[ran.out.splitlines().index("dead:") + 1 :]
        assert dead == [*(f"  {i}" for i in ids[:4]), "  … and 26 more (--json lists every id)"]

    def test_nothing_due(self, native: Target) -> None:
        """With nothing due the summary says so (and, the queue having no key, that too)."""
        ran = native.once()
        assert (ran.code, ran.err) == (0, "")
        assert ran.out.splitlines()[1:] == [
            "recovered 0 (of which 0 exempt: lease from an earlier server run)  dead 0  ghosts 0  "
            "calls 1",
            f"nothing was due: {Q.absent()}",
        ]
