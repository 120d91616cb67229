"""What a command prints: its result on stdout, and on failure one line on stderr (and, with
--json, a JSON object with an `error` field on stdout), credentials removed."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import NoReturn

import typer

from sweeperd.commands.failures import Failure
from sweeperd.config.settings import Settings
from sweeperd.constants import EXIT_REFUSED, EXIT_USAGE
from sweeperd.logs import redact_text


def usage(message: str) -> Failure:
    """Return the failure of a bad flag, env var or config: exit 2."""
    return Failure(EXIT_USAGE, "usage", message)


@dataclass
class Reply:
    """One command's output: its result, its notes and its failure."""

    json: bool
    queue: str | None = None

    def print(self, text: str) -> None:
        """Print the result on stdout; a stdout that cannot be written is one line and exit 1."""
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except OSError as exc:
            drop_stdout()
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
        """Say what the config file should say now (it still works as written), one line each."""
        for note in settings.notes:
            typer.echo(f"sweeperd: {redact_text(note)}", err=True)

    def say(self, failure: Failure) -> str:
        """Return the failure's one line on stderr, credentials removed; the line is returned."""
        message = redact_text(failure.message)
        typer.echo(f"sweeperd: {message}", err=True)
        return message


def drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
