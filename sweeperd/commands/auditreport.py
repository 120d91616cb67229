"""How `audit` prints: a table of each queue's findings by class with the first ids, what each
class found means and what to do, and what --repair did; or one JSON object."""

from __future__ import annotations

import json

from sweeperd.audit.classes import CLASSES, MEANING, AuditClass
from sweeperd.audit.reader import Pace, QueueAudit
from sweeperd.commands.audit import AuditResult, Repair
from sweeperd.constants import AUDIT_SHOWN_IDS
from sweeperd.keyspace import job_id_text
from sweeperd.reasons import SweepError
from sweeperd.server.eviction import eviction_note

AUDIT_SCHEMA = 1
JSON_IDS = 1000  # the ids of each class --json lists at the most (its count is exact)


def _error(error: SweepError | None) -> dict[str, str] | None:
    return None if error is None else {"reason": str(error.reason), "message": error.message}


def _ids(ids: list[bytes], room: int) -> list[str]:
    return [job_id_text(i) for i in ids[:room]]


def repair_json(done: Repair) -> dict[str, object]:
    swept = done.sweep
    return {
        "queue": done.queue,
        "put": _ids(done.put, len(done.put)),
        "recovered": _ids(done.of_put(swept.recovered), JSON_IDS) if swept else [],
        "exempt": _ids(done.of_put(swept.exempt), JSON_IDS) if swept else [],
        "dead": _ids(done.of_put(swept.dead), JSON_IDS) if swept else [],
        "error": _error(done.error),
    }


def audit_json(result: AuditResult, pace: Pace) -> str:
    queues = [
        {
            "queue": a.queue,
            "node": a.node,
            "rows": a.rows,
            "findings": {
                str(c): {"count": len(ids), "ids": _ids(ids, JSON_IDS)}
                for c, ids in a.found.items()
            },
            "error": _error(a.error),
        }
        for a in result.queues
    ]
    totals = result.totals()
    body = {
        "schema": AUDIT_SCHEMA,
        "grace_s": pace.grace_s,
        "max_lease_s": pace.max_lease_s,
        "nodes": result.nodes,
        "failed_nodes": {node: _error(e) for node, e in result.failed.items()},
        "may_evict": result.may_evict,
        "queues": queues,
        "totals": {str(c): totals.get(c, 0) for c in CLASSES},
        "findings": result.findings,
        "interrupted": result.interrupted,
        "repaired": [repair_json(done) for done in result.repairs],
    }
    return json.dumps(body)


def _row(audit: QueueAudit) -> list[list[str]]:
    """Return one line per class found in the queue; one saying it is clean, or why it was not
    read."""
    if audit.error is not None:
        return [[audit.queue, "error", "-", f"{audit.error.reason}: {audit.error.message}"]]
    if not audit.found:
        return [
            [audit.queue, "clean", "0", f"{audit.rows:,} row{'' if audit.rows == 1 else 's'} read"]
        ]
    lines = []
    for cls, ids in audit.found.items():
        shown = ", ".join(_ids(ids, AUDIT_SHOWN_IDS))
        more = f" … and {len(ids) - AUDIT_SHOWN_IDS:,} more" if len(ids) > AUDIT_SHOWN_IDS else ""
        lines.append([audit.queue, str(cls), f"{len(ids):,}", shown + more])
    return lines


def table(rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell; the last one as is."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]) for r in rows
    ]


def repair_text(done: Repair) -> str:
    """Return the closing line of one queue's repair: what was put back, and what the sweep did
    with it; a refused sweep leaves them in active, expired, for the next sweep to judge."""
    put = f"{len(done.put):,} stranded put back in active as expired leases"
    swept = done.sweep
    if swept is None:
        said = f"; {done.error.reason}: {done.error.message}" if done.error else ""
        return f"repaired {done.queue}: {put}{said}"
    recovered, exempt = done.of_put(swept.recovered), done.of_put(swept.exempt)
    dead = done.of_put(swept.dead)
    left = len(done.put) - len(recovered) - len(dead)
    text = (
        f"repaired {done.queue}: {put}; the counted sweep recovered {len(recovered):,} of them "
        f"({len(exempt):,} exempt: lease from an earlier server run), dead-lettered "
        f"{len(dead):,} (max_stalled {swept.max_stalled})"
    )
    if done.error is not None:
        return (
            f"{text}; then it was refused ({done.error.reason}: {done.error.message}): "
            f"{left:,} wait in active, expired, for the next sweep"
        )
    return text + (f", {left:,} taken by another sweep (a daemon's) first" if left else "")


def audit_text(result: AuditResult, pace: Pace) -> str:
    rows = sum(a.rows for a in result.queues)
    nodes = len(result.nodes)
    lines = [
        f"audited {len(result.queues)} queue{'' if len(result.queues) == 1 else 's'} on "
        f"{nodes} server{'' if nodes == 1 else 's'}: {rows:,} rows read, grace {pace.grace_s:g}s, "
        f"max lease {pace.max_lease_s:g}s"
        + (" (interrupted: what was read so far)" if result.interrupted else "")
    ]
    body = [line for audit in result.queues for line in _row(audit)]
    if body:
        lines += table([["queue", "class", "count", "first ids"], *body])
    lines += [
        f"server {node} not read: {e.reason}: {e.message}" for node, e in result.failed.items()
    ]
    lines += [f"warning: {eviction_note(n, p)}" for n, p in result.may_evict.items()]
    totals = result.totals()
    if totals:
        lines.append("what it means, and what to do:")
        for cls in CLASSES:
            if cls in totals:
                meaning, todo = MEANING[cls]
                lines.append(f"  {cls}: {meaning}; {todo}")
    counted = ", ".join(f"{c} {totals[c]:,}" for c in CLASSES if c in totals)
    unread = len(result.failed) + sum(a.error is not None for a in result.queues)
    if counted:
        lines.append(f"findings: {result.findings:,} ({counted})")
    elif unread:
        lines.append(f"findings: 0 in the queues read; {unread:,} not read (above)")
    else:
        lines.append("findings: 0: every job accounted for")
    lines += [repair_text(done) for done in result.repairs]
    return "\n".join(lines)


def stranded_count(result: AuditResult) -> int:
    return sum(len(a.found.get(AuditClass.STRANDED, [])) for a in result.queues)
