"""The queues this replica sweeps: the configured ones and those a scan found within the last
hour, its share of them among the replicas; scheduled, their series kept while they are known."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet

import structlog

from sweeperd.config.settings import QueueSettings, Settings
from sweeperd.daemon.schedule import Schedule
from sweeperd.daemon.sharing import Sharing
from sweeperd.logs import NAMES_CAP, cap_ids
from sweeperd.metrics.numbers import SweepNumbers

log = structlog.get_logger("sweeperd.daemon")

# A discovered queue no scan finds any more is kept this long.
DISCOVERED_TTL_S = 3600.0


class QueueSet:
    """What is known, owned and exported; applied to the schedule, the series and the fleet
    (`own`) together. `_discovered` keeps when a scan last found each queue (monotonic);
    `_swept` the queues this replica sweeps now; `_exported` those with series (swept once,
    still known); `_unmatched` the unlisted tables no scan found, warned of once each. The lock
    is taken by discovery, the membership and SIGHUP, which all apply the queues."""

    def __init__(
        self,
        settings: Settings,
        sharing: Sharing,
        numbers: SweepNumbers,
        schedule: Schedule,
        *,
        own: Callable[[list[QueueSettings]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._sharing = sharing
        self._numbers = numbers
        self._schedule = schedule
        self._own = own
        self._clock = clock
        self._discovered: dict[str, float] = {}
        self._swept: frozenset[str] = frozenset()
        self._exported: AbstractSet[str] = frozenset()
        self._unmatched: set[str] = set()
        self._lock = threading.Lock()

    def reconfigure(self, settings: Settings) -> None:
        """Take SIGHUP's settings: the configured queues and their own values from the next
        apply."""
        with self._lock:
            self._settings = settings

    def known(self) -> list[QueueSettings]:
        """Return every queue this replica knows: the configured, then those a scan found within
        the last DISCOVERED_TTL_S. Call with the lock held."""
        settings = self._settings
        named = {q.name for q in settings.queues}
        found = sorted(self._discovered.keys() - named)
        return [*settings.queues, *(settings.for_queue(n) for n in found)]

    def known_count(self) -> int:
        """Count the queues this replica knows, for the series that says it (counted, not listed:
        a scrape need not build and sort them)."""
        with self._lock:
            named = {q.name for q in self._settings.queues}
            return len(named) + len(self._discovered.keys() - named)

    def owned(self) -> list[QueueSettings]:
        """Return the known queues this replica owns now: the ones it sweeps."""
        with self._lock:
            return self._sharing.owned(self.known())

    def sweeping(self) -> frozenset[str]:
        """Return the queues this replica sweeps now (no lock: apply() replaces the set, never
        changes it, and a scrape reads it)."""
        return self._swept

    def apply(self) -> tuple[list[QueueSettings], frozenset[str]]:
        """Schedule the queues owned now. Every configured queue has its counters, at 0 from
        the start, owned or not (a replica that does not know yet what it owns, its server
        down, exports them too: summed across replicas they stay whole). A queue owned no
        more keeps its counters and its last success, and loses the gauges only its owner can
        keep true; a queue no longer known loses every series. Return the queues gained and
        the names lost."""
        with self._lock:
            known = self.known()
            wanted = self._sharing.owned(known)
            names = frozenset(q.name for q in wanted)
            configured = {q.name for q in self._settings.queues}
            gained, lost = names - self._swept, self._swept - names
            for name in gained:
                self._numbers.add_queue(name)
            for name in lost:
                self._numbers.disown_queue(name)
            for name in configured - names:
                self._numbers.add_queue(name, owned=False)
            exported = (self._exported | names | configured) & {q.name for q in known}
            # One set of 100,000 names is 4 MiB: the swept, the exported and the scheduled are
            # one while they are the same (one replica, every queue configured).
            self._exported = names if exported == names else exported
            self._numbers.keep_queues(self._exported)
            self._swept = names
            self._own(wanted)
            self._schedule.sync(wanted, names)
        return [q for q in wanted if q.name in gained], lost

    def add_found(self, found: set[str]) -> None:
        """Keep the queues a scan of every primary found now. A queue is swept (and keeps its
        series) until no scan has found it for DISCOVERED_TTL_S: a drained queue's active set
        is gone until its next lease, and its counters must not go with it."""
        now = self._clock()
        with self._lock:
            added = found - self._discovered.keys()
            self._discovered.update(dict.fromkeys(found, now))
            dropped = {q for q, seen in self._discovered.items() if now - seen > DISCOVERED_TTL_S}
            for queue in dropped:
                del self._discovered[queue]
        if added or dropped:
            # The first few names only: a first scan may find thousands.
            log.info(
                "queues_discovered",
                added=cap_ids(sorted(added), NAMES_CAP),
                dropped=cap_ids(sorted(dropped), NAMES_CAP),
            )
            self.apply()
        self.unmatched_tables(found)

    def unmatched_tables(self, found: set[str]) -> None:
        """Warn once of each table no list names that the scan did not find: such a table is
        kept for a queue a scan finds (see unlisted_tables), and may be a typo of a listed
        queue's name."""
        for name in self._settings.unlisted_tables:
            if name not in found and name not in self._unmatched:
                self._unmatched.add(name)
                log.warning(
                    "queue_table_unmatched",
                    queue=name,
                    hint=f"[queue.{name}] is for a queue the list does not name and no scan "
                    "found: a typo of a listed queue's name? It is swept as configured",
                )
