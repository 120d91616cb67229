"""The daemon's long-lived objects taken out of the cyclic collector's way once every queue has
been swept: a full collection, then gc.freeze(). The full collections after it scan only what
came since: at 11,000 queues they scanned some 120,000 objects, 45-90 ms with the GIL held every
few seconds, and a wake due then waited as long. The young generation collected less often (see
tune_collector), and the memory freed given back to the system every RELEASE_S (see release)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable

import structlog

log = structlog.get_logger("sweeperd.settle")

# By SETTLE_INTERVALS intervals every queue was swept twice: its calls, series and routes made.
SETTLE_INTERVALS = 2.0
# The start-up's garbage is given back within RELEASE_S of being freed.
RELEASE_S = 10.0
# Container objects allocated (net) before a young collection; CPython's default is 700. An
# idle tick of 1,000 queues holds about 10,000 until it ends, all freed by their counts: at 700
# it ran a dozen young collections, which promoted them to the old generation, and a quarter of
# it come so brought on a full collection (at 100,000 queues, before the heap is settled: 150 ms
# in a sweep's thread about once a minute). Cyclic garbage waits for the next collection: at
# most this many objects, a few MiB.
YOUNG_THRESHOLD = 50_000


def _malloc_trim() -> Callable[[int], int] | None:
    """Return glibc's malloc_trim; None where the C library has none (musl, macOS)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


MALLOC_TRIM = _malloc_trim()


def tune_collector() -> None:
    """Collect the young generation less often (see YOUNG_THRESHOLD), the older ones as
    before."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def settle() -> None:
    """Collect what is garbage now, and keep every object left out of the collections to come."""
    collected = gc.collect()
    gc.freeze()
    log.debug("settled", collected=collected, frozen=gc.get_freeze_count())


def release() -> None:
    """Give back to the system the memory the C allocator keeps free (glibc's malloc_trim; where
    there is none, nothing). glibc keeps what a burst freed (a start, a takeover, a reload: sets
    and tables of 100,000 queues, replies of every queue at once): at 100,000 queues the RSS
    stayed at its start-up peak, 150 MiB, where 105 MiB are in use. A trim with nothing to give
    back costs a walk of the free chunks."""
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)
