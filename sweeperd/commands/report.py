"""How `once` and `inspect` print: one JSON object, or a summary readable at a glance."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import asdict

from sweeperd.commands.inspect import Census
from sweeperd.commands.outcome import OnceResult
from sweeperd.keyspace import QueueKeys, job_id_text
from sweeperd.server.eviction import eviction_note, may_evict

# Lines of a `once` summary besides the ids.
FRAME_LINES = 8


def once_json(result: OnceResult) -> str:
    body: dict[str, object] = {
        "queue": result.queue,
        "executor": result.executor,
        "run_id": result.run_id,
        "recovered": [job_id_text(i) for i in result.recovered],
        "dead": [job_id_text(i) for i in result.dead],
        "exempt": [job_id_text(i) for i in result.exempt],
        "ghosts": [job_id_text(i) for i in result.ghost_ids],
        "calls": result.calls,
        "dry_run": result.dry_run,
        "max_stalled": result.max_stalled,
        "max_stalled_default": result.max_stalled_default,
        "limit": result.limit,
        "left": result.left if result.left_read else None,
    }
    if result.error is not None:
        body["error"] = {"reason": str(result.error.reason), "message": result.error.message}
    return json.dumps(body)


def abbreviated(ids: Sequence[bytes], room: int) -> str:
    """Return the ids on one line each, cut to `room` with a count of the rest."""
    shown = [f"  {job_id_text(i)}" for i in ids[:room]]
    if len(ids) > room:
        shown.append(f"  … and {len(ids) - room} more (--json lists every id)")
    return "\n".join(shown)


def tally(result: OnceResult) -> str:
    """Return what it did (or, dry, would do), counted on one line."""
    verb = "would recover" if result.dry_run else "recovered"
    return (
        f"{verb} {len(result.recovered)} (of which {len(result.exempt)} exempt: lease from an "
        f"earlier server run)  dead {len(result.dead)}  ghosts {result.ghosts}  "
        f"calls {result.calls}"
    )


def once_text(result: OnceResult) -> str:
    screen = shutil.get_terminal_size((100, 40)).lines
    room = max(3, (screen - FRAME_LINES) // 3)
    default = " (the default)" if result.max_stalled_default else ""
    lines = [
        f"queue {result.queue}  executor {result.executor}  run_id {result.run_id[:12]}…  "
        f"max_stalled {result.max_stalled}{default}  limit {result.limit}"
        + ("  (dry run: nothing written)" if result.dry_run else ""),
        tally(result),
    ]
    for title, ids in (
        ("recovered", result.recovered),
        ("exempt", result.exempt),
        ("dead", result.dead),
        ("ghosts (ids in active with no row: removed)", result.ghost_ids),
    ):
        if ids:
            lines += [f"{title}:", abbreviated(ids, room)]
    if result.error is not None:
        lines.append(f"{result.error.reason}: {result.refusal}, {result.still_due}")
    elif not (result.recovered or result.dead or result.ghosts):
        lines.append("nothing was due" + (f": {result.absent}" if result.absent else ""))
    return "\n".join(lines)


def census_json(census: Census) -> str:
    return json.dumps(asdict(census), allow_nan=False)


def census_text(c: Census, keys: QueueKeys) -> str:
    overdue = "none" if c.oldest_overdue_s is None else f"{c.oldest_overdue_s:.1f}s"
    due = "next due: none" if c.next_due_s is None else f"next due in {c.next_due_s:.1f}s"
    failed = "not an integer" if c.failed is None else str(c.failed)
    note = [] if c.exists else [f"note       {keys.absent()}"]
    if may_evict(c.maxmemory_policy):
        note.append(f"warning    {eviction_note('the server', c.maxmemory_policy)}")
    return "\n".join(
        [
            f"queue      {c.queue}",
            f"active     {c.active}  (expired now: {c.expired}, oldest overdue: {overdue}, {due})",
            f"pending    {c.pending}",
            f"dead       {c.dead}  (metrics:failed count: {failed})",
            f"server     run_id {c.run_id}",
            "verb       EMQ.STALLED.CHECK "
            + ("available (native)" if c.verb_available else "not loaded (script executor)"),
            *note,
        ]
    )
