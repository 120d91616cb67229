"""The daemon's background audit (--audit-every): the queues this replica owns audited as
`sweeperd audit` audits them, on the primaries that hold them, paced, and what it found
exported per queue and class until the next one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence

import redis
import structlog
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from sweeperd.audit.reader import Clocks, NodeAudit, Pace, QueueAudit
from sweeperd.fleet.primary import Primary
from sweeperd.metrics.families import FAMILIES
from sweeperd.reasons import SweepError
from sweeperd.server.calls import close_detached, detached

log = structlog.get_logger("sweeperd.daemon")

FINDINGS = FAMILIES["sweeperd_audit_findings"]
COMPLETED = FAMILIES["sweeperd_audit_last_completed_timestamp_seconds"]
# A long audit logs how far it is every PROGRESS_LOG_S.
PROGRESS_LOG_S = 10.0


class BackgroundAudit(Collector):
    """Audits every owned queue on its primary and exports the last audit's findings. `holder`
    gives the primary a queue is on now (a list of one), or None while that is unknown."""

    def __init__(
        self,
        root: str,
        owned: Callable[[], Collection[str]],
        holder: Callable[[str], Sequence[Primary] | None],
        stopping: threading.Event,
        pace: Pace | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.owned = owned
        self.holder = holder
        self.stopping = stopping
        self.pace = pace or Pace()
        self.wall = wall
        self.found: dict[tuple[str, str], int] = {}
        self.completed_at: float | None = None

    def run(self) -> None:
        """Audit the queues owned now, node by node; a node that fails is logged and the others
        audited. The findings replace the last audit's once it is done."""
        started = time.monotonic()
        groups: dict[str, tuple[Primary, list[str]]] = {}
        for queue in sorted(self.owned()):
            nodes = self.holder(queue)
            if nodes:
                groups.setdefault(nodes[0].name, (nodes[0], []))[1].append(queue)
        audits: list[QueueAudit] = []
        for node, queues in groups.values():
            clocks = Clocks(
                sleep=self.stopping.wait,
                interrupted=self.stopping.is_set,
                progress=self.progress_logger(node.name, len(queues)),
            )
            # Untracked: a row the audit read would cost the listener a message at its next
            # write, and the server an entry in its tracking table.
            client = detached(node.client)
            try:
                audits += NodeAudit(client, self.root, self.pace, clocks).audit(queues)
            except (redis.RedisError, SweepError) as exc:
                log.warning("audit_failed", node=node.name, error=" ".join(str(exc).split()))
            finally:
                close_detached(client)
        if self.stopping.is_set():
            return
        self.found = {(a.queue, str(cls)): len(ids) for a in audits for cls, ids in a.found.items()}
        self.completed_at = self.wall()
        for a in audits:
            if a.error is not None:
                log.warning("audit_failed", queue=a.queue, node=a.node, error=a.error.message)
            elif a.found:
                counts = {str(cls): len(ids) for cls, ids in a.found.items()}
                first = {
                    str(cls): [i.decode("utf-8", "backslashreplace") for i in ids[:5]]
                    for cls, ids in a.found.items()
                }
                log.warning(
                    "audit_findings", queue=a.queue, node=a.node, counts=counts, first=first
                )
        log.info(
            "audit_completed",
            queues=len(audits),
            rows=sum(a.rows for a in audits),
            findings=sum(self.found.values()),
            seconds=round(time.monotonic() - started, 3),
        )

    def progress_logger(self, node: str, queues: int) -> Callable[[int], None]:
        """Return what a long audit of a node says: the keys read so far, every PROGRESS_LOG_S."""
        logged = [time.monotonic()]

        def told(read: int) -> None:
            now = time.monotonic()
            if now - logged[0] >= PROGRESS_LOG_S:
                logged[0] = now
                log.info("audit_progress", node=node, queues=queues, keys_read=read)

        return told

    def collect(self) -> Iterator[Metric]:
        findings = FINDINGS.labelled()
        for (queue, cls), count in sorted(self.found.items()):
            findings.add_metric([queue, cls], count)
        yield findings
        completed = COMPLETED.labelled()
        if self.completed_at is not None:
            completed.add_metric([], self.completed_at)
        yield completed
