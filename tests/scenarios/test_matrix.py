"""The operator matrix: run, once, once --dry-run, inspect, top --once --json, audit and acl on one
server, a 3+3 Cluster and Sentinel, as the default user and as the user `sweeperd acl` prints
for the row, healthy and in each failure an operator meets. A topology is started once and a
condition set up once for all its cells; each cell asserts the exit code, the one line said
(the right node, the right fix) and where every seeded id is after.

    condition  standalone cluster sentinel
    healthy        x         x       x
    killed         x         x       x     a primary killed before its replica takes over
    failover       .         x       .     during a CLUSTER FAILOVER (sent, not waited for)
    down           .         x       .     the Cluster down: a primary dead, none took over
    loading        x         .       .     the server loading its dataset
    denied         x         x       x     a command every command sends, taken by ACL
    replica        .         x       .     a primary dead, its replica held from taking over:
                                           top reads the primary's queues there (READONLY)
    nouser         .         x       .     a primary without the ACL user (a restart that
                                           lost it): named, not the seed
    seeddead       .         x       .     three seeds, the first a killed node, the last a
                                           port nothing listens on
    tls            x         .       .     rediss:// given for a server without TLS

A row is a topology and a user (the default user, or the one `sweeperd acl` prints); its cells
are COMMANDS, and `sharing`: the acl user's daemon shares the queues (--shard on), and what it
says of its membership is a cell of its own; `hearing`: the acl user's daemon hears its queues
change on every primary (CLIENT TRACKING, its subscription), never refused. SAID is what once,
its dry run and inspect print."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

from tests.support.conditions import SETUPS, Rows, Situation, denied
from tests.support.daemon_process import wait_until
from tests.support.invoke import Ran, sweeperd
from tests.support.scenes import ACL_USER, USERS, ClusterScene, SentinelScene

CONDITIONS = {
    "standalone": ("healthy", "killed", "loading", "denied", "tls"),
    "cluster": ("healthy", "killed", "failover", "down", "denied", "replica", "nouser", "seeddead"),
    "sentinel": ("healthy", "killed", "denied"),
}
COMMANDS = (
    "once",
    "dry-run",
    "inspect",
    "top",
    "audit",
    "run",
    "acl",
)  # acl last: the ACL LOG then
# The command taken away: CLUSTER SLOTS, which every command reads first in a Cluster; ZCOUNT
# elsewhere (inspect's and the sweep's; the dry run sends none, and predicts).
DENIED = {"standalone": "zcount", "cluster": "cluster|slots", "sentinel": "zcount"}

UNREACHABLE = "cannot reach {dead}: Error 111 connecting to {node}. Connection refused"
DOWN = (
    "the cluster is down (CLUSTERDOWN The cluster is down): {node} failed, and its replica "
    "{replica} is down too: start the failed nodes again (a replica that is up takes over), or "
    "move their slots to a primary that is up"
)
UP_AGAIN = "run it again once the cluster is up"
LOADING = "{node} is loading its dataset (LOADING {name} is loading the dataset in memory)"
AGAIN = "run it again once it has loaded"
REFUSED = "refused, nothing written, {due}"
AUTH = (
    "{node}: authentication failed as {user} (invalid username-password pair or user is "
    "disabled); the user {user} may be missing there: ACL users live on each node and are lost "
    "at restart unless saved (ACL SAVE with an aclfile, or user lines in the config file: "
    "docs/security.md#acl-users-live-on-each-node); check --redis-password-file "
    "(SWEEPERD_REDIS_PASSWORD_FILE) and the URL's user"
)
NOT_TLS = (
    "the server may not speak TLS (a plain port leaves a TLS handshake unanswered): use "
    "redis:// if it has no TLS port"
)
TLS = "{url} did not answer within 1s (--socket-timeout (SWEEPERD_SOCKET_TIMEOUT)); " + NOT_TLS
DENIAL = {
    "cluster|slots": "{seed}: the ACL user {user} may not run CLUSTER SLOTS ({said}): {rule}",
    "zcount": "{at}the ACL user {user} may not run ZCOUNT ({said}): {rule}",
}
SWEEP_DENIAL = (
    "{at}the ACL user {user} may not run ZCOUNT, which the sweep calls ({script}): {rule}"
)
RULE = "grant it with ACL SETUSER {user} +{command} (docs/security.md#the-acl-user)"
# (condition, command) -> (exit code, the one line): {dead} names the failed server as the line
# does (the URL when it is the URL's, else host:port), {node} is its host:port, {user} the
# cell's, {said} the server's own NOPERM, {due} the leases once finds still due. No entry: the
# command does its work.
SAID: dict[tuple[str, str], tuple[int, str]] = {
    ("killed", "once"): (3, UNREACHABLE),
    ("killed", "dry-run"): (3, UNREACHABLE),
    ("killed", "inspect"): (3, UNREACHABLE),
    ("down", "once"): (3, f"{DOWN}: {REFUSED}; {UP_AGAIN}"),
    ("down", "dry-run"): (3, f"{DOWN}: {REFUSED}; {UP_AGAIN}"),
    ("down", "inspect"): (3, f"{DOWN}; {UP_AGAIN}"),
    ("loading", "once"): (3, f"{LOADING}: {REFUSED}; {AGAIN}"),
    ("loading", "dry-run"): (3, f"{LOADING}: {AGAIN}"),
    ("loading", "inspect"): (3, f"{LOADING}: {AGAIN}"),
    ("denied", "once"): (1, "{denial}"),
    ("denied", "dry-run"): (1, "{denial}"),
    ("denied", "inspect"): (1, "{denial}"),
    ("replica", "once"): (3, UNREACHABLE),
    ("replica", "dry-run"): (3, UNREACHABLE),
    ("replica", "inspect"): (3, UNREACHABLE),
    ("nouser", "once"): (1, AUTH),  # the acl user's cells; the default user's do their work
    ("nouser", "dry-run"): (1, AUTH),
    ("nouser", "inspect"): (1, AUTH),
    ("tls", "once"): (3, TLS),
    ("tls", "dry-run"): (3, TLS),
    ("tls", "inspect"): (3, TLS),
    ("tls", "top"): (3, TLS),
    ("tls", "audit"): (3, TLS),
}
PARTIAL = ("killed", "replica", "nouser")  # one primary fails: the others' queues are swept

ONCE_ARGS = ("--max-stalled", "3", "--json", "--socket-timeout", "1")
# Every queue a row: --rows, not the terminal's height (a row per queue of every cell and daemon).
TOP_ARGS = ("--once", "--json", "--interval", "0.1", "--socket-timeout", "1", "--rows", "100")
NOT_WRITTEN = {"a": "active:active:", "b": "active:active:"}
RECOVERED = {"a": "pending:pending:1", "b": "pending:pending:1"}
EXEMPT = {"a": "pending:pending:", "b": "pending:pending:"}  # leases of an earlier epoch
FAILING = {
    "killed": "connection",
    "replica": "connection",
    "nouser": "auth",
    "down": "cluster_down",
    "loading": "loading",
    "denied": "noperm",
}
# What the ACL LOG may hold for the acl user in a condition: the command taken, the login (a
# HELLO with AUTH, or AUTH) on the node without the user.
REFUSED_BY_ACL = {"denied": {"{command}"}, "nouser": {"AUTH", "HELLO"}}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every cell: a topology's condition (set up once for its cells) x user x command."""
    pairs = [f"{t}-{c}" for t, conditions in CONDITIONS.items() for c in conditions]
    metafunc.parametrize("condition", pairs, indirect=True, scope="module")
    cells = [(u, c) for u in USERS for c in COMMANDS]
    cells += [(ACL_USER, "sharing"), (ACL_USER, "hearing")]
    metafunc.parametrize(("user", "command"), cells, ids=map("-".join, cells))


@pytest.fixture(scope="module")
def rows(server_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rows]:
    """The topologies, one at a time, each with its two daemons."""
    made = Rows(server_kind, tmp_path_factory)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def condition(request: pytest.FixtureRequest, rows: Rows) -> Iterator[Situation]:
    """The topology settled and emptied, its cells' queues seeded, the condition set up; then
    undone, and what its cells could not read read."""
    topology, name = str(request.param).split("-")
    row = rows.row(topology)
    row.scene.settle()
    row.scene.flush()
    row.scene.acl_log_reset()
    setup, undo = denied(DENIED[topology]) if name == "denied" else SETUPS[name]
    situation = Situation(row, name, COMMANDS)
    try:
        setup(situation)
        yield situation
    finally:
        undo(situation)
        row.scene.settle()
    situation.unread()


def test_cell(condition: Situation, user: str, command: str) -> None:
    """Each command in each condition of each topology, as each user: the exit code, the one
    line it prints and where every seeded id is after."""
    CHECKS[command](condition, user)


def expected(s: Situation, user: str, command: str) -> tuple[int, str] | None:
    """The cell's exit code and its line as a pattern; None when it does its work."""
    cmd = DENIED[s.scene.name]
    if (s.name, command) not in SAID or (s.name, command, cmd) == ("denied", "dry-run", "zcount"):
        return None
    if s.name == "nouser" and user != ACL_USER:
        return None
    code, line = SAID[(s.name, command)]
    scene, failed = s.scene, s.failed
    denial = SWEEP_DENIAL + f": {REFUSED}" if (command, cmd) == ("once", "zcount") else DENIAL[cmd]
    names = {
        "dead": scene.named(failed) if failed else "",
        "node": failed.node if failed else "",
        "replica": s.stopped.node if s.stopped else "",
        "name": "Valkey" if scene.kind == "valkey" else "Redis",
        "seed": scene.seed_node.node if isinstance(scene, ClusterScene) else "",
        # the node that refused, where it is not the URL's: Sentinel's primary
        "at": f"{scene.primaries()[0].node}: " if isinstance(scene, SentinelScene) else "",
        "user": user,
        "said": noperm_text(scene.kind, user, cmd),
        "rule": RULE.format(user=user, command=cmd),
        "due": "{due}",
        "url": s.urls[user][0].replace(s.scene.credentials(user), "") if s.urls else "",
        "script": "{script}",
    }
    text = line.replace("{denial}", denial).format(**names)
    pattern = re.escape(text).replace(r"\{due\}", "(2 leases still due|what is due unreadable)")
    return code, pattern.replace(r"\{script\}", ".+")


def noperm_text(kind: str, user: str, command: str) -> str:
    """The server's own words for a command it refuses the user outside a script."""
    if kind == "valkey":
        return f"User {user} has no permissions to run the '{command}' command"
    return f"this user has no permissions to run the '{command}' command"


def one_line(ran: Ran) -> str:
    """The run's only stderr line, its `sweeperd: ` head removed."""
    [line] = ran.err_lines
    assert line.startswith("sweeperd: "), line
    return line.removeprefix("sweeperd: ")


def said(ran: Ran, code: int, pattern: str) -> None:
    assert ran.code == code, ran.err
    assert re.fullmatch(pattern, one_line(ran)), one_line(ran)


def check_once(s: Situation, user: str, command: str = "once") -> None:
    """once (or its dry run): what it did and the ids it moved, or its line and nothing
    written; during a failover either, or its line naming the node and saying to run it again."""
    queue = s.queues[(user, command)]
    dry = ["--dry-run"] if command == "dry-run" else []
    ran = sweeperd("once", "-q", queue, *ONCE_ARGS, *dry, *s.flags(user))
    refusal = expected(s, user, command)
    if s.name == "failover" and ran.code != 0:
        assert ran.code == 1 and "run it again" in one_line(ran), ran.err
        refusal = (1, re.escape(one_line(ran)))
    if refusal is not None:
        said(ran, *refusal)
        assert not s.readable(queue) or s.ids(queue) == NOT_WRITTEN
        return
    assert ran.code == 0, ran.err
    assert sorted(ran.json()["recovered"]) == ["a", "b"]
    after = [NOT_WRITTEN] if dry else [RECOVERED, EXEMPT if s.name == "failover" else RECOVERED]
    assert s.ids(queue) in after  # run after a failover: the old primary's epoch, exempt


def check_inspect(s: Situation, user: str) -> None:
    """inspect: the counts (a slot that moved while it read, read where it went), or its line."""
    queue = s.queues[(user, "inspect")]
    ran = sweeperd("inspect", "-q", queue, "--json", "--socket-timeout", "1", *s.flags(user))
    refusal = expected(s, user, "inspect")
    if refusal is not None:
        said(ran, *refusal)
    else:
        assert ran.code == 0, ran.err
        assert (ran.json()["active"], ran.json()["expired"]) == (2, 2)
    assert not s.readable(queue) or s.ids(queue) == NOT_WRITTEN


def check_top(s: Situation, user: str) -> None:
    """top --once --json: every queue a row, a line per server naming the one that failed, a
    row's refused read naming the command and its rule; it writes nothing, never aborts."""
    queue = s.queues[(user, "top")]
    # A dead primary's queues cannot be found by SCAN (its replica is stopped too): the operator
    # names the queue it watches. Elsewhere top finds every queue itself.
    named = ["-q", queue] if s.name in ("killed", "down") else []
    ran = sweeperd("top", *TOP_ARGS, *named, *s.flags(user))
    refusal = expected(s, user, "top")
    if refusal is not None:
        said(ran, *refusal)
        return
    if (s.name, DENIED[s.scene.name]) == ("denied", "cluster|slots"):  # no map to read by
        refusal = expected(s, user, "inspect")
        assert refusal is not None
        said(ran, *refusal)
        return
    if s.name in ("killed", "loading") and s.scene.name == "standalone":  # its only server
        assert s.failed is not None
        assert ran.code in (0, 3) and s.failed.node in ran.out + ran.err, ran.err
        return
    assert ran.code == 0, ran.err
    rows = {row["queue"]: row for row in ran.json()["rows"]}
    errors = {server["node"]: server["error"] for server in ran.json()["servers"]}
    assert queue in rows, sorted(rows)
    row = rows[queue]
    if s.name in ("killed", "down"):
        assert s.failed is not None and errors.get(s.failed.node), errors
    elif s.name == "replica":  # read on the replica, as the acl user too (READONLY granted)
        assert isinstance(s.scene, ClusterScene) and s.failed is not None, s.scene
        assert errors.get(s.failed.node), errors
        replica = s.scene.cluster.replica_of(s.failed)
        assert (row["node"], row["state"], row["expired"]) == (replica.node, "replica", 2), row
    elif s.name == "nouser" and user == ACL_USER:  # the node that refused, by name
        assert s.failed is not None and "invalid username-password pair" in str(
            errors.get(s.failed.node)
        ), errors
    elif s.name == "denied":
        assert (row["state"], row["error"].endswith(RULE.format(user=user, command="zcount"))) == (
            "error",
            True,
        ), row
    elif s.name in ("healthy", "seeddead") or (s.name == "nouser" and user != ACL_USER):
        assert (row["state"], row["expired"], row["active"], set(errors.values())) == (
            "ok",
            2,
            2,
            {None},
        ), (row, errors)
    assert not s.readable(queue) or s.ids(queue) == NOT_WRITTEN


def check_audit(s: Situation, user: str) -> None:
    """audit: the queue's leases read and clean (the acl user's grants are enough), nothing
    written; a server that failed (its replica held too) is exit 3, a login refused exit 1, a
    TLS mismatch and a refused slot map the lines inspect says; during a failover, clean or its
    queue said moved (exit 1)."""
    queue = s.queues[(user, "audit")]
    args = ("-q", queue, "--json", "--grace", "0", "--socket-timeout", "1")
    ran = sweeperd("audit", *args, *s.flags(user))
    if s.name == "tls":
        refusal = expected(s, user, "audit")
        assert refusal is not None
        said(ran, *refusal)
    elif (s.name, DENIED[s.scene.name]) == ("denied", "cluster|slots"):
        refusal = expected(s, user, "inspect")
        assert refusal is not None
        said(ran, *refusal)
    elif s.name in ("killed", "down", "loading"):
        assert ran.code == 3, (ran.out, ran.err)
    elif s.name == "replica":  # audit reads primaries only: the dead one's queue is not read
        assert (ran.code, bool(ran.json()["failed_nodes"])) == (3, True), (ran.out, ran.err)
    elif s.name == "nouser" and user == ACL_USER:  # a login refused is exit 1, as everywhere
        assert (ran.code, bool(ran.json()["failed_nodes"])) == (1, True), (ran.out, ran.err)
    elif s.name == "failover" and ran.code != 0:
        [audited] = ran.json()["queues"]
        assert (ran.code, audited["error"]["reason"]) == (1, "moved"), ran.out
    else:
        assert (ran.code, ran.json()["findings"]) == (0, 0), (ran.out, ran.err)
    assert not s.readable(queue) or s.ids(queue) == NOT_WRITTEN


def check_acl(s: Situation, user: str) -> None:
    """acl reaches no server: the row's line in every condition. Once the acl user's commands
    and daemon ran, the ACL LOG holds nothing refused to that user but the condition's denial."""
    ran = sweeperd("acl", "--user", ACL_USER, *s.scene.topology_flags())
    assert (ran.code, ran.out) == (0, s.scene.acl_line() + "\n"), ran.err
    if user == ACL_USER:
        refused = {what for _node, who, what in s.scene.acl_log() if who == ACL_USER}
        allowed = {a.format(command=DENIED[s.scene.name]) for a in REFUSED_BY_ACL.get(s.name, ())}
        assert refused <= allowed, refused


def check_run(s: Situation, user: str) -> None:
    """run: every queue it can reach swept (a failed server never stops the others); the queues
    of the server that failed counted as failures of the condition's reason."""
    for queue in s.row.queues[user]:
        reason = FAILING.get(s.name)
        if s.name == "down" and s.owners[queue] is s.failed:
            reason = "connection"  # the dead primary itself: the Cluster says down elsewhere
        if s.name == "nouser" and user != ACL_USER:
            reason = None  # the default user is on every node
        if reason is not None and (s.name not in PARTIAL or s.owners[queue] is s.failed):
            failed_for(s, user, queue, reason)
        else:
            swept(s, queue)


def failed_for(s: Situation, user: str, queue: str, reason: str) -> None:
    wait_until(lambda: s.failures(user, queue, reason) > 0, what=f"a {reason} failure of {queue}")


def swept(s: Situation, queue: str) -> None:
    wait_until(lambda: s.ids(queue) in (RECOVERED, EXEMPT), what=f"{queue} swept")


def check_sharing(s: Situation, user: str) -> None:
    """The acl user's daemon says a refused heartbeat for its own reason: an ACL hint only for a
    refusal the ACL made, never for a Cluster down, a MOVED or a dead node."""
    if s.name == "failover":  # the members key's primary changed: once the layout is read again
        wait_until(lambda: s.events(ACL_USER, "topology_changed"), what="the new layout")
    if s.name == "down":  # once the Cluster down has been met a few times
        live = next(q for q in s.row.queues[ACL_USER] if s.owners[q] is not s.failed)
        wait_until(lambda: s.failures(ACL_USER, live, "cluster_down") >= 3, what="the down")
    hinted = [e for e in s.events(ACL_USER, "membership_refused") if "grant" in str(e["hint"])]
    assert [e["error"] for e in hinted] == [], hinted


SOURCE = re.compile(r'^sweeperd_deadline_source\{node="([^"]+)"\} (\S+)$', re.MULTILINE)


def check_hearing(s: Situation, user: str) -> None:
    """The acl user's daemon is never refused the tracking or its subscription; healthy, it
    hears every primary it sweeps (1 in sweeperd_deadline_source for each)."""
    daemon = s.row.daemons[user]
    if s.name == "healthy":

        def every_node_heard() -> bool:
            found = SOURCE.findall(daemon.metrics_text())
            return bool(found) and all(float(value) == 1 for _node, value in found)

        wait_until(every_node_heard, what="every primary heard")
    assert daemon.events("deadline_source_refused") == []


CHECKS: dict[str, Callable[[Situation, str], None]] = {
    "run": check_run,
    "once": check_once,
    "dry-run": lambda s, user: check_once(s, user, "dry-run"),
    "inspect": check_inspect,
    "top": check_top,
    "audit": check_audit,
    "acl": check_acl,
    "sharing": check_sharing,
    "hearing": check_hearing,
}
