"""Rendezvous hashing of queue names over the live members: stable, balanced, least movement."""

from __future__ import annotations

from collections import Counter

import pytest

from sweeperd.ownership import owner, weight
from tests.support.helpers import owned_by

QUEUES = [f"queue-{n}" for n in range(10_000)]


def members(n: int) -> list[str]:
    return [f"sweeperd-7d9f-{chr(ord('a') + k)}:1" for k in range(n)]


def owners(queues: list[str], live: list[str]) -> dict[str, str | None]:
    return {q: owner(q, live) for q in queues}


class TestOwner:
    def test_weights_are_the_same_in_every_process(self) -> None:
        """A bid is BLAKE2b of the names, not Python's per-process salted hash()."""
        assert (
            weight("r1", "emails") == 0xB06D818E3ED5150F
        )  # pinned: a change would move every queue
        assert weight("r1", "emails") != weight("r2", "emails")
        assert weight("r1", "emails") != weight("r1", "email")

    def test_no_member_owns_nothing(self) -> None:
        """With no live member, a queue has no owner."""
        assert owner("emails", []) is None

    def test_order_of_members_does_not_matter(self) -> None:
        """Every replica sees the members in its own order and agrees on each owner."""
        live = members(4)
        assert owners(QUEUES[:500], live) == owners(QUEUES[:500], list(reversed(live)))

    @pytest.mark.parametrize("n", [2, 3, 4, 5])
    def test_balance_within_a_fifth_of_a_fair_share(self, n: int) -> None:
        """Over 10,000 queues each of N members owns within ±20 % of 1/N of them."""
        counts = Counter(owners(QUEUES, members(n)).values())
        fair = len(QUEUES) / n
        assert set(counts) == set(members(n))
        for member, count in counts.items():
            assert 0.8 * fair <= count <= 1.2 * fair, (member, count, fair)

    @pytest.mark.parametrize("n", [1, 2, 3, 4])
    def test_a_join_moves_only_queues_to_the_newcomer(self, n: int) -> None:
        """A member that joins takes queues from the others; no queue moves between the others."""
        before, after_members = members(n), members(n + 1)
        newcomer = after_members[-1]
        old, new = owners(QUEUES, before), owners(QUEUES, after_members)
        moved = [q for q in QUEUES if old[q] != new[q]]
        assert all(new[q] == newcomer for q in moved)
        assert 0.8 * len(QUEUES) / (n + 1) <= len(moved) <= 1.2 * len(QUEUES) / (n + 1)

    @pytest.mark.parametrize("n", [2, 3, 4, 5])
    def test_a_leave_moves_only_the_leavers_queues(self, n: int) -> None:
        """A member that leaves hands over exactly its own queues; every other stays put."""
        before = members(n)
        leaver = before[1]
        old, new = owners(QUEUES, before), owners(QUEUES, [m for m in before if m != leaver])
        moved = {q for q in QUEUES if old[q] != new[q]}
        assert moved == {q for q in QUEUES if old[q] == leaver}


class TestOwnedBy:
    def test_the_members_split_every_queue_once(self) -> None:
        """Each queue is owned by exactly one member; the lists keep the queues' order."""
        live = members(3)
        shares = [owned_by(m, QUEUES[:900], live) for m in live]
        assert sorted(q for share in shares for q in share) == sorted(QUEUES[:900])
        for share in shares:
            assert share == [q for q in QUEUES[:900] if q in set(share)]

    def test_a_replica_not_among_the_members_owns_nothing(self) -> None:
        """A replica whose heartbeat is not among the live members sweeps no queue."""
        assert owned_by("gone:1", QUEUES[:100], members(2)) == []
