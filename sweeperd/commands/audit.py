"""`sweeperd audit`: every row of the queues read against their sets on the primaries that hold
them, what is wrong named by class; with --repair, the stranded rows put back in active as
expired leases and the queue swept by the counted verb, as `once` sweeps it."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from sweeperd.audit import scripts
from sweeperd.audit.classes import AuditClass
from sweeperd.audit.reader import Clocks, NodeAudit, Pace, QueueAudit
from sweeperd.commands.once import counted_sweep, interrupts_deferred
from sweeperd.commands.outcome import OnceResult
from sweeperd.config.settings import Settings
from sweeperd.constants import AUDIT_BATCH, TopologyMode
from sweeperd.keyspace import QueueKeys
from sweeperd.reasons import Reason, SweepError, reason_of
from sweeperd.server.clusternodes import migrating_to
from sweeperd.server.eviction import may_evict, read_eviction
from sweeperd.server.topology import Layout, check_standalone, slot_of, source_of
from sweeperd.verb.executors import choose


@dataclass
class Repair:
    """What --repair did to one queue: the ids put back in active, and the sweep after."""

    queue: str
    put: list[bytes]
    sweep: OnceResult | None = None
    error: SweepError | None = None

    def of_put(self, ids: list[bytes]) -> list[bytes]:
        put = set(self.put)
        return [i for i in ids if i in put]


@dataclass
class AuditResult:
    """The audit of every queue asked for, node by node; the nodes that could not be read."""

    queues: list[QueueAudit] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    failed: dict[str, SweepError] = field(default_factory=dict)  # node -> why it was not read
    may_evict: dict[str, str] = field(default_factory=dict)  # node -> its allkeys-* policy
    interrupted: bool = False
    repairs: list[Repair] = field(default_factory=list)

    @property
    def findings(self) -> int:
        return sum(a.findings for a in self.queues)

    def totals(self) -> dict[AuditClass, int]:
        counts: dict[AuditClass, int] = {}
        for audit in self.queues:
            for cls, ids in audit.found.items():
                counts[cls] = counts.get(cls, 0) + len(ids)
        return counts


def layout_of(settings: Settings) -> Layout:
    """Return the primaries now, as `once` finds them; a lone server must be no Cluster node."""
    connection = settings.connection
    source = source_of(connection)
    try:
        layout = source.read()
    finally:
        source.close()
    if connection.topology.mode is TopologyMode.STANDALONE:
        check_standalone(connection, connection.client())
    return layout


def run_audit(
    settings: Settings, queues: list[str] | None, pace: Pace, clocks: Clocks | None = None
) -> AuditResult:
    """Audit `queues` (None: every queue each primary holds), each on the primary that owns its
    slot now; a node that cannot be read is said, and the others are read. Ctrl-C stops the
    reading; what was found so far is read again after the grace and reported."""
    layout = layout_of(settings)
    connection, root = settings.connection, settings.prefix_root
    result = AuditResult()
    groups: dict[str, list[str] | None] = dict.fromkeys(layout.primaries)
    if queues is not None:
        groups = {}
        for queue in queues:
            owner = layout.owner(slot_of(QueueKeys(queue, root).active))
            if owner is None:
                audit = QueueAudit(queue, "")
                audit.error = SweepError(Reason.CONNECTION, "no primary serves its slot now")
                result.queues.append(audit)
            else:
                groups[owner] = [*(groups.get(owner) or []), queue]
    with interrupts_deferred() as interrupted:
        given = clocks or Clocks()
        clocks = Clocks(given.clock, given.sleep, interrupted, given.progress)
        for node, group in groups.items():
            result.nodes.append(node)
            client = connection.client(layout.primaries[node])
            try:
                policy = read_eviction(client)[0]
                if may_evict(policy):
                    result.may_evict[node] = policy
                audits = NodeAudit(client, root, pace, clocks).audit(group)
            except (redis.RedisError, SweepError) as exc:
                result.failed[node] = failed_node(exc)
                continue
            result.queues += [said_moving(client, audit, root) for audit in audits]
        result.interrupted = interrupted()
    result.queues.sort(key=lambda a: (a.queue, a.node))
    return result


def failed_node(exc: redis.RedisError | SweepError) -> SweepError:
    """Say why a node could not be read, as one reason and line."""
    if isinstance(exc, SweepError):
        return exc
    return SweepError(reason_of(exc), " ".join(str(exc).split()))


def said_moving(client: redis.Redis, audit: QueueAudit, root: str) -> QueueAudit:
    """Say where a queue whose slot migrates goes, and that nothing is reported of it."""
    error = audit.error
    if error is None or error.reason not in (Reason.MIGRATING, Reason.MOVED):
        return audit
    slot = slot_of(QueueKeys(audit.queue, root).active)
    if error.reason is Reason.MIGRATING:
        target = migrating_to(client, slot)
        where = f" to {target}" if target else ""
        said = f"slot {slot} migrating{where} ({error.message}): not audited; run it again"
    else:
        said = f"slot {slot} moved while audited ({error.message}): run it again"
    audit.error = SweepError(error.reason, said + " once the slot has moved")
    return audit


def repair(settings: Settings, result: AuditResult) -> None:
    """Put each queue's stranded rows back in active as expired leases (re-checked in the same
    atomic call), then sweep the queue with the counted verb as `once --drain` sweeps it, so that
    each is counted, or exempt by its lease_epoch, as any other expired lease."""
    root, connection = settings.prefix_root, settings.connection
    layout = layout_of(settings)
    for audit in result.queues:
        stranded = audit.found.get(AuditClass.STRANDED, [])
        if not stranded:
            continue
        keys = QueueKeys(audit.queue, root)
        queue = settings.for_queue(audit.queue)
        done = Repair(audit.queue, [])
        result.repairs.append(done)
        owner = layout.owner(slot_of(keys.active))
        try:
            if owner is None:
                raise redis.ConnectionError("no primary serves its slot now")
            client = connection.client(layout.primaries[owner])
            for start in range(0, len(stranded), AUDIT_BATCH):
                done.put += scripts.repair(client, keys, stranded[start : start + AUDIT_BATCH])
            if done.put:
                executor = choose(client, settings.executor)
                done.sweep = counted_sweep(
                    settings, queue, client, executor, drain=True, adaptive=True
                )
                done.error = done.sweep.error
        except (redis.RedisError, SweepError) as exc:
            done.error = failed_node(exc)
