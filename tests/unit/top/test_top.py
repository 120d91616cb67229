"""`sweeperd top`: rows, rates and restarts read from a real server, nothing written."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sweeperd.commands import once
from sweeperd.constants import DEFAULT_TOP_RATE_WINDOW_S, ExecutorChoice
from sweeperd.keyspace import QueueKeys, members_key
from sweeperd.ownership import owner
from sweeperd.server.connection import Connection
from sweeperd.top.refresh import READS_PER_REFRESH, Screen, Top
from sweeperd.top.screen import plain_text
from sweeperd.verb.executors import choose
from tests.support.clock import Clock
from tests.support.helpers import FUTURE_OFFSET_MS, dump_all, lease, now_ms, run_id
from tests.support.invoke import Ran, sweeperd
from tests.support.pty_view import LiveView, restored
from tests.support.servers import RedisServer
from tests.support.top_rows import rows_of

BACKLOGS = {"reports": 7, "mail": 3, "idle": 0}  # expired leases per queue
READ_COMMANDS = {  # what top (and the client's handshake) may send: reads only
    "info",
    "command|info",
    "zcount",
    "zcard",
    "zrange",
    "zrangebyscore",
    "hget",
    "scan",
    "ping",
    "client|setinfo",
    "hello",
    "select",
    "config|resetstat",
}


WIDE = {"COLUMNS": "300"}  # a terminal no line of the tests' wraps on


def populate(r: redis.Redis) -> None:
    """BACKLOGS expired leases per queue, one live lease, 2 pending, 1 dead, count 5 each."""
    for queue, expired in BACKLOGS.items():
        keys = QueueKeys(queue)
        for n in range(expired):
            lease(r, keys, f"j{n}".encode(), now_ms() - 60_000 - n, attempts=1)
        lease(r, keys, b"live", now_ms() + FUTURE_OFFSET_MS, attempts=1)
        r.zadd(keys.pending, {"p0": 0, "p1": 0})
        r.zadd(keys.dead, {"d": 0})
        r.hset(keys.metrics_failed, "count", 5)


def viewer(
    server: RedisServer,
    queues: tuple[str, ...] = (),
    rows: int = 10,
    clock: Clock | None = None,
    window: float = DEFAULT_TOP_RATE_WINDOW_S,
    reads: int = READS_PER_REFRESH,
) -> Top:
    connection = Connection.checked(server.url, None, 5.0)
    return Top(connection, "emq", queues, rows, clock or Clock(1_000_000.0), window, reads)


def bursts(
    r: redis.Redis, server: RedisServer, seconds: int, window: float = DEFAULT_TOP_RATE_WINDOW_S
) -> list[float | None]:
    """queue q's recovered/s read every second while a daemon recovers 921 leases every 3 s."""
    clock = Clock(1_000_000.0)
    view = viewer(server, ("q",), clock=clock, window=window)
    rates = []
    for second in range(seconds):
        if second and second % 3 == 0:
            r.zadd(QueueKeys("q").pending, {f"s{second}-{n}": 0 for n in range(921)})
        rates.append(view.refresh().rows[0].recovered_per_s)
        clock.now += 1.0
    return rates


def live_members(r: redis.Redis, *ids: str, gone: tuple[str, ...] = ()) -> None:
    """Members as the daemon's heartbeats leave them: `ids` live a minute more, `gone` expired."""
    deadlines = {m: now_ms() + 60_000 for m in ids} | {m: now_ms() - 1_000 for m in gone}
    r.zadd(members_key("emq"), deadlines)


def calls(r: redis.Redis, command: str) -> int:
    """How often the server ran `command` since its stats were reset."""
    stats = r.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0


def top(server: RedisServer, *args: str) -> Ran:
    return sweeperd("top", "--redis-url", server.url, "--interval", "0.1", *args)


@pytest.fixture
def own_server(server_kind: str, tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test alone: it is restarted."""
    with RedisServer(tmp_path, kind=server_kind) as server:
        yield server


class TestTopRows:
    """The rows: what the keyspace holds, most expired first, capped to --rows."""

    def test_rows_match_the_keyspace(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Discovery finds every queue, and each row's counts are its keys' counts."""
        populate(r)
        screen = viewer(redis_server).refresh()
        assert [row.queue for row in screen.rows] == ["reports", "mail", "idle"]
        for row in screen.rows:
            expired = BACKLOGS[row.queue]
            assert (row.expired, row.active, row.pending, row.dead, row.failed) == (
                expired,
                expired + 1,
                2,
                1,
                5,
            )
            assert (row.oldest_overdue_s is None) == (expired == 0)
        assert screen.queues == 3
        assert screen.rows[0].oldest_overdue_s is not None
        assert 60 <= screen.rows[0].oldest_overdue_s < 70

    def test_capped_rows(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """--rows 2 shows the two queues with the most expired leases, of the 3 read."""
        populate(r)
        body = top(redis_server, "--json", "--rows", "2").json()
        assert [row["queue"] for row in body["rows"]] == ["reports", "mail"]
        assert body["queues"] == 3

    def test_given_queues_only(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """With --queue only the queues named are read, a missing one as zeros."""
        populate(r)
        screen = viewer(redis_server, ("mail", "nowhere")).refresh()
        assert {row.queue: (row.expired, row.active) for row in screen.rows} == {
            "mail": (3, 4),
            "nowhere": (0, 0),
        }


class TestTopBudget:
    """A refresh's reads: every queue's expired count on the first, then the queues shown, those
    never read and a budget of others in turn; the rest keep their last numbers."""

    def test_each_refresh_reads_its_budget(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """40 queues, 3 rows, a budget of 10: the first refresh reads all 40 (to find the
        busiest), each next one 10 in turn and the 3 shown, so a backlog that grows on a
        queue not shown is seen within four refreshes; the view always counts all 40."""
        names = [f"q{n:02}" for n in range(40)]
        for n, name in enumerate(names[:3]):
            for job in range(n + 1):
                lease(r, QueueKeys(name), f"j{job}".encode(), attempts=1)
        view = viewer(redis_server, tuple(names), rows=3, reads=10)
        r.config_resetstat()
        first = view.refresh()
        assert [row.queue for row in first.rows] == ["q02", "q01", "q00"]
        assert calls(r, "zcount") == 40 + 10  # every queue, then the first turn (the 3 in it)
        for job in range(5):
            lease(r, QueueKeys("q39"), f"j{job}".encode(), attempts=1)
        seen = []
        for _ in range(4):
            r.config_resetstat()
            screen = view.refresh()
            assert calls(r, "zcount") <= 10 + 3 and screen.queues == 40
            seen.append(screen.rows[0].queue)
        assert seen[-1] == "q39" and seen[0] == "q02"


class TestTopDiscovery:
    """Without --queue: every queue with leases, pending work or dead jobs; never sweeperd's own
    keys."""

    def test_queue_with_pending_work_only(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A queue with jobs waiting and no active set yet, or only dead jobs, is shown."""
        populate(r)
        r.zadd(QueueKeys("waiting").pending, {"p0": 0, "p1": 0, "p2": 0})
        r.zadd(QueueKeys("buried").dead, {"d0": 0})
        r.zadd(QueueKeys("b:ü").pending, {"p0": 0})
        screen = viewer(redis_server).refresh()
        rows = rows_of(screen)
        assert set(rows) == {*BACKLOGS, "waiting", "buried", "b:ü"}
        assert rows["waiting"] == ("ok", 0, 0, 3, 0, 0)
        assert rows["buried"] == ("ok", 0, 0, 0, 1, 0)

    def test_own_keys_are_no_queues(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The replicas' membership set and other keys under <root>:sweeperd: are not queues."""
        populate(r)
        live_members(r, "web-1:11")
        r.zadd("emq:sweeperd:{x}:pending", {"m": 0})
        r.zadd("emq:sweeperd:{x}:active", {"m": 0})
        assert set(rows_of(viewer(redis_server).refresh())) == set(BACKLOGS)

    def test_a_refused_scan_is_said(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A user without SCAN gets no empty view that looks whole: the server's line says its
        queues are not listed and why (NOPERM, SCAN named) and how to list them, the count
        says it too; the queues named with --queue are read as usual. Exit 0, nothing on
        stderr."""
        populate(r)
        r.acl_setuser(
            "topviewer", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-scan"]
        )
        url = redis_server.url.replace("redis://", "redis://topviewer:pw@")
        try:
            listed = sweeperd("top", "--redis-url", url, "--interval", "0.1", "--json")
            text = sweeperd("top", "--redis-url", url, "--interval", "0.1", env=WIDE)
            named = sweeperd("top", "--redis-url", url, "--interval", "0.1", "--json", "-q", "mail")
        finally:
            r.acl_deluser("topviewer")
        assert (listed.code, listed.err, text.code, text.err) == (0, "", 0, "")
        body = listed.json()
        [server] = body["servers"]
        assert (server["error"], body["queues"], body["rows"]) == (None, 0, [])
        assert server["scan_error"].startswith("NOPERM") and "'scan'" in server["scan_error"]
        [line] = [line for line in text.out.splitlines() if line.startswith("1 ")]
        assert line.endswith(
            f"queues not listed: {server['scan_error']} (grant +scan, or give them with --queue)"
        ), line
        assert text.out.splitlines()[-1] == (
            "0 of 0 queues shown, most expired first; server 1 not listed"
        ), text.out
        assert named.code == 0 and named.json()["servers"][0]["scan_error"] is None
        assert [(row["queue"], row["expired"]) for row in named.json()["rows"]] == [("mail", 3)]


class TestTopRates:
    """recovered/s and dead/s: growth of pending and metrics:failed between two reads."""

    def test_known_drain(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """6 recoveries and 4 deaths in 2 seconds read as 3.0 recovered/s and 2.0 dead/s."""
        keys = QueueKeys("q")
        epoch = run_id(r)
        for n in range(6):
            lease(r, keys, f"ok{n}".encode(), attempts=1, stalled=0, lease_epoch=epoch)
        for n in range(4):
            lease(r, keys, f"die{n}".encode(), attempts=1, stalled=2, lease_epoch=epoch)
        clock = Clock(1_000_000.0)
        view = viewer(redis_server, ("q",), clock=clock)
        first = view.refresh().rows[0]
        assert (first.expired, first.recovered_per_s, first.dead_per_s) == (10, None, None)
        # raw replies, as sweeperd connects
        client = Connection.checked(redis_server.url, None, 5.0).client()
        result = once.sweep(
            client,
            choose(client, ExecutorChoice.AUTO),
            keys,
            max_stalled=3,
            limit=100,
            drain=True,
        )
        client.close()
        assert (len(result.recovered), len(result.dead)) == (6, 4)
        clock.now += 2.0
        row = view.refresh().rows[0]
        assert (row.expired, row.pending, row.failed) == (0, 6, 4)
        assert (row.recovered_per_s, row.dead_per_s) == (3.0, 2.0)

    def test_steady_over_the_window(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A daemon recovering 921 leases every 3 s, read every second, reads as a steady
        307.0/s once the default window (15 s) is full, never 0 between its sweeps."""
        rates = bursts(r, redis_server, 31)
        assert rates[0] is None
        assert rates[15:] == [307.0] * 16
        assert all(rate is not None and rate > 0 for rate in rates[3:])

    def test_window_option(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A 6 s window is full after 6 reads: the same sweeps read as 307.0/s from then on."""
        rates = bursts(r, redis_server, 13, window=6.0)
        assert rates[6:] == [307.0] * 7

    def test_once_has_rates(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """--once reads twice, so its rows carry rates (zero on a still queue)."""
        populate(r)
        body = top(redis_server, "--json", "--queue", "mail").json()
        assert (body["rows"][0]["recovered_per_s"], body["rows"][0]["dead_per_s"]) == (0.0, 0.0)


class TestTopRestart:
    """A server whose run_id changed since the view started is marked."""

    def test_restart_marker(self, own_server: RedisServer) -> None:
        """After a restart the server row keeps the first run_id and says it restarted."""
        view = viewer(own_server, ("q",))
        before = view.refresh().servers[0]
        assert not before.restarted
        own_server.restart()
        screens: list[Screen] = [view.refresh() for _ in range(2)]  # the first sees it go
        after = screens[-1].servers[0]
        assert (after.first_run_id, after.restarted) == (before.run_id, True)
        assert after.run_id != before.run_id
        view.close()

    def test_unreachable_is_one_line(self, own_server: RedisServer) -> None:
        """--once against a stopped server: one line on stderr, exit 3, as inspect."""
        own_server.stop()
        ran = top(own_server, "--once", "--queue", "q")
        assert ran.code == 3
        assert len(ran.err_lines) == 1 and ran.err.startswith("sweeperd: ")
        own_server.start()


class TestTopOutage:
    """A server or a key that cannot be read: the last known rows stay, said to be so."""

    def test_unreachable_server_keeps_its_rows(
        self, own_server: RedisServer, tmp_path: Path
    ) -> None:
        """A stopped server's rows stay with their last numbers, marked stale, and its line
        says UNREACHABLE with the error, naming the server."""
        with own_server.client() as c:
            populate(c)
        view = viewer(own_server)
        try:
            before = rows_of(view.refresh())
            own_server.stop()
            screen = view.refresh()
            [server] = screen.servers
            assert server.node == f"127.0.0.1:{own_server.port}"
            assert server.error is not None and "refused" in server.error.lower()
            assert {q: row[1:] for q, row in rows_of(screen).items()} == {
                q: row[1:] for q, row in before.items()
            }
            assert {row.state for row in screen.rows} == {"stale"}
            text = plain_text(screen, 1.0, 100)
            assert f"127.0.0.1:{own_server.port}  UNREACHABLE: " in text
            assert all(f"~{queue}" in text for queue in BACKLOGS), text
        finally:
            view.close()

    def test_wrong_type_is_its_rows_error(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """A queue whose key has the wrong type carries the error in its own row; the server
        and the other queues are read as usual."""
        populate(r)
        r.delete(QueueKeys("mail").pending)
        r.set(QueueKeys("mail").pending, "not a zset")
        r.delete(QueueKeys("idle").active)
        r.hset(QueueKeys("idle").active, "not", "a zset")
        screen = viewer(redis_server, ("reports", "mail", "idle")).refresh()
        assert [s.error for s in screen.servers] == [None]
        rows = {row.queue: row for row in screen.rows}
        assert rows_of(screen)["reports"] == ("ok", 7, 8, 2, 1, 5)
        assert rows_of(screen)["mail"] == ("error", 3, 4, None, 1, 5)
        assert rows_of(screen)["idle"][:3] == ("error", None, None)
        for queue in ("mail", "idle"):
            assert (rows[queue].error or "").startswith("WRONGTYPE"), rows[queue].error
        assert screen.failures == ()
        text = plain_text(screen, 1.0, 100)
        assert "!mail" in text and "!idle" in text and "UNREACHABLE" not in text
        assert "mail: WRONGTYPE" in text

    def test_restart_keeps_the_rows(self, own_server: RedisServer) -> None:
        """A server restarted (its keyspace lost) keeps its rows: stale while it is down, then
        read again (zeros), their rates started again, the server marked RESTARTED."""
        with own_server.client() as c:
            populate(c)
        clock = Clock(1_000_000.0)
        view = viewer(own_server, clock=clock)
        try:
            view.refresh()
            own_server.stop()
            clock.now += 1.0
            assert {row.state for row in view.refresh().rows} == {"stale"}
            own_server.start()
            clock.now += 1.0
            screen = view.refresh()
            assert rows_of(screen) == {q: ("ok", 0, 0, 0, 0, 0) for q in BACKLOGS}
            assert [row.recovered_per_s for row in screen.rows] == [None] * 3
            assert screen.servers[0].restarted
            clock.now += 1.0
            assert [row.recovered_per_s for row in view.refresh().rows] == [0.0] * 3
        finally:
            view.close()


class TestTopOwners:
    """The node and owner columns: where each queue lives and which replica sweeps it."""

    def test_owner_is_the_rendezvous_winner(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """Each row's owner is the live member with the highest rendezvous hash; an expired
        member owns nothing."""
        populate(r)
        live_members(r, "web-1:11", "web-2:22", "web-3:33", gone=("dead-4:44",))
        screen = viewer(redis_server).refresh()
        live = ("web-1:11", "web-2:22", "web-3:33")
        assert screen.members == live
        assert {row.queue: row.owner for row in screen.rows} == {
            q: owner(q, live) for q in BACKLOGS
        }
        assert {row.node for row in screen.rows} == {f"127.0.0.1:{redis_server.port}"}
        text = plain_text(screen, 1.0, 100)
        header = next(line for line in text.splitlines() if line.startswith("queue"))
        assert header.split()[:3] == ["queue", "node", "owner"]
        labels = dict(zip(live, "abc", strict=True))
        assert "replicas: a web-1:11  b web-2:22  c web-3:33" in text
        reports = next(line for line in text.splitlines() if line.startswith("reports"))
        assert reports.split()[1:3] == ["1", labels[owner("reports", live) or ""]]

    def test_no_members_no_owner_column(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """With no live member (sharing off, or every heartbeat expired) there is no owner."""
        populate(r)
        live_members(r, gone=("dead-4:44",))
        screen = viewer(redis_server).refresh()
        assert screen.members == ()
        assert {row.owner for row in screen.rows} == {None}
        text = plain_text(screen, 1.0, 100)
        header = next(line for line in text.splitlines() if line.startswith("queue"))
        assert "owner" not in header and "replicas:" not in text

    def test_letters_stay_when_a_member_leaves(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """A member keeps its letter for the whole view: one that leaves takes its letter with
        it (the others keep theirs), one that joins gets the next letter, never a taken one."""
        populate(r)
        live_members(r, "web-1:11", "web-2:22", "web-3:33")
        view = viewer(redis_server)
        try:
            first = plain_text(view.refresh(), 1.0, 100)
            live_members(r, "web-1:11", "web-3:33", "web-0:00", gone=("web-2:22",))
            later = view.refresh()
        finally:
            view.close()
        assert "replicas: a web-1:11  b web-2:22  c web-3:33" in first, first
        text = plain_text(later, 1.0, 100)
        assert "replicas: d web-0:00  a web-1:11  c web-3:33" in text, text
        letter = {"web-0:00": "d", "web-1:11": "a", "web-3:33": "c"}
        for row in later.rows:
            line = next(line for line in text.splitlines() if line.startswith(f"{row.queue} "))
            assert line.split()[2] == letter[row.owner or ""], text


def fill(r: redis.Redis, key: str, members: int, score: int) -> None:
    """`members` members m1 … mN in the sorted set `key`, each at `score`, in one call."""
    script = "for n = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], ARGV[2], 'm' .. n) end"
    r.eval(script, 1, key, members, score)


FULL = ("node", "owner", "expired", "overdue", "active", "pending", "dead", "rec/s", "dead/s")


class TestTopWidth:
    """The table at 80 columns and narrower: whole columns dropped, never a number cut."""

    @pytest.mark.parametrize(
        ("width", "dropped"),
        [
            (80, ()),
            (60, ("active", "owner", "dead")),
            (50, ("active", "owner", "dead", "dead/s")),
            (40, ("active", "owner", "dead", "dead/s", "node", "pending")),
        ],
    )
    def test_columns_that_fit(
        self, r: redis.Redis, redis_server: RedisServer, width: int, dropped: tuple[str, ...]
    ) -> None:
        """At `width` columns every line fits, the columns that do not fit whole are dropped
        (least needed first), every number shown is whole and a long queue name is cut with an
        ellipsis to what is left, 8 characters at the least."""
        populate(r)
        long_name = "billing-reconciliation-nightly-exports-for-every-region"
        keys = QueueKeys(long_name)
        fill(r, keys.active, 123_456, 1000)
        fill(r, keys.pending, 54_321, 0)
        live_members(r, "sweeperd-6d5f9c7b8-x2kq9", "sweeperd-6d5f9c7b8-ab3cd")
        clock = Clock(1_000_000.0)
        view = viewer(redis_server, clock=clock)
        view.refresh()
        clock.now += 1.0
        text = plain_text(view.refresh(), 1.0, width)
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width, text
        header = next(line for line in lines if line.startswith("queue"))
        assert header.split() == ["queue", *(c for c in FULL if c not in dropped)], text
        name, *cells = lines[lines.index(header) + 2].split()
        assert name.endswith("…") and long_name.startswith(name[:-1]) and len(name) >= 8, text
        shown = dict(zip(header.split()[1:], cells, strict=True))
        owner_letter = shown.pop("owner", "a")
        overdue = shown.pop("overdue")
        assert owner_letter in ("a", "b") and re.fullmatch(r"[0-9,.]+d", overdue), text
        whole = {"node": "1", "expired": "123.5k", "active": "123.5k", "pending": "54,321"}
        whole |= {"dead": "0", "rec/s": "0.0", "dead/s": "0.0"}
        assert shown == {c: v for c, v in whole.items() if c not in dropped}, text


class TestTopJson:
    """`top --json`: the documented object (docs/commands.md, sweeperd top)."""

    def test_schema(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Every documented field is there with its type; the server is identified."""
        populate(r)
        live_members(r, "web-1:11")
        ran = top(redis_server, "--json")
        assert (ran.code, ran.err) == (0, "")
        body = ran.json()
        assert set(body) == {
            "schema",
            "at",
            "interval_s",
            "rate_window_s",
            "queues",
            "read",
            "members",
            "servers",
            "rows",
        }
        assert (body["schema"], body["interval_s"], body["rate_window_s"]) == (3, 0.1, 0.1)
        assert (body["queues"], body["read"], body["members"]) == (3, 3, ["web-1:11"])
        [server] = body["servers"]
        assert server == {
            "node": f"127.0.0.1:{redis_server.port}",
            "run_id": run_id(r).decode(),
            "uptime_s": server["uptime_s"],
            "role": "master",
            "verb_loaded": True,
            "first_run_id": run_id(r).decode(),
            "error": None,
            "restarted": False,
            "replaced": False,
            "reads_for": None,
            "scan_error": None,
            "maxmemory_policy": "noeviction",
        }
        row = body["rows"][0]
        assert set(row) == {
            "queue",
            "node",
            "owner",
            "state",
            "error",
            "as_of",
            "expired",
            "active",
            "oldest_overdue_s",
            "pending",
            "dead",
            "failed",
            "recovered_per_s",
            "dead_per_s",
        }
        assert (row["queue"], row["owner"], row["state"], row["error"]) == (
            "reports",
            "web-1:11",
            "ok",
            None,
        )
        assert body["at"] - 5 < row["as_of"] <= body["at"]

    def test_plain_text_off_a_terminal(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Off a terminal it prints the table once and exits 0, the server line first."""
        populate(r)
        ran = top(redis_server)
        assert (ran.code, ran.err) == (0, "")
        lines = ran.out.splitlines()
        assert lines[1].startswith(f"1 127.0.0.1:{redis_server.port}  run_id ")
        assert "verb loaded" in lines[1]
        assert [
            line.split()[0] for line in lines if line.split()[:1] in (["reports"], ["mail"])
        ] == [
            "reports",
            "mail",
        ]


class TestTopReadOnly:
    """It never writes."""

    def test_nothing_written(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The keyspace's DUMPs are unchanged and the server ran only read commands."""
        populate(r)
        live_members(r, "web-1:11")
        before = dump_all(r)
        r.config_resetstat()
        ran = top(redis_server, "--once")
        assert ran.code == 0
        stats = r.info("commandstats")
        ran_commands = {name.removeprefix("cmdstat_") for name in stats}
        assert ran_commands <= READ_COMMANDS, ran_commands - READ_COMMANDS
        assert dump_all(r) == before


class TestTopUsage:
    """Bad options: one line, exit 2."""

    @pytest.mark.parametrize(
        ("args", "named"),
        [
            (("--interval", "0"), "--interval"),
            (("--interval", "x"), "--interval"),
            (("--rows", "0"), "--rows"),
            (("--rows", "two"), "--rows"),
            (("--rate-window", "0"), "--rate-window"),
            (("--rate-window", "x"), "--rate-window"),
        ],
    )
    def test_bad_option(self, args: tuple[str, ...], named: str) -> None:
        """A refresh or a rate window out of range or rows below 1 is named on one line,
        exit 2."""
        ran = sweeperd("top", "--once", *args)
        assert ran.code == 2
        assert len(ran.err_lines) == 1 and named in ran.err

    @pytest.mark.parametrize(
        ("flag", "env", "says"),
        [
            ("--interval", "SWEEPERD_TOP_INTERVAL", "SECONDS"),
            ("--rate-window", "SWEEPERD_TOP_RATE_WINDOW", "SECONDS"),
            ("--rows", "SWEEPERD_TOP_ROWS", "N"),
        ],
    )
    def test_an_empty_option_is_refused(self, flag: str, env: str, says: str) -> None:
        """Given empty, as a flag or an env var, it is refused (it meant the default)."""
        line = f"sweeperd: {flag} ({env}) is empty: give {says} or leave it out"
        for ran in (sweeperd("top", "--once", flag, ""), sweeperd("top", "--once", env={env: ""})):
            assert (ran.code, ran.err_lines) == (2, [line])


class TestTopLive:
    """The live view in a pseudo-terminal."""

    def test_live_screen(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """On a terminal the view refreshes in place with the rows and the server; Ctrl-C ends
        it with exit 0, the terminal given back."""
        populate(r)
        with LiveView(["--redis-url", redis_server.url, "--interval", "0.2"]) as view:
            first = view.read_until(["reports", "rec/s", "verb loaded"])
            r.zadd(QueueKeys("mail").active, {f"more{n}": 1000 for n in range(40)})
            text = view.read_until(["43"])  # mail's backlog grew: 3 + 40
            code, err = view.stop(signal.SIGINT)
        assert (code, err) == (0, "")
        assert all(w in first for w in ["reports", "rec/s", "verb loaded"]), first
        assert "43" in text
        assert "3 of 3 queues shown, most expired first" in text
        assert restored(view.received)

    @pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
    def test_a_signal_leaves_as_ctrl_c_does(
        self, r: redis.Redis, redis_server: RedisServer, signum: signal.Signals
    ) -> None:
        """SIGTERM (a supervisor, kill) and SIGHUP (the terminal closed) leave the view as
        Ctrl-C does: the main screen back, the cursor shown, exit 0, nothing on stderr."""
        populate(r)
        with LiveView(["--redis-url", redis_server.url, "--interval", "0.2"]) as view:
            view.read_until(["3 of 3 queues shown"])
            code, err = view.stop(signum)
        assert (code, err) == (0, "")
        assert restored(view.received), view.received[-200:]

    def test_ctrl_c_cuts_a_hung_read_short(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """Ctrl-C while a refresh waits on a server that stopped answering (SIGSTOP, a read
        timeout of an hour): the view ends at once with exit 0 and the terminal given back."""
        populate(r)
        args = ["--redis-url", redis_server.url, "--interval", "0.2", "--socket-timeout", "3600"]
        assert redis_server.process is not None
        with LiveView(args) as view:
            view.read_until(["3 of 3 queues shown"])
            redis_server.process.send_signal(signal.SIGSTOP)
            try:
                view.read_for(1.0)  # a refresh or more sent, none answered
                code, err = view.stop(signal.SIGINT)
            finally:
                redis_server.process.send_signal(signal.SIGCONT)
        assert (code, err) == (0, "")
        assert restored(view.received), view.received[-200:]

    def test_a_terminal_closed_under_it(self, r: redis.Redis, redis_server: RedisServer) -> None:
        """The terminal closed under the view (an ssh session dropped): it ends at the hang-up
        with exit 0 and no traceback, though nothing can be written any more."""
        populate(r)
        with LiveView(["--redis-url", redis_server.url, "--interval", "0.2"]) as view:
            view.read_until(["3 of 3 queues shown"])
            assert view.hang_up() == (0, "")

    def test_a_narrow_terminal_drops_columns(
        self, r: redis.Redis, redis_server: RedisServer
    ) -> None:
        """At 50 columns the live view shows the queue's name and the columns that fit whole
        (active, dead and dead/s dropped), never a number cut."""
        populate(r)
        fill(r, QueueKeys("reports").pending, 259_000, 0)
        args = ["--redis-url", redis_server.url, "--interval", "0.2"]
        with LiveView(args, lines=30, columns=50) as view:
            text = view.read_until(["3 of 3 queues shown", "259.0k"])
            code, _ = view.stop(signal.SIGINT)
        assert code == 0
        lines = [line.strip() for line in text.splitlines()]
        headers = {tuple(line.split()) for line in lines if line.startswith("queue ")}
        assert headers == {("queue", "node", "expired", "overdue", "pending", "rec/s")}, text
        rows = [line.split() for line in lines if line.split()[:1] in (["reports"], ["mail"])]
        assert rows and all("…" not in cell for cells in rows for cell in cells), text
        assert {tuple(cells[:3] + cells[4:5]) for cells in rows} == {
            ("reports", "1", "7", "259.0k"),
            ("mail", "1", "3", "2"),
        }, text
        assert max(map(len, lines)) <= 50, text
