"""The queues a server holds, found by SCAN so that the server is never blocked: every queue of
a key root with one of the named sorted sets (its active set, by default)."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from sweeperd.constants import ACTIVE
from sweeperd.keyspace import queue_of_key

# Keys a SCAN call looks at.
SCAN_COUNT = 1000


def glob_escape(text: str) -> str:
    """Return the text matched literally by SCAN's glob: its special characters escaped."""
    return "".join(f"\\{c}" if c in "\\*?[]" else c for c in text)


def find_queues(client: redis.Redis, root: str, sets: Sequence[str] = (ACTIVE,)) -> set[str]:
    """Return the queues of `root` with one of `sets` on the node: one SCAN of its sorted sets."""
    kind = sets[0] if len(sets) == 1 else "*"
    pattern = f"{glob_escape(root)}:{{*}}:{kind}"
    keys = client.scan_iter(match=pattern, count=SCAN_COUNT, _type="zset")
    return {queue for key in keys if (queue := queue_of_key(key, root, sets)) is not None}
