"""The garbage collector set for a daemon whose objects mostly live as long as it does."""

from __future__ import annotations

import gc

# Container objects allocated (net) before a young collection; CPython's default is 700. An
# idle tick of 1,000 queues holds about 10,000 until it ends, all freed by their counts: at 700
# its young collections promoted them to the old generation, and once a quarter of that
# generation had come so, a full collection walked every queue's settings, series and wake
# (at 100,000 queues: 150 ms about once a minute, in a sweep's thread). Cyclic garbage waits for
# the next collection: at most this many objects, a few MiB.
YOUNG_THRESHOLD = 50_000


def tune_collector() -> None:
    """Collect the young generation less often (see YOUNG_THRESHOLD), the older ones as
    before."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_heap() -> None:
    """Collect, then move every object alive (the settings, series and jobs of a start or a
    reload) out of the collector's sight: later collections never walk them again. Objects
    frozen by an earlier call and dropped since are collected first."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
