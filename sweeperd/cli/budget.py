"""`once` at the default budget, which nobody set (max_stalled 1: a job's first counted stall
dead-letters it): on a terminal, a dry run's counts and a question before anything is written;
elsewhere nothing asks, and one line says the budget it dead-lettered at."""

from __future__ import annotations

import sys
from dataclasses import replace

import typer

from sweeperd.cli.reply import Reply
from sweeperd.commands import report
from sweeperd.commands.failures import Failure
from sweeperd.commands.once import recover
from sweeperd.config.options import OPTIONS
from sweeperd.config.settings import QueueSettings, Settings
from sweeperd.constants import DEFAULT_MAX_STALLED, EXIT_REFUSED
from sweeperd.verb.sizing import CallSizer


def on_a_terminal() -> bool:
    """Tell whether a person is there to answer: stdin and stderr (where the question goes) are
    terminals."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def budget_note(queue: str) -> str:
    """Return what the default budget means, and where a budget of one's own is set."""
    return (
        f"max_stalled {DEFAULT_MAX_STALLED} is the default, which nobody set "
        f"({OPTIONS['max_stalled'].where}, or max_stalled or [queue.{queue}] in the config "
        "file): a job's first counted stall dead-letters it"
    )


def say_budget(queue: str) -> None:
    """Say the budget's line on stderr."""
    typer.echo(f"sweeperd: {budget_note(queue)}", err=True)


def asked(
    settings: Settings, queue: QueueSettings, reply: Reply, *, drain: bool, adaptive: bool
) -> bool:
    """On a terminal, before a sweep at the default budget: what a dry run says it would do
    now (one call takes what the sweep's first call would: its sized first call when the
    limit is not given), and a question when it would dead-letter a job; a no ends the
    command, nothing written (exit 1). Whether the question was asked."""
    if adaptive and not drain:
        queue = replace(queue, limit=CallSizer(settings.call_target_ms / 1000).next(queue.limit))
    preview = recover(settings, queue, dry=True, drain=drain, adaptive=False)
    # The sweep itself says a refusal.
    if preview.error is not None or not preview.dead:
        return False
    say_budget(queue.name)
    typer.echo(f"a dry run now: {report.tally(preview)}", err=True)
    dead = len(preview.dead)
    question = f"Dead-letter {dead} job{'' if dead == 1 else 's'} of {queue.name}?"
    if not typer.confirm(question, default=False, err=True):
        reply.fail(
            Failure(
                EXIT_REFUSED,
                "declined",
                "not confirmed: nothing written; set a budget of your own "
                f"({OPTIONS['max_stalled'].flag_name} N, or max_stalled in the config file), "
                f"or give {OPTIONS['yes'].flag_name} to sweep at the default",
            )
        )
    return True
