"""The command line: `run` (the daemon), `once`, `inspect` and `demo`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import click
import redis
import typer

from sweeperd import __version__, census, once, report
from sweeperd.connection import connect, read_password, redact
from sweeperd.constants import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_STALLED,
    DEFAULT_PREFIX_ROOT,
    DEFAULT_REDIS_URL,
    DEFAULT_SOCKET_TIMEOUT_S,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    LLONG_MAX,
)
from sweeperd.executors import ExecutorChoice, choose
from sweeperd.keyspace import QueueKeys, is_queue_name
from sweeperd.logs import configure_logging
from sweeperd.reasons import Reason, SweepError
from sweeperd.settings import ConfigError, Settings, build_settings

app = typer.Typer(
    name="sweeperd",
    help="The stalled-job sweeper for EchoMQ: sends EMQ.STALLED.CHECK on a schedule, per queue. "
    "sweeperd never runs the uncounted reaper (@reap): every recovery it makes is counted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)


def _queue_name(value: str) -> str:
    if not is_queue_name(value):
        raise typer.BadParameter(f"{value!r} is not a queue name: no braces, no whitespace")
    return value


def _url(value: str) -> str:
    try:
        redis.connection.parse_url(value)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise typer.BadParameter(f"{redact(value)}: {exc}") from None
    return value


Queue = Annotated[
    str, typer.Option("--queue", "-q", help="The queue to sweep.", callback=_queue_name)
]
RedisUrl = Annotated[
    str,
    typer.Option(envvar="SWEEPERD_REDIS_URL", callback=_url, help="redis://, rediss:// or unix://"),
]
PasswordFile = Annotated[
    Path | None,
    typer.Option(
        envvar="SWEEPERD_REDIS_PASSWORD_FILE",
        help="Read the password from this file (else $CREDENTIALS_DIRECTORY/redis-password).",
    ),
]
PrefixRoot = Annotated[
    str, typer.Option(envvar="SWEEPERD_PREFIX_ROOT", help="Keys live under <root>:{<queue>}:.")
]
MaxStalled = Annotated[
    int,
    typer.Option(min=1, max=LLONG_MAX, help="Stalls a job may have; at this count it is dead."),
]
Limit = Annotated[int, typer.Option(min=1, max=LLONG_MAX, help="Expired leases per call.")]
Executor = Annotated[
    ExecutorChoice,
    typer.Option(
        envvar="SWEEPERD_EXECUTOR",
        help="native: the module's verb; script: the Lua port; auto: native where loaded.",
    ),
]
SocketTimeout = Annotated[
    float, typer.Option(min=0.001, envvar="SWEEPERD_SOCKET_TIMEOUT", help="Seconds per call.")
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _client(url: str, timeout: float, password_file: Path | None) -> redis.Redis:
    try:
        password = read_password(str(password_file) if password_file else None)
    except OSError as exc:
        raise _usage(
            f"--redis-password-file: cannot read {password_file}: {exc.strerror}"
        ) from None
    return connect(url, socket_timeout=timeout, password=password)


def _usage(message: str) -> typer.Exit:
    """Say what is wrong on one line; the caller raises the exit this returns."""
    typer.echo(f"sweeperd: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def _unreachable(url: str, exc: BaseException) -> typer.Exit:
    typer.echo(f"sweeperd: cannot reach {redact(url)}: {exc}", err=True)
    return typer.Exit(EXIT_UNREACHABLE)


@app.command("once")
def once_command(
    queue: Queue,
    redis_url: RedisUrl = DEFAULT_REDIS_URL,
    max_stalled: MaxStalled = DEFAULT_MAX_STALLED,
    limit: Limit = DEFAULT_LIMIT,
    prefix_root: PrefixRoot = DEFAULT_PREFIX_ROOT,
    executor: Executor = ExecutorChoice.AUTO,
    drain: Annotated[
        bool, typer.Option(help="Repeat calls until no lease due at the start remains.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(help="Read only: what a sweep would do now, from the model. Writes nothing."),
    ] = False,
    json_out: Json = False,
    socket_timeout: SocketTimeout = DEFAULT_SOCKET_TIMEOUT_S,
    redis_password_file: PasswordFile = None,
) -> None:
    """The manual counted recovery of one queue: EMQ.STALLED.CHECK, once (or until drained).

    Exit 0 when done (also when nothing was due), 1 when the server refused (nothing was
    written by the refused call), 2 on a bad option, 3 when the server cannot be reached.
    In --json, `exempt` lists the recovered rows whose lease_epoch differs from the server's
    run_id, read right after the sweep: best effort, a worker may have claimed one meanwhile.
    """
    client = _client(redis_url, socket_timeout, redis_password_file)
    keys = QueueKeys(queue, prefix_root)
    act = once.dry_run if dry_run else once.sweep
    try:
        chosen = choose(client, executor)
        result = act(client, chosen, keys, max_stalled=max_stalled, limit=limit, drain=drain)
    except UNREACHABLE as exc:
        raise _unreachable(redis_url, exc) from None
    except SweepError as exc:
        typer.echo(f"sweeperd: {exc.message}", err=True)
        raise typer.Exit(EXIT_REFUSED) from None
    typer.echo(report.once_json(result) if json_out else report.once_text(result))
    if result.error is not None:
        if result.error.reason in (Reason.CONNECTION, Reason.TIMEOUT):
            raise _unreachable(redis_url, result.error) from None
        typer.echo(f"sweeperd: {result.error.message}", err=True)
        raise typer.Exit(EXIT_REFUSED)


@app.command("inspect")
def inspect_command(
    queue: Queue,
    redis_url: RedisUrl = DEFAULT_REDIS_URL,
    prefix_root: PrefixRoot = DEFAULT_PREFIX_ROOT,
    json_out: Json = False,
    socket_timeout: SocketTimeout = DEFAULT_SOCKET_TIMEOUT_S,
    redis_password_file: PasswordFile = None,
) -> None:
    """A queue at a glance: leases, expired backlog, pending, dead, the server's run_id."""
    client = _client(redis_url, socket_timeout, redis_password_file)
    try:
        seen = census.take_census(client, QueueKeys(queue, prefix_root))
    except UNREACHABLE as exc:
        raise _unreachable(redis_url, exc) from None
    except redis.ResponseError as exc:
        typer.echo(f"sweeperd: {exc}", err=True)
        raise typer.Exit(EXIT_REFUSED) from None
    typer.echo(report.census_json(seen) if json_out else report.census_text(seen))


def _setting(key: str, help_text: str) -> Any:
    """A `run` option: flag --key-name, env SWEEPERD_KEY_NAME; None when not given."""
    return typer.Option(
        None,
        f"--{key.replace('_', '-')}",
        envvar=f"SWEEPERD_{key.upper()}",
        help=help_text,
        show_default=False,
    )


@app.command("run")
def run_command(
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-q",
            envvar="SWEEPERD_QUEUES",
            show_default=False,
            help="A queue to sweep (repeat, or comma-separate). Env: space/comma separated.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(envvar="SWEEPERD_CONFIG", help="TOML file; flags and env vars beat it."),
    ] = None,
    redis_url: str | None = _setting("redis_url", f"Server URL [{DEFAULT_REDIS_URL}]."),
    redis_password_file: str | None = _setting(
        "redis_password_file", "Password file [$CREDENTIALS_DIRECTORY/redis-password]."
    ),
    prefix_root: str | None = _setting("prefix_root", f"Key root [{DEFAULT_PREFIX_ROOT}]."),
    interval: str | None = _setting("interval", "Seconds between sweeps of a queue [5]."),
    max_stalled: str | None = _setting("max_stalled", "Stall budget [1]."),
    limit: str | None = _setting("limit", "Expired leases per call [100]."),
    executor: str | None = _setting("executor", "auto | native | script [auto]."),
    metrics_addr: str | None = _setting("metrics_addr", "HOST:PORT of /metrics [0.0.0.0:9787]."),
    log_format: str | None = _setting("log_format", "json | console [console on a terminal]."),
    log_level: str | None = _setting("log_level", "debug | info | warning | error [info]."),
    drain_budget: str | None = _setting("drain_budget", "Calls per queue per tick [10]."),
    socket_timeout: str | None = _setting("socket_timeout", "Seconds per server call [5]."),
    jitter: str | None = _setting("jitter", "Fraction of the interval to jitter by [0.1]."),
    discover: str | None = _setting("discover", "Seconds between scans for queues; 0 off [0]."),
) -> None:
    """The daemon: sweep every queue on its interval, watch the server's run_id, serve /metrics.

    Settings rise in precedence: defaults, the TOML file, env vars, flags. SIGHUP re-reads
    the file; SIGTERM and SIGINT stop after the sweep in flight.
    """
    overrides: dict[str, object] = {
        "queues": queue or None,
        "redis_url": redis_url,
        "redis_password_file": redis_password_file,
        "prefix_root": prefix_root,
        "interval": interval,
        "max_stalled": max_stalled,
        "limit": limit,
        "executor": executor,
        "metrics_addr": metrics_addr,
        "log_format": log_format,
        "log_level": log_level,
        "drain_budget": drain_budget,
        "socket_timeout": socket_timeout,
        "jitter": jitter,
        "discover": discover,
    }
    isatty = sys.stdout.isatty()

    def load() -> Settings:
        return build_settings(overrides, config, stdout_isatty=isatty)

    try:
        settings = load()
    except ConfigError as exc:
        raise _usage(str(exc)) from None
    configure_logging(settings.log_format, settings.log_level)
    from sweeperd import daemon  # the scheduler and the HTTP server: loaded for `run` only

    try:
        code = daemon.run(settings, load)
    except OSError as exc:  # the metrics port is taken, or cannot be bound
        typer.echo(f"sweeperd: --metrics-addr: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(code)


@app.command("demo")
def demo_command(
    seconds: Annotated[float, typer.Option(min=2.0, help="How long the daemon runs.")] = 12.0,
    module: Annotated[
        Path | None,
        typer.Option(
            envvar="SWEEPERD_MODULE", help="The reference module [./module/emq_stalled.so]."
        ),
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port of /metrics on 127.0.0.1; 0 picks one.")
    ] = 0,
) -> None:
    """Start a throwaway redis-server, seed stalled leases, sweep them live, clean up."""
    isatty = sys.stdout.isatty()
    configure_logging("console" if isatty else "json", "info")
    from sweeperd import demo  # the daemon and its dependencies: loaded for `demo` only

    try:
        demo.run_demo(seconds, module, metrics_port, typer.echo, isatty)
    except FileNotFoundError as exc:
        raise _usage(str(exc)) from None
    except KeyboardInterrupt:
        typer.echo("interrupted: the server is stopped and its files removed", err=True)
        raise typer.Exit(130) from None


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
        return 130
    return code if isinstance(code, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
