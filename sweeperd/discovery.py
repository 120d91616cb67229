"""Finding queues: every `<root>:{<queue>}:active` key on the node."""

from __future__ import annotations

import redis

from sweeperd.constants import ACTIVE
from sweeperd.keyspace import queue_of_active_key

SCAN_COUNT = 1000


def discover_queues(client: redis.Redis, root: str) -> set[str]:
    """The queues whose active set exists now (SCAN, so the server is never blocked)."""
    found: set[str] = set()
    for key in client.scan_iter(match=f"{root}:{{*}}:{ACTIVE}", count=SCAN_COUNT, _type="zset"):
        queue = queue_of_active_key(key, root)
        if queue is not None:
            found.add(queue)
    return found
