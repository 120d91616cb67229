"""A command's settings from what typer parsed: the flags and env vars given (and only those),
the config file's path, the one queue of `once` and `inspect`; a refusal is one line, exit 2."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import typer
from click.core import ParameterSource

from sweeperd.cli.reply import Reply, usage
from sweeperd.config.options import OPTIONS, SETTING_KEYS
from sweeperd.config.settings import (
    ConfigError,
    QueueSettings,
    Settings,
    build_settings,
    queue_names,
)


def given(ctx: typer.Context, key: str) -> object:
    """Return a setting's flag or env var (a switch's env var set false too: it beats the file),
    None when neither is given; one given empty is "" (click drops an env var set empty: the
    settings refuse it, as they refuse an empty flag)."""
    if key not in ctx.params:
        return None
    if ctx.get_parameter_source(key) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
        return ctx.params[key]
    return "" if OPTIONS[key].empty_in_env else None


def build(ctx: typer.Context, *, needs_queue: bool = True, **fixed: str) -> Settings:
    """Return the command's settings: defaults, the file, env vars and flags, as `run` builds
    them."""
    overrides = {key: fixed[key] if key in fixed else given(ctx, key) for key in SETTING_KEYS}
    config = given(ctx, "config")
    # Not "no file": whatever the file said would silently not apply.
    if config == "":
        raise ConfigError(
            f"{OPTIONS['config'].where} is empty: give the TOML file's path or leave it out"
        )
    return build_settings(
        overrides,
        Path(str(config)) if config else None,
        logs_to_tty=sys.stderr.isatty(),
        needs_queue=needs_queue,
    )


def settings_of(
    ctx: typer.Context, reply: Reply, *, needs_queue: bool = True, **fixed: str
) -> Settings:
    """Return the settings, or the command ends: one line, exit 2."""
    try:
        return build(ctx, needs_queue=needs_queue, **fixed)
    except ConfigError as exc:
        reply.fail(usage(str(exc)))


def one_queue(ctx: typer.Context, reply: Reply) -> tuple[Settings, QueueSettings]:
    """Return the one queue `once` or `inspect` works on, with its own table's budget and limit
    unless a flag or env var gives one (flags beat the file, as everywhere)."""
    where = OPTIONS["queues"].where
    try:
        names = list(dict.fromkeys(queue_names(ctx.params.get("queues") or [])))
    except ConfigError as exc:
        reply.fail(usage(str(exc)))
    if len(names) != 1:
        shown = f"got {', '.join(names)}" if names else "got none"
        reply.fail(
            usage(
                f"{ctx.info_name} takes exactly one queue in {where} ({shown}): its result "
                f"and exit code are one queue's; run it once per queue"
            )
        )
    reply.queue = names[0]
    settings = settings_of(ctx, reply)
    reply.notes(settings)
    typed = {k: getattr(settings, k) for k in ("max_stalled", "limit") if ctx.params.get(k)}
    return settings, replace(settings.for_queue(names[0]), **typed)
