"""The names of one queue's keys (docs/keyspace.md)."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import NamedTuple

from sweeperd.constants import (
    ACTIVE,
    DEAD,
    DEFAULT_PREFIX_ROOT,
    JOB,
    MEMBERS_KEY,
    METRICS_FAILED,
    PENDING,
    SWEEP_GUARD,
)


def job_id_text(job_id: bytes | str) -> str:
    """Return a job id as text: ids are bytes on the wire, shown with undecodable bytes escaped."""
    return job_id.decode("utf-8", "backslashreplace") if isinstance(job_id, bytes) else job_id


# \s: what str.isspace() calls whitespace.
NOT_IN_A_TAG = re.compile(r"[{}\s]")


def is_queue_name(name: object) -> bool:
    """Tell whether a queue name fits in a hash tag: not empty, no braces, no whitespace."""
    return isinstance(name, str) and bool(name) and NOT_IN_A_TAG.search(name) is None


def prefix_of(queue: str, root: str) -> str:
    """Return the prefix of queue `queue`'s keys under `root`: `<root>:{<queue>}:`."""
    return f"{root}:{{{queue}}}:"


def active_key(queue: str, root: str) -> bytes:
    """Return queue `queue`'s active set's key as the wire carries it, without building its
    QueueKeys (the listener looks one up per queue swept, every tick)."""
    return (prefix_of(queue, root) + ACTIVE).encode()


class QueueKeys(NamedTuple):
    """Key names of queue `queue` under `root`: the prefix is `<root>:{<queue>}:`. A named tuple:
    light to make and to keep (each queue's settings keep one; a frozen dataclass took 2 µs to
    make, a sixth of an idle queue's tick when one was made per call)."""

    queue: str
    root: str = DEFAULT_PREFIX_ROOT

    @property
    def prefix(self) -> str:
        return prefix_of(self.queue, self.root)

    @property
    def active(self) -> str:
        return self.prefix + ACTIVE

    @property
    def pending(self) -> str:
        return self.prefix + PENDING

    @property
    def dead(self) -> str:
        return self.prefix + DEAD

    @property
    def metrics_failed(self) -> str:
        return self.prefix + METRICS_FAILED

    def absent(self) -> str:
        """Return what it means when none of the queue's keys but its rows exists: said, never an
        error (a queue emptied to its last key is legitimate)."""
        return (
            f"none of the keys of queue {self.queue} exists ({self.active}, :pending, :dead, "
            ":metrics:failed): an empty queue, or a wrong name or --prefix-root"
        )

    @property
    def guard(self) -> str:
        """Return a key of the queue's slot that nothing writes: see constants.SWEEP_GUARD."""
        return self.prefix + SWEEP_GUARD

    def job(self, job_id: str | bytes) -> bytes:
        """Return the row key of a job; ids are bytes on the wire, kept byte for byte."""
        raw = job_id if isinstance(job_id, bytes) else job_id.encode()
        return (self.prefix + JOB).encode() + raw


def queue_of_key(key: bytes, root: str, sets: Collection[str] = (ACTIVE,)) -> str | None:
    """Return the queue name in `<root>:{<queue>}:<set>` for one of `sets`, or None when the key is
    not one (sweeperd's own keys, under `<root>:sweeperd:`, never are)."""
    head = f"{root}:{{".encode()
    name, brace, kind = key.removeprefix(head).rpartition(b"}:")
    try:
        queue, kind_text = name.decode(), kind.decode()
    except UnicodeDecodeError:
        return None
    if key.startswith(head) and brace and kind_text in sets and is_queue_name(queue):
        return queue
    return None


def members_key(root: str) -> str:
    """`<root>:sweeperd:{members}`, the replicas' membership: under sweeperd's own prefix, never
    a queue's key."""
    return f"{root}:{MEMBERS_KEY}"
