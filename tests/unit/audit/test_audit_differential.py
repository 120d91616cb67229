"""The audit's classes equal an independent model's (tests/support/audit_plant.py, written from
docs/commands.md's table) on random keyspaces, on a real server."""

from __future__ import annotations

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweeperd.audit.reader import Clocks, NodeAudit, Pace
from sweeperd.keyspace import QueueKeys
from tests.support.audit_plant import DAY_MS, Job, expected_class
from tests.support.helpers import now_ms

QUEUES = (QueueKeys("a"), QueueKeys("b"))
STATES = ("active", "pending", "dead", "completed", "")
# Lease deadlines as offsets from now (ms), and two absolute ones: +inf, and microseconds.
OFFSETS = (-DAY_MS, -1_000, 60_000, DAY_MS - 60_000, DAY_MS + 60_000, 10**15)

rows = st.one_of(
    st.none(),
    st.just("a string"),
    st.sampled_from(STATES).map(lambda s: {"state": s} if s else {"attempts": "1"}),
)
memberships = st.fixed_dictionaries(
    {},
    optional={
        "active": st.one_of(st.sampled_from(OFFSETS), st.just(float("inf"))),
        "pending": st.just(0.0),
        "dead": st.just(0.0),
    },
)
jobs = st.builds(lambda row, sets: (row, sets), rows, memberships)
keyspaces = st.lists(st.tuples(st.sampled_from(range(len(QUEUES))), jobs), min_size=1, max_size=12)


def written(
    r: redis.Redis, drawn: list[tuple[int, tuple[object, dict[str, float]]]]
) -> dict[str, dict[str, str]]:
    """The drawn jobs written to their queues; what the model says, queue -> id -> class."""
    now = now_ms()
    expected: dict[str, dict[str, str]] = {q.queue: {} for q in QUEUES}
    for n, (queue, (row, sets)) in enumerate(drawn):
        keys = QUEUES[queue]
        deadlines = {
            name: score if name != "active" or score == float("inf") else now + score
            for name, score in sets.items()
        }
        job = Job(f"j{n}", row, deadlines)  # type: ignore[arg-type]
        job.write(r, keys)
        verdict = expected_class(job, now)
        if verdict is not None:
            expected[keys.queue][job.job_id] = verdict
    return expected


class TestAgainstTheModel:
    """The audit and the model agree."""

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,  # one class, run once per server kind
        ],
    )
    @given(drawn=keyspaces)
    def test_classes_equal_the_models(
        self, r: redis.Redis, drawn: list[tuple[int, tuple[object, dict[str, float]]]]
    ) -> None:
        """Every id's class (or none) is the model's, in every queue, named or discovered."""
        r.flushall()
        expected = written(r, drawn)
        for named in ([q.queue for q in QUEUES], None):
            audits = NodeAudit(r, "emq", Pace(grace_s=0), Clocks()).audit(named)
            found: dict[str, dict[str, str]] = {q.queue: {} for q in QUEUES} | {
                a.queue: {i.decode(): str(c) for c, ids in a.found.items() for i in ids}
                for a in audits
            }
            assert found == expected
