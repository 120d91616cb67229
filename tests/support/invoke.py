"""The command line as the tests run it: in this process through `cli.main`, or as a process."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import structlog

from sweeperd import cli

CLI_TIMEOUT_S = 30
SCREEN = {"COLUMNS": "100", "LINES": "20"}  # a fixed terminal size for text output
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the ones `run` takes over


@dataclass(frozen=True)
class Ran:
    """One finished `sweeperd` command: its exit code, stdout and stderr."""

    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        """The single JSON object on stdout."""
        body = json.loads(self.out)
        assert isinstance(body, dict)
        return body

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without SWEEPERD_* settings, on a fixed terminal size, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPERD_")}
    return {**env, **SCREEN, **(extra or {})}


@contextlib.contextmanager
def isolated(env: Mapping[str, str]) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """`env` as the environment, two buffers as stdout and stderr, logging and structlog as a
    fresh process has them (a warning logged goes to stderr); afterwards the environment, the
    streams, the logging and structlog setup and the signal handlers are as they were."""
    saved_env = dict(os.environ)
    root = logging.getLogger()
    saved_handlers = root.handlers[:]
    saved_levels = {logger: logger.level for logger in loggers()}
    saved_structlog = structlog.get_config()
    saved_signals = {s: signal.getsignal(s) for s in SIGNALS}
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    root.handlers[:] = []
    root.setLevel(logging.WARNING)
    structlog.reset_defaults()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        root.handlers[:] = saved_handlers
        for logger, level in saved_levels.items():
            logger.setLevel(level)
        structlog.configure(**saved_structlog)
        for number, handler in saved_signals.items():
            signal.signal(number, handler)


def loggers() -> list[logging.Logger]:
    """The root logger and every named one made so far."""
    named = logging.Logger.manager.loggerDict.values()
    return [logging.getLogger(), *(lg for lg in named if isinstance(lg, logging.Logger))]


def exit_code(exc: SystemExit) -> int:
    """The process's exit code for a SystemExit, as the interpreter turns it into one."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def sweeperd(*args: str, env: Mapping[str, str] | None = None) -> Ran:
    """`sweeperd ARGS` through `cli.main` in this process, with no SWEEPERD_* settings but
    those of `env`, stdout and stderr captured."""
    with isolated(environment(env)) as (out, err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:
            code = exit_code(exc)
    return Ran(code, out.getvalue(), err.getvalue())


def sweeperd_many(*argvs: Sequence[str], env: Mapping[str, str] | None = None) -> list[Ran]:
    """`sweeperd ARGV` in this process for each argv, one after the other."""
    return [sweeperd(*argv, env=env) for argv in argvs]


PYTHON_M = (sys.executable, "-m", "sweeperd")


def default_budget_said(queue: str) -> str:
    """The line on stderr of a `once` that dead-lettered at the default budget, nobody's."""
    return (
        "sweeperd: max_stalled 1 is the default, which nobody set (--max-stalled "
        f"(SWEEPERD_MAX_STALLED), or max_stalled or [queue.{queue}] in the config file): a "
        "job's first counted stall dead-letters it"
    )


def sweeperd_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    stdout: IO[str] | None = None,
    argv0: Sequence[str] = PYTHON_M,
) -> Ran:
    """`python -m sweeperd ARGS` (or `argv0 ARGS`) as a process, for what only a process shows
    (the entry points, a stdout of its own); stdout is captured unless given."""
    done = subprocess.run(
        [*argv0, *args],
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(env),
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    return Ran(done.returncode, done.stdout or "", done.stderr)
