"""`sweeperd audit` from the options given to its exit code: the queues and pace checked, the
audit read with a progress bar, printed, and with --repair the stranded jobs repaired after
the question `once` asks on a terminal (--yes elsewhere)."""

from __future__ import annotations

import redis
import typer

from sweeperd.audit.reader import Clocks, Pace
from sweeperd.cli.budget import on_a_terminal
from sweeperd.cli.inputs import settings_of
from sweeperd.cli.reply import Reply, usage
from sweeperd.commands import auditreport
from sweeperd.commands.audit import AuditResult, repair, run_audit
from sweeperd.commands.failures import UNREACHABLE_REASONS, failure_of
from sweeperd.commands.progress import audit_progress
from sweeperd.config import coercers
from sweeperd.config.coercers import ConfigError, Given
from sweeperd.config.options import OPTIONS
from sweeperd.constants import EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE
from sweeperd.reasons import SweepError

# audit's own values, and how each is read (config/coercers.py)
PACE_OPTIONS = {
    "grace": coercers.grace_seconds,
    "max_lease": coercers.max_lease_seconds,
    "rate": coercers.keys_per_second,
}


def pace_of(params: dict[str, object]) -> Pace:
    """--grace, --max-lease and --rate, checked (a ConfigError names the bad one)."""
    values = {}
    for key, parse in PACE_OPTIONS.items():
        option = OPTIONS[key]
        raw = params.get(key)
        if raw is None and not option.empty_in_env:
            values[key] = float(str(option.default))
            continue
        values[key] = parse(Given("" if raw is None else raw, option.where, True))
    return Pace(grace_s=values["grace"], max_lease_s=values["max_lease"], rate=values["rate"])


def exit_code(result: AuditResult) -> int:
    """3 when a server could not be read or serve (loading, a Cluster down), 130 after Ctrl-C,
    1 when anything was found or refused, else 0."""
    errors = [*result.failed.values(), *(a.error for a in result.queues if a.error)]
    if any(e.reason in UNREACHABLE_REASONS for e in errors):
        return EXIT_UNREACHABLE
    if result.interrupted:
        return EXIT_INTERRUPTED
    refused = result.failed or any(a.error is not None for a in result.queues)
    refused = refused or any(done.error is not None for done in result.repairs)
    return EXIT_REFUSED if result.findings or refused else EXIT_OK


def asked_to_repair(count: int, yes: bool) -> bool:
    """Tell whether the stranded jobs are to be repaired: --yes, or a yes on the terminal."""
    if yes:
        return True
    question = (
        f"Put {count:,} stranded job{'' if count == 1 else 's'} back in active as expired "
        "leases and sweep them with the counted verb?"
    )
    return typer.confirm(question, default=False, err=True)


def run(ctx: typer.Context) -> int:
    """Return the whole of `audit`; its exit code."""
    params = ctx.params
    reply = Reply(params["json"])
    try:
        pace = pace_of(params)
    except ConfigError as exc:
        reply.fail(usage(str(exc)))
    if params["repair"] and not (params["yes"] or on_a_terminal()):
        reply.fail(
            usage(
                f"{OPTIONS['repair'].flag_name} off a terminal needs {OPTIONS['yes'].flag_name}: "
                "nobody is there to answer its question"
            )
        )
    settings = settings_of(ctx, reply, needs_queue=False)
    reply.notes(settings)
    queues = [q.name for q in settings.queues] or None
    try:
        with audit_progress(not reply.json) as progress:
            clocks = Clocks(progress=progress) if progress else None
            result = run_audit(settings, queues, pace, clocks)
    except (redis.RedisError, SweepError) as exc:
        reply.fail(failure_of(exc, settings.connection))
    count = auditreport.stranded_count(result)
    if params["repair"] and count and not result.interrupted:
        if asked_to_repair(count, params["yes"]):
            repair(settings, result)
        else:
            typer.echo("sweeperd: not confirmed: nothing repaired", err=True)
    reply.print(
        auditreport.audit_json(result, pace) if reply.json else auditreport.audit_text(result, pace)
    )
    return exit_code(result)
