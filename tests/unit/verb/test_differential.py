"""Model, module and Lua port of EMQ.STALLED.CHECK agree on random keyspaces (the verb:
docs/keyspace.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sweeperd.constants import LLONG_MAX, LLONG_MIN, VERB
from sweeperd.keyspace import QueueKeys
from sweeperd.model import string2ll
from sweeperd.verb.scripts import STALLED_CHECK
from tests.support.helpers import EXAMPLES, now_ms, run_id
from tests.support.keyspace_oracle import (
    Keyspace,
    Reply,
    call,
    dump_keyspace,
    expected,
    observe,
    restore_keyspace,
)
from tests.support.servers import RedisServer

Q = QueueKeys("q")
HOUR_MS = 3_600_000
RUNS = {"examples": 0}
ANCHORS = (0, 1, 10, 10**14, 10**15, -(10**14), -(10**15), 2**53, 10**18, LLONG_MAX, LLONG_MIN + 2)

# Deadlines: ("abs", score) or ("rel", offset from now), never within an hour of now.
DEADLINES = [
    ("abs", float("-inf")),
    ("abs", float("inf")),
    ("abs", 0.0),
    ("abs", -5.0),
    ("abs", 1_000_000.0),
    ("rel", -HOUR_MS - 1.0),
    ("rel", -2.0 * HOUR_MS),
    ("rel", -30.0 * 24 * HOUR_MS),
    ("rel", HOUR_MS + 1.0),
    ("rel", 2.0 * HOUR_MS),
]
ODD_NUMBERS = [
    b"",
    b"-0",
    b"+1",
    b"01",
    b"00",
    b"-01",
    b"abc",
    b" 1",
    b"1 ",
    b"1.0",
    b"1e3",
    b"0x1",
    b"--1",
    b"-",
    b"1\x00",
    b"\xff",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"99999999999999999999",
    b"123456789012345678901",
    b"-12345678901234567890",
]
BAD_ARGUMENTS = [b"0", b"-1", b"x", b"01", b"", b"+1", b"-0", b" 1", b"1.5", b"9223372036854775808"]
EPOCHS = ["missing", "current", "other", "empty"]
ID_ALPHABET = "abXY019:{- "


@dataclass
class RowPlan:
    """One job row as drawn: "none" (no row), a hash's fields, or another type's name."""

    kind: str
    fields: dict[bytes, bytes] = field(default_factory=dict)
    epoch: str = "missing"


@dataclass
class Scenario:
    """One queue's keyspace and the call's arguments, resolved against a clock and an epoch."""

    active: dict[bytes, tuple[str, float]]
    pending: dict[bytes, tuple[str, float]]
    dead: dict[bytes, tuple[str, float]]
    rows: dict[bytes, RowPlan]
    key_kinds: dict[str, str]  # active/pending/dead/metrics -> "natural" or a wrong type
    metrics: dict[bytes, bytes]
    max_stalled: bytes
    limit: bytes
    arity: int = 6

    def argv(self) -> list[bytes]:
        six = [
            Q.active.encode(),
            Q.pending.encode(),
            Q.dead.encode(),
            Q.prefix.encode(),
            self.max_stalled,
            self.limit,
        ]
        return [*six, b"1"][: self.arity]

    def keyspace(self, now: int, epoch: bytes) -> Keyspace:
        space = Keyspace()
        zsets = {"active": self.active, "pending": self.pending, "dead": self.dead}
        for name, members in zsets.items():
            key = getattr(Q, name).encode()
            if self.key_kinds[name] == "natural" and members:
                space.zsets[key] = {m: resolve(d, now) for m, d in members.items()}
            else:
                wrong_type(space, key, self.key_kinds[name])
        metrics = Q.metrics_failed.encode()
        if self.key_kinds["metrics"] == "natural" and self.metrics:
            space.hashes[metrics] = dict(self.metrics)
        else:
            wrong_type(space, metrics, self.key_kinds["metrics"])
        for job_id, row in self.rows.items():
            key = Q.job(job_id)
            if row.kind == "hash":
                fields = row.fields | lease_epoch(row.epoch, epoch)
                space.hashes[key] = fields | near_budget(fields, self.max_stalled)
            else:
                wrong_type(space, key, row.kind)
        return space


def resolve(deadline: tuple[str, float], now: int) -> float:
    kind, value = deadline
    return value if kind == "abs" else now + value


def near_budget(fields: dict[bytes, bytes], max_stalled: bytes) -> dict[bytes, bytes]:
    """A `stalled` drawn as "the budget less k" made concrete, so s lands on the budget."""
    less = BUDGET_LESS.get(fields.get(b"stalled", b""))
    if less is None:
        return {}
    budget = string2ll(max_stalled) or 1
    return {b"stalled": str(max(LLONG_MIN, budget - less)).encode()}


def lease_epoch(kind: str, epoch: bytes) -> dict[bytes, bytes]:
    values = {"current": epoch, "other": b"f" * 40, "empty": b""}
    return {b"lease_epoch": values[kind]} if kind in values else {}


def wrong_type(space: Keyspace, key: bytes, kind: str) -> None:
    """Put a value of type `kind` at `key` ("natural" and "none": nothing)."""
    if kind == "string":
        space.strings[key] = b"x"
    elif kind == "list":
        space.lists[key] = [b"x"]
    elif kind == "set":
        space.sets[key] = {b"x"}
    elif kind == "hash":
        space.hashes[key] = {b"x": b"1"}
    elif kind == "zset":
        space.zsets[key] = {b"x": 0.0}


def as_bytes(values: st.SearchStrategy[int]) -> st.SearchStrategy[bytes]:
    return values.map(lambda n: str(n).encode())


# Strategies are built once, at import: drawing is the hot loop of up to 2,000 examples.
NEAR_ANCHORS = tuple(
    sorted({n for a in ANCHORS for n in range(a - 2, a + 2) if LLONG_MIN <= n <= LLONG_MAX})
)  # at and around the 64-bit bounds, the double's 2^53 and the Lua port's plain-number bound
COUNTED_STALLED = st.one_of(
    as_bytes(st.integers(-3, 3)),
    as_bytes(st.sampled_from(NEAR_ANCHORS)),
    as_bytes(st.integers(LLONG_MIN, LLONG_MAX)),
)  # a `stalled` field HINCRBY takes: small integers and the bounds
BUDGET_LESS = {b"<budget-1>": 1, b"<budget-2>": 2}  # stalled + 1 reaches the budget, or not
COUNTED_STALLED = st.one_of(COUNTED_STALLED, st.sampled_from(tuple(BUDGET_LESS)))
STALLED = st.one_of(COUNTED_STALLED, st.sampled_from(ODD_NUMBERS))  # and what it refuses
HUGE_POSITIVE = as_bytes(st.sampled_from(tuple(n for n in NEAR_ANCHORS if n >= 1)))
REFUSED_ARGUMENT = st.sampled_from(BAD_ARGUMENTS)
ONE_IN_TEN = st.integers(0, 9)


@st.composite
def positive_arguments(draw: st.DrawFn, small: int) -> bytes:
    """`max_stalled` or `limit`: mostly 1..small, one in five huge, one in ten refused."""
    tier = draw(ONE_IN_TEN)  # Hypothesis leans to 0: the common case
    if tier == 9:
        return draw(REFUSED_ARGUMENT)
    return draw(HUGE_POSITIVE if tier >= 7 else as_bytes(st.integers(1, small)))


MAX_STALLED = positive_arguments(4)
LIMIT = positive_arguments(12)
ROW_KINDS = st.sampled_from(("hash",) * 12 + ("none",) * 3 + ("string", "list", "set"))
CLEAN_ROW_KINDS = st.sampled_from(("hash",) * 5 + ("none",))
NATURAL_KINDS = dict.fromkeys(("active", "pending", "dead", "metrics"), "natural")
ZSET_KIND = st.sampled_from(("natural",) * 3 + ("string", "hash", "list", "set"))
KEY_KINDS = st.fixed_dictionaries(
    {
        "active": st.sampled_from(("natural",) * 10 + ("string", "hash")),
        "pending": ZSET_KIND,
        "dead": ZSET_KIND,
        "metrics": st.sampled_from(("natural",) * 3 + ("string", "zset", "list")),
    }
)  # drawn for three scenarios in ten: queue keys holding another type
COUNTS = st.one_of(
    as_bytes(st.integers(0, 100)),
    as_bytes(st.integers(LLONG_MAX - 4, LLONG_MAX)),
    as_bytes(st.integers(LLONG_MIN, -1)),
    st.sampled_from(ODD_NUMBERS),
)
METRICS: st.SearchStrategy[dict[bytes, bytes]] = st.one_of(
    st.just({}), COUNTS.map(lambda c: {b"count": c}), st.just({b"other": b"1"})
)  # the failed-count hash: absent, a count (near the bound at times), or without one
ARITY = st.sampled_from((6,) * 30 + (5, 7))
ASCII_IDS = st.text(ID_ALPHABET, max_size=4).map(str.encode)
BINARY_IDS = st.binary(max_size=4).map(lambda b: b + b"\xfe")  # never UTF-8
DEADLINE = st.sampled_from(tuple(DEADLINES))
EPOCH = st.sampled_from(tuple(EPOCHS))
ONE_IN_FOUR = st.integers(0, 3)
ONE_IN_SIX = st.integers(0, 5)
ONE_IN_TWENTY = st.integers(0, 19)


@st.composite
def rows(draw: st.DrawFn, dirty: bool) -> RowPlan:
    """A job row: a hash or none; if dirty, also lane rows, other types, refused values."""
    kind = draw(ROW_KINDS if dirty else CLEAN_ROW_KINDS)
    if kind != "hash":
        return RowPlan(kind)
    fields: dict[bytes, bytes] = {b"attempts": b"1"} if draw(st.booleans()) else {}
    if draw(ONE_IN_FOUR):
        fields[b"stalled"] = draw(STALLED if dirty else COUNTED_STALLED)
    if dirty and draw(ONE_IN_TWENTY) == 0:
        fields[b"group"] = b"lane"
    if draw(ONE_IN_FOUR) == 0 or not fields:
        fields[b"state"] = b"active"  # and a hash has at least one field
    return RowPlan(kind, fields, draw(EPOCH))


DIRTY_ROWS, CLEAN_ROWS = rows(dirty=True), rows(dirty=False)
ONE_IN_THREE = st.integers(0, 2)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """One queue: a pool of ids shared by active, pending, dead and the rows."""
    pool = draw(st.lists(ASCII_IDS, min_size=1, max_size=10, unique=True))
    some = st.lists(st.sampled_from(pool), max_size=3, unique=True)
    rows = DIRTY_ROWS if draw(ONE_IN_THREE) == 0 else CLEAN_ROWS  # a refusal is likely
    return Scenario(
        active={i: draw(DEADLINE) for i in pool if draw(ONE_IN_SIX) < 5},
        pending=dict.fromkeys(draw(some), ("abs", 5.0)),
        dead=dict.fromkeys(draw(some), ("abs", 0.0)),
        rows={i: draw(rows) for i in pool},
        key_kinds=draw(KEY_KINDS) if draw(ONE_IN_TEN) >= 7 else NATURAL_KINDS,
        metrics=draw(METRICS),
        max_stalled=draw(MAX_STALLED),
        limit=draw(LIMIT),
        arity=draw(ARITY),
    )


PLAIN_ROW = st.fixed_dictionaries(
    {b"attempts": st.just(b"1")}, optional={b"stalled": as_bytes(st.integers(-3, 3))}
)


@st.composite
def binary_scenarios(draw: st.DrawFn) -> Scenario:
    """Non-UTF-8 ids on paths that refuse nothing: hash rows or none, valid values."""
    pool = draw(st.lists(BINARY_IDS, min_size=1, max_size=10, unique=True))
    row_kinds = st.sampled_from(("hash", "hash", "none"))
    return Scenario(
        active={i: draw(DEADLINE) for i in pool},
        pending={},
        dead={},
        rows={i: RowPlan(draw(row_kinds), draw(PLAIN_ROW), draw(EPOCH)) for i in pool},
        key_kinds=NATURAL_KINDS,
        metrics={},
        max_stalled=draw(as_bytes(st.integers(1, 4))),
        limit=draw(as_bytes(st.integers(1, 12))),
    )


def outcome(reply: Reply) -> str:
    """The kind of a reply, for --hypothesis-show-statistics (ids left out)."""
    if isinstance(reply, str):
        return reply.split(" job ")[0] if " job " in reply else reply
    recovered, dead = reply
    return (
        "ok: " + ", ".join(name for name, ids in (("recovered", recovered), ("dead", dead)) if ids)
        if recovered or dead
        else "ok: nothing listed"
    )


@dataclass
class Harness:
    """One server with the module and the script loaded, and what it answers with."""

    r: redis.Redis
    epoch: bytes
    sha: str

    def check(self, scenario: Scenario, record: bool = True) -> None:
        """Model, then module, then (same keyspace restored) the script: all three agree."""
        RUNS["examples"] += 1
        now = now_ms()
        scenario.keyspace(now, self.epoch).replace(self.r)
        before, before_dumps = observe(self.r)
        argv = scenario.argv()
        want_reply, want_space = expected(before, argv, Q, self.epoch, now)

        native = call(self.r, VERB, *argv)
        if record:  # Hypothesis' statistics, inside a @given test only
            event(outcome(native))
        native_space, native_dumps = observe(self.r)
        assert native == want_reply
        assert native_space == want_space
        if isinstance(native, str):
            assert native_dumps == before_dumps

        restore_keyspace(self.r, before_dumps)
        script = call(self.r, "EVALSHA", self.sha, min(3, len(argv)), *argv)
        assert script == native
        assert dump_keyspace(self.r) == native_dumps


@pytest.fixture(scope="module")
def harness(redis_server: RedisServer) -> Iterator[Harness]:
    """The session's module server, the script loaded."""
    with redis_server.client() as r:
        sha = r.script_load(STALLED_CHECK.source)
        assert isinstance(sha, str | bytes)
        yield Harness(r, run_id(r), sha if isinstance(sha, str) else sha.decode())


@pytest.fixture(autouse=True)
def counted(record_property: Callable[[str, object], None]) -> Iterator[None]:
    """The examples the test ran, recorded for the run's summary (tests/conftest.py)."""
    before = RUNS["examples"]
    yield
    record_property(EXAMPLES, RUNS["examples"] - before)


DIFFERENTIAL = settings(  # as many examples as the profile says (tests/conftest.py)
    deadline=None,
    derandomize=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        # Run once per server kind, each time on a new instance of the class: the state of a
        # run is its harness's (the server of its kind), never the instance's.
        HealthCheck.differing_executors,
    ],
)


# A property's bound grows with its examples (2,000 in CI, where two cores run six workers).
EXAMPLE_BOUND_S = 0.25
PROPERTY_TIMEOUT_S = max(120.0, DIFFERENTIAL.max_examples * EXAMPLE_BOUND_S)


class TestThreeWay:
    """The model's verdict, the module's and the Lua port's, call by call."""

    @pytest.mark.timeout(PROPERTY_TIMEOUT_S)
    @DIFFERENTIAL
    @given(scenario=scenarios())
    def test_model_module_and_lua_agree(self, harness: Harness, scenario: Scenario) -> None:
        """Reply or error text, and the whole keyspace after, are the same on all three."""
        harness.check(scenario)

    @settings(DIFFERENTIAL, max_examples=DIFFERENTIAL.max_examples // 10)
    @given(scenario=binary_scenarios())
    def test_binary_ids_agree(self, harness: Harness, scenario: Scenario) -> None:
        """Ids that are not UTF-8 are moved and replied byte for byte by all three."""
        harness.check(scenario)


def wide_scenario(members: int) -> Scenario:
    """One call over `members` leases: ghosts, exempt rows, and counted ones, narrow and wide."""
    stalled = [b"0", b"1", b"2", b"-1", str(10**15 - 1).encode(), str(2**53).encode()]
    epochs = ["current", "other", "missing"]
    rows = {}
    for i in range(members):
        fields = {b"attempts": b"1", b"stalled": stalled[i % len(stalled)]}
        kind = "none" if i % 11 == 0 else "hash"
        rows[f"j{i:05}".encode()] = RowPlan(kind, fields, epochs[i % 3])
    return Scenario(
        active=dict.fromkeys(rows, ("abs", 1_000_000.0)),
        pending={},
        dead={},
        rows=rows,
        key_kinds=NATURAL_KINDS,
        metrics={b"count": b"7"},
        max_stalled=b"3",
        limit=b"5000",
    )


class TestWideCall:
    """One call wider than the Lua port's variadic writes (1,000 members a command)."""

    def test_model_module_and_lua_agree_on_a_wide_call(self, harness: Harness) -> None:
        """2,501 leases in one call: the same reply and keyspace from all three."""
        harness.check(wide_scenario(2501), record=False)


ALIASES = {
    "pending is active": (Q.active, Q.dead),
    "dead is active": (Q.pending, Q.active),
    "both are active": (Q.active, Q.active),
    "pending is dead": (Q.pending, Q.pending),
}


class TestAliasedKeys:
    """A call naming one key twice: the module and the Lua port still end byte for byte alike."""

    @pytest.mark.parametrize("alias", sorted(ALIASES))
    def test_module_and_lua_agree_on_aliased_keys(self, harness: Harness, alias: str) -> None:
        """Exempt, recovered, dead, ghost and unexpired leases, with pending or dead = active."""
        r, (pending, dead) = harness.r, ALIASES[alias]
        r.flushall()
        r.zadd(Q.active, {"-inf": float("-inf"), "a": 1, "b": 2, "c": 3, "ghost": 4})
        r.zadd(Q.active, {"later": now_ms() + HOUR_MS, "never": float("inf")})
        r.hset(Q.job("-inf"), mapping={"attempts": "1", "lease_epoch": "f" * 40})
        r.hset(Q.job("a"), mapping={"attempts": "1", "stalled": "1", "lease_epoch": harness.epoch})
        r.hset(Q.job("b"), mapping={"attempts": "1"})
        r.hset(Q.job("c"), mapping={"attempts": "1", "stalled": "-3"})
        r.hset(Q.job("later"), mapping={"attempts": "1"})
        argv = [Q.active, pending, dead, Q.prefix, "2", "100"]
        before = dump_keyspace(r)
        native = call(r, VERB, *argv)
        native_dumps = dump_keyspace(r)
        restore_keyspace(r, before)
        assert (
            call(r, "EVALSHA", harness.sha, 3, *argv) == native == ((b"-inf", b"b", b"c"), (b"a",))
        )
        assert dump_keyspace(r) == native_dumps
