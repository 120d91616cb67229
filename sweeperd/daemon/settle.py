"""The daemon's long-lived objects taken out of the cyclic collector's way once every queue has
been swept: a full collection, then gc.freeze(). The full collections after it scan only what
came since: at 11,000 queues they scanned some 120,000 objects, 45-90 ms with the GIL held every
few seconds, and a wake due then waited as long."""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger("sweeperd.settle")

# By SETTLE_INTERVALS intervals every queue was swept twice: its calls, series and routes made.
SETTLE_INTERVALS = 2.0


def settle() -> None:
    """Collect what is garbage now, and keep every object left out of the collections to come."""
    collected = gc.collect()
    gc.freeze()
    log.debug("settled", collected=collected, frozen=gc.get_freeze_count())
