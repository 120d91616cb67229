"""Finding queues: every `<root>:{<queue>}:active` key on the node."""

from __future__ import annotations

import redis

from sweeperd.constants import ACTIVE
from sweeperd.keyspace import queue_of_active_key

SCAN_COUNT = 1000


def glob_escape(text: str) -> str:
    """The text matched literally by SCAN's glob: its special characters escaped."""
    return "".join(f"\\{c}" if c in "\\*?[]" else c for c in text)


def discover_queues(client: redis.Redis, root: str) -> set[str]:
    """The queues whose active set exists now (SCAN, so the server is never blocked)."""
    found: set[str] = set()
    pattern = f"{glob_escape(root)}:{{*}}:{ACTIVE}"
    for key in client.scan_iter(match=pattern, count=SCAN_COUNT, _type="zset"):
        queue = queue_of_active_key(key, root)
        if queue is not None:
            found.add(queue)
    return found
