"""The command line: `run` (the daemon), `once`, `inspect`, `top` and `demo`."""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import click
import redis
import typer
from click.core import ParameterSource
from rich.console import Console

from sweeperd import __version__, census, once, report
from sweeperd.constants import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from sweeperd.executors import choose
from sweeperd.failures import Failure, failure_of
from sweeperd.keyspace import QueueKeys
from sweeperd.logs import configure_logging, redact_text
from sweeperd.options import INSPECT, ONCE, OPTIONS, RUN, SETTING_KEYS, TOP
from sweeperd.progress import drain_bar
from sweeperd.reasons import SweepError
from sweeperd.settings import ConfigError, QueueSettings, Settings, build_settings, queue_names
from sweeperd.topology import check_standalone, primary_client

app = typer.Typer(
    name="sweeperd",
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: Rich would read "[default: …]" text as markup
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

Command = TypeVar("Command", bound=Callable[..., None])
KEYWORD = inspect.Parameter.KEYWORD_ONLY


def _option(key: str) -> Any:
    """The typer option of OPTIONS[key]: its flag, env var, value name, help and default."""
    o = OPTIONS[key]
    decls = [o.flag_name, *([o.short] if o.short else [])]
    if o.is_switch:
        return typer.Option(*decls, envvar=o.env_name, help=o.help, show_default=False)
    return typer.Option(
        *decls,
        envvar=o.env_name,
        metavar=o.metavar,
        help=f"{o.help}  [default: {o.default_text}]" if o.default_text else o.help,
        show_default=False,
    )


def _options_of(command: str) -> Callable[[Command], Command]:
    """Give a command the options OPTIONS lists for it, as parameters typer reads."""

    def give(function: Command) -> Command:
        params = [inspect.Parameter("ctx", KEYWORD, annotation=typer.Context)]
        for o in OPTIONS.values():
            if command in o.commands:
                listed = o.key in ("queues", "sentinels")
                kind: Any = bool if o.is_switch else list[str] if listed else str
                params.append(
                    inspect.Parameter(
                        o.key,
                        KEYWORD,
                        annotation=Annotated[kind if o.is_switch else kind | None, _option(o.key)],
                        default=False if o.is_switch else None,
                    )
                )
        function.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return function

    return give


@dataclass
class Reply:
    """What a command prints: its result on stdout, and on failure one line on stderr
    (and, with --json, a JSON object with an `error` field on stdout)."""

    json: bool
    queue: str | None = None

    def print(self, text: str) -> None:
        """The result on stdout; a stdout that cannot be written is one line and exit 1."""
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except OSError as exc:
            _drop_stdout()
            typer.echo(
                f"sweeperd: the command ran, but its result cannot be written to stdout: "
                f"{exc.strerror or exc}",
                err=True,
            )
            raise typer.Exit(EXIT_REFUSED) from None

    def fail(self, failure: Failure) -> NoReturn:
        """Say what failed (and, with --json, print it as an object), then exit."""
        message = self.say(failure)
        if self.json:
            error = {"reason": failure.reason, "message": message}
            self.print(json.dumps({"queue": self.queue, "error": error}))
        raise typer.Exit(failure.exit_code)

    def notes(self, settings: Settings) -> None:
        """What the config file should say now (it still works as written), one line each."""
        for note in settings.notes:
            typer.echo(f"sweeperd: {redact_text(note)}", err=True)

    def say(self, failure: Failure) -> str:
        """The failure's one line on stderr, credentials removed; the line is returned."""
        message = redact_text(failure.message)
        typer.echo(f"sweeperd: {message}", err=True)
        return message


@contextmanager
def _progress(queue: str, wanted: bool) -> Iterator[once.Progress | None]:
    """A progress bar on stderr when it is a terminal and one is wanted."""
    if not (wanted and sys.stderr.isatty()):
        yield None
        return
    with drain_bar(queue, Console(stderr=True)) as update:
        yield update


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _usage(message: str) -> Failure:
    return Failure(EXIT_USAGE, "usage", message)


def _given(ctx: typer.Context, key: str) -> object:
    """A setting's flag or env var (a switch's env var set false too: it beats the file), None
    when neither is given; one given empty is "" (click drops an env var set empty: the
    settings refuse it, as they refuse an empty flag)."""
    if key not in ctx.params:  # not an option of this command
        return None
    if ctx.get_parameter_source(key) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
        return ctx.params[key]
    return "" if OPTIONS[key].empty_in_env else None


def _build(ctx: typer.Context, **fixed: str) -> Settings:
    """The command's settings: defaults, the file, env vars and flags, as `run` builds them."""
    overrides = {key: fixed[key] if key in fixed else _given(ctx, key) for key in SETTING_KEYS}
    config = _given(ctx, "config")
    if config == "":  # not "no file": whatever the file said would silently not apply
        raise ConfigError(
            f"{OPTIONS['config'].where} is empty: give the TOML file's path or leave it out"
        )
    return build_settings(
        overrides, Path(str(config)) if config else None, logs_to_tty=sys.stderr.isatty()
    )


def _settings(ctx: typer.Context, reply: Reply, **fixed: str) -> Settings:
    """The settings, or the command ends: one line, exit 2."""
    try:
        return _build(ctx, **fixed)
    except ConfigError as exc:
        reply.fail(_usage(str(exc)))


def _one_queue(ctx: typer.Context, reply: Reply) -> tuple[Settings, QueueSettings]:
    """The one queue `once` or `inspect` works on, with its own table's budget and limit unless
    a flag or env var gives one (flags beat the file, as everywhere)."""
    where = OPTIONS["queues"].where
    try:
        names = list(dict.fromkeys(queue_names(ctx.params.get("queues") or [])))
    except ConfigError as exc:
        reply.fail(_usage(str(exc)))
    if len(names) != 1:
        given = f"got {', '.join(names)}" if names else "got none"
        reply.fail(
            _usage(
                f"{ctx.info_name} takes exactly one queue in {where} ({given}): its result "
                f"and exit code are one queue's; run it once per queue"
            )
        )
    reply.queue = names[0]
    settings = _settings(ctx, reply)
    reply.notes(settings)
    typed = {k: getattr(settings, k) for k in ("max_stalled", "limit") if ctx.params.get(k)}
    return settings, replace(settings.for_queue(names[0]), **typed)


@app.callback(invoke_without_command=True)
def top(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """The stalled-job sweeper for EchoMQ: sends EMQ.STALLED.CHECK on a schedule, per queue.

    sweeperd never runs the uncounted reaper (@reap): every recovery it makes is counted.
    """
    if version:
        typer.echo(f"sweeperd {__version__}")
        raise typer.Exit(EXIT_OK)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(EXIT_USAGE)


@app.command("once")
@_options_of(ONCE)
def once_command(ctx: typer.Context, **_given: object) -> None:
    """The manual counted recovery of one queue: EMQ.STALLED.CHECK, once (or until drained).

    Settings come as `run` takes them (defaults, --config, env vars, flags), and the queue's
    own [queue.<name>] table in the config file sets its max_stalled and limit, unless
    --max-stalled or --limit (or their env vars) is given.

    With --drain, calls are sized to stay under --call-target-ms, at most the limit; with --limit
    given, every call takes that many (the batches --dry-run predicts). On a terminal a
    progress bar shows what is done and left; Ctrl-C stops after the call in flight, prints
    what was done and exits 130.

    Exit 0 when done (also when nothing was due), 1 when the server refused (a verb call,
    which wrote nothing, a command the user lacks, or authentication), 2 on a bad option,
    3 when the server cannot be reached or is not a Redis server. In --json, `exempt` lists
    the recovered rows whose lease_epoch differs from the server's run_id, read in the same
    atomic call as the sweep, and `ghosts` counts the ids removed that had no row.
    """
    reply = Reply(ctx.params["json"])
    settings, queue = _one_queue(ctx, reply)
    connection = settings.connection
    keys = QueueKeys(queue.name, settings.prefix_root)
    drain, dry = ctx.params["drain"], ctx.params["dry_run"]
    try:
        client = primary_client(connection, keys.active)
        chosen = choose(client, settings.executor)
        if dry:
            result = once.dry_run(
                client, chosen, keys, max_stalled=queue.max_stalled, limit=queue.limit,
                drain=drain,
            )  # fmt: skip
        else:
            with _progress(queue.name, drain and not reply.json) as progress:
                result = once.sweep(
                    client, chosen, keys, max_stalled=queue.max_stalled, limit=queue.limit,
                    drain=drain, adaptive=ctx.params["limit"] is None,
                    call_target_ms=settings.call_target_ms, progress=progress,
                )  # fmt: skip
    except (redis.RedisError, SweepError) as exc:
        reply.fail(failure_of(exc, connection))
    if result.error is not None:
        result.error = once.refused(result, client, connection, keys)
    reply.print(report.once_json(result) if reply.json else report.once_text(result))
    if result.interrupted:
        typer.echo(f"sweeperd: interrupted after {result.calls} calls", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.error is not None:
        failure = failure_of(result.error, connection)
        reply.say(failure)
        raise typer.Exit(failure.exit_code)


@app.command("inspect")
@_options_of(INSPECT)
def inspect_command(ctx: typer.Context, **_given: object) -> None:
    """A queue at a glance: leases, expired backlog, pending, dead, the server's run_id.

    It writes nothing. Exit codes as `once`.
    """
    reply = Reply(ctx.params["json"])
    settings, queue = _one_queue(ctx, reply)
    connection = settings.connection
    keys = QueueKeys(queue.name, settings.prefix_root)
    try:
        seen = census.take_census(primary_client(connection, keys.active), keys)
    except (redis.RedisError, SweepError) as exc:
        reply.fail(failure_of(exc, connection))
    reply.print(report.census_json(seen) if reply.json else report.census_text(seen, keys))


@app.command("top")
@_options_of(TOP)
def top_command(ctx: typer.Context, **_given: object) -> None:
    """A live view of every queue for the person on call: expired leases, pending, dead, and the
    rates they drain at, most expired first; each server's run_id, uptime, role and verb.

    It writes nothing: each refresh is one pipelined round trip of reads per primary (INFO,
    COMMAND INFO, the replicas' members, a ZCOUNT per queue to rank them, five counts per row
    shown). rec/s is how fast the pending set grew over the reads of the last
    --rate-window seconds (recoveries, and producers, less what workers took); dead/s how fast
    the metrics:failed count grew (jobs that died for any reason). A server whose run_id
    changed since the view started is marked RESTARTED; rows of a server that cannot be read
    now are kept as last read, marked.

    Off a terminal, or with --once, it prints the view once (plain text, or --json) from two
    reads --interval apart and exits. Exit codes as `inspect`; Ctrl-C leaves the live view, 0.
    """
    from sweeperd import topview  # rich's live view: loaded for `top` only

    reply = Reply(ctx.params["json"])
    settings = _settings(ctx, reply, discover="1")  # no queue given: discovery finds them
    reply.notes(settings)
    try:
        view = topview.options_of(ctx.params, sys.stdout.isatty())
    except ValueError as exc:
        reply.fail(_usage(str(exc)))
    try:
        if settings.connection.topology.mode == "standalone":
            check_standalone(settings.connection, settings.connection.client())
        code = topview.run(settings, view, reply.print)
    except (redis.RedisError, SweepError) as exc:
        reply.fail(failure_of(exc, settings.connection))
    raise typer.Exit(code)


@app.command("run")
@_options_of(RUN)
def run_command(ctx: typer.Context, **_given: object) -> None:
    """The daemon: sweep every queue on its interval, watch the server's run_id, serve /metrics.

    Settings rise in precedence: defaults, the TOML file, env vars, flags; every one is
    checked before it starts. SIGHUP re-reads the file; SIGTERM and SIGINT stop after the
    sweep in flight.
    """
    reply = Reply(json=False)
    settings = _settings(ctx, reply)

    def load() -> Settings:  # SIGHUP: a ConfigError is the daemon's to log, not an exit
        return _build(ctx)

    configure_logging(settings.log_format, settings.log_level)
    from sweeperd import daemon  # the scheduler and the HTTP server: loaded for `run` only
    from sweeperd.http import CannotListen

    try:
        code = daemon.run(settings, load)
    except CannotListen as exc:  # the metrics port is taken, or cannot be bound
        reply.fail(_usage(f"{OPTIONS['metrics_addr'].where}: {exc.strerror}"))
    except SweepError as exc:  # the servers are not the topology the options name
        reply.fail(failure_of(exc, settings.connection))
    raise typer.Exit(code)


@app.command("demo")
def demo_command(
    seconds: Annotated[float, typer.Option(min=2.0, help="How long the daemon runs.")] = 12.0,
    module: Annotated[
        Path | None,
        typer.Option(
            envvar="SWEEPERD_MODULE",
            help="The reference module.",
            show_default="./module/emq_stalled.so",
        ),
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port of /metrics on 127.0.0.1; 0 picks one.")
    ] = 0,
    server: Annotated[
        str | None,
        typer.Option(
            help="The server binary, a name on PATH or a path (redis-server, valkey-server).",
            show_default="the first of redis-server, valkey-server on PATH",
        ),
    ] = None,
) -> None:
    """Start a throwaway server (redis-server or valkey-server), seed stalled leases, sweep them
    live, clean up."""
    isatty = sys.stdout.isatty()
    configure_logging("console" if sys.stderr.isatty() else "json", "info")
    if not math.isfinite(seconds):
        Reply(json=False).fail(_usage(f"--seconds must be a number of seconds, not {seconds}"))
    from sweeperd import demo  # the daemon and its dependencies: loaded for `demo` only
    from sweeperd.http import CannotListen

    try:
        demo.run_demo(seconds, module, metrics_port, typer.echo, isatty, server)
    except FileNotFoundError as exc:
        Reply(json=False).fail(_usage(str(exc)))
    except CannotListen as exc:
        Reply(json=False).fail(_usage(f"--metrics-port: {exc.strerror}; pick a free one, or 0"))
    except demo.ServerDidNotStart as exc:
        Reply(json=False).fail(Failure(EXIT_UNREACHABLE, "connection", str(exc)))
    except KeyboardInterrupt:
        typer.echo("interrupted: the server is stopped and its files removed", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None


@app.command("version")
def version_command() -> None:
    """Print the version."""
    typer.echo(f"sweeperd {__version__}")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; a usage error is one line on stderr and exit 2."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="sweeperd", standalone_mode=False)
    except click.UsageError as exc:
        where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        message = " ".join(exc.format_message().split())
        print(f"sweeperd: {message}{where}", file=sys.stderr)
        return EXIT_USAGE
    except click.Abort:
        return EXIT_INTERRUPTED
    return code if isinstance(code, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
