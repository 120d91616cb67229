"""`sweeperd audit --repair` against the model, on random stranded rows, with each executor (the
module's verb and the Lua port): each job put back ends as model.judge_lease says the verb
judges it (exempt for an earlier lease_epoch, recovered, or dead at the budget), and a stalled
value the verb refuses leaves every one of them in active, expired, its row untouched."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweeperd import model
from sweeperd.keyspace import QueueKeys
from tests.support.helpers import hash_of, run_id
from tests.support.invoke import sweeperd
from tests.support.targets import Target

Q = QueueKeys("q")
EARLIER = b"an-earlier-run"
CURRENT = b"<current>"  # drawn for the server's run_id, written as it
STALLED = (None, b"0", b"1", b"2", b"abc", str(2**63 - 1).encode())

stranded_rows = st.lists(
    st.tuples(st.sampled_from((None, CURRENT, EARLIER)), st.sampled_from(STALLED)),
    min_size=1,
    max_size=6,
)


def row_of(epoch: bytes | None, stalled: bytes | None, current: bytes) -> dict[bytes, bytes]:
    """A stranded row: state active, one attempt, the lease_epoch and stalled drawn."""
    row = {b"state": b"active", b"attempts": b"1"}
    if epoch is not None:
        row[b"lease_epoch"] = current if epoch == CURRENT else epoch
    if stalled is not None:
        row[b"stalled"] = stalled
    return row


def after_sweep(row: dict[bytes, bytes], judged: model.Judgement) -> tuple[dict[bytes, bytes], str]:
    """The row as the verb's write pass leaves it (docs/sweeping.md#the-verb-exactly), and the
    set holding it."""
    if judged.verdict is model.Verdict.EXEMPT:
        return row | {b"state": b"pending"}, "pending"
    stalled = str(judged.stalled).encode()
    if judged.verdict is model.Verdict.DEAD:
        return row | {b"state": b"dead", b"stalled": stalled, b"last_error": b"stalled"}, "dead"
    return row | {b"state": b"pending", b"stalled": stalled}, "pending"


class TestRepairAgainstTheModel:
    """Each repaired job counted, exempt or refused exactly as the verb's rules say."""

    @settings(
        max_examples=50,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,  # one class, run once per server kind and executor
        ],
    )
    @given(drawn=stranded_rows, max_stalled=st.integers(1, 3))
    def test_each_job_as_the_model_judges_it(
        self, on: Target, drawn: list[tuple[bytes | None, bytes | None]], max_stalled: int
    ) -> None:
        """The verdicts --json lists and every row and set after are the model's; a refusal
        (a stalled value HINCRBY refuses) leaves all of them in active and their rows as they
        were, and says it."""
        r = on.client
        r.flushall()
        current = run_id(r)
        rows = {f"j{n}".encode(): row_of(e, s, current) for n, (e, s) in enumerate(drawn)}
        for job_id, row in rows.items():
            r.hset(Q.job(job_id), mapping=row)  # type: ignore[arg-type]
        judged = {
            job_id: model.judge_lease(model.Lease(job_id, row), current, max_stalled)
            for job_id, row in rows.items()
        }
        flags = ("--max-stalled", str(max_stalled), "--executor", on.executor.name, "-q", Q.queue)
        ran = sweeperd(
            "audit",
            "--redis-url",
            on.server.url,
            "--grace",
            "0",
            "--repair",
            "--yes",
            "--json",
            *flags,
        )
        assert ran.code == 1, ran.out + ran.err
        [repaired] = ran.json()["repaired"]
        assert sorted(repaired["put"]) == sorted(i.decode() for i in rows)
        refused = any(isinstance(j, model.Refusal) for j in judged.values())
        if refused:
            assert repaired["error"] is not None, repaired
            for job_id, row in rows.items():
                assert hash_of(r, Q.job(job_id)) == row
                assert r.zscore(Q.active, job_id) is not None
            assert r.zcard(Q.pending) == r.zcard(Q.dead) == 0
            return
        assert repaired["error"] is None, repaired
        verdicts: dict[str, list[str]] = {"exempt": [], "dead": [], "recovered": []}
        for job_id, judgement in judged.items():
            assert isinstance(judgement, model.Judgement)
            row, home = after_sweep(rows[job_id], judgement)
            assert hash_of(r, Q.job(job_id)) == row, job_id
            assert r.zscore(Q.prefix + home, job_id) == 0, job_id
            name = str(judgement.verdict)
            verdicts[name].append(job_id.decode())
            if name == "exempt":
                verdicts["recovered"].append(job_id.decode())  # the verb lists it recovered
        assert {k: sorted(repaired[k]) for k in verdicts} == {
            k: sorted(v) for k, v in verdicts.items()
        }
        assert r.zcard(Q.active) == 0
        assert int(r.hget(Q.metrics_failed, "count") or 0) == len(verdicts["dead"])


def test_the_model_is_drawn_whole() -> None:
    """The strategy reaches every verdict and the refusal (so the property is not vacuous)."""
    current = b"now"
    seen = {
        type(j).__name__ if isinstance(j, model.Refusal) else str(j.verdict)
        for e in (None, CURRENT, EARLIER)
        for s in STALLED
        for j in [model.judge_lease(model.Lease(b"x", row_of(e, s, current)), current, 2)]
    }
    assert seen == {"exempt", "recovered", "dead", "Refusal"}
