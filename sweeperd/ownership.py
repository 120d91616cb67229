"""Which live member sweeps which queue: rendezvous hashing, a pure function of the names."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def weight(member: str, queue: str) -> int:
    """Return the member's bid for the queue: 64 bits of BLAKE2b, the same in every process."""
    digest = hashlib.blake2b(f"{member}\0{queue}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(queue: str, members: Iterable[str]) -> str | None:
    """Return the member with the highest bid for the queue (ties to the greater id); None if
    none."""
    return max(members, key=lambda member: (weight(member, queue), member), default=None)
